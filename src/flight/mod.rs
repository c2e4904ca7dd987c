//! The flight recorder: [`flight_record`] enables the graph tracer and
//! starts a writer thread that drains every thread's buffer every few
//! milliseconds into an in-memory window holding only the most recent
//! events, within a memory budget (the oldest, across threads, are
//! evicted). [`FlightRecorder::snapshot`] writes the window as a uftrace
//! data directory; triggers write one when a chosen function is slow, on a
//! Rust panic or on a signal. Snapshots are written by the writer thread
//! (on-demand ones by the caller), never on the traced path or in a signal
//! handler.
//!
//! Memory: the window (16 bytes per event and per 8 bytes of its
//! recorded values, at most
//! [`FlightOptions::budget_bytes`]) and the threads' buffers. Snapshots
//! are written from the window in place, by the writer thread: no copy.

mod drain;
mod futures;
mod hooks;
mod window;
mod write;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crate::builtin::graph::GRAPH_TRACER;
use crate::control;
use crate::error::Error;
use crate::filter::Filter;
use crate::record::{DEFAULT_DRAIN_INTERVAL, DEFAULT_RECORD_BUFFER_EVENTS, RECORDER_RUNNING};
use crate::rt::thread::Untraced;
use drain::{duration_spec, Drain, DrainGone};
use fntrace_format::analysis::human_duration;
use fntrace_format::export::TraceOutput;
use hooks::SignalHandler;
use window::Window;
pub use window::FLIGHT_EVENT_BYTES;
use write::{write_snapshot, SnapshotAt};

/// The largest window a flight recorder keeps: 4 GiB, 268M events —
/// minutes of a busy service's history, far more than the seconds before
/// a trigger that a snapshot is for. The window is the process's own
/// memory, and every snapshot writes all of it from the writer thread,
/// which drains no buffer meanwhile: a window of tens of gigabytes would
/// take minutes to write while every thread's buffer overflows. A fixed
/// bound, not a share of the machine's memory: the same value is accepted
/// everywhere, in a container's memory limit too.
pub const MAX_FLIGHT_BUDGET_BYTES: usize = 4 << 30;

/// The default of [`FlightOptions::snapshots_per_minute`].
pub const DEFAULT_SNAPSHOTS_PER_MINUTE: u32 = 6;

/// The file of a trigger's snapshot saying what fired it (`fntrace
/// report` shows it first).
pub const TRIGGER_FILE: &str = "trigger.txt";

/// How a flight recorder runs; see [`flight_record`].
#[derive(Clone, Debug)]
pub struct FlightOptions {
    /// Bytes of events the recorder keeps (64 MiB by default), at
    /// [`FLIGHT_EVENT_BYTES`] (16) per event and per 8 bytes of its
    /// recorded values: three quarters for the window (`budget_bytes * 3 /
    /// 4 / 16` of those; older ones are evicted), a
    /// quarter for what comes in while a snapshot is written from it. At
    /// most [`MAX_FLIGHT_BUDGET_BYTES`].
    pub budget_bytes: usize,
    /// How often the writer drains the threads' buffers (10 ms).
    pub drain_interval: Duration,
    /// Events per thread buffer, for buffers made from now on (262,144).
    pub buffer_events: usize,
    /// Snapshots the triggers may write over the recorder's life (64);
    /// triggers firing after that are counted in
    /// [`FlightReport::skipped_triggers`].
    pub max_trigger_snapshots: usize,
    /// Snapshots the triggers may write in any 60 seconds (6): under load
    /// a slow-call trigger fires on call after call, and each snapshot
    /// costs a write of the whole window. Triggers firing beyond it are
    /// counted in [`FlightReport::skipped_triggers`].
    pub snapshots_per_minute: u32,
}

impl Default for FlightOptions {
    fn default() -> Self {
        FlightOptions {
            budget_bytes: 64 << 20,
            drain_interval: DEFAULT_DRAIN_INTERVAL,
            buffer_events: DEFAULT_RECORD_BUFFER_EVENTS,
            max_trigger_snapshots: 64,
            snapshots_per_minute: DEFAULT_SNAPSHOTS_PER_MINUTE,
        }
    }
}

