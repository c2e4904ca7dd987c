//! The streaming recorder: [`record`] enables the graph tracer and starts a
//! writer thread that drains every thread's buffer every few milliseconds
//! into a uftrace data directory; [`Recording::stop`] disables the tracer,
//! drains the rest and finishes the directory. Memory stays bounded however
//! long the recording runs (the rings, plus a few words per traced thread),
//! and the directory is readable at any moment — after a crash or a kill
//! too, up to the last drain.
//!
//! Events the buffers could not hold (the writer fell behind) are counted
//! and written as a lost record at the point of the thread's stream where
//! they were lost; uftrace's `replay` shows it.
//!
//! A recording follows the process: the child of a `fork` gets a writer of
//! its own (started by a fork handler), adding the child's threads to the
//! same directory (in its parent's session, as uftrace does); before an `exec` (see the C ABI's wrappers) the
//! writer drains and finishes, and the new program, started with
//! `FNTRACE_OUTPUT` and `FNTRACE_APPEND=1`, joins the directory
//! ([`RecordOptions::append`]). The writer is per process: a
//! [`Recording`] handle copied into a child by `fork` stops the child's.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fntrace_format::export::{StreamTotals, UftraceStream};

mod exit;
mod ledger;
mod writer;

pub(crate) use exit::{finish_before_exit, finish_from_signal_handler};

use crate::builtin::graph::{describe_process, GRAPH_TRACER};
use crate::control;
use crate::error::Error;
use crate::filter::Filter;
use crate::rt::ring::RoomStats;
use crate::rt::spawn::spawn_running;
use crate::rt::thread::Untraced;
use crate::sys::clock;
use crate::tracer;
use writer::write_until_stopped;

/// How often the writer drains the buffers by default.
pub const DEFAULT_DRAIN_INTERVAL: Duration = Duration::from_millis(10);

/// Whether a recorder runs, streaming or flight (one at a time: they share
/// the graph tracer's buffers).
pub(crate) static RECORDER_RUNNING: AtomicBool = AtomicBool::new(false);

/// A running recording; see [`record`]. Dropping it stops it as
/// [`Recording::stop`] does, ignoring errors.
pub struct Recording {
    dir: PathBuf,
    started: Instant,
    stopped: bool,
    /// Lossless mode's waits before this recording (they add up).
    room_at_start: RoomStats,
}

/// This process's writer thread, while a recording runs. Per process: in
/// the child of a `fork`, the fork handler replaces the parent's (a thread
/// the child does not have) with one of the child's own.
struct Writer {
    shared: Arc<Shared>,
    handle: JoinHandle<Result<StreamTotals, Error>>,
    tracer: String,
    dir: PathBuf,
    interval: Duration,
    mode: RecordMode,
}

/// Never held while calling into `control` or the tracers: the fork
/// handlers hold it across a `fork`, and take it before the operation lock.
static WRITER: Mutex<Option<Writer>> = Mutex::new(None);

/// The process whose writer `WRITER` holds (0: none), readable without the
/// lock: the child of a `vfork` shares this memory with its parent, and
/// must leave the parent's writer alone.
static WRITER_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Whether this process has a writer running (`false` in a `vfork` child).
pub(crate) fn writing_in_this_process() -> bool {
    WRITER_PID.load(Ordering::Acquire) == std::process::id()
}

/// Puts `writer` in `slot` as this process's.
fn install(slot: &mut Option<Writer>, writer: Writer) {
    *slot = Some(writer);
    WRITER_PID.store(std::process::id(), Ordering::Release);
}

/// Takes this process's writer out of `slot`.
fn uninstall(slot: &mut Option<Writer>) -> Option<Writer> {
    WRITER_PID.store(0, Ordering::Release);
    slot.take()
}

