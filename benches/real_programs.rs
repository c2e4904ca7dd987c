//! Real programs recorded as users meet them: `cargo bench --bench
//! real_programs`.
//!
//! Programs nobody here wrote, side by side in one run:
//!
//! - the Lua 5.4 interpreter (the sources of the crates.io package
//!   `lua-src`, with `benches/lua/main.c` for its `lua.c`, which the package
//!   does not ship), built `gcc -O2 -pg` and `gcc -O2 -pg -mfentry`
//!   (`-DLUA_USE_LINUX`, `-Dluai_makeseed(L)=0u`: a fixed string-hash seed;
//!   `-DSTRCACHE_N=1 -DSTRCACHE_M=1`: a string cache not indexed by address),
//!   running `benches/lua/work.lua` (recursion, closures, a table sort with
//!   a comparator, `string.format`, `gsub`, `gmatch`), all under
//!   `setarch -R` (no address randomisation: tables keyed by address hash
//!   the same every run), so that every run makes the same calls;
//! - ripgrep 15.1.0 from crates.io, every crate built with
//!   `-Zinstrument-mcount` (`cargo install`, cached under
//!   `target/real-programs/`), searching one regex with `-j1` in one file
//!   of real text: the cargo registry's `.rs` sources, concatenated in path
//!   order (repeated up to `CORPUS_BYTES`), built once and cached there too.
//!
//! Each program runs untraced (built without instrumentation), under
//! `fntrace record -o DIR -- CMD` (the CLI of `tools/` and `libfntrace.so`,
//! release builds, default options) and under `uftrace record -d DIR CMD`
//! (uftrace's defaults; both record calls into shared libraries through
//! the PLT, compared per function too; fntrace first in odd runs, uftrace
//! first in even ones). Per run: wall time; CPU (user +
//! system of the whole process tree, from `getrusage(RUSAGE_CHILDREN)`);
//! events written and lost, and bytes of `.dat` files per recorded call,
//! both directories read by the same reader (fntrace's
//! [`UftraceReader`]); and the 30 most-called functions of the program
//! (uftrace's counts: it loses nothing here) compared exactly with
//! fntrace's, mismatches printed. The output of the three runs of a program
//! must be the same, or the bench fails.
//!
//! `FNTRACE_BENCH_RUNS` (default 1) runs it all that many times. Nothing is
//! skipped: a missing tool (gcc, setarch, uftrace, nm) or a failed build
//! fails the bench. Everything but the cached builds is written into a
//! temporary directory, removed at the end.
//!
//! Targets (printed MET or MISS; a miss does not fail the run):
//! 0 lost under `fntrace record`; the top-30 counts equal to uftrace's;
//! fntrace's wall time ≤ 1/3 of uftrace's.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::programs::{lua, ripgrep, Program};
use common::{children_cpu_ns, fntrace_cli, load_average, machine_description, TempDir};
use fntrace_format::export::UftraceReader;
use fntrace_format::{EventKind, EventSource};

/// `work.lua`'s scale: 70.1M calls, ≈ 0.7 s of CPU untraced.
const LUA_SCALE: &str = "7";
/// How many of the most-called functions are compared.
const TOP: usize = 30;
const TARGET_WALL_RATIO: f64 = 1.0 / 3.0;

/// What one run of a command took.
struct Run {
    wall: Duration,
    cpu_ns: u64,
    stderr: String,
}

/// What a trace directory holds, read by fntrace's reader.
#[derive(Default)]
struct Recorded {
    /// Entries and exits per function name.
    counts: BTreeMap<String, (u64, u64)>,
    /// Events the lost records say were lost.
    lost: u64,
    /// Bytes of the threads' `.dat` files.
    bytes: u64,
}

impl Recorded {
    fn events(&self) -> u64 {
        self.counts
            .values()
            .map(|(entries, exits)| entries + exits)
            .sum()
    }

    fn entries(&self) -> u64 {
        self.counts.values().map(|(entries, _)| entries).sum()
    }
}

