//! The flight recorder without code change: the one recorder started by
//! `FNTRACE_FLIGHT` ([`crate::preload`]), `fntrace_flight_start` (C) or
//! `flight start` (the control socket), kept here with the directory its
//! snapshots go to; and its triggers, set by `FNTRACE_FLIGHT_TRIGGER`,
//! `fntrace_flight_trigger` or `flight trigger`, in one syntax
//! (`GLOB>DURATION`, `panic`, `SIGNAME`; see [`crate::vars`]).
//!
//! The directory is checked when the recorder starts, not when a snapshot
//! is written: a recorder whose snapshots could not be written does not
//! start. A recorder started here that still runs at exit is stopped then
//! (the snapshots its triggers have due are written); the one
//! `FNTRACE_FLIGHT` started without triggers also writes its window.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, PoisonError};

use crate::flight::{self, flight_record, FlightOptions, FlightRecorder, FlightReport};
use crate::rt::spawn::spawn_running;

use super::Failure;
use crate::vars::TriggerSpec;

/// The recorder started here.
pub(crate) struct Slot {
    /// The process that started it (a forked child has no writer thread).
    pub pid: u32,
    pub recorder: FlightRecorder,
    /// Where snapshots go: the directory written at exit
    /// (`snapshot_at_exit`), or the parent of the triggers' snapshots.
    pub dir: PathBuf,
    pub snapshot_at_exit: bool,
}

static SLOT: Mutex<Option<Slot>> = Mutex::new(None);

fn slot() -> std::sync::MutexGuard<'static, Option<Slot>> {
    SLOT.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a recorder started here runs.
pub(crate) struct Start<'a> {
    pub dir: &'a Path,
    pub budget_bytes: usize,
    pub snapshots_per_minute: Option<u32>,
    /// Write the window into `dir` at exit (`dir` must then be empty).
    pub snapshot_at_exit: bool,
    pub filter: &'a crate::filter::Filter,
}

/// Checks (and makes) the snapshot directory: for an exit snapshot, a new
/// or empty directory; for triggers' snapshots, a directory (made if
/// missing) this process may write into. Both are opened as every output
/// directory is (`fntrace_format::export`'s rules: no link followed
/// anywhere in the path, refused if someone else could plant or swap names
/// in it), so a refused directory is said at start, not at the first
/// snapshot.
fn check_dir(dir: &Path, snapshot_at_exit: bool) -> Result<(), String> {
    let shown = dir.display();
    if snapshot_at_exit {
        fntrace_format::export::prepare_output_dir(dir).map_err(|e| match e {
            fntrace_format::export::ExportError::DirectoryNotEmpty(_) => format!(
                "{shown} exists and is not an empty directory: the snapshot at exit could \
                 not be written there"
            ),
            e => e.to_string(),
        })?;
    } else {
        fntrace_format::export::OutputDir::open_or_make(dir).map_err(|e| e.to_string())?;
    }
    let c_path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{shown}: holds a NUL byte"))?;
    // SAFETY: `c_path` is a valid NUL-terminated path; access only reads it.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(format!(
            "{shown}: not writable ({})",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Starts the recorder (one at a time). The error is one line.
pub(crate) fn start(start: &Start) -> Result<(), Failure> {
    let mut slot = slot();
    if slot.is_some() || flight::flight_recorder_running() {
        return Err(Failure(
            libc::EBUSY,
            "a flight recorder runs already (flight stop ends it)".to_string(),
        ));
    }
    check_dir(start.dir, start.snapshot_at_exit).map_err(|e| Failure(libc::EINVAL, e))?;
    let mut options = FlightOptions {
        budget_bytes: start.budget_bytes,
        ..FlightOptions::default()
    };
    if let Some(rate) = start.snapshots_per_minute {
        options.snapshots_per_minute = rate;
    }
    let recorder = flight_record("graph", start.filter, options)?;
    let dir = std::path::absolute(start.dir).unwrap_or_else(|_| start.dir.to_path_buf());
    *slot = Some(Slot {
        pid: std::process::id(),
        recorder,
        dir,
        snapshot_at_exit: start.snapshot_at_exit,
    });
    drop(slot);
    stop_at_exit();
    let stats = crate::control::stats();
    if stats.sites == 0 {
        eprintln!(
            "fntrace: flight recorder: this process has no instrumented function (built \
             without -pg, -pg -mfentry or -Zinstrument-mcount?): its snapshots will be empty"
        );
    }
    Ok(())
}

/// Adds a trigger to the running recorder; its snapshots go under the
/// directory of the recorder started here.
pub(crate) fn add_trigger(spec: &TriggerSpec) -> Result<(), Failure> {
    let Some(running) = flight::running() else {
        return Err(not_running());
    };
    let Some(dir) = slot().as_ref().map(|s| s.dir.clone()) else {
        return Err(Failure(
            libc::EINVAL,
            "the program's own flight recorder (fntrace::flight_record) has no snapshot \
             directory: set its triggers in the program"
                .to_string(),
        ));
    };
    match spec {
        TriggerSpec::Slow(glob, threshold, threads) => {
            running.trigger_on_slow_call(glob, *threshold, &dir, *threads)?
        }
        TriggerSpec::Panic => running.snapshot_on_panic(&dir),
        TriggerSpec::Signal(signo) => running.snapshot_on_signal(*signo, &dir)?,
    }
    Ok(())
}

/// The running recorder's triggers (`handle_*>5ms`, `panic`, `SIGUSR1`).
pub(crate) fn triggers() -> Result<Vec<String>, Failure> {
    let running = flight::running().ok_or_else(not_running)?;
    Ok(running.triggers().into_iter().map(|(t, _)| t).collect())
}

/// Removes the triggers `which` names (all if `None`); how many.
pub(crate) fn remove_triggers(which: Option<&str>) -> Result<usize, Failure> {
    let running = flight::running().ok_or_else(not_running)?;
    Ok(running.remove_triggers(which))
}

/// Trigger snapshots written and triggers skipped, and the snapshot
/// directory, of the running recorder.
pub(crate) fn status() -> Option<(usize, u64, Option<PathBuf>)> {
    let running = flight::running()?;
    let (written, skipped) = running.trigger_counts();
    Some((written, skipped, slot().as_ref().map(|s| s.dir.clone())))
}

/// Stops the recorder started here (its due trigger snapshots are
/// written; no exit snapshot).
pub(crate) fn stop() -> Result<FlightReport, Failure> {
    let Some(slot) = slot().take() else {
        return Err(match flight::flight_recorder_running() {
            true => Failure(
                libc::EBUSY,
                "the flight recorder running was started by the program \
                 (fntrace::flight_record): it stops it"
                    .to_string(),
            ),
            false => not_running(),
        });
    };
    Ok(slot.recorder.stop()?)
}

/// The recorder started here, taken out (for the exit handler).
pub(crate) fn take() -> Option<Slot> {
    slot().take()
}

fn not_running() -> Failure {
    Failure(
        libc::ESRCH,
        "no flight recorder is running: start one with FNTRACE_FLIGHT=64M (and \
         FNTRACE_OUTPUT), `flight start DIR` or fntrace_flight_start"
            .to_string(),
    )
}

/// Registers, once, the exit handler that finishes the recorder started
/// here.
fn stop_at_exit() {
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: `finish_at_exit` is an `extern "C" fn()` that lives as
        // long as the process, as atexit requires.
        if unsafe { libc::atexit(finish_at_exit) } != 0 {
            eprintln!("fntrace: atexit failed: the flight recorder is not finished at exit");
        }
    });
}