fn writer_slot() -> std::sync::MutexGuard<'static, Option<Writer>> {
    WRITER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a finished recording wrote; see [`Recording::stop`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordReport {
    /// The uftrace data directory.
    pub dir: PathBuf,
    /// Events written (entries and exits).
    pub events: u64,
    /// Events lost: dropped because a thread's buffer was full (each loss
    /// is a lost record in the thread's `.dat`), plus exits left out
    /// because their entry was lost.
    pub lost: u64,
    /// Calls open where a thread lost events: each ended at the gap by an
    /// exit record at the time of the last record before it (written, not
    /// among `events`), so that uftrace and fntrace count the call up to
    /// the gap alike.
    pub closed_at_gaps: u64,
    /// Threads with events.
    pub threads: usize,
    /// Bytes of records written.
    pub bytes: u64,
    /// How long the recording ran.
    pub duration: Duration,
    /// What a thread whose buffer was full did: waited (lossless) or
    /// dropped its event.
    pub mode: RecordMode,
    /// Lossless mode: times a thread found its buffer full and waited for
    /// the writer.
    pub waits: u64,
    /// Lossless mode: how long those waits took in all.
    pub wait_time: Duration,
    /// Lossless mode: the most bytes the threads' buffers held at once
    /// (out of [`RecordOptions::memory_bytes`]; 0 in drop mode).
    pub memory_peak: u64,
    /// The CPU time of the writer thread (draining, encoding, writing).
    pub writer_cpu: Duration,
}

/// Tells the writer when to stop; counts its drains and what they wrote.
struct Shared {
    /// Set to stop the writer (then woken with `GraphTracer::wake_reader`).
    stop: AtomicBool,
    /// Whether the writer keeps the buffers lossless while it runs.
    lossless: bool,
    drains: AtomicU64,
    written: AtomicU64,
    lost: AtomicU64,
    /// The writer thread's CPU time when it finished, in nanoseconds.
    writer_cpu_ns: AtomicU64,
}

/// How a recording runs; see [`record_with`].
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// How often the writer drains the buffers ([`DEFAULT_DRAIN_INTERVAL`]).
    /// Shorter keeps the buffers emptier (fewer losses at high call rates)
    /// for more writer wake-ups.
    pub drain_interval: Duration,
    /// Events per thread buffer, for buffers made from now on
    /// ([`DEFAULT_RECORD_BUFFER_EVENTS`]; buffers of exited threads are
    /// reused whatever their size). The writer empties them every
    /// `drain_interval`, so they need to hold only that long's events:
    /// smaller buffers stay in the caches and take less memory.
    pub buffer_events: usize,
    /// Lossless mode: bytes the threads' buffers may hold together, or 0
    /// for no budget beyond each thread's buffer (the default,
    /// [`DEFAULT_RECORD_MEMORY_BYTES`]: see there why). With a budget, a
    /// thread whose buffer is full
    /// takes more of this budget, half a buffer at a time, and waits for
    /// the writer only when none is left. Each thread holds one buffer
    /// whatever is left; what a thread holds beyond that goes back to the
    /// budget as the writer drains it. At least one buffer
    /// (`buffer_events` × [`RECORD_EVENT_BYTES`]): equal to it, each thread
    /// has its buffer only, and waits when it is full. The address space of
    /// the whole budget is reserved per thread (pages are used only as
    /// events need them, and given back once written). Not used in drop
    /// mode.
    pub memory_bytes: usize,
    /// Add this process as a new session of the recording already at `dir`
    /// (made by this process before an `exec`, or by a parent) instead of
    /// requiring an empty directory. The environment variable
    /// `FNTRACE_APPEND=1` sets it for `FNTRACE_OUTPUT`.
    pub append: bool,
    /// What a thread whose buffer is full does ([`RecordMode::Lossless`],
    /// waits for the writer, by default).
    pub mode: RecordMode,
    /// Unused buffers kept with every page present while recording (2 by
    /// default), for threads that start tracing: their first pass over the
    /// buffer then takes no page fault. The writer replaces those taken
    /// after each drain, and makes the pages ahead of every thread's next
    /// events present. 0 turns both off: a thread then faults in each page
    /// of its buffer on its first pass (≈ 1,000 faults per 4 MiB buffer).
    pub ready_buffers: usize,
}

