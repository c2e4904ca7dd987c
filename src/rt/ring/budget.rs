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
//! huge ones). Resident memory of a ring is then at most one window, two
//! units, [`PREFAULT_MIN`](super::PREFAULT_MIN) events and its header's
//! page, plus what it holds, or held at the previous drain (pages made
//! present for that stay until written); all rings together, at most
//! twice `max(budget, threads × buffer)` plus that much per thread, and
//! about once when the reader keeps up.
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

use super::memory::PAGE;
use super::{Ring, Room};

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
        for (slot, len) in [(start, first), (0, count - first)] {
            if len == 0 {
                continue;
            }
            // Whole units inside the run: the units at its ends also hold
            // slots the owner may write (or the ring's header), except
            // past the end of the slots, where the page holds no slot.
            let begin = (slots + slot * size).next_multiple_of(unit);
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
