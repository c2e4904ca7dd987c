//! The C ABI, declared in `include/fntrace.h`: `fntrace_init`,
//! `fntrace_enable`, `fntrace_disable`, `fntrace_set_filter`,
//! `fntrace_set_arg_specs`, `fntrace_dump`, `fntrace_record_start`, `fntrace_record_stop`, the
//! flight recorder's `fntrace_flight_start`, `fntrace_flight_trigger`,
//! `fntrace_flight_untrigger`, `fntrace_flight_snapshot`,
//! `fntrace_flight_stop`, the live profile's `fntrace_profile_write` and
//! `fntrace_profile_reset`, and `fntrace_last_error`, over the Rust API. `libfntrace.a` and
//! `libfntrace.so` export them (and `fntrace_attach_start`, which starts
//! live control and so lives in `crate::preload`, above it).
//!
//! Each returns 0 or a negative errno-style code and, on failure, keeps a
//! message for [`fntrace_last_error`] (per thread). No panic crosses the C
//! boundary: one is caught and reported as `-ENOTRECOVERABLE`.
//!
//! The state these calls act on (the filter, the recording, the flight
//! recorder) is the session's ([`crate::session`]), which live control and
//! start-up share: this module only converts arguments and errors.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::control;
use crate::record;
use crate::session::flight;
use crate::session::{
    current_filter, register_builtins, set_filter, start_recording, take_recording, Failure,
};
use crate::vars;

mod profile;

thread_local! {
    /// The message of this thread's last failed call.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs `body` for a C caller: 0 on success; on failure (or panic) stores
/// the message for [`fntrace_last_error`] and returns the negated code.
pub(crate) fn run(what: &str, body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        Err(Failure(
            libc::ENOTRECOVERABLE,
            "fntrace panicked (a bug); the call was abandoned".to_string(),
        ))
    });
    match result {
        Ok(()) => 0,
        Err(Failure(code, message)) => {
            set_last_error(&format!("{what}: {message}"));
            -code
        }
    }
}

fn set_last_error(message: &str) {
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // The thread-local is gone only while the thread exits.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = message);
}

/// The string at `ptr`, which must be non-null UTF-8.
///
/// # Safety
/// `ptr` is null or points to a NUL-terminated string that stays valid and
/// unchanged during the call.
unsafe fn arg<'a>(ptr: *const c_char, name: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure(libc::EINVAL, format!("{name} is NULL")));
    }
    // SAFETY: non-null, and the caller promises a valid C string.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str()
        .map_err(|_| Failure(libc::EINVAL, format!("{name} is not valid UTF-8")))
}

/// `int fntrace_init(void)`: finds every call site (see [`crate::init`]).
#[unsafe(no_mangle)]
pub extern "C" fn fntrace_init() -> c_int {
    run("fntrace_init", || Ok(control::init()?))
}

/// `int fntrace_enable(const char *tracer)`: enables the tracer with the
/// filter of the last `fntrace_set_filter`.
///
/// # Safety
/// `tracer` is null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_enable(tracer: *const c_char) -> c_int {
    run("fntrace_enable", || {
        // SAFETY: the caller passes null or a valid C string.
        let name = unsafe { arg(tracer, "tracer") }?;
        register_builtins();
        Ok(control::enable_with(name, &current_filter())?)
    })
}

/// `int fntrace_disable(const char *tracer)`.
///
/// # Safety
/// `tracer` is null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_disable(tracer: *const c_char) -> c_int {
    run("fntrace_disable", || {
        // SAFETY: the caller passes null or a valid C string.
        let name = unsafe { arg(tracer, "tracer") }?;
        register_builtins();
        Ok(control::disable(name)?)
    })
}

/// `int fntrace_set_filter(const char *globs)`: the functions that tracers
/// enabled from now on (and recordings) select: `"handle_*,!log_*"`.
///
/// # Safety
/// `globs` is null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_set_filter(globs: *const c_char) -> c_int {
    run("fntrace_set_filter", || {
        // SAFETY: the caller passes null or a valid C string.
        let globs = unsafe { arg(globs, "globs") }?;
        Ok(set_filter(globs)?)
    })
}

