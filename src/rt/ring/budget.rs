//! The memory budget of lossless rings (`--memory`): a thread whose
//! buffer is full takes more from a pool that grows up to the budget, and
//! waits for the reader only when the pool has none left.
//!
//! Each ring of a lossless recording *reserves* address space for the
//! whole budget (its capacity: the budget in events, rounded up to a power
//! of two; `MAP_NORESERVE`, pages committed only when touched), but its
//! owner may run ahead of the reader only by the events the ring *holds*
//! ([`Ring::held`](super::Ring)). Every ring holds one buffer (`--buffer`,
//! its *base*) whatever the budget says; beyond that, it takes a *chunk*
//! (half a buffer) at a time from the budget's free events, one atomic
//! counter for the whole pool. The fast paths (asm) need nothing new: a
//! ring's fast limit, which they compare with `head - tail`, is half a
//! chunk short of what it holds, so the generic path ([`Ring::push`])
//! takes the next chunk before the ring is full, and asks the reader for
//! a drain meanwhile. Only when the budget has no chunk left does a
//! thread whose ring is full wait for the reader (`room`: counted and
//! timed).
//!
//! The reader, after draining a ring, gives back to the budget the chunks
//! the ring no longer needs (it keeps its base, and a chunk beyond what is
//! still unread); a ring freed for another thread gives back all it holds.
//! Only the owner raises what its ring holds, only the reader lowers it
//! (a compare-and-swap: an owner taking a chunk meanwhile makes the reader
//! leave the ring as it is until the next drain).
//!
//! Pages: a ring reserved for the whole budget is written from one end to
//! the other before it wraps, so each drain gives back to the kernel
//! (`MADV_DONTNEED`) the whole pages of the events it consumed, once they
//! amount to a buffer's worth (its *window*), and the reader makes present
//! ahead of the tail only the pages of what the ring holds. Every page is
//! then faulted in once per lap: a ring whose buffer is 2 MiB or more
//! asks for transparent huge pages (`MADV_HUGEPAGE`) and gives back 2 MiB
//! at a time (its *unit*; else 4 KiB), a fault per 131,072 events instead
//! of per 256 (1.66 GB recorded: 408k faults with 4 KiB pages, 4.6k with
//! huge ones). Resident memory of a ring is then at most two windows (one
//! its home, below), two units, [`PREFAULT_MIN`](super::PREFAULT_MIN)
//! events and its header's page, plus what it holds, or held at the previous drain (pages made
//! present for that stay until written); all rings together, at most
//! twice `max(budget, threads × buffer)` plus that much per thread, and
//! about once when the reader keeps up.
//!
//! Early wrap: a ring whose writer keeps up would still sweep the whole
//! reservation, a fresh page (zeroed by the kernel) at a time, since its
//! consumed pages go back. So the first buffer of the reservation (its
//! *home*, a window) is never given back by a drain, and a drain that
//! finds the owner's head past the first half of its lap asks the owner
//! to wrap early (`wrap_wanted`, and a fast limit of 0 so that its next
//! event takes the generic path): the owner, finding its ring empty
//! (`tail == head`: everything consumed), moves the tail from its head to
//! the next lap's first slot with a compare-and-swap, then its head
//! there too, and writes on in its home, whose pages are present. Only
//! the owner writes head, and it moves the tail only while it equals its
//! head; a reader moves the tail only from a value below the head it
//! read (a drain or [`Peek`](super::Peek) with events; its
//! compare-and-swap cannot fail then: the owner's head is at least that
//! head, past the tail, so the owner's cannot succeed meanwhile), and
//! takes a head behind the tail (read before a wrap, the tail after it)
//! as nothing to read. A writer that never lets its ring empty (the
//! writer behind it all along) still sweeps.
//!
//! Giving pages back is safe with the owner writing: a lossless ring holds
//! at most its capacity less a window, so its owner never writes within a
//! window behind the tail the reader set before (its slots are those of
//! the events a whole capacity later), and the reader gives back only
//! events it consumed and at most a window behind the previous tail. Only
//! the pool's reader turns lossless mode off (the streaming recorder's
//! writer thread, which also gives the pages back), so the mode does not
//! change under it.
//!
//! Everything the owner calls here runs on the traced path: atomics only.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use super::{Ring, Room, PAGE};

/// The budget's counters (in events; bytes are events × the event size).
pub(super) struct Budget {
    /// Events the rings may hold together (0: no budget set, the rings of
    /// a lossless pool are then used up to their capacity, as before the
    /// budget existed).
    total: AtomicI64,
    /// Events of the budget no ring holds; negative when the rings' bases
    /// alone exceed the budget (more threads than buffers fit in it).
    free: AtomicI64,
    /// Events every ring holds at least (one buffer).
    base: AtomicUsize,
    /// Events a ring takes at a time beyond its base (half a buffer).
    chunk: AtomicUsize,
    /// Most events the rings held at once since the budget was set.
    peak: AtomicI64,
}

