//! Environment control: with fntrace linked, the program is traced with no
//! code change. A constructor (`.init_array`, run before `main`) reads
//!
//! - `FNTRACE`: a comma list of tracers to enable (`graph`, `function`, or
//!   registered names);
//! - `FNTRACE_FILTER`: globs as for `fntrace_set_filter` (`handle_*,!log_*`);
//! - `FNTRACE_DEPTH`: the deepest call recorded (0: the outermost traced
//!   calls);
//! - `FNTRACE_OUTPUT`: a directory to stream to with the recorder (graph
//!   tracer), finished at exit;
//! - `FNTRACE_REPORT=1`: the latency table on stderr at exit (graph tracer);
//! - `FNTRACE_FLIGHT=BYTES`: with `FNTRACE_OUTPUT`, run the flight
//!   recorder instead (the most recent BYTES of events) and write its
//!   snapshot to `FNTRACE_OUTPUT` at exit; this process only (the programs
//!   it runs are not recorded);
//! - `FNTRACE_APPEND=1`: add this process to the recording already in
//!   `FNTRACE_OUTPUT` as a new session (a program exec'd or spawned by a
//!   recorded one) instead of requiring an empty directory. A process that
//!   starts recording sets it, and `FNTRACE_OUTPUT` as an absolute path, in
//!   its own environment, so that the programs it runs join its recording;
//!
//! - `FNTRACE_MODE=lossless|drop`: with `FNTRACE_OUTPUT`, what a thread
//!   whose buffer is full does (see [`RecordMode`]; `lossless` by default);
//! - `FNTRACE_BUFFER=BYTES`: with `FNTRACE_OUTPUT`, each thread's buffer
//!   (16 bytes an event, rounded up to a power of two);
//!
//! and `FNTRACE_PATCH` and `FNTRACE_PATCH_PRIORITY` as always. The values
//! are checked before anything is enabled: an invalid one prints one line
//! naming the variable, and the program runs untraced. What runs at exit
//! (`atexit`, so `exit()` from anywhere) runs on a thread of its own: the
//! exiting thread's thread-locals are gone by then.

use std::panic::catch_unwind;

use crate::control;
use crate::filter::Filter;
use crate::tracer;
use crate::tracers::graph::GRAPH_TRACER;
use fntrace_tools::analysis::latency_of;
use fntrace_tools::export::UftraceReader;

use super::{parse_globs, register_builtins, start_recording_with, take_recording};
use crate::flight::{flight_record, FlightOptions, FlightRecorder};
use crate::record::{RecordMode, RecordOptions};

/// Rows of the latency table printed at exit.
pub(super) const REPORT_ROWS: usize = 50;

/// Run before `main` (after the tracer registrations, which have a
/// constructor priority).
#[used]
#[unsafe(link_section = ".init_array")]
pub(super) static START: extern "C" fn() = start;

/// What the environment asks for.
struct Settings {
    tracers: Vec<String>,
    filter: Filter,
    output: Option<String>,
    flight: Option<usize>,
    append: bool,
    report: bool,
    mode: RecordMode,
    /// Events per thread buffer (`FNTRACE_BUFFER`), if set.
    buffer_events: Option<usize>,
}

/// The flight recorder `FNTRACE_FLIGHT` started, and the process that
/// started it (a forked child has no writer thread to snapshot with).
static FLIGHT: std::sync::Mutex<Option<(u32, FlightRecorder, String)>> =
    std::sync::Mutex::new(None);

/// The settings `start` applied, for the exit handler.
static APPLIED: std::sync::Mutex<Option<(bool, bool)>> = std::sync::Mutex::new(None);

extern "C" fn start() {
    super::live::serve_from_env(); // FNTRACE_CONTROL, whatever the others say
    let outcome = catch_unwind(|| match settings() {
        Ok(Some(settings)) => apply(settings),
        Ok(None) => Ok(()),
        Err(message) => Err(message),
    });
    let message = match outcome {
        Ok(Ok(())) => return,
        Ok(Err(message)) => message,
        Err(_) => "start-up panicked (a bug)".to_string(),
    };
    eprintln!("fntrace: {message}; the program runs untraced");
}

/// The variable's value; `Err` if it is not UTF-8.
fn var(name: &str) -> Result<Option<String>, String> {
    match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(format!("{name}={}: not valid UTF-8", v.to_string_lossy()))
        }
    }
}