/// What a snapshot wrote; see [`FlightRecorder::snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotReport {
    /// The uftrace data directory.
    pub dir: PathBuf,
    /// Events written (entries and exits).
    pub events: u64,
    /// Events the threads' buffers dropped within the window (lost records
    /// in the directory).
    pub lost: u64,
    /// Threads with events.
    pub threads: usize,
    /// Events evicted from the window since the recorder started.
    pub evicted: u64,
    /// Time of the window's first and last events (monotonic nanoseconds,
    /// as the events'), if it had any.
    pub first_ns: Option<u64>,
    /// See `first_ns`.
    pub last_ns: Option<u64>,
}

impl SnapshotReport {
    /// The time the window spans, first event to last.
    pub fn window(&self) -> Duration {
        match (self.first_ns, self.last_ns) {
            (Some(first), Some(last)) => Duration::from_nanos(last.saturating_sub(first)),
            _ => Duration::ZERO,
        }
    }
}

/// Which threads a slow-call trigger's snapshot holds; see
/// [`FlightRecorder::trigger_on_slow_call_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SnapshotThreads {
    /// Every thread's window (as panic and signal snapshots).
    #[default]
    All,
    /// Only the threads that made the slow calls the snapshot is for
    /// (`GLOB>DURATION@trigger-thread`): a fraction of the size when many
    /// threads run.
    Trigger,
}

/// Why a trigger wrote a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// A call of `function` lasted `duration`, at least the threshold of
    /// [`FlightRecorder::trigger_on_slow_call`].
    SlowCall {
        /// The function's demangled name.
        function: String,
        /// How long the call lasted.
        duration: Duration,
        /// The thread that made it.
        tid: u32,
        /// When it started (monotonic nanoseconds, as the events').
        start_ns: u64,
        /// Its thread's buffer dropped events before its end was seen: it
        /// lasted at least `duration` (up to its last event kept), and an
        /// exit after the gap could not be told to be its own.
        at_least: bool,
        /// Its recorded arguments and return value as `fntrace replay`
        /// shows them after the name (`("user:42") = 0`); empty if none
        /// were recorded (see `fntrace::set_arg_specs`).
        values: String,
    },
    /// A future of an async function a slow-call trigger matches (by its
    /// resume function's name or the async fn's; recorded with `fntrace
    /// record --async`'s values) took `latency` from its first poll to
    /// its Ready poll, at least the trigger's threshold.
    SlowFuture {
        /// The resume function's demangled name (`kv::serve::{closure#0}`).
        function: String,
        /// The future's address.
        address: u64,
        /// Its first poll's entry (monotonic nanoseconds, as the events').
        start_ns: u64,
        /// First poll's entry to the Ready poll's exit.
        latency: Duration,
        /// Time spent in its polls.
        busy: Duration,
        /// Its polls.
        polls: u64,
        /// The first threads its polls ran on (at most 4).
        tids: Vec<u32>,
        /// It ran on more threads than `tids`.
        more_threads: bool,
    },
    /// A Rust panic: its message and where (`MESSAGE (at FILE:LINE:COL)`).
    Panic(String),
    /// A signal, by number.
    Signal(i32),
}

/// A snapshot a trigger wrote, or tried to; see [`FlightRecorder::triggered`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggeredSnapshot {
    /// What fired.
    pub trigger: Trigger,
    /// The other triggers that fired before the snapshot was written (slow
    /// calls for the same directory): one snapshot holds them all.
    pub more: Vec<Trigger>,
    /// The snapshot, or why it could not be written.
    pub result: Result<SnapshotReport, String>,
}

