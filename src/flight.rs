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
//! Memory: the window (16 bytes per event, at most
//! [`FlightOptions::budget_bytes`]) and the threads' buffers. Snapshots
//! are written from the window in place, by the writer thread: no copy.

mod hooks;
mod window;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crate::control;
use crate::error::Error;
use crate::filter::Filter;
use crate::record::{DEFAULT_DRAIN_INTERVAL, DEFAULT_RECORD_BUFFER_EVENTS, RECORDING};
use crate::rt::thread::Untraced;
use crate::tracers::graph::{describe_functions, GRAPH_TRACER};
use hooks::SignalHandler;
pub use window::FLIGHT_EVENT_BYTES;
use window::{Window, WindowEvents};

/// How a flight recorder runs; see [`flight_record`].
#[derive(Clone, Debug)]
pub struct FlightOptions {
    /// Bytes of events the window keeps (64 MiB by default): at
    /// [`FLIGHT_EVENT_BYTES`] (16) per event, the window holds
    /// `budget_bytes / 16` events; older ones are evicted.
    pub budget_bytes: usize,
    /// How often the writer drains the threads' buffers (10 ms).
    pub drain_interval: Duration,
    /// Events per thread buffer, for buffers made from now on (262,144).
    pub buffer_events: usize,
    /// Snapshots the triggers may write over the recorder's life (64);
    /// triggers firing after that are counted in
    /// [`FlightReport::skipped_triggers`].
    pub max_trigger_snapshots: usize,
}

