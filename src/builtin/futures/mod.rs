//! The runtime future linker: while the graph tracer records the polls of
//! async functions with `fntrace record --async`'s values (the future's
//! address and rustc's coroutine state at each poll's entry and exit; see
//! `fntrace_format::coroutine`), a first poll's entry starts its future
//! and each poll's exit (finding the future by the argument the entry
//! kept) adds to it, in a fixed table ([`table`]), by the rule the offline
//! linker follows:
//! first-poll time, busy time and polls per future, and at the poll that
//! leaves it Returned, its latency. A future of a function with a
//! threshold ([`Functions::set_threshold`]) that took at least that long
//! is handed to the flight recorder's writer through a small fixed queue
//! ([`take_slow`]); per function, the futures completed and their latency
//! and busy time are counted ([`Functions::rows`]). A future's drop
//! function recording its values (`fntrace record --async` asks for those
//! that are functions of their own) frees a pending future's slot,
//! counted as dropped before Ready.
//!
//! On the traced path: no lock, no allocation, no system call beyond the
//! reads the values take anyway. What has no room is counted: futures
//! first polled while the table was full ([`untracked`]), slow futures
//! the queue could not hold ([`slow_missed`]).

pub(crate) mod table;

use std::sync::atomic::{fence, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fntrace_format::analysis::{future_bucket, FutureRow, FUTURE_BUCKETS};
use fntrace_format::argspec::{ArgSlot, ArgSpec};
use fntrace_format::coroutine::{self, PollEnd};

use crate::rt::thread::current_tid;
use crate::symbols;
use crate::sys::clock::ticks_to_ns;
use table::{Entered, FutureTable, Linked, Poll, MAX_FUNCTIONS, TIDS};

/// Slots of the process's table: futures pending at once that are linked
/// (those first polled while all are taken go untracked, counted).
pub(crate) const TABLE_SLOTS: usize = 16_384;

static TABLE: OnceLock<FutureTable> = OnceLock::new();

/// The slots the table is made with ([`TABLE_SLOTS`] unless set).
static SLOTS: AtomicUsize = AtomicUsize::new(TABLE_SLOTS);

/// Makes the table, when it is made, of `slots` (`FNTRACE_FUTURES_SLOTS`;
/// rounded up to a power of two). No effect once it is made.
pub(crate) fn set_slots(slots: usize) {
    SLOTS.store(slots, Ordering::Relaxed);
}

/// The process's table, made on the control path when async functions'
/// values are first set ([`Functions::new`]).
fn table() -> Option<&'static FutureTable> {
    TABLE.get()
}

/// Futures first polled while the table was full, so far.
pub(crate) fn untracked() -> u64 {
    table().map_or(0, FutureTable::untracked)
}

/// Futures the table follows now (pending): a walk of its slots, for the
/// control path.
pub(crate) fn pending() -> u64 {
    table().map_or(0, |table| table.live() as u64)
}

/// The table's slots (0 if there is none).
pub(crate) fn capacity() -> usize {
    table().map_or(0, FutureTable::capacity)
}

/// Stripes of an async function's sums ([`Sums`]): threads adding at
/// once take different ones.
const STRIPES: usize = 8;

/// One stripe of an async function's completed futures and their sums,
/// behind a sequence number (odd while a thread adds to it): a reader
/// sees each future whole or not at all. A thread takes a stripe with one
/// compare-and-swap and moves to the next if it is taken: nobody waits
/// for a thread that holds one, interrupted or not.
#[repr(align(64))]
#[derive(Default)]
struct Sums {
    sequence: AtomicU64,
    completed: AtomicU64,
    polls: AtomicU64,
    latency_ns: AtomicU64,
    busy_ns: AtomicU64,
}

/// What is known of one async function's futures.
pub(crate) struct FunctionFutures {
    /// How its polls are linked: a hand-written `Future::poll`'s
    /// ([`coroutine::Linking::Returns`]) has no state to say a first poll,
    /// so a poll of an address with no pending future of it begins one.
    linking: coroutine::Linking,
    /// Futures taking at least this long (ns) go to the slow queue
    /// (`u64::MAX`: none).
    threshold_ns: AtomicU64,
    /// The futures that returned Ready and their sums.
    sums: [Sums; STRIPES],
    panicked: AtomicU64,
    /// Futures dropped before Ready: by their drop function, or found
    /// pending at a new first poll's address.
    dropped: AtomicU64,
    /// Latencies by `future_bucket` (a power of two of ns each): counted
    /// apart from the sums, read for quantiles alone.
    buckets: [AtomicU64; FUTURE_BUCKETS],
}