/// What a recording does when a thread's buffer is full (the writer fell
/// behind).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RecordMode {
    /// The thread waits for the writer to drain its buffer: nothing is
    /// lost, and a program that makes events faster than the writer can
    /// write them runs at the writer's pace. The waits are counted and
    /// timed ([`RecordReport::waits`]). The default of [`record`] and of
    /// `fntrace record`: a trace with holes answers few questions.
    #[default]
    Lossless,
    /// The event is dropped and counted; a lost record marks the gap in the
    /// thread's trace. For services whose latency must never wait on the
    /// recorder's disk (the default of a recording started through live
    /// control, `fntrace ctl TARGET record`).
    Drop,
}

impl RecordMode {
    /// The mode's name: `lossless` or `drop` (as the CLI, the environment
    /// variable `FNTRACE_MODE` and live control spell it).
    pub fn name(self) -> &'static str {
        match self {
            RecordMode::Lossless => "lossless",
            RecordMode::Drop => "drop",
        }
    }
}

impl std::fmt::Display for RecordMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for RecordMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "lossless" => Ok(RecordMode::Lossless),
            "drop" => Ok(RecordMode::Drop),
            other => Err(format!(
                "{other:?} is not a recording mode: use lossless (wait for the writer) \
                 or drop (count and mark lost events)"
            )),
        }
    }
}

/// See [`RecordOptions::ready_buffers`].
const READY_BUFFERS: usize = 2;

/// Bytes an event takes in a thread's buffer (and on disk: uftrace's
/// record size).
pub const RECORD_EVENT_BYTES: usize = 16;

/// Events per thread buffer while recording, by default: 262,144 (4 MiB),
/// 320 ms of a thread making 400k traced calls a second.
pub const DEFAULT_RECORD_BUFFER_EVENTS: usize = 1 << 18;

/// The memory budget of a lossless recording's buffers, by default: none
/// (0), each thread its buffer. A budget (256 MiB: 64 buffers of the
/// default size, 16.7M events, what a CPU-bound thread making an event
/// every 5-10 ns writes in 85-170 ms) spares bursts every wait, but a
/// thread that writes without pause, faster than the writer, moves through
/// fresh pages the kernel zeroes: ripgrep took 10-20 % more wall time
/// (`docs/performance.md`), and such runs are what lossless
/// recording is judged on.
pub const DEFAULT_RECORD_MEMORY_BYTES: usize = 0;

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            drain_interval: DEFAULT_DRAIN_INTERVAL,
            buffer_events: DEFAULT_RECORD_BUFFER_EVENTS,
            memory_bytes: DEFAULT_RECORD_MEMORY_BYTES,
            append: false,
            mode: RecordMode::Lossless,
            ready_buffers: READY_BUFFERS,
        }
    }
}

/// Starts recording: enables `tracer` (which must be `"graph"`: the tracer
/// whose events form a call graph) for the functions `filter` selects, and
/// streams its events into a uftrace data directory at `dir` (which must
/// not exist or be empty) until [`Recording::stop`]. Events recorded before
/// this call are not part of the recording (they stay for
/// [`GraphTracer::take_trace`](crate::GraphTracer::take_trace)).
///
/// ```no_run
/// let filter = fntrace::Filter::new().include("*myservice::*");
/// let recording = fntrace::record("graph", &filter, "/tmp/trace")?;
/// // ... minutes of load ...
/// let report = recording.stop()?;
/// println!("{} events written, {} lost", report.events, report.lost);
/// # Ok::<(), fntrace::Error>(())
/// ```
pub fn record(tracer: &str, filter: &Filter, dir: impl AsRef<Path>) -> Result<Recording, Error> {
    record_with(tracer, filter, dir, &RecordOptions::default())
}

/// [`record`] with options.
pub fn record_with(
    tracer: &str,
    filter: &Filter,
    dir: impl AsRef<Path>,
    options: &RecordOptions,
) -> Result<Recording, Error> {
    let dir = dir.as_ref();
    exclusively(tracer, || start(tracer, filter, dir, options))
}

