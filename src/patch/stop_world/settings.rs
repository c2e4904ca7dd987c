//! The two user settings of the stop-the-world protocol: which signal
//! stops threads, and how long an operation may wait for them. Read once at
//! the start of each operation.

use std::io;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use crate::error::Error;
use crate::sys::signal;

/// Signal used by the next operation (see [`set_stop_signal`]).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(libc::SIGUSR2);

/// Ack timeout of the next operation, in nanoseconds (see [`set_ack_timeout`]).
static ACK_TIMEOUT_NANOS: AtomicU64 = AtomicU64::new(2_000_000_000);

/// The shortest ack timeout [`set_ack_timeout`] accepts.
const MIN_ACK_TIMEOUT: Duration = Duration::from_millis(1);
/// The longest ack timeout [`set_ack_timeout`] accepts.
const MAX_ACK_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// Chooses the signal fntrace sends to stop threads while it patches code
/// (default `SIGUSR2`). Takes effect at the next patch operation, which
/// installs fntrace's handler for it. Pick a signal the program neither
/// uses nor blocks: a thread blocking it makes every patch fail with
/// [`Error::ThreadDidNotAcknowledge`], and a handler the program installed
/// for it makes every patch fail with [`Error::StopSignalInUse`] (fntrace
/// never replaces a program's handler).
///
/// Only `SIGUSR1`, `SIGUSR2` and `SIGRTMIN..=SIGRTMAX` are accepted: the
/// signals with no standard meaning. Every other signal is rejected with
/// [`Error::Signal`] naming it, because taking it over would change what
/// the service relies on: fntrace's handler would swallow a `SIGTERM`
/// sent to stop the service (for good: the handler is never removed), or
/// replace its Ctrl-C (`SIGINT`), `SIGCHLD`, `SIGPIPE` or `SIGHUP`
/// handling; fault signals (`SIGSEGV`...) are raised by the kernel in the
/// faulting thread, and `SIGKILL`/`SIGSTOP` cannot be caught at all.
pub fn set_stop_signal(signo: i32) -> Result<(), Error> {
    if !is_allowed(signo) {
        let name = signal::name(signo);
        return Err(Error::Signal {
            what: "choosing the stop signal",
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "signal {signo} ({name}) is not allowed; use SIGUSR1, SIGUSR2 or a \
                     realtime signal SIGRTMIN..=SIGRTMAX ({}..={}), which have no \
                     standard meaning a program relies on",
                    libc::SIGRTMIN(),
                    libc::SIGRTMAX()
                ),
            ),
        });
    }
    STOP_SIGNAL.store(signo, Ordering::Relaxed);
    Ok(())
}

/// Whether `signo` may be the stop signal (see [`set_stop_signal`]).
fn is_allowed(signo: i32) -> bool {
    signo == libc::SIGUSR1
        || signo == libc::SIGUSR2
        || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signo)
}

/// The stop signal of the next operation.
pub(super) fn stop_signal() -> i32 {
    STOP_SIGNAL.load(Ordering::Relaxed)
}

/// The ack timeout of the next operation.
pub(super) fn ack_timeout() -> Duration {
    Duration::from_nanos(ACK_TIMEOUT_NANOS.load(Ordering::Relaxed))
}

/// Sets how long one patch operation may spend, in total, stopping the
/// other threads before it gives up with [`Error::ThreadDidNotAcknowledge`]
/// (default 2 s; clamped to 1 ms ..= 1 day). Within that time a thread that
/// sleeps with the stop signal blocked makes fntrace resume everyone and
/// try again. Takes effect at the next operation.
pub fn set_ack_timeout(timeout: Duration) {
    let nanos = timeout.clamp(MIN_ACK_TIMEOUT, MAX_ACK_TIMEOUT).as_nanos();
    ACK_TIMEOUT_NANOS.store(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_signals_without_a_standard_meaning_are_allowed() {
        for allowed in [
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGRTMIN(),
            libc::SIGRTMAX(),
        ] {
            assert!(is_allowed(allowed), "{allowed}");
        }
        for refused in [
            0,
            -1,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGCHLD,
            libc::SIGPIPE,
            libc::SIGKILL,
            libc::SIGSEGV,
            libc::SIGRTMIN() - 1,
            libc::SIGRTMAX() + 1,
        ] {
            assert!(!is_allowed(refused), "{refused}");
        }
    }
}
