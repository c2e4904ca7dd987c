//! Per-thread event rings: one writer (the traced thread), one reader.
//!
//! A thread that records its first event claims a ring from its tracer's
//! pool: a free one if there is one (rings of exited threads are freed by
//! the reader and reused), else a new `mmap` (async-signal-safe; the kernel
//! commits pages only as they are touched).
//!
//! A thread that exits marks its rings [`EXITED`] (`rt::thread`'s exit
//! hook, after it stopped tracing the thread): the next drain takes their
//! last events and frees them at once, for the next thread to reuse. (A
//! ring whose owner died without the hook, or claimed one after it, is
//! found by the reader: idle across two drains, and `tgkill` says the
//! thread is gone.) A freed ring's next owner starts writing at its first
//! slot, so that a ring reused by thread after thread keeps the pages of
//! its busiest owner, not one more stretch of pages per owner. After each
//! drain (and each [`Peek`] consumed), free rings beyond the few kept warm
//! for the next threads give their pages back, so that thread churn
//! costs the rings live threads use, not one ring's pages per thread. A
//! pool no reader drains periodically keeps at most 64 exited threads'
//! rings undrained: past that, a thread that needs a ring takes one of
//! them, its events counted lost (a tracer enabled where nothing reads
//! it must not hold a ring per thread that ever lived). Rings form a list that only
//! grows and are never unmapped, so a pointer to one stays valid for the
//! life of the process; there is no cap on threads. [`RingPool::release_memory`]
//! gives the pages of free rings back to the kernel, and those of live
//! threads' rings when the tracer is off (see there why that is safe).
//!
//! Page faults stay off the traced path when a reader asks for it
//! ([`RingPool::keep_ready`]): it keeps a few free rings with every page
//! present, and after each drain makes the pages ahead of each owner's
//! head present (`MADV_POPULATE_WRITE`), so that a thread's first pass over
//! its ring does not fault on every page.
//!
//! The writer appends at `head`, the reader consumes at `tail`; when the
//! ring is full the event is dropped and counted, never blocking the traced
//! thread (drop mode); in lossless mode the ring takes more of the pool's
//! memory budget, and its owner waits for the reader only when none is
//! left (`budget`, `room`). Drops are counted by the writer alone (a plain increment, also
//! from asm) and the reader remembers how many it has reported.
//!
//! Orderings: the writer's Release store of `head` pairs with the reader's
//! Acquire load (the event bytes are visible before the reader reads them);
//! the reader's Release store of `tail` pairs with the writer's Acquire load
//! (a slot is reused only after the reader is done with it).

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::own_threads;
use crate::sys;

mod budget;
mod drain;
mod exits;
mod making;
mod memory;
mod peek;
mod room;

use exits::{free_drained, Exits, MAX_EXITED_KEPT};
pub(crate) use exits::{mark_exited, wait_for_reader, PeriodicReader, RingState};
pub use memory::Released;
use memory::PREFAULT_MIN;
pub use peek::Peek;
pub use room::{Room, RoomStats};

/// Default events per thread ring (the memory is reserved, not committed:
/// pages count only once events reach them).
pub const DEFAULT_RING_EVENTS: usize = 1 << 20;

/// A ring no thread owns (never used, or its thread exited).
const FREE: u32 = 0;
/// A ring a live thread writes.
const OWNED: u32 = 1;
/// A free ring the reader holds while it gives its pages back (no thread
/// can claim it meanwhile).
const RESERVED: u32 = 2;
/// A ring a thread has just claimed and is making its own: readers leave
/// it alone until it is [`OWNED`], by when its owner's id is written (read
/// earlier, the previous owner's id would make a reader free the ring of a
/// live thread whose first event is still to come).
const CLAIMING: u32 = 3;
/// A ring whose owner exited (its thread-exit hook said so, after its last
/// write): the reader drains it and frees it.
const EXITED: u32 = 4;