impl FunctionFutures {
    /// None counted, no threshold; `linking`: see the field.
    fn new(linking: coroutine::Linking) -> FunctionFutures {
        let zero = || AtomicU64::new(0);
        FunctionFutures {
            linking,
            threshold_ns: AtomicU64::new(u64::MAX),
            sums: Default::default(),
            panicked: zero(),
            dropped: zero(),
            buckets: std::array::from_fn(|_| zero()),
        }
    }

    /// Adds a future that ended Ready after `polls`, its latency and busy
    /// time (ns), on thread `tid` (which picks the first stripe tried).
    /// No lock, no wait: see [`Sums`].
    fn add_ended(&self, tid: u32, polls: u64, latency_ns: u64, busy_ns: u64) {
        self.add_to_a_stripe(tid, polls, latency_ns, busy_ns);
        // After the sums, released: a reader that loads the buckets first
        // finds no more futures in them than in the sums ([`Self::rows`]).
        self.buckets[future_bucket(latency_ns)].fetch_add(1, Ordering::Release);
    }

    /// [`Self::add_ended`]'s sums, in the first stripe free from `tid`'s.
    fn add_to_a_stripe(&self, tid: u32, polls: u64, latency_ns: u64, busy_ns: u64) {
        let first = tid as usize % STRIPES;
        // Every stripe taken means as many threads adding at this moment,
        // each for a few stores: one is free again within the next round.
        for stripe in (0..).map(|i| &self.sums[(first + i) % STRIPES]) {
            let sequence = stripe.sequence.load(Ordering::Relaxed);
            if sequence & 1 == 1
                || (stripe.sequence)
                    .compare_exchange(sequence, sequence + 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            // The odd number is seen before any sum changed below.
            fence(Ordering::Release);
            // This thread alone writes the stripe now: load and store.
            let add = |to: &AtomicU64, value: u64| {
                to.store(to.load(Ordering::Relaxed) + value, Ordering::Relaxed);
            };
            add(&stripe.completed, 1);
            add(&stripe.polls, polls);
            add(&stripe.latency_ns, latency_ns);
            add(&stripe.busy_ns, busy_ns);
            // Released: a reader seeing the even number sees the sums.
            stripe.sequence.store(sequence + 2, Ordering::Release);
            return;
        }
    }

    /// The completed futures and their sums, each future whole: each
    /// stripe read as of one moment (a reader of plain counters loaded
    /// one after another counted polls of futures ending meanwhile: under
    /// load, a `top` frame's polls per future off by a tenth). A stripe
    /// a thread holds is read again; one held for [`CONSISTENT_WITHIN`]
    /// (its thread descheduled mid-add) is read as it is and the counts
    /// said not whole (`false`). The control path's.
    fn counts(&self) -> (Counts, bool) {
        let began = Instant::now();
        let mut counts = Counts::default();
        let mut whole = true;
        for stripe in &self.sums {
            for attempt in 0u32.. {
                // Acquiring: the sums below are those of this number.
                let before = stripe.sequence.load(Ordering::Acquire);
                let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
                let read = [
                    get(&stripe.completed),
                    get(&stripe.polls),
                    get(&stripe.latency_ns),
                    get(&stripe.busy_ns),
                ];
                // Any sum read above that a thread wrote after taking the
                // stripe makes its odd number seen here.
                fence(Ordering::Acquire);
                let settled = before & 1 == 0 && stripe.sequence.load(Ordering::Relaxed) == before;
                let waited_out = began.elapsed() > CONSISTENT_WITHIN;
                if settled || waited_out {
                    whole &= settled;
                    counts.completed += read[0];
                    counts.polls += read[1];
                    counts.latency_ns += read[2];
                    counts.busy_ns += read[3];
                    break;
                }
                // A thread adds in a few stores; one holding the stripe
                // longer is off its CPU: give the CPU up.
                if attempt < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        (counts, whole)
    }

    /// Latencies by bucket, so far: read before [`Self::counts`], they
    /// hold no future the counts do not (acquired: see
    /// [`Self::add_ended`]), so a histogram's buckets never pass its
    /// count.
    fn buckets(&self) -> [u64; FUTURE_BUCKETS] {
        std::array::from_fn(|i| self.buckets[i].load(Ordering::Acquire))
    }
}

/// How long [`FunctionFutures::counts`] waits for a stripe a thread
/// holds.
const CONSISTENT_WITHIN: Duration = Duration::from_millis(200);

/// One async function's completed futures and their sums
/// ([`FunctionFutures::counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    completed: u64,
    polls: u64,
    latency_ns: u64,
    busy_ns: u64,
}

/// The async functions of an argument table: those whose polls are linked
/// ([`coroutine::linking`]), by entry address. Instances of
/// one function (rustc may emit a resume function and its drop glue in
/// several codegen units: one name, several addresses) share a row, so
/// that a future is one whichever copy polls or drops it.
pub(crate) struct Functions {
    /// Per entry address (sorted), its row in `per`.
    instances: Box<[(usize, u16)]>,
    /// Per async function (by name): its first instance's address, and
    /// what is known of its futures.
    per: Box<[(usize, FunctionFutures)]>,
    /// The futures' drop functions recording their values (see
    /// [`coroutine::dropped_by`]), by entry address, sorted, each with its
    /// async function's row in `per`.
    drops: Box<[(usize, u16)]>,
    /// The table's index of the first row's futures (row N's: `first +
    /// N`; `FutureTable::begin_block`).
    first: u16,
}

impl Functions {
    /// The async functions among `functions` (entry address and values,
    /// any order; at most [`MAX_FUNCTIONS`] are kept) and their futures'
    /// drop functions, named from the symbols; makes the process's table
    /// if there are some. The control path's.
    pub(crate) fn new<'a>(functions: impl Iterator<Item = (usize, &'a [ArgSpec])>) -> Functions {
        let functions: Vec<(usize, &[ArgSpec])> = functions.collect();
        let mut addresses: Vec<(usize, coroutine::Linking)> = (functions.iter())
            .filter_map(|(function, values)| Some((*function, coroutine::linking(values)?)))
            .collect();
        addresses.sort_unstable_by_key(|(function, _)| *function);
        addresses.dedup_by_key(|(function, _)| *function);
        addresses.truncate(MAX_FUNCTIONS);
        if !addresses.is_empty() {
            TABLE.get_or_init(|| FutureTable::new(SLOTS.load(Ordering::Relaxed)));
        }
        let index = symbols::current();
        let name = |address: usize| Some(symbols::demangle(&index.function_at(address)?.name));
        // One row per name (an address without a name: its own).
        let mut names: Vec<Option<String>> = Vec::new();
        let mut per = Vec::new();
        let mut instances = Vec::with_capacity(addresses.len());
        for (function, linking) in addresses {
            let named = name(function);
            let row = match names.iter().position(|n| named.is_some() && *n == named) {
                Some(row) => row,
                None => {
                    names.push(named);
                    per.push((function, FunctionFutures::new(linking)));
                    per.len() - 1
                }
            };
            instances.push((function, row as u16));
        }
        // A drop function records the future's address first (a state
        // machine's, its state too), nothing at its exit; it names the
        // type of its function's futures (`coroutine::future_type`).
        let mut drops: Vec<(usize, u16)> = (functions.iter())
            .filter(|(_, values)| {
                !coroutine::links_polls(values)
                    && values.first().is_some_and(|v| v.slot == ArgSlot::Int(1))
            })
            .filter_map(|&(drop, _)| {
                let name = name(drop)?;
                let dropped = coroutine::dropped_by(&name)?;
                let row = (names.iter())
                    .position(|n| n.as_deref().map(coroutine::future_type) == Some(dropped))?;
                Some((drop, row as u16))
            })
            .collect();
        drops.sort_unstable();
        // Indices of their own in the table: futures left pending under
        // the specs before are stale from now on.
        let first = table().map_or(0, |table| table.begin_block(per.len()));
        Functions {
            instances: instances.into_boxed_slice(),
            per: per.into_boxed_slice(),
            drops: drops.into_boxed_slice(),
            first,
        }
    }

