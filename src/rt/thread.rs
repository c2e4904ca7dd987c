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
    TID.with(|tid| {
        let cached = tid.get();
        if cached != 0 {
            return cached;
        }
        // SAFETY: gettid has no preconditions and cannot fail.
        let fresh = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        tid.set(fresh);
        fresh
    })
}

/// Forgets the cached id; the child of `fork` has a new one.
pub(crate) extern "C" fn forget_after_fork() {
    TID.with(|tid| tid.set(0));
}
