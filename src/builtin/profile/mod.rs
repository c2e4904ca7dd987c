//! The built-in `profile` tracer: per-function and per-call-path latency
//! aggregated in the process while it runs (as LLVM XRay's profiling mode
//! does), read live with [`ProfileTracer::snapshot`].
//!
//! Per thread, per function: the completed calls' durations as a
//! [`Histogram`](fntrace_format::analysis::Histogram) (count, exact sum,
//! minimum, maximum, log-linear buckets), the total (a call nested in
//! another call of the same function on its thread adds to everything but
//! the total: recursion counted once, as `fntrace report` does) and the
//! self time (duration minus the direct children's: the nearest enclosing
//! calls this tracer saw); per call path (function and parent path: a call
//! trie), the calls, total and self time.
//!
//! # On the traced path
//! Each thread writes a block of its own ([`block`]), claimed at its first
//! traced call (a free block left by an exited thread, else a new
//! `mmap`: the one system call, once per thread) and found through a
//! pointer in the runtime's thread block; then loads and stores only: no
//! lock, no allocation, no system call. Memory is bounded per thread (see
//! [`block`] for the budget); what does not fit is counted in
//! [`NotKept`](fntrace_format::analysis::NotKept).
//!
//! A site selected by this tracer alone calls its fast path ([`fast`],
//! `asm/x86_64/profile.S`), which does the common case of
//! [`block::Block::enter`] and [`block::Block::exit`] in assembly, with
//! the shadow stack, as the graph tracer's does; the rest falls back to
//! the generic path and the Rust code here.
//!
//! # Threads that exit
//! A `pthread` key's destructor folds the thread's counters into the
//! retired total (under the operation lock, which snapshots hold too: a
//! snapshot sees a thread's calls either in its block or in the retired
//! total, never both, never neither) and gives the block back, its pages
//! returned to the kernel, for the next thread to claim.
//!
//! # Eras
//! Enabling the tracer and [`ProfileTracer::reset`] start a new era: each
//! thread, at its next traced call, forgets the calls it had open (their
//! exits may not all have been seen while the tracer was off), and after a
//! reset zeroes its counters. Calls that span an enable or a reset are not
//! counted.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::filter::Filter;
use crate::rt::ops;
use crate::rt::ring::{self, ForkReset};
use crate::rt::thread::{current_tid, thread_block, Untraced};
use crate::sys::{self, clock};
use crate::tracer::{self, Call, FastEntries, FastPath, Return, Tracer};
use fntrace_format::analysis::ProfileSnapshot;

pub(crate) mod block;
mod fast;
mod merge;
mod open;
pub(crate) use open::OpenCall;

use block::{Block, CLAIMING, FREE, ORPHANED, OWNED};
use merge::Aggregate;

/// The `profile` tracer. Registered under the name `"profile"`.
pub struct ProfileTracer {
    /// The newest block; each points to the one made before it. Blocks
    /// are never unmapped.
    newest: AtomicUsize,
    /// Blocks mapped so far.
    made: AtomicUsize,
    /// Counters of threads that exited, since the last reset.
    retired: Mutex<Option<Aggregate>>,
    /// The current reset epoch (from 1).
    epoch: AtomicU64,
    /// Calls of threads that could have no block (no memory).
    unblocked: AtomicU64,
    /// The thread-exit key plus one (0: none yet).
    exit_key: AtomicUsize,
    /// This tracer's bit in the enabled mask (0 before first enabled).
    bit: AtomicU64,
}

/// The process's profile tracer.
pub static PROFILE_TRACER: ProfileTracer = ProfileTracer {
    newest: AtomicUsize::new(0),
    made: AtomicUsize::new(0),
    retired: Mutex::new(None),
    epoch: AtomicU64::new(1),
    unblocked: AtomicU64::new(0),
    exit_key: AtomicUsize::new(0),
    bit: AtomicU64::new(0),
};

crate::register_tracer!("profile", &PROFILE_TRACER);

/// This thread's block (null until its first traced call), kept in the
/// thread's block of the runtime, where the fast paths find it.
#[inline(always)]
fn this_threads_block() -> *const Block {
    thread_block().profile_block.get().cast()
}

/// Sets (or clears, with null) this thread's block.
fn set_this_threads_block(block: *const Block) {
    thread_block().profile_block.set(block.cast());
}

impl ProfileTracer {
    /// Every thread's calls so far (since the last [`ProfileTracer::reset`]),
    /// merged, with function names from the symbol tables.
    ///
    /// Taken while the traced threads run: each thread's counters are
    /// single-writer words read with atomic loads, so each number is one
    /// its thread wrote; a call completing while the snapshot reads may be
    /// in some of its function's numbers and not yet in others (e.g. in
    /// the sum but not yet in a bucket), so a live snapshot can be a few
    /// calls behind, per thread, in any number, never ahead of the calls
    /// made and never torn within one number. A thread that exits during
    /// the snapshot is counted once. Taken with the threads quiescent (no
    /// traced call in progress, or the tracer off), every number is exact.
    pub fn snapshot(&self) -> ProfileSnapshot {
        let _untraced = Untraced::begin();
        let _operation = ops::operation();
        self.reap_orphans();
        let mut merged = self.retired.lock().clone().unwrap_or_default();
        let epoch = self.epoch.load(Ordering::Acquire);
        let era = fast::era().load(Ordering::Acquire);
        let on = self.is_enabled();
        for block in self.blocks() {
            if block.header.state.load(Ordering::Acquire) != OWNED {
                continue;
            }
            let running = on && block.header.era.load(Ordering::Relaxed) == era;
            merged.add_block(block, epoch, running);
        }
        merged.add_unkept(self.unblocked.load(Ordering::Relaxed));
        merged.snapshot(clock::monotonic_ns())
    }

