//! `fntrace record -- CMD ARGS…`: runs a program built with mcount or
//! fentry instrumentation (`gcc -pg`, `gcc -pg -mfentry`, `g++ -pg`,
//! `rustc -Zinstrument-mcount`), not linked with fntrace, under the
//! preloaded `libfntrace.so`, which streams its trace into a uftrace data
//! directory. What the library does is set by environment variables
//! (`FNTRACE_OUTPUT`, `FNTRACE_FILTER`, `FNTRACE_PATCH_FUNCTIONS`, `FNTRACE_DEPTH`, `FNTRACE_FLIGHT`);
//! they pass to the processes the program forks and execs, which add their
//! sessions to the same directory.

use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Args;
use fntrace_tools::argspec::{self, SpecKind};
use fntrace_tools::export::OutputDir;

use super::instrumented::{instrumentation_of, refusal, Instrumentation};

mod summary;
use summary::summarize;

/// What `fntrace record --help` adds.
pub const RECORD_HELP: &str = "\
The program runs with libfntrace.so preloaded (LD_PRELOAD): found next to the
fntrace executable (cargo build --release puts both in target/release), or
given with --lib or $FNTRACE_LIB. Processes it forks and programs it execs
are recorded into the same directory, each as a session, as uftrace does.
An existing DIR holding a trace is renamed DIR.old first (an older DIR.old is
replaced only if it is a recording fntrace wrote: fntrace deletes nothing it did
not write). DIR must be the user's own, writable by no other user.

-F and -N select functions, not subtrees: a function left out keeps its NOP,
so filtering is how to make tracing cheaper. A -F, -N or -P glob that matches
no function of the program is refused before it runs, with the closest names
(--force runs it anyway: a library it opens later may have the function).

SIGTERM, SIGINT and SIGHUP sent to fntrace record are passed on to the
program, which finishes its part of the recording before it ends; killed with
SIGKILL, fntrace record takes the program with it.

Examples:
  fntrace record ./server --port 8080          write fntrace.data
  fntrace record -o run1 -F 'handle_*' ./prog   only the handle_* functions
  fntrace record -N 'log_*' -D 3 -- ./prog -v   3 levels deep, without log_*
  fntrace record -P 'w_*' ./prog                patch w_* (built without -pg)
  fntrace record --no-libcall ./prog            without the calls into libraries (malloc...)
  fntrace record --nest-libcall ./prog          also libraries' calls into other libraries
  fntrace record --flight 64M ./prog            keep the last 64 MiB of events,
                                                written at exit
  fntrace record -p 4242 --duration 5s          a running process, for 5 s (attached
                                                first if started without fntrace)
  fntrace record -p 4242 --duration 5s --async  the same, with its Rust futures
Then: fntrace report fntrace.data, or uftrace replay -d fntrace.data.";