/// The settings, `None` when the environment asks for no tracing, or a
/// line naming the first invalid variable.
fn settings() -> Result<Option<Settings>, String> {
    let tracers: Vec<String> = var("FNTRACE")?
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let output = var("FNTRACE_OUTPUT")?.filter(|dir| !dir.is_empty());
    if tracers.is_empty() && output.is_none() {
        return Ok(None);
    }
    register_builtins();
    for name in &tracers {
        if tracer::find(name).is_none() {
            return Err(format!(
                "FNTRACE={}: no tracer named {name:?} is registered (registered: {})",
                var("FNTRACE")?.unwrap_or_default(),
                tracer::tracer_names().join(", ")
            ));
        }
    }
    let mut filter = match var("FNTRACE_FILTER")? {
        Some(globs) => parse_globs(&globs).map_err(|e| format!("FNTRACE_FILTER={globs}: {e}"))?,
        None => Filter::new(),
    };
    if let Some(depth) = var("FNTRACE_DEPTH")? {
        let n: u16 = depth.trim().parse().map_err(|_| {
            format!("FNTRACE_DEPTH={depth}: not a depth (a whole number from 0 to 65535)")
        })?;
        filter = filter.max_depth(n);
    }
    let report = match var("FNTRACE_REPORT")?.as_deref() {
        None | Some("" | "0") => false,
        Some("1") => true,
        Some(other) => return Err(format!("FNTRACE_REPORT={other}: use 1 (or 0)")),
    };
    let flight =
        match var("FNTRACE_FLIGHT")? {
            None => None,
            Some(bytes) => {
                let budget: usize = bytes.trim().parse().ok().filter(|&b| b >= 16).ok_or_else(|| {
                format!("FNTRACE_FLIGHT={bytes}: not a size in bytes (a whole number, at least 16)")
            })?;
                if output.is_none() {
                    return Err(format!(
                    "FNTRACE_FLIGHT={bytes} needs FNTRACE_OUTPUT (where the snapshot is written)"
                ));
                }
                Some(budget)
            }
        };
    let append = match var("FNTRACE_APPEND")?.as_deref() {
        None | Some("" | "0") => false,
        Some("1") => true,
        Some(other) => return Err(format!("FNTRACE_APPEND={other}: use 1 (or 0)")),
    };
    let mode = match var("FNTRACE_MODE")? {
        None => RecordMode::Lossless,
        Some(mode) => mode
            .trim()
            .parse()
            .map_err(|e| format!("FNTRACE_MODE={mode}: {e}"))?,
    };
    let buffer_events = match var("FNTRACE_BUFFER")? {
        None => None,
        Some(bytes) => {
            let events = bytes
                .trim()
                .parse::<u64>()
                .ok()
                .map(|b| b / crate::record::RECORD_EVENT_BYTES as u64)
                .filter(|&events| (16..=1 << 32).contains(&events))
                .ok_or_else(|| {
                    format!(
                        "FNTRACE_BUFFER={bytes}: not a buffer size in bytes \
                         (a whole number from 256 to 64 GiB)"
                    )
                })?;
            Some(events as usize)
        }
    };
    let graph = tracers.iter().any(|t| t == "graph");
    if report && !graph && output.is_none() {
        return Err(
            "FNTRACE_REPORT=1 needs the graph tracer: set FNTRACE=graph or FNTRACE_OUTPUT"
                .to_string(),
        );
    }
    Ok(Some(Settings {
        tracers,
        filter,
        output,
        flight,
        append,
        report,
        mode,
        buffer_events,
    }))
}

/// Enables what `settings` asks for, all or nothing, and registers the
/// exit handler.
fn apply(settings: Settings) -> Result<(), String> {
    let mut enabled: Vec<&str> = Vec::new();
    let result = (|| {
        if let (Some(dir), Some(budget_bytes)) = (&settings.output, settings.flight) {
            let options = FlightOptions {
                budget_bytes,
                ..FlightOptions::default()
            };
            let recorder = flight_record("graph", &settings.filter, options)
                .map_err(|e| format!("FNTRACE_FLIGHT: {e}"))?;
            *FLIGHT.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((std::process::id(), recorder, dir.clone()));
            // The programs this one runs are not recorded.
            for name in ["FNTRACE_OUTPUT", "FNTRACE_FLIGHT", "FNTRACE"] {
                std::env::remove_var(name);
            }
        } else if let Some(dir) = &settings.output {
            let defaults = RecordOptions::default();
            let options = RecordOptions {
                append: settings.append,
                mode: settings.mode,
                buffer_events: settings.buffer_events.unwrap_or(defaults.buffer_events),
                ..defaults
            };
            start_recording_with(dir, &settings.filter, &options)
                .map_err(|f| format!("FNTRACE_OUTPUT={dir}: {}", f.1))?;
            pass_recording_on(dir);
            super::fatal::drain_on_fatal_signals();
        }
        for name in &settings.tracers {
            if name == "graph" && settings.output.is_some() {
                continue; // the recording enabled it
            }
            control::enable_with(name, &settings.filter)
                .map_err(|e| format!("FNTRACE={name}: {e}"))?;
            enabled.push(name);
        }
        Ok(())
    })();
    if let Err(message) = result {
        for name in enabled {
            let _ = control::disable(name);
        }
        if let Some(recording) = take_recording() {
            let _ = recording.stop();
        }
        if let Some((_, recorder, _)) = FLIGHT.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = recorder.stop();
        }
        return Err(message);
    }
    *APPLIED.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((settings.output.is_some(), settings.report));
    // SAFETY: `finish` is an `extern "C" fn()` that lives as long as the
    // process, as atexit requires.
    if unsafe { libc::atexit(finish) } != 0 {
        eprintln!("fntrace: atexit failed: the trace is not finished at exit");
    }
    Ok(())
}

