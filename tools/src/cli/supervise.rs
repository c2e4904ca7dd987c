//! How `fntrace record` runs its program so that neither outlives the
//! other unsaid. SIGINT, SIGTERM and SIGHUP sent to `fntrace record` are
//! passed on to the program, as `timeout` passes them, and the recording
//! is finished when it ends; one the terminal sent (Ctrl-C, a hang-up)
//! reached the program already, with its whole process group, and is not
//! sent twice. If `fntrace record` itself is killed (SIGKILL), the program
//! is killed with it: it starts through this executable, which asks the
//! kernel for SIGKILL on its parent's death (`PR_SET_PDEATHSIG`, kept
//! across `exec`) and then execs the program (this crate has no `unsafe`,
//! so no `pre_exec` hook).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, ExitStatus};

use rustix::process::{Pid, PidfdFlags, Signal};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;

/// Set in the environment of this executable run as the program's
/// launcher: the pid of the `fntrace record` that runs it.
const SUPERVISOR: &str = "FNTRACE_RECORD_SUPERVISOR";
/// The launcher's `LD_PRELOAD` for the program (the launcher itself must
/// not load `libfntrace.so`: it would record itself).
const PRELOAD: &str = "FNTRACE_RECORD_PRELOAD";

/// Runs `command` (its program, arguments and environment; `preload` is
/// its `LD_PRELOAD`) as described above and waits for it.
pub fn run(command: &mut Command, preload: &OsString) -> Result<ExitStatus, String> {
    let program = command.get_program().to_owned();
    // This very executable, even if its file was replaced meanwhile.
    let mut launcher = Command::new("/proc/self/exe");
    launcher
        .arg(&program)
        .args(command.get_args())
        .env_remove("LD_PRELOAD")
        .env(SUPERVISOR, std::process::id().to_string())
        .env(PRELOAD, preload);
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => launcher.env(name, value),
            None => launcher.env_remove(name),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        launcher.current_dir(dir);
    }
    // Registered before the program starts: a signal that comes meanwhile
    // waits in the iterator instead of killing this process alone.
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| format!("cannot handle signals: {e}"))?;
    let mut child = launcher.spawn().map_err(|e| {
        format!(
            "cannot run {}: {e}",
            std::path::Path::new(&program).display()
        )
    })?;
    // A pidfd: once the program is reaped, its pid may be another
    // process's, which a late signal must not reach.
    let pidfd = Pid::from_raw(child.id() as i32)
        .and_then(|pid| rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok());
    let handle = signals.handle();
    let forwarder = std::thread::spawn(move || {
        for origin in signals.forever() {
            // Sent by the kernel: a terminal's key or hang-up, which its
            // whole foreground process group, the program's too, received.
            if matches!(origin.cause, Cause::Kernel) {
                continue;
            }
            if let (Some(pidfd), Some(signal)) = (&pidfd, Signal::from_named_raw(origin.signal)) {
                let _ = rustix::process::pidfd_send_signal(pidfd, signal);
            }
        }
    });
    let status = child.wait();
    handle.close();
    let _ = forwarder.join();
    status.map_err(|e| {
        format!(
            "waiting for {}: {e}",
            std::path::Path::new(&program).display()
        )
    })
}

/// When this executable was started by [`run`] as the program's
/// launcher: makes the program die with `fntrace record` and execs it,
/// returning only if that fails. `None` otherwise.
pub fn run_as_launcher() -> Option<ExitCode> {
    let supervisor = std::env::var_os(SUPERVISOR)?;
    let supervisor: Option<i32> = supervisor.to_str().and_then(|s| s.parse().ok());
    let mut args = std::env::args_os().skip(1);
    let program = args.next()?;
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(Signal::KILL)) {
        eprintln!("fntrace record: cannot tie the program to fntrace (prctl: {e})");
        return Some(ExitCode::from(127));
    }
    // Asked after the death signal was set: a parent gone before it would
    // not send it.
    if rustix::process::getppid()
        .map(Pid::as_raw_nonzero)
        .map(i32::from)
        != supervisor
    {
        eprintln!("fntrace record: ended before the program started; not running it");
        return Some(ExitCode::from(127));
    }
    let mut command = Command::new(&program);
    command.args(args).env_remove(SUPERVISOR);
    match std::env::var_os(PRELOAD) {
        Some(preload) => command.env("LD_PRELOAD", preload).env_remove(PRELOAD),
        None => command.env_remove("LD_PRELOAD"),
    };
    let err = command.exec();
    eprintln!(
        "fntrace record: cannot run {}: {err}",
        std::path::Path::new(&program).display()
    );
    Some(ExitCode::from(127))
}