/// Runs `start` as the process's one recording of `tracer` (which must be
/// `"graph"`, the tracer whose events form a call graph): refused while
/// another recording, streaming or flight, runs; on failure, none runs.
pub(crate) fn exclusively<T>(
    tracer: &str,
    start: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    let _untraced = Untraced::begin();
    if tracer != "graph" {
        return Err(Error::Recording(format!(
            "only the \"graph\" tracer can be recorded, not {tracer:?}"
        )));
    }
    if RECORDER_RUNNING.swap(true, Ordering::AcqRel) {
        return Err(Error::Recording(
            "a recording is running already (stop it first)".to_string(),
        ));
    }
    start().inspect_err(|_| {
        // No writer drains for a waiting thread.
        GRAPH_TRACER.set_lossless(false);
        RECORDER_RUNNING.store(false, Ordering::Release);
    })
}

fn start(
    tracer: &str,
    filter: &Filter,
    dir: &Path,
    options: &RecordOptions,
) -> Result<Recording, Error> {
    filter.min_duration_ns()?;
    let budget = memory_budget(options)?;
    control::init()?;
    GRAPH_TRACER.retain_buffered();
    match budget {
        Some((total, buffer)) => {
            // Each buffer reserves the whole budget's address space (see
            // `rt::ring::budget`).
            GRAPH_TRACER.set_buffer_events(total);
            GRAPH_TRACER.set_memory_budget(total, buffer);
        }
        None => {
            GRAPH_TRACER.set_buffer_events(options.buffer_events);
            // Drop mode, or a budget of one buffer: no budget, buffers
            // made from now on are of `buffer_events`, on ordinary pages.
            GRAPH_TRACER.set_memory_budget(0, 0);
        }
    }
    GRAPH_TRACER.keep_buffers_ready(options.ready_buffers);
    let start_ns = now_ns();
    let stream = if options.append {
        UftraceStream::join(dir, describe_process(false), start_ns)?
    } else {
        UftraceStream::create(dir, describe_process(false), start_ns)?
    };
    follow_forks();
    // Before anything is traced (the writer turns it on as well, but its
    // thread may start after the first events): a thread's first ring is
    // then lossless from its first event.
    GRAPH_TRACER.set_lossless(options.mode == RecordMode::Lossless);
    let interval = options.drain_interval.max(Duration::from_micros(100));
    let writer = start_writer(tracer, dir, interval, options.mode, Ok(stream))?;
    install(&mut writer_slot(), writer);
    let recording = Recording {
        dir: dir.to_path_buf(),
        started: Instant::now(),
        stopped: false,
        room_at_start: GRAPH_TRACER.room_stats(),
    };
    // Enabled last: nothing is traced before the writer runs. On error the
    // recording is stopped by its drop (the directory stays, empty).
    control::enable_with(tracer, filter)?;
    Ok(recording)
}

/// In lossless mode with a budget beyond one buffer, the memory budget and
/// the buffer in events, `(total, buffer)` (the buffer rounded up to a
/// power of two, as the rings are); `None` in drop mode or with no more
/// than a buffer; an error if the budget is smaller than one buffer.
fn memory_budget(options: &RecordOptions) -> Result<Option<(usize, usize)>, Error> {
    if options.mode != RecordMode::Lossless || options.memory_bytes == 0 {
        return Ok(None);
    }
    let buffer = options.buffer_events.clamp(16, 1 << 40).next_power_of_two();
    let total = options.memory_bytes / RECORD_EVENT_BYTES;
    if total < buffer {
        return Err(Error::Recording(memory_below_buffer(
            options.memory_bytes as u64,
            (buffer * RECORD_EVENT_BYTES) as u64,
        )));
    }
    if total < buffer + buffer / 2 {
        // No chunk (half a buffer) fits beyond one buffer (`--memory`
        // equal to `--buffer`): lossless buffers as before the budget
        // existed, each of one buffer, asking the writer at half and
        // waiting only when full. (A budget ring asks at three quarters:
        // on ripgrep it waited 103-105 times where these wait 3-7.)
        return Ok(None);
    }
    Ok(Some((total, buffer)))
}