/// A transparent huge page (x86-64).
const HUGE_PAGE: usize = 2 << 20;
/// The page size (x86-64 Linux, the only target).
const PAGE: usize = 4096;

/// Free rings whose pages the reader keeps (at least; or as many as it
/// keeps ready): the next threads to start take them warm. The pages of
/// the other free rings go back to the kernel after each drain.
const WARM_FREE_RINGS: usize = 2;

/// One thread's ring.
#[repr(C)]
pub struct Ring<T: Copy> {
    // Writer and reader indices on their own cache lines: the traced thread
    // writes head on every event, the reader writes tail; sharing a line
    // would bounce it between cores.
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
    /// Events dropped because the ring was full, since it was made. Written
    /// by the owner only (plain increments, also from asm).
    dropped: AtomicU64,
    /// How many of `dropped` the reader has reported. Reader only.
    dropped_reported: AtomicU64,
    tid: AtomicU32,
    /// The owner's name when it claimed the ring (`PR_GET_NAME`, NUL-padded).
    name: [AtomicU64; 2],
    capacity: usize,
    slots: *mut UnsafeCell<T>,
    /// Events at which the fast paths (asm) hand events to the generic path
    /// ([`Ring::push`]): while the pool is lossless, half a chunk short of
    /// what the ring holds of the memory budget (see `budget`; half the
    /// capacity without a budget), so that the ring takes more, and the
    /// reader is asked for a drain, before it is full; never otherwise
    /// (see `room`). Set by the pool and the owner.
    fast_limit: AtomicUsize,
    /// The ring made before this one (the pool's list).
    next: *const Ring<T>,
    /// [`FREE`], [`CLAIMING`], [`OWNED`], [`EXITED`] or [`RESERVED`]
    /// (after the fields the fast paths use, whose offsets are fixed).
    state: RingState,
    /// The writer's head at the reader's previous drain: a ring whose head
    /// did not move is checked for a dead owner. Reader only.
    head_at_last_drain: AtomicUsize,
    /// The owner's thread block (`rt::thread::ThreadBlock`), whose first
    /// byte is its recursion guard: set whenever the owner writes this
    /// ring. Read by [`RingPool::release_memory`] only.
    owner_block: AtomicUsize,
    /// Events `[prefaulted_from, prefaulted_to)` (indices, as head) have
    /// their slots' pages present: the reader made them so. Reader only.
    prefaulted_from: AtomicUsize,
    /// See `prefaulted_from`.
    prefaulted_to: AtomicUsize,
    /// The writer's head when the slot pages were last given back (or
    /// the ring made): the owner has touched pages since when head moved.
    /// Reader only.
    head_at_give_back: AtomicUsize,
    /// Events of the memory budget this ring holds: its owner may run
    /// ahead of the reader by that many in lossless mode (see `budget`).
    /// Raised by the owner, lowered by the reader.
    held: AtomicUsize,
    /// The most this ring may hold: its capacity, less a window for a
    /// ring whose pages behind the tail are given back.
    max_held: usize,
    /// Events consumed before the drain gives their pages back (0: never,
    /// a ring of a buffer's size, which wraps soon).
    window: usize,
    /// The unit of memory given back: 2 MiB for a ring whose window is at
    /// least that (its slots are backed by transparent huge pages where
    /// the kernel has them), else a page.
    give_back_unit: usize,
    /// Events before this index had their slots' pages given back after a
    /// drain (all but the page holding this one's slot). Reader only.
    given_back_to: AtomicUsize,
    /// The reader asks the owner to wrap early: at its next event, if the
    /// ring is empty, the owner moves head and tail on to the next lap's
    /// first slot (see `budget`). Set by the reader (which also lowers the
    /// fast limit to 0, so that the next event takes the generic path),
    /// cleared by the owner.
    wrap_wanted: AtomicBool,
    /// The ring was claimed while fntrace was starting a thread of its
    /// own: not drained until its owner is known (see `own_threads`).
    claimed_while_spawning: AtomicBool,
}

