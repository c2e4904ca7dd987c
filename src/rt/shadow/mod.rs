//! Per-thread shadow stacks: the real return addresses of hooked frames.
//!
//! To see a function's exit, its return address (in the stack slot the
//! entry trampoline reports) is saved here and replaced by
//! `fntrace_return_trampoline`. The trampoline hands the slot back to
//! [`fntrace_exit_entry`], which pops the frame and returns the real address.
//!
//! Frames are matched by slot address, not by position, which keeps the
//! stack right when frames vanish without returning:
//! - `longjmp` and other non-local exits: a later entry or exit whose slot is
//!   above (older than) the top frames shows those frames are dead; they are
//!   popped, and their exit reported then.
//! - tail calls: the callee finds the trampoline already in its slot and
//!   takes over the caller's frame (the caller's exit is reported then).
//! - unwinding (Rust panics, C++ exceptions, thread cancellation): the
//!   unwinder must see real return addresses, so the unwinder's entry points
//!   are wrapped ([`super::unwind`]) to put them back first. The frames stay
//!   (counted in `unhooked`, at the bottom of the stack) until the unwinder
//!   lands (`_Unwind_SetIP`): the frames below the landing frame are
//!   reported as vanished there, the ones above are hooked again. Unhooked
//!   frames found dead otherwise are dropped without a report.
//! - stack switches (`swapcontext`, coroutines): the frames of a stack the
//!   thread left are parked and come back when one of them returns; a frame
//!   taken for dead that returns after all goes back to its real caller
//!   ([`switch`]). No inconsistency stops the program.
//!
//! A stack lives in an `mmap`ed block per thread (async-signal-safe to
//! create) and is unmapped by a `pthread_key` destructor at thread exit.
//! Frames deeper than [`MAX_HOOKED_DEPTH`] are not hooked, and counted.

use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

use once_cell::sync::OnceCell;

use super::contexts::same_stack;
use super::thread::thread_block;

mod switch;

pub(crate) use switch::{RESYNCS, SWITCHES};

/// Hooked frames per thread at most (deeper calls are not hooked, and are
/// counted in `Stats::frames_too_deep`).
pub const MAX_HOOKED_DEPTH: usize = 1024;

/// A frame mark (see [`Frame::marks`]) of a call whose arguments or return
/// value are recorded: any mark sends its return to the slow path, which
/// alone reads the return value. The top bit: tracers mark with their
/// registry bit, and the graph tracer (the only one that marks) is
/// registered first.
pub(crate) const ARGS_MARK: u64 = 1 << 63;

extern "C" {
    fn fntrace_return_trampoline();
}

/// Address of the return trampoline.
#[inline]
pub(crate) fn return_trampoline() -> usize {
    fntrace_return_trampoline as *const () as usize
}

/// One hooked frame.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(crate) struct Frame {
    /// Where the return address lives on the machine stack.
    pub slot: usize,
    /// The return address the trampoline replaced.
    pub real_return: usize,
    /// The return address of the hooked function's call site (its key in
    /// the site table).
    pub site: usize,
    /// Entry time (`sys::clock::now_ticks`).
    pub entry_ticks: u64,
    /// Tracers that want this frame's exit.
    pub exit_tracers: u64,
    /// Per-tracer bits for tracers' own use (the graph tracer marks entries
    /// it has written).
    pub marks: u64,
    /// What the entry wrote into the slot: the return trampoline, or the
    /// hook of the site's return stub (`patch::return_stubs`).
    pub hook: usize,
    /// An argument the entry kept for its exit, packed with what the exit
    /// needs of it (the graph tracer's `args::Kept`); 0: none.
    pub kept: u64,
}

impl Frame {
    /// A frame of zeros (no slot), to be overwritten.
    pub const EMPTY: Frame = Frame {
        slot: 0,
        real_return: 0,
        site: 0,
        entry_ticks: 0,
        exit_tracers: 0,
        marks: 0,
        hook: 0,
        kept: 0,
    };
}

