//! How a ring's owner leaves: a ring's state word with its pool's count
//! of exited threads' rings, the thread-exit hook's marking, and the wait
//! of an exiting thread for a reader that drains periodically.

use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use super::{EXITED, FREE, OWNED};

/// A ring's state word ([`FREE`], [`CLAIMING`], [`OWNED`], [`EXITED`] or
/// [`RESERVED`]) and the exit counts of the pool it belongs to: a
/// thread's exit hook is given this (`rt::thread`) and needs both.
pub(crate) struct RingState {
    pub(super) word: AtomicU32,
    pub(super) exits: &'static Exits,
}

impl RingState {
    pub(super) fn load(&self, order: Ordering) -> u32 {
        self.word.load(order)
    }

    pub(super) fn store(&self, state: u32, order: Ordering) {
        self.word.store(state, order)
    }

    pub(super) fn swap(&self, state: u32, order: Ordering) -> u32 {
        self.word.swap(state, order)
    }

    pub(super) fn compare_exchange(
        &self,
        current: u32,
        new: u32,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u32, u32> {
        self.word.compare_exchange(current, new, success, failure)
    }
}

/// One pool's rings of exited threads and its periodic readers. A pool's
/// own (leaked once, so that rings can point to it whatever becomes of
/// the pool value): a recording's writer drains the graph tracer's pool,
/// not the function tracer's, and exited threads' rings of a pool no one
/// drains must not make exiting threads wait for a writer that will never
/// drain them.
pub(crate) struct Exits {
    /// Rings marked [`EXITED`] that no reader has freed yet.
    pub(super) undrained: AtomicUsize,
    /// Readers that drain the pool periodically, see [`PeriodicReader`].
    pub(super) periodic_readers: AtomicUsize,
}

/// Tells the reader that the owner of the ring whose state is `state`
/// exited: called by the owner's thread-exit hook (`rt::thread`), after
/// its last write (tracing is off on the thread by then). A ring the
/// thread no longer owns is left alone. Returns the ring's pool's exit
/// counts if the ring was marked. Async-signal-safe.
pub(crate) fn mark_exited(state: &RingState) -> Option<&'static Exits> {
    // Release: the reader that sees EXITED sees every event written.
    state
        .compare_exchange(OWNED, EXITED, Ordering::Release, Ordering::Relaxed)
        .ok()?;
    state.exits.undrained.fetch_add(1, Ordering::Relaxed);
    Some(state.exits)
}

/// While alive, a reader drains its pool periodically (a recording's
/// writer thread holds one): threads that exit may wait for it
/// ([`wait_for_reader`]). Made by [`super::RingPool::periodic_reader`].
pub(crate) struct PeriodicReader(pub(super) &'static Exits);

impl Drop for PeriodicReader {
    fn drop(&mut self) {
        self.0.periodic_readers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Exited threads' rings a reader may have left to drain before a thread
/// that exits waits for it ([`wait_for_reader`]).
const MAX_EXITED_UNDRAINED: usize = 32;

/// Exited threads' rings a pool that no reader drains periodically keeps
/// undrained: a thread that needs a ring when there are more (and no
/// free one) takes one of them, its events dropped and counted lost
/// (see [`super::RingPool::claim`]). Without this, a tracer enabled where nothing
/// reads it (the `function` tracer in a C service) kept a ring, and its
/// pages, for every thread that ever exited.
pub(super) const MAX_EXITED_KEPT: usize = 64;

/// How long a thread that exits waits for the reader at most, in
/// milliseconds.
const EXIT_WAIT_MS: u64 = 2000;

/// Frees a ring a reader drained whose owner is gone,
/// counting it off its pool's undrained rings if its owner had said so.
pub(super) fn free_drained(ring_state: &RingState) {
    if ring_state.swap(FREE, Ordering::Release) == EXITED {
        ring_state.exits.undrained.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Called by a thread that exits, after it marked its rings, with the
/// exit counts of each marked ring's pool: when more than
/// [`MAX_EXITED_UNDRAINED`] rings of exited threads wait for a reader
/// that drains that pool periodically (a recording's writer,
/// [`PeriodicReader`]), waits for it to catch up, up to [`EXIT_WAIT_MS`].
/// Thread churn (thousands of short-lived threads) could otherwise outrun
/// a writer that shares the CPUs with them, each exited thread keeping a
/// ring and its pages until drained; the wait holds back only a thread
/// that is done with its own work. No lock is held; async-signal-safe
/// (`nanosleep`).
pub(crate) fn wait_for_reader(exits: &Exits) {
    for _ in 0..EXIT_WAIT_MS {
        if exits.undrained.load(Ordering::Relaxed) <= MAX_EXITED_UNDRAINED
            || exits.periodic_readers.load(Ordering::Relaxed) == 0
        {
            return;
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // SAFETY: a valid timespec; no remainder wanted.
        unsafe { libc::nanosleep(&pause, ptr::null_mut()) };
    }
}