impl Default for FlightOptions {
    fn default() -> Self {
        FlightOptions {
            budget_bytes: 64 << 20,
            drain_interval: DEFAULT_DRAIN_INTERVAL,
            buffer_events: DEFAULT_RECORD_BUFFER_EVENTS,
            max_trigger_snapshots: 64,
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
    /// Triggers that fired after [`FlightOptions::max_trigger_snapshots`].
    pub skipped_triggers: u64,
    /// How long the recorder ran.
    pub duration: Duration,
}

/// A running flight recorder; see [`flight_record`]. Dropping it stops it
/// as [`FlightRecorder::stop`] does, ignoring errors.
pub struct FlightRecorder {
    shared: Arc<Shared>,
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

/// A slow-call trigger.
#[derive(Clone)]
struct SlowTrigger {
    pattern: Filter,
    threshold_ns: u64,
    dir: PathBuf,
}

/// What the recorder's users and the writer share.
#[derive(Default)]
struct State {
    stop: bool,
    next_request: u64,
    requests: Vec<(u64, Request)>,
    answers: Vec<(u64, Answer)>,
    slow: Vec<SlowTrigger>,
    panic_dir: Option<PathBuf>,
    signals: Vec<(SignalHandler, PathBuf)>,
    triggered: Vec<TriggeredSnapshot>,
    skipped_triggers: u64,
}

pub(crate) struct Shared {
    state: Mutex<State>,
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
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
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
    control::init()?;
    GRAPH_TRACER.retain_buffered();
    GRAPH_TRACER.set_buffer_events(options.buffer_events);
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        wake: Condvar::new(),
        answered: Condvar::new(),
        writer: OnceLock::new(),
        writer_running: AtomicBool::new(true),
        evicted: AtomicU64::new(0),
        appended: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        max_trigger_snapshots: options.max_trigger_snapshots,
    });
    let interval = options.drain_interval.max(Duration::from_micros(100));
    let window = Window::new(options.budget_bytes);
    let writer = {
        let shared = Arc::clone(&shared);
        crate::record::spawn_running("fntrace-flight", move || {
            let _ = shared.writer.set(std::thread::current().id());
            let _gone = WriterGone(&shared);
            Writer::new(window).run(&shared, interval);
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

fn snapshot_of(shared: &Shared, dir: &Path) -> Result<SnapshotReport, Error> {
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
    /// `threshold` writes a snapshot `dir/slow-N-FUNCTION` (`N` counting
    /// from 1, `FUNCTION` with characters other than letters, digits, `_`,
    /// `-` and `.` made `_`), with every thread's events up to the drain
    /// after the one that saw the call end. The function must be traced
    /// (selected by the recorder's filter). See [`FlightRecorder::triggered`].
    pub fn trigger_on_slow_call(
        &self,
        pattern: &str,
        threshold: Duration,
        dir: impl AsRef<Path>,
    ) -> Result<(), Error> {
        let dir = dir.as_ref();
        create_dir(dir)?;
        self.shared.state().slow.push(SlowTrigger {
            pattern: Filter::new().include(pattern),
            threshold_ns: u64::try_from(threshold.as_nanos()).unwrap_or(u64::MAX),
            dir: dir.to_path_buf(),
        });
        Ok(())
    }

    /// From now on, a Rust panic on any thread (but the writer's) writes a
    /// snapshot `dir/panic-N` before the panic goes on: fntrace's panic
    /// hook (installed once, chained to the hook it replaced, which runs
    /// after it) asks the writer for it and waits up to 10 s.
    pub fn snapshot_on_panic(&self, dir: impl AsRef<Path>) {
        hooks::install_panic_hook();
        self.shared.state().panic_dir = Some(dir.as_ref().to_path_buf());
    }

    /// From now on, signal `signo` writes a snapshot `dir/signal-N-NAME`
    /// (`NAME` as `SIGUSR1`). The handler, installed now and replaced by
    /// the previous disposition at [`FlightRecorder::stop`], only sets a
    /// flag; the writer sees it at its next drain. Do not pick fntrace's
    /// stop signal ([`set_stop_signal`](crate::set_stop_signal), `SIGUSR2`
    /// by default).
    pub fn snapshot_on_signal(&self, signo: i32, dir: impl AsRef<Path>) -> Result<(), Error> {
        let dir = dir.as_ref();
        create_dir(dir)?;
        let handler = hooks::install_signal_handler(signo)?;
        self.shared
            .state()
            .signals
            .push((handler, dir.to_path_buf()));
        Ok(())
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
            duration: self.started.elapsed(),
        };
        drop(state);
        GRAPH_TRACER.release_memory();
        RECORDING.store(false, Ordering::Release);
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

fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        what: format!("creating {}", dir.display()),
        source,
    })
}

/// Writes the window as a uftrace directory at `dir`, reading it in place.
fn write_snapshot(window: &Window, dir: &Path) -> Result<SnapshotReport, Error> {
    let summary = window.summary();
    let source = WindowEvents {
        window,
        header: describe_functions(Vec::new(), window.functions()),
    };
    fntrace_tools::export::write_uftrace_dir_of(&source.header, &source, dir, None)?;
    Ok(SnapshotReport {
        dir: dir.to_path_buf(),
        events: summary.events,
        lost: summary.lost,
        threads: summary.threads,
        evicted: window.evicted(),
        first_ns: summary.first_ns,
        last_ns: summary.last_ns,
    })
}

/// Tells those waiting for an answer that the writer is gone, however it
/// ends (a panic included).
struct WriterGone<'a>(&'a Shared);

impl Drop for WriterGone<'_> {
    fn drop(&mut self) {
        self.0.writer_running.store(false, Ordering::Release);
        // Under the lock: a waiter checks the flag, then waits, holding it.
        let _state = self.0.state();
        self.0.answered.notify_all();
    }
}

/// A slow call seen, its snapshot due after drain `due`.
struct PendingSlow {
    dir: PathBuf,
    function: String,
    duration_ns: u64,
    due: u64,
}

/// The writer thread's own state.
struct Writer {
    window: Window,
    drains: u64,
    /// Per function: its name and which slow triggers match it (bit i for
    /// trigger i), for `triggers_known` triggers.
    functions: HashMap<usize, (String, u64)>,
    triggers_known: usize,
    /// Per thread: the calls of matching functions it has running (depth,
    /// entry time, function).
    open: HashMap<u32, Vec<(u16, u64, usize)>>,
    pending: Vec<PendingSlow>,
    /// Snapshots written per kind, for their names: slow, panic, signal.
    written: [u64; 3],
    trigger_snapshots: usize,
}

impl Writer {
    fn new(window: Window) -> Writer {
        Writer {
            window,
            drains: 0,
            functions: HashMap::new(),
            triggers_known: 0,
            open: HashMap::new(),
            pending: Vec::new(),
            written: [0; 3],
            trigger_snapshots: 0,
        }
    }

    fn run(&mut self, shared: &Shared, interval: Duration) {
        // Nothing this thread calls is traced.
        let _untraced = Untraced::begin();
        loop {
            // The requests made before this drain starts are answered after
            // it, so that a snapshot holds every event made before it was
            // asked for; those made during it wait for the next one.
            let (stop, slow, requests) = {
                let state = shared.state();
                let (mut state, _) = shared
                    .wake
                    .wait_timeout_while(state, interval, |s| !s.stop && s.requests.is_empty())
                    .unwrap_or_else(PoisonError::into_inner);
                let requests = std::mem::take(&mut state.requests);
                (state.stop, state.slow.clone(), requests)
            };
            self.drain(shared, &slow);
            let due: Vec<PendingSlow> = {
                let drains = self.drains;
                let (due, later) = std::mem::take(&mut self.pending)
                    .into_iter()
                    .partition(|p| stop || p.due <= drains);
                self.pending = later;
                due
            };
            for slow in due {
                let n = self.next(0);
                let dir = slow
                    .dir
                    .join(format!("slow-{n}-{}", file_name(&slow.function)));
                let trigger = Trigger::SlowCall {
                    function: slow.function,
                    duration: Duration::from_nanos(slow.duration_ns),
                };
                self.write_triggered(shared, trigger, &dir);
            }
            let signals: Vec<(i32, PathBuf)> = shared
                .state()
                .signals
                .iter()
                .map(|(handler, dir)| (handler.signo, dir.clone()))
                .collect();
            for (signo, dir) in signals {
                if hooks::take_raised(signo) {
                    let n = self.next(2);
                    let name = crate::sys::signal::name(signo);
                    let dir = dir.join(format!("signal-{n}-{}", file_name(name)));
                    self.write_triggered(shared, Trigger::Signal(signo), &dir);
                }
            }
            for (id, request) in requests {
                let answer = match request {
                    Request::Snapshot(dir) => Answer::Snapshot(write_snapshot(&self.window, &dir)),
                    Request::Panic(message) => {
                        let dir = shared.state().panic_dir.clone();
                        if let Some(dir) = dir {
                            let n = self.next(1);
                            let dir = dir.join(format!("panic-{n}"));
                            self.write_triggered(shared, Trigger::Panic(message), &dir);
                        }
                        Answer::Done
                    }
                };
                shared.state().answers.push((id, answer));
                shared.answered.notify_all();
            }
            // Requests made during the last drain get one more.
            if stop && shared.state().requests.is_empty() {
                break;
            }
        }
    }