/// `int fntrace_patch_functions(const char *globs)`: run-time entry
/// patching of the functions the comma-separated `globs` select (see
/// [`crate::patch_functions`]); returns how many were refused (0: all
/// patched), or `-errno`.
///
/// # Safety
/// `globs` is null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_patch_functions(globs: *const c_char) -> c_int {
    let mut refused = 0;
    let code = run("fntrace_patch_functions", || {
        // SAFETY: the caller passes null or a valid C string.
        let globs = unsafe { arg(globs, "globs") }?;
        let globs = vars::parse_patch_functions(globs).map_err(|e| Failure(libc::EINVAL, e))?;
        let globs: Vec<&str> = globs.iter().map(String::as_str).collect();
        let report = control::patch_functions(&globs)?;
        refused = report.refused.len();
        Ok(())
    });
    if code == 0 {
        c_int::try_from(refused).unwrap_or(c_int::MAX)
    } else {
        code
    }
}

/// `int fntrace_set_arg_specs(const char *arguments, const char *retval)`:
/// the arguments and return values the graph tracer records from now on,
/// in uftrace's syntax (see [`crate::set_arg_specs`]); returns how many
/// globs select no function with a call site (0: all do), or `-errno`:
/// `-EINVAL` for a spec that does not parse, `-EBUSY` while a recording or
/// the flight recorder runs (what it wrote would be read with the new
/// specs).
///
/// # Safety
/// `arguments` and `retval` are null or valid NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_set_arg_specs(
    arguments: *const c_char,
    retval: *const c_char,
) -> c_int {
    let mut unmatched = 0;
    let code = run("fntrace_set_arg_specs", || {
        // SAFETY: the caller passes null or valid C strings.
        let (arguments, retval) = unsafe { (arg(arguments, "arguments")?, arg(retval, "retval")?) };
        if record::RECORDER_RUNNING.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Failure(
                libc::EBUSY,
                "a recorder runs (a recording or the flight recorder): stop it first".to_string(),
            ));
        }
        unmatched = control::set_arg_specs(arguments, retval)?.len();
        Ok(())
    });
    if code == 0 {
        c_int::try_from(unmatched).unwrap_or(c_int::MAX)
    } else {
        code
    }
}

/// `int fntrace_dump(const char *dir)`: writes the graph tracer's events
/// into a new uftrace data directory (see [`crate::dump`]).
///
/// # Safety
/// `dir` is null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_dump(dir: *const c_char) -> c_int {
    run("fntrace_dump", || {
        // SAFETY: the caller passes null or a valid C string.
        let dir = unsafe { arg(dir, "dir") }?;
        control::dump(dir)?;
        Ok(())
    })
}

/// `int fntrace_record_start(const char *dir)`: starts the streaming
/// recorder (graph tracer, the current filter) into `dir`.
///
/// # Safety
/// `dir` is null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_record_start(dir: *const c_char) -> c_int {
    run("fntrace_record_start", || {
        // SAFETY: the caller passes null or a valid C string.
        let dir = unsafe { arg(dir, "dir") }?;
        start_recording(dir, &current_filter(), record::RecordMode::Lossless)
    })
}

/// `fntrace_record_start` in `mode`: `"lossless"` (a thread whose buffer
/// is full waits for the writer; what `fntrace_record_start` does) or
/// `"drop"` (the event is dropped, counted and marked by a lost record).
///
/// # Safety
/// `dir` and `mode` are null or NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_record_start_mode(
    dir: *const c_char,
    mode: *const c_char,
) -> c_int {
    run("fntrace_record_start_mode", || {
        // SAFETY: the caller passes null or valid C strings.
        let (dir, mode) = unsafe { (arg(dir, "dir")?, arg(mode, "mode")?) };
        let mode = mode.parse().map_err(|e: String| Failure(libc::EINVAL, e))?;
        start_recording(dir, &current_filter(), mode)
    })
}

/// `int fntrace_record_stop(void)`: stops the recording and finishes its
/// directory.
#[unsafe(no_mangle)]
pub extern "C" fn fntrace_record_stop() -> c_int {
    run("fntrace_record_stop", || match take_recording() {
        Some(recording) => {
            recording.stop()?;
            Ok(())
        }
        None => Err(Failure(
            libc::ESRCH,
            "no recording is running (fntrace_record_start starts one)".to_string(),
        )),
    })
}

