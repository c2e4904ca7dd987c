//! The runtime future linker's table: the futures being polled, found by
//! (async function, future address) in a fixed number of slots allocated
//! once, claimed and freed with compare-and-swap: a first poll's entry
//! claims its future's slot, each poll's exit finds it, without a lock or
//! an allocation, whichever thread polls it.
//!
//! A future dropped before Ready leaves the table when its drop function
//! says so ([`FutureTable::dropped_at`]), or when a new future is first
//! polled at its address.
//!
//! Each argument table's async functions get indices of their own (a
//! block, [`FutureTable::begin_block`]): when the specs are replaced
//! (`fntrace top --async` sets them and clears them), the futures left
//! pending under the old ones hold keys no new future can have, and their
//! slots are free to claim (one compare-and-swap from the stale key: a
//! slot holding a current key is never taken).
//!
//! Open addressing with linear probing, at most [`MAX_PROBE`] slots from
//! a key's hash. A slot's key goes from empty to a future's, from a
//! future's to freed when it ends, from freed to another future's; never
//! back to empty, so a search may stop at the first empty slot. The polls
//! of one future never run at once (`poll` takes `Pin<&mut Self>`), and
//! the executor orders one poll before the next (its queues synchronise):
//! only the thread polling a future touches its slot's counters, so they
//! are plain relaxed atomics; only claiming a slot races, between
//! different futures.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use fntrace_format::coroutine::{self, PollEnd};

/// Slots looked at from a key's hash at most: a future whose slots there
/// are all taken goes untracked.
pub(crate) const MAX_PROBE: usize = 64;

/// Threads a future's record names (the first ones its polls ran on).
pub(crate) const TIDS: usize = 4;

const EMPTY: u64 = 0;
/// A slot whose future ended: claimable, and searched past.
const FREED: u64 = u64::MAX;
const ADDRESS_BITS: u32 = 48;

/// Async functions a table tells apart (the key's function bits).
pub(crate) const MAX_FUNCTIONS: usize = (1 << 15) - 1;

/// One poll, as its entry and exit see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Poll {
    /// The async function's index (below [`MAX_FUNCTIONS`]).
    pub function: u16,
    /// The future's address.
    pub address: u64,
    /// Its state when the poll returned.
    pub state_out: u64,
    /// When the poll began and returned (ticks).
    pub entry_ticks: u64,
    /// See `entry_ticks`.
    pub exit_ticks: u64,
    /// The thread that ran it.
    pub tid: u32,
}

/// A future that ended (Ready or panicked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ended {
    /// How its last poll left it.
    pub end: PollEnd,
    /// Its first poll's entry (ticks).
    pub first_ticks: u64,
    /// Its last poll's exit (ticks).
    pub end_ticks: u64,
    /// Time in its polls (ticks).
    pub busy_ticks: u64,
    /// Its polls.
    pub polls: u64,
    /// The first [`TIDS`] threads its polls ran on (0: none).
    pub tids: [u32; TIDS],
    /// Whether they ran on more threads than those.
    pub more_tids: bool,
}

/// What a poll's entry did to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entered {
    /// A later poll: nothing.
    Later,
    /// A first poll: its future is tracked from now on.
    Started,
    /// A first poll at the address of a future of the same function still
    /// pending, which was dropped before Ready: the new one is tracked in
    /// its slot.
    Replaced,
    /// A first poll with no slot to be had: its future goes untracked.
    Untracked,
}

/// What a poll did to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Linked {
    /// Its future is pending (tracked).
    Pending,
    /// Its future ended.
    Ended(Ended),
    /// A first poll with no slot to be had: its future goes untracked.
    #[cfg(test)]
    Untracked,
    /// A later poll of a future not in the table (untracked, or first
    /// polled before the linker ran).
    Unknown,
}

#[derive(Default)]
struct Slot {
    key: AtomicU64,
    first_ticks: AtomicU64,
    busy_ticks: AtomicU64,
    polls: AtomicU64,
    tids: [AtomicU32; TIDS],
    more_tids: AtomicU32,
}

/// The futures being polled; see the module's documentation.
pub(crate) struct FutureTable {
    slots: Box<[Slot]>,
    mask: usize,
    /// First polls that found no slot.
    untracked: AtomicU64,
    /// First polls at an address where a future of the same function was
    /// still pending: that one was dropped before Ready.
    dropped: AtomicU64,
    /// The current block of function indices: its first | its length <<
    /// 16 (see the module's documentation).
    block: AtomicU32,
    /// Where the next block begins (the control path's).
    next_block: AtomicU32,
}

