//! The built-in `graph` tracer: entry and exit of every traced call, with
//! timestamps, kept in per-thread rings; [`GraphTracer::take_trace`] turns
//! them into a [`Trace`] for the latency table, the call graph and the
//! exporters.
//!
//! Run-time limits from the [`Filter`]: calls deeper than `max_depth` are
//! not recorded; with `min_duration`, a call is recorded only if it lasted at
//! least that long — its entry is written at its exit, preceded by the
//! entries of its not-yet-written ancestors (marked in their shadow frames),
//! so events stay in time order and every written exit has its entry
//! (the values of async functions' polls are then linked into futures
//! unwritten: `unrecorded`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use once_cell::sync::Lazy;
use parking_lot::Mutex;

use crate::filter::Filter;
use crate::rt::ops;
use crate::rt::ring::{self, Batch, Ring, RingPool};
use crate::rt::shadow::{self, MAX_HOOKED_DEPTH};
use crate::rt::thread::{current_tid, thread_block, Untraced};
use crate::sites::function_of_site;
use crate::symbols;
use crate::sys::clock::{self, ticks_to_ns, TickScale};
use crate::tracer::{self, Call, FastEntries, FastPath, Return, Tracer};
use fntrace_format::{EventKind, GraphEvent, ThreadTrace, Trace};

pub(crate) mod arg_recipes;
pub(crate) mod args;
pub(crate) mod fast;
mod recorded;
mod unrecorded;

/// An event as the traced thread writes it (also from asm: layout.h): raw
/// TSC ticks, and one word packing the site's return address (bits 0-47:
/// user-space code addresses fit), the depth (bits 48-62) and whether it is
/// an exit (bit 63). 16 bytes, as uftrace's records: a third less memory
/// per event than a separate function, depth and kind. Draining turns it into a
/// [`GraphEvent`] (nanoseconds, function address) off the traced path.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(crate) struct RawEvent {
    ticks: u64,
    word: u64,
}

const SITE_BITS: u32 = 48;
const EXIT_BIT: u64 = 1 << 63;

const _: () = {
    assert!(std::mem::size_of::<RawEvent>() == 16);
    assert!(std::mem::offset_of!(RawEvent, ticks) == 0);
    assert!(std::mem::offset_of!(RawEvent, word) == 8);
    // The depth field's top bit is `args::MORE`.
    assert!(MAX_HOOKED_DEPTH < 1 << 14);
};

/// The depth field of a data slot (see `args`): all ones.
const DATA_DEPTH: u64 = 0x7fff;

impl RawEvent {
    #[inline]
    fn new(ticks: u64, site: usize, depth: usize, kind: EventKind) -> RawEvent {
        debug_assert!(site >> SITE_BITS == 0 && depth < 1 << 15);
        let exit = if kind == EventKind::Exit { EXIT_BIT } else { 0 };
        RawEvent {
            ticks,
            word: site as u64 | (depth as u64) << SITE_BITS | exit,
        }
    }

    #[inline]
    fn site(&self) -> usize {
        (self.word & ((1 << SITE_BITS) - 1)) as usize
    }

    #[inline]
    fn depth(&self) -> u16 {
        ((self.word >> SITE_BITS) & 0x3fff) as u16
    }

    /// A slot of argument data (see `args`): 8 bytes in place of the ticks.
    #[inline]
    fn data(bytes: u64) -> RawEvent {
        RawEvent {
            ticks: bytes,
            word: DATA_DEPTH << SITE_BITS,
        }
    }

    /// Whether this is a slot of argument data, which only the streaming
    /// recorder reads (every other reader skips it).
    #[inline]
    fn is_data(&self) -> bool {
        (self.word >> SITE_BITS) & DATA_DEPTH == DATA_DEPTH
    }

    /// A data slot as readers of events take it: depth
    /// `argspec::DATA_DEPTH`, its bytes for a time.
    fn data_slot(&self) -> GraphEvent {
        GraphEvent {
            time_ns: self.ticks,
            function: 0,
            depth: fntrace_format::argspec::DATA_DEPTH,
            kind: EventKind::Entry,
        }
    }

