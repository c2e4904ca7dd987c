//! Draining a ring: its events passed on a piece at a time, each piece's
//! slots freed as soon as it is passed on, and the drops reported with
//! them.

use std::sync::atomic::Ordering;

use super::Ring;

/// Events a drain passes on before it frees their slots (1 MiB of graph
/// events): see [`Ring::drain_to`].
const DRAIN_PIECE: usize = 1 << 16;

impl<T: Copy> Ring<T> {
    /// Copies the events before `head` (a value of `head` loaded with
    /// Acquire) to `out`, a slice at a time (at most [`DRAIN_PIECE`]
    /// events, never across the ring's end), freeing each slice's slots
    /// once `out` returns and calling `progress` then: a thread writing
    /// meanwhile gets room back as the reader goes, not only when its whole
    /// buffer is drained (a 16 MiB buffer takes the writer about 8 ms).
    /// Callers serialise readers.
    /// Returns the events and the drops reported with them (a full ring's,
    /// read before its slots are freed).
    /// With `give_back`, the pages of the slots consumed go back to the
    /// kernel (see `budget`), before the tail moves, all at once.
    pub(super) fn drain_to(
        &self,
        head: usize,
        give_back: bool,
        out: &mut dyn FnMut(&[T]),
        progress: &mut dyn FnMut(),
    ) -> (usize, u64) {
        // Acquire: the owner's early wrap moves the tail too (see `budget`).
        let tail = self.tail.0.load(Ordering::Acquire);
        let available = head.wrapping_sub(tail);
        if available == 0 || available > self.capacity {
            // Nothing to read; or the owner is wrapping its empty ring (it
            // moved the tail on to the next lap, not yet its head: read
            // before the wrap, `head` is behind the tail).
            return (0, 0);
        }
        // A ring full at `head` stays full (its head frozen there) until
        // the tail moves: every drop counted now happened right after
        // these events. Read once the tail has moved, a drop could come
        // from a refill (a reader preempted between the two).
        let drops = if available >= self.capacity {
            self.take_unreported_drops()
        } else {
            0
        };
        // With a budget, the pages consumed go back in one range before
        // the tail moves once (see `budget`): the tail moves at the end.
        let piece = if give_back { usize::MAX } else { DRAIN_PIECE };
        let (mut read, mut freed) = (tail, tail);
        while read != head {
            let start = read & (self.capacity - 1);
            let len = head
                .wrapping_sub(read)
                .min(self.capacity - start)
                .min(piece);
            // SAFETY: slots in [read, head) were published by the writer's
            // Release store of head, and it will not overwrite them until
            // tail moves past them; `start + len` stays inside the ring.
            // UnsafeCell<T> has T's layout.
            let run = unsafe { std::slice::from_raw_parts(self.slots.add(start).cast::<T>(), len) };
            out(run);
            read = read.wrapping_add(len);
            if give_back && read != head {
                continue;
            }
            if give_back {
                self.give_back_consumed(tail, head);
            }
            // The owner moves the tail only when it equals the owner's
            // head (an empty ring), and the owner's head is at least
            // `head`, past `freed`: this cannot fail, the ring holding
            // `[freed, head)`. A compare-and-swap all the same, so that it
            // never undoes a wrap.
            let moved =
                self.tail
                    .0
                    .compare_exchange(freed, read, Ordering::AcqRel, Ordering::Relaxed);
            debug_assert!(moved.is_ok(), "the tail moved under the reader");
            freed = read;
            progress();
        }
        (available, drops)
    }

    /// Drops counted since the previous call (see `drain_to` for where
    /// they happened).
    pub(super) fn take_unreported_drops(&self) -> u64 {
        let dropped = self.dropped.load(Ordering::Relaxed);
        let reported = self.dropped_reported.swap(dropped, Ordering::Relaxed);
        dropped.wrapping_sub(reported)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::super::RingPool;
    use super::DRAIN_PIECE;
    use crate::sys;

    /// A drain frees each piece's slots before it passes on the next: the
    /// ring's owner sees the tail move while the reader is still at work.
    /// 2.5 pieces of events in a ring of 4 pieces: three pieces, the tail
    /// at the start of each as it is passed on, every event once, in order.
    #[test]
    fn a_drain_frees_each_piece_before_the_next() {
        let pool: RingPool<[u64; 2]> = RingPool::new();
        pool.set_ring_capacity(4 * DRAIN_PIECE);
        let ring = pool.claim(sys::gettid() as u32).unwrap();
        let events = 2 * DRAIN_PIECE + DRAIN_PIECE / 2;
        for n in 0..events as u64 {
            // SAFETY: this thread claimed the ring: its only writer.
            unsafe { ring.push([n, 0], pool.room()) };
        }
        let head = ring.head.0.load(Ordering::Acquire);
        let mut pieces = Vec::new();
        let mut seen = 0u64;
        let mut progressed = 0;
        let (available, drops) = ring.drain_to(
            head,
            false,
            &mut |run| {
                pieces.push((run.len(), ring.tail.0.load(Ordering::Acquire)));
                for event in run {
                    assert_eq!(event[0], seen, "events out of order or lost");
                    seen += 1;
                }
            },
            &mut || progressed += 1,
        );
        assert_eq!((available, drops, seen), (events, 0, events as u64));
        assert_eq!(
            pieces,
            [
                (DRAIN_PIECE, 0),
                (DRAIN_PIECE, DRAIN_PIECE),
                (DRAIN_PIECE / 2, 2 * DRAIN_PIECE)
            ]
        );
        assert_eq!(progressed, 3);
        assert_eq!(ring.tail.0.load(Ordering::Acquire), head);
    }
}
