//! Cached kernel thread ids.

use std::cell::Cell;

thread_local! {
    // A const-initialised Cell without Drop: a plain TLS slot, no lazy
    // registration and no allocation.
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// The calling thread's kernel thread id (cached after the first call).
#[inline]
pub fn current_tid() -> u32 {
    let cached = TID.get();
    if cached != 0 {
        return cached;
    }
    // SAFETY: gettid has no preconditions and cannot fail.
    let fresh = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    TID.set(fresh);
    fresh
}

/// Forgets the cached id; the child of `fork` has a new one.
pub(crate) extern "C" fn forget_after_fork() {
    TID.set(0);
}

/// Restores `errno` when dropped: around the rare paths of the traced-call
/// path that make system calls (the traced code must not see their errno).
pub(crate) struct PreservedErrno(libc::c_int);

impl PreservedErrno {
    #[inline]
    pub fn save() -> PreservedErrno {
        // SAFETY: __errno_location returns this thread's errno, always valid.
        PreservedErrno(unsafe { *libc::__errno_location() })
    }
}

impl Drop for PreservedErrno {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as in save().
        unsafe { *libc::__errno_location() = self.0 };
    }
}

extern "C" {
    fn fntrace_guard_swap(value: u8) -> u8;
}

/// While alive, calls made by this thread are not traced: the same
/// thread-local guard the trampolines set while a tracer runs.
pub(crate) struct Untraced {
    previous: u8,
}

impl Untraced {
    pub fn begin() -> Untraced {
        // SAFETY: fntrace_guard_swap only writes this thread's guard byte.
        let previous = unsafe { fntrace_guard_swap(1) };
        Untraced { previous }
    }
}

impl Drop for Untraced {
    fn drop(&mut self) {
        // SAFETY: as above; restores the value found in begin().
        unsafe { fntrace_guard_swap(self.previous) };
    }
}

/// Runs `f` with tracing suspended on the calling thread: no tracer sees
/// the instrumented functions it calls.
pub fn untraced<R>(f: impl FnOnce() -> R) -> R {
    let _untraced = Untraced::begin();
    f()
}