impl Budget {
    pub(super) const fn new() -> Budget {
        Budget {
            total: AtomicI64::new(0),
            free: AtomicI64::new(0),
            base: AtomicUsize::new(0),
            chunk: AtomicUsize::new(0),
            peak: AtomicI64::new(0),
        }
    }

    /// Sets the budget to `total` events, each ring holding `base` at
    /// least and taking `base / 2` at a time. What rings hold already
    /// stays theirs (counted against the new budget).
    pub(super) fn configure(&self, total: usize, base: usize) {
        let total = i64::try_from(total).unwrap_or(i64::MAX);
        let old = self.total.swap(total, Ordering::SeqCst);
        let free = self.free.fetch_add(total - old, Ordering::SeqCst) + (total - old);
        self.base.store(base, Ordering::Relaxed);
        self.chunk.store(base.div_ceil(2), Ordering::Relaxed);
        self.peak.store(total - free, Ordering::Relaxed);
    }

    /// Whether a budget is set.
    #[inline]
    pub(super) fn is_set(&self) -> bool {
        self.chunk.load(Ordering::Relaxed) != 0
    }

    /// Events a ring takes at a time beyond its base.
    #[inline]
    pub(super) fn chunk(&self) -> usize {
        self.chunk.load(Ordering::Relaxed)
    }

    /// Events every ring holds at least.
    #[inline]
    pub(super) fn base(&self) -> usize {
        self.base.load(Ordering::Relaxed)
    }

    /// Takes `events` whether or not the budget has them (a ring's base).
    pub(super) fn take_anyway(&self, events: usize) {
        let events = events as i64;
        let free = self.free.fetch_sub(events, Ordering::SeqCst) - events;
        self.note_use(free);
    }

    /// Takes one chunk if the budget has one left.
    pub(super) fn take_chunk(&self) -> bool {
        let chunk = self.chunk() as i64;
        let mut free = self.free.load(Ordering::Relaxed);
        loop {
            if free < chunk {
                return false;
            }
            match self.free.compare_exchange_weak(
                free,
                free - chunk,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.note_use(free - chunk);
                    return true;
                }
                Err(now) => free = now,
            }
        }
    }

    /// Whether the budget has a chunk left (a waiting thread may take it).
    pub(super) fn has_chunk(&self) -> bool {
        self.free.load(Ordering::SeqCst) >= self.chunk() as i64
    }

    /// Gives `events` back to the budget.
    pub(super) fn give(&self, events: usize) {
        if events != 0 {
            self.free.fetch_add(events as i64, Ordering::SeqCst);
        }
    }

    fn note_use(&self, free: i64) {
        let used = self.total.load(Ordering::Relaxed) - free;
        self.peak.fetch_max(used, Ordering::Relaxed);
    }

    /// `(peak, total)`: the most events the rings held at once since the
    /// budget was set, and the budget.
    pub(super) fn usage(&self) -> (u64, u64) {
        let peak = self.peak.load(Ordering::Relaxed).max(0) as u64;
        let total = self.total.load(Ordering::Relaxed).max(0) as u64;
        (peak, total)
    }
}

impl<T: Copy> Ring<T> {
    /// What the ring may hold when it holds `held` events of the budget.
    #[inline]
    fn allowed(&self, held: usize) -> usize {
        held.min(self.max_held)
    }

    /// The fast limit of a ring holding `held`: half a chunk short of
    /// what it may hold, so that the generic path takes the next chunk
    /// (and asks the reader for a drain) before the ring is full.
    #[inline]
    pub(super) fn ask_limit(&self, held: usize, chunk: usize) -> usize {
        let allowed = self.allowed(held);
        allowed - chunk.min(allowed) / 2
    }

    /// Stores the fast limit `limit` gives for what the ring holds. The
    /// owner and the reader both store it, each after changing `held`:
    /// each loads `held` again after its store, and stores again if it
    /// changed meanwhile, so that the last store is for the last `held`
    /// (SeqCst: of two stores racing, the later one's check sees the
    /// other's change of `held`).
    fn publish_limit(&self, limit: impl Fn(usize) -> usize) {
        loop {
            let held = self.held.load(Ordering::SeqCst);
            self.fast_limit.store(limit(held), Ordering::SeqCst);
            if self.held.load(Ordering::SeqCst) == held {
                return;
            }
        }
    }

