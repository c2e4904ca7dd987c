//! Stack switches (`swapcontext`, stackful coroutines) and frames given up
//! for dead that come back.
//!
//! A thread that switches between stacks runs several chains of hooked
//! frames in turns. The shadow stack's active part must hold only the chain
//! that is running: the depth of a call is the number of active frames below
//! it (the graph tracer's fast paths in asm read it so), and a frame's exit
//! is matched at the top. So the frames of a chain that stops running are
//! *parked* — moved aside with their depths, as one segment — and brought
//! back when one of them returns:
//!
//! - Leaving: a call (or a return) on a stack whose newest hooked frame lies
//!   under frames of another stack parks those frames. A new context's
//!   first frames (no frame of theirs is active or parked) nest under the
//!   frame that switched to it, as the source reads: `resume()` runs the
//!   coroutine.
//! - Coming back: a hooked return whose slot is parked, or a call on a
//!   stack whose frames are parked, restores the segment at its old depths,
//!   parking the running chain's frames at those depths first.
//!
//! Entries the graph tracer's fast path handles in asm (the top frame lies
//! above the new slot) are not seen here; the next one that is, or the
//! next return, puts the stack right.
//!
//! Which slots share a stack is `contexts::same_stack`'s answer: the same
//! noted `makecontext` stack, or else near each other. A switch between
//! stacks it cannot tell apart looks like a `longjmp`: frames are taken
//! for dead and reported as vanished. Such a frame may still return:
//! every frame taken off the stack without returning while its slot may
//! still hold the trampoline is remembered (slot, real return address) in a
//! ring, the *limbo*, and a return through a remembered slot goes back to
//! its real address (its exit was reported already). A frame that leaves
//! the limbo, [`LIMBO_SIZE`] give-ups later, gets its real return address
//! back in its slot if the slot still holds the trampoline (and no live or
//! parked frame owns it): if it ever returns, it goes straight to its
//! caller. The slot is read and written with `process_vm_readv` /
//! `process_vm_writev`, which fail instead of faulting on memory that is
//! gone (a freed coroutine stack).

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Frame, ShadowStack, Toward};
use crate::rt::contexts::same_stack;

/// Frames of suspended stacks kept per thread at most; beyond, the oldest
/// segment goes to the limbo (its exits will not be reported).
pub(crate) const MAX_PARKED: usize = 1024;
/// Frames given up for dead remembered per thread.
pub(crate) const LIMBO_SIZE: usize = 1024;

/// Parkings and restorings of hooked frames at stack switches.
pub(crate) static SWITCHES: AtomicU64 = AtomicU64::new(0);
/// Hooked returns whose frame was not where the shadow stack expected it
/// (deeper than the top, or given up for dead), resynchronised.
pub(crate) static RESYNCS: AtomicU64 = AtomicU64::new(0);

/// A frame of a suspended stack.
#[derive(Clone, Copy)]
#[repr(C)]
struct Parked {
    frame: Frame,
    /// Its index in the active stack when it was parked.
    depth: usize,
    /// Frames parked together come back together.
    segment: usize,
}

/// A frame given up for dead whose slot may still hold the trampoline.
#[derive(Clone, Copy)]
#[repr(C)]
struct Remembered {
    slot: usize,
    real_return: usize,
    hook: usize,
}

/// The parked frames and the limbo of one thread. All zeroes is empty (the
/// shadow stack is made from zeroed memory).
#[repr(C)]
pub(crate) struct Parking {
    len: usize,
    next_segment: usize,
    frames: [Parked; MAX_PARKED],
    /// One more than the segment being brought back (never dropped to make
    /// room), 0 when none is.
    restoring: usize,
    /// Frames ever remembered; the ring index of the next one.
    remembered: usize,
    limbo: [Remembered; LIMBO_SIZE],
}

