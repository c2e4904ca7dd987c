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
//!
//! A stack lives in an `mmap`ed block per thread (async-signal-safe to
//! create) and is unmapped by a `pthread_key` destructor at thread exit.
//! Frames deeper than [`MAX_DEPTH`] are not hooked, and counted.

use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

use once_cell::sync::OnceCell;

use super::thread::thread_block;

/// Hooked frames per thread at most.
pub const MAX_DEPTH: usize = 1024;

/// A slot this far above the top frame is taken to be on another stack (a
/// signal handler on `sigaltstack`), not a sign that the top frames died.
const OTHER_STACK_DISTANCE: usize = 64 << 20;

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
    /// Entry time ([`super::clock::now_ticks`]).
    pub entry_ticks: u64,
    /// Tracers that want this frame's exit.
    pub exit_tracers: u64,
    /// Per-tracer bits for tracers' own use (the graph tracer marks entries
    /// it has written).
    pub marks: u64,
}

#[repr(C)]
pub(crate) struct ShadowStack {
    len: usize,
    frames: [Frame; MAX_DEPTH],
    /// `frames[..unhooked]` hold their real return addresses again (an
    /// exception is being or was unwound): they return without the
    /// trampoline, and vanish without a report.
    unhooked: usize,
}

// The fast paths in asm/x86_64/{graph,return}.S use these (layout.h).
const _: () = {
    assert!(std::mem::offset_of!(ShadowStack, len) == 0);
    assert!(std::mem::offset_of!(ShadowStack, frames) == 8);
    assert!(MAX_DEPTH == 1024);
    assert!(std::mem::size_of::<Frame>() == 48);
    assert!(std::mem::offset_of!(Frame, slot) == 0);
    assert!(std::mem::offset_of!(Frame, real_return) == 8);
    assert!(std::mem::offset_of!(Frame, site) == 16);
    assert!(std::mem::offset_of!(Frame, entry_ticks) == 24);
    assert!(std::mem::offset_of!(Frame, exit_tracers) == 32);
    assert!(std::mem::offset_of!(Frame, marks) == 40);
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

impl ShadowStack {
    /// This thread's stack, if it has one.
    #[inline]
    pub fn current() -> Option<&'static mut ShadowStack> {
        // SAFETY: the pointer is this thread's own mapping, used only by this
        // thread, and only from code holding the recursion guard (no
        // re-entrant &mut).
        unsafe { thread_block().shadow.get().as_mut() }
    }

    /// This thread's stack, created on first use. `None` if no memory.
    #[cold]
    pub fn create() -> Option<&'static mut ShadowStack> {
        let _errno = super::thread::PreservedErrno::save();
        let key = *EXIT_KEY.get()?;
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
            return None;
        }
        // SAFETY: key was created by prepare(); setspecific on a key below
        // PTHREAD_KEY_2NDLEVEL_SIZE does not allocate.
        unsafe { libc::pthread_setspecific(key, mem) };
        thread_block().shadow.set(mem as *mut ShadowStack);
        Self::current()
    }

    #[inline]
    pub fn depth(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn frames(&mut self) -> &mut [Frame] {
        &mut self.frames[..self.len]
    }

    /// Pops every frame that must be dead because a live frame's slot is at
    /// `slot` (frames with slots at or below it), calling `vanished` for
    /// each. Returns the real return address of a frame whose slot is
    /// exactly `slot` (a tail call reusing it), if any.
    #[inline]
    pub fn pop_dead_below(
        &mut self,
        slot: usize,
        mut vanished: impl FnMut(&Frame, usize),
    ) -> Option<usize> {
        let mut reused = None;
        while self.len > 0 {
            let top = self.frames[self.len - 1];
            if top.slot > slot || slot - top.slot > OTHER_STACK_DISTANCE {
                break;
            }
            self.len -= 1;
            if top.slot == slot {
                reused = Some(top.real_return);
            }
            self.vanish(&top, &mut vanished);
        }
        reused
    }

    /// Hooks the return address at `slot`. `real_return` is what the
    /// function will really return to. Returns false when the stack is full.
    #[inline]
    pub fn push(&mut self, frame: Frame) -> bool {
        if self.len == MAX_DEPTH {
            TOO_DEEP.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.frames[self.len] = frame;
        self.len += 1;
        true
    }

    /// Pops the frame whose slot is `slot`, first popping dead frames above
    /// it (deeper, lower slots). Returns the frame and its depth; `None` if
    /// there is no such frame.
    #[inline]
    pub fn pop_returning(
        &mut self,
        slot: usize,
        mut vanished: impl FnMut(&Frame, usize),
    ) -> Option<(Frame, usize)> {
        while self.len > 0 {
            let top = self.frames[self.len - 1];
            self.len -= 1;
            if top.slot == slot {
                return Some((top, self.len));
            }
            if top.slot > slot {
                // Not ours and older: put it back; the slot is unknown.
                self.len += 1;
                return None;
            }
            self.vanish(&top, &mut vanished);
        }
        None
    }

    /// Accounts for `frame`, just popped, that left without returning
    /// through the trampoline: reported to `vanished`, unless it was
    /// unhooked for an unwind (when it left is unknown).
    fn vanish(&mut self, frame: &Frame, vanished: &mut impl FnMut(&Frame, usize)) {
        VANISHED.fetch_add(1, Ordering::Relaxed);
        if self.len < self.unhooked {
            self.unhooked = self.len;
        } else {
            vanished(frame, self.len);
        }
    }

    /// Before an unwinder walks the stack for an exception: every frame
    /// gets its real return address back and is marked unhooked.
    pub fn unhook_for_unwinding(&mut self) {
        self.unhook_all(false);
        self.unhooked = self.len;
    }

    /// The unwinder is about to land in the frame whose return address
    /// lives at `landing_slot`: frames whose slots are below it were unwound
    /// (reported to `vanished`); the unhooked frames from there up are live
    /// and hooked again. (A slot far below is on another stack and stays.)
    pub fn resync_at_landing(
        &mut self,
        landing_slot: usize,
        mut vanished: impl FnMut(&Frame, usize),
    ) {
        while self.len > 0 {
            let top = self.frames[self.len - 1];
            if top.slot >= landing_slot || landing_slot - top.slot > OTHER_STACK_DISTANCE {
                break;
            }
            self.len -= 1;
            VANISHED.fetch_add(1, Ordering::Relaxed);
            vanished(&top, self.len);
        }
        let unhooked = self.unhooked.min(self.len);
        self.unhooked = 0;
        self.hook_where_real(0..unhooked);
    }

    /// Writes every hooked frame's real return address back into its slot
    /// (where the slot still holds the trampoline). With `forget`, the frames
    /// are dropped: their exits will not be seen.
    pub fn unhook_all(&mut self, forget: bool) {
        let trampoline = return_trampoline();
        for frame in self.frames[..self.len].iter().rev() {
            // SAFETY: slot is a return-address slot on this thread's stack
            // that was live when hooked; it is only written if it still
            // holds the trampoline (the frame is still there).
            unsafe {
                let slot = frame.slot as *mut usize;
                if slot.read() == trampoline {
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

    /// Puts the trampoline back into every hooked frame's slot that still
    /// holds the frame's real return address (after [`Self::unhook_all`]
    /// without forgetting). Frames unhooked for an unwind stay so.
    pub fn rehook_all(&mut self) {
        self.hook_where_real(self.unhooked.min(self.len)..self.len);
    }

    fn hook_where_real(&mut self, frames: std::ops::Range<usize>) {
        let trampoline = return_trampoline();
        for frame in self.frames[frames].iter() {
            // SAFETY: as in unhook_all; only slots still holding this frame's
            // real return address are written.
            unsafe {
                let slot = frame.slot as *mut usize;
                if slot.read() == frame.real_return {
                    slot.write(trampoline);
                }
            }
        }
    }
}