    /// Sets the fast limit for the pool's mode: never reached in drop
    /// mode; half a chunk short of what the ring holds in lossless mode
    /// with a budget; half the capacity without one. By the reader, or by
    /// a thread making the ring its own.
    pub(super) fn set_fast_limit(&self, room: &Room) {
        if room.is_lossless() && room.budget.is_set() {
            let chunk = room.budget.chunk();
            self.publish_limit(|held| self.ask_limit(held, chunk));
        } else {
            self.fast_limit
                .store(room.fast_limit(self), Ordering::SeqCst);
        }
    }

    /// The owner, its ring at its fast limit in a lossless pool with a
    /// budget, about to write event `head`: asks the reader for a drain,
    /// takes the ring's base if it does not hold it yet, and a chunk of
    /// the budget if the ring is in its last half chunk; if the ring is
    /// full and the budget has no chunk left, waits for the reader.
    /// Returns whether the event may be written (`false`: the pool left
    /// lossless mode, or the wait gave up).
    #[cold]
    pub(super) fn take_room(&self, room: &Room, head: usize) -> bool {
        let budget = &room.budget;
        room.ask_reader();
        let (base, chunk) = (budget.base().min(self.max_held), budget.chunk());
        let held = self.held.load(Ordering::SeqCst);
        if held < base {
            // Every ring holds one buffer, whatever the budget has left.
            budget.take_anyway(base - held);
            self.held.fetch_add(base - held, Ordering::SeqCst);
        }
        loop {
            let used = head.wrapping_sub(self.tail.0.load(Ordering::Acquire));
            let held = self.held.load(Ordering::SeqCst);
            let allowed = self.allowed(held);
            if used + chunk / 2 >= allowed && held + chunk <= self.max_held && budget.take_chunk() {
                self.held.fetch_add(chunk, Ordering::SeqCst);
                continue;
            }
            if used < allowed {
                // In the last half chunk with none to take: the fast
                // paths go on up to what the ring holds.
                let full_only = used >= self.ask_limit(held, chunk);
                self.publish_limit(|held| {
                    if full_only {
                        self.allowed(held)
                    } else {
                        self.ask_limit(held, chunk)
                    }
                });
                return true;
            }
            let has_room = || {
                let held = self.held.load(Ordering::SeqCst);
                head.wrapping_sub(self.tail.0.load(Ordering::Acquire)) < self.allowed(held)
                    || (held + chunk <= self.max_held && budget.has_chunk())
            };
            if !room.wait_for(&has_room) {
                return false;
            }
        }
    }

