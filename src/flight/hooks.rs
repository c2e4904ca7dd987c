//! The flight recorder's panic hook and signal handlers. Neither writes
//! anything: the signal handler sets a flag the writer thread polls; the
//! panic hook asks the writer for a snapshot and waits for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::Duration;

use super::FlightShared;
use crate::error::Error;
use crate::rt::thread::Untraced;

/// Signals 1..=64: which were raised since the writer last looked.
static RAISED: [AtomicBool; 65] = [const { AtomicBool::new(false) }; 65];

/// The running flight recorder, for the panic hook and the control socket.
static ACTIVE: Mutex<Option<Arc<FlightShared>>> = Mutex::new(None);

/// How long a panicking thread waits for its snapshot.
const PANIC_WAIT: Duration = Duration::from_secs(10);

/// Makes `shared` the recorder the panic hook serves (or none).
pub(super) fn set_active(shared: Option<Arc<FlightShared>>) {
    *ACTIVE.lock().unwrap_or_else(PoisonError::into_inner) = shared;
}

/// The running recorder, if any.
pub(super) fn active() -> Option<Arc<FlightShared>> {
    ACTIVE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Installs the panic hook once per process, chained to the hook that was
/// there: it asks the active recorder (if it wants panic snapshots) for a
/// snapshot, waits for it, then runs the previous hook.
pub(super) fn install_panic_hook() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            {
                let _untraced = Untraced::begin();
                let active = ACTIVE
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                if let Some(shared) = active {
                    let payload = info.payload();
                    let message = payload
                        .downcast_ref::<&str>()
                        .copied()
                        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                        .unwrap_or("a panic");
                    let what = match info.location() {
                        Some(at) => format!("{message} (at {at})"),
                        None => message.to_string(),
                    };
                    shared.snapshot_for_panic(&what, PANIC_WAIT);
                }
            }
            previous(info);
        }));
    });
}

/// Whether `signo` was raised since the previous call (clears the flag).
pub(super) fn take_raised(signo: i32) -> bool {
    usize::try_from(signo)
        .ok()
        .and_then(|i| RAISED.get(i))
        .is_some_and(|flag| flag.swap(false, Ordering::AcqRel))
}

/// The handler: async-signal-safe, it only sets the signal's flag.
extern "C" fn on_signal(signo: libc::c_int) {
    if let Some(flag) = usize::try_from(signo).ok().and_then(|i| RAISED.get(i)) {
        flag.store(true, Ordering::Release);
    }
}

/// A handler installed by the flight recorder, with the disposition it
/// replaced (restored by [`SignalHandler::restore`]).
pub(super) struct SignalHandler {
    pub signo: i32,
    previous: libc::sigaction,
}

// SAFETY: a sigaction is plain data (a handler address, flags, a mask);
// it is only passed back to the kernel.
unsafe impl Send for SignalHandler {}

/// Installs the flag-setting handler for `signo`.
pub(super) fn install_signal_handler(signo: i32) -> Result<SignalHandler, Error> {
    if !(1..=64).contains(&signo) {
        return Err(Error::Recording(format!("no signal {signo}")));
    }
    take_raised(signo);
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid sigset_t to initialise.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: as above, a valid value for the kernel to fill in.
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `action` is initialised, its handler an `extern "C" fn(c_int)`
    // (no SA_SIGINFO) that only stores to a static atomic; `previous` is a
    // valid out-pointer.
    if unsafe { libc::sigaction(signo, &action, &mut previous) } != 0 {
        return Err(Error::Io {
            what: format!(
                "installing the flight recorder's {} handler",
                crate::sys::signal::name(signo)
            ),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(SignalHandler { signo, previous })
}

impl SignalHandler {
    /// Puts back the disposition the handler replaced.
    pub(super) fn restore(&self) {
        // SAFETY: `previous` is what the kernel gave for this signal.
        unsafe { libc::sigaction(self.signo, &self.previous, std::ptr::null_mut()) };
    }
}