impl FutureTable {
    /// A table of `slots` (rounded up to a power of two, at least
    /// [`MAX_PROBE`]). Allocates: never on the traced path.
    pub(crate) fn new(slots: usize) -> FutureTable {
        let slots = slots.max(MAX_PROBE).next_power_of_two();
        FutureTable {
            slots: (0..slots).map(|_| Slot::default()).collect(),
            mask: slots - 1,
            untracked: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            block: AtomicU32::new((MAX_FUNCTIONS as u32) << 16),
            next_block: AtomicU32::new(0),
        }
    }

    /// A new block of `functions` indices (at most [`MAX_FUNCTIONS`]):
    /// its first. Futures keyed with other indices are stale from now on.
    /// The control path's, one caller at a time (when specs are set).
    pub(crate) fn begin_block(&self, functions: usize) -> u16 {
        let len = functions.min(MAX_FUNCTIONS) as u32;
        let mut first = self.next_block.load(Ordering::Relaxed);
        if first + len > MAX_FUNCTIONS as u32 {
            first = 0;
        }
        self.next_block.store(first + len, Ordering::Relaxed);
        self.block.store(first | len << 16, Ordering::Relaxed);
        first as u16
    }

    /// Whether `key` (a future's) has an index of the current block.
    #[inline]
    fn is_current(&self, key: u64) -> bool {
        let block = self.block.load(Ordering::Relaxed);
        let (first, len) = (block & 0xffff, block >> 16);
        let index = ((key >> ADDRESS_BITS) as u32).wrapping_sub(1);
        index.wrapping_sub(first) < len
    }

    /// Its slots.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// First polls that found no slot so far.
    pub(crate) fn untracked(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Futures dropped while pending, seen so far.
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Futures tracked now (pending, or in a poll): a walk of every slot,
    /// for the control path.
    pub(crate) fn live(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| match s.key.load(Ordering::Relaxed) {
                EMPTY | FREED => false,
                key => self.is_current(key),
            })
            .count()
    }

    /// Links `poll` into its future, by the rule the offline linker
    /// follows (`fntrace_format::coroutine`): [`entered`](Self::entered)
    /// then [`exited`](Self::exited), as the poll's entry and exit do,
    /// for a poll that began in `state_in`.
    #[cfg(test)]
    pub(crate) fn poll(&self, poll: &Poll, state_in: u64) -> Linked {
        if self.entered(poll.function, poll.address, state_in, poll.entry_ticks)
            == Entered::Untracked
        {
            return Linked::Untracked;
        }
        self.exited(poll)
    }

    /// A poll of `function` on the future at `address` began in
    /// `state_in`: if that is Unresumed, it starts a future (a future left
    /// pending at its address was dropped), in a slot claimed now. No
    /// lock, no allocation.
    pub(crate) fn entered(
        &self,
        function: u16,
        address: u64,
        state_in: u64,
        entry_ticks: u64,
    ) -> Entered {
        if !coroutine::first_poll(state_in) {
            return Entered::Later;
        }
        let key = key_of(function, address);
        let (slot, entered) = match self.find(key) {
            Some(slot) => {
                // Only this thread polls this future: no race on it.
                self.dropped.fetch_add(1, Ordering::Relaxed);
                (slot, Entered::Replaced)
            }
            None => match self.claim(key) {
                Some(slot) => (slot, Entered::Started),
                None => {
                    self.untracked.fetch_add(1, Ordering::Relaxed);
                    return Entered::Untracked;
                }
            },
        };
        slot.first_ticks.store(entry_ticks, Ordering::Relaxed);
        slot.busy_ticks.store(0, Ordering::Relaxed);
        slot.polls.store(0, Ordering::Relaxed);
        for tid in &slot.tids {
            tid.store(0, Ordering::Relaxed);
        }
        slot.more_tids.store(0, Ordering::Relaxed);
        entered
    }

    /// Whether a future of `function` at `address` is pending (tracked).
    #[inline]
    pub(crate) fn tracks(&self, function: u16, address: u64) -> bool {
        self.find(key_of(function, address)).is_some()
    }