#[repr(align(64))]
struct CachePadded<T>(T);

// The graph tracer's fast paths write its rings from asm (layout.h). The
// header's layout does not depend on the event type (only `slots` points
// at events).
const _: () = {
    type AnyRing = Ring<[u64; 2]>;
    assert!(std::mem::offset_of!(AnyRing, head) == 0);
    assert!(std::mem::offset_of!(AnyRing, tail) == 64);
    assert!(std::mem::offset_of!(AnyRing, dropped) == 128);
    assert!(std::mem::offset_of!(AnyRing, capacity) == 168);
    assert!(std::mem::offset_of!(AnyRing, slots) == 176);
    assert!(std::mem::offset_of!(AnyRing, fast_limit) == 184);
};

impl<T: Copy> Ring<T> {
    /// Appends `event`. When the ring holds its fast limit of events, a
    /// lossless pool's `room` takes more of the memory budget for it, or
    /// waits for the reader to make some (see `budget` and `room`);
    /// otherwise, a full ring drops the event and counts it.
    ///
    /// # Safety
    /// Only the ring's owner (the thread that claimed it) calls this: the
    /// ring has a single writer.
    #[inline]
    pub unsafe fn push(&self, event: T, room: &Room) {
        let mut head = self.head.0.load(Ordering::Relaxed);
        let mut used = head.wrapping_sub(self.tail.0.load(Ordering::Acquire));
        if used >= self.fast_limit.load(Ordering::Relaxed)
            && self.wrap_wanted.load(Ordering::Relaxed)
        {
            head = self.wrap_if_empty(room, head);
            used = head.wrapping_sub(self.tail.0.load(Ordering::Acquire));
        }
        if used >= self.fast_limit.load(Ordering::Relaxed) {
            if room.is_lossless() && room.budget.is_set() {
                if self.take_room(room, head) {
                    used = 0;
                } else if room.is_lossless() {
                    // The wait gave up: past what the ring holds, the
                    // event would land where the reader gives pages back.
                    used = self.capacity;
                }
                // (Else the pool left lossless mode meanwhile: as in drop
                // mode, the event goes in if the ring has room.)
            } else {
                room.ask_reader();
                // Asked once: the fast paths go on up to the capacity (the
                // reader lowers the limit again when it drains this ring).
                self.fast_limit.store(self.capacity, Ordering::Relaxed);
                if used >= self.capacity && room.is_lossless() && room.wait_for_room(self, head) {
                    used = 0;
                }
            }
        }
        if used >= self.capacity {
            // Single writer: a load and a store, as the asm does.
            let dropped = self.dropped.load(Ordering::Relaxed);
            self.dropped.store(dropped + 1, Ordering::Relaxed);
            return;
        }
        // SAFETY: slot head % capacity is inside the mapping, and the reader
        // does not read it until head is published below (single writer,
        // the caller's contract).
        unsafe {
            (*self.slots.add(head & (self.capacity - 1)))
                .get()
                .write(event)
        };
        self.head.0.store(head.wrapping_add(1), Ordering::Release);
    }

    /// Whether the owner of a ring in `state` is gone: it said so at its
    /// exit ([`EXITED`]), or the ring was `idle` since the previous read
    /// and the thread no longer exists. Reader only.
    fn owner_gone(&self, state: u32, idle: bool, pid: i32) -> bool {
        state == EXITED || (idle && sys::tgkill(pid, self.tid() as i32, 0) == Err(libc::ESRCH))
    }

    /// Kernel thread id of the owner.
    pub fn tid(&self) -> u32 {
        self.tid.load(Ordering::Relaxed)
    }

