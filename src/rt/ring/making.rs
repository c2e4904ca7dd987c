//! Making a ring: the mapping (the budget's address space when a budget
//! is set, huge pages for large buffers), the header, and publishing it on
//! the pool's list.

use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::{CachePadded, Ring, RingPool, RingState, FREE, HUGE_PAGE, OWNED, PAGE};

impl<T: Copy + Send + 'static> RingPool<T> {
    /// Maps a ring for the calling thread (`Some(tid)`, made its owner) or
    /// a free one (`None`); the kernel commits its pages as they are
    /// touched.
    pub(super) fn map_ring(&self, owner: Option<u32>) -> Option<*mut Ring<T>> {
        let capacity = self.capacity.load(Ordering::Relaxed);
        let bytes = std::mem::size_of::<Ring<T>>() + capacity * std::mem::size_of::<T>();
        // A ring reserved for a budget of many buffers gives back the pages
        // of what the reader consumed, a buffer's worth at a time, and never
        // holds more than its capacity less that (see `budget`).
        let base = self.room.budget.base();
        let window = if base != 0 && capacity >= 4 * base {
            base
        } else {
            0
        };
        // SAFETY: anonymous private mapping, result checked.
        let mem = unsafe {
            libc::mmap(
                ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            return None;
        }
        // A ring that sweeps the whole budget's address space faults in
        // every page it reaches, once per lap: 4 KiB pages cost a fault per
        // 256 events (≈ 2 µs each here, 10 ns an event); huge pages, one
        // per 131,072. Given back 2 MiB at a time, so they stay whole.
        let give_back_unit = if window * std::mem::size_of::<T>() >= HUGE_PAGE {
            // SAFETY: advice on this mapping just made; failure (no THP)
            // leaves it on 4 KiB pages, which work the same.
            unsafe { libc::madvise(mem, bytes, libc::MADV_HUGEPAGE) };
            HUGE_PAGE
        } else {
            PAGE
        };
        let ring = mem as *mut Ring<T>;
        let header = std::mem::size_of::<Ring<T>>().next_multiple_of(std::mem::align_of::<T>());
        debug_assert!(header == std::mem::size_of::<Ring<T>>());
        // SAFETY: the page-aligned mapping holds the header followed by
        // `capacity` slots (Ring's size is a multiple of 64, so the slots are
        // aligned for any T of alignment ≤ 64).
        unsafe {
            ring.write(Ring {
                head: CachePadded(AtomicUsize::new(0)),
                tail: CachePadded(AtomicUsize::new(0)),
                dropped: AtomicU64::new(0),
                dropped_reported: AtomicU64::new(0),
                tid: AtomicU32::new(0),
                state: RingState {
                    word: AtomicU32::new(if owner.is_some() { OWNED } else { FREE }),
                    exits: self.exits,
                },
                name: [AtomicU64::new(0), AtomicU64::new(0)],
                capacity,
                slots: (mem as *mut u8).add(header) as *mut UnsafeCell<T>,
                // Set below, once the ring is whole.
                fast_limit: AtomicUsize::new(0),
                next: ptr::null(),
                head_at_last_drain: AtomicUsize::new(0),
                owner_block: AtomicUsize::new(0),
                prefaulted_from: AtomicUsize::new(0),
                prefaulted_to: AtomicUsize::new(0),
                head_at_give_back: AtomicUsize::new(0),
                held: AtomicUsize::new(0),
                max_held: capacity - window,
                window,
                give_back_unit,
                given_back_to: AtomicUsize::new(0),
                wrap_wanted: AtomicBool::new(false),
                claimed_while_spawning: AtomicBool::new(false),
            });
            (*ring).set_fast_limit(&self.room);
            if let Some(tid) = owner {
                (*ring).take_over(tid);
            }
        }
        Some(ring)
    }

    /// Puts a ring just mapped on the list; Release publishes the
    /// initialised ring to readers (Acquire in rings()).
    pub(super) fn publish(&self, ring: *mut Ring<T>) {
        let mut newest = self.newest.load(Ordering::Relaxed);
        loop {
            // SAFETY: the ring is ours alone until published below.
            unsafe { (*ring).next = newest };
            match self.newest.compare_exchange_weak(
                newest,
                ring,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => newest = now,
            }
        }
        self.made.fetch_add(1, Ordering::Relaxed);
    }
}