/// At exit, on a thread of its own (the exiting thread's thread-locals
/// are gone): the exit snapshot if asked for, then stop.
extern "C" fn finish_at_exit() {
    // Its calls (`pthread_create`, `pthread_join`) are fntrace's.
    let _untraced = crate::rt::thread::Untraced::begin();
    let finished = spawn_running("fntrace-exit", || {
        if let Some(slot) = take() {
            finish(slot);
        }
    })
    .map(|thread| thread.join());
    if !matches!(finished, Ok(Ok(()))) {
        eprintln!("fntrace: the flight recorder could not be finished at exit");
    }
}

/// Writes the exit snapshot (if asked for) and stops; the snapshot's
/// directory, if written.
pub(crate) fn finish(slot: Slot) -> Option<PathBuf> {
    if slot.pid != std::process::id() {
        // A forked child's copy: its writer thread is the parent's.
        std::mem::forget(slot.recorder);
        return None;
    }
    let dir = slot.dir.display().to_string();
    let mut written = None;
    let mut window_lost = None;
    if slot.snapshot_at_exit {
        match slot.recorder.snapshot(&slot.dir) {
            Ok(snapshot) => {
                eprintln!(
                    "fntrace: flight recorder: {} events over {:?} ({} lost, {} evicted) \
                     written to {dir}",
                    snapshot.events,
                    snapshot.window(),
                    snapshot.lost,
                    snapshot.evicted
                );
                window_lost = Some(snapshot.lost);
                written = Some(snapshot.dir);
            }
            Err(err) => eprintln!("fntrace: flight recorder: writing the snapshot to {dir}: {err}"),
        }
    }
    match slot.recorder.stop() {
        Ok(report) => say_report(&report, &dir, slot.snapshot_at_exit, window_lost),
        Err(err) => eprintln!("fntrace: flight recorder: stopping: {err}"),
    }
    written
}

/// What the recorder did over its life, said where it ends: the trigger
/// snapshots written, failed and skipped, and the events its buffers
/// dropped (`window_lost` of them in the exit snapshot, if written).
fn say_report(report: &FlightReport, dir: &str, at_exit: bool, window_lost: Option<u64>) {
    let snapshots = report.triggered.iter().filter(|t| t.result.is_ok()).count();
    let failed = report.triggered.len() - snapshots;
    if !at_exit || report.skipped_triggers > 0 || failed > 0 {
        let failures = match failed {
            0 => String::new(),
            _ => format!(
                "; {failed} could NOT be written, {} more skipped while waiting after a failed \
                 write",
                report.skipped_after_failure
            ),
        };
        eprintln!(
            "fntrace: flight recorder: {snapshots} trigger snapshot(s) in {dir}, {} trigger(s) \
             skipped (over the rate limit){failures}",
            report.skipped_triggers
        );
    }
    if report.futures_untracked > 0 {
        eprintln!(
            "fntrace: flight recorder: {} futures UNTRACKED (first polled while the runtime \
             future linker's table of {} was full): no trigger on a whole future saw them",
            report.futures_untracked,
            crate::builtin::futures::capacity()
        );
    }
    for failed in report
        .triggered
        .iter()
        .filter_map(|t| t.result.as_ref().err())
    {
        eprintln!("fntrace: flight recorder: a trigger's snapshot failed: {failed}");
    }
    if report.lost > 0 {
        let in_window = match window_lost {
            Some(lost) => format!("{lost} of them in the snapshot written at exit"),
            None => "each snapshot says those in its window".to_string(),
        };
        eprintln!(
            "fntrace: flight recorder: {} of {} events LOST over the run (the threads' buffers \
             were full: the writer fell behind); {in_window}, a lost record marking each gap",
            report.lost,
            report.lost + report.events
        );
    }
}