#[repr(C)]
pub(crate) struct ShadowStack {
    len: usize,
    frames: [Frame; MAX_HOOKED_DEPTH],
    /// `frames[..unhooked]` hold their real return addresses again (an
    /// exception is being or was unwound): they return without the
    /// trampoline, and vanish without a report.
    unhooked: usize,
    /// Every frame holds its real return address for a stack walk
    /// ([`Self::unhook_all`] without forgetting) until hooked again.
    walking: bool,
    /// Frames of suspended stacks, and frames given up for dead.
    parking: switch::Parking,
}

// The fast paths in asm/x86_64/{graph,return}.S use these (layout.h).
const _: () = {
    assert!(std::mem::offset_of!(ShadowStack, len) == 0);
    assert!(std::mem::offset_of!(ShadowStack, frames) == 8);
    assert!(MAX_HOOKED_DEPTH == 1024);
    assert!(std::mem::size_of::<Frame>() == 64);
    assert!(std::mem::offset_of!(Frame, slot) == 0);
    assert!(std::mem::offset_of!(Frame, real_return) == 8);
    assert!(std::mem::offset_of!(Frame, site) == 16);
    assert!(std::mem::offset_of!(Frame, entry_ticks) == 24);
    assert!(std::mem::offset_of!(Frame, exit_tracers) == 32);
    assert!(std::mem::offset_of!(Frame, marks) == 40);
    assert!(std::mem::offset_of!(Frame, hook) == 48);
    assert!(std::mem::offset_of!(Frame, kept) == 56);
};

/// Frames not hooked because the shadow stack was full.
pub(crate) static TOO_DEEP: AtomicU64 = AtomicU64::new(0);
/// Frames that vanished without returning (longjmp, unwinding).
pub(crate) static VANISHED: AtomicU64 = AtomicU64::new(0);

static EXIT_KEY: OnceCell<libc::pthread_key_t> = OnceCell::new();

/// Creates the thread-exit key; called from `init` (not on the hot path).
pub(crate) fn prepare() {
    EXIT_KEY.get_or_init(|| {
        let mut key = 0;
        // SAFETY: key is a valid out-pointer; the destructor only unmaps the
        // block it is given.
        let rc = unsafe { libc::pthread_key_create(&mut key, Some(release_at_thread_exit)) };
        assert_eq!(rc, 0, "pthread_key_create failed");
        key
    });
}

unsafe extern "C" fn release_at_thread_exit(stack: *mut libc::c_void) {
    thread_block().shadow.set(ptr::null_mut());
    // SAFETY: stack is the mapping made by `current_or_create` for this
    // exiting thread; nothing else refers to it.
    unsafe { libc::munmap(stack, std::mem::size_of::<ShadowStack>()) };
}

/// Runs `f` with this thread's shadow stack, if the thread has one and no
/// caller further up this thread's stack is using it already (a tracer's
/// exit hook, an unwinder wrapper, a signal handler that interrupted one of
/// them). The one way to reach a stack: `f`'s `&mut` is the only reference
/// to it while `f` runs, and `f` must not run tracer code (which could come
/// back here and find the stack in use).
#[inline]
pub(crate) fn with_stack<R>(f: impl FnOnce(&mut ShadowStack) -> R) -> Option<R> {
    let block = thread_block();
    let stack = block.shadow.get();
    if stack.is_null() || block.shadow_in_use.replace(true) {
        return None;
    }
    let _in_use = InUse(block);
    // SAFETY: the pointer is this thread's own mapping (made by `create`,
    // unmapped only at thread exit), used only by this thread, and the
    // in-use flag, set above until `_in_use` drops, keeps any other `&mut`
    // to it from being made meanwhile (the fast paths in asm touch it only
    // while the recursion guard is clear, never inside Rust code that holds
    // the guard).
    Some(f(unsafe { &mut *stack }))
}

/// [`with_stack`], creating the thread's stack first if it has none yet.
/// `None` also when no memory could be had.
#[inline]
pub(crate) fn with_stack_or_create<R>(f: impl FnOnce(&mut ShadowStack) -> R) -> Option<R> {
    if thread_block().shadow.get().is_null() && !create() {
        return None;
    }
    with_stack(f)
}