/// `int fntrace_flight_start(const char *dir, unsigned long long
/// budget_bytes)`: starts the flight recorder (graph tracer, the current
/// filter), keeping the most recent `budget_bytes` of events (0: 64 MiB);
/// the triggers' snapshots go under `dir` (made if missing, checked now).
///
/// # Safety
/// `dir` is null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_flight_start(
    dir: *const c_char,
    budget_bytes: std::ffi::c_ulonglong,
) -> c_int {
    run("fntrace_flight_start", || {
        // SAFETY: the caller passes null or a valid C string.
        let dir = unsafe { arg(dir, "dir") }?;
        let budget_bytes = match budget_bytes {
            0 => crate::flight::FlightOptions::default().budget_bytes,
            n if n < crate::flight::FLIGHT_EVENT_BYTES as u64 => {
                return Err(Failure(
                    libc::EINVAL,
                    format!("budget_bytes {n} holds no event (at least 16)"),
                ))
            }
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
        flight::start(&flight::Start {
            dir: dir.as_ref(),
            budget_bytes,
            snapshots_per_minute: None,
            snapshot_at_exit: false,
            filter: &current_filter(),
        })
    })
}

/// `int fntrace_flight_trigger(const char *trigger)`: adds a trigger to
/// the running flight recorder, as `FNTRACE_FLIGHT_TRIGGER` writes one:
/// `"handle_*>5ms"` (a call that long), `"panic"`, `"SIGUSR1"`.
///
/// # Safety
/// `trigger` is null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_flight_trigger(trigger: *const c_char) -> c_int {
    run("fntrace_flight_trigger", || {
        // SAFETY: the caller passes null or a valid C string.
        let text = unsafe { arg(trigger, "trigger") }?;
        let spec = vars::parse_trigger(text).map_err(|e| Failure(libc::EINVAL, e))?;
        flight::add_trigger(&spec)
    })
}

/// `int fntrace_flight_untrigger(const char *which)`: removes the
/// triggers with this glob (or `"panic"`, a signal name); NULL: all.
///
/// # Safety
/// `which` is null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_flight_untrigger(which: *const c_char) -> c_int {
    run("fntrace_flight_untrigger", || {
        let which = match which.is_null() {
            true => None,
            // SAFETY: non-null, and the caller passes a valid C string.
            false => Some(unsafe { arg(which, "which") }?),
        };
        match flight::remove_triggers(which)? {
            0 if which.is_some() => Err(Failure(
                libc::ENOENT,
                format!("no trigger {:?}", which.unwrap_or_default()),
            )),
            _ => Ok(()),
        }
    })
}

/// `int fntrace_flight_snapshot(const char *dir)`: writes the running
/// flight recorder's window into `dir` (new or empty).
///
/// # Safety
/// `dir` is null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_flight_snapshot(dir: *const c_char) -> c_int {
    run("fntrace_flight_snapshot", || {
        // SAFETY: the caller passes null or a valid C string.
        let dir = unsafe { arg(dir, "dir") }?;
        match crate::flight::snapshot_running(dir.as_ref()) {
            Some(written) => written.map(drop).map_err(Failure::from),
            None => Err(Failure(
                libc::ESRCH,
                "no flight recorder is running (fntrace_flight_start or FNTRACE_FLIGHT \
                 starts one)"
                    .to_string(),
            )),
        }
    })
}

/// `int fntrace_flight_stop(void)`: stops the flight recorder
/// `fntrace_flight_start` (or `FNTRACE_FLIGHT`, or the control socket)
/// started; the snapshots its triggers have due are written first.
#[unsafe(no_mangle)]
pub extern "C" fn fntrace_flight_stop() -> c_int {
    run("fntrace_flight_stop", || flight::stop().map(drop))
}

/// `const char *fntrace_last_error(void)`: the message of the last failed
/// call on this thread ("" if none failed), valid until the thread's next
/// failed call.
#[unsafe(no_mangle)]
pub extern "C" fn fntrace_last_error() -> *const c_char {
    static EMPTY: &CStr = c"";
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|last| last.borrow().as_ptr())
            .unwrap_or(EMPTY.as_ptr())
    })
    .unwrap_or(EMPTY.as_ptr())
}
