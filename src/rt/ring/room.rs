//! Lossless rings: a traced thread whose ring is full waits for the reader
//! instead of dropping its event.
//!
//! A pool is in one of two modes ([`RingPool::set_lossless`]):
//! - **drop** (the default): a full ring counts the event as dropped, at
//!   the fast path's cost; the reader reports the count as lost.
//! - **lossless** (what `fntrace record` runs by default): with a memory
//!   budget (what a recording sets), a ring whose owner reaches its fast
//!   limit takes more of the budget, and its owner waits for the reader
//!   only when none is left (see `budget`). Without one, each ring's
//!   *fast limit* is half its capacity after each drain. The fast paths
//!   (asm) hand an event to the generic path once a ring holds that many;
//!   the generic path ([`Ring::push`]) wakes the reader (a flag says it was
//!   asked already: one system call per drain at most) and raises the
//!   ring's limit to its capacity, so the fast paths go on until the ring
//!   is full. A full ring's event waits in the generic path until the
//!   reader has drained some (a futex on the pool's drain counter). Waits
//!   are counted and timed ([`RoomStats`]).
//!
//! The reader must be running while a pool is lossless: its owner (the
//! streaming recorder's writer thread) turns lossless off before it stops,
//! and wakes every waiter. As a last defence against a reader that cannot
//! run (e.g. it needs a lock a waiting thread holds), a wait that sees no
//! drain for [`GIVE_UP_AFTER`] of its own running time (a stopped process
//! does not count) drops its event and counts it
//! ([`RoomStats::gave_up`]), so a traced thread never waits forever.
//!
//! Everything here runs on the traced path (in the generic path's slow
//! case): no allocation, no lock; the futex calls are async-signal-safe.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::sys::futex::{futex_wait, futex_wake};

use super::budget::Budget;
use super::Ring;

/// How long a waiting thread goes on waiting while no drain happens.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(10);

/// One wait's sleep at most: the thread re-checks its ring (and the mode)
/// at least this often.
const WAIT_SLICE: Duration = Duration::from_millis(5);

/// The most one check of a waiting thread adds to its time without a
/// drain: a few slices (a busy host may run it late), never a stop's
/// length.
const MAX_SEEN_PER_CHECK: Duration = Duration::from_millis(50);

/// A ring's fast limit in drop mode: never reached (the fast paths count
/// drops themselves when the ring is full).
pub(super) const NO_FAST_LIMIT: usize = usize::MAX;

/// The waits of a lossless pool so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoomStats {
    /// Times a traced thread found its ring full and waited for the reader.
    pub waits: u64,
    /// Their total duration, in nanoseconds.
    pub wait_ns: u64,
    /// Events dropped after waiting [`GIVE_UP_AFTER`] with no drain.
    pub gave_up: u64,
    /// The most events the rings held at once since the memory budget was
    /// last set (their bases included; see `budget`).
    pub memory_peak_events: u64,
    /// The memory budget, in events (0: none set).
    pub memory_events: u64,
}

/// The pool's side of lossless mode: the mode, the reader's wake-up word,
/// the drain counter waiters sleep on, and the wait statistics.
pub struct Room {
    lossless: AtomicBool,
    /// Bumped (and futex-woken) to wake the reader before its interval
    /// ends.
    reader_wake: AtomicU32,
    /// Set by the first thread that asks for a drain since the reader last
    /// started one: later ones need not make the system call.
    pub(super) reader_asked: AtomicBool,
    /// Bumped after every drain; waiting threads sleep on it.
    drains: AtomicU32,
    /// Threads waiting now (the reader wakes them only if there are any).
    waiting: AtomicUsize,
    waits: AtomicU64,
    wait_ns: AtomicU64,
    gave_up: AtomicU64,
    /// The memory budget the rings share in lossless mode.
    pub(super) budget: Budget,
}

impl Room {
    pub(super) const fn new() -> Room {
        Room {
            lossless: AtomicBool::new(false),
            reader_wake: AtomicU32::new(0),
            reader_asked: AtomicBool::new(false),
            drains: AtomicU32::new(0),
            waiting: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            gave_up: AtomicU64::new(0),
            budget: Budget::new(),
        }
    }