    /// Events dropped because the ring was full, since it was made.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn name(&self) -> String {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.name[0].load(Ordering::Relaxed).to_le_bytes());
        bytes[8..].copy_from_slice(&self.name[1].load(Ordering::Relaxed).to_le_bytes());
        let len = bytes.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&bytes[..len]).into_owned()
    }

    /// Makes the calling thread (`tid`) the owner. Async-signal-safe.
    fn take_over(&self, tid: u32) {
        let mut name = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes into the buffer; it is
        // a plain system call (async-signal-safe).
        unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
        let word = |i: usize| u64::from_le_bytes(name[i..i + 8].try_into().unwrap_or_default());
        self.name[0].store(word(0), Ordering::Relaxed);
        self.name[1].store(word(8), Ordering::Relaxed);
        let block = super::thread::thread_block() as *const super::thread::ThreadBlock;
        self.owner_block.store(block as usize, Ordering::Relaxed);
        self.claimed_while_spawning
            .store(super::own_threads::spawning(), Ordering::Relaxed);
        // Before any event: the reader sees it once it sees the events
        // (they are published by a Release store of head).
        self.tid.store(tid, Ordering::Relaxed);
    }
}

/// What one thread's ring held.
pub struct Drained<T> {
    /// Kernel thread id of the writer.
    pub tid: u32,
    /// The writer's thread name when it recorded its first event.
    pub name: String,
    /// The events, oldest first.
    pub events: Vec<T>,
    /// Events this ring dropped since the previous drain (after `events`).
    pub dropped: u64,
}

/// Part of one ring's drain, as [`RingPool::drain_each`] passes it.
pub struct Batch<'a, T> {
    /// Which ring (an index, stable for the pool's life).
    pub ring: usize,
    /// Kernel thread id of the ring's owner.
    pub tid: u32,
    /// The owner's name.
    pub name: &'a str,
    /// Events, oldest first (a run of slots).
    pub events: &'a [T],
    /// Events dropped after these (non-zero only with no events).
    pub dropped_after: u64,
}

/// A pool of per-thread rings for one kind of event.
pub struct RingPool<T: Copy + 'static> {
    /// The newest ring; each points to the one made before it.
    newest: AtomicPtr<Ring<T>>,
    capacity: AtomicUsize,
    /// Rings made (mapped) so far.
    made: AtomicUsize,
    /// Events lost because no ring could be had (no memory).
    unbuffered: AtomicU64,
    /// Serialises readers. Taken only under the operation lock (`ops`), so
    /// it is never held across a `fork`.
    reader: Mutex<()>,
    /// Free rings with every page present the reader keeps (0: no
    /// prefaulting at all); see [`RingPool::keep_ready`].
    ready_wanted: AtomicUsize,
    /// `MADV_POPULATE_WRITE` failed once (a kernel before 5.14): rings
    /// claimed cold then fault on the traced path.
    cannot_prefault: AtomicBool,
    /// Lossless mode and its waits (see `room`).
    room: Room,
    /// Exited threads' rings and periodic readers (see [`Exits`]).
    exits: &'static Exits,
    /// Events of exited threads dropped, unread, when their ring was
    /// taken for a new thread (see [`MAX_EXITED_KEPT`]).
    discarded: AtomicU64,
    _marker: PhantomData<T>,
}

// SAFETY: rings are shared through atomics; each is written by one thread
// and read by readers serialised with `reader`.
unsafe impl<T: Copy + Send> Sync for RingPool<T> {}
// SAFETY: as above.
unsafe impl<T: Copy + Send> Send for RingPool<T> {}

impl<T: Copy + Send + 'static> Default for RingPool<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Send + 'static> RingPool<T> {
    /// An empty pool.
    pub fn new() -> Self {
        RingPool {
            newest: AtomicPtr::new(ptr::null_mut()),
            capacity: AtomicUsize::new(DEFAULT_RING_EVENTS),
            made: AtomicUsize::new(0),
            unbuffered: AtomicU64::new(0),
            reader: Mutex::new(()),
            ready_wanted: AtomicUsize::new(0),
            cannot_prefault: AtomicBool::new(false),
            room: Room::new(),
            // One small allocation per pool, never freed: rings point to it.
            exits: Box::leak(Box::new(Exits {
                undrained: AtomicUsize::new(0),
                periodic_readers: AtomicUsize::new(0),
            })),
            discarded: AtomicU64::new(0),
            _marker: PhantomData,
        }
    }