/// What a flight recorder did over its life; see [`FlightRecorder::stop`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlightReport {
    /// Events (entries and exits) the window took in.
    pub events: u64,
    /// Events evicted from the window to keep it within its budget.
    pub evicted: u64,
    /// Events the threads' buffers dropped (the writer fell behind).
    pub lost: u64,
    /// Snapshots the triggers wrote (or failed to).
    pub triggered: Vec<TriggeredSnapshot>,
    /// Triggers that fired after [`FlightOptions::max_trigger_snapshots`],
    /// or beyond [`FlightOptions::snapshots_per_minute`].
    pub skipped_triggers: u64,
    /// Triggers that fired while the recorder waited after a snapshot that
    /// could not be written (a full disk): 1 s after the first failure in
    /// a row, doubling up to a minute. Failed snapshots are in
    /// `triggered`, with their error, and count toward neither limit.
    pub skipped_after_failure: u64,
    /// How long the recorder ran.
    pub duration: Duration,
    /// Futures of async functions (recorded with `--async`'s values) first
    /// polled while the runtime future linker's table was full, over the
    /// process's life: no trigger on a whole future could see them.
    pub futures_untracked: u64,
}

/// A running flight recorder; see [`flight_record`]. Dropping it stops it
/// as [`FlightRecorder::stop`] does, ignoring errors.
pub struct FlightRecorder {
    shared: Arc<FlightShared>,
    writer: Option<JoinHandle<()>>,
    tracer: String,
    started: Instant,
}

/// A request to the writer thread.
enum Request {
    /// A snapshot into this directory, written by the writer.
    Snapshot(PathBuf),
    /// A panic snapshot, written by the writer.
    Panic(String),
}

enum Answer {
    Snapshot(Result<SnapshotReport, Error>),
    Done,
}

/// A slow call or future seen, its snapshot due after drain `due`.
struct PendingSlow {
    dir: PathBuf,
    /// A [`Trigger::SlowCall`] or [`Trigger::SlowFuture`].
    trigger: Trigger,
    /// The threads it ran on (none: not all known, every thread).
    tids: Vec<u32>,
    due: u64,
    threads: SnapshotThreads,
}

/// A slow-call trigger.
#[derive(Clone)]
struct SlowTrigger {
    glob: String,
    pattern: Filter,
    threshold_ns: u64,
    dir: PathBuf,
    threads: SnapshotThreads,
}

/// What the recorder's users and the writer share.
#[derive(Default)]
struct FlightState {
    stop: bool,
    next_request: u64,
    requests: Vec<(u64, Request)>,
    answers: Vec<(u64, Answer)>,
    slow: Vec<SlowTrigger>,
    /// Bumped whenever `slow` changes (the writer's per-function matches
    /// are then recomputed).
    slow_generation: u64,
    panic_dir: Option<PathBuf>,
    signals: Vec<(SignalHandler, PathBuf)>,
    triggered: Vec<TriggeredSnapshot>,
    skipped_triggers: u64,
    skipped_after_failure: u64,
}

pub(crate) struct FlightShared {
    state: Mutex<FlightState>,
    /// Wakes the writer (a request, stop).
    wake: Condvar,
    /// Wakes those waiting for an answer.
    answered: Condvar,
    writer: OnceLock<ThreadId>,
    writer_running: AtomicBool,
    evicted: AtomicU64,
    appended: AtomicU64,
    lost: AtomicU64,
    max_trigger_snapshots: usize,
    snapshots_per_minute: u32,
}