    pub(super) fn is_lossless(&self) -> bool {
        self.lossless.load(Ordering::Acquire)
    }

    /// A ring's fast limit in the current mode: see
    /// [`Ring::set_fast_limit`].
    pub(super) fn fast_limit<T: Copy>(&self, ring: &Ring<T>) -> usize {
        if !self.is_lossless() {
            NO_FAST_LIMIT
        } else if self.budget.is_set() {
            ring.ask_limit(ring.held.load(Ordering::SeqCst), self.budget.chunk())
        } else {
            ring.capacity / 2
        }
    }

    /// Asks the reader for a drain now (once until it starts one).
    #[inline]
    pub(super) fn ask_reader(&self) {
        if !self.reader_asked.swap(true, Ordering::AcqRel) {
            self.reader_wake.fetch_add(1, Ordering::Release);
            futex_wake(&self.reader_wake, 1);
        }
    }

    /// Waits for room in `ring` (full at `head`): returns whether there is
    /// some now (else the pool left lossless mode, or the wait gave up).
    #[cold]
    pub(super) fn wait_for_room<T: Copy>(&self, ring: &Ring<T>, head: usize) -> bool {
        self.wait_for(&|| head.wrapping_sub(ring.tail.0.load(Ordering::Acquire)) < ring.capacity)
    }

    /// Waits until `has_room` (checked after each drain, and every
    /// [`WAIT_SLICE`]): returns whether it holds now (else the pool left
    /// lossless mode, or the wait gave up). Counted and timed.
    #[cold]
    pub(super) fn wait_for(&self, has_room: &dyn Fn() -> bool) -> bool {
        let started = std::time::Instant::now();
        let mut last_drain = self.drains.load(Ordering::SeqCst);
        let mut last_check = started;
        let mut waited_without_drain = Duration::ZERO;
        self.waiting.fetch_add(1, Ordering::SeqCst);
        self.waits.fetch_add(1, Ordering::Relaxed);
        let room = loop {
            // SeqCst, as the reader's bump in `drained`: either it sees this
            // thread waiting, or this thread sees its drain.
            let drains = self.drains.load(Ordering::SeqCst);
            if has_room() {
                break true;
            }
            if !self.is_lossless() {
                break false;
            }
            let now = std::time::Instant::now();
            // Only the time this thread was seen waiting counts towards
            // giving up: a gap longer than a slice between two checks is a
            // time the process did not run (SIGSTOP, Ctrl-Z, a debugger),
            // when the reader did not run either.
            let seen = now.duration_since(last_check).min(MAX_SEEN_PER_CHECK);
            last_check = now;
            if drains != last_drain {
                last_drain = drains;
                waited_without_drain = Duration::ZERO;
            } else {
                waited_without_drain += seen;
                if waited_without_drain > GIVE_UP_AFTER {
                    self.gave_up.fetch_add(1, Ordering::Relaxed);
                    break false;
                }
            }
            self.ask_reader();
            futex_wait(&self.drains, drains, Some(WAIT_SLICE));
        };
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        let waited = started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        self.wait_ns.fetch_add(waited, Ordering::Relaxed);
        room
    }

    /// The reader's sleep between drains: until `interval` passes or a
    /// traced thread asks for a drain (or [`Room::wake_reader`]).
    pub(super) fn reader_sleep(&self, interval: Duration) {
        let seen = self.reader_wake.load(Ordering::Acquire);
        if self.reader_asked.swap(false, Ordering::AcqRel) {
            return;
        }
        futex_wait(&self.reader_wake, seen, Some(interval));
        self.reader_asked.store(false, Ordering::Release);
    }

    /// Wakes the reader from [`Room::reader_sleep`] whatever its interval.
    pub(super) fn wake_reader(&self) {
        self.reader_wake.fetch_add(1, Ordering::Release);
        futex_wake(&self.reader_wake, i32::MAX);
    }

    /// While a drain frees a ring's slots: wakes the threads waiting for
    /// room, if any (a waiter re-checks its ring and sleeps again on the
    /// new drain count).
    pub(super) fn wake_waiters(&self) {
        if self.waiting.load(Ordering::SeqCst) != 0 {
            self.drained();
        }
    }