/// `fntrace record`'s arguments.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The trace directory to write.
    #[arg(
        short = 'o',
        long = "output",
        visible_short_alias = 'd',
        value_name = "DIR",
        default_value = "fntrace.data"
    )]
    pub output: PathBuf,
    /// Record only functions matching GLOB (repeatable). The others keep
    /// their NOP and cost nothing. Unlike uftrace's -F, what they call is
    /// not included unless it matches too (uftrace's `-F GLOB -D 1`).
    #[arg(short = 'F', long = "filter", value_name = "GLOB")]
    pub filter: Vec<String>,
    /// Do not record functions matching GLOB (repeatable); what they call
    /// is still recorded (uftrace's -N leaves the callees out too).
    #[arg(short = 'N', long = "notrace", value_name = "GLOB")]
    pub notrace: Vec<String>,
    /// Patch the entries of functions matching GLOB that were built
    /// without instrumentation, at start-up, so that they are traced too
    /// (repeatable; uftrace's -P, but a glob as for -F: `w_*`). Functions
    /// that cannot be patched safely are listed with the reason. With -p,
    /// in the running process before its recording starts (as `fntrace
    /// ctl PID patch`; a detach at the end writes the entries back).
    #[arg(short = 'P', long = "patch", value_name = "GLOB")]
    pub patch: Vec<String>,
    /// Record arguments of the functions GLOB selects, in uftrace's
    /// syntax: `GLOB@arg1/x,arg2/s,fparg1` (repeatable). Formats d (the
    /// default), i, u, x, s (a string), c (a char), f, with a size in bits
    /// (`/i32`, `/x16`); arg1-arg6 and fparg1-fparg8 (the registers).
    #[arg(short = 'A', long = "argument", value_name = "SPEC")]
    pub argument: Vec<String>,
    /// Record the return value of the functions GLOB selects:
    /// `GLOB@retval/d` (repeatable; formats as for -A).
    #[arg(short = 'R', long = "retval", value_name = "SPEC")]
    pub retval: Vec<String>,
    /// Record the arguments and return values of every function the
    /// program's DWARF describes (build with -g), typed as uftrace's -a
    /// types them: integers, `char *` strings, `char`, floats; pointers in
    /// hexadecimal and enums as numbers (uftrace names them). -A and -R
    /// given too add to these or replace them, value by value.
    #[arg(short = 'a', long = "auto-args")]
    pub auto_args: bool,
    /// Async Rust: record the polls of every async fn and async block the
    /// executable's DWARF describes, and of the hand-written
    /// `Future::poll`s of its own code, so that `fntrace report` links
    /// them into futures (docs/async.md). With -p, set on the running
    /// process for the recording and cleared at its end.
    #[arg(long = "async")]
    pub futures: bool,
    /// With --async: the hand-written `Future::poll`s of its dependencies
    /// too (crates from a registry or git, Rust's library: tokio's
    /// `Sleep`, `JoinHandle`...), left out by default.
    #[arg(long = "async-deps", requires = "futures")]
    pub async_deps: bool,
    /// Leave out the program's calls into shared libraries (malloc,
    /// write, getppid...), which are recorded by default, as uftrace does:
    /// the executable's calls through its PLT, named after the library
    /// functions; -F/-N select them by name like functions.
    #[arg(long, conflicts_with_all = ["libcall", "nest_libcall"])]
    pub no_libcall: bool,
    /// Library calls are enough: run a program built without
    /// instrumentation (refused otherwise) and record its library calls
    /// (and the functions -P patches).
    #[arg(long)]
    pub libcall: bool,
    /// Also record the calls shared libraries make into other libraries
    /// through their own PLTs (uftrace's --nest-libcall), except those of
    /// the C library, libm, libgcc_s, libpthread, libdl and the loader.
    #[arg(long)]
    pub nest_libcall: bool,
    /// Record calls at most DEPTH levels deep (1: the outermost calls only).
    #[arg(short = 'D', long = "depth", value_name = "DEPTH", value_parser = clap::value_parser!(u16).range(1..))]
    pub depth: Option<u16>,
    /// Flight recorder: keep only the most recent BYTES of events (suffix K,
    /// M or G, binary: 1K = 1024), written to DIR when the program exits.
    /// At most 4G, as FNTRACE_FLIGHT.
    #[arg(long, value_name = "BYTES", value_parser = parse_flight)]
    pub flight: Option<u64>,
    /// What a thread whose buffer is full does: `lossless` waits for the
    /// writer (nothing is lost; a program making events faster than they
    /// can be written runs at the writer's pace, and the waits are
    /// reported), `drop` goes on and counts the events lost (a lost record
    /// marks each gap).
    #[arg(long, value_name = "MODE", default_value = "lossless", value_parser = ["lossless", "drop"])]
    pub mode: String,
    /// Each thread's buffer, in bytes (suffix K, M or G; 16 bytes an
    /// event, rounded up to a power of two). Default 16M (1,048,576
    /// events; a linked service's recordings default to 4M).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub buffer: Option<u64>,
    /// Lossless mode: what the threads' buffers may hold together (suffix
    /// K, M or G; at least one --buffer). A thread whose buffer is full
    /// takes more of it, half a buffer at a time, and waits for the writer
    /// only when none is left; what it holds beyond its buffer goes back
    /// as the writer catches up. Default: no budget, each thread its
    /// buffer (a budget spares bursts every wait, but a program writing
    /// without pause, faster than the writer, runs 10-20 % slower with
    /// one: docs/performance.md).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub memory: Option<u64>,
    /// Run the program even if its executable has no instrumented
    /// functions, or a -F, -N or -P glob matches none of its functions (a
    /// library it loads may have them). Without it, such a program is
    /// refused before it runs, as uftrace refuses a program without
    /// instrumentation.
    #[arg(long)]
    pub force: bool,
    /// The libfntrace.so to preload.
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
    /// Record the running process PID instead of starting a program (its
    /// graph tracer, through its control socket, for --duration): a
    /// process started without fntrace is attached to first (fntrace
    /// attach) and detached at the end.
    #[arg(short = 'p', long = "pid", value_name = "PID", conflicts_with_all = ["command", "auto_args", "libcall", "nest_libcall", "no_libcall", "depth", "flight", "buffer", "memory", "force"])]
    pub pid: Option<u32>,
    /// With -p: how long to record (`5s`, `500ms`); sooner if the process
    /// exits.
    #[arg(long, value_name = "DURATION", requires = "pid", value_parser = super::top::parse_interval)]
    pub duration: Option<std::time::Duration>,
    /// The program and its arguments.
    #[arg(
        required_unless_present = "pid",
        trailing_var_arg = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// A size in the one syntax of [`fntrace_tools::units`] (`64M`, `1G`, bytes).
