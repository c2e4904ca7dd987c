//! The operating system and the CPU as fntrace uses them: the clock
//! (TSC), and thin, allocation-free wrappers over the Linux system calls
//! and `/proc` files the patch protocols need. Sits just above `arch` and below
//! everything else: it knows nothing about call sites, patches or tracers.
//!
//! Everything here except [`task::TaskDir::open`] and [`maps`] makes only
//! system calls, so it may run in a signal handler or while other threads
//! are stopped at arbitrary points (possibly holding the malloc lock).

pub(crate) mod clock;
pub(crate) mod futex;
pub(crate) mod maps;
pub(crate) mod membarrier;
pub(crate) mod sched;
pub(crate) mod signal;
pub(crate) mod task;

/// The calling thread's `errno`. Async-signal-safe.
#[inline]
pub(crate) fn last_errno() -> i32 {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's
    // errno, live for the thread's lifetime.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno` (a signal handler restores the
/// interrupted code's value with it). Async-signal-safe.
#[inline]
pub(crate) fn set_errno(value: i32) {
    // SAFETY: as in `last_errno`.
    unsafe { *libc::__errno_location() = value };
}

/// Patch settings (`FNTRACE_PATCH`, `FNTRACE_PATCH_PRIORITY`,
/// `FNTRACE_TEXT_WRITES`) whose bad value start-up has already reported:
/// the patcher, which reads them at its first operation, then says nothing
/// more (one line per bad value).
static BAD_SETTINGS_REPORTED: std::sync::Mutex<Vec<&'static str>> =
    std::sync::Mutex::new(Vec::new());

/// Notes that the bad value of the setting `name` was reported.
pub(crate) fn note_bad_setting_reported(name: &'static str) {
    BAD_SETTINGS_REPORTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(name);
}

/// Whether start-up already reported the bad value of the setting `name`.
pub(crate) fn bad_setting_reported(name: &str) -> bool {
    BAD_SETTINGS_REPORTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&name)
}

/// The CPU time the calling thread has used, in nanoseconds.
/// Async-signal-safe.
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; the clock always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's kernel thread id. Async-signal-safe.
#[inline]
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// This process's id.
pub(crate) fn getpid() -> i32 {
    // SAFETY: getpid takes no arguments and cannot fail.
    unsafe { libc::getpid() }
}

/// `tgkill(pid, tid, signo)`; signal 0 only checks that the thread exists.
/// The error is the raw errno. Async-signal-safe.
pub(crate) fn tgkill(pid: i32, tid: i32, signo: i32) -> Result<(), i32> {
    // SAFETY: tgkill takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signo) };
    if rc == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}