/// Whether a frame at `other` lies on the same stack as `slot` and deeper
/// (a frame that cannot be live while `slot`'s is running, or is returning).
#[inline]
pub(super) fn dead_below(other: usize, slot: usize) -> bool {
    other <= slot && same_stack(other, slot)
}

impl ShadowStack {
    /// Before pushing a frame at `slot`: when the top frame lies on another
    /// stack, the thread may have come back to `slot`'s stack. If an older
    /// active frame lies on it above `slot` (the caller chain the thread
    /// came back to), the frames above that one belong to the stack left:
    /// they are parked. Else, if a parked chain lies on it above `slot` (a
    /// resumed stack calling before it returns), it comes back. Else `slot`
    /// starts a new stack (a context's first function, a signal handler on
    /// its own stack): it nests under the top frame.
    pub fn leave_other_stacks(&mut self, slot: usize) {
        let Some(top) = self.frames[..self.len].last() else {
            return;
        };
        if same_stack(top.slot, slot) {
            return;
        }
        let on_this_stack = |other: usize| other > slot && same_stack(other, slot);
        if let Some(ancestor) = self.frames[..self.len]
            .iter()
            .rposition(|f| on_this_stack(f.slot))
        {
            self.park_from(ancestor + 1);
        } else if let Some(parked) = self.parking.frames[..self.parking.len]
            .iter()
            .rposition(|p| on_this_stack(p.frame.slot))
        {
            self.restore_segment(parked);
        }
    }

    /// Pops the frame whose slot is `slot` (returning now), or else one dead
    /// frame above it (deeper, lower slot): call again until it is found or
    /// missing. Frames of other stacks above it are parked, a parked frame
    /// is brought back with its segment, a frame given up earlier is
    /// `Remembered`.
    pub fn pop_toward(&mut self, slot: usize) -> Toward {
        if let Some(&top) = self.frames[..self.len].last() {
            if top.slot == slot {
                self.len -= 1;
                return Toward::Found(top, self.len);
            }
            if let Some(index) = self.frames[..self.len].iter().rposition(|f| f.slot == slot) {
                self.park_live_above(index, slot);
                let top = self.frames[self.len - 1];
                self.len -= 1;
                return if top.slot == slot {
                    Toward::Found(top, self.len)
                } else {
                    Toward::Gone(self.gone(top))
                };
            }
        }
        if self.restore_parked(slot) {
            return self.pop_toward(slot);
        }
        match self.forget_remembered(slot) {
            Some(real_return) => {
                RESYNCS.fetch_add(1, Ordering::Relaxed);
                Toward::Remembered(real_return)
            }
            None => Toward::Missing,
        }
    }

    /// Remembers a frame taken off the stack without returning, whose slot
    /// may still hold the trampoline.
    pub(super) fn remember(&mut self, frame: &Frame) {
        let leaving = self.parking.limbo[self.parking.remembered % LIMBO_SIZE];
        if leaving.slot != 0 {
            self.unhook_forgotten(leaving);
        }
        let parking = &mut self.parking;
        parking.limbo[parking.remembered % LIMBO_SIZE] = Remembered {
            slot: frame.slot,
            real_return: frame.real_return,
            hook: frame.hook,
        };
        parking.remembered = parking.remembered.wrapping_add(1);
    }