/// One program's figures of one run.
struct Figures {
    untraced: Run,
    fntrace: Run,
    uftrace: Run,
    ours: Recorded,
    theirs: Recorded,
    /// Entries and exits uftrace recorded of functions not in the program
    /// (library calls through the PLT).
    theirs_library_events: u64,
    /// Entries and exits fntrace recorded of functions not in the program
    /// (library calls too: both record them by default).
    ours_other_events: u64,
    /// Library functions uftrace recorded calls of.
    library_functions: usize,
    /// (name, fntrace's calls, uftrace's calls) of the library functions
    /// whose calls differ.
    library_mismatches: Vec<(String, u64, u64)>,
    /// Calls of the program's functions uftrace recorded.
    program_calls: u64,
    /// uftrace's calls per function of the program.
    theirs_calls: BTreeMap<String, u64>,
    /// (name, fntrace's calls, uftrace's calls) of the top `TOP` functions
    /// that differ, and of all the program's functions that differ.
    top_mismatches: Vec<(String, u64, u64)>,
    all_mismatches: Vec<(String, u64, u64)>,
    program_functions: usize,
}

fn main() {
    let runs: usize = std::env::var("FNTRACE_BENCH_RUNS").map_or(1, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("FNTRACE_BENCH_RUNS must be a number, not {v:?}"))
    });
    for tool in ["gcc", "setarch", "uftrace", "nm"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(found, "{tool} is not installed: the bench needs it");
    }
    println!("fntrace real-program benchmark ({runs} run(s))");
    println!("machine: {}", machine_description());
    let scratch = TempDir::new("fntrace-bench-real-programs");
    let cli = fntrace_cli();
    let programs = [
        lua(scratch.path(), "lua -O2 -pg", &["-pg"], LUA_SCALE),
        lua(
            scratch.path(),
            "lua -O2 -pg -mfentry",
            &["-pg", "-mfentry"],
            LUA_SCALE,
        ),
        ripgrep(),
    ];
    let mut table = Vec::new();
    for run in 1..=runs {
        for program in &programs {
            // Odd runs record with fntrace first, even runs with uftrace
            // first: the second recording of a run pays more where the VM
            // hands freed memory back to its host (free page reporting:
            // docs/journal/performance-2026-11-27.md), and that falls on each.
            let uftrace_first = run % 2 == 0;
            println!(
                "\nrun {run}: {} (load average {}; {} records first)",
                program.name,
                load_average(),
                if uftrace_first { "uftrace" } else { "fntrace" }
            );
            let figures = measure(program, &cli, scratch.path(), uftrace_first);
            print_figures(&figures);
            // Whether the program itself makes the same calls every run:
            // uftrace's counts against its first run's.
            if let Some((_, _, first)) = table.iter().find(|(_, name, _)| *name == program.name) {
                let first: &Figures = first;
                let varying: Vec<String> = first
                    .theirs_calls
                    .keys()
                    .chain(figures.theirs_calls.keys())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .filter(|name| first.theirs_calls.get(*name) != figures.theirs_calls.get(*name))
                    .map(|name| {
                        format!(
                            "{name} ({} then {})",
                            first.theirs_calls.get(name).copied().unwrap_or(0),
                            figures.theirs_calls.get(name).copied().unwrap_or(0)
                        )
                    })
                    .collect();
                println!(
                    "  uftrace's counts against its run 1: {} function(s) differ{}",
                    varying.len(),
                    if varying.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", varying.join("; "))
                    }
                );
            }
            table.push((run, program.name.clone(), figures));
        }
    }
    print_table(&table);
}