fn parse_bytes(text: &str) -> Result<u64, String> {
    fntrace_tools::units::parse_size(text, 16)
}

/// The largest `--flight`, the runtime's limit of `FNTRACE_FLIGHT`
/// (`fntrace::MAX_FLIGHT_BUDGET_BYTES`: this crate does not link the
/// runtime), refused here before the program runs.
const MAX_FLIGHT_BYTES: u64 = 4 << 30;

/// `--flight`: a size, at most [`MAX_FLIGHT_BYTES`].
fn parse_flight(text: &str) -> Result<u64, String> {
    let bytes = parse_bytes(text)?;
    if bytes > MAX_FLIGHT_BYTES {
        return Err(format!(
            "{bytes} bytes is over the flight window's limit, 4G ({MAX_FLIGHT_BYTES} bytes)"
        ));
    }
    Ok(bytes)
}

/// Runs the command, waits for it, and says what was recorded. Exits as
/// the program did (128 + the signal number if a signal ended it), or 2
/// when it could not be started.
pub fn main(args: &RecordArgs) -> ExitCode {
    match record(args) {
        Ok(code) => code,
        Err(why) => {
            eprintln!("fntrace record: {why}");
            ExitCode::from(2)
        }
    }
}

fn record(args: &RecordArgs) -> Result<ExitCode, String> {
    if let Some(pid) = args.pid {
        return record_running(args, pid);
    }
    check_memory(args)?;
    let from_env = std::env::var_os("FNTRACE_LIB")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let library = super::attach::find_library(args.lib.as_deref().or(from_env.as_deref()))?;
    let (program, program_args) = args
        .command
        .split_first()
        .ok_or("no command to run: fntrace record [OPTIONS] -- CMD [ARGS]...")?;
    // Before anything is moved: a refused program leaves the previous
    // recording where it was.
    // With -P (or --libcall) the functions traced need no instrumentation.
    if !args.force && args.patch.is_empty() && !args.libcall {
        if let Instrumentation::None(path) = instrumentation_of(program)? {
            return Err(refusal(&path));
        }
    }
    // -a's specs first: the ones given after them replace theirs, value by
    // value, as uftrace merges specs.
    let (mut arguments, mut retval) = (Vec::new(), Vec::new());
    let mut enums = Vec::new();
    // The executable -a's specs describe (a wrapper's: the one it runs).
    let mut described = None;
    if args.auto_args {
        let auto = super::auto_args::for_record(program, program_args)?;
        arguments.extend(auto.arguments);
        retval.extend(auto.retval);
        enums = auto.enums;
        described = Some(auto.described);
    }
    let auto_count = (arguments.len(), retval.len());
    refuse_pinned(&args.argument, &args.retval)?;
    arguments.extend(args.argument.iter().cloned());
    retval.extend(args.retval.iter().cloned());
    if args.futures {
        let (path, found) =
            super::async_fns::find_for_command(program, program_args, args.async_deps)?;
        if super::instrumented::resolve(program).as_ref() != Some(&path) {
            eprintln!(
                "fntrace record: --async: the async functions of {} (which {} runs)",
                path.display(),
                program.to_string_lossy()
            );
        }
        let left_out: Vec<&str> = (found.iter())
            .filter(|f| f.left_out())
            .map(|f| f.name.as_str())
            .collect();
        if !left_out.is_empty() {
            eprintln!(
                "fntrace record: --async: {} hand-written Future::poll left out (its Poll's \
                 discriminant is not in rax where rustc returns it in registers): {}",
                left_out.len(),
                left_out.join(", ")
            );
        }
        let (a, r) = super::async_fns::specs(&found);
        // Their futures' drop functions, where they have one: a future
        // dropped before Ready then leaves the runtime linker's table.
        arguments.extend(super::async_drops::specs(&path, &found, &a));
        arguments.extend(a);
        retval.extend(r);
    }
    let mut spec_globs = Vec::new();
    for (option, specs, kind) in [
        ("-A", &arguments[auto_count.0..], SpecKind::Arguments),
        ("-R", &retval[auto_count.1..], SpecKind::Retval),
    ] {
        // (-a's own specs name functions of the program: no check.)
        for spec in specs {
            let parsed = argspec::parse(spec, kind).map_err(|e| format!("{option} {e}"))?;
            spec_globs.extend(parsed.into_iter().map(|s| s.glob));
        }
    }
    if !args.force {
        if let Some(path) = super::instrumented::resolve(program) {
            let globs = super::selection::Globs {
                filter: &args.filter,
                notrace: &args.notrace,
                patch: &args.patch,
                args: &spec_globs,
                libcall: !args.no_libcall,
            };
            super::selection::check(&path, &globs)?;
        }
    }
    let dir =
        std::path::absolute(&args.output).map_err(|e| format!("{}: {e}", args.output.display()))?;
    make_room(&dir)?;
    // The same checks the recording process makes, said here once, before
    // the program runs (a refused directory would leave it untraced).
    fntrace_tools::export::prepare_output_dir(&dir).map_err(|e| e.to_string())?;

    let mut command = Command::new(program);
    command.args(program_args);
    let mut preload = library.into_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(existing);
    }
    command.env("FNTRACE_OUTPUT", &dir);
    command.env_remove("FNTRACE_APPEND");
    let mut globs: Vec<String> = args.filter.clone();
    globs.extend(args.notrace.iter().map(|glob| format!("!{glob}")));
    if globs.is_empty() {
        command.env_remove("FNTRACE_FILTER");
    } else {
        command.env("FNTRACE_FILTER", globs.join(","));
    }
    for (name, specs) in [("FNTRACE_ARGS", &arguments), ("FNTRACE_RETVAL", &retval)] {
        if specs.is_empty() {
            command.env_remove(name);
        } else {
            command.env(name, specs.join(";"));
        }
    }
    if args.patch.is_empty() {
        command.env_remove("FNTRACE_PATCH_FUNCTIONS");
    } else {
        command.env("FNTRACE_PATCH_FUNCTIONS", args.patch.join(","));
    }
    let links_the_runtime = || {
        super::instrumented::resolve(program)
            .is_some_and(|path| super::instrumented::links_the_runtime(&path))
    };
    let libcall = if args.no_libcall {
        "0"
    } else if args.nest_libcall {
        "nested"
    } else if !args.libcall && links_the_runtime() {
        // The default, impossible there: asked for by name, the runtime
        // would refuse and run the program untraced.
        eprintln!(
            "fntrace record: {} links fntrace itself: its library calls cannot be hooked; \
             recorded without them (--no-libcall)",
            Path::new(program).display()
        );
        "0"
    } else {
        "1"
    };
    command.env("FNTRACE_LIBCALL", libcall);
    match args.depth {
        // uftrace's -D counts levels from 1; FNTRACE_DEPTH is the deepest
        // depth recorded, from 0.
        Some(depth) => command.env("FNTRACE_DEPTH", (depth - 1).to_string()),
        None => command.env_remove("FNTRACE_DEPTH"),
    };
    match args.flight {
        Some(bytes) => command.env("FNTRACE_FLIGHT", bytes.to_string()),
        None => command.env_remove("FNTRACE_FLIGHT"),
    };
    command.env("FNTRACE_MODE", &args.mode);
    match (args.buffer, &args.flight) {
        (Some(bytes), _) => command.env("FNTRACE_BUFFER", bytes.to_string()),
        (None, None) => command.env("FNTRACE_BUFFER", DEFAULT_BUFFER.to_string()),
        (None, Some(_)) => command.env_remove("FNTRACE_BUFFER"),
    };
    match args.memory {
        Some(bytes) => command.env("FNTRACE_MEMORY", bytes.to_string()),
        None => command.env_remove("FNTRACE_MEMORY"),
    };

    let status = super::supervise::run(&mut command, &preload)?;
    if let Err(err) = fntrace_tools::export::settle_recording(&dir) {
        eprintln!("fntrace record: completing {}: {err}", dir.display());
    }
    // What uftrace's replay names `/p` and `/e` values by.
    let names_values =
        |specs: &[String]| specs.iter().any(|s| s.contains("/p") || s.contains("/e:"));
    let recorded = dir.join("info").is_file();
    if recorded && (args.auto_args || names_values(&arguments) || names_values(&retval)) {
        let program = described.or_else(|| super::instrumented::resolve(program));
        let completed = program
            .ok_or_else(|| "the program is gone".to_string())
            .and_then(|program| super::auto_args::complete(&dir, &program, &enums));
        if let Err(err) = completed {
            eprintln!("fntrace record: naming values in {}: {err}", dir.display());
        }
    }
    let complete = summarize(&dir, &args.mode);
    match exit_code_of(status) {
        // The program succeeded, the recording did not: scripts must see it.
        code if code == ExitCode::SUCCESS && !complete => Ok(ExitCode::from(INCOMPLETE)),
        code => Ok(code),
    }
}