/// The error of a memory budget (`--memory`) smaller than a buffer.
pub(crate) fn memory_below_buffer(memory: u64, buffer: u64) -> String {
    format!(
        "the memory budget ({memory} bytes, --memory/FNTRACE_MEMORY) is smaller than one \
         thread's buffer ({buffer} bytes, --buffer/FNTRACE_BUFFER, rounded up to a power of \
         two): each thread needs a buffer; raise --memory or lower --buffer"
    )
}

/// Starts a writer thread streaming into `dir`: into `stream`, or, given a
/// session start time instead, into a session of that start that joins
/// `dir` when the first events arrive (a forked child that execs or exits
/// at once adds nothing).
fn start_writer(
    tracer: &str,
    dir: &Path,
    interval: Duration,
    mode: RecordMode,
    stream: Result<UftraceStream, (u64, Option<u32>)>,
) -> Result<Writer, Error> {
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        lossless: mode == RecordMode::Lossless,
        drains: AtomicU64::new(0),
        written: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        writer_cpu_ns: AtomicU64::new(0),
    });
    // Before the thread: a forked child killed at once is in the ledger.
    ledger::started(dir, stream.is_ok());
    let handle = {
        let shared = Arc::clone(&shared);
        let dir = dir.to_path_buf();
        spawn_running("fntrace-writer", move || {
            let result = write_until_stopped(stream, &dir, &shared, interval);
            exit::writer_finished();
            result
        })
        .map_err(|source| Error::Io {
            what: "starting the recording's writer thread".to_string(),
            source,
        })?
    };
    use std::os::unix::thread::JoinHandleExt as _;
    exit::writer_spawned(handle.as_pthread_t());
    Ok(Writer {
        shared,
        handle,
        tracer: tracer.to_string(),
        dir: dir.to_path_buf(),
        interval,
        mode,
    })
}

fn now_ns() -> u64 {
    clock::ticks_to_ns(clock::now_ticks())
}

/// Installs (once) the fork handlers that give a forked child its own
/// writer.
fn follow_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering fork handlers has no preconditions; the
        // handlers take and release `WRITER` only.
        unsafe {
            libc::pthread_atfork(
                Some(writer_before_fork),
                Some(writer_after_fork_in_parent),
                Some(writer_after_fork_in_child),
            );
        }
    });
}

/// Held by a writer while it writes the directory, and by a forking thread
/// across the fork: the shared session files are rebuilt under a `flock`,
/// which a child inherits with the open file, so a child forked while its
/// parent's writer held it would wait for it forever.
static DIRECTORY_WRITE: Mutex<()> = Mutex::new(());

fn directory_write() -> std::sync::MutexGuard<'static, ()> {
    DIRECTORY_WRITE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

thread_local! {
    /// `WRITER` and `DIRECTORY_WRITE`, held by the forking thread across
    /// the fork.
    static WRITER_HELD_ACROSS_FORK: std::cell::RefCell<Option<std::sync::MutexGuard<'static, Option<Writer>>>> =
        const { std::cell::RefCell::new(None) };
    static DIRECTORY_HELD_ACROSS_FORK: std::cell::RefCell<Option<std::sync::MutexGuard<'static, ()>>> =
        const { std::cell::RefCell::new(None) };
}

extern "C" fn writer_before_fork() {
    let guard = writer_slot();
    WRITER_HELD_ACROSS_FORK.with(|held| *held.borrow_mut() = Some(guard));
    let guard = directory_write();
    DIRECTORY_HELD_ACROSS_FORK.with(|held| *held.borrow_mut() = Some(guard));
}

extern "C" fn writer_after_fork_in_parent() {
    DIRECTORY_HELD_ACROSS_FORK.with(|held| drop(held.borrow_mut().take()));
    WRITER_HELD_ACROSS_FORK.with(|held| drop(held.borrow_mut().take()));
}