    /// The event as the streaming writer takes it: a data slot as
    /// `argspec::DATA_DEPTH` with its bytes for a time, an event followed
    /// by data with `argspec::FOLLOWED_BY_DATA` in its depth.
    #[inline]
    fn for_stream(&self, scale: &TickScale) -> GraphEvent {
        if self.is_data() {
            return self.data_slot();
        }
        let more = if self.word & args::MORE != 0 {
            fntrace_format::argspec::FOLLOWED_BY_DATA
        } else {
            0
        };
        GraphEvent {
            time_ns: scale.ns(self.ticks),
            // A run-time entry patch's site returns into its stub.
            function: crate::patch::entry_patch::function_of_address(self.site()),
            depth: self.depth() | more,
            kind: self.kind(),
        }
    }

    /// The event in nanoseconds with its function's address. `last_site`
    /// caches the previous site's function (events repeat sites in runs).
    fn converted(&self, last_site: &mut (usize, usize)) -> GraphEvent {
        let site = self.site();
        if last_site.0 != site {
            *last_site = (site, function_of_site(site));
        }
        GraphEvent {
            time_ns: ticks_to_ns(self.ticks),
            function: last_site.1,
            depth: self.depth(),
            kind: self.kind(),
        }
    }

    /// [`RawEvent::converted`], with argument data as
    /// [`RawEvent::for_stream`] gives it.
    fn with_data(&self, last_site: &mut (usize, usize)) -> GraphEvent {
        if self.is_data() {
            return self.data_slot();
        }
        let mut event = self.converted(last_site);
        if self.word & args::MORE != 0 {
            event.depth |= fntrace_format::argspec::FOLLOWED_BY_DATA;
        }
        event
    }

    #[inline]
    fn kind(&self) -> EventKind {
        if self.word & EXIT_BIT != 0 {
            EventKind::Exit
        } else {
            EventKind::Entry
        }
    }
}

/// Part of one thread's drain, as [`GraphTracer::stream_converted`] passes it.
pub(crate) struct ConvertedBatch<'a> {
    /// Kernel thread id of the ring's owner.
    pub tid: u32,
    /// The owner's name.
    pub name: &'a str,
    /// Events, oldest first, converted as they are read.
    pub events: Converted<'a>,
    /// Events dropped after these (non-zero only with no events).
    pub dropped_after: u64,
}

/// A run of a ring's events, each converted as it is read for a uftrace
/// data directory: nanoseconds, and the site's return address as the
/// function's (uftrace, and fntrace's reader, find the function containing
/// an address, as uftrace's own recorder writes it): no lookup per event.
pub(crate) struct Converted<'a> {
    raw: std::slice::Iter<'a, RawEvent>,
    scale: TickScale,
}

impl Iterator for Converted<'_> {
    type Item = GraphEvent;

    #[inline]
    fn next(&mut self) -> Option<GraphEvent> {
        Some(self.raw.next()?.for_stream(&self.scale))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.raw.size_hint()
    }
}

impl ExactSizeIterator for Converted<'_> {}

/// The `graph` tracer. Registered under the name `"graph"`.
pub struct GraphTracer {
    pool: Lazy<RingPool<RawEvent>>,
    /// Events moved out of the rings and not yet taken (see `snapshot`).
    retained: Mutex<Vec<ThreadTrace>>,
    max_depth: AtomicUsize,
    min_duration_ns: AtomicU64,
    /// This tracer's bit in masks and in shadow frames' marks (its registry
    /// index); 0 until first enabled.
    mark: AtomicU64,
    /// Events of `-A`/`-R` functions written without their values, which
    /// had no room beside them (see `push_with_values`); never reset.
    values_left_out: AtomicU64,
}

/// The process's graph tracer.
pub static GRAPH_TRACER: GraphTracer = GraphTracer {
    pool: Lazy::new(RingPool::new),
    retained: Mutex::new(Vec::new()),
    max_depth: AtomicUsize::new(usize::MAX),
    min_duration_ns: AtomicU64::new(0),
    mark: AtomicU64::new(0),
    values_left_out: AtomicU64::new(0),
};