/// `fntrace record`'s exit status when the program exited with 0 but the
/// recording is incomplete (events lost in lossless mode, a session that
/// did not finish, a directory that could not be written).
const INCOMPLETE: u8 = 3;

/// The default of `--buffer`: four times the runtime's default
/// (`DEFAULT_RECORD_BUFFER_EVENTS`), for a program run to be recorded
/// whole rather than a service's threads. A CPU-bound thread fills 4 MiB
/// in 6 ms, about what the writer takes to drain half of it, and waited
/// for it every few drains: recorded with 16 MiB, Lua's `work.lua` took
/// 3.6-4.0 s against 4.2 s (8 MiB: 4.0-4.2 s; 32 MiB: 3.9-4.0 s, 64 MiB:
/// 4.2-4.3 s, each thread's buffer then no longer in the caches).
const DEFAULT_BUFFER: u64 = 16 << 20;

/// Refuses a `--memory` smaller than one buffer (`--buffer`, rounded up
/// to a power of two of 16-byte events as the runtime does) in lossless
/// mode, before anything runs: the recording would refuse it.
/// Refuses `pinN[OFFSET]` in `-A` and `-R`: it claims a pointer valid
/// for the whole call and is read with a plain load, which would fault the
/// program if wrong; `--async` writes it where the DWARF shows the claim
/// holds, a hand-written read through memory is `argN[OFFSET]` (a system
/// call that never faults).
fn refuse_pinned(arguments: &[String], retval: &[String]) -> Result<(), String> {
    for (option, specs, kind) in [
        ("-A", arguments, SpecKind::Arguments),
        ("-R", retval, SpecKind::Retval),
    ] {
        for spec in specs {
            let Ok(parsed) = argspec::parse(spec, kind) else {
                continue; // said below, with the parser's reason
            };
            let pinned = parsed
                .iter()
                .flat_map(|s| &s.values)
                .any(|v| v.pinned_arg().is_some());
            if pinned {
                return Err(format!(
                    "{option} `{spec}`: `pinN[OFFSET]` is what --async writes for a poll's own \
                     future (read with a plain load, which faults on a bad pointer); \
                     read memory with `argN[OFFSET]`"
                ));
            }
        }
    }
    Ok(())
}

