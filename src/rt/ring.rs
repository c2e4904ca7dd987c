//! Per-thread event rings: one writer (the traced thread), one reader.
//!
//! Each thread that records its first event claims a ring from a fixed pool
//! with one atomic increment and maps its memory with `mmap` (async-signal-
//! safe, and the kernel commits pages only as they are touched). The writer
//! appends at `head`, the reader consumes at `tail`; when the ring is full
//! the event is dropped and counted, never blocking the traced thread.
//!
//! Orderings: the writer's Release store of `head` pairs with the reader's
//! Acquire load (the event bytes are visible before the reader reads them);
//! the reader's Release store of `tail` pairs with the writer's Acquire load
//! (a slot is reused only after the reader is done with it).

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Default events per thread ring (the memory is reserved, not committed:
/// pages count only once events reach them).
pub const DEFAULT_RING_EVENTS: usize = 1 << 20;

/// One thread's ring.
#[repr(C)]
pub struct Ring<T: Copy> {
    // Writer and reader indices on their own cache lines: the traced thread
    // writes head on every event, the reader writes tail; sharing a line
    // would bounce it between cores.
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
    /// Events dropped since the last drain.
    dropped: AtomicU64,
    /// Events dropped since the ring was made.
    dropped_total: AtomicU64,
    tid: AtomicU32,
    /// The thread's name when it claimed the ring (`PR_GET_NAME`, NUL-padded).
    name: [u8; 16],
    capacity: usize,
    slots: *mut UnsafeCell<T>,
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
    assert!(std::mem::offset_of!(AnyRing, capacity) == 168);
    assert!(std::mem::offset_of!(AnyRing, slots) == 176);
};

impl<T: Copy> Ring<T> {
    /// Appends `event`; drops and counts it when the ring is full.
    /// Only the owning thread calls this.
    #[inline]
    pub fn push(&self, event: T) {
        let head = self.head.0.load(Ordering::Relaxed);
        let tail = self.tail.0.load(Ordering::Acquire);
        if head.wrapping_sub(tail) >= self.capacity {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            self.dropped_total.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // SAFETY: slot head % capacity is inside the mapping, and the reader
        // does not read it until head is published below (single writer).
        unsafe {
            (*self.slots.add(head & (self.capacity - 1)))
                .get()
                .write(event)
        };
        self.head.0.store(head.wrapping_add(1), Ordering::Release);
    }

    /// Kernel thread id of the owner.
    pub fn tid(&self) -> u32 {
        self.tid.load(Ordering::Relaxed)
    }

    /// Events dropped because the ring was full, since it was made.
    pub fn dropped(&self) -> u64 {
        self.dropped_total.load(Ordering::Relaxed)
    }

    /// Moves every available event into `out`. Callers serialise readers.
    fn drain_into(&self, out: &mut Vec<T>) {
        let head = self.head.0.load(Ordering::Acquire);
        let tail = self.tail.0.load(Ordering::Relaxed);
        let available = head.wrapping_sub(tail);
        out.reserve(available);
        // At most two runs of slots: from tail to the end of the ring, then
        // from its start (a wrap), each copied as one slice.
        let start = tail & (self.capacity - 1);
        let first = available.min(self.capacity - start);
        for (from, len) in [(start, first), (0, available - first)] {
            // SAFETY: slots in [tail, head) were published by the writer's
            // Release store of head, and it will not overwrite them until
            // tail moves past them; `from + len` stays inside the ring.
            // UnsafeCell<T> has T's layout.
            let run = unsafe { std::slice::from_raw_parts(self.slots.add(from).cast::<T>(), len) };
            out.extend_from_slice(run);
        }
        self.tail.0.store(head, Ordering::Release);
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
    /// Events this ring dropped since the previous drain.
    pub dropped: u64,
}

/// A pool of per-thread rings for one kind of event.
pub struct RingPool<T: Copy + 'static> {
    rings: Box<[AtomicPtr<Ring<T>>]>,
    claimed: AtomicUsize,
    capacity: AtomicUsize,
    /// Events lost because no ring could be had (pool exhausted, no memory).
    unbuffered: AtomicU64,
    reader: Mutex<()>,
    _marker: PhantomData<T>,
}

// SAFETY: rings are shared through atomics; each is written by one thread
// and read by readers serialised with `reader`.
unsafe impl<T: Copy + Send> Sync for RingPool<T> {}
// SAFETY: as above.
unsafe impl<T: Copy + Send> Send for RingPool<T> {}

impl<T: Copy + Send + 'static> RingPool<T> {
    /// A pool for at most `max_threads` threads.
    pub fn new(max_threads: usize) -> Self {
        RingPool {
            rings: (0..max_threads)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            claimed: AtomicUsize::new(0),
            capacity: AtomicUsize::new(DEFAULT_RING_EVENTS),
            unbuffered: AtomicU64::new(0),
            reader: Mutex::new(()),
            _marker: PhantomData,
        }
    }

    /// Events per ring for rings claimed from now on (rounded up to a
    /// power of two: a mask, not a division, finds the slot).
    pub fn set_ring_capacity(&self, events: usize) {
        self.capacity.store(
            events.clamp(16, 1 << 40).next_power_of_two(),
            Ordering::Relaxed,
        );
    }

    /// Claims a ring for the calling thread. `None` when the pool is
    /// exhausted or memory cannot be mapped; the event is then counted as
    /// lost. Async-signal-safe.
    #[cold]
    pub fn claim(&self, tid: u32) -> Option<&Ring<T>> {
        let _errno = super::thread::PreservedErrno::save();
        let index = self.claimed.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = self.rings.get(index) else {
            self.claimed.fetch_sub(1, Ordering::Relaxed);
            return None;
        };
        let capacity = self.capacity.load(Ordering::Relaxed);
        let bytes = std::mem::size_of::<Ring<T>>() + capacity * std::mem::size_of::<T>();
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
        let ring = mem as *mut Ring<T>;
        let header = std::mem::size_of::<Ring<T>>().next_multiple_of(std::mem::align_of::<T>());
        debug_assert!(header == std::mem::size_of::<Ring<T>>());
        let mut name = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes into the buffer; it is
        // a plain system call (async-signal-safe).
        unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
        // SAFETY: the page-aligned mapping holds the header followed by
        // `capacity` slots (Ring's size is a multiple of 64, so the slots are
        // aligned for any T of alignment ≤ 64).
        unsafe {
            ring.write(Ring {
                head: CachePadded(AtomicUsize::new(0)),
                tail: CachePadded(AtomicUsize::new(0)),
                dropped: AtomicU64::new(0),
                dropped_total: AtomicU64::new(0),
                tid: AtomicU32::new(tid),
                name,
                capacity,
                slots: (mem as *mut u8).add(header) as *mut UnsafeCell<T>,
            });
        }
        // Release publishes the initialised ring to readers (Acquire in rings()).
        slot.store(ring, Ordering::Release);
        // SAFETY: the ring was just initialised and is never unmapped.
        Some(unsafe { &*ring })
    }

    /// Counts an event that had no ring to go to.
    pub fn count_unbuffered(&self) {
        self.unbuffered.fetch_add(1, Ordering::Relaxed);
    }

    fn rings(&self) -> impl Iterator<Item = &Ring<T>> {
        let claimed = self.claimed.load(Ordering::Relaxed).min(self.rings.len());
        self.rings[..claimed].iter().filter_map(|slot| {
            // SAFETY: non-null pointers were published by claim and are never
            // unmapped.
            unsafe { slot.load(Ordering::Acquire).as_ref() }
        })
    }

    /// Takes every buffered event, per thread, oldest first.
    pub fn drain(&self) -> Vec<Drained<T>> {
        let _reader = self.reader.lock();
        self.rings()
            .map(|ring| {
                let mut events = Vec::new();
                ring.drain_into(&mut events);
                let name_len = ring.name.iter().position(|&b| b == 0).unwrap_or(16);
                Drained {
                    tid: ring.tid(),
                    name: String::from_utf8_lossy(&ring.name[..name_len]).into_owned(),
                    events,
                    dropped: ring.dropped.swap(0, Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// Events lost so far: rings full, plus events with no ring at all.
    pub fn lost(&self) -> u64 {
        self.rings().map(Ring::dropped).sum::<u64>() + self.unbuffered.load(Ordering::Relaxed)
    }
}