    fn next(&mut self, kind: usize) -> u64 {
        self.written[kind] += 1;
        self.written[kind]
    }

    /// Drains the threads' buffers into the window, looks for slow calls
    /// among the new events, and evicts what is over budget.
    fn drain(&mut self, shared: &Shared, slow: &[SlowTrigger]) {
        let window = &mut self.window;
        window.begin_drain();
        GRAPH_TRACER.stream_events(&mut |batch| {
            window.append(batch.tid, batch.name, batch.events, batch.dropped_after);
        });
        self.drains += 1;
        if !slow.is_empty() {
            self.find_slow_calls(slow);
        }
        self.window.evict();
        shared
            .evicted
            .store(self.window.evicted(), Ordering::Release);
        shared
            .appended
            .store(self.window.appended(), Ordering::Release);
        shared.lost.store(self.window.lost(), Ordering::Release);
    }

    fn find_slow_calls(&mut self, slow: &[SlowTrigger]) {
        if self.triggers_known != slow.len() {
            self.functions.clear();
            self.triggers_known = slow.len();
        }
        // Name the new functions first (outside the drain: naming takes
        // fntrace's operation lock).
        let mut unknown = Vec::new();
        self.window.for_each_new(&mut |_, event| {
            if !self.functions.contains_key(&event.function) && !unknown.contains(&event.function) {
                unknown.push(event.function);
            }
        });
        for function in unknown {
            let name = control::function_name(function).unwrap_or_default();
            let mask = slow
                .iter()
                .enumerate()
                .take(64)
                .filter(|(_, trigger)| trigger.pattern.selects(&name))
                .fold(0u64, |mask, (i, _)| mask | 1 << i);
            self.functions.insert(function, (name, mask));
        }
        let (functions, open, pending) = (&self.functions, &mut self.open, &mut self.pending);
        let due = self.drains + 1;
        self.window.for_each_new(&mut |tid, event| {
            let Some((name, mask)) = functions.get(&event.function) else {
                return;
            };
            if *mask == 0 {
                return;
            }
            let running = open.entry(tid).or_default();
            match event.kind {
                fntrace_tools::EventKind::Entry => {
                    running.retain(|&(depth, _, _)| depth < event.depth);
                    running.push((event.depth, event.time_ns, event.function));
                }
                fntrace_tools::EventKind::Exit => {
                    running.retain(|&(depth, _, _)| depth <= event.depth);
                    if running.last().map(|&(d, _, f)| (d, f))
                        != Some((event.depth, event.function))
                    {
                        return;
                    }
                    let Some((_, entry_ns, _)) = running.pop() else {
                        return;
                    };
                    let duration_ns = event.time_ns.saturating_sub(entry_ns);
                    for (i, trigger) in slow.iter().enumerate().take(64) {
                        if mask & 1 << i != 0 && duration_ns >= trigger.threshold_ns {
                            pending.push(PendingSlow {
                                dir: trigger.dir.clone(),
                                function: name.clone(),
                                duration_ns,
                                due,
                            });
                        }
                    }
                }
            }
        });
        self.open.retain(|_, running| !running.is_empty());
    }

    /// Writes a trigger's snapshot at `dir` (or counts it skipped) and
    /// records the outcome.
    fn write_triggered(&mut self, shared: &Shared, trigger: Trigger, dir: &Path) {
        if self.trigger_snapshots >= shared.max_trigger_snapshots {
            shared.state().skipped_triggers += 1;
            return;
        }
        self.trigger_snapshots += 1;
        let result = write_snapshot(&self.window, dir).map_err(|err| err.to_string());
        shared
            .state()
            .triggered
            .push(TriggeredSnapshot { trigger, result });
    }
}

/// `name` with what does not belong in a file name made `_`, at most 100
/// characters.
fn file_name(name: &str) -> String {
    name.chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}