    /// Forgets every call so far: the retired total now, each live
    /// thread's counters at its next traced call (until then a snapshot
    /// leaves them out). Calls in progress are not counted when they end.
    pub fn reset(&self) {
        let _untraced = Untraced::begin();
        let _operation = ops::operation();
        *self.retired.lock() = None;
        self.unblocked.store(0, Ordering::Relaxed);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        fast::era().fetch_add(1, Ordering::Release);
    }

    /// How many resets there have been so far (from 0): two snapshots
    /// with the same count are of one era of counters, the later one's
    /// numbers never below the earlier one's.
    pub(crate) fn resets(&self) -> u64 {
        self.epoch.load(Ordering::Acquire) - 1
    }

    /// Blocks mapped so far: at most one per thread alive at a time (the
    /// blocks of exited threads are reused).
    pub fn blocks_made(&self) -> usize {
        self.made.load(Ordering::Relaxed)
    }

    /// Bytes of address space one thread's block takes (see the budget in
    /// the module docs); only pages touched are memory.
    pub fn block_bytes(&self) -> usize {
        block::BLOCK_BYTES
    }

    /// The mask a site selected by this tracer alone has when it may call
    /// the fast entries (`asm/x86_64/profile.S`): this tracer's bit while
    /// it is enabled and timestamps come from the TSC; else 0.
    fn fast_path_bit(&self) -> u64 {
        let bit = self.bit.load(Ordering::Relaxed);
        if self.is_enabled() && clock::uses_tsc() {
            bit
        } else {
            0
        }
    }

    /// Whether the tracer is enabled now.
    pub(crate) fn is_enabled(&self) -> bool {
        let bit = self.bit.load(Ordering::Relaxed);
        bit != 0 && tracer::enabled_mask() & bit != 0
    }

    fn blocks(&self) -> impl Iterator<Item = &'static Block> {
        let mut at = self.newest.load(Ordering::Acquire);
        std::iter::from_fn(move || {
            // SAFETY: non-zero values are blocks published by `claim`
            // (Release; Acquire above and below), never unmapped.
            let block = unsafe { (at as *const Block).as_ref() }?;
            at = block.header.next.load(Ordering::Acquire);
            Some(block)
        })
    }

    /// The calling thread's block, claimed if it has none; `None` when no
    /// memory could be had. Async-signal-safe.
    #[inline]
    fn block(&self) -> Option<&'static Block> {
        let block = this_threads_block();
        if !block.is_null() {
            // SAFETY: blocks are never unmapped; this thread claimed it.
            return Some(unsafe { &*block });
        }
        self.claim()
    }

    #[cold]
    fn claim(&self) -> Option<&'static Block> {
        let _errno = crate::rt::thread::PreservedErrno::save();
        let tid = current_tid();
        let free = self.blocks().find(|block| {
            block
                .header
                .state
                .compare_exchange(FREE, CLAIMING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        });
        let block = match free {
            Some(block) => block,
            None => {
                let Some(block) = Block::map() else {
                    self.unblocked.fetch_add(1, Ordering::Relaxed);
                    return None;
                };
                block.header.state.store(CLAIMING, Ordering::Relaxed);
                let mut newest = self.newest.load(Ordering::Relaxed);
                loop {
                    block.header.next.store(newest, Ordering::Relaxed);
                    match self.newest.compare_exchange_weak(
                        newest,
                        block as *const Block as usize,
                        Ordering::Release,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break,
                        Err(now) => newest = now,
                    }
                }
                self.made.fetch_add(1, Ordering::Relaxed);
                block
            }
        };
        block.header.tid.store(tid, Ordering::Relaxed);
        // A free block's counters are zero: it holds the current epoch's
        // nothing. Its era stays 0, so the first call catches up.
        block
            .header
            .epoch
            .store(self.epoch.load(Ordering::Acquire), Ordering::Relaxed);
        block.header.era.store(0, Ordering::Relaxed);
        block.header.state.store(OWNED, Ordering::Release);
        set_this_threads_block(block);
        let key = self.exit_key.load(Ordering::Acquire);
        if key != 0 {
            // SAFETY: the key was made by `prepare_exit_key` and is never
            // deleted; like the rings' exit key, one of the first keys,
            // whose value is stored in the thread's descriptor without
            // allocating.
            unsafe {
                libc::pthread_setspecific(
                    (key - 1) as libc::pthread_key_t,
                    block as *const Block as *const libc::c_void,
                )
            };
        }
        Some(block)
    }

    /// Makes the thread-exit key (once), off the traced path.
    fn prepare_exit_key(&self) {
        if self.exit_key.load(Ordering::Acquire) != 0 {
            return;
        }
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `key` is a valid out-pointer; the destructor is
        // `retire`, which takes the block the value names.
        if unsafe { libc::pthread_key_create(&mut key, Some(retire)) } == 0 {
            self.exit_key.store(key as usize + 1, Ordering::Release);
        }
        // Without a key, blocks of exited threads are found by `reap_orphans`.
    }

    /// Folds `block` (whose owner is gone, or is the calling thread at its
    /// exit) into the retired total and frees it. Under the operation lock.
    fn fold_and_free(&self, block: &Block) {
        let epoch = self.epoch.load(Ordering::Acquire);
        self.retired
            .lock()
            .get_or_insert_with(Aggregate::default)
            .add_block(block, epoch, false);
        block.wipe();
        block.header.state.store(FREE, Ordering::Release);
    }

    /// Folds and frees the blocks of threads gone without their exit key's
    /// destructor (the other threads of a `fork`'s parent; threads not
    /// made by `pthread_create`). Under the operation lock.
    fn reap_orphans(&self) {
        let pid = sys::getpid();
        for block in self.blocks() {
            let state = block.header.state.load(Ordering::Acquire);
            let gone = state == ORPHANED
                || (state == OWNED
                    && sys::tgkill(pid, block.header.tid.load(Ordering::Relaxed) as i32, 0)
                        == Err(libc::ESRCH));
            if gone {
                self.fold_and_free(block);
            }
        }
    }
}