    /// After a drain: wakes the threads waiting for room.
    pub(super) fn drained(&self) {
        self.drains.fetch_add(1, Ordering::SeqCst);
        // SeqCst pairs with the waiters' increment and load of `drains`: a
        // waiter not counted here loads the new drain count before it
        // sleeps (and then finds room or sleeps on the new value).
        if self.waiting.load(Ordering::SeqCst) != 0 {
            futex_wake(&self.drains, i32::MAX);
        }
    }

    pub(super) fn set_lossless(&self, lossless: bool) {
        self.lossless.store(lossless, Ordering::SeqCst);
        if !lossless {
            self.drained();
            futex_wake(&self.drains, i32::MAX);
        }
    }

    pub(super) fn stats(&self) -> RoomStats {
        let (memory_peak, memory) = self.budget.usage();
        RoomStats {
            waits: self.waits.load(Ordering::Relaxed),
            wait_ns: self.wait_ns.load(Ordering::Relaxed),
            gave_up: self.gave_up.load(Ordering::Relaxed),
            memory_peak_events: memory_peak,
            memory_events: memory,
        }
    }
}

impl<T: Copy> Ring<T> {
    /// Appends `events` together, or none of them (returns whether it
    /// did): for events a reader must see whole (an entry and the
    /// argument data after it), published at once. Past the ring's fast
    /// limit, a lossless pool asks the reader and waits for room for all
    /// of them (with a budget, takes its next chunk first), as
    /// [`Ring::push`] does for one; in drop mode (or when a lossless wait
    /// gives up) it writes nothing there, and the caller writes less with
    /// [`Ring::push`]. Allocates nothing.
    ///
    /// # Safety
    /// As [`Ring::push`]: only the ring's owner calls this.
    pub unsafe fn push_together(&self, events: &[T], room: &Room) -> bool {
        let n = events.len();
        if n > self.capacity {
            return false;
        }
        let mut head = self.head.0.load(Ordering::Relaxed);
        if self.wrap_wanted.load(Ordering::Relaxed) {
            // The reader asked for an early wrap (a budget's ring), as
            // `push` honours it.
            head = self.wrap_if_empty(room, head);
        }
        let used = || head.wrapping_sub(self.tail.0.load(Ordering::Acquire));
        let limit = self.fast_limit.load(Ordering::Relaxed).min(self.capacity);
        if used() + n > limit {
            if !room.is_lossless() {
                return false;
            }
            if room.budget.is_set() {
                // Room for the last of them, as `push` takes it for one:
                // the budget's next chunk, or the reader's drain.
                if !self.take_room(room, head.wrapping_add(n - 1)) || used() + n > self.capacity {
                    return false;
                }
                // SAFETY: they fit (take_room: the last one is below what
                // the ring holds); the caller owns the ring.
                return unsafe { self.write_together(head, events) };
            }
            room.ask_reader();
            self.fast_limit.store(self.capacity, Ordering::Relaxed);
            if used() + n > self.capacity && !room.wait_for(&|| used() + n <= self.capacity) {
                return false;
            }
        }
        // SAFETY: they fit (checked above); the caller owns the ring.
        unsafe { self.write_together(head, events) }
    }

    /// Writes `events` from slot `head` (the ring's head) on and publishes
    /// them at once; returns `true`.
    ///
    /// # Safety
    /// Only the ring's owner calls this, with room for all of `events`.
    unsafe fn write_together(&self, head: usize, events: &[T]) -> bool {
        for (i, &event) in events.iter().enumerate() {
            // SAFETY: slot (head + i) % capacity is inside the mapping and
            // free (used + len ≤ capacity); the reader does not read it
            // until head is published below (single writer, the caller's
            // contract).
            unsafe {
                (*self.slots.add(head.wrapping_add(i) & (self.capacity - 1)))
                    .get()
                    .write(event)
            };
        }
        self.head
            .0
            .store(head.wrapping_add(events.len()), Ordering::Release);
        true
    }
}