    /// Events per ring for threads that claim a ring from now on (rounded
    /// up to a power of two: a mask, not a division, finds the slot). Free
    /// rings of another size are not claimed: a recording that asked for
    /// larger buffers gets them (their pages are given back by
    /// [`RingPool::release_memory`]; their address space stays mapped).
    pub fn set_ring_capacity(&self, events: usize) {
        self.capacity.store(
            events.clamp(16, 1 << 40).next_power_of_two(),
            Ordering::Relaxed,
        );
    }

    /// The memory budget of lossless mode (see `budget`): the rings may
    /// hold `total` events together, each at least `base` (one buffer)
    /// whatever the budget has left, taking `base / 2` at a time beyond
    /// that. Rings made from now on with a capacity of at least four
    /// buffers give back the pages of what the reader consumed. What
    /// rings hold already stays theirs. `base` 0 removes the budget.
    pub fn set_memory_budget(&self, total: usize, base: usize) {
        self.room.budget.configure(total, base);
    }

    /// Rings mapped so far: at most one per thread alive at the same time,
    /// plus those [`RingPool::keep_ready`] keeps.
    pub fn rings_made(&self) -> usize {
        self.made.load(Ordering::Relaxed)
    }

    /// Claims a ring for the calling thread: a free one, or a new one.
    /// `None` when memory cannot be mapped; the event is then counted as
    /// lost. Async-signal-safe.
    #[cold]
    pub fn claim(&self, tid: u32) -> Option<&Ring<T>> {
        let _errno = super::thread::PreservedErrno::save();
        let capacity = self.capacity.load(Ordering::Relaxed);
        let (mut exited, mut oldest_exited) = (0, None);
        for ring in self.rings() {
            if ring.capacity != capacity {
                continue;
            }
            if ring
                .state
                .compare_exchange(FREE, CLAIMING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Some(self.make_owned(ring, tid));
            }
            if ring.state.load(Ordering::Relaxed) == EXITED {
                exited += 1;
                oldest_exited = Some(ring);
            }
        }
        if exited > MAX_EXITED_KEPT && self.exits.periodic_readers.load(Ordering::Relaxed) == 0 {
            if let Some(ring) = oldest_exited.and_then(|ring| self.take_exited(ring)) {
                return Some(self.make_owned(ring, tid));
            }
        }
        let ring = self.map_ring(Some(tid))?;
        self.publish(ring);
        // SAFETY: the ring was just initialised and is never unmapped.
        let ring = unsafe { &*ring };
        super::thread::mark_at_exit(&ring.state);
        Some(ring)
    }

