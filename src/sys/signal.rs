//! Signal dispositions (query and install with `sigaction`) and signal
//! names for error messages. Used while the world runs normally, never from
//! a handler, except [`reset_to_default`].

use std::ffi::c_void;
use std::io;

/// An `SA_SIGINFO` signal handler.
pub(crate) type SigInfoHandler = extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void);

/// What `sigaction` reports for a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Disposition {
    /// `sa_sigaction`: `SIG_DFL`, `SIG_IGN` or a handler's address.
    pub handler: libc::sighandler_t,
    /// Whether `SA_SIGINFO` is set.
    pub siginfo: bool,
}

impl Disposition {
    /// Whether the disposition is `handler`, installed with `SA_SIGINFO`.
    pub(crate) fn is(&self, handler: SigInfoHandler) -> bool {
        self.siginfo && self.handler == handler as libc::sighandler_t
    }

    /// Whether nobody installed a handler (default action or ignored).
    pub(crate) fn is_default_or_ignored(&self) -> bool {
        self.handler == libc::SIG_DFL || self.handler == libc::SIG_IGN
    }
}

/// The current disposition of `signo`.
pub(crate) fn disposition(signo: i32) -> io::Result<Disposition> {
    // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, no flags).
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `current` is a valid out-pointer; a null `act` only queries.
    if unsafe { libc::sigaction(signo, std::ptr::null(), &mut current) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Disposition {
        handler: current.sa_sigaction,
        siginfo: current.sa_flags & libc::SA_SIGINFO != 0,
    })
}

/// Installs `handler` for `signo` with `SA_SIGINFO | SA_RESTART` and an
/// empty mask (nothing blocked beyond the signal itself while it runs).
/// `handler` must be async-signal-safe.
pub(crate) fn install(signo: i32, handler: SigInfoHandler) -> io::Result<()> {
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as libc::sighandler_t;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid sigset_t to initialize.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is fully initialized and its handler is an
    // `extern "C"` function with the SA_SIGINFO signature.
    if unsafe { libc::sigaction(signo, &action, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Installs `handler` for `signo` like [`install`], plus `SA_ONSTACK` (a
/// thread with an alternate signal stack runs it there) and `extra_flags`,
/// and returns the disposition it replaced. `handler` must be
/// async-signal-safe.
pub(crate) fn replace(
    signo: i32,
    handler: SigInfoHandler,
    extra_flags: i32,
) -> io::Result<Disposition> {
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as libc::sighandler_t;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK | extra_flags;
    // SAFETY: `action.sa_mask` is a valid sigset_t to initialize.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: an all-zero sigaction is a valid out-value.
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `action` is fully initialized, its handler is an `extern "C"`
    // function with the SA_SIGINFO signature; `previous` is a valid
    // out-pointer.
    if unsafe { libc::sigaction(signo, &action, &mut previous) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Disposition {
        handler: previous.sa_sigaction,
        siginfo: previous.sa_flags & libc::SA_SIGINFO != 0,
    })
}

/// Gives `signo` its default action again. Async-signal-safe (one
/// `sigaction`), for a handler that passes a signal on to the default.
pub(crate) fn reset_to_default(signo: i32) {
    // SAFETY: an all-zero sigaction is SIG_DFL with no flags and an empty
    // mask; sigaction is async-signal-safe.
    unsafe {
        let action: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signo, &action, std::ptr::null_mut());
    }
}

/// Names of the realtime signals, from `SIGRTMIN` up.
const REALTIME_NAMES: [&str; 33] = [
    "SIGRTMIN",
    "SIGRTMIN+1",
    "SIGRTMIN+2",
    "SIGRTMIN+3",
    "SIGRTMIN+4",
    "SIGRTMIN+5",
    "SIGRTMIN+6",
    "SIGRTMIN+7",
    "SIGRTMIN+8",
    "SIGRTMIN+9",
    "SIGRTMIN+10",
    "SIGRTMIN+11",
    "SIGRTMIN+12",
    "SIGRTMIN+13",
    "SIGRTMIN+14",
    "SIGRTMIN+15",
    "SIGRTMIN+16",
    "SIGRTMIN+17",
    "SIGRTMIN+18",
    "SIGRTMIN+19",
    "SIGRTMIN+20",
    "SIGRTMIN+21",
    "SIGRTMIN+22",
    "SIGRTMIN+23",
    "SIGRTMIN+24",
    "SIGRTMIN+25",
    "SIGRTMIN+26",
    "SIGRTMIN+27",
    "SIGRTMIN+28",
    "SIGRTMIN+29",
    "SIGRTMIN+30",
    "SIGRTMIN+31",
    "SIGRTMIN+32",
];

/// The symbolic name of `signo` (`"SIGUSR2"`, `"SIGRTMIN+3"`), or
/// `"an unknown signal"`.
pub(crate) fn name(signo: i32) -> &'static str {
    match signo {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signo) => {
            let index = usize::try_from(signo - libc::SIGRTMIN()).unwrap_or(usize::MAX);
            REALTIME_NAMES
                .get(index)
                .copied()
                .unwrap_or("a realtime signal")
        }
        _ => "an unknown signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_classic_and_realtime_signals() {
        assert_eq!(name(libc::SIGUSR2), "SIGUSR2");
        assert_eq!(name(libc::SIGTERM), "SIGTERM");
        assert_eq!(name(libc::SIGRTMIN()), "SIGRTMIN");
        assert_eq!(name(libc::SIGRTMIN() + 3), "SIGRTMIN+3");
        assert_eq!(name(0), "an unknown signal");
    }
}