/// Sets up this process's environment so that the programs it runs (which
/// inherit it) add to its recording at `dir`: before `main`, so no other
/// thread reads the environment meanwhile.
fn pass_recording_on(dir: &str) {
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.into());
    std::env::set_var("FNTRACE_OUTPUT", absolute);
    std::env::set_var("FNTRACE_APPEND", "1");
}

/// Writes the flight recorder's snapshot to `dir` and stops it; the
/// directory, if written.
fn finish_flight(recorder: FlightRecorder, dir: &str) -> Option<std::path::PathBuf> {
    let written = match recorder.snapshot(dir) {
        Ok(snapshot) => {
            eprintln!(
                "fntrace: flight recorder: {} events over {:?} ({} lost, {} evicted) written to {dir}",
                snapshot.events,
                snapshot.window(),
                snapshot.lost,
                snapshot.evicted
            );
            Some(snapshot.dir)
        }
        Err(err) => {
            eprintln!("fntrace: FNTRACE_FLIGHT: writing the snapshot to {dir}: {err}");
            None
        }
    };
    if let Err(err) = recorder.stop() {
        eprintln!("fntrace: FNTRACE_FLIGHT: stopping: {err}");
    }
    written
}

/// At exit: finishes the recording, prints the report.
extern "C" fn finish() {
    // Started as the recorder's threads are: a thread being created has
    // every signal blocked, which would make a patch now fall back to
    // stopping the world.
    let finished =
        crate::record::spawn_running("fntrace-exit", || catch_unwind(finish_on_this_thread));
    match finished.map(|thread| thread.join()) {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(_)) | Err(_)) => eprintln!("fntrace: finishing at exit panicked (a bug)"),
        Err(err) => eprintln!("fntrace: finishing at exit: {err}"),
    }
}

fn finish_on_this_thread() {
    let Some((recorded, report)) = *APPLIED.lock().unwrap_or_else(|e| e.into_inner()) else {
        return;
    };
    let mut dir = None;
    let flight = FLIGHT.lock().unwrap_or_else(|e| e.into_inner()).take();
    match flight {
        Some((pid, recorder, output)) if pid == std::process::id() => {
            dir = finish_flight(recorder, &output);
        }
        // A forked child's copy: its writer thread is the parent's.
        Some((_, recorder, _)) => std::mem::forget(recorder),
        None => {}
    }
    if recorded && dir.is_none() {
        if let Some(recording) = take_recording() {
            match recording.stop() {
                Ok(done) => dir = Some(done.dir),
                Err(err) => eprintln!("fntrace: FNTRACE_OUTPUT: finishing the recording: {err}"),
            }
        }
    }
    if !report {
        return;
    }
    // Read in place, never collected whole: the directory record by
    // record, or the events where the graph tracer holds them.
    let latency = match dir {
        Some(dir) => match UftraceReader::open(&dir).and_then(|reader| latency_of(&reader)) {
            Ok(latency) => latency,
            Err(err) => {
                eprintln!("fntrace: FNTRACE_REPORT: reading {}: {err}", dir.display());
                return;
            }
        },
        None if recorded => return,
        None => {
            let _ = control::disable("graph");
            let recorded = GRAPH_TRACER.recorded();
            let latency = infallible(latency_of(&recorded));
            recorded.forget();
            latency
        }
    };
    let table = latency.table(REPORT_ROWS);
    eprint!("fntrace: latency (FNTRACE_REPORT=1)\n{table}");
}

/// The value of a computation over events in memory, which cannot fail.
fn infallible<T>(result: Result<T, std::convert::Infallible>) -> T {
    match result {
        Ok(value) => value,
        Err(never) => match never {},
    }
}