    /// Makes `ring`, held [`CLAIMING`] by the caller, the calling thread's.
    fn make_owned<'a>(&self, ring: &'a Ring<T>, tid: u32) -> &'a Ring<T> {
        ring.take_over(tid);
        ring.set_fast_limit(&self.room);
        // Release: a reader that sees OWNED sees the new owner's id.
        ring.state.store(OWNED, Ordering::Release);
        super::thread::mark_at_exit(&ring.state);
        ring
    }

    /// Takes the ring of an exited thread that no reader drained, its
    /// unread events dropped and counted in [`RingPool::lost`]; returns it
    /// [`CLAIMING`]. Only without a reader at work: readers hold the reader
    /// lock while they read a ring (a [`Peek`] for its whole life), and
    /// this only tries it (never waits: called on the traced path, maybe
    /// in a signal handler; a reader thread runs untraced, so it never
    /// gets here holding the lock itself).
    fn take_exited<'a>(&self, ring: &'a Ring<T>) -> Option<&'a Ring<T>> {
        let _reader = self.reader.try_lock().ok()?;
        ring.state
            .compare_exchange(EXITED, CLAIMING, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        self.exits.undrained.fetch_sub(1, Ordering::Relaxed);
        let head = ring.head.0.load(Ordering::Acquire);
        let unread = head.wrapping_sub(ring.tail.0.load(Ordering::Relaxed));
        self.discarded.fetch_add(unread as u64, Ordering::Relaxed);
        // A plain store: the owner exited (EXITED), so no early wrap (see
        // `budget`) moves the tail meanwhile.
        ring.tail.0.store(head, Ordering::Release);
        ring.head_at_last_drain.store(head, Ordering::Relaxed);
        // The reader lock is held: as a reader would free it.
        ring.return_held(&self.room.budget);
        ring.start_over();
        // The old owner's drops stay in `dropped` (counted in `lost`), and
        // are not reported as the new owner's.
        ring.dropped_reported
            .store(ring.dropped.load(Ordering::Relaxed), Ordering::Relaxed);
        Some(ring)
    }

    /// Counts an event that had no ring to go to.
    pub fn count_unbuffered(&self) {
        self.unbuffered.fetch_add(1, Ordering::Relaxed);
    }

    fn rings(&self) -> impl Iterator<Item = &Ring<T>> {
        // SAFETY: non-null pointers were published by claim (Release) and
        // are never unmapped; `next` is written before publication.
        let mut at = unsafe { self.newest.load(Ordering::Acquire).as_ref() };
        std::iter::from_fn(move || {
            let ring = at?;
            // SAFETY: as above.
            at = unsafe { ring.next.as_ref() };
            Some(ring)
        })
    }

    /// Takes every buffered event, per thread, oldest first. Rings of
    /// threads that exited are freed for reuse once emptied.
    pub fn drain(&self) -> Vec<Drained<T>> {
        let mut all: Vec<Drained<T>> = Vec::new();
        let mut ring_index = usize::MAX;
        self.drain_each(&mut |batch| {
            if batch.ring != ring_index {
                ring_index = batch.ring;
                all.push(Drained {
                    tid: batch.tid,
                    name: batch.name.to_string(),
                    events: Vec::new(),
                    dropped: 0,
                });
            }
            let drained = all.last_mut().expect("pushed above");
            drained.events.extend_from_slice(batch.events);
            drained.dropped += batch.dropped_after;
        });
        all
    }

    /// Passes each owned ring's new events to `out` without collecting
    /// them: a [`Batch`] for each run of slots (at most two per ring), then
    /// one with no events and `dropped_after` if events were dropped after
    /// them. Rings with nothing new are skipped; rings of threads
    /// that exited are freed once emptied.
    pub fn drain_each(&self, out: &mut dyn FnMut(&Batch<'_, T>)) {
        let _reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let prefault = self.ready_wanted.load(Ordering::Relaxed) != 0
            && !self.cannot_prefault.load(Ordering::Relaxed);
        // Lossless with a budget: rings hold parts of it, and give back
        // the pages of what this drain consumes (see `budget`). Only this
        // reader turns lossless mode off, so it holds for the whole drain.
        let lossless = self.room.is_lossless() && self.room.budget.is_set();
        let pid = sys::getpid();
        for (index, ring) in self.rings().enumerate() {
            let state = ring.state.load(Ordering::Acquire);
            if state != OWNED && state != EXITED {
                continue;
            }
            if ring.claimed_while_spawning.load(Ordering::Relaxed)
                && !own_threads::is_own(ring.tid())
            {
                if own_threads::spawning() {
                    // Perhaps the first calls of a thread fntrace is
                    // starting: read once it is known whose they are.
                    continue;
                }
                ring.claimed_while_spawning.store(false, Ordering::Relaxed);
            }
            // A ring whose head has not moved since the last drain may
            // belong to a thread that exited; checked before draining, so
            // that a dead owner's last events are all in this drain.
            let mut head = ring.head.0.load(Ordering::Acquire);
            let previous = ring.head_at_last_drain.swap(head, Ordering::Relaxed);
            let idle = head == previous;
            let owner_exited = ring.owner_gone(state, idle, pid);
            if owner_exited {
                // Its last events, written before it died.
                head = ring.head.0.load(Ordering::Acquire);
            }
            // Read after the Acquire load of head: an owner writes its id
            // before its first event, so the events up to head are its own
            // (read before, a new owner of a reused ring could be missed).
            let (tid, name) = (ring.tid(), ring.name());
            let name = name.as_str();
            // fntrace's own threads' calls are read and dropped: not the
            // program's, not lost.
            let own = own_threads::is_own(tid);
            let (_, drops_at_head) = ring.drain_to(
                head,
                lossless,
                &mut |events| {
                    if !own {
                        out(&Batch {
                            ring: index,
                            tid,
                            name,
                            events,
                            dropped_after: 0,
                        })
                    }
                },
                // A thread waiting for room re-checks its ring.
                &mut || self.room.wake_waiters(),
            );
            // Drops of a ring that was not full: made since its tail moved
            // (a few nanoseconds ago, unless this thread was preempted).
            let dropped_after = drops_at_head + ring.take_unreported_drops();
            // The budget the ring no longer needs, before the waiting
            // threads are woken: one may be waiting for it.
            if owner_exited {
                ring.return_held(&self.room.budget);
            } else if lossless {
                // What the owner wrote since (it may have wrapped since:
                // then its head is past the tail, not past `head`).
                let now = ring.head.0.load(Ordering::Acquire);
                let unread = now.wrapping_sub(ring.tail.0.load(Ordering::Acquire));
                ring.return_spare(&self.room.budget, unread.min(ring.capacity));
            }
            self.room.drained();
            ring.set_fast_limit(&self.room);
            // A budget ring past the first half of its first buffer: its
            // owner wraps early if it finds it empty (see `budget`).
            let wrap = lossless && !owner_exited && ring.ask_wrap();
            if dropped_after != 0 && !own {
                out(&Batch {
                    ring: index,
                    tid,
                    name,
                    events: &[],
                    dropped_after,
                });
            }
            if owner_exited {
                if own {
                    own_threads::forget(tid);
                }
                ring.free_for_next_owner(&self.room.budget);
            } else if prefault && !wrap {
                // Twice what the owner wrote since the last drain, at
                // least PREFAULT_MIN: it reaches those slots before the
                // next drain, most likely. With a budget, no further than
                // it may write before it takes more (so that the pages in
                // memory are those of what the ring holds).
                let mut ahead = (2 * head.wrapping_sub(previous)).max(PREFAULT_MIN);
                if lossless {
                    let held = ring.held.load(Ordering::Relaxed).min(ring.max_held);
                    ahead = ahead.min(held.max(PREFAULT_MIN));
                }
                if !ring.prefault_ahead(head, ahead) {
                    self.cannot_prefault.store(true, Ordering::Relaxed);
                }
            }
        }
        self.make_ready();
        self.trim_free();
    }

    /// Lossless mode on or off (see `room`). Only the pool's reader turns
    /// it on, while it drains; turning it off wakes every waiting thread.
    pub fn set_lossless(&self, lossless: bool) {
        self.room.set_lossless(lossless);
        for ring in self.rings() {
            ring.set_fast_limit(&self.room);
        }
    }

    /// The waits of lossless mode so far.
    pub fn room_stats(&self) -> RoomStats {
        self.room.stats()
    }

    /// What the owners' [`Ring::push`] needs of the pool.
    pub fn room(&self) -> &Room {
        &self.room
    }

    /// The reader's sleep between drains: `interval`, or less if a traced
    /// thread asks for a drain (its ring reached its fast limit).
    pub fn reader_sleep(&self, interval: std::time::Duration) {
        self.room.reader_sleep(interval)
    }

    /// Ends a [`RingPool::reader_sleep`] now.
    pub fn wake_reader(&self) {
        self.room.wake_reader()
    }

    /// Registers a reader that drains this pool periodically until the
    /// returned guard is dropped (see [`wait_for_reader`]).
    pub(crate) fn periodic_reader(&self) -> PeriodicReader {
        self.exits.periodic_readers.fetch_add(1, Ordering::Relaxed);
        PeriodicReader(self.exits)
    }

    /// Events lost so far: rings full, events with no ring at all, and
    /// unread events of exited threads whose rings went to new threads.
    pub fn lost(&self) -> u64 {
        self.rings().map(Ring::dropped).sum::<u64>()
            + self.unbuffered.load(Ordering::Relaxed)
            + self.discarded.load(Ordering::Relaxed)
    }

    /// In the child of `fork`: the rings hold the parent's events, and all
    /// but the forking thread's belong to threads the child does not have.
    /// Empties every ring, frees the others and gives the forking thread's
    /// ring (the one of `parent_tid`) to `child_tid`. Runs in the child's
    /// fork handler, with no other thread and no reader (readers hold the
    /// operation lock, which the forking thread holds).
    pub fn reset_in_fork_child(&self, parent_tid: u32, child_tid: u32) {
        for ring in self.rings() {
            let head = ring.head.0.load(Ordering::Relaxed);
            // No other thread in the child: no owner wraps meanwhile.
            ring.tail.0.store(head, Ordering::Release);
            ring.head_at_last_drain.store(head, Ordering::Relaxed);
            ring.dropped_reported
                .store(ring.dropped.load(Ordering::Relaxed), Ordering::Relaxed);
            if ring.state.load(Ordering::Relaxed) == OWNED && ring.tid() == parent_tid {
                ring.tid.store(child_tid, Ordering::Relaxed);
            } else {
                // The threads that held the rest of the budget are not here.
                ring.return_held(&self.room.budget);
                ring.state.store(FREE, Ordering::Release);
            }
        }
        // No other thread, and no reader: a recording's writer starts
        // again in the child (its own fork handler, after this one).
        self.exits.undrained.store(0, Ordering::Relaxed);
        self.exits.periodic_readers.store(0, Ordering::Relaxed);
    }
}