/// Runs `argv` (under `setarch -R` if asked), its output into `stdout`, to
/// success: wall time, CPU of the process tree, stderr.
fn timed(argv: &[String], no_aslr: bool, stdout: &Path) -> Run {
    let mut command = if no_aslr {
        let mut command = Command::new("setarch");
        command.args(["-R", "--"]).args(argv);
        command
    } else {
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]);
        command
    };
    command
        .stdout(File::create(stdout).unwrap_or_else(|e| panic!("{}: {e}", stdout.display())))
        .stderr(Stdio::piped())
        .env_remove("FNTRACE_LIB");
    // Every run starts with no dirty page cache. (Which tool records
    // first in a run still matters here: docs/journal/performance-2026-11-27.md.)
    let synced = Command::new("sync").status();
    assert!(
        synced.as_ref().is_ok_and(|status| status.success()),
        "sync: {synced:?}"
    );
    let cpu_before = children_cpu_ns();
    let start = Instant::now();
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {argv:?}: {e}"));
    let wall = start.elapsed();
    let cpu_ns = children_cpu_ns() - cpu_before;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{argv:?}: {}: {stderr}",
        output.status
    );
    Run {
        wall,
        cpu_ns,
        stderr,
    }
}

/// Reads the trace directory `dir` with fntrace's reader, thread by
/// thread (hundreds of millions of events: nothing is kept but counts).
fn read_dir(dir: &Path) -> Recorded {
    let reader =
        UftraceReader::open(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    let mut by_address: HashMap<usize, (u64, u64)> = HashMap::new();
    let mut recorded = Recorded::default();
    for index in 0..reader.threads().len() {
        let ((), lost) = reader
            .read_thread(index, |events| {
                for event in events {
                    let count = by_address.entry(event.function).or_default();
                    match event.kind {
                        EventKind::Entry => count.0 += 1,
                        EventKind::Exit => count.1 += 1,
                    }
                }
            })
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        recorded.lost += lost;
    }
    for (function, (entries, exits)) in by_address {
        let name = reader.name_of(function);
        // rustc's local symbols carry a `.llvm.N` suffix in some tables.
        let name = name.split(".llvm.").next().unwrap_or(&name).to_string();
        let count = recorded.counts.entry(name).or_default();
        count.0 += entries;
        count.1 += exits;
    }
    recorded.bytes = dat_bytes(dir);
    recorded
}

/// Bytes of the threads' `.dat` files in a trace directory (not uftrace's
/// `perf-cpuN.dat` scheduling events).
fn dat_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".dat") && !name.starts_with("perf-")
        })
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum()
}

/// The demangled names of `binary`'s own functions (`nm`), each mapped to
/// one name per address: functions folded into one (identical code) are
/// named by either symbol, by either tracer.
fn program_functions(binary: &Path) -> HashMap<String, String> {
    let output = Command::new("nm")
        .arg("--defined-only")
        .arg(binary)
        .output()
        .unwrap_or_else(|e| panic!("running nm: {e}"));
    assert!(output.status.success(), "nm {binary:?} failed");
    let mut by_address: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let mut fields = line.split_whitespace();
        let (Some(address), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (Ok(address), true) = (u64::from_str_radix(address, 16), matches!(kind, "t" | "T"))
        else {
            continue;
        };
        let name = name.split(".llvm.").next().unwrap_or(name);
        by_address
            .entry(address)
            .or_default()
            .push(fntrace_format::demangle(name));
    }
    let mut canonical = HashMap::new();
    for names in by_address.into_values() {
        let first = names.iter().min().expect("one name at least").clone();
        for name in names {
            canonical.insert(name, first.clone());
        }
    }
    canonical
}

/// Calls per function of the program (library calls left out), aliases
/// folded; calls per function left out (library calls); and those
/// functions' events.
fn program_calls(
    recorded: &Recorded,
    functions: &HashMap<String, String>,
) -> (BTreeMap<String, u64>, BTreeMap<String, u64>, u64) {
    let mut calls = BTreeMap::new();
    let mut library = BTreeMap::new();
    let mut others = 0;
    for (name, (entries, exits)) in &recorded.counts {
        match functions.get(name) {
            Some(canonical) => *calls.entry(canonical.clone()).or_default() += entries,
            None => {
                *library.entry(name.clone()).or_default() += entries;
                others += entries + exits;
            }
        }
    }
    (calls, library, others)
}