crate::register_tracer!("graph", &GRAPH_TRACER);

impl GraphTracer {
    /// This tracer's bit in tracer masks (0 before it was first enabled).
    #[inline]
    pub(crate) fn bit(&self) -> u64 {
        self.mark.load(Ordering::Relaxed)
    }

    /// The mask a site selected by exactly these tracers has when it may
    /// call the fast entry (asm/x86_64/graph.S): this tracer's bit while it
    /// is enabled with no duration limit (the fast paths apply the depth
    /// limit, not that one) and timestamps come from the TSC; else 0.
    fn fast_path_bit(&self) -> u64 {
        let bit = self.bit();
        let eligible = bit != 0
            && tracer::enabled_mask() & bit != 0
            && self.min_duration_ns.load(Ordering::Relaxed) == 0
            && clock::uses_tsc();
        if eligible {
            bit
        } else {
            0
        }
    }

    /// Events each thread's buffer holds (rounded up to a power of two), for
    /// threads that take a buffer from now on.
    pub fn set_buffer_events(&self, events: usize) {
        self.pool.set_ring_capacity(events);
    }

    /// The memory budget of lossless mode: the buffers may hold `total`
    /// events together, each at least `buffer`, taking more half a buffer
    /// at a time (see `rt::ring::budget`).
    pub(crate) fn set_memory_budget(&self, total: usize, buffer: usize) {
        self.pool.set_memory_budget(total, buffer);
    }

    /// Lossless mode on or off: a thread whose buffer is full waits for
    /// the reader instead of dropping the event (see `rt::ring::room`).
    /// Only a reader that drains until it turns it off again may turn it
    /// on (the streaming recorder's writer).
    pub(crate) fn set_lossless(&self, lossless: bool) {
        self.pool.set_lossless(lossless);
    }

    /// Events written without the values their `-A`/`-R` spec asks for,
    /// so far (they add up across recordings; a recording counts its own
    /// from the difference).
    pub(crate) fn values_left_out(&self) -> u64 {
        self.values_left_out.load(Ordering::Relaxed)
    }

    /// The waits of lossless mode so far (they add up across recordings).
    pub(crate) fn room_stats(&self) -> ring::RoomStats {
        self.pool.room_stats()
    }

    /// The reader's sleep between drains (see [`RingPool::reader_sleep`]).
    pub(crate) fn reader_sleep(&self, interval: std::time::Duration) {
        self.pool.reader_sleep(interval)
    }

    /// Registers the calling thread as a reader that drains this tracer's
    /// buffers periodically, until the guard is dropped (threads that exit
    /// may wait for it: see `rt::ring::wait_for_reader`).
    pub(crate) fn periodic_reader(&self) -> ring::PeriodicReader {
        self.pool.periodic_reader()
    }

    /// Ends the reader's sleep now.
    pub(crate) fn wake_reader(&self) {
        self.pool.wake_reader()
    }

    /// Events lost because a thread had no buffer (pool exhausted or no
    /// memory) or its buffer was full.
    pub fn lost_events(&self) -> u64 {
        self.pool.lost()
    }

    /// Takes every recorded event and returns them as a [`Trace`], with
    /// function names from the ELF symbol tables. The events are gone from
    /// fntrace afterwards.
    pub fn take_trace(&self) -> Trace {
        let _untraced = Untraced::begin();
        let _operation = ops::operation();
        let mut retained = self.retained.lock();
        self.collect_into(&mut retained);
        describe(std::mem::take(&mut *retained))
    }

    /// Returns every recorded event as a [`Trace`] and keeps them: a later
    /// `snapshot` or `take_trace` returns them again (with what came since)
    /// until [`GraphTracer::forget`] drops them.
    pub fn snapshot(&self) -> Trace {
        let _untraced = Untraced::begin();
        let _operation = ops::operation();
        let mut retained = self.retained.lock();
        self.collect_into(&mut retained);
        describe(retained.clone())
    }

