//! The rings' memory: prefaulting pages off the traced path (free rings
//! kept ready, pages made present ahead of each owner's head), giving
//! pages back to the kernel (free rings, and live threads' rings while the
//! tracer is off), and how much of it is in memory.

use std::sync::atomic::Ordering;

use crate::sys;

use super::budget::Budget;
use super::{Ring, RingPool, EXITED, FREE, OWNED, PAGE, RESERVED, WARM_FREE_RINGS};

/// Events whose slots the reader makes present ahead of an owner's head
/// at least, after each drain (64 KiB of 16-byte events).
pub(super) const PREFAULT_MIN: usize = 4096;

/// Bytes of events a ready ring has present (see [`RingPool::make_ready`]).
pub(super) const READY_BYTES: usize = 256 << 10;

/// [`READY_BYTES`] in events of type `T`.
fn ready_events<T>() -> usize {
    READY_BYTES / std::mem::size_of::<T>().max(1)
}

/// What [`RingPool::release_memory`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// Rings whose slot pages went back to the kernel.
    pub rings: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Rings of live threads left as they were: their owner was inside
    /// tracer code each time it was checked, or they held events not yet
    /// drained.
    pub busy: usize,
}

impl<T: Copy> Ring<T> {
    /// The whole pages holding slots only (the first page, which also holds
    /// the header, is left out): `(start, length)`, the length rounded up
    /// to the end of the mapping.
    pub(super) fn slot_pages(&self) -> (*mut libc::c_void, usize) {
        let slots = self.slots as usize;
        let end = slots + self.capacity * std::mem::size_of::<T>();
        let start = slots.next_multiple_of(PAGE);
        (start as *mut libc::c_void, end.saturating_sub(start))
    }

    /// Makes the pages of the slots of events `[from, to)` present
    /// (writable, zero-filled if new) without writing them: safe while the
    /// owner writes the ring. `to - from` is at most the capacity.
    pub(super) fn populate(&self, from: usize, to: usize) -> bool {
        let mask = self.capacity - 1;
        let count = to.wrapping_sub(from);
        let start = from & mask;
        let first = count.min(self.capacity - start);
        let mut ok = true;
        for (slot, len) in [(start, first), (0, count - first)] {
            if len == 0 {
                continue;
            }
            let begin = self.slots as usize + slot * std::mem::size_of::<T>();
            let end = begin + len * std::mem::size_of::<T>();
            let page = begin & !(PAGE - 1);
            // SAFETY: the range lies inside this ring's mapping (which is
            // never unmapped); MADV_POPULATE_WRITE faults pages in as a
            // write would, but writes nothing.
            let rc =
                unsafe { libc::madvise(page as *mut _, end - page, libc::MADV_POPULATE_WRITE) };
            ok &= rc == 0;
        }
        ok
    }

    /// Makes the pages of the next `ahead` events after `head` present, if
    /// an earlier call did not already; `false` when the kernel cannot
    /// (before Linux 5.14). Reader only.
    pub(super) fn prefault_ahead(&self, head: usize, ahead: usize) -> bool {
        let (from, to) = (
            self.prefaulted_from.load(Ordering::Relaxed),
            self.prefaulted_to.load(Ordering::Relaxed),
        );
        if to.wrapping_sub(from) >= self.capacity {
            return true; // every page, since the last release
        }
        // Start where the last call ended, unless the owner is past it
        // (or nothing was prefaulted): then at its head.
        let owner_past = (head.wrapping_sub(to) as isize) > 0;
        let (from, start) = if from == to || owner_past {
            (head, head)
        } else {
            (from, to)
        };
        let end = head.wrapping_add(ahead.min(self.capacity));
        if (end.wrapping_sub(start) as isize) <= 0 {
            return true;
        }
        let end = if end.wrapping_sub(from) > self.capacity {
            from.wrapping_add(self.capacity)
        } else {
            end
        };
        let ok = self.populate(start, end);
        self.prefaulted_from.store(from, Ordering::Relaxed);
        self.prefaulted_to.store(end, Ordering::Relaxed);
        ok
    }