/// The functions whose calls differ between `ours` and `theirs`: (name,
/// ours, theirs).
fn mismatches(
    ours: &BTreeMap<String, u64>,
    theirs: &BTreeMap<String, u64>,
) -> Vec<(String, u64, u64)> {
    let count = |calls: &BTreeMap<String, u64>, name: &str| calls.get(name).copied().unwrap_or(0);
    theirs
        .keys()
        .chain(ours.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|name| count(ours, name) != count(theirs, name))
        .map(|name| (name.clone(), count(ours, name), count(theirs, name)))
        .collect()
}

/// One program, untraced, under `fntrace record` and under `uftrace
/// record` (in that order, or uftrace's first); the directories read and
/// removed.
fn measure(program: &Program, cli: &Path, scratch: &Path, uftrace_first: bool) -> Figures {
    let outputs =
        ["untraced", "fntrace", "uftrace"].map(|mode| scratch.join(format!("{mode}.out")));
    let ours_dir = scratch.join("fntrace.data");
    let theirs_dir = scratch.join("uftrace.data");
    for dir in [&ours_dir, &theirs_dir] {
        let _ = std::fs::remove_dir_all(dir);
    }
    let untraced = timed(&program.plain, program.no_aslr, &outputs[0]);
    let mut argv = vec![
        cli.display().to_string(),
        "record".to_string(),
        "-o".to_string(),
        ours_dir.display().to_string(),
        "--".to_string(),
    ];
    argv.extend(program.traced.iter().cloned());
    let ours_argv = argv;
    let mut argv = vec![
        "uftrace".to_string(),
        "record".to_string(),
        "-d".to_string(),
        theirs_dir.display().to_string(),
    ];
    argv.extend(program.traced.iter().cloned());
    let theirs_argv = argv;
    let (fntrace, uftrace) = if uftrace_first {
        let uftrace = timed(&theirs_argv, program.no_aslr, &outputs[2]);
        (timed(&ours_argv, program.no_aslr, &outputs[1]), uftrace)
    } else {
        let fntrace = timed(&ours_argv, program.no_aslr, &outputs[1]);
        (fntrace, timed(&theirs_argv, program.no_aslr, &outputs[2]))
    };
    let read =
        |path: &Path| std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let expected = read(&outputs[0]);
    for (mode, output) in ["fntrace", "uftrace"].iter().zip(&outputs[1..]) {
        assert!(
            read(output) == expected,
            "{}: the output under {mode} differs from the untraced run's",
            program.name
        );
    }

    let ours = read_dir(&ours_dir);
    let theirs = read_dir(&theirs_dir);
    for dir in [&ours_dir, &theirs_dir] {
        std::fs::remove_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
    let functions = program_functions(&program.binary);
    let (ours_calls, ours_library, ours_other_events) = program_calls(&ours, &functions);
    let (theirs_calls, theirs_library, theirs_library_events) = program_calls(&theirs, &functions);
    let mut ranked: Vec<(&String, &u64)> = theirs_calls.iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let count = |calls: &BTreeMap<String, u64>, name: &str| calls.get(name).copied().unwrap_or(0);
    let top_mismatches = ranked
        .iter()
        .take(TOP)
        .filter(|(name, n)| count(&ours_calls, name) != **n)
        .map(|(name, n)| ((*name).clone(), count(&ours_calls, name), **n))
        .collect();
    let all_mismatches = mismatches(&ours_calls, &theirs_calls);
    let library_mismatches = mismatches(&ours_library, &theirs_library);
    Figures {
        untraced,
        fntrace,
        uftrace,
        ours,
        theirs,
        theirs_library_events,
        ours_other_events,
        program_calls: theirs_calls.values().sum(),
        program_functions: theirs_calls.len(),
        theirs_calls,
        top_mismatches,
        all_mismatches,
        library_functions: theirs_library.len(),
        library_mismatches,
    }
}

fn print_figures(f: &Figures) {
    println!(
        "  untraced: {:.2} s wall, {:.2} s CPU",
        f.untraced.wall.as_secs_f64(),
        f.untraced.cpu_ns as f64 / 1e9
    );
    for (name, run, recorded) in [
        ("fntrace record", &f.fntrace, &f.ours),
        ("uftrace record", &f.uftrace, &f.theirs),
    ] {
        let events = recorded.events();
        println!(
            "  {name}: {:.2} s wall, {:.2} s CPU; {events} events written, {} lost ({:.1} % of {}); {:.1} bytes per recorded call ({:.0} MB)",
            run.wall.as_secs_f64(),
            run.cpu_ns as f64 / 1e9,
            recorded.lost,
            100.0 * recorded.lost as f64 / (events + recorded.lost).max(1) as f64,
            events + recorded.lost,
            recorded.bytes as f64 / recorded.entries().max(1) as f64,
            recorded.bytes as f64 / 1e6
        );
    }
    for line in f.fntrace.stderr.lines() {
        println!("    fntrace said: {line}");
    }
    println!(
        "  the program's calls (uftrace, lost none: {}): {} of {} functions; library calls: uftrace {} events of {} functions, fntrace {} events; {} library functions differ",
        f.theirs.lost == 0,
        f.program_calls,
        f.program_functions,
        f.theirs_library_events,
        f.library_functions,
        f.ours_other_events,
        f.library_mismatches.len()
    );
    for (name, ours, theirs) in &f.library_mismatches {
        println!("    library call {name}: fntrace {ours}, uftrace {theirs}");
    }
    // Every call the program made is an entry and an exit, written or
    // counted lost: what fntrace accounted for against uftrace's count.
    let accounted = f.ours.events() + f.ours.lost;
    let expected = 2 * f.program_calls + f.theirs_library_events;
    println!(
        "  fntrace's events written + lost: {accounted}, the program's calls × 2 + uftrace's library-call events: {expected} (difference {})",
        accounted as i64 - expected as i64
    );
    println!(
        "  top {TOP} by calls, fntrace against uftrace: {} of {TOP} equal; all functions: {} differ",
        TOP - f.top_mismatches.len(),
        f.all_mismatches.len()
    );
    // All of them when few (a function whose count varies from run to run),
    // else those of the top.
    let listed = if f.all_mismatches.len() <= 20 {
        &f.all_mismatches
    } else {
        &f.top_mismatches
    };
    for (name, ours, theirs) in listed {
        println!("    {name}: fntrace {ours}, uftrace {theirs}");
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "MET"
    } else {
        "MISS"
    }
}

fn print_table(table: &[(usize, String, Figures)]) {
    println!("\n| run | program | untraced wall / CPU s | fntrace wall / CPU s | uftrace wall / CPU s | fntrace / uftrace wall | fntrace / uftrace CPU | fntrace / untraced wall | uftrace / untraced wall | fntrace lost | uftrace lost | bytes per call fntrace / uftrace | top-30 equal |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let s = |run: &Run| (run.wall.as_secs_f64(), run.cpu_ns as f64 / 1e9);
    for (run, name, f) in table {
        let (uw, uc) = s(&f.untraced);
        let (fw, fc) = s(&f.fntrace);
        let (tw, tc) = s(&f.uftrace);
        println!(
            "| {run} | {name} | {uw:.2} / {uc:.2} | {fw:.2} / {fc:.2} | {tw:.2} / {tc:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {} ({:.1} %) | {} | {:.1} / {:.1} | {} |",
            fw / tw,
            fc / tc,
            fw / uw,
            tw / uw,
            f.ours.lost,
            100.0 * f.ours.lost as f64 / (f.ours.events() + f.ours.lost).max(1) as f64,
            f.theirs.lost,
            f.ours.bytes as f64 / f.ours.entries().max(1) as f64,
            f.theirs.bytes as f64 / f.theirs.entries().max(1) as f64,
            TOP - f.top_mismatches.len()
        );
    }
    println!("\nissue 22's targets:");
    for (run, name, f) in table {
        let ratio = f.fntrace.wall.as_secs_f64() / f.uftrace.wall.as_secs_f64();
        println!(
            "  run {run}, {name}: 0 lost {}; top-{TOP} counts equal {}; wall ≤ 1/3 of uftrace's {} ({ratio:.2})",
            verdict(f.ours.lost == 0),
            verdict(f.top_mismatches.is_empty()),
            verdict(ratio <= TARGET_WALL_RATIO)
        );
    }
}
