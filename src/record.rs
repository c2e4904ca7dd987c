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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fntrace_tools::export::{StreamTotals, UftraceStream};

use crate::control;
use crate::error::Error;
use crate::filter::Filter;
use crate::rt::thread::Untraced;
use crate::sys::clock;
use crate::tracer;
use crate::tracers::graph::{describe_process, GRAPH_TRACER};

/// How often the writer drains the buffers by default.
pub const DEFAULT_DRAIN_INTERVAL: Duration = Duration::from_millis(10);

/// Whether a recording runs, streaming or flight (one at a time: they share
/// the graph tracer's buffers).
pub(crate) static RECORDING: AtomicBool = AtomicBool::new(false);

/// A running recording; see [`record`]. Dropping it stops it as
/// [`Recording::stop`] does, ignoring errors.
pub struct Recording {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<Result<StreamTotals, Error>>>,
    tracer: String,
    dir: PathBuf,
    started: Instant,
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
    /// Threads with events.
    pub threads: usize,
    /// Bytes of records written.
    pub bytes: u64,
    /// How long the recording ran.
    pub duration: Duration,
}

/// Tells the writer when to stop; counts its drains and what they wrote.
struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
    drains: AtomicU64,
    written: AtomicU64,
    lost: AtomicU64,
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
}

/// Events per thread buffer while recording, by default: 262,144 (4 MiB),
/// 320 ms of a thread making 400k traced calls a second.
pub const DEFAULT_RECORD_BUFFER_EVENTS: usize = 1 << 18;

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            drain_interval: DEFAULT_DRAIN_INTERVAL,
            buffer_events: DEFAULT_RECORD_BUFFER_EVENTS,
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
    let _untraced = Untraced::begin();
    if tracer != "graph" {
        return Err(Error::Recording(format!(
            "only the \"graph\" tracer can be recorded, not {tracer:?}"
        )));
    }
    if RECORDING.swap(true, Ordering::AcqRel) {
        return Err(Error::Recording(
            "a recording is running already (stop it first)".to_string(),
        ));
    }
    match start(tracer, filter, dir.as_ref(), options) {
        Ok(recording) => Ok(recording),
        Err(err) => {
            RECORDING.store(false, Ordering::Release);
            Err(err)
        }
    }
}

fn start(
    tracer: &str,
    filter: &Filter,
    dir: &Path,
    options: &RecordOptions,
) -> Result<Recording, Error> {
    filter.min_duration_ns()?;
    control::init()?;
    GRAPH_TRACER.retain_buffered();
    GRAPH_TRACER.set_buffer_events(options.buffer_events);
    let start_ns = clock::ticks_to_ns(clock::now_ticks());
    let stream = UftraceStream::create(dir, describe_process(), start_ns)?;
    let shared = Arc::new(Shared {
        stop: Mutex::new(false),
        wake: Condvar::new(),
        drains: AtomicU64::new(0),
        written: AtomicU64::new(0),
        lost: AtomicU64::new(0),
    });
    let interval = options.drain_interval.max(Duration::from_micros(100));
    let writer = {
        let shared = Arc::clone(&shared);
        spawn_running("fntrace-writer", move || {
            write_until_stopped(stream, &shared, interval)
        })
        .map_err(|source| Error::Io {
            what: "starting the recording's writer thread".to_string(),
            source,
        })?
    };
    let recording = Recording {
        shared,
        writer: Some(writer),
        tracer: tracer.to_string(),
        dir: dir.to_path_buf(),
        started: Instant::now(),
    };
    // Enabled last: nothing is traced before the writer runs. On error the
    // recording is stopped by its drop (the directory stays, empty).
    control::enable_with(tracer, filter)?;
    Ok(recording)
}

/// Spawns a thread named `name` running `f`, and returns once it runs:
/// a thread being created has every signal blocked (glibc unblocks them
/// just before `f`), and the breakpoint patch protocol avoids patching
/// while any thread blocks SIGTRAP, so enabling right after a spawn would
/// fall back to stopping the world.
pub(crate) fn spawn_running<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    let started = Arc::new(std::sync::Barrier::new(2));
    let handle = {
        let started = Arc::clone(&started);
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                started.wait();
                f()
            })?
    };
    started.wait();
    Ok(handle)
}