impl FlightShared {
    fn state(&self) -> MutexGuard<'_, FlightState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the writer for `request` and waits for its answer (at most
    /// `limit`); `None` if the writer is gone or took too long.
    fn ask(&self, request: Request, limit: Duration) -> Option<Answer> {
        let deadline = Instant::now() + limit;
        let mut state = self.state();
        if state.stop {
            return None;
        }
        state.next_request += 1;
        let id = state.next_request;
        state.requests.push((id, request));
        self.wake.notify_all();
        loop {
            if let Some(i) = state.answers.iter().position(|(a, _)| *a == id) {
                return Some(state.answers.swap_remove(i).1);
            }
            let now = Instant::now();
            if now >= deadline || !self.writer_running.load(Ordering::Acquire) {
                state.requests.retain(|(r, _)| *r != id);
                return None;
            }
            let wait = (deadline - now).min(Duration::from_millis(100));
            state = self
                .answered
                .wait_timeout(state, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn add_slow(
        &self,
        pattern: &str,
        threshold: Duration,
        dir: &Path,
        threads: SnapshotThreads,
    ) -> Result<(), Error> {
        create_dir(dir)?;
        let mut state = self.state();
        if state.slow.len() >= 64 {
            return Err(Error::Recording(
                "64 slow-call triggers are set already (untrigger some)".to_string(),
            ));
        }
        state.slow.push(SlowTrigger {
            glob: pattern.to_string(),
            pattern: Filter::new().include(pattern),
            threshold_ns: u64::try_from(threshold.as_nanos()).unwrap_or(u64::MAX),
            dir: dir.to_path_buf(),
            threads,
        });
        state.slow_generation += 1;
        Ok(())
    }

    fn add_signal(&self, signo: i32, dir: &Path) -> Result<(), Error> {
        create_dir(dir)?;
        let mut state = self.state();
        if state
            .signals
            .iter()
            .any(|(handler, _)| handler.signo == signo)
        {
            return Err(Error::Recording(format!(
                "{} triggers a snapshot already",
                crate::sys::signal::name(signo)
            )));
        }
        let handler = hooks::install_signal_handler(signo)?;
        state.signals.push((handler, dir.to_path_buf()));
        Ok(())
    }

    fn triggers(&self) -> Vec<(String, PathBuf)> {
        let state = self.state();
        let mut triggers: Vec<(String, PathBuf)> = state
            .slow
            .iter()
            .map(|t| {
                let only = match t.threads {
                    SnapshotThreads::All => "",
                    SnapshotThreads::Trigger => "@trigger-thread",
                };
                (
                    format!("{}>{}{only}", t.glob, duration_spec(t.threshold_ns)),
                    t.dir.clone(),
                )
            })
            .collect();
        if let Some(dir) = &state.panic_dir {
            triggers.push(("panic".to_string(), dir.clone()));
        }
        for (handler, dir) in &state.signals {
            triggers.push((
                crate::sys::signal::name(handler.signo).to_string(),
                dir.clone(),
            ));
        }
        triggers
    }

    /// Removes the triggers `which` names (a slow-call trigger's glob,
    /// `panic`, a signal name; `None`: all); how many were removed.
    fn remove_triggers(&self, which: Option<&str>) -> usize {
        let mut state = self.state();
        let before = state.slow.len();
        state.slow.retain(|t| which.is_some_and(|w| w != t.glob));
        let mut removed = before - state.slow.len();
        if removed > 0 {
            state.slow_generation += 1;
        }
        if which.is_none_or(|w| w == "panic") && state.panic_dir.take().is_some() {
            removed += 1;
        }
        let mut kept = Vec::new();
        for (handler, dir) in state.signals.drain(..) {
            if which.is_none_or(|w| w == crate::sys::signal::name(handler.signo)) {
                handler.restore();
                removed += 1;
            } else {
                kept.push((handler, dir));
            }
        }
        state.signals = kept;
        removed
    }

    /// The panic hook's part: a snapshot into the panic directory, if one
    /// was asked for, written by the writer while this thread waits.
    fn snapshot_for_panic(&self, message: &str, limit: Duration) {
        if self.writer.get() == Some(&std::thread::current().id())
            || self.state().panic_dir.is_none()
        {
            return;
        }
        self.ask(Request::Panic(message.to_string()), limit);
    }
}

/// Starts a flight recorder: enables `tracer` (which must be `"graph"`) for
/// the functions `filter` selects and keeps their most recent events in
/// memory, within `options.budget_bytes`, until [`FlightRecorder::stop`].
/// One recorder at a time, streaming ([`record`](crate::record)) or flight.
///
/// ```no_run
/// use std::time::Duration;
/// let filter = fntrace::Filter::new().include("*myservice::*");
/// let flight = fntrace::flight_record("graph", &filter, fntrace::FlightOptions::default())?;
/// flight.trigger_on_slow_call("*handle_request*", Duration::from_millis(5), "/tmp/slow")?;
/// flight.snapshot_on_panic("/tmp/panic");
/// // ... the service runs ...
/// let snapshot = flight.snapshot("/tmp/snap1")?;
/// println!("{} events over {:?}", snapshot.events, snapshot.window());
/// flight.stop()?;
/// # Ok::<(), fntrace::Error>(())
/// ```
pub fn flight_record(
    tracer: &str,
    filter: &Filter,
    options: FlightOptions,
) -> Result<FlightRecorder, Error> {
    crate::record::exclusively(tracer, || start(tracer, filter, &options))
}

fn start(tracer: &str, filter: &Filter, options: &FlightOptions) -> Result<FlightRecorder, Error> {
    filter.min_duration_ns()?;
    if options.budget_bytes > MAX_FLIGHT_BUDGET_BYTES {
        return Err(Error::Recording(format!(
            "a flight window of {} bytes is over the limit, {MAX_FLIGHT_BUDGET_BYTES} (4G)",
            options.budget_bytes
        )));
    }
    control::init()?;
    control::set_filter_specs(filter)?;
    GRAPH_TRACER.retain_buffered();
    GRAPH_TRACER.set_buffer_events(options.buffer_events);
    // No budget: buffers made from now on are of `buffer_events`, on
    // ordinary pages (see `rt::ring::budget`).
    GRAPH_TRACER.set_memory_budget(0, 0);
    let shared = Arc::new(FlightShared {
        state: Mutex::new(FlightState::default()),
        wake: Condvar::new(),
        answered: Condvar::new(),
        writer: OnceLock::new(),
        writer_running: AtomicBool::new(true),
        evicted: AtomicU64::new(0),
        appended: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        max_trigger_snapshots: options.max_trigger_snapshots,
        snapshots_per_minute: options.snapshots_per_minute.max(1),
    });
    let interval = options.drain_interval.max(Duration::from_micros(100));
    // A quarter of the budget holds what is drained while a snapshot is
    // written (the window is read in place then).
    let staging_bytes = options.budget_bytes / 4;
    let window = Window::new(options.budget_bytes - staging_bytes);
    let staging = Window::new(staging_bytes);
    let writer = {
        let shared = Arc::clone(&shared);
        crate::rt::spawn::spawn_running("fntrace-flight", move || {
            let _ = shared.writer.set(std::thread::current().id());
            let _gone = DrainGone(&shared);
            // It drains every few milliseconds: threads that exit while
            // many exited threads' buffers wait for it may wait for it.
            let _periodic = GRAPH_TRACER.periodic_reader();
            Drain::new(window, staging, interval).run(&shared);
        })
        .map_err(|source| Error::Io {
            what: "starting the flight recorder's writer thread".to_string(),
            source,
        })?
    };
    let recorder = FlightRecorder {
        shared: Arc::clone(&shared),
        writer: Some(writer),
        tracer: tracer.to_string(),
        started: Instant::now(),
    };
    hooks::set_active(Some(shared));
    // Enabled last: nothing is traced before the writer runs. On error the
    // recorder is stopped by its drop.
    control::enable_with(tracer, filter)?;
    Ok(recorder)
}

/// A snapshot of the running flight recorder, whoever started it (for the
/// control socket); `None` if none runs.
pub(crate) fn snapshot_running(dir: &Path) -> Option<Result<SnapshotReport, Error>> {
    let shared = hooks::active()?;
    Some(snapshot_of(&shared, dir))
}

/// Whether a flight recorder runs.
pub(crate) fn flight_recorder_running() -> bool {
    hooks::active().is_some()
}

/// The running flight recorder, whoever started it (for the C ABI and the
/// control socket); `None` if none runs.
pub(crate) fn running() -> Option<Running> {
    hooks::active().map(Running)
}

/// A handle on the running flight recorder; see [`running`].
pub(crate) struct Running(Arc<FlightShared>);

impl Running {
    /// As [`FlightRecorder::trigger_on_slow_call`].
    pub(crate) fn trigger_on_slow_call(
        &self,
        pattern: &str,
        threshold: Duration,
        dir: &Path,
        threads: SnapshotThreads,
    ) -> Result<(), Error> {
        self.0.add_slow(pattern, threshold, dir, threads)
    }

    /// As [`FlightRecorder::snapshot_on_panic`].
    pub(crate) fn snapshot_on_panic(&self, dir: &Path) {
        hooks::install_panic_hook();
        self.0.state().panic_dir = Some(dir.to_path_buf());
    }

    /// As [`FlightRecorder::snapshot_on_signal`].
    pub(crate) fn snapshot_on_signal(&self, signo: i32, dir: &Path) -> Result<(), Error> {
        self.0.add_signal(signo, dir)
    }

    /// As [`FlightRecorder::triggers`].
    pub(crate) fn triggers(&self) -> Vec<(String, PathBuf)> {
        self.0.triggers()
    }

    /// As [`FlightRecorder::remove_triggers`].
    pub(crate) fn remove_triggers(&self, which: Option<&str>) -> usize {
        self.0.remove_triggers(which)
    }

    /// Trigger snapshots written and triggers skipped so far.
    pub(crate) fn trigger_counts(&self) -> (usize, u64) {
        let state = self.0.state();
        (state.triggered.len(), state.skipped_triggers)
    }
}

fn snapshot_of(shared: &FlightShared, dir: &Path) -> Result<SnapshotReport, Error> {
    let _untraced = Untraced::begin();
    match shared.ask(
        Request::Snapshot(dir.to_path_buf()),
        Duration::from_secs(60),
    ) {
        Some(Answer::Snapshot(result)) => result,
        _ => Err(Error::Recording(
            "the flight recorder's writer did not answer".to_string(),
        )),
    }
}

impl FlightRecorder {
    /// Writes the window — every thread's most recent events, up to now —
    /// as a uftrace data directory at `dir` (which must not exist or be
    /// empty). Calls running at the window's start get an entry at the
    /// thread's first timestamp (as [`write_uftrace_dir`] does); calls
    /// still running have no exit. Every event made before the call is in
    /// it (the drain it waits for starts after it). The writer thread
    /// drains and writes the window as it is (no copy), while this thread
    /// waits (up to 60 s); meanwhile the threads' buffers fill, and what
    /// they cannot hold is lost (counted).
    ///
    /// [`write_uftrace_dir`]: crate::export::write_uftrace_dir
    pub fn snapshot(&self, dir: impl AsRef<Path>) -> Result<SnapshotReport, Error> {
        snapshot_of(&self.shared, dir.as_ref())
    }

    /// From now on, each call of a function whose demangled name matches
    /// `pattern` (a glob, as [`Filter::include`] takes) lasting at least
    /// `threshold` writes a snapshot `dir/TIME-FUNCTION` (`TIME` the UTC
    /// time it was written, `20261125T231501.123`; `FUNCTION` with
    /// characters other than letters, digits, `_`, `-` and `.` made `_`),
    /// with every thread's events up to the drain after the one that saw
    /// the call end, and a [`TRIGGER_FILE`] naming the call (function,
    /// thread, start, duration). Slow calls seen before it is written (for
    /// the same `dir`) go in the same snapshot, listed each. The function
    /// must be traced (selected by the recorder's filter). See
    /// [`FlightRecorder::triggered`] and [`FlightOptions::snapshots_per_minute`].
    pub fn trigger_on_slow_call(
        &self,
        pattern: &str,
        threshold: Duration,
        dir: impl AsRef<Path>,
    ) -> Result<(), Error> {
        self.trigger_on_slow_call_with(pattern, threshold, dir, SnapshotThreads::All)
    }

    /// As [`trigger_on_slow_call`](Self::trigger_on_slow_call), with the
    /// snapshots holding the threads `threads` says: with
    /// [`SnapshotThreads::Trigger`], only the threads of the slow calls
    /// listed in its [`TRIGGER_FILE`] (which says so).
    pub fn trigger_on_slow_call_with(
        &self,
        pattern: &str,
        threshold: Duration,
        dir: impl AsRef<Path>,
        threads: SnapshotThreads,
    ) -> Result<(), Error> {
        self.shared
            .add_slow(pattern, threshold, dir.as_ref(), threads)
    }

    /// The triggers set, each as its `FNTRACE_FLIGHT_TRIGGER` item
    /// (`handle_*>5ms`, `handle_*>5ms@trigger-thread`, `panic`, `SIGUSR1`)
    /// with its directory.
    pub fn triggers(&self) -> Vec<(String, PathBuf)> {
        self.shared.triggers()
    }

    /// Removes the triggers `which` names: a slow-call trigger's glob (all
    /// those with it), `"panic"`, or a signal name (`"SIGUSR1"`, whose
    /// previous disposition comes back); `None` removes every trigger.
    /// Returns how many were removed.
    pub fn remove_triggers(&self, which: Option<&str>) -> usize {
        self.shared.remove_triggers(which)
    }

    /// From now on, a Rust panic on any thread (but the writer's) writes a
    /// snapshot `dir/TIME-panic` before the panic goes on: fntrace's panic
    /// hook (installed once, chained to the hook it replaced, which runs
    /// after it) asks the writer for it and waits up to 10 s.
    pub fn snapshot_on_panic(&self, dir: impl AsRef<Path>) {
        hooks::install_panic_hook();
        self.shared.state().panic_dir = Some(dir.as_ref().to_path_buf());
    }

    /// From now on, signal `signo` writes a snapshot `dir/TIME-NAME`
    /// (`NAME` as `SIGUSR1`). The handler, installed now and replaced by
    /// the previous disposition at [`FlightRecorder::stop`], only sets a
    /// flag; the writer sees it at its next drain. Do not pick fntrace's
    /// stop signal ([`set_stop_signal`](crate::set_stop_signal), `SIGUSR2`
    /// by default).
    pub fn snapshot_on_signal(&self, signo: i32, dir: impl AsRef<Path>) -> Result<(), Error> {
        self.shared.add_signal(signo, dir.as_ref())
    }

    /// The snapshots the triggers wrote (or failed to) so far, oldest first.
    pub fn triggered(&self) -> Vec<TriggeredSnapshot> {
        self.shared.state().triggered.clone()
    }

    /// Events evicted from the window so far.
    pub fn evicted(&self) -> u64 {
        self.shared.evicted.load(Ordering::Acquire)
    }

    /// Stops: disables the tracer, lets the writer drain once more and
    /// write what triggers are pending, removes the signal handlers (the
    /// panic hook stays, inert) and frees the window.
    pub fn stop(mut self) -> Result<FlightReport, Error> {
        self.finish()
    }

    fn finish(&mut self) -> Result<FlightReport, Error> {
        let _untraced = Untraced::begin();
        let Some(writer) = self.writer.take() else {
            return Err(Error::Recording("stopped already".to_string()));
        };
        hooks::set_active(None);
        let disabled = crate::record::disable_recorded(&self.tracer);
        self.shared.state().stop = true;
        self.shared.wake.notify_all();
        let joined = writer.join();
        let mut state = self.shared.state();
        for (handler, _) in state.signals.drain(..) {
            handler.restore();
        }
        let report = FlightReport {
            events: self.shared.appended.load(Ordering::Acquire),
            evicted: self.shared.evicted.load(Ordering::Acquire),
            lost: self.shared.lost.load(Ordering::Acquire),
            triggered: std::mem::take(&mut state.triggered),
            skipped_triggers: state.skipped_triggers,
            skipped_after_failure: state.skipped_after_failure,
            duration: self.started.elapsed(),
            futures_untracked: crate::builtin::futures::untracked(),
        };
        drop(state);
        GRAPH_TRACER.release_memory();
        RECORDER_RUNNING.store(false, Ordering::Release);
        if joined.is_err() {
            return Err(Error::Recording(
                "the flight recorder's writer thread panicked (a bug)".to_string(),
            ));
        }
        disabled?;
        Ok(report)
    }
}

impl Drop for FlightRecorder {
    fn drop(&mut self) {
        if self.writer.is_some() {
            let _ = self.finish();
        }
    }
}

/// Makes (as `mkdir -p`) and checks the directory a trigger's snapshots
/// go under, as every output directory is checked
/// ([`OutputDir`](fntrace_format::export::OutputDir): no link followed on
/// the way, refused if someone else could plant or swap names in it).
fn create_dir(dir: &Path) -> Result<(), Error> {
    fntrace_format::export::OutputDir::open_or_make(dir)?;
    Ok(())
}