    /// Whether slot pages may be present: written by an owner, or made
    /// present by the reader, since they were last given back. Reader only.
    pub(super) fn may_hold_pages(&self) -> bool {
        self.head.0.load(Ordering::Relaxed) != self.head_at_give_back.load(Ordering::Relaxed)
            || self.prefaulted_to.load(Ordering::Relaxed)
                != self.prefaulted_from.load(Ordering::Relaxed)
    }

    /// Makes the next owner start writing at the ring's first slot: head
    /// and tail (equal: nothing unread) move on to the next multiple of the
    /// capacity. For a ring whose owner is gone, before it is given to
    /// another thread, by a reader or with the reader lock held.
    ///
    /// Each owner otherwise went on where the previous one stopped, so a
    /// ring reused by thread after thread touched page after page until all
    /// of it was in memory (4 MiB at the recorder's size): with threads
    /// churned by the thousand, the free rings kept tens of MiB (the chaos
    /// benchmark: 10-18 MiB in free rings at its peaks). Starting each
    /// owner at slot 0 keeps a reused ring's pages to what its busiest
    /// owner wrote.
    pub(super) fn start_over(&self) {
        let head = self.head.0.load(Ordering::Relaxed);
        if head != self.tail.0.load(Ordering::Relaxed) {
            return; // events unread: never the case when a ring is freed
        }
        let Some(start) = head.checked_next_multiple_of(self.capacity) else {
            return; // 2^64 events: never
        };
        if start == head {
            return;
        }
        // Pages in memory stay so (the reader's prefaulted ones included):
        // a trim still gives them back.
        let touched = self.may_hold_pages();
        self.forget_prefaulted();
        self.head_at_give_back
            .store(if touched { head } else { start }, Ordering::Relaxed);
        self.head_at_last_drain.store(start, Ordering::Relaxed);
        self.given_back_to.store(start, Ordering::Relaxed);
        self.wrap_wanted.store(false, Ordering::Relaxed);
        // The owner is gone: no early wrap moves the tail meanwhile.
        self.tail.0.store(start, Ordering::Relaxed);
        self.head.0.store(start, Ordering::Relaxed);
    }

    /// Frees this ring, drained, whose owner is gone (see
    /// [`free_drained`](super::free_drained)), for its next owner to start
    /// at its first slot ([`Ring::start_over`]), giving what it holds of
    /// the memory budget back. Reader only.
    pub(super) fn free_for_next_owner(&self, budget: &Budget) {
        self.return_held(budget);
        self.start_over();
        super::free_drained(&self.state);
    }

    /// Forgets what was prefaulted (the pages were given back).
    pub(super) fn forget_prefaulted(&self) {
        self.prefaulted_from.store(0, Ordering::Relaxed);
        self.prefaulted_to.store(0, Ordering::Relaxed);
    }

    /// Gives the slot pages back to the kernel (zero-filled on next touch).
    /// The caller makes sure no one reads or writes the slots meanwhile.
    pub(super) fn give_back_pages(&self) -> usize {
        let (start, bytes) = self.slot_pages();
        self.forget_prefaulted();
        let head = self.head.0.load(Ordering::Relaxed);
        self.head_at_give_back.store(head, Ordering::Relaxed);
        // Nothing behind the head is in memory now.
        self.given_back_to.store(head, Ordering::Relaxed);
        if bytes == 0 {
            return 0;
        }
        // SAFETY: the range is whole pages of this ring's mapping, holding
        // slots only; the caller guarantees nobody uses them meanwhile.
        let rc = unsafe { libc::madvise(start, bytes, libc::MADV_DONTNEED) };
        if rc == 0 {
            bytes
        } else {
            0
        }
    }
}

