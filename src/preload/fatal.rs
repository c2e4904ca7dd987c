//! A recording survives a crash or a request to end: when a program
//! recording from the environment is killed by a fatal signal (SIGSEGV,
//! SIGBUS, SIGILL, SIGFPE, SIGABRT) or asked to end by one (SIGTERM,
//! SIGINT, SIGHUP: what `fntrace record` passes on when it is itself
//! killed so, and what a terminal sends) whose action is the default, a
//! handler first lets the recorder's writer drain the buffers — the
//! crashing thread's last calls included — and finish the session (its
//! note in the directory says what was written and lost, as at a normal
//! exit), then restores the default action and raises the signal again
//! (the core dump and exit status are the signal's, as without fntrace).
//!
//! The handler is async-signal-safe: it asks the writer through an atomic,
//! wakes it with a futex, and waits with `nanosleep` while the writer's
//! CPU clock moves (see `record::finish_from_signal_handler`): the
//! interrupted thread may hold a lock the writer needs, and then what was
//! drained before stays. It calls `sigaction` and `raise` after. Calls
//! running at the signal stay open in the trace, as uftrace shows them. A
//! handler the program installed is never replaced, and one it installs
//! later replaces this (until it asks for the default action again).
//!
//! The handler stands for the default action, and the program sees the
//! default: fntrace's `sigaction` and `signal` (which the program calls
//! instead of glibc's) report `SIG_DFL` where this handler is installed,
//! and install it where the program asks for `SIG_DFL`. A program that
//! installs its handlers only over the default therefore still does so:
//! Rust's std, for one, sets up its stack-overflow handler (and allocates
//! for it before `main`) only when `SIGSEGV` or `SIGBUS` has the default
//! action; and the drain still happens when such a handler gives the
//! signal back to the default action, as std's does for a fault that is
//! not a stack overflow. (`sysv_signal`, `bsd_signal` and `sigset` are not
//! wrapped: they see this handler.)

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

use super::next::NextSymbols;
use crate::record::finish_from_signal_handler;

/// The signals whose default action ends the process (with a core dump
/// for the first five) and that come to a process as a crash or as a
/// request to end.
const FATAL: [libc::c_int; 8] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
];

/// Whether the handler stands for the default action of `FATAL[i]`:
/// installed by [`drain_on_fatal_signals`], from then on.
static STANDS_FOR_DEFAULT: [AtomicBool; FATAL.len()] =
    [const { AtomicBool::new(false) }; FATAL.len()];

type SigactionFn =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// glibc's `sigaction` and `signal`, looked up before `main` (and by the
/// first call, if that comes earlier, from another library's constructor).
static REAL: NextSymbols<2> = NextSymbols::new([c"sigaction", c"signal"]);

#[used]
#[unsafe(link_section = ".init_array")]
static FIND_REAL_FUNCTIONS: extern "C" fn() = find_real_functions;

extern "C" fn find_real_functions() {
    REAL.find_all();
}

/// glibc's `sigaction`, or `None` if there is none (then nothing is
/// installed).
fn real_sigaction() -> Option<SigactionFn> {
    let found = REAL.get(c"sigaction");
    // SAFETY: glibc's `sigaction` has this type.
    (!found.is_null())
        .then(|| unsafe { std::mem::transmute::<*mut libc::c_void, SigactionFn>(found) })
}

/// glibc's `signal`, or `None` if there is none.
fn real_signal() -> Option<SignalFn> {
    let found = REAL.get(c"signal");
    // SAFETY: glibc's `signal` has this type.
    (!found.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, SignalFn>(found) })
}

/// The action that drains, then dies of the signal.
fn draining_action() -> libc::sigaction {
    // SAFETY: zeroed is a valid sigaction (empty mask, no flags).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = drain_then_die as extern "C" fn(c_int) as usize;
    action.sa_flags = libc::SA_RESETHAND;
    action
}

/// Installs the handler for each fatal signal whose action is the
/// default. Called when a recording starts from the environment.
pub(super) fn drain_on_fatal_signals() {
    let Some(real) = real_sigaction() else {
        return;
    };
    for (signo, stands) in FATAL.into_iter().zip(&STANDS_FOR_DEFAULT) {
        // SAFETY: a zeroed sigaction is a valid out-parameter; querying
        // with a null new action changes nothing.
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { real(signo, std::ptr::null(), &mut current) } != 0
            || current.sa_sigaction != libc::SIG_DFL
        {
            continue;
        }
        stands.store(true, Ordering::Release);
        // SAFETY: installing a handler (an `extern "C" fn(c_int)` that
        // lives as long as the process) for a signal whose action was the
        // default.
        unsafe { real(signo, &draining_action(), std::ptr::null_mut()) };
    }
}

/// Whether the handler stands for the default action of `signo`.
fn stands_for_default(signo: c_int) -> bool {
    FATAL
        .iter()
        .zip(&STANDS_FOR_DEFAULT)
        .any(|(fatal, stands)| *fatal == signo && stands.load(Ordering::Acquire))
}

/// `sigaction`, as glibc's, except that where fntrace's handler stands for
/// the default action it reads as `SIG_DFL`, and `SIG_DFL` installs it.
/// Async-signal-safe, as glibc's (atomics and the real call).
///
/// # Safety
/// As glibc's `sigaction`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    signo: c_int,
    action: *const libc::sigaction,
    previous: *mut libc::sigaction,
) -> c_int {
    let Some(real) = real_sigaction() else {
        // SAFETY: writing this thread's errno.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    };
    if !stands_for_default(signo) {
        // SAFETY: the caller's arguments, as glibc's `sigaction` takes them.
        return unsafe { real(signo, action, previous) };
    }
    let draining = draining_action();
    // SAFETY: a non-null `action` points to a sigaction (the caller's
    // contract).
    let asks_default = !action.is_null() && unsafe { (*action).sa_sigaction } == libc::SIG_DFL;
    let action = if asks_default { &draining } else { action };
    // SAFETY: `action` is null, the caller's, or `draining`; `previous`
    // is null or the caller's out-pointer.
    let result = unsafe { real(signo, action, previous) };
    // SAFETY: as above; zeroed is SIG_DFL with no flags and an empty mask.
    unsafe {
        if result == 0 && !previous.is_null() && (*previous).sa_sigaction == draining.sa_sigaction {
            *previous = std::mem::zeroed();
        }
    }
    result
}

/// `signal`: glibc's, except where fntrace's handler stands for the
/// default action: there as glibc's (BSD semantics: `SA_RESTART`, the
/// signal blocked while its handler runs) through [`sigaction`].
///
/// # Safety
/// As glibc's `signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(signo: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if !stands_for_default(signo) {
        return match real_signal() {
            // SAFETY: the caller's arguments, as glibc's `signal` takes them.
            Some(real) => unsafe { real(signo, handler) },
            None => libc::SIG_ERR,
        };
    }
    // SAFETY: zeroed is a valid sigaction; the mask is initialized below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid sigset_t; `signo` is one of the
    // fatal signals.
    unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaddset(&mut action.sa_mask, signo);
    }
    // SAFETY: a zeroed out-value.
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both point to valid sigactions.
    if unsafe { sigaction(signo, &action, &mut previous) } != 0 {
        return libc::SIG_ERR;
    }
    previous.sa_sigaction
}

extern "C" fn drain_then_die(signo: libc::c_int) {
    finish_from_signal_handler();
    // SA_RESETHAND restored the default action; the signal is blocked while
    // this handler runs, so it is delivered (with its default action) when
    // the handler returns.
    // SAFETY: raise is async-signal-safe.
    unsafe { libc::raise(signo) };
}