    /// The reader, after draining this ring (`unread` events written
    /// since): gives back to the budget what the ring holds beyond its
    /// base and a chunk more than `unread`, and lowers its fast limit to
    /// match. Left as it is if the owner takes a chunk meanwhile.
    pub(super) fn return_spare(&self, budget: &Budget, unread: usize) {
        let chunk = budget.chunk();
        let keep = (unread.next_multiple_of(chunk) + chunk)
            .max(budget.base())
            .min(self.max_held);
        let held = self.held.load(Ordering::SeqCst);
        if held > keep
            && self
                .held
                .compare_exchange(held, keep, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        {
            budget.give(held - keep);
        }
        self.publish_limit(|held| self.ask_limit(held, chunk));
    }

    /// The reader, after draining a ring reserved for the budget (one that
    /// gives pages back) whose owner's head is past the first half of its
    /// lap: asks the owner to wrap early (see the module doc). Returns
    /// whether the ring was empty (then the owner's next event most likely
    /// goes to the ring's home, whose pages are present).
    pub(super) fn ask_wrap(&self) -> bool {
        if self.window == 0 {
            return false;
        }
        let head = self.head.0.load(Ordering::Acquire);
        if head & (self.capacity - 1) < self.window / 2 {
            return false;
        }
        self.wrap_wanted.store(true, Ordering::SeqCst);
        self.fast_limit.store(0, Ordering::SeqCst);
        head == self.tail.0.load(Ordering::Acquire)
    }

    /// The owner, about to write event `head` with a wrap asked for: if
    /// the ring is empty (the tail at `head`), moves the tail, then the
    /// head, on to the first slot of the next lap, and returns that;
    /// restores the fast limit either way. Returns the head to write at.
    #[cold]
    pub(super) fn wrap_if_empty(&self, room: &Room, head: usize) -> usize {
        self.wrap_wanted.store(false, Ordering::Relaxed);
        let mut at = head;
        if room.is_lossless() && room.budget.is_set() && self.window != 0 {
            if let Some(start) = head.checked_next_multiple_of(self.capacity) {
                // The tail first: a reader that loads the old head and the
                // new tail finds the head behind it and reads nothing; one
                // that loads the new head (Acquire) sees the new tail.
                if start != head
                    && self
                        .tail
                        .0
                        .compare_exchange(head, start, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    self.head.0.store(start, Ordering::Release);
                    at = start;
                }
            }
        }
        self.set_fast_limit(room);
        at
    }

    /// Gives back to the budget all the ring holds: its owner is gone
    /// (the ring is being freed, or taken for another thread).
    pub(super) fn return_held(&self, budget: &Budget) {
        budget.give(self.held.swap(0, Ordering::SeqCst));
    }

    /// The reader, draining events `[old_tail, new_tail)` before it moves
    /// the tail: gives back to the kernel the whole pages of the slots
    /// consumed since the last give-back, once a window's worth, at most a
    /// window behind `old_tail` (the module doc says why that is safe).
    pub(super) fn give_back_consumed(&self, old_tail: usize, new_tail: usize) {
        if self.window == 0 {
            return;
        }
        let mut from = self.given_back_to.load(Ordering::Relaxed);
        if old_tail.wrapping_sub(from) > self.window {
            // Consumed by a `Peek` meanwhile (or the first give-back):
            // those earlier pages wait for the ring's next lap.
            from = old_tail.wrapping_sub(self.window);
        }
        if new_tail.wrapping_sub(from) < self.window {
            return;
        }
        let size = std::mem::size_of::<T>();
        let slots = self.slots as usize;
        let end_of_slots = slots + self.capacity * size;
        let mask = self.capacity - 1;
        let count = new_tail.wrapping_sub(from);
        let start = from & mask;
        let first = count.min(self.capacity - start);
        let unit = self.give_back_unit;
        // The home (the first window of slots) stays: an owner that wraps
        // early writes there again (see the module doc).
        let home_end = (slots + self.window * size).next_multiple_of(unit);
        for (slot, len) in [(start, first), (0, count - first)] {
            if len == 0 {
                continue;
            }
            // Whole units inside the run: the units at its ends also hold
            // slots the owner may write (or the ring's header), except
            // past the end of the slots, where the page holds no slot.
            let begin = (slots + slot * size).next_multiple_of(unit).max(home_end);
            let end = slots + (slot + len) * size;
            let end = if end == end_of_slots {
                end.next_multiple_of(PAGE)
            } else {
                end & !(unit - 1)
            };
            if end > begin {
                // SAFETY: whole pages of this ring's mapping (never
                // unmapped) holding only slots the reader consumed and the
                // owner cannot reach before the tail moves (module doc).
                unsafe {
                    libc::madvise(begin as *mut libc::c_void, end - begin, libc::MADV_DONTNEED)
                };
            }
        }
        // From the first slot of the unit holding `new_tail`'s, next time.
        let at = slots + (new_tail & mask) * size;
        let page = (at & !(unit - 1)).max(slots);
        let given_back_to = new_tail.wrapping_sub((at - page) / size);
        self.given_back_to.store(given_back_to, Ordering::Relaxed);
        // Pages prefaulted before that point are gone.
        let (pre_from, pre_to) = (
            self.prefaulted_from.load(Ordering::Relaxed),
            self.prefaulted_to.load(Ordering::Relaxed),
        );
        if (given_back_to.wrapping_sub(pre_from) as isize) > 0 {
            let pre_from = if (pre_to.wrapping_sub(given_back_to) as isize) > 0 {
                given_back_to
            } else {
                pre_to
            };
            self.prefaulted_from.store(pre_from, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::super::RingPool;
    use crate::sys;

    type Event = [u64; 2];

    /// A lossless pool of rings of `capacity` events; with `base` non-zero,
    /// a budget of `capacity` events, rings holding `base` at least.
    fn lossless_pool(capacity: usize, base: usize) -> RingPool<Event> {
        let pool = RingPool::new();
        pool.set_ring_capacity(capacity);
        pool.set_memory_budget(if base == 0 { 0 } else { capacity }, base);
        pool.set_lossless(true);
        pool
    }

    /// Drains `pool` and checks that its events go on from `seen` one by
    /// one (each event holds its number); returns the next number.
    fn drain_in_order(pool: &RingPool<Event>, mut seen: u64) -> u64 {
        for drained in pool.drain() {
            assert_eq!(drained.dropped, 0);
            for event in drained.events {
                assert_eq!(event[0], seen, "events out of order or lost");
                seen += 1;
            }
        }
        seen
    }

    /// A ring reserved for a budget of 16 buffers whose reader drains it
    /// after every 40 events (its owner never more than 40 ahead): the
    /// owner wraps early each time it finds the ring empty, so it writes
    /// only the first 40 slots of its 1,024, lap after lap (without the
    /// early wrap it swept all 1,024, a fresh page at a time once the
    /// consumed ones went back). Every event is read, in order.
    #[test]
    fn an_owner_whose_reader_keeps_up_wraps_early() {
        const BASE: usize = 64;
        let pool = lossless_pool(16 * BASE, BASE);
        let ring = pool.claim(sys::gettid() as u32).unwrap();
        let mask = ring.capacity - 1;
        assert_eq!(ring.window, BASE, "the ring gives pages back");
        let (mut next, mut seen, mut furthest) = (0u64, 0u64, 0usize);
        for _ in 0..500 {
            for _ in 0..40 {
                // SAFETY: this thread claimed the ring: its only writer.
                unsafe { ring.push([next, 0], pool.room()) };
                next += 1;
                furthest = furthest.max(ring.head.0.load(Ordering::Relaxed) & mask);
            }
            seen = drain_in_order(&pool, seen);
        }
        assert_eq!(seen, next);
        assert!(next as usize > 16 * ring.capacity, "{next} events");
        assert!(
            furthest <= 40,
            "the owner reached slot {furthest} of {}",
            ring.capacity
        );
        assert_eq!(pool.room_stats().waits, 0);
    }

    /// A ring whose reader lags (40 events left unread at each drain, so
    /// that its owner, asked to wrap each time, never finds it empty)
    /// keeps every event, in order, lap after lap, its pages given back
    /// behind the reader; once the reader catches up, the owner wraps.
    #[test]
    fn an_owner_asked_to_wrap_with_events_unread_goes_on() {
        const BASE: usize = 64;
        let pool = lossless_pool(16 * BASE, BASE);
        let ring = pool.claim(sys::gettid() as u32).unwrap();
        let mask = ring.capacity - 1;
        let mut next = 0u64;
        let mut push = |count: usize| {
            for _ in 0..count {
                // SAFETY: this thread claimed the ring: its only writer.
                unsafe { ring.push([next, 0], pool.room()) };
                next += 1;
            }
        };
        push(40);
        let mut seen = 0u64;
        for _ in 0..100 {
            push(40);
            // The reader's part of a drain, up to 40 events short of the
            // owner's head, as if the owner wrote those meanwhile.
            let head = ring.head.0.load(Ordering::Acquire) - 40;
            ring.drain_to(
                head,
                true,
                &mut |events| {
                    for event in events {
                        assert_eq!(event[0], seen, "events out of order or lost");
                        seen += 1;
                    }
                },
                &mut || {},
            );
            ring.ask_wrap();
        }
        let head = ring.head.0.load(Ordering::Relaxed);
        assert!(head > 3 * ring.capacity, "the ring went round: {head}");
        seen = drain_in_order(&pool, seen);
        push(1);
        assert_eq!(
            ring.head.0.load(Ordering::Relaxed) & mask,
            1,
            "empty, the ring wraps"
        );
        seen = drain_in_order(&pool, seen);
        assert_eq!(seen, next);
        assert_eq!(pool.room_stats().waits, 0);
    }

    /// Without a budget (`--memory` equal to `--buffer`), a lossless ring
    /// behaves as before the budget existed: it asks the reader once half
    /// full, and goes on to full before its owner waits: 64 events in a
    /// ring of 64 make no wait; the 65th waits for a drain.
    #[test]
    fn a_ring_without_a_budget_fills_before_it_waits() {
        const CAPACITY: usize = 64;
        let pool = lossless_pool(CAPACITY, 0);
        std::thread::scope(|scope| {
            let ring = pool.claim(sys::gettid() as u32).unwrap();
            assert_eq!(ring.fast_limit.load(Ordering::Relaxed), CAPACITY / 2);
            for n in 0..CAPACITY as u64 {
                // SAFETY: this thread claimed the ring: its only writer.
                unsafe { ring.push([n, 0], pool.room()) };
            }
            assert_eq!(pool.room_stats().waits, 0, "full, not yet past it");
            assert!(
                pool.room.reader_asked.load(Ordering::Relaxed),
                "the reader was asked at half"
            );
            let reader = scope.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                drain_in_order(&pool, 0)
            });
            // SAFETY: as above.
            unsafe { ring.push([CAPACITY as u64, 0], pool.room()) };
            assert_eq!(reader.join().unwrap(), CAPACITY as u64);
            assert_eq!(pool.room_stats().waits, 1);
            assert_eq!(drain_in_order(&pool, CAPACITY as u64), CAPACITY as u64 + 1);
        });
    }
}