    /// The future of `function` at `address` is being dropped (its drop
    /// function's entry): whether it was tracked, pending (its slot is
    /// freed). Its owner drops it, so no poll of it runs now. No lock, no
    /// allocation.
    pub(crate) fn dropped_at(&self, function: u16, address: u64) -> bool {
        let Some(slot) = self.find(key_of(function, address)) else {
            return false;
        };
        self.dropped.fetch_add(1, Ordering::Relaxed);
        slot.key.store(FREED, Ordering::Release);
        true
    }

    /// A poll returned (its entry did what its state there said): adds
    /// it to its future, which ends if the state is now Returned or
    /// Panicked. No lock, no allocation.
    #[inline]
    pub(crate) fn exited(&self, poll: &Poll) -> Linked {
        let Some(slot) = self.find(key_of(poll.function, poll.address)) else {
            return Linked::Unknown;
        };
        let busy = poll.exit_ticks.saturating_sub(poll.entry_ticks);
        // Only the polling thread writes these: load and store, no RMW.
        let busy = slot.busy_ticks.load(Ordering::Relaxed) + busy;
        slot.busy_ticks.store(busy, Ordering::Relaxed);
        let polls = slot.polls.load(Ordering::Relaxed) + 1;
        slot.polls.store(polls, Ordering::Relaxed);
        note_tid(slot, poll.tid);
        let end = coroutine::poll_end(poll.state_out);
        if end == PollEnd::Pending {
            return Linked::Pending;
        }
        let mut tids = [0u32; TIDS];
        for (to, from) in tids.iter_mut().zip(&slot.tids) {
            *to = from.load(Ordering::Relaxed);
        }
        let ended = Ended {
            end,
            first_ticks: slot.first_ticks.load(Ordering::Relaxed),
            end_ticks: poll.exit_ticks,
            busy_ticks: busy,
            polls,
            tids,
            more_tids: slot.more_tids.load(Ordering::Relaxed) != 0,
        };
        // Released: the next owner's writes come after these reads.
        slot.key.store(FREED, Ordering::Release);
        Linked::Ended(ended)
    }

    /// The slot of `key`, if tracked.
    #[inline]
    fn find(&self, key: u64) -> Option<&Slot> {
        let start = hash(key);
        for i in 0..MAX_PROBE {
            let slot = &self.slots[(start + i) & self.mask];
            match slot.key.load(Ordering::Acquire) {
                k if k == key => return Some(slot),
                EMPTY => return None,
                _ => {}
            }
        }
        None
    }

    /// Claims a free slot for `key` (empty, freed, or a stale future's),
    /// if one is within [`MAX_PROBE`] of its hash.
    fn claim(&self, key: u64) -> Option<&Slot> {
        let start = hash(key);
        for i in 0..MAX_PROBE {
            let slot = &self.slots[(start + i) & self.mask];
            let mut seen = slot.key.load(Ordering::Relaxed);
            while seen == EMPTY || seen == FREED || !self.is_current(seen) {
                match slot
                    .key
                    .compare_exchange(seen, key, Ordering::AcqRel, Ordering::Relaxed)
                {
                    Ok(_) => return Some(slot),
                    Err(now) => seen = now,
                }
            }
        }
        None
    }
}

/// Adds `tid` to the threads of `slot` (its polling thread's alone).
#[inline]
fn note_tid(slot: &Slot, tid: u32) {
    for at in &slot.tids {
        match at.load(Ordering::Relaxed) {
            t if t == tid => return,
            0 => {
                at.store(tid, Ordering::Relaxed);
                return;
            }
            _ => {}
        }
    }
    slot.more_tids.store(1, Ordering::Relaxed);
}

/// The key of a future: its address (user-space addresses fit in 48 bits)
/// and its function's index + 1 above it (so never [`EMPTY`] nor
/// [`FREED`]).
#[inline]
fn key_of(function: u16, address: u64) -> u64 {
    debug_assert!(usize::from(function) < MAX_FUNCTIONS);
    (address & ((1 << ADDRESS_BITS) - 1)) | (u64::from(function) + 1) << ADDRESS_BITS
}

/// Where `key`'s probe starts (Fibonacci hashing: futures' addresses
/// differ in their middle bits).
#[inline]
fn hash(key: u64) -> usize {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize
}

#[cfg(test)]
mod tests;