/// In the child: the parent's writer thread is not here. Its handle is
/// forgotten (joining or detaching a thread of another process is
/// undefined), and a writer of the child's own takes over the recording.
extern "C" fn writer_after_fork_in_child() {
    DIRECTORY_HELD_ACROSS_FORK.with(|held| drop(held.borrow_mut().take()));
    WRITER_HELD_ACROSS_FORK.with(|held| {
        let Some(mut slot) = held.borrow_mut().take() else {
            return;
        };
        let Some(parent) = uninstall(&mut slot) else {
            return;
        };
        let (tracer, dir, interval, mode) = (
            parent.tracer.clone(),
            parent.dir.clone(),
            parent.interval,
            parent.mode,
        );
        std::mem::forget(parent.handle);
        // SAFETY: getppid has no preconditions.
        let parent_pid = unsafe { libc::getppid() } as u32;
        let session = Err((now_ns(), Some(parent_pid)));
        match start_writer(&tracer, &dir, interval, mode, session) {
            Ok(writer) => install(&mut slot, writer),
            Err(err) => eprintln!(
                "fntrace: the forked child {} is not recorded: {err}",
                std::process::id()
            ),
        }
    });
}

/// Before this process execs: drains what the buffers hold and finishes its
/// session of the recording, so that the new program (which joins the
/// directory, `FNTRACE_APPEND=1`) continues it. The tracer stays enabled
/// (if the exec fails, [`resume_after_failed_exec`] starts a writer again).
/// Returns whether a recording was running.
pub(crate) fn finish_before_exec() -> bool {
    let _untraced = Untraced::begin();
    if !writing_in_this_process() {
        return false;
    }
    let Some(writer) = uninstall(&mut writer_slot()) else {
        return false;
    };
    let resume = ExecResume {
        tracer: writer.tracer.clone(),
        dir: writer.dir.clone(),
        interval: writer.interval,
        mode: writer.mode,
    };
    if let Err(err) = stop_writer(writer) {
        eprintln!("fntrace: finishing the recording before exec: {err}");
    }
    *EXEC_RESUME.lock().unwrap_or_else(PoisonError::into_inner) = Some(resume);
    true
}

/// What `finish_before_exec` stopped, for a failed exec.
static EXEC_RESUME: Mutex<Option<ExecResume>> = Mutex::new(None);

/// A writer's settings, kept across a failed exec.
struct ExecResume {
    tracer: String,
    dir: PathBuf,
    interval: Duration,
    mode: RecordMode,
}

/// After an exec that failed (this program goes on): a writer again, as a
/// new session of the same directory.
pub(crate) fn resume_after_failed_exec() {
    let _untraced = Untraced::begin();
    let Some(resume) = EXEC_RESUME
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    else {
        return;
    };
    let session = Err((now_ns(), None));
    match start_writer(
        &resume.tracer,
        &resume.dir,
        resume.interval,
        resume.mode,
        session,
    ) {
        Ok(writer) => install(&mut writer_slot(), writer),
        Err(err) => eprintln!("fntrace: the recording stopped after a failed exec: {err}"),
    }
}

/// Tells `writer` to drain once more and finish, and waits for it.
fn stop_writer(writer: Writer) -> Result<StreamTotals, Error> {
    writer.shared.stop.store(true, Ordering::Release);
    GRAPH_TRACER.wake_reader();
    writer.handle.join().unwrap_or_else(|_| {
        Err(Error::Recording(
            "the writer thread panicked (a bug)".to_string(),
        ))
    })
}

/// Switches off the tracer a recorder enabled, as its stop's first step
/// (the writer then drains what the buffers still hold).
pub(crate) fn disable_recorded(tracer: &str) -> Result<(), Error> {
    match tracer::find(tracer) {
        Some(_) => control::disable(tracer),
        None => Ok(()),
    }
}

