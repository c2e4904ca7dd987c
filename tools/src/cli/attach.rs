//! `fntrace attach PID` and `fntrace detach PID`: live control of a
//! program that was started with no fntrace variable and not linked with
//! fntrace (built with `-pg` or `-pg -mfentry`). `attach` loads
//! `libfntrace.so` into it (the ptrace work is the `fntrace-inject`
//! crate's, which says why it cannot leave the program deadlocked) and
//! makes it serve its control socket, as `FNTRACE_CONTROL=1` would have;
//! `fntrace ctl PID`, `fntrace top PID` then work on it as on any.
//! `detach` asks it, over that socket, to switch every tracer off, give
//! back the text fntrace wrote and stop serving.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

/// `fntrace attach --help` after the arguments.
pub const ATTACH_HELP: &str = "\
The program must be dynamically linked (fntrace loads its library with the
program's own dlopen) and built with -pg or -pg -mfentry; it needs no
fntrace variable and no link with fntrace. fntrace stops one of its threads
for a moment, only where that thread holds no C library or loader lock
(running the program's own code, or blocked in read, accept, poll,
epoll_wait, nanosleep...); every other thread keeps running, and no call is
interrupted (no EINTR). Refused, with the reason, for a program traced
already (gdb, strace), one fntrace may not trace (another user: ptrace's
rules), a statically linked one, or one that cannot see libfntrace.so.

Examples:
  ./server &                                   built with gcc -pg, started plainly
  fntrace attach $!                            it serves /tmp/fntrace-UID/PID.sock
  fntrace ctl $! record /tmp/trace             as with FNTRACE_CONTROL=1
  fntrace ctl $! stop
  fntrace detach $!                            the text as before attach";

/// `fntrace detach --help` after the arguments.
pub const DETACH_HELP: &str = "\
Asks a process fntrace attach attached to, over its control socket, to stop
a recording or flight recorder it runs, switch every tracer off, drop the
graph events and profile counts still in memory, write back the text
fntrace changed (each call site holds its call of glibc's mcount
again; functions given an entry jump by `ctl PID patch` hold their first
bytes again) and stop serving. libfntrace.so stays loaded, idle: frames the
graph tracer hooked may still return through it. fntrace attach attaches
again. Refused (the process stays attached) after library-call hooking,
whose text is not given back yet.

Examples:
  fntrace detach $!
  fntrace attach $!                            again: the library is reused";

/// `fntrace attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The process to attach to.
    pub pid: u32,
    /// The libfntrace.so to load (default: $FNTRACE_LIB, or next to fntrace).
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
    /// Borrow this thread of the process for the load and no other
    /// (default: the first found at a safe point).
    #[arg(long, value_name = "TID")]
    pub thread: Option<u32>,
}

/// `fntrace detach`.
#[derive(Debug, Args)]
pub struct DetachArgs {
    /// The process fntrace attach attached to.
    pub pid: u32,
    /// Seconds to wait for its reply.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub timeout: u64,
}

/// Runs `fntrace attach`: 0 when the program serves its control socket,
/// 1 when it was refused or failed (the reason on stderr).
pub fn main(args: &AttachArgs) -> ExitCode {
    let from_env = std::env::var_os("FNTRACE_LIB")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let lib = args.lib.as_deref().or(from_env.as_deref());
    match attach(args.pid, lib, args.thread, false) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("fntrace: attach: {why}");
            ExitCode::FAILURE
        }
    }
}

