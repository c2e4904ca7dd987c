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
mod options;
mod process;
pub use options::{
    RecordMode, RecordOptions, RecordReport, DEFAULT_RECORD_BUFFER_EVENTS,
    DEFAULT_RECORD_MEMORY_BYTES, RECORD_EVENT_BYTES,
};
use process::{directory_write, follow_forks};
pub(crate) use process::{finish_before_exec, resume_after_failed_exec};
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
    /// Events written without their values before this recording.
    values_left_out_at_start: u64,
}

/// This process's writer thread, while a recording runs. Per process: in
/// the child of a `fork`, the fork handler replaces the parent's (a thread
/// the child does not have) with one of the child's own.
struct Writer {
    shared: Arc<WriterShared>,
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

/// Tells the writer when to stop; counts its drains and what they wrote.
struct WriterShared {
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
    // Before the stream's header, which names the specs.
    control::set_filter_specs(filter)?;
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
        values_left_out_at_start: GRAPH_TRACER.values_left_out(),
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
    let shared = Arc::new(WriterShared {
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
            values_lost: GRAPH_TRACER.values_left_out() - self.values_left_out_at_start,
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
