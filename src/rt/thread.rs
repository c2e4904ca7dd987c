//! Per-thread state: cached kernel thread ids, the recursion guard, the
//! thread block the trampolines share with Rust, and the thread-exit hook
//! that hands a thread's rings back.
//!
//! At exit (a `pthread_key` destructor: after the thread's `thread_local`
//! destructors), the hook sets the thread's recursion guard for good (no
//! tracer runs on it again, so nothing writes its rings any more) and
//! marks each ring it claimed exited: the next drain takes their last
//! events and frees them for the next thread (see `rt::ring`). When many
//! exited threads' rings already wait for a recording's writer, it waits
//! a little for the writer to catch up (`ring::wait_for_reader`).

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

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
    /// The address of this thread's `errno`, null until first asked for
    /// ([`PreservedErrno`]): saves a call into libc per tracer run.
    pub errno: Cell<*mut libc::c_int>,
    /// The profile tracer's block for this thread (null until its first
    /// profiled call): here, not in a Rust thread-local, so that the
    /// profile tracer's fast paths (`asm/x86_64/profile.S`) reach it with
    /// one `%fs`-relative load.
    pub profile_block: Cell<*const libc::c_void>,
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
    assert!(std::mem::offset_of!(ThreadBlock, errno) == 56);
    assert!(std::mem::offset_of!(ThreadBlock, profile_block) == 64);
    assert!(std::mem::size_of::<ThreadBlock>() == 72);
};

/// The calling thread's block.
///
/// Inline, as `fntrace_thread_block` in entry.S computes it (the block's
/// initial-exec TLS offset plus the thread pointer at `%fs:0`): the
/// traced path asks for it several times per call, and a call each time
/// was measurable (≈ 4 % of a profiled call).
#[inline(always)]
pub(crate) fn thread_block() -> &'static ThreadBlock {
    let block: *const ThreadBlock;
    // SAFETY: reads the GOT entry of the block's TLS offset and the thread
    // pointer (`%fs:0` holds its own address on x86-64 Linux), neither of
    // which changes while the thread lives; writes only the output
    // register. The address is this thread's own TLS block, zero-initialised
    // (null pointers, guard clear) and alive as long as the thread;
    // ThreadBlock is !Sync, so the reference stays on this thread.
    unsafe {
        std::arch::asm!(
            "movq fntrace_thread@GOTTPOFF(%rip), {block}",
            "addq %fs:0, {block}",
            block = out(reg) block,
            options(att_syntax, pure, readonly, nostack, preserves_flags),
        );
        &*block
    }
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

/// In the child of a `fork`: the thread that called it (the child's only
/// thread, its tid the child's pid), which continues the calls its parent
/// had running; 0 in a process that was not forked.
static FORKED_THREAD: AtomicU32 = AtomicU32::new(0);

/// Notes, in the child's fork handler, that `tid` continues its parent's
/// calls (see [`forked_thread`]).
pub(crate) fn note_forked_thread(tid: u32) {
    FORKED_THREAD.store(tid, Ordering::Relaxed);
}

/// The thread of this process that continues calls of its parent's (the
/// one that called `fork`, in a forked child), if any.
pub(crate) fn forked_thread() -> Option<u32> {
    Some(FORKED_THREAD.load(Ordering::Relaxed)).filter(|&tid| tid != 0)
}

/// Restores `errno` when dropped: around tracers and the rare paths of the
/// traced-call path that make system calls (the traced code must not see
/// their errno). The location is kept in the thread's block: no call of
/// `__errno_location` on the traced path after the thread's first (this
/// runs twice per traced call).
pub(crate) struct PreservedErrno {
    location: *mut libc::c_int,
    value: libc::c_int,
}

impl PreservedErrno {
    #[inline]
    pub fn save() -> PreservedErrno {
        let block = thread_block();
        let mut location = block.errno.get();
        if location.is_null() {
            // SAFETY: `__errno_location` has no preconditions; its answer
            // is fixed for the thread's lifetime (and kept by `fork`'s
            // child, whose thread has the same TLS addresses).
            location = unsafe { libc::__errno_location() };
            block.errno.set(location);
        }
        // SAFETY: this thread's errno, valid for the thread's lifetime.
        let value = unsafe { location.read() };
        PreservedErrno { location, value }
    }
}

impl Drop for PreservedErrno {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the calling thread's errno (the guard is a local, dropped
        // on the thread that made it: it is !Send through the raw pointer).
        unsafe { self.location.write(self.value) };
    }
}