    /// The async functions' entry addresses (every instance), in order.
    pub(crate) fn addresses(&self) -> impl Iterator<Item = usize> + '_ {
        self.instances.iter().map(|(function, _)| *function)
    }

    /// Whether the linker takes `function`'s values: one of them, or a
    /// drop function of their futures.
    #[inline]
    pub(crate) fn links(&self, function: usize) -> bool {
        self.contains(function)
            || (self.drops)
                .binary_search_by_key(&function, |(f, _)| *f)
                .is_ok()
    }

    /// Whether `function` is one of them.
    pub(crate) fn contains(&self, function: usize) -> bool {
        self.index_of(function).is_some()
    }

    /// The table's index of row `row`'s futures.
    fn key_index(&self, row: usize) -> u16 {
        self.first + row as u16
    }

    /// The row of `function` (an instance's address) in `per`.
    fn index_of(&self, function: usize) -> Option<usize> {
        let at = (self.instances)
            .binary_search_by_key(&function, |(f, _)| *f)
            .ok()?;
        Some(usize::from(self.instances[at].1))
    }

    /// From now on, futures of `function` lasting at least `threshold_ns`
    /// go to the slow queue (`u64::MAX`: none do).
    pub(crate) fn set_threshold(&self, function: usize, threshold_ns: u64) {
        if let Some(i) = self.index_of(function) {
            self.per[i]
                .1
                .threshold_ns
                .store(threshold_ns, Ordering::Relaxed);
        }
    }

    /// The futures each async function completed so far, as `/metrics`
    /// shows them, each named by `name` (the function's address to its
    /// demangled name); functions with none are left out.
    pub(crate) fn rows(&self, name: impl Fn(usize) -> Option<String>) -> Vec<FutureRow> {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        self.per
            .iter()
            .map(|(function, per)| (function, per, per.buckets(), per.counts().0))
            .filter(|(_, per, _, counts)| counts.completed > 0 || get(&per.dropped) > 0)
            .filter_map(|(function, per, buckets, counts)| {
                Some(FutureRow {
                    function: name(*function)?,
                    completed: counts.completed,
                    polls: counts.polls,
                    latency_ns: counts.latency_ns,
                    busy_ns: counts.busy_ns,
                    buckets,
                    dropped: get(&per.dropped),
                })
            })
            .collect()
    }

    /// Whether a poll of `function` whose entry recorded `data` begins a
    /// future (its state Unresumed): its exit then starts it
    /// ([`Functions::exited`]).
    #[inline]
    pub(crate) fn begins(&self, function: usize, values: &[ArgSpec], data: &[u8]) -> bool {
        self.contains(function)
            && coroutine::entry_values(values, data)
                .is_some_and(|(_, state)| coroutine::first_poll(state))
    }

    /// An entry of `function` recorded `data`: if it is a future's drop
    /// function, the future at its address is dropped. (A poll's entry
    /// links nothing: its exit does it all, [`Functions::exited`].)
    #[inline]
    pub(crate) fn entered(&self, function: usize, values: &[ArgSpec], data: &[u8]) {
        let Some(table) = table() else {
            return;
        };
        if self.drops.is_empty() || self.contains(function) {
            return;
        }
        if let Some(address) = coroutine::entry_address(values, data) {
            self.dropping(function, address, table);
        }
    }

    /// `function`'s entry, if it is a future's drop function: the future
    /// at `address` is dropped (counted if it was pending).
    #[inline]
    fn dropping(&self, function: usize, address: u64, table: &FutureTable) {
        let Ok(at) = self.drops.binary_search_by_key(&function, |(f, _)| *f) else {
            return;
        };
        let index = self.drops[at].1;
        if table.dropped_at(self.first + index, address) {
            let per = &self.per[usize::from(index)].1;
            per.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A poll of `function` on the future at `address` (the argument its
    /// entry kept; `began`: its entry found the future Unresumed) returned,
    /// its values recorded as `data` after the exit: a first poll starts
    /// its future (a future left pending at its address was dropped), and
    /// every poll is linked into its future. Both here, at the exit: the
    /// argument entries (assembly) that record most polls call no Rust.
    #[inline]
    pub(crate) fn exited(
        &self,
        function: usize,
        poll: (u64, bool),
        ticks: (u64, u64),
        values: &[ArgSpec],
        data: &[u8],
    ) {
        if let Some(state_out) = coroutine::exit_state(values, data) {
            self.returned(function, poll, ticks, state_out);
        }
    }

    /// The table's index of `function`'s futures, if it is one of them:
    /// what a poll's fast exit hands [`Functions::returned_by_key`].
    pub(crate) fn key_of(&self, function: usize) -> Option<u16> {
        Some(self.key_index(self.index_of(function)?))
    }

    /// [`Functions::exited`] with the state the poll left its future in.
    #[inline]
    pub(crate) fn returned(
        &self,
        function: usize,
        poll: (u64, bool),
        ticks: (u64, u64),
        state_out: u64,
    ) {
        if let Some(index) = self.index_of(function) {
            self.returned_at(index, poll, ticks, state_out);
        }
    }

    /// [`Functions::returned`] for a function named by its futures' index
    /// in the table ([`Functions::key_of`]), with the value its exit
    /// recorded (`value`: the state, or a hand-written poll's `Poll`
    /// discriminant, as the fast exit reads them); an index of other
    /// specs' (replaced since the poll's entry) is ignored.
    #[inline]
    pub(crate) fn returned_by_key(
        &self,
        key: u16,
        poll: (u64, bool),
        ticks: (u64, u64),
        value: u64,
    ) {
        let index = usize::from(key.wrapping_sub(self.first));
        if let Some((_, per)) = self.per.get(index) {
            self.returned_at(index, poll, ticks, per.linking.state_out(value));
        }
    }

    /// [`Functions::returned`] for row `index`.
    #[inline]
    fn returned_at(
        &self,
        index: usize,
        (address, began): (u64, bool),
        ticks: (u64, u64),
        state_out: u64,
    ) {
        let Some(table) = table() else {
            return;
        };
        // The row's first instance names the function (its copies share
        // the name, and the row).
        let function = self.per[index].0;
        let (entry_ticks, exit_ticks) = ticks;
        // A hand-written poll begins the future it finds none of.
        let hand_written = matches!(
            self.per[index].1.linking,
            coroutine::Linking::Returns { .. }
        );
        let began = began || (hand_written && !table.tracks(self.key_index(index), address));
        if began
            && table.entered(
                self.key_index(index),
                address,
                coroutine::UNRESUMED,
                entry_ticks,
            ) == Entered::Replaced
        {
            self.per[index].1.dropped.fetch_add(1, Ordering::Relaxed);
        }
        let poll = Poll {
            function: self.key_index(index),
            address,
            state_out,
            entry_ticks,
            exit_ticks,
            tid: current_tid(),
        };
        let Linked::Ended(ended) = table.exited(&poll) else {
            return;
        };
        let per = &self.per[index].1;
        let latency_ns =
            ticks_to_ns(ended.end_ticks).saturating_sub(ticks_to_ns(ended.first_ticks));
        if ended.end == PollEnd::Panicked {
            per.panicked.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let busy_ns = ticks_to_ns(ended.busy_ticks.saturating_add(ended.first_ticks))
            .saturating_sub(ticks_to_ns(ended.first_ticks));
        per.add_ended(poll.tid, ended.polls, latency_ns, busy_ns);
        if latency_ns >= per.threshold_ns.load(Ordering::Relaxed) {
            push_slow(SlowFuture {
                function,
                address,
                first_ns: ticks_to_ns(ended.first_ticks),
                latency_ns,
                busy_ns,
                polls: ended.polls,
                tids: ended.tids,
                more_tids: ended.more_tids,
            });
        }
    }
}

/// A future that took at least its function's threshold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlowFuture {
    /// Its async function's entry address.
    pub function: usize,
    /// Its address.
    pub address: u64,
    /// Its first poll's entry (monotonic ns, as the events').
    pub first_ns: u64,
    /// First poll's entry to the Ready poll's exit.
    pub latency_ns: u64,
    /// Time in its polls.
    pub busy_ns: u64,
    /// Its polls.
    pub polls: u64,
    /// The first threads its polls ran on (0: none).
    pub tids: [u32; TIDS],
    /// Whether they ran on more threads than those.
    pub more_tids: bool,
}

/// Slow futures the queue holds until the writer takes them.
const SLOW_SLOTS: usize = 64;

const FREE: u8 = 0;
const WRITING: u8 = 1;
const FULL: u8 = 2;

struct SlowSlot {
    state: AtomicU8,
    words: [AtomicU64; 8],
}

static SLOW: [SlowSlot; SLOW_SLOTS] = [const {
    SlowSlot {
        state: AtomicU8::new(FREE),
        words: [const { AtomicU64::new(0) }; 8],
    }
}; SLOW_SLOTS];

static SLOW_MISSED: AtomicU64 = AtomicU64::new(0);

/// Slow futures the queue had no room for, so far.
pub(crate) fn slow_missed() -> u64 {
    SLOW_MISSED.load(Ordering::Relaxed)
}

/// Queues `slow` for the writer: a free slot claimed by compare-and-swap,
/// filled, then published; none free, counted.
fn push_slow(slow: SlowFuture) {
    for slot in &SLOW {
        if slot
            .state
            .compare_exchange(FREE, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        for (to, from) in slot.words.iter().zip(pack(&slow)) {
            to.store(from, Ordering::Relaxed);
        }
        slot.state.store(FULL, Ordering::Release);
        return;
    }
    SLOW_MISSED.fetch_add(1, Ordering::Relaxed);
}

/// Takes the slow futures queued (the flight recorder's writer's).
pub(crate) fn take_slow(out: &mut Vec<SlowFuture>) {
    for slot in &SLOW {
        if slot.state.load(Ordering::Acquire) != FULL {
            continue;
        }
        let mut words = [0u64; 8];
        for (to, from) in words.iter_mut().zip(&slot.words) {
            *to = from.load(Ordering::Relaxed);
        }
        slot.state.store(FREE, Ordering::Release);
        out.push(unpack(&words));
    }
}

fn pack(slow: &SlowFuture) -> [u64; 8] {
    [
        slow.function as u64,
        slow.address,
        slow.first_ns,
        slow.latency_ns,
        slow.busy_ns,
        slow.polls | u64::from(slow.more_tids) << 63,
        u64::from(slow.tids[0]) | u64::from(slow.tids[1]) << 32,
        u64::from(slow.tids[2]) | u64::from(slow.tids[3]) << 32,
    ]
}

fn unpack(words: &[u64; 8]) -> SlowFuture {
    SlowFuture {
        function: words[0] as usize,
        address: words[1],
        first_ns: words[2],
        latency_ns: words[3],
        busy_ns: words[4],
        polls: words[5] & !(1 << 63),
        more_tids: words[5] >> 63 != 0,
        tids: [
            words[6] as u32,
            (words[6] >> 32) as u32,
            words[7] as u32,
            (words[7] >> 32) as u32,
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_futures_go_through_the_queue_whole() {
        let slow = SlowFuture {
            function: 0x5555_1234,
            address: 0x7f00_0000_1000,
            first_ns: 123,
            latency_ns: 250_000_000,
            busy_ns: 1_000,
            polls: 5,
            tids: [7, 8, 0, 0],
            more_tids: true,
        };
        assert_eq!(unpack(&pack(&slow)), slow);
    }

    /// Futures of 10 polls each, 1 µs busy, added by 4 threads (two of
    /// them trying the same stripe first) until a reader has taken 500
    /// counts, each later than the one before: every reading holds whole
    /// futures only, and the buckets read before it no more.
    #[test]
    fn counts_hold_whole_futures_while_four_threads_add() {
        const TIDS: [u32; 4] = [1, 1 + STRIPES as u32, 2, 3];
        const READINGS: u64 = 500;
        let per = FunctionFutures::new(coroutine::Linking::States);
        let stop = std::sync::atomic::AtomicBool::new(false);
        /// Stops the writers however the reader ends (a failed assertion
        /// included: the scope joins them).
        struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let added: u64 = std::thread::scope(|scope| {
            let writers: Vec<_> = TIDS
                .map(|tid| {
                    let (per, stop) = (&per, &stop);
                    scope.spawn(move || {
                        let mut added = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            per.add_ended(tid, 10, 1 << (added % 30), 1_000);
                            added += 1;
                        }
                        added
                    })
                })
                .into_iter()
                .collect();
            let stopping = StopOnDrop(&stop);
            let (mut readings, mut last) = (0u64, 0u64);
            while readings < READINGS {
                let buckets: u64 = per.buckets().iter().sum();
                let (counts, whole_moment) = per.counts();
                assert!(buckets <= counts.completed, "{buckets} > {counts:?}");
                if !whole_moment {
                    // A writer descheduled mid-add for the whole wait.
                    continue;
                }
                let whole = counts.polls == 10 * counts.completed
                    && counts.busy_ns == 1_000 * counts.completed;
                assert!(whole, "reading {readings}: {counts:?}");
                if counts.completed > last {
                    (readings, last) = (readings + 1, counts.completed);
                }
            }
            drop(stopping);
            writers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        let (counts, whole_moment) = per.counts();
        assert!(whole_moment);
        assert_eq!((counts.completed, counts.polls), (added, 10 * added));
        assert_eq!(per.buckets().iter().sum::<u64>(), added);
    }
}