/// Makes process `pid` serve its control socket: nothing to do if it
/// does; else loads the library (or reuses the one loaded) and starts it.
/// What was done, as one line (empty when it served already and
/// `quiet_if_served`).
pub fn attach(
    pid: u32,
    lib: Option<&std::path::Path>,
    thread: Option<u32>,
    quiet_if_served: bool,
) -> Result<String, String> {
    let timeout = Duration::from_secs(5);
    if status(pid, timeout).is_some() {
        return Ok(match quiet_if_served {
            true => String::new(),
            false => format!("process {pid} serves its control socket already"),
        });
    }
    let library = find_library(lib)?;
    let attached = fntrace_inject::attach(pid, &library, thread).map_err(|e| e.to_string())?;
    // The server started before the call returned; it answers at once.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !serves(pid, timeout) {
        if Instant::now() >= deadline {
            return Err(format!(
                "process {pid} was attached but does not answer on its control socket"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(format!(
        "attached to process {pid}: {}; thread {} paused {:.2} ms{}; `fntrace ctl {pid} ...` \
         controls it, `fntrace detach {pid}` ends it",
        match attached.loaded {
            true => "libfntrace.so loaded",
            false => "libfntrace.so was loaded already",
        },
        attached.tid,
        attached.pause.as_secs_f64() * 1e3,
        match attached.passed_over {
            0 => String::new(),
            n => format!(" ({n} thread stops passed over: not at a safe point)"),
        }
    ))
}

/// Whether process `pid` answers `status` on its default control socket,
/// its call sites found (an attached process finds them on a thread of its
/// own once it serves).
fn serves(pid: u32, timeout: Duration) -> bool {
    status(pid, timeout).is_some_and(|status| !status.contains("not looked for yet"))
}

/// The reply to `status` of process `pid`, if it answers.
fn status(pid: u32, timeout: Duration) -> Option<String> {
    match super::ctl::exchange_line(&pid.to_string(), timeout, "status\n") {
        Ok((true, status)) => Some(status),
        _ => None,
    }
}

/// Runs `fntrace detach`: 0 when the program answered ok, 1 for an error
/// reply, 2 for no reply (as `fntrace ctl`).
pub fn detach(args: &DetachArgs) -> ExitCode {
    let timeout = Duration::from_secs(args.timeout.max(1));
    match super::ctl::exchange_line(&args.pid.to_string(), timeout, "detach\n") {
        Ok((true, text)) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Ok((false, message)) => {
            eprintln!("fntrace: detach: {message}");
            ExitCode::from(1)
        }
        Err(why) => {
            eprintln!("fntrace: detach: {why}");
            ExitCode::from(2)
        }
    }
}

/// For `fntrace record -p PID` and `fntrace top PID`: makes process `pid`
/// serve its control socket, attaching to it if it does not (one line on
/// stderr says so). Whether this attached it (then the caller detaches it
/// when done, leaving it as it found it).
pub fn attach_for(pid: u32, command: &str, lib: Option<&std::path::Path>) -> Result<bool, String> {
    if status(pid, Duration::from_secs(5)).is_some() {
        return Ok(false);
    }
    let from_env = std::env::var_os("FNTRACE_LIB")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let line = attach(pid, lib.or(from_env.as_deref()), None, true)?;
    eprintln!(
        "fntrace {command}: process {pid} serves no control socket: attached to it ({}); \
         detached again at the end",
        line.split_once(": ")
            .map_or(line.as_str(), |(_, rest)| rest)
            .split("; `")
            .next()
            .unwrap_or("")
    );
    Ok(true)
}

/// Detaches process `pid` (what [`attach_for`] attached); why not.
pub fn detach_quietly(pid: u32) -> Result<(), String> {
    match super::ctl::exchange_line(&pid.to_string(), Duration::from_secs(60), "detach\n") {
        Ok((true, _)) => Ok(()),
        Ok((false, message)) => Err(message),
        Err(why) => Err(why),
    }
}

/// The runtime library fntrace loads into a program.
const LIBRARY: &str = "libfntrace.so";

/// `libfntrace.so`: `--lib`/`$FNTRACE_LIB`, or next to this executable.
pub(super) fn find_library(given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = given {
        return if path.is_file() {
            std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))
        } else {
            Err(format!(
                "--lib/FNTRACE_LIB: {} is not a file",
                path.display()
            ))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate fntrace itself: {e}"))?;
    let beside = exe.with_file_name(LIBRARY);
    // `cargo test` runs the executable from target/<profile>/ or, for a
    // copy, from target/<profile>/deps/.
    let above = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join(LIBRARY));
    [Some(beside.clone()), above]
        .into_iter()
        .flatten()
        .find(|path| path.is_file())
        .ok_or_else(|| {
            format!(
                "{LIBRARY} is not next to fntrace ({}): build it (cargo build --release \
                 builds both) or give its path with --lib or FNTRACE_LIB",
                beside.display()
            )
        })
}
