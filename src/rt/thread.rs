//! Per-thread state: cached kernel thread ids, the recursion guard, and the
//! thread block the trampolines share with Rust.

use std::cell::Cell;

use crate::sys;

use super::shadow::ShadowStack;

/// This thread's block, `fntrace_thread` in `asm/x86_64/entry.S`: an
/// initial-exec TLS object the fast paths reach with one `%fs`-relative
/// access. Offsets are in `asm/x86_64/layout.h`, checked below.
#[repr(C)]
pub(crate) struct ThreadBlock {
    /// The recursion guard: non-zero while this thread runs tracer code.
    pub in_tracer: Cell<u8>,
    /// Set while Rust code holds this thread's shadow stack (see
    /// [`super::shadow::with_stack`]).
    pub shadow_in_use: Cell<bool>,
    /// This thread's shadow stack, null until first needed.
    pub shadow: Cell<*mut ShadowStack>,
    /// The per-thread slot of the tracer that brings a fast entry (see
    /// `tracer::offer_fast_path`): its own, null until it sets it. The
    /// graph tracer keeps its ring here.
    pub fast_tracer_slot: Cell<*const libc::c_void>,
    /// Calls on this thread that reached the generic (Rust) entry path
    /// rather than a fast path: see [`crate::generic_entries_on_this_thread`].
    pub generic_entries: Cell<u64>,
    /// `[stack_low, stack_high)`: return-address slots that all lie on one
    /// stack, found by the generic entry path around the last slot it
    /// hooked; the graph tracer's fast entry handles a call only when its
    /// slot and the top frame's lie in it (else the thread may have
    /// switched stacks). Empty at first.
    pub stack_low: Cell<usize>,
    /// See `stack_low`.
    pub stack_high: Cell<usize>,
    /// How many context stacks were noted when the range was found: a
    /// later `makecontext` may have put a stack inside it.
    pub stack_contexts: Cell<usize>,
}

const _: () = {
    assert!(std::mem::offset_of!(ThreadBlock, in_tracer) == 0);
    assert!(std::mem::offset_of!(ThreadBlock, shadow_in_use) == 1);
    assert!(std::mem::offset_of!(ThreadBlock, shadow) == 8);
    assert!(std::mem::offset_of!(ThreadBlock, fast_tracer_slot) == 16);
    assert!(std::mem::offset_of!(ThreadBlock, generic_entries) == 24);
    assert!(std::mem::offset_of!(ThreadBlock, stack_low) == 32);
    assert!(std::mem::offset_of!(ThreadBlock, stack_high) == 40);
    assert!(std::mem::offset_of!(ThreadBlock, stack_contexts) == 48);
    assert!(std::mem::size_of::<ThreadBlock>() == 56);
};

extern "C" {
    fn fntrace_thread_block() -> *mut libc::c_void;
}

/// The calling thread's block.
#[inline]
pub(crate) fn thread_block() -> &'static ThreadBlock {
    // SAFETY: the asm returns the address of this thread's own TLS block,
    // zero-initialised (null pointers, guard clear) and alive as long as the
    // thread; ThreadBlock is !Sync, so the reference stays on this thread.
    unsafe { &*fntrace_thread_block().cast::<ThreadBlock>() }
}

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
    let fresh = sys::gettid() as u32;
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
        PreservedErrno(sys::last_errno())
    }
}

impl Drop for PreservedErrno {
    #[inline]
    fn drop(&mut self) {
        sys::set_errno(self.0);
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

/// How many traced calls on the calling thread went through the generic
/// entry path (the site-table probe and Rust dispatch) rather than the graph
/// tracer's fast entry. Sites the graph tracer alone selected take the fast
/// entry, except a thread's first call (it sets up the thread's buffers) and
/// unusual frames (longjmp, tail calls, full buffers, too deep); a site also
/// selected by another tracer always takes the generic path. A diagnostic
/// for tests and benchmarks.
pub fn generic_entries_on_this_thread() -> u64 {
    thread_block().generic_entries.get()
}
