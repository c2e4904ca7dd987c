//! A recording survives a crash: when a program recording from the
//! environment is killed by a fatal signal (SIGSEGV, SIGBUS, SIGILL,
//! SIGFPE, SIGABRT) whose action is the default, a handler first lets the
//! recorder's writer drain the buffers — the crashing thread's last calls
//! included — then restores the default action and raises the signal again
//! (the core dump and exit status are the signal's, as without fntrace).
//!
//! The handler is async-signal-safe: it reads an atomic counter of drains,
//! sleeps with `nanosleep`, and calls `sigaction` and `raise`. It waits for
//! two drains (the second began after the crash), at most
//! [`MAX_WAIT_MS`] (the crashing thread may hold a lock the writer needs:
//! then what was drained before stays). Calls running at the crash stay
//! open in the trace, as uftrace shows them. A handler the program
//! installed is never replaced, and one it installs later replaces this.

use std::sync::atomic::Ordering;

use crate::record::{writing_in_this_process, DRAINS_IN_PROCESS};

/// The signals whose default action ends the process with a core dump.
const FATAL: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// The longest the handler waits for the writer.
const MAX_WAIT_MS: u32 = 500;

/// Installs the handler for each fatal signal whose action is the
/// default. Called when a recording starts from the environment.
pub(super) fn drain_on_fatal_signals() {
    for signo in FATAL {
        // SAFETY: a zeroed sigaction is a valid out-parameter; querying
        // with a null new action changes nothing.
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::sigaction(signo, std::ptr::null(), &mut current) } != 0
            || current.sa_sigaction != libc::SIG_DFL
        {
            continue;
        }
        // SAFETY: zeroed is a valid starting sigaction; the handler is an
        // `extern "C" fn(c_int)` that lives as long as the process.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = drain_then_die as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESETHAND;
        // SAFETY: installing a handler for a signal whose action was the
        // default; sa_mask is empty (zeroed).
        unsafe { libc::sigaction(signo, &action, std::ptr::null_mut()) };
    }
}

extern "C" fn drain_then_die(signo: libc::c_int) {
    if writing_in_this_process() {
        let start = DRAINS_IN_PROCESS.load(Ordering::Acquire);
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        for _ in 0..MAX_WAIT_MS {
            if DRAINS_IN_PROCESS.load(Ordering::Acquire) >= start + 2 {
                break;
            }
            // SAFETY: nanosleep is async-signal-safe; `pause` is valid.
            unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
        }
    }
    // SA_RESETHAND restored the default action; the signal is blocked while
    // this handler runs, so it is delivered (with its default action) when
    // the handler returns.
    // SAFETY: raise is async-signal-safe.
    unsafe { libc::raise(signo) };
}