extern "C" {
    fn fntrace_guard_swap(value: u8) -> u8;
}

/// The thread-exit key, plus one (0: not made yet).
static EXIT_KEY: AtomicUsize = AtomicUsize::new(0);

/// Rings one thread can hand back at exit (one per tracer that buffers;
/// a thread that claims more has the others found by the reader, which
/// checks idle rings' owners).
const RINGS_PER_THREAD: usize = 4;

thread_local! {
    /// The states of the rings this thread claimed (addresses; 0: none).
    /// Const-initialised, no `Drop`: a plain TLS slot, usable from the
    /// traced path.
    static OWNED_RINGS: [Cell<usize>; RINGS_PER_THREAD] =
        const { [const { Cell::new(0) }; RINGS_PER_THREAD] };
}

/// Makes the thread-exit key (once); called from `init`, before any
/// tracer can claim a ring.
pub(crate) fn prepare_exit_hook() {
    if EXIT_KEY.load(Ordering::Acquire) != 0 {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer; the destructor only sets this
    // thread's guard and stores to rings' state words, which are never
    // unmapped.
    if unsafe { libc::pthread_key_create(&mut key, Some(at_thread_exit)) } != 0 {
        return; // rings of exited threads are then found by the reader
    }
    if EXIT_KEY
        .compare_exchange(0, key as usize + 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // SAFETY: the key just made, used by nobody.
        unsafe { libc::pthread_key_delete(key) };
    }
}

/// Has the ring whose state word is `state` (never unmapped) marked
/// exited when the calling thread exits. Called when the thread claims
/// it. Async-signal-safe as the shadow stack's key is: `pthread_setspecific`
/// of one of the first 32 keys (`PTHREAD_KEY_2NDLEVEL_SIZE`) only stores
/// into the thread's descriptor (a program that made 30 keys before
/// fntrace's would make it allocate, once per thread).
pub(crate) fn mark_at_exit(state: &super::ring::RingState) {
    let key = EXIT_KEY.load(Ordering::Acquire);
    if key == 0 {
        return;
    }
    let address = state as *const super::ring::RingState as usize;
    let noted = OWNED_RINGS.with(|slots| {
        slots
            .iter()
            .find(|slot| slot.get() == 0 || slot.get() == address)
            .map(|slot| slot.set(address))
            .is_some()
    });
    if noted {
        // Any non-null value: the destructor runs only for those.
        // SAFETY: the key was made by `prepare_exit_hook` and is never
        // deleted.
        unsafe {
            libc::pthread_setspecific((key - 1) as libc::pthread_key_t, std::ptr::dangling())
        };
    }
}

/// The thread-exit hook: no more tracing on this thread, then its rings
/// are marked exited.
unsafe extern "C" fn at_thread_exit(_value: *mut libc::c_void) {
    // SAFETY: only writes this thread's guard byte; never restored (the
    // thread is exiting).
    unsafe { fntrace_guard_swap(1) };
    let mut pools = [None; RINGS_PER_THREAD];
    OWNED_RINGS.with(|slots| {
        for (slot, pool) in slots.iter().zip(&mut pools) {
            let address = slot.replace(0);
            if address != 0 {
                // SAFETY: the address of a ring's state, noted by
                // `mark_at_exit`; rings are never unmapped.
                let state = unsafe { &*(address as *const super::ring::RingState) };
                *pool = super::ring::mark_exited(state);
            }
        }
    });
    for exits in pools.into_iter().flatten() {
        super::ring::wait_for_reader(exits);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `PreservedErrno` keeps errno's location in the thread's block: each
    /// thread finds its own there (a location shared between threads would
    /// restore another thread's errno), and restores its own value.
    #[test]
    fn errno_is_preserved_at_each_threads_own_location() {
        let check = |value: i32| {
            sys::set_errno(value);
            {
                let _saved = PreservedErrno::save();
                sys::set_errno(value + 1);
            }
            assert_eq!(sys::last_errno(), value);
            // SAFETY: `__errno_location` has no preconditions.
            let own = unsafe { libc::__errno_location() };
            assert_eq!(thread_block().errno.get(), own);
        };
        check(7);
        let other = std::thread::spawn(move || {
            check(11);
            // SAFETY: as above.
            unsafe { libc::__errno_location() as usize }
        })
        .join()
        .unwrap();
        // SAFETY: as above.
        assert_ne!(other, unsafe { libc::__errno_location() as usize });
        check(13);
    }
}