/// Clears the in-use flag when dropped (also if `f` panics).
struct InUse(&'static super::thread::ThreadBlock);

impl Drop for InUse {
    #[inline]
    fn drop(&mut self) {
        self.0.shadow_in_use.set(false);
    }
}

/// Maps this thread's stack. False if no memory (or `prepare` never ran).
#[cold]
fn create() -> bool {
    let _errno = super::thread::PreservedErrno::save();
    let Some(&key) = EXIT_KEY.get() else {
        return false;
    };
    // SAFETY: anonymous private mapping, checked; zeroed memory is an
    // empty ShadowStack (len 0).
    let mem = unsafe {
        libc::mmap(
            ptr::null_mut(),
            std::mem::size_of::<ShadowStack>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if mem == libc::MAP_FAILED {
        return false;
    }
    // SAFETY: key was created by prepare(); setspecific on a key below
    // PTHREAD_KEY_2NDLEVEL_SIZE does not allocate.
    unsafe { libc::pthread_setspecific(key, mem) };
    thread_block().shadow.set(mem as *mut ShadowStack);
    true
}

/// A frame taken off the stack without returning through the trampoline.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gone {
    pub frame: Frame,
    /// Its depth (the number of frames below it).
    pub depth: usize,
    /// Whether its exit is to be reported (false for frames unhooked for an
    /// unwind: when they left is unknown).
    pub report: bool,
}

/// What [`ShadowStack::pop_toward`] found.
pub(crate) enum Toward {
    /// The frame whose slot was asked for, and its depth.
    Found(Frame, usize),
    /// A dead frame above it, popped; ask again.
    Gone(Gone),
    /// A frame given up for dead earlier (its exit reported as vanished)
    /// returns after all: its real return address.
    Remembered(usize),
    /// No frame has that slot.
    Missing,
}

impl ShadowStack {
    #[inline]
    pub fn depth(&self) -> usize {
        self.len
    }

    /// The hooked frames, outermost first.
    #[inline]
    pub fn frames(&mut self) -> &mut [Frame] {
        &mut self.frames[..self.len]
    }

    /// Pops the top frame if it must be dead because a live frame's slot is
    /// at `slot` (its slot is at or below it: a `longjmp` left it, or a tail
    /// call reuses it when the slots are equal). `None` once the top frame is
    /// older (or on another stack). Call until `None`.
    #[inline]
    pub fn pop_dead_below(&mut self, slot: usize) -> Option<Gone> {
        let top = *self.frames[..self.len].last()?;
        if !switch::dead_below(top.slot, slot) {
            return None;
        }
        self.len -= 1;
        Some(self.gone(top))
    }

    /// Pops the top frame into `out` if its slot is `slot` (the frame of
    /// a function returning normally); its depth. `None` (and nothing
    /// changed) otherwise: then ask [`Self::pop_toward`].
    #[inline]
    pub fn pop_top_if(&mut self, slot: usize, out: &mut Frame) -> Option<usize> {
        let top = self.frames[..self.len].last()?;
        if top.slot != slot {
            return None;
        }
        *out = *top;
        self.len -= 1;
        Some(self.len)
    }

    /// Hooks the return address at `slot`. `real_return` is what the
    /// function will really return to. Returns false when the stack is full.
    #[inline]
    pub fn push(&mut self, frame: Frame) -> bool {
        if self.len == MAX_HOOKED_DEPTH {
            TOO_DEEP.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.frames[self.len] = frame;
        self.len += 1;
        true
    }

    /// Accounts for `frame`, just popped, that left without returning
    /// through the trampoline.
    fn gone(&mut self, frame: Frame) -> Gone {
        VANISHED.fetch_add(1, Ordering::Relaxed);
        // It may still return (a stack switch that looked like a longjmp).
        self.remember(&frame);
        let report = self.len >= self.unhooked;
        self.unhooked = self.unhooked.min(self.len);
        Gone {
            frame,
            depth: self.len,
            report,
        }
    }

    /// Whether a frame not unhooked for an unwind still has its hook in
    /// its slot (an unwinder walking the stack now would find it).
    pub fn any_frame_hooked(&self) -> bool {
        if self.walking {
            return false;
        }
        let hooked = self.unhooked.min(self.len)..self.len;
        self.frames[hooked].iter().any(|frame| {
            // SAFETY: as in `unhook_all` (read only).
            unsafe { (frame.slot as *const usize).read() == frame.hook }
        })
    }

    /// Before an unwinder walks the stack for an exception: every frame
    /// gets its real return address back and is marked unhooked.
    pub fn unhook_for_unwinding(&mut self) {
        self.unhook_all(false);
        self.unhooked = self.len;
    }

    /// The unwinder is about to land in a frame whose stack pointer will be
    /// `landing_sp`: pops one frame whose slot lies below it (unwound; to be
    /// reported as vanished). `None` when none is left; then call
    /// [`Self::rehook_after_landing`]. (A slot far below is on another stack
    /// and stays.)
    pub fn pop_unwound(&mut self, landing_sp: usize) -> Option<Gone> {
        let top = *self.frames[..self.len].last()?;
        if top.slot >= landing_sp || !same_stack(top.slot, landing_sp) {
            return None;
        }
        self.len -= 1;
        VANISHED.fetch_add(1, Ordering::Relaxed);
        Some(Gone {
            frame: top,
            depth: self.len,
            report: true,
        })
    }

    /// After [`Self::pop_unwound`]: the unhooked frames left are live and
    /// are hooked again.
    pub fn rehook_after_landing(&mut self) {
        let unhooked = self.unhooked.min(self.len);
        self.unhooked = 0;
        self.walking = false;
        self.hook_where_real(0..unhooked);
    }

    /// Writes every hooked frame's real return address back into its slot
    /// (where the slot still holds the frame's hook). With `forget`, the
    /// frames are dropped: their exits will not be seen.
    pub fn unhook_all(&mut self, forget: bool) {
        self.walking = !forget;
        for frame in self.frames[..self.len].iter().rev() {
            // SAFETY: what is relied on, not checked: every frame of
            // `frames[..len]` has its slot in a stack of this thread that
            // is still mapped. `push` takes only slots the entry path
            // reported on the stack the thread runs on; frames of a stack
            // it left stay here until the next hooked call or return parks
            // them (`switch`), and frames a `longjmp` left until one
            // below them is seen; both lie in stacks the program still
            // holds unless it freed one meanwhile (a finished coroutine's
            // stack, unmapped before any hooked call or return on the
            // stack it came back to): then this read faults. `switch`
            // reads the slots of frames given up for dead with
            // `process_vm_readv` for that reason. A slot is written only
            // when it holds the frame's hook: a slot reused since for other
            // data is left alone.
            unsafe {
                let slot = frame.slot as *mut usize;
                if slot.read() == frame.hook {
                    slot.write(frame.real_return);
                }
            }
        }
        if forget {
            VANISHED.fetch_add(self.len as u64, Ordering::Relaxed);
            self.len = 0;
            self.unhooked = 0;
        }
    }

    /// Puts its hook back into every hooked frame's slot that still
    /// holds the frame's real return address (after [`Self::unhook_all`]
    /// without forgetting). Frames unhooked for an unwind stay so.
    pub fn rehook_all(&mut self) {
        self.walking = false;
        self.hook_where_real(self.unhooked.min(self.len)..self.len);
    }

    fn hook_where_real(&mut self, frames: std::ops::Range<usize>) {
        for frame in self.frames[frames].iter() {
            // SAFETY: as in `unhook_all` (the frames here are a part of
            // `frames[..len]`); a slot is written only when it holds this
            // frame's real return address, which `unhook_all` put back.
            unsafe {
                let slot = frame.slot as *mut usize;
                if slot.read() == frame.real_return {
                    slot.write(frame.hook);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_in_use_is_not_handed_out_again() {
        prepare();
        let _untraced = crate::rt::thread::Untraced::begin();
        let outer = with_stack_or_create(|stack| {
            let depth = stack.depth();
            // Re-entry (an exit report reaching a tracer that asks for the
            // stack) gets nothing instead of a second `&mut`.
            let inner = with_stack(|_| ());
            (depth, inner.is_none())
        });
        assert_eq!(outer, Some((0, true)));
        // Released again afterwards, also after a panic inside.
        assert_eq!(with_stack(|stack| stack.depth()), Some(0));
        let panicked = std::panic::catch_unwind(|| with_stack(|_| panic!("inside")));
        assert!(panicked.is_err());
        assert_eq!(with_stack(|stack| stack.depth()), Some(0));
    }
}