/// The thread-exit key's destructor: no more tracing on this thread, then
/// its block is folded into the retired total and freed.
unsafe extern "C" fn retire(value: *mut libc::c_void) {
    // Never ended: the thread is exiting, and a later destructor's traced
    // calls must not write the block once freed.
    std::mem::forget(Untraced::begin());
    set_this_threads_block(std::ptr::null());
    // SAFETY: the value is the block this thread claimed (`claim`);
    // blocks are never unmapped.
    let block = unsafe { &*(value as *const Block) };
    let _operation = ops::operation();
    if block.header.state.load(Ordering::Acquire) == OWNED {
        PROFILE_TRACER.fold_and_free(block);
    }
}

impl ForkReset for ProfileTracer {
    /// The child has only the forking thread: the other blocks are the
    /// parent's threads', folded by the next snapshot (the child's profile
    /// starts with the parent's, as its memory does).
    fn reset_in_fork_child(&self, parent_tid: u32, child_tid: u32) {
        for block in self.blocks() {
            let h = &block.header;
            if h.state.load(Ordering::Relaxed) != OWNED {
                continue;
            }
            if h.tid.load(Ordering::Relaxed) == parent_tid {
                h.tid.store(child_tid, Ordering::Relaxed);
            } else {
                h.state.store(ORPHANED, Ordering::Release);
            }
        }
    }
}

impl FastPath for ProfileTracer {
    fn entries(&self) -> FastEntries {
        fast::entries()
    }

    /// Tells the fast paths whether they may run (see `fast_path_bit`),
    /// with the tick scale in force.
    fn refresh(&self) -> bool {
        fast::set(self.fast_path_bit(), clock::TickScale::current())
    }
}

impl Tracer for ProfileTracer {
    fn on_enable(&self, _filter: &Filter) {
        self.prepare_exit_key();
        ring::reset_in_fork_children(&PROFILE_TRACER);
        let index = tracer::find("profile").unwrap_or(0);
        self.bit.store(1 << index, Ordering::Relaxed);
        tracer::offer_fast_path(tracer::PROFILE_FAST_PATH, index, &PROFILE_TRACER);
        // Calls open when the tracer was last switched off never report
        // their exits: each thread forgets them at its next call.
        fast::era().fetch_add(1, Ordering::Release);
    }

    fn wants_exit(&self) -> bool {
        true
    }

    #[inline]
    fn entry(&self, call: &Call<'_>) {
        if !call.exit_hooked() {
            return;
        }
        let Some(block) = self.block() else {
            return;
        };
        let era = fast::era().load(Ordering::Acquire);
        if block.header.era.load(Ordering::Relaxed) != era {
            block.catch_up(era, self.epoch.load(Ordering::Acquire));
        }
        block.enter(call.site_return(), call.depth() as u32, call.time_ticks);
    }

    #[inline]
    fn exit(&self, ret: &Return) {
        let block = this_threads_block();
        if block.is_null() {
            return;
        }
        // SAFETY: blocks are never unmapped; this thread claimed it.
        let block = unsafe { &*block };
        let era = fast::era().load(Ordering::Acquire);
        if block.header.era.load(Ordering::Relaxed) != era {
            // Its entry belongs to an earlier era: forgotten.
            return block.catch_up(era, self.epoch.load(Ordering::Acquire));
        }
        let scale = clock::TickScale::current();
        let duration = scale.duration_ns(ret.entry_ticks, ret.exit_ticks);
        block.exit(ret.depth() as u32, ret.entry_ticks, duration);
    }
}
