//! Reading the rings in place: [`RingPool::peek`] holds every ring's unread
//! events (and its drops not yet reported) for as many reads as the reader
//! needs, without consuming them; [`Peek::consume`] then frees their slots
//! as a drain would. A dump writes the events straight from the rings this
//! way, twice or three times over, and consumes them only once written: on
//! error they stay.

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::{own_threads, Ring, RingPool, EXITED, OWNED};
use crate::sys;

/// The unread part of one ring, as [`RingPool::peek`] found it.
pub struct PeekedRing<'a, T: Copy> {
    ring: &'a Ring<T>,
    tail: usize,
    head: usize,
    /// Kernel thread id of the ring's owner.
    pub tid: u32,
    /// The owner's name when it claimed the ring.
    pub name: String,
    /// Events the ring dropped (full) and no drain has reported yet: after
    /// the events, the ring having been full.
    pub dropped: u64,
    /// Whether the owner had exited (the ring is freed on consuming).
    owner_exited: bool,
}

impl<T: Copy> PeekedRing<'_, T> {
    /// The unread events, oldest first, as at most two runs of slots (up to
    /// the end of the ring, then from its start).
    pub fn runs(&self) -> [&[T]; 2] {
        let available = self.head.wrapping_sub(self.tail);
        let mask = self.ring.capacity - 1;
        let start = self.tail & mask;
        let first = available.min(self.ring.capacity - start);
        let run = |from: usize, len: usize| -> &[T] {
            if len == 0 {
                return &[];
            }
            // SAFETY: slots in [tail, head) were published by the writer's
            // Release store of head (loaded with Acquire by `peek`), and it
            // does not overwrite them until tail moves past them, which
            // only `Peek::consume` does, consuming the borrow this slice
            // lives in; `from + len` stays inside the ring; UnsafeCell<T>
            // has T's layout.
            unsafe { std::slice::from_raw_parts(self.ring.slots.add(from).cast::<T>(), len) }
        };
        [run(start, first), run(0, available - first)]
    }

    /// How many events [`PeekedRing::runs`] holds.
    pub fn len(&self) -> usize {
        self.head.wrapping_sub(self.tail)
    }
}

/// Every owned ring's unread events, held: other readers of the pool wait
/// until this is dropped (nothing consumed) or consumed.
pub struct Peek<'a, T: Copy + 'static> {
    _reader: MutexGuard<'a, ()>,
    /// The pool, whose free rings' pages are given back on consuming.
    pool: &'a RingPool<T>,
    rings: Vec<PeekedRing<'a, T>>,
    /// The rings of fntrace's own threads: consumed unread (see
    /// `own_threads`).
    own: Vec<PeekedRing<'a, T>>,
    /// Rings with nothing to read whose owner had exited: freed on
    /// consuming, as a drain frees them.
    exited_empty: Vec<&'a Ring<T>>,
}

impl<'a, T: Copy + Send + 'static> Peek<'a, T> {
    /// The rings with unread events or unreported drops, in the order
    /// [`RingPool::drain_each`] passes them.
    pub fn rings(&self) -> &[PeekedRing<'a, T>] {
        &self.rings
    }

    /// Frees the slots of the events read and marks the drops reported, as
    /// a drain of those events would have (events written since `peek`
    /// stay for the next reader); frees the rings of owners that had
    /// exited, and gives back the pages of free rings beyond the few kept
    /// warm, as a drain does (a pool read only by dumps kept every freed
    /// ring's pages).
    pub fn consume(self) {
        for ring in &self.exited_empty {
            ring.free_for_next_owner(&self.pool.room.budget);
        }
        for peeked in self.rings.iter().chain(&self.own) {
            // As in drain_to: the owner moves the tail only from its head,
            // past `peeked.tail` while events are held; with none held, a
            // failed exchange leaves the owner's wrap in place.
            let _ = peeked.ring.tail.0.compare_exchange(
                peeked.tail,
                peeked.head,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            let reported = peeked.ring.dropped_reported.load(Ordering::Relaxed);
            peeked
                .ring
                .dropped_reported
                .store(reported.wrapping_add(peeked.dropped), Ordering::Relaxed);
            if peeked.owner_exited {
                peeked.ring.free_for_next_owner(&self.pool.room.budget);
            }
        }
        for peeked in self.own.iter().filter(|peeked| peeked.owner_exited) {
            own_threads::forget(peeked.tid);
        }
        // Still under the reader lock (`_reader`).
        self.pool.trim_free();
    }
}

impl<T: Copy + Send + 'static> RingPool<T> {
    /// Holds every owned ring's unread events, up to what its writer had
    /// published now, for reading in place; see [`Peek`]. Take it under the
    /// operation lock, as every reader does (a `fork` must not copy the
    /// reader lock held).
    pub fn peek(&self) -> Peek<'_, T> {
        let reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let (mut rings, mut own, mut exited_empty) = (Vec::new(), Vec::new(), Vec::new());
        let pid = sys::getpid();
        for ring in self.rings() {
            let state = ring.state.load(Ordering::Acquire);
            if state != OWNED && state != EXITED {
                continue;
            }
            if ring.claimed_while_spawning.load(Ordering::Relaxed)
                && !own_threads::is_own(ring.tid())
                && own_threads::spawning()
            {
                // As in drain_each: whose they are is not known yet.
                continue;
            }
            // As in drain_each: a ring whose head has not moved since the
            // previous read may belong to a thread that exited, and then
            // holds all its events.
            let mut head = ring.head.0.load(Ordering::Acquire);
            let idle = head == ring.head_at_last_drain.swap(head, Ordering::Relaxed);
            let owner_exited = ring.owner_gone(state, idle, pid);
            if owner_exited {
                head = ring.head.0.load(Ordering::Acquire);
            }
            // Acquire, and a head behind the tail read as nothing to read,
            // as in drain_to (the owner may be wrapping early: `budget`).
            let tail = ring.tail.0.load(Ordering::Acquire);
            let head = if head.wrapping_sub(tail) > ring.capacity {
                tail
            } else {
                head
            };
            // After the Acquire load of head, as in drain_each: the events up
            // to head are this owner's.
            let (tid, name) = (ring.tid(), ring.name());
            let dropped = ring
                .dropped
                .load(Ordering::Relaxed)
                .wrapping_sub(ring.dropped_reported.load(Ordering::Relaxed));
            if head == tail && dropped == 0 {
                if owner_exited {
                    exited_empty.push(ring);
                }
                continue;
            }
            let to = if own_threads::is_own(tid) {
                &mut own
            } else {
                &mut rings
            };
            to.push(PeekedRing {
                ring,
                tail,
                head,
                tid,
                name,
                dropped,
                owner_exited,
            });
        }
        Peek {
            _reader: reader,
            pool: self,
            rings,
            own,
            exited_empty,
        }
    }
}
