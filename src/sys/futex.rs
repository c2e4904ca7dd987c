//! Private futex wait and wake on an `AtomicU32`: the only blocking a
//! signal handler or a stopped-world section may do (async-signal-safe,
//! no allocation).

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use super::last_errno;

/// How a [`futex_wait`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitOutcome {
    /// Woken, the value differed, or interrupted: the caller re-checks.
    Woken,
    /// The timeout elapsed.
    TimedOut,
}

/// `FUTEX_WAIT_PRIVATE`: sleeps while `word` holds `expected`, at most
/// `timeout` (forever when `None`). Async-signal-safe.
pub(crate) fn futex_wait(
    word: &AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
) -> WaitOutcome {
    let timespec = timeout.map(|timeout| libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    });
    let timespec_ptr = timespec
        .as_ref()
        .map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: `word` is a live, aligned 32-bit atomic; `timespec_ptr` is null
    // or points to a timespec that outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            timespec_ptr,
        )
    };
    if rc != 0 && last_errno() == libc::ETIMEDOUT {
        WaitOutcome::TimedOut
    } else {
        WaitOutcome::Woken
    }
}

/// `FUTEX_WAKE_PRIVATE`: wakes up to `count` waiters on `word`.
/// Async-signal-safe.
pub(crate) fn futex_wake(word: &AtomicU32, count: i32) {
    // SAFETY: `word` is a live, aligned 32-bit atomic; waking has no other
    // precondition.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            count,
        );
    }
}