fn check_memory(args: &RecordArgs) -> Result<(), String> {
    if args.mode != "lossless" || args.flight.is_some() {
        return Ok(());
    }
    let buffer = (args.buffer.unwrap_or(DEFAULT_BUFFER) / 16)
        .clamp(16, 1 << 40)
        .next_power_of_two()
        * 16;
    let Some(memory) = args.memory else {
        return Ok(());
    };
    if memory < buffer {
        return Err(format!(
            "--memory {memory} is smaller than one thread's buffer ({buffer} bytes: --buffer, \
             rounded up to a power of two of 16-byte events): each thread needs a buffer; \
             raise --memory or lower --buffer"
        ));
    }
    Ok(())
}

/// `fntrace record -p PID --duration D`: the running process's graph
/// tracer streamed to DIR for D (drop mode, as `fntrace ctl PID record`),
/// attached to first if it serves no control socket, and detached at the
/// end then. -P patches entries first and -F/-N become its filter (both
/// stay after, if it was served already).
fn record_running(args: &RecordArgs, pid: u32) -> Result<ExitCode, String> {
    let duration = args
        .duration
        .ok_or("-p PID needs --duration (how long to record: 5s)")?;
    let dir =
        std::path::absolute(&args.output).map_err(|e| format!("{}: {e}", args.output.display()))?;
    let dir_text = dir
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8", dir.display()))?
        .to_string();
    make_room(&dir)?;
    let from_env = std::env::var_os("FNTRACE_LIB")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    // Before the process is touched: a program with no async function is
    // refused as it is.
    let async_specs = match args.futures {
        true => super::async_drops::specs_of_process(pid, args.async_deps)?,
        false => (Vec::new(), Vec::new()),
    };
    let attached =
        super::attach::attach_for(pid, "record", args.lib.as_deref().or(from_env.as_deref()))?;
    let target = pid.to_string();
    let ask = |line: String| -> Result<String, String> {
        match super::ctl::exchange_line(&target, std::time::Duration::from_secs(60), &line) {
            Ok((true, reply)) => Ok(reply),
            Ok((false, message)) => Err(message),
            Err(why) => Err(why),
        }
    };
    let recorded = (|| {
        if !args.patch.is_empty() {
            // The reply's first line counts; the others name each refusal.
            let reply = ask(format!("patch {}\n", args.patch.join(",")))?;
            for line in reply.lines() {
                eprintln!("fntrace record: {line}");
            }
        }
        let globs: Vec<String> = args
            .filter
            .iter()
            .cloned()
            .chain(args.notrace.iter().map(|glob| format!("!{glob}")))
            .collect();
        if !globs.is_empty() {
            ask(format!("filter {}\n", globs.join(",")))?;
        }
        // -A/-R as `fntrace ctl PID args|retval` sets them: a glob that
        // selects nothing is said. With --async, the specs `record --async`
        // gives a program it starts, from the process's executable.
        let (mut arguments, mut retval) = (args.argument.clone(), args.retval.clone());
        arguments.extend(async_specs.0.iter().cloned());
        retval.extend(async_specs.1.iter().cloned());
        for (command, specs) in [("args", &arguments), ("retval", &retval)] {
            if !specs.is_empty() {
                let reply = ask(format!("{command} {}\n", specs.join(";")))?;
                // With --async the specs echoed back are the generated
                // ones, long and said below in one line.
                let echo = |l: &&str| !(args.futures && l.contains(": recorded from now on"));
                for line in reply.lines().filter(|l| !l.trim().is_empty()).filter(echo) {
                    eprintln!("fntrace record: {line}");
                }
            }
        }
        if args.futures {
            let polls = retval.len().saturating_sub(args.retval.len());
            eprintln!(
                "fntrace record: --async: the polls of {polls} async function(s) recorded with \
                 their futures' states (specs cleared at the end)"
            );
        }
        ask(format!("record --mode={} {dir_text}\n", args.mode))?;
        let started = std::time::Instant::now();
        while started.elapsed() < duration && std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            std::thread::sleep(
                duration
                    .saturating_sub(started.elapsed())
                    .min(std::time::Duration::from_millis(100)),
            );
        }
        let stopped = ask("stop\n".to_string());
        if args.futures && stopped.is_ok() {
            // The process as it was: no specs (set only for this recording).
            for clear in ["args --clear\n", "retval --clear\n"] {
                if let Err(why) = ask(clear.to_string()) {
                    eprintln!("fntrace record: {}: {why}", clear.trim_end());
                }
            }
        }
        stopped
    })();
    if attached {
        if let Err(why) = super::attach::detach_quietly(pid) {
            eprintln!("fntrace record: detaching from process {pid}: {why}");
        }
    }
    let reply = recorded?;
    let field = |key: &str| {
        reply
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{key}: ")))
            .unwrap_or("?")
            .to_string()
    };
    eprintln!(
        "fntrace record: process {pid} recorded into {}: {} events, {} lost, {} threads",
        dir.display(),
        field("events"),
        field("lost"),
        field("threads")
    );
    Ok(ExitCode::SUCCESS)
}