/// Something to reset in the child of `fork` (see
/// [`RingPool::reset_in_fork_child`]).
pub trait ForkReset: Sync {
    /// Called in the child's fork handler.
    fn reset_in_fork_child(&self, parent_tid: u32, child_tid: u32);
}

impl<T: Copy + Send + 'static> ForkReset for RingPool<T> {
    fn reset_in_fork_child(&self, parent_tid: u32, child_tid: u32) {
        RingPool::reset_in_fork_child(self, parent_tid, child_tid)
    }
}

/// Pools the child of `fork` must reset: added under the operation lock
/// (so this lock is free at every fork), at most a few.
static FORK_RESETS: Mutex<Vec<&'static dyn ForkReset>> = Mutex::new(Vec::new());

/// Has `pool` reset in the child of every later `fork`. Call under the
/// operation lock; registering twice is harmless.
pub(crate) fn reset_in_fork_children(pool: &'static dyn ForkReset) {
    let mut pools = FORK_RESETS.lock().unwrap_or_else(|e| e.into_inner());
    let address = pool as *const dyn ForkReset as *const ();
    if !pools
        .iter()
        .any(|p| ptr::eq(*p as *const dyn ForkReset as *const (), address))
    {
        pools.push(pool);
    }
}

/// The child's part: see [`RingPool::reset_in_fork_child`].
pub(crate) fn reset_pools_in_fork_child(parent_tid: u32, child_tid: u32) {
    if let Ok(pools) = FORK_RESETS.try_lock() {
        for pool in pools.iter() {
            pool.reset_in_fork_child(parent_tid, child_tid);
        }
    }
}