impl<T: Copy + Send + 'static> RingPool<T> {
    /// Keeps `count` free rings with the pages of their next
    /// [`READY_BYTES`] of events present from now on (made now and after
    /// each drain), and after each drain makes the pages ahead of each
    /// owner's head present: threads then claim warm rings and do not
    /// fault on their first pass. 0 stops both (the default; the rings
    /// already made stay). Reader side: takes the reader lock.
    pub fn keep_ready(&self, count: usize) {
        self.ready_wanted.store(count, Ordering::Relaxed);
        let _reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        self.make_ready();
    }

    /// Makes the first `ready_wanted` free rings (in the order `claim`
    /// looks at them) have the pages of their next [`READY_BYTES`] of
    /// events present, mapping new ones if there are fewer. Under the
    /// reader lock.
    ///
    /// Not every page: with threads that start and exit by the thousand,
    /// each ready ring is claimed by a thread that may write a few pages
    /// and exit, and whole rings made present (4 MiB each, at the
    /// recorder's size) were the most of the memory a recording held.
    /// [`READY_BYTES`] is what a thread making 400k traced calls a second
    /// writes in 20 ms, twice the drain interval; after each drain the
    /// reader makes the pages ahead of each owner's head present.
    pub(super) fn make_ready(&self) {
        let wanted = self.ready_wanted.load(Ordering::Relaxed);
        if wanted == 0 {
            return;
        }
        let mut ready = 0;
        let capacity = self.capacity.load(Ordering::Relaxed);
        for ring in self.rings() {
            if ready == wanted {
                return;
            }
            // Only rings of the current size are claimed (see `claim`).
            if ring.state.load(Ordering::Relaxed) == FREE && ring.capacity == capacity {
                // Free rings of exited threads: their pages were touched,
                // or are made present here.
                if !self.cannot_prefault.load(Ordering::Relaxed)
                    && !ring
                        .prefault_ahead(ring.head.0.load(Ordering::Relaxed), ready_events::<T>())
                {
                    self.cannot_prefault.store(true, Ordering::Relaxed);
                }
                ready += 1;
            }
        }
        for _ in ready..wanted {
            let Some(ring) = self.map_ring(None) else {
                return;
            };
            // SAFETY: the ring was just made and is not published yet: no
            // one else uses it.
            let made = unsafe { &*ring };
            if !self.cannot_prefault.load(Ordering::Relaxed)
                && !made.prefault_ahead(0, ready_events::<T>())
            {
                self.cannot_prefault.store(true, Ordering::Relaxed);
            }
            self.publish(ring);
        }
    }

    /// After a drain: gives back the pages of the free rings beyond the
    /// first few in the order [`RingPool::claim`] takes them (as many as
    /// [`RingPool::keep_ready`] keeps, at least [`WARM_FREE_RINGS`]), which
    /// stay warm for the next threads to start. Rings of exited threads
    /// are freed by drains; without this, each kept the pages its thread
    /// touched, and thread churn grew memory by one ring's pages per
    /// thread. Under the reader lock.
    pub(super) fn trim_free(&self) {
        let keep = self
            .ready_wanted
            .load(Ordering::Relaxed)
            .max(WARM_FREE_RINGS);
        let mut free = 0;
        let capacity = self.capacity.load(Ordering::Relaxed);
        for ring in self.rings() {
            if ring.state.load(Ordering::Relaxed) != FREE {
                continue;
            }
            // Rings of another size are not claimed (see `claim`): none
            // is kept warm.
            if ring.capacity == capacity {
                free += 1;
            }
            if (free <= keep && ring.capacity == capacity) || !ring.may_hold_pages() {
                continue;
            }
            // Reserved while released, as in `release_memory`.
            if ring
                .state
                .compare_exchange(FREE, RESERVED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                ring.give_back_pages();
                ring.state.store(FREE, Ordering::Release);
            }
        }
    }

    /// Gives the slot pages of rings back to the kernel (mapped again,
    /// zero-filled, on first touch): those of free rings, and, with
    /// `owned_too`, those of live threads' rings that hold no undrained
    /// event.
    ///
    /// `owned_too` is for a tracer that is off: the caller (under the
    /// operation lock, which keeps it off) guarantees that from now on no
    /// thread starts writing a ring, i.e. that a thread which sets its
    /// recursion guard after this call began finds the tracer off. A thread
    /// writes its ring only with its guard set (the fast entry and exit set
    /// it before reading whether the tracer is on; the generic path runs
    /// under it). So, after a full memory barrier on every CPU running a
    /// thread of the process (`membarrier`), an owner whose guard reads
    /// clear is not writing and will not write its ring: either its last
    /// write was before the barrier (then visible here: the ring's head is
    /// read after the guard), or it set the guard after the barrier and
    /// found the tracer off. Owners found inside tracer code are checked
    /// again a few times, then left (counted `busy`); without `membarrier`
    /// no live ring is released. The guard is read with
    /// `process_vm_readv`, which fails instead of faulting if the owner
    /// exited and its thread-local block is gone (a dead owner writes
    /// nothing: its ring is released).
    pub fn release_memory(&self, owned_too: bool) -> Released {
        let _reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let mut released = Released::default();
        for ring in self.rings() {
            // An exited owner's ring with nothing left to drain is free
            // (only readers, under the reader lock, change EXITED; the
            // Acquire load of the state comes first, so head is the last).
            if ring.state.load(Ordering::Acquire) == EXITED
                && ring.head.0.load(Ordering::Acquire) == ring.tail.0.load(Ordering::Relaxed)
            {
                ring.free_for_next_owner(&self.room.budget);
            }
            // Reserved while released: a thread that wants a ring meanwhile
            // takes another or maps one, never writes into this one.
            let reserved = ring
                .state
                .compare_exchange(FREE, RESERVED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok();
            if reserved {
                let bytes = ring.give_back_pages();
                released.rings += usize::from(bytes != 0);
                released.bytes += bytes;
                ring.state.store(FREE, Ordering::Release);
            }
        }
        if !owned_too {
            return released;
        }
        let barrier = sys::membarrier::register_sync_core()
            .ok()
            .and_then(|()| sys::membarrier::sync_core().ok());
        let mut busy: Vec<&Ring<T>> = Vec::new();
        for ring in self.rings() {
            if ring.state.load(Ordering::Acquire) == OWNED {
                if barrier.is_some() {
                    busy.push(ring);
                } else {
                    released.busy += 1;
                }
            }
        }
        for attempt in 0..RELEASE_ATTEMPTS {
            if busy.is_empty() {
                break;
            }
            if attempt > 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            busy.retain(|ring| {
                if owner_guard(ring.owner_block.load(Ordering::Relaxed)) == Some(true) {
                    return true; // inside tracer code: look again
                }
                // After the guard: the owner's last events are visible.
                let head = ring.head.0.load(Ordering::Acquire);
                if head != ring.tail.0.load(Ordering::Relaxed) {
                    released.busy += 1; // events not drained: keep them
                    return false;
                }
                let bytes = ring.give_back_pages();
                released.rings += usize::from(bytes != 0);
                released.bytes += bytes;
                false
            });
        }
        released.busy += busy.len();
        released
    }

    /// For each ring, its owner's thread id (0 for a free ring) and how
    /// many bytes of its slot pages are in memory (`mincore`; the first
    /// page, shared with the header, is not counted).
    pub fn resident_bytes(&self) -> Vec<(u32, usize)> {
        self.rings()
            .map(|ring| {
                let owner = match ring.state.load(Ordering::Acquire) {
                    OWNED => ring.tid(),
                    _ => 0,
                };
                let (start, bytes) = ring.slot_pages();
                let mut pages = vec![0u8; bytes.div_ceil(PAGE)];
                // SAFETY: the range is whole pages of this ring's mapping
                // (its end rounded up to the mapping's last page), and
                // `pages` has one byte per page.
                let rc = unsafe { libc::mincore(start, bytes, pages.as_mut_ptr()) };
                let resident = if rc == 0 {
                    pages.iter().filter(|&&p| p & 1 != 0).count() * PAGE
                } else {
                    0
                };
                (owner, resident)
            })
            .collect()
    }
}

/// How many times [`RingPool::release_memory`] looks at an owner found
/// inside tracer code, 1 ms apart.
const RELEASE_ATTEMPTS: usize = 5;

/// Whether the thread whose block is at `block` has its recursion guard
/// set; `None` when that memory is not mapped (the thread exited and its
/// block is gone) or `block` is 0 (no owner recorded). Any other failure
/// to read it counts as set.
fn owner_guard(block: usize) -> Option<bool> {
    if block == 0 {
        return None;
    }
    let mut guard = 0u8;
    let local = libc::iovec {
        iov_base: (&mut guard as *mut u8).cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: block as *mut libc::c_void,
        iov_len: 1,
    };
    // SAFETY: reads one byte of this process's memory into `guard`; the
    // kernel checks the remote address and fails (EFAULT) if unmapped
    // instead of faulting.
    let read = unsafe { libc::process_vm_readv(sys::getpid(), &local, 1, &remote, 1, 0) };
    match read {
        1 => Some(guard != 0),
        _ if sys::last_errno() == libc::EFAULT => None,
        _ => Some(true),
    }
}