/// Makes `dir` free for a new trace, deleting nothing fntrace did not
/// write: a missing or empty `dir` is used as it is; a recording (an `info`
/// file that starts with uftrace's magic) is renamed `DIR.old`, as uftrace
/// does, and an existing `DIR.old` is removed first only if it is a
/// recording fntrace wrote ([`remove_old_recording`]); anything else is an
/// error. What was moved and removed is said on stderr.
///
/// `dir`'s parent is opened first as every output directory is
/// ([`OutputDir`]: no link followed on the way, made if missing, refused if
/// someone else could plant or swap names in it); everything after is done
/// through its descriptor. Whatever `dir` itself is (a link, a file, another
/// user's directory), the recording's own checks say it next.
fn make_room(dir: &Path) -> Result<(), String> {
    use rustix::fs::{openat, renameat_with, statat, AtFlags, Dir, Mode, OFlags, RenameFlags};
    let Some(name) = dir.file_name() else {
        return Ok(());
    };
    let parent = dir.parent().unwrap_or(Path::new("/"));
    let parent = OutputDir::open_or_make(parent).map_err(|e| e.to_string())?;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Ok(fd) = openat(&parent, name, flags, Mode::empty()) else {
        return Ok(());
    };
    let mut entries = Dir::read_from(&fd).map_err(|e| format!("{}: {e}", dir.display()))?;
    let empty = entries
        .by_ref()
        .flatten()
        .all(|e| matches!(e.file_name().to_bytes(), b"." | b".."));
    if empty {
        return Ok(());
    }
    if !starts_with_magic(&fd, "info") {
        return Err(format!(
            "{} exists and is not a trace directory: choose another with -o",
            dir.display()
        ));
    }
    let mut old_name = name.to_owned();
    old_name.push(".old");
    let mut old = dir.as_os_str().to_owned();
    old.push(".old");
    let old = PathBuf::from(old);
    let replaced = match statat(&parent, &*old_name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => {
            remove_old_recording(&parent, &old_name, &old)?;
            true
        }
        Err(rustix::io::Errno::NOENT) => false,
        Err(e) => return Err(format!("{}: {e}", old.display())),
    };
    // NOREPLACE: rename(2) would replace an empty directory put there
    // meanwhile.
    renameat_with(&parent, name, &parent, &*old_name, RenameFlags::NOREPLACE)
        .map_err(|e| format!("renaming {} to {}: {e}", dir.display(), old.display()))?;
    eprintln!(
        "fntrace record: moved the previous recording {} to {}{}",
        dir.display(),
        old.display(),
        if replaced {
            " (in place of the older recording there)"
        } else {
            ""
        }
    );
    Ok(())
}