/// Switches off the tracer a recorder enabled, as its stop's first step
/// (the writer then drains what the buffers still hold).
pub(crate) fn disable_recorded(tracer: &str) -> Result<(), Error> {
    match tracer::find(tracer) {
        Some(_) => control::disable(tracer),
        None => Ok(()),
    }
}

/// The writer thread: drains, writes, sleeps, until told to stop; then
/// drains once more.
fn write_until_stopped(
    mut stream: UftraceStream,
    shared: &Shared,
    interval: Duration,
) -> Result<StreamTotals, Error> {
    // Nothing this thread calls is traced (its own events would feed the
    // stream it writes).
    let _untraced = Untraced::begin();
    let mut failure: Option<Error> = None;
    let mut discarded = 0u64;
    loop {
        let stop = {
            let stopped = shared.stop.lock().unwrap_or_else(PoisonError::into_inner);
            let (stopped, _) = shared
                .wake
                .wait_timeout_while(stopped, interval, |stop| !*stop)
                .unwrap_or_else(PoisonError::into_inner);
            *stopped
        };
        GRAPH_TRACER.stream_events(&mut |batch| {
            let count = batch.events.len() as u64 + batch.dropped_after;
            if failure.is_some() {
                // The directory cannot be written: keep draining, so the
                // traced threads keep their fast path, and count.
                discarded += count;
                return;
            }
            let appended = stream.append(
                batch.tid,
                Some(batch.name),
                batch.events,
                batch.dropped_after,
            );
            if let Err(err) = appended {
                discarded += count;
                failure = Some(err.into());
            }
        });
        if failure.is_none() {
            if let Err(err) = stream.flush() {
                failure = Some(err.into());
            }
        }
        let totals = stream.totals();
        shared.written.store(totals.events, Ordering::Relaxed);
        shared
            .lost
            .store(totals.lost + totals.left_out, Ordering::Relaxed);
        shared.drains.fetch_add(1, Ordering::Release);
        if stop {
            break;
        }
    }
    if let Some(err) = failure {
        return Err(Error::Recording(format!(
            "writing {} failed, {discarded} events were not written: {err}",
            stream.dir().display()
        )));
    }
    Ok(stream.finish()?)
}

impl Recording {
    /// The directory being written.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Drains the writer has completed so far: each wrote what every
    /// thread's buffer held when it began, and freed for reuse the buffers
    /// of threads that had exited.
    pub fn drains(&self) -> u64 {
        self.shared.drains.load(Ordering::Acquire)
    }

    /// Events written so far, and lost so far, as of the last drain (see
    /// [`RecordReport`]).
    pub fn written_and_lost(&self) -> (u64, u64) {
        let written = self.shared.written.load(Ordering::Relaxed);
        (written, self.shared.lost.load(Ordering::Relaxed))
    }

    /// Stops the recording: disables the tracer, drains what the buffers
    /// still hold, and finishes the directory. Calls still running stay
    /// open in it (entries without exits), as in uftrace's recordings.
    pub fn stop(mut self) -> Result<RecordReport, Error> {
        self.finish()
    }

    fn finish(&mut self) -> Result<RecordReport, Error> {
        let _untraced = Untraced::begin();
        let Some(writer) = self.writer.take() else {
            return Err(Error::Recording("stopped already".to_string()));
        };
        let disabled = disable_recorded(&self.tracer);
        *self
            .shared
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
        let written = writer.join().unwrap_or_else(|_| {
            Err(Error::Recording(
                "the writer thread panicked (a bug)".to_string(),
            ))
        });
        GRAPH_TRACER.release_memory();
        RECORDING.store(false, Ordering::Release);
        let totals = written?;
        disabled?;
        Ok(RecordReport {
            dir: self.dir.clone(),
            events: totals.events,
            lost: totals.lost + totals.left_out,
            threads: totals.threads,
            bytes: totals.bytes,
            duration: self.started.elapsed(),
        })
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if self.writer.is_some() {
            let _ = self.finish();
        }
    }
}