impl Recording {
    /// The directory being written.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Drains this process's writer has completed so far: each wrote what
    /// every thread's buffer held when it began, and freed for reuse the
    /// buffers of threads that had exited.
    pub fn drains(&self) -> u64 {
        writer_slot()
            .as_ref()
            .map_or(0, |writer| writer.shared.drains.load(Ordering::Acquire))
    }

    /// Events written so far, and lost so far, as of the last drain (see
    /// [`RecordReport`]).
    pub fn written_and_lost(&self) -> (u64, u64) {
        writer_slot().as_ref().map_or((0, 0), |writer| {
            let written = writer.shared.written.load(Ordering::Relaxed);
            (written, writer.shared.lost.load(Ordering::Relaxed))
        })
    }

    /// Stops the recording: disables the tracer, drains what the buffers
    /// still hold, and finishes the directory. Calls still running stay
    /// open in it (entries without exits), as in uftrace's recordings. In
    /// the child of a `fork`, stops the child's part of the recording.
    pub fn stop(mut self) -> Result<RecordReport, Error> {
        self.finish()
    }

    fn finish(&mut self) -> Result<RecordReport, Error> {
        let _untraced = Untraced::begin();
        if std::mem::replace(&mut self.stopped, true) {
            return Err(Error::Recording("stopped already".to_string()));
        }
        let Some(writer) = uninstall(&mut writer_slot()) else {
            return Err(Error::Recording(
                "this process's recording ended already (finished at _exit or exec)".to_string(),
            ));
        };
        let disabled = disable_recorded(&writer.tracer);
        let lossless = writer.mode == RecordMode::Lossless;
        let shared = Arc::clone(&writer.shared);
        let written = stop_writer(writer);
        let room = GRAPH_TRACER.room_stats();
        GRAPH_TRACER.keep_buffers_ready(0);
        GRAPH_TRACER.release_memory();
        RECORDER_RUNNING.store(false, Ordering::Release);
        let totals = written?;
        disabled?;
        Ok(RecordReport {
            dir: self.dir.clone(),
            events: totals.events,
            lost: totals.lost + totals.left_out,
            closed_at_gaps: totals.closed_at_gaps,
            threads: totals.threads,
            bytes: totals.bytes,
            duration: self.started.elapsed(),
            mode: if lossless {
                RecordMode::Lossless
            } else {
                RecordMode::Drop
            },
            waits: room.waits - self.room_at_start.waits,
            wait_time: Duration::from_nanos(room.wait_ns - self.room_at_start.wait_ns),
            memory_peak: if lossless {
                room.memory_peak_events * RECORD_EVENT_BYTES as u64
            } else {
                0
            },
            writer_cpu: Duration::from_nanos(shared.writer_cpu_ns.load(Ordering::Relaxed)),
        })
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--memory` equal to `--buffer` (or short of a chunk beyond it) is no
    /// budget: the buffers are of `--buffer` and behave as before the
    /// budget existed (asked at half, waiting only when full); with more,
    /// the budget is set.
    #[test]
    fn a_budget_of_one_buffer_is_none() {
        let options = |buffer_events: usize, memory_bytes: usize| RecordOptions {
            buffer_events,
            memory_bytes,
            ..RecordOptions::default()
        };
        let event = RECORD_EVENT_BYTES;
        assert_eq!(memory_budget(&options(4096, 4096 * event)).unwrap(), None);
        assert_eq!(memory_budget(&options(4000, 4096 * event)).unwrap(), None);
        assert_eq!(
            memory_budget(&options(4096, 6143 * event)).unwrap(),
            None,
            "no half buffer beyond the buffer"
        );
        assert_eq!(
            memory_budget(&options(4096, 6144 * event)).unwrap(),
            Some((6144, 4096))
        );
        assert_eq!(
            memory_budget(&options(4096, 64 << 20)).unwrap(),
            Some(((64 << 20) / event, 4096))
        );
        assert!(memory_budget(&options(4096, 4095 * event)).is_err());
        let drop = RecordOptions {
            mode: RecordMode::Drop,
            ..options(4096, 64 << 20)
        };
        assert_eq!(memory_budget(&drop).unwrap(), None);
    }
}