/// Whether `name` in `dir` is a regular file (not a link) whose first
/// bytes are uftrace's `info` magic, `Ftrace!\0`.
fn starts_with_magic(dir: impl AsFd, name: &str) -> bool {
    use rustix::fs::{openat, Mode, OFlags};
    use std::io::Read;
    // O_NONBLOCK: a FIFO there must not block the command.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(fd) = openat(dir, name, flags, Mode::empty()) else {
        return false;
    };
    let mut file = std::fs::File::from(fd);
    let mut magic = [0u8; 8];
    file.metadata().is_ok_and(|m| m.is_file())
        && file.read_exact(&mut magic).is_ok()
        && &magic == b"Ftrace!\0"
}

/// Removes `old` (`name` in `parent`), an older recording, if it is one
/// fntrace wrote: a directory (not a link) of this user, holding only
/// regular files with the names fntrace gives a recording's files,
/// `fntrace.txt` and an `info` with uftrace's magic among them. Anything
/// else is left alone and refused, with why. The files are removed by name
/// through the directory's descriptor, then the directory, which fails if
/// a file appeared meanwhile.
fn remove_old_recording(parent: &OutputDir, name: &OsStr, old: &Path) -> Result<(), String> {
    use rustix::fs::{fstat, openat, statat, unlinkat, AtFlags, Dir, FileType, Mode, OFlags};
    let refuse = |why: &str| {
        format!(
            "{} exists and {why}: fntrace deletes nothing it did not write; move it away or \
             choose another -o",
            old.display()
        )
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = openat(parent, name, flags, Mode::empty())
        .map_err(|_| refuse("is not a directory (or is a link to one)"))?;
    let stat = fstat(&fd).map_err(|e| format!("{}: {e}", old.display()))?;
    if stat.st_uid != rustix::process::geteuid().as_raw() {
        return Err(refuse(&format!("is owned by uid {}", stat.st_uid)));
    }
    let mut names = Vec::new();
    for entry in Dir::read_from(&fd).map_err(|e| format!("{}: {e}", old.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", old.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        if !is_recording_file_name(&name) {
            return Err(refuse(&format!(
                "is not a recording fntrace wrote (it holds {name:?})"
            )));
        }
        let regular = statat(&fd, &*name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::RegularFile);
        if !regular {
            return Err(refuse(&format!(
                "holds {name:?}, which is not a regular file"
            )));
        }
        names.push(name);
    }
    if !names.iter().any(|n| n == "fntrace.txt") || !starts_with_magic(&fd, "info") {
        return Err(refuse(
            "is not a recording fntrace wrote (no fntrace.txt, or no uftrace info file)",
        ));
    }
    for name in &names {
        unlinkat(&fd, &**name, AtFlags::empty())
            .map_err(|e| format!("removing {}: {e}", old.join(name).display()))?;
    }
    unlinkat(parent, name, AtFlags::REMOVEDIR)
        .map_err(|e| format!("removing {}: {e}", old.display()))
}

/// Whether fntrace names a file of a recording so: `info`, `task.txt`,
/// `fntrace.txt`, `sid-SID.map`, `NAME.sym`, `TID.dat`, the sessions'
/// `fntrace-session-SID.txt`, `.fntrace.lock`, `.fntrace.rebuild`,
/// `.fntrace-reserve` and the ledger of processes, `.fntrace-processes`,
/// and the `.NAME.PID.new` temporary files a killed recording can leave.
fn is_recording_file_name(name: &str) -> bool {
    let name = match name.strip_prefix('.').and_then(|n| n.strip_suffix(".new")) {
        // `.NAME.PID.new`: NAME must be one of the others.
        Some(inner) => match inner.rsplit_once('.') {
            Some((name, pid)) if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => return false,
        },
        None => name,
    };
    let tid = name.strip_suffix(".dat");
    matches!(
        name,
        "info"
            | "task.txt"
            | "fntrace.txt"
            | ".fntrace.lock"
            | ".fntrace.rebuild"
            | ".fntrace-reserve"
            | fntrace_tools::export::PROCESS_LEDGER
    ) || (name.starts_with("sid-") && name.ends_with(".map"))
        || (name.starts_with("fntrace-session-") && name.ends_with(".txt"))
        || (name.ends_with(".sym") && !name.contains('/'))
        || tid.is_some_and(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
}

/// The program's exit status as this process's.
fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
        (None, Some(signal)) => ExitCode::from((128 + signal).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}