    /// A frame leaving the limbo: its real return address goes back into
    /// its slot if the slot still holds the trampoline and no active or
    /// parked frame owns it (counted as a resynchronisation).
    fn unhook_forgotten(&self, forgotten: Remembered) {
        let slot = forgotten.slot;
        let owned = self.frames[..self.len].iter().any(|f| f.slot == slot)
            || self.parking.frames[..self.parking.len]
                .iter()
                .any(|p| p.frame.slot == slot);
        if owned || read_word(slot) != Some(forgotten.hook) {
            return;
        }
        if write_word(slot, forgotten.real_return) {
            RESYNCS.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The frame at `index` is returning: of the frames above it, those on
    /// its stack below it died; the others are on other stacks and are
    /// parked (one segment), the dead ones left above it to be popped.
    fn park_live_above(&mut self, index: usize, slot: usize) {
        let mut kept = index + 1;
        let segment = self.parking.next_segment;
        let mut parked = 0;
        for depth in index + 1..self.len {
            let frame = self.frames[depth];
            if dead_below(frame.slot, slot) {
                self.frames[kept] = frame;
                kept += 1;
            } else {
                self.park_one(frame, depth, segment);
                parked += 1;
            }
        }
        if parked != 0 {
            self.parking.next_segment = segment.wrapping_add(1);
            self.len = kept;
            self.unhooked = self.unhooked.min(self.len);
            RESYNCS.fetch_add(1, Ordering::Relaxed);
            SWITCHES.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Parks `frames[from..]` as one segment.
    fn park_from(&mut self, from: usize) {
        if from >= self.len {
            return;
        }
        let segment = self.parking.next_segment;
        self.parking.next_segment = segment.wrapping_add(1);
        for depth in from..self.len {
            let frame = self.frames[depth];
            self.park_one(frame, depth, segment);
        }
        self.len = from;
        self.unhooked = self.unhooked.min(self.len);
        SWITCHES.fetch_add(1, Ordering::Relaxed);
    }

    fn park_one(&mut self, frame: Frame, depth: usize, segment: usize) {
        if self.parking.len == MAX_PARKED && !self.drop_oldest_segment() {
            // Only the segment being brought back is parked, and it is
            // full: this frame is given up instead.
            super::VANISHED.fetch_add(1, Ordering::Relaxed);
            self.remember(&frame);
            return;
        }
        let parking = &mut self.parking;
        parking.frames[parking.len] = Parked {
            frame,
            depth,
            segment,
        };
        parking.len += 1;
    }

    /// Makes room: the oldest parked segment (but the one being brought
    /// back) is given up, into the limbo. False if there is none.
    fn drop_oldest_segment(&mut self) -> bool {
        let restoring = self.parking.restoring;
        let parking = &self.parking;
        let Some(oldest) = parking.frames[..parking.len]
            .iter()
            .map(|p| p.segment)
            .find(|&segment| segment.wrapping_add(1) != restoring)
        else {
            return false;
        };
        let mut kept = 0;
        for index in 0..self.parking.len {
            let parked = self.parking.frames[index];
            if parked.segment == oldest {
                super::VANISHED.fetch_add(1, Ordering::Relaxed);
                self.remember(&parked.frame);
            } else {
                self.parking.frames[kept] = parked;
                kept += 1;
            }
        }
        self.parking.len = kept;
        true
    }

    /// If a parked frame has `slot`, its stack is running again: see
    /// [`Self::restore_segment`]. True if found.
    fn restore_parked(&mut self, slot: usize) -> bool {
        let parking = &self.parking;
        match parking.frames[..parking.len]
            .iter()
            .rposition(|p| p.frame.slot == slot)
        {
            Some(found) => {
                self.restore_segment(found);
                RESYNCS.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// The segment of the parked frame at `found` goes back on the active
    /// stack at its old depths (the active frames at those depths are
    /// parked first: their stack was left).
    fn restore_segment(&mut self, found: usize) {
        let parking = &self.parking;
        let segment = parking.frames[found].segment;
        let base = parking.frames[..parking.len]
            .iter()
            .filter(|p| p.segment == segment)
            .map(|p| p.depth)
            .min()
            .unwrap_or(0);
        // The running chain's frames at the segment's depths were left by
        // the switch. (A segment parked deeper than the running chain now is
        // comes back at the chain's top: its depths shift.)
        self.parking.restoring = segment.wrapping_add(1);
        self.park_from(base);
        self.parking.restoring = 0;
        let mut kept = 0;
        for index in 0..self.parking.len {
            let parked = self.parking.frames[index];
            if parked.segment == segment {
                // Parked in depth order; never more than the active stack held.
                self.frames[self.len] = parked.frame;
                self.len += 1;
            } else {
                self.parking.frames[kept] = parked;
                kept += 1;
            }
        }
        self.parking.len = kept;
        SWITCHES.fetch_add(1, Ordering::Relaxed);
    }

    /// The real return address remembered for `slot` (the newest), which is
    /// forgotten.
    fn forget_remembered(&mut self, slot: usize) -> Option<usize> {
        let parking = &mut self.parking;
        let count = parking.remembered.min(LIMBO_SIZE);
        (1..=count).find_map(|back| {
            let index = parking.remembered.wrapping_sub(back) % LIMBO_SIZE;
            let entry = &mut parking.limbo[index];
            (entry.slot == slot).then(|| {
                entry.slot = 0;
                entry.real_return
            })
        })
    }
}

/// The word at `address` of this process, or `None` where nothing is
/// mapped (no fault: `process_vm_readv`).
fn read_word(address: usize) -> Option<usize> {
    let mut word = 0usize;
    let local = libc::iovec {
        iov_base: (&raw mut word).cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: 8,
    };
    let _errno = crate::rt::thread::PreservedErrno::save();
    // SAFETY: the local iovec covers `word`; the kernel checks the remote
    // one and fails (EFAULT) on unmapped memory instead of faulting.
    let read = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (read == 8).then_some(word)
}

/// Writes `word` at `address` of this process; false where nothing
/// writable is mapped (no fault: `process_vm_writev`).
fn write_word(address: usize, word: usize) -> bool {
    let local = libc::iovec {
        iov_base: (&raw const word).cast_mut().cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: 8,
    };
    let _errno = crate::rt::thread::PreservedErrno::save();
    // SAFETY: as in read_word; the kernel reads `word` and checks the
    // remote range. The caller found the trampoline there: a stack slot of
    // a frame given up long ago, which nothing else owns.
    let written = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    written == 8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> Box<ShadowStack> {
        // SAFETY: all zeroes is an empty ShadowStack (see `Parking`).
        unsafe { Box::<ShadowStack>::new_zeroed().assume_init() }
    }

    fn frame(slot: usize) -> Frame {
        Frame {
            slot,
            real_return: slot + 1,
            site: 0,
            entry_ticks: 0,
            exit_tracers: 1,
            marks: 0,
            hook: super::super::return_trampoline(),
            kept: 0,
        }
    }

    fn slots(stack: &mut ShadowStack) -> Vec<usize> {
        stack.frames().iter().map(|f| f.slot).collect()
    }

    // The thread's stack high up, a coroutine's far below (a static array).
    const MAIN: usize = 0x7fff_0000_0000;
    const CO: usize = 0x5555_0000_0000;

    #[test]
    fn a_stack_left_is_parked_and_comes_back_at_its_depths() {
        let mut stack = empty();
        // main → resume, which switched to the coroutine: body → yield.
        for slot in [MAIN, MAIN - 0x100, CO, CO - 0x100] {
            assert!(stack.push(frame(slot)));
        }
        // Back in resume, which calls something: the coroutine is parked.
        stack.leave_other_stacks(MAIN - 0x200);
        assert_eq!(slots(&mut stack), [MAIN, MAIN - 0x100]);
        assert!(matches!(
            stack.pop_toward(MAIN - 0x100),
            Toward::Found(_, 1)
        ));
        // A second resume (same slot) switches back; yield returns.
        assert!(stack.push(frame(MAIN - 0x100)));
        match stack.pop_toward(CO - 0x100) {
            Toward::Found(found, depth) => assert_eq!((found.slot, depth), (CO - 0x100, 3)),
            _ => panic!("the parked frame was not brought back"),
        }
        assert_eq!(slots(&mut stack), [MAIN, MAIN - 0x100, CO]);
    }

    #[test]
    fn a_returning_frame_under_another_stacks_frames_parks_them() {
        let mut stack = empty();
        for slot in [MAIN, MAIN - 0x100, CO] {
            assert!(stack.push(frame(slot)));
        }
        // resume returns with the coroutine's frame above it.
        assert!(matches!(
            stack.pop_toward(MAIN - 0x100),
            Toward::Found(_, 1)
        ));
        assert_eq!(slots(&mut stack), [MAIN]);
        assert_eq!(stack.parking.len, 1);
        // Frames of its own stack above it died (a longjmp): reported.
        assert!(stack.push(frame(MAIN - 0x100)));
        assert!(stack.push(frame(MAIN - 0x200)));
        assert!(matches!(stack.pop_toward(MAIN - 0x100), Toward::Gone(_)));
        assert!(matches!(
            stack.pop_toward(MAIN - 0x100),
            Toward::Found(_, 1)
        ));
    }

    #[test]
    fn a_frame_given_up_for_dead_returns_to_its_real_caller() {
        let mut stack = empty();
        assert!(stack.push(frame(MAIN)));
        assert!(stack.push(frame(MAIN - 0x100)));
        // An entry above it (a stack switch that looks like a longjmp).
        let gone = stack.pop_dead_below(MAIN - 0x80).expect("taken for dead");
        assert_eq!(gone.frame.slot, MAIN - 0x100);
        match stack.pop_toward(MAIN - 0x100) {
            Toward::Remembered(real) => assert_eq!(real, MAIN - 0x100 + 1),
            _ => panic!("not remembered"),
        }
        // Once only, and nothing is known of a slot never hooked.
        assert!(matches!(stack.pop_toward(MAIN - 0x100), Toward::Missing));
    }

    #[test]
    fn a_frame_leaving_the_limbo_gets_its_real_return_address_back() {
        let mut stack = empty();
        // Two slots in real memory, holding the trampoline as hooked
        // frames' slots do, and one address where nothing is mapped.
        let trampoline = super::super::return_trampoline();
        // Atomics: memory the kernel writes behind the compiler's back.
        let slots = [
            AtomicU64::new(trampoline as u64),
            AtomicU64::new(trampoline as u64),
        ];
        let addresses = slots.each_ref().map(|slot| slot.as_ptr() as usize);
        let unmapped = 8usize;
        for slot in [addresses[0], unmapped, addresses[1]] {
            assert!(stack.push(frame(slot)));
            assert!(stack.pop_dead_below(slot + 8).is_some());
        }
        // The second real slot's frame is live again (parked: another
        // stack's frame with the same slot).
        stack.parking.frames[0].frame = frame(addresses[1]);
        stack.parking.len = 1;
        // LIMBO_SIZE more give-ups push the three out.
        for i in 0..LIMBO_SIZE {
            assert!(stack.push(frame(MAIN - 16 * i)));
            assert!(stack.pop_dead_below(MAIN).is_some());
        }
        let now = slots
            .each_ref()
            .map(|slot| slot.load(Ordering::Relaxed) as usize);
        assert_eq!(
            now[0],
            addresses[0] + 1,
            "not given its real return address"
        );
        assert_eq!(now[1], trampoline, "a parked frame's slot was written");
    }

    #[test]
    fn a_full_parking_gives_up_its_oldest_segment_into_the_limbo() {
        let mut stack = empty();
        let segments = MAX_PARKED / 8 + 1;
        for segment in 0..segments {
            // One frame on the thread's stack, eight on a coroutine's.
            stack.len = 0;
            assert!(stack.push(frame(MAIN)));
            for i in 0..8 {
                assert!(stack.push(frame(CO + segment * 0x10000 - i * 0x10)));
            }
            stack.leave_other_stacks(MAIN - 0x100);
        }
        assert!(stack.parking.len <= MAX_PARKED);
        // The first segment's top frame is in the limbo now.
        assert!(matches!(
            stack.pop_toward(CO - 7 * 0x10),
            Toward::Remembered(_)
        ));
    }
}
