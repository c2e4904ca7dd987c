//! The built-in `function` tracer: one event per traced call entry.

use std::cell::Cell;

use once_cell::sync::Lazy;

use crate::filter::Filter;
use crate::rt::ops;
use crate::rt::ring::{self, Ring, RingPool};
use crate::rt::thread::{current_tid, Untraced};
use crate::sys::clock;
use crate::tracer::{Call, Tracer};

/// One entry into a traced function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionEvent {
    /// Monotonic clock, nanoseconds.
    pub time_ns: u64,
    /// Entry address of the traced function.
    pub function: usize,
    /// Return address into the caller.
    pub parent: usize,
    /// Kernel thread id of the caller.
    pub tid: u32,
}

/// The `function` tracer. Registered under the name `"function"`.
pub struct FunctionTracer {
    pool: Lazy<RingPool<FunctionEvent>>,
}

thread_local! {
    static RING: Cell<*const Ring<FunctionEvent>> = const { Cell::new(std::ptr::null()) };
}

/// Events each thread's buffer holds unless [`FunctionTracer::set_buffer_events`]
/// says otherwise: 512 KiB a thread. Only Rust code reads this tracer
/// ([`FunctionTracer::take_events`], which a program calls often enough,
/// or sets a larger buffer); enabled from C or over the socket, its
/// buffers are never read, and each live thread's stays full at this
/// size.
pub const DEFAULT_FUNCTION_BUFFER_EVENTS: usize = 1 << 14;

/// The process's function tracer.
pub static FUNCTION_TRACER: FunctionTracer = FunctionTracer {
    pool: Lazy::new(|| {
        let pool = RingPool::new();
        pool.set_ring_capacity(DEFAULT_FUNCTION_BUFFER_EVENTS);
        pool
    }),
};

crate::register_tracer!("function", &FUNCTION_TRACER);

impl FunctionTracer {
    /// Takes every buffered event (all threads), oldest first per thread.
    pub fn take_events(&self) -> Vec<FunctionEvent> {
        let _untraced = Untraced::begin();
        let _operation = ops::operation();
        self.pool
            .drain()
            .into_iter()
            .flat_map(|drained| drained.events)
            .map(|mut event| {
                event.time_ns = clock::ticks_to_ns(event.time_ns);
                event
            })
            .collect()
    }

    /// Events lost: a thread's buffer was full, or, with no reader taking
    /// events, the buffer of an exited thread was given to a new thread
    /// unread (more than 64 exited threads' buffers were waiting).
    pub fn lost_events(&self) -> u64 {
        self.pool.lost()
    }

    /// For each buffer, its owner's kernel thread id (0: none) and the
    /// bytes of its event pages in memory (a diagnostic).
    pub fn resident_buffer_bytes(&self) -> Vec<(u32, usize)> {
        self.pool.resident_bytes()
    }

    /// Events each thread's buffer holds, for threads that take a buffer
    /// from now on.
    pub fn set_buffer_events(&self, events: usize) {
        self.pool.set_ring_capacity(events);
    }
}

impl Tracer for FunctionTracer {
    fn on_enable(&self, _filter: &Filter) {
        // Allocate the pool here, not on the first traced call.
        let pool: &'static RingPool<FunctionEvent> = Lazy::force(&FUNCTION_TRACER.pool);
        ring::reset_in_fork_children(pool);
    }

    #[inline]
    fn entry(&self, call: &Call<'_>) {
        let event = FunctionEvent {
            time_ns: call.time_ticks, // converted in take_events
            function: call.function(),
            parent: call.parent(),
            tid: current_tid(),
        };
        let mut ring = RING.get();
        if ring.is_null() {
            match self.pool.claim(event.tid) {
                Some(claimed) => {
                    ring = claimed;
                    RING.set(ring);
                }
                None => return self.pool.count_unbuffered(),
            }
        }
        // SAFETY: rings from the pool are never unmapped, and this thread
        // claimed this one (it is kept in a thread-local): its only writer.
        unsafe { (*ring).push(event, self.pool.room()) };
    }
}