    /// Drops the events `trace` (from [`GraphTracer::snapshot`]) holds,
    /// keeping anything recorded since.
    pub fn forget(&self, trace: &Trace) {
        let _untraced = Untraced::begin();
        let _operation = ops::operation();
        let mut retained = self.retained.lock();
        for taken in &trace.threads {
            if let Some(kept) = retained.iter_mut().find(|t| t.tid == taken.tid) {
                let n = taken.events.len().min(kept.events.len());
                kept.events.drain(..n);
                kept.lost = kept.lost.saturating_sub(taken.lost);
            }
        }
        retained.retain(|t| !t.events.is_empty() || t.lost != 0);
    }

    /// Moves the events in the rings to the retained ones (a later
    /// `take_trace` or `snapshot` returns them), so that what is drained
    /// next starts now: a recording does not take events from before it.
    pub(crate) fn retain_buffered(&self) {
        let _operation = ops::operation();
        let mut retained = self.retained.lock();
        self.collect_into(&mut retained);
    }

    /// Drains the rings, passing each thread's new events to `out` a chunk
    /// at a time, converted (nanoseconds, function addresses) but never
    /// collected whole: the flight recorder's read. Argument data comes
    /// among them as the streaming writer takes it (an event followed by
    /// data has `argspec::FOLLOWED_BY_DATA` in its depth, each 8 bytes of
    /// data follow as an event of depth `argspec::DATA_DEPTH`, the bytes
    /// in place of its time); a chunk may end between an event and its
    /// data. Rings of exited threads are freed once drained.
    pub(crate) fn stream_events(&self, out: &mut dyn FnMut(&Batch<'_, GraphEvent>)) {
        const CHUNK: usize = 1 << 14;
        let _untraced = Untraced::begin();
        let _operation = ops::operation();
        let mut converted: Vec<GraphEvent> = Vec::with_capacity(CHUNK);
        let mut last_site = (0, 0);
        self.pool.drain_each(&mut |raw| {
            for chunk in raw.events.chunks(CHUNK) {
                converted.clear();
                converted.extend(chunk.iter().map(|event| event.with_data(&mut last_site)));
                out(&Batch {
                    ring: raw.ring,
                    tid: raw.tid,
                    name: raw.name,
                    events: &converted,
                    dropped_after: 0,
                });
            }
            if raw.dropped_after != 0 {
                out(&Batch {
                    ring: raw.ring,
                    tid: raw.tid,
                    name: raw.name,
                    events: &[],
                    dropped_after: raw.dropped_after,
                });
            }
        });
    }

    /// Drains the rings as [`GraphTracer::stream_events`] does, but passes
    /// each run of raw events to `out` to be converted as it is read (see
    /// [`Converted`]): no copy, no lookup.
    pub(crate) fn stream_converted(&self, out: &mut dyn FnMut(ConvertedBatch<'_>)) {
        let _untraced = Untraced::begin();
        let _operation = ops::operation();
        let scale = TickScale::current();
        self.pool.drain_each(&mut |raw| {
            out(ConvertedBatch {
                tid: raw.tid,
                name: raw.name,
                events: Converted {
                    raw: raw.events.iter(),
                    scale,
                },
                dropped_after: raw.dropped_after,
            })
        });
    }

    /// Drops every event in memory (in the threads' buffers and retained
    /// by a snapshot) unread, and gives the buffers' memory back as
    /// [`GraphTracer::release_memory`] does: `detach` of an attached
    /// process, which leaves nothing of fntrace's behind to grow from one
    /// attach to the next. The number of events dropped.
    pub(crate) fn discard(&self) -> usize {
        let _untraced = Untraced::begin();
        let dropped = {
            let _operation = ops::operation();
            let mut dropped = 0;
            self.pool.drain_each(&mut |raw| dropped += raw.events.len());
            let mut retained = self.retained.lock();
            dropped += retained.iter().map(|t| t.events.len()).sum::<usize>();
            *retained = Vec::new();
            dropped
        };
        self.release_memory();
        dropped
    }

    /// Gives the memory of the buffers of threads that exited back to the
    /// kernel, and, while this tracer is off, that of live threads'
    /// buffers too (see [`RingPool::release_memory`]).
    pub(crate) fn release_memory(&self) -> ring::Released {
        let _operation = ops::operation();
        // Under the operation lock: the tracer stays off meanwhile.
        let off = tracer::enabled_mask() & self.bit() == 0 && fast::exit_bit() == 0;
        self.pool.release_memory(off)
    }

    /// Keeps `count` unused buffers with every page present, and makes
    /// the pages ahead of each thread's next events present after each
    /// drain (see [`RingPool::keep_ready`]); 0 stops it.
    pub(crate) fn keep_buffers_ready(&self, count: usize) {
        let _operation = ops::operation();
        self.pool.keep_ready(count);
    }

    /// For each buffer, its owner's kernel thread id (0: unused) and the
    /// bytes of its event pages in memory (a diagnostic: a recording's stop
    /// gives them back to the kernel).
    pub fn resident_buffer_bytes(&self) -> Vec<(u32, usize)> {
        self.pool.resident_bytes()
    }

    /// Buffers mapped so far (at most one per thread alive at a time: the
    /// buffers of exited threads are reused).
    pub fn buffers_made(&self) -> usize {
        self.pool.rings_made()
    }

    fn collect_into(&self, retained: &mut Vec<ThreadTrace>) {
        for drained in self.pool.drain() {
            let position = retained.iter().position(|t| t.tid == drained.tid);
            let thread = match position {
                Some(i) => &mut retained[i],
                None => {
                    retained.push(ThreadTrace {
                        tid: drained.tid,
                        name: (!drained.name.is_empty()).then_some(drained.name),
                        events: Vec::new(),
                        lost: 0,
                    });
                    retained.last_mut().expect("just pushed")
                }
            };
            // The rings hold raw timestamps (TSC ticks) and site return
            // addresses: convert them here, off the traced-call path.
            let mut last_site = (0, 0);
            thread.events.extend(
                drained
                    .events
                    .iter()
                    .filter(|e| !e.is_data())
                    .map(|e| e.converted(&mut last_site)),
            );
            thread.lost += drained.dropped;
        }
    }

    #[inline]
    fn push(&self, event: RawEvent) {
        // The graph tracer owns the fast tracer's slot (it offers the fast
        // path): the slot holds this thread's ring, null until claimed.
        let block = thread_block();
        let mut ring = block.fast_tracer_slot.get().cast::<Ring<RawEvent>>();
        if ring.is_null() {
            match self.pool.claim(current_tid()) {
                Some(claimed) => {
                    ring = claimed;
                    block.fast_tracer_slot.set(ring.cast());
                }
                None => return self.pool.count_unbuffered(),
            }
        }
        // SAFETY: rings from the pool are never unmapped, and this thread
        // claimed this one (it is kept in this thread's fast tracer slot): its only writer.
        unsafe { (*ring).push(event, self.pool.room()) };
    }

    /// Pushes `event` with the values of its function (see `args`), or
    /// alone when they have no room together.
    #[cold]
    fn push_with_values(&self, events: &[RawEvent]) {
        let block = thread_block();
        let mut ring = block.fast_tracer_slot.get().cast::<Ring<RawEvent>>();
        if ring.is_null() {
            if let Some(claimed) = self.pool.claim(current_tid()) {
                ring = claimed;
                block.fast_tracer_slot.set(ring.cast());
            }
        }
        // SAFETY: as in `push`: this thread's own ring, if it has one.
        if !ring.is_null() && unsafe { (*ring).push_together(events, self.pool.room()) } {
            return;
        }
        // No room for the values beside their event (drop mode, a lossless
        // wait that gave up): the event goes alone, counted if it went in
        // (else it is a lost event), so that a recording says what it lacks.
        let mut alone = events[0];
        alone.word &= !args::MORE;
        if ring.is_null() {
            return self.push(alone);
        }
        // SAFETY: as above: this thread's own ring, never unmapped.
        let dropped_before = unsafe { (*ring).dropped() };
        self.push(alone);
        // SAFETY: as above.
        if unsafe { (*ring).dropped() } == dropped_before {
            self.values_left_out.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// With a duration threshold: writes the entries of this thread's hooked
    /// ancestors (frames below `depth`) not written yet.
    fn write_pending_ancestors(&self, depth: usize, mark: u64, max_depth: usize) {
        shadow::with_stack(|stack| {
            for (ancestor_depth, frame) in stack.frames().iter_mut().enumerate().take(depth) {
                if frame.marks & mark != 0 || ancestor_depth > max_depth {
                    continue;
                }
                frame.marks |= mark;
                // Writes the ring only: no shadow-stack access.
                self.push(RawEvent::new(
                    frame.entry_ticks,
                    frame.site,
                    ancestor_depth,
                    EventKind::Entry,
                ));
            }
        });
    }
}

/// Names the functions of `threads` and adds the process's description:
/// a [`Trace`] of those threads (the flight recorder's snapshots).
pub(crate) fn describe(threads: Vec<ThreadTrace>) -> Trace {
    // Events repeat few functions: skip runs of the same one cheaply.
    let mut functions = HashSet::new();
    for thread in &threads {
        let mut last = None;
        for event in &thread.events {
            if last != Some(event.function) {
                last = Some(event.function);
                functions.insert(event.function);
            }
        }
    }
    describe_functions(threads, functions)
}

/// A [`Trace`] with no events that describes the process and gives every
/// function with a known call site its ELF name: the header of a streamed
/// recording, which writes ELF names alone (its `.sym` files), so none is
/// demangled here (a large Rust program's start-up spent tens of
/// milliseconds on it). In a forked child (`forked`), the functions are
/// named from the index inherited from the parent, without asking the
/// loader ([`symbols::inherited`]).
pub(crate) fn describe_process(forked: bool) -> Trace {
    let functions = crate::sites::SITES
        .iter()
        .map(|site| site.function.load(Ordering::Relaxed))
        .filter(|&function| function != 0)
        .collect();
    let index = if forked {
        symbols::inherited()
    } else {
        symbols::current()
    };
    describe_functions_with(&index, Vec::new(), functions, false)
}

/// Names `functions` and adds the process's description: a [`Trace`] of
/// `threads`.
pub(crate) fn describe_functions(threads: Vec<ThreadTrace>, functions: HashSet<usize>) -> Trace {
    describe_functions_with(&symbols::current(), threads, functions, true)
}

/// [`describe_functions`] with the names from `index`; the readable ones,
/// and the libraries named by time, only if `readable` (not for a
/// recording's header).
fn describe_functions_with(
    index: &symbols::SymbolIndex,
    threads: Vec<ThreadTrace>,
    functions: HashSet<usize>,
    readable: bool,
) -> Trace {
    // Both forms: readable names for fntrace's reports, ELF names for
    // uftrace's `.sym` files (uftrace demangles them itself).
    let mut names = HashMap::with_capacity(if readable { functions.len() } else { 0 });
    let mut raw = HashMap::with_capacity(functions.len());
    for f in functions {
        // A library unloaded since is named too (`symbols::opened`).
        if let Some(name) = symbols::function_name_at(index, f) {
            if readable {
                names.insert(f, symbols::demangle(&name));
            }
            raw.insert(f, name.into_string());
        }
    }
    Trace {
        pid: std::process::id(),
        exe: std::fs::read_link("/proc/self/exe")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        cmdline: command_line(),
        threads,
        names,
        symbols: raw,
        // Aliased text pages under their file's name again (patch::alias).
        maps: crate::patch::alias::maps_with_original_names(),
        // A recording's header has none: its stream adds them as they
        // are seen (`record::writer`).
        libraries: if readable {
            symbols::opened::libraries_named_by_time(index)
        } else {
            Vec::new()
        },
        arg_spec: args::table().map_or_else(String::new, |t| t.info.arguments.clone()),
        retval_spec: args::table().map_or_else(String::new, |t| t.info.retval.clone()),
    }
}

/// The process's arguments (`/proc/self/cmdline`, NUL-separated) joined by
/// spaces, as uftrace records its own; empty if unreadable.
fn command_line() -> String {
    let Ok(bytes) = std::fs::read("/proc/self/cmdline") else {
        return String::new();
    };
    let args: Vec<_> = bytes
        .strip_suffix(b"\0")
        .unwrap_or(&bytes)
        .split(|&b| b == 0)
        .map(String::from_utf8_lossy)
        .collect();
    args.join(" ")
}

impl FastPath for GraphTracer {
    /// Tells the fast exit whether it may run, with which depth limit, and
    /// gives the entries while sites may call them (see `fast_path_bit`).
    fn entries(&self) -> FastEntries {
        fast::entries()
    }

    fn refresh(&self) -> bool {
        let bit = self.fast_path_bit();
        fast::set_exit_bit(bit, self.max_depth.load(Ordering::Relaxed));
        bit != 0
    }
}

/// The graph tracer's argument entries (`arg_recipes`), a fast path of
/// their own, on whenever the graph tracer's is.
struct ArgsFastPath;

static ARGS_FAST_PATH: ArgsFastPath = ArgsFastPath;

impl FastPath for ArgsFastPath {
    fn entries(&self) -> FastEntries {
        arg_recipes::entries()
    }

    /// The graph tracer's own refresh (the first path) set the state
    /// both read.
    fn refresh(&self) -> bool {
        GRAPH_TRACER.fast_path_bit() != 0
    }
}

impl Tracer for GraphTracer {
    fn on_enable(&self, filter: &Filter) {
        let pool: &'static RingPool<RawEvent> = Lazy::force(&GRAPH_TRACER.pool);
        ring::reset_in_fork_children(pool);
        let depth = filter.get_max_depth().map_or(usize::MAX, usize::from);
        self.max_depth.store(depth, Ordering::Relaxed);
        // Checked by enable_with before it calls on_enable.
        let min = filter.min_duration_ns().unwrap_or(u64::MAX);
        self.min_duration_ns.store(min, Ordering::Relaxed);
        let index = tracer::find("graph").unwrap_or(0);
        self.mark.store(1 << index, Ordering::Relaxed);
        tracer::offer_fast_path(tracer::GRAPH_FAST_PATH, index, &GRAPH_TRACER);
        tracer::offer_fast_path(tracer::GRAPH_ARGS_FAST_PATH, index, &ARGS_FAST_PATH);
    }

    fn wants_exit(&self) -> bool {
        true
    }

    #[inline]
    fn entry(&self, call: &Call<'_>) {
        if !call.exit_hooked() || call.depth() > self.max_depth.load(Ordering::Relaxed) {
            return;
        }
        if self.min_duration_ns.load(Ordering::Relaxed) != 0 {
            return unrecorded::entry(call);
        }
        let event = RawEvent::new(
            call.time_ticks,
            call.site_return,
            call.depth(),
            EventKind::Entry,
        );
        if call.records_args() {
            let mut push = |events: &[RawEvent]| self.push_with_values(events);
            if args::with_values(event, call.function, args::Side::Entry(call), &mut push) {
                return;
            }
        }
        self.push(event);
    }

    #[inline]
    fn exit(&self, ret: &Return) {
        let max_depth = self.max_depth.load(Ordering::Relaxed);
        if ret.depth() > max_depth {
            return;
        }
        let min = self.min_duration_ns.load(Ordering::Relaxed);
        if min != 0 {
            unrecorded::exit(ret);
            let mark = self.mark.load(Ordering::Relaxed);
            let entry_written = ret.marks & mark != 0;
            if ret.exit_ns() - ret.entry_ns() < min && !entry_written {
                return;
            }
            self.write_pending_ancestors(ret.depth(), mark, max_depth);
            if !entry_written {
                self.push(RawEvent::new(
                    ret.entry_ticks,
                    ret.site,
                    ret.depth(),
                    EventKind::Entry,
                ));
            }
        }
        let event = RawEvent::new(ret.exit_ticks, ret.site, ret.depth(), EventKind::Exit);
        if ret.returned.is_some() && min == 0 {
            let mut push = |events: &[RawEvent]| self.push_with_values(events);
            if args::with_values(event, ret.function(), args::Side::Exit(ret), &mut push) {
                return;
            }
        }
        self.push(event);
    }
}
