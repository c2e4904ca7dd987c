//! Live control: what the control socket's commands do (the rest of
//! `socket` carries them; see it for the protocol), over the C ABI's process-wide
//! state: `filter` is `fntrace_set_filter`, `record`/`stop` are
//! `fntrace_record_start`/`fntrace_record_stop` and share their recording,
//! `enable` uses the filter as `fntrace_enable` does; unlike the C ABI's,
//! these selections are checked first ([`selection`]: a glob matching no
//! function is refused with the closest names). A recording `record`
//! started and no `stop` ended is finished at exit.
//!
//! Started by [`serve_control`] or by the environment:
//! `FNTRACE_CONTROL=PATH` serves PATH (an absolute path), `FNTRACE_CONTROL=1`
//! the default path `/tmp/fntrace-UID/PID.sock` (what `fntrace ctl PID`
//! looks for); unset, empty or `0`: no socket; anything else (`yes`, a
//! relative path) is refused. An invalid value prints one line naming the
//! variable, and the program runs on without live control.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Once, OnceLock};

use crate::builtin::graph::GRAPH_TRACER;
use crate::builtin::profile::{OpenCall, PROFILE_TRACER};
use crate::control;
use crate::error::Error;
use crate::flight;
use crate::record::RECORDER_RUNNING;
use crate::rt::spawn::spawn_running;
use crate::socket::{
    self, ControlOptions, ControlServer, FlightRequest, MetricsOptions, MetricsServer, Reply,
    Request,
};
use crate::socket::{arg_specs, selection};
use crate::tracer;
use fntrace_format::analysis::ProfileSnapshot;

use crate::session::flight as slot;
use crate::session::{
    current_filter, current_globs, register_builtins, start_recording, take_recording,
    with_recording,
};
use crate::vars::{self, REPORT_ROWS};

/// The server `FNTRACE_CONTROL` started, kept for the process's life (its
/// socket file is removed at exit).
static FROM_ENV: OnceLock<ControlServer> = OnceLock::new();

/// Serves live control at the Unix socket `path` (mode 0600; only this
/// process's user and root may use it) on a thread of its own, until the
/// returned server is stopped or dropped; the socket file is removed then,
/// or at exit. `fntrace ctl PATH COMMAND` drives it (see the README's
/// "Live control"); [`default_control_path`](crate::default_control_path)
/// is what `fntrace ctl PID` looks for, and its directory
/// (`/tmp/fntrace-UID`) is made here, mode 0700.
///
/// A socket file left at `path` by a process that died is replaced; a path
/// served by a running process, or that is not a socket, is refused.
///
/// ```no_run
/// let server = fntrace::serve_control(fntrace::default_control_path())?;
/// // ... `fntrace ctl <pid> record /tmp/trace`, `fntrace ctl <pid> stop` ...
/// server.stop();
/// # Ok::<(), fntrace::Error>(())
/// ```
pub fn serve_control(path: impl AsRef<Path>) -> Result<ControlServer, Error> {
    serve_control_with(path, &ControlOptions::default())
}

/// [`serve_control`] with options (how many clients at once, how long
/// each may take).
pub fn serve_control_with(
    path: impl AsRef<Path>,
    options: &ControlOptions,
) -> Result<ControlServer, Error> {
    register_builtins();
    socket::prepare_default_dir(path.as_ref())?;
    socket::serve(path.as_ref(), options, handle)
}

/// Serves `GET /metrics` (the profile tracer's snapshot as OpenMetrics
/// text, for Prometheus) and `GET /debug/pprof/profile?seconds=N` (the
/// calls of the next N seconds as a pprof profile, as Go serves a CPU
/// window) over HTTP on `address`, a loopback address:
/// `HOST:PORT` (`127.0.0.1:9464`, `[::1]:9464`, `localhost:9464`), or a
/// port alone for 127.0.0.1; port 0 picks a free one
/// ([`MetricsServer::local_addr`]). An address other hosts reach
/// (`0.0.0.0:9464`) is refused: see [`serve_metrics_with`] and
/// [`MetricsOptions::public`]. Served by a thread of its own, which
/// clients that connect and send nothing cannot keep scrapes from (see
/// [`MetricsOptions`]), with the default options: the 500 functions with
/// the most total time. The profile tracer is not enabled by this: enable
/// it (`enable("profile")`, `FNTRACE=profile`, `fntrace ctl PID enable
/// profile`) for the metrics to count calls.
pub fn serve_metrics(address: &str) -> Result<MetricsServer, Error> {
    serve_metrics_with(address, &MetricsOptions::default())
}

/// [`serve_metrics`] with options: a public address with a bearer token,
/// the ceiling on the functions exported, the limits on clients.
///
/// ```no_run
/// let options = fntrace::MetricsOptions {
///     public: true,
///     token: Some(std::fs::read_to_string("/run/secrets/metrics")?.trim().to_string()),
///     ..fntrace::MetricsOptions::default()
/// };
/// let server = fntrace::serve_metrics_with("0.0.0.0:9464", &options)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn serve_metrics_with(address: &str, options: &MetricsOptions) -> Result<MetricsServer, Error> {
    register_builtins();
    socket::serve_metrics(address, options)
}

/// The variables read with `FNTRACE_METRICS`, removed from the
/// environment once it is served (the programs this one runs must not
/// bind the port, nor hold the token).
const METRICS_VARIABLES: [&str; 8] = [
    "FNTRACE_METRICS",
    "FNTRACE_METRICS_PUBLIC",
    "FNTRACE_METRICS_TOKEN",
    "FNTRACE_METRICS_TOKEN_FILE",
    "FNTRACE_METRICS_MAX_FUNCTIONS",
    "FNTRACE_METRICS_HISTOGRAMS",
    "FNTRACE_METRICS_FILTER",
    "FNTRACE_METRICS_NAMES",
];

/// At start-up: serves what `FNTRACE_METRICS` asks for, or says in one
/// line why not. Returns whether it serves.
pub(crate) fn serve_metrics_from_env() -> bool {
    static FROM_ENV: OnceLock<MetricsServer> = OnceLock::new();
    let outcome = std::panic::catch_unwind(|| {
        // Every one set is checked, whether or not FNTRACE_METRICS is.
        vars::check_set(vars::OnBad::NoMetrics)?;
        let Some(value) = vars::var("FNTRACE_METRICS")? else {
            return Ok(());
        };
        let Some(address) = vars::parse_metrics(&value)? else {
            return Ok(());
        };
        let options = socket::metrics_options_from_env()?;
        let server = serve_metrics_with(&address, &options)
            .map_err(|e| format!("FNTRACE_METRICS={value}: {e}"))?;
        // A port is this process's: the programs it runs must not all try
        // to bind it, nor read its token. Before `main`, so no other
        // thread reads the environment.
        for name in METRICS_VARIABLES {
            std::env::remove_var(name);
        }
        let _ = FROM_ENV.set(server);
        Ok(())
    });
    let message = match outcome {
        Ok(Ok(())) => return FROM_ENV.get().is_some(),
        Ok(Err(message)) => message,
        Err(_) => "FNTRACE_METRICS: start-up panicked (a bug)".to_string(),
    };
    eprintln!("fntrace: {message}; the program runs on without a metrics endpoint");
    false
}

/// At start-up: serves what `FNTRACE_CONTROL` asks for, or says in one
/// line why not. Returns whether it serves.
pub(crate) fn serve_from_env() -> bool {
    let outcome = std::panic::catch_unwind(|| {
        let Some(value) = vars::var("FNTRACE_CONTROL")? else {
            return Ok(());
        };
        let path = match vars::parse_control(&value) {
            Ok(Some(path)) => path,
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("FNTRACE_CONTROL={value}: {e}")),
        };
        let server = serve_control(&path).map_err(|e| format!("FNTRACE_CONTROL={value}: {e}"))?;
        if value != "1" {
            // A path is this process's: the programs it runs (which inherit
            // the environment) must not all claim it. Before `main`, so no
            // other thread reads the environment.
            std::env::remove_var("FNTRACE_CONTROL");
        }
        // Only this constructor sets it; a second call keeps the first.
        let _ = FROM_ENV.set(server);
        Ok(())
    });
    let message = match outcome {
        Ok(Ok(())) => return FROM_ENV.get().is_some(),
        Ok(Err(message)) => message,
        Err(_) => "FNTRACE_CONTROL: start-up panicked (a bug)".to_string(),
    };
    eprintln!("fntrace: {message}; the program runs on without live control");
    false
}

/// The server `fntrace attach` started (through `fntrace_attach_start`),
/// until `detach` stops it; replaced by the next attach.
static ATTACHED: std::sync::Mutex<Option<ControlServer>> = std::sync::Mutex::new(None);

/// Attach after `dlopen`: serves the default control socket and finds the
/// call sites of every loaded object, made NOPs ([`control::attach_sites`]),
/// on the calling thread when `here` (one `fntrace attach` started for the
/// load), else on a thread of its own (the caller is a borrowed thread). A
/// process that serves it already (`FNTRACE_CONTROL`, attached) keeps it.
pub(crate) fn attach(here: bool) -> Result<(), Error> {
    register_builtins();
    let mut attached = ATTACHED.lock().unwrap_or_else(|e| e.into_inner());
    let path = socket::default_control_path();
    if FROM_ENV.get().is_some_and(|server| server.path() == path) {
        return Ok(());
    }
    if attached
        .as_ref()
        .is_some_and(|server| server_is_up(server.path()))
    {
        return Ok(());
    }
    control::prepare_attach();
    // A server `detach` ended: its thread is gone; its socket file too.
    drop(attached.take());
    *attached = Some(serve_control(&path)?);
    drop(attached);
    // Requests meanwhile wait for the operation's lock (`status` too).
    let scan = || {
        if let Err(err) = control::attach_sites() {
            eprintln!("fntrace: attach: finding the call sites: {err}");
        }
    };
    // No thread more if the caller can wait: each may get a malloc arena.
    if here {
        scan();
        return Ok(());
    }
    spawn_running("fntrace-attach", scan).map_err(|source| Error::Io {
        what: "starting the fntrace-attach thread".to_string(),
        source,
    })?;
    Ok(())
}

/// Whether a server answers at `path`.
fn server_is_up(path: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_ok()
}

/// `detach`: only in a process `fntrace attach` made serve. Stops the
/// recording and the flight recorder if they run, disables every tracer,
/// gives the text fntrace wrote back (the adopted sites' calls of glibc's
/// `mcount`), then stops this server once the reply is sent. The library
/// stays loaded: frames hooked by the graph tracer may still return
/// through its trampoline.
fn detach() -> Result<Reply, Error> {
    let path = {
        let attached = ATTACHED.lock().unwrap_or_else(|e| e.into_inner());
        match attached.as_ref() {
            Some(server) => server.path().to_path_buf(),
            None => {
                return Ok(Reply::error(
                    "this process was not attached (fntrace attach): detach is for those; \
                     this one's live control came with it",
                ))
            }
        }
    };
    RECORDED_BY.store(0, Ordering::Release);
    let mut stopped = Vec::new();
    if let Some(recording) = take_recording() {
        let done = recording.stop()?;
        stopped.push(format!("recording to {} stopped", done.dir.display()));
    }
    if flight::flight_recorder_running() && slot::stop().is_ok() {
        stopped.push("flight recorder stopped".to_string());
    }
    for name in tracer::tracer_names() {
        if is_enabled(name) {
            control::disable(name)?;
            stopped.push(format!("{name} disabled"));
        }
    }
    let restored = control::detach_text()?;
    // Events and counts nobody will read: their memory would stay, and
    // grow with each attach.
    let dropped = GRAPH_TRACER.discard();
    if dropped != 0 {
        stopped.push(format!("{dropped} graph events in memory dropped"));
    }
    PROFILE_TRACER.reset();
    let _ = std::fs::remove_file(&path);
    socket::stop_after_reply();
    Ok(Reply::ok(format!(
        "detached: {restored} call sites hold their text from before attach again"
    ))
    .with(
        "stopped",
        match stopped.is_empty() {
            true => "nothing was running".to_string(),
            false => stopped.join(", "),
        },
    )
    .with(
        "library",
        "stays loaded (hooked frames may still return through it); idle",
    ))
}

/// Runs one request (on the control thread).
fn handle(request: Request) -> Reply {
    let result = match request {
        Request::Status => Ok(status()),
        Request::Enable(name) => enable(&name, false),
        Request::EnablePending(name) => enable(&name, true),
        Request::Disable(name) => disable(&name),
        Request::Filter(globs) => selection::filter(&globs, false),
        Request::FilterPending(globs) => selection::filter(&globs, true),
        Request::Functions(glob) => selection::functions(glob.as_deref()),
        Request::Patch(globs) => patch(&globs),
        Request::Record(dir, mode) => Ok(match mode.as_deref().map(str::parse).transpose() {
            Ok(mode) => record(&dir, mode.unwrap_or(crate::record::RecordMode::Drop)),
            Err(e) => Reply::error(format!("record --mode: {e}")),
        }),
        Request::Stop => stop(),
        Request::Snapshot(dir) => snapshot(&dir),
        Request::Dump(dir) => dump(&dir),
        Request::Report => Ok(report()),
        Request::Futures => Ok(super::futures::futures()),
        Request::Profile => Ok(profile()),
        Request::ProfileReset => {
            PROFILE_TRACER.reset();
            Ok(Reply::ok(
                "profile reset: the calls counted so far are forgotten",
            ))
        }
        Request::Flight(request) => Ok(flight_request(request)),
        Request::MetricsFilter(globs) => Ok(socket::set_metrics_filter(globs.as_deref())),
        Request::Args(specs) => Ok(arg_specs::set(Some(&specs), None)),
        Request::Retval(specs) => Ok(arg_specs::set(None, Some(&specs))),
        Request::Detach => detach(),
    };
    result.unwrap_or_else(|err| match err {
        Error::UnknownTracer(_) => Reply::error(format!(
            "{err} (registered: {})",
            tracer::tracer_names().join(", ")
        )),
        err => Reply::error(err.to_string()),
    })
}

/// Whether the tracer registered as `name` is enabled.
fn is_enabled(name: &str) -> bool {
    tracer::find(name).is_some_and(|index| tracer::enabled_mask() & (1 << index) != 0)
}

fn status() -> Reply {
    let tracers: Vec<String> = tracer::tracer_names()
        .into_iter()
        .map(|name| match is_enabled(name) {
            true => format!("{name} (enabled)"),
            false => name.to_string(),
        })
        .collect();
    let filter = selection::status_filter();
    let recording = with_recording(|recording| match recording {
        Some(recording) => {
            let (written, lost) = recording.written_and_lost();
            format!(
                "{} ({written} events written, {lost} lost so far)",
                recording.dir().display()
            )
        }
        None if flight::flight_recorder_running() => {
            "a flight recorder (snapshot DIR writes its window)".to_string()
        }
        None if RECORDER_RUNNING.load(Ordering::Acquire) => {
            "one the program started (not controlled from here)".to_string()
        }
        None => "none".to_string(),
    });
    let stats = control::stats();
    let pid = std::process::id();
    let mut reply = Reply::ok(format!("pid {pid}"))
        .with("tracers", tracers.join(", "))
        .with("filter", filter)
        .with("recording", recording)
        .with(
            "sites",
            match stats.initialized {
                true => format!("{} ({} patched)", stats.sites, stats.patched_sites),
                false => {
                    "not looked for yet (the first enable, record or patch finds them)".to_string()
                }
            },
        );
    if let Some((written, skipped, dir)) = slot::status() {
        let triggers = slot::triggers().unwrap_or_default();
        let notes = selection::trigger_notes(&triggers);
        let dir = dir.map_or("none (the program's own)".to_string(), |d| {
            d.display().to_string()
        });
        reply = reply.with(
            "flight",
            format!(
                "snapshots to {dir}; triggers: {}; {written} trigger snapshot(s), {skipped} \
                 skipped",
                match triggers.is_empty() {
                    true => "none".to_string(),
                    false => triggers.join(", "),
                }
            ),
        );
        for note in notes {
            reply = reply.with("flight trigger matches nothing", note);
        }
    }
    reply
}

/// `flight ...`.
fn flight_request(request: FlightRequest) -> Reply {
    let result = match request {
        FlightRequest::Start { budget, rate, dir } => (|| {
            let budget_bytes = match &budget {
                Some(text) => {
                    vars::parse_flight_budget(text).map_err(|e| format!("--budget: {e}"))?
                }
                None => crate::flight::FlightOptions::default().budget_bytes,
            };
            let rate = match &rate {
                Some(text) => {
                    Some(vars::parse_rate(text).map_err(|e| format!("--rate {text}: {e}"))?)
                }
                None => None,
            };
            let pending = selection::check_enable("flight start", None)?;
            slot::start(&slot::Start {
                dir: &dir,
                budget_bytes,
                snapshots_per_minute: rate,
                snapshot_at_exit: false,
                filter: &current_filter(),
            })
            .map_err(|f| f.1)?;
            let reply = Reply::ok(format!(
                "flight recorder started: the last {} of events; snapshots (flight trigger, \
                 snapshot DIR) in {}",
                fntrace_format::units::format_size(budget_bytes as u64),
                dir.display()
            ));
            Ok(selection::with_pending(reply, &pending))
        })(),
        FlightRequest::Stop => slot::stop().map_err(|f| f.1).map(|report| {
            Reply::ok("flight recorder stopped")
                .with("events", report.events)
                .with("evicted", report.evicted)
                .with("lost", report.lost)
                .with("trigger snapshots", report.triggered.len())
                .with("skipped triggers", report.skipped_triggers)
        }),
        FlightRequest::Trigger(text) => trigger(&text, false),
        FlightRequest::TriggerPending(text) => trigger(&text, true),
        FlightRequest::Triggers => slot::triggers().map_err(|f| f.1).map(|triggers| {
            Reply::ok(format!("{} trigger(s)", triggers.len())).with_lines(&triggers.join("\n"))
        }),
        FlightRequest::Untrigger(which) => slot::remove_triggers(which.as_deref())
            .map_err(|f| f.1)
            .and_then(|removed| match (removed, &which) {
                (0, Some(which)) => {
                    Err(format!("no trigger {which:?} (flight triggers lists them)"))
                }
                (n, _) => Ok(Reply::ok(format!("{n} trigger(s) removed"))),
            }),
    };
    result.unwrap_or_else(Reply::error)
}

/// `flight trigger [--pending] SPEC`: a glob matching no function with a
/// call site is refused unless `pending`, and said then.
fn trigger(text: &str, pending: bool) -> Result<Reply, String> {
    let spec = vars::parse_trigger(text).map_err(|e| format!("flight trigger: {e}"))?;
    let unmatched = match flight::flight_recorder_running() {
        true => selection::trigger_unmatched(&spec).map_err(|e| e.to_string())?,
        // `add_trigger` says why there is nothing to add it to.
        false => None,
    };
    if let (Some(message), false) = (&unmatched, pending) {
        return Err(format!(
            "flight trigger {text}: {message}; no trigger set (`flight trigger --pending \
             {text}` keeps it for the functions of a library loaded later)"
        ));
    }
    slot::add_trigger(&spec).map_err(|f| f.1)?;
    let reply = Reply::ok(format!("trigger set: {text}"));
    Ok(match unmatched {
        Some(message) => reply.with("pending", message),
        None => reply,
    })
}

/// `patch GLOBS`: what `FNTRACE_PATCH_FUNCTIONS` does at start-up, now;
/// the reply counts this request's functions (a function is looked at
/// once: those patched or refused before are not counted again) and lists
/// its refusals with their reasons.
fn patch(globs: &str) -> Result<Reply, Error> {
    let globs = match vars::parse_patch_functions(globs) {
        Ok(globs) => globs,
        Err(e) => return Ok(Reply::error(format!("patch {globs}: {e}"))),
    };
    if let Some(refused) = selection::check_patch(&globs) {
        return Ok(refused);
    }
    let before = control::patch_report();
    let globs: Vec<&str> = globs.iter().map(String::as_str).collect();
    let after = control::patch_functions(&globs)?;
    let patched = after.patched.len() - before.patched.len();
    let refused = &after.refused[before.refused.len()..];
    let reasons: String = refused
        .iter()
        .map(|(name, why)| format!("{name} not patched: {why}\n"))
        .collect();
    Ok(Reply::ok(format!(
        "patch {}: {patched} functions patched, {} refused",
        globs.join(","),
        refused.len()
    ))
    .with_lines(&reasons))
}

/// `enable [--pending] TRACER`.
fn enable(name: &str, pending: bool) -> Result<Reply, Error> {
    if name == "graph" && RECORDER_RUNNING.load(Ordering::Acquire) {
        // Enabled already, with the filter the recording started with.
        return Ok(Reply::error(
            "the graph tracer is recording (it is enabled, with the filter the recording \
             started with): `stop` ends the recording; `filter` then `record` starts another",
        ));
    }
    tracer::find(name).ok_or_else(|| Error::UnknownTracer(name.to_string()))?;
    let pending = match selection::check_enable(&format!("enable {name}"), Some(pending)) {
        Ok(pending) => pending,
        Err(refused) => return Ok(Reply::error(refused)),
    };
    control::enable_with(name, &current_filter())?;
    let filter = current_globs().unwrap_or_else(|| "every function".to_string());
    let reply = Reply::ok(format!("enabled {name} ({filter})"));
    Ok(selection::with_pending(reply, &pending))
}

fn disable(name: &str) -> Result<Reply, Error> {
    if name == "graph" && RECORDER_RUNNING.load(Ordering::Acquire) {
        return Ok(Reply::error(
            "the graph tracer is recording: `stop` ends the recording (and disables it)",
        ));
    }
    let was_enabled = is_enabled(name);
    control::disable(name)?;
    Ok(Reply::ok(match was_enabled {
        true => format!("disabled {name}"),
        false => format!("disabled {name} (it was not enabled)"),
    }))
}

/// The process that started the recording in the C ABI's slot by `record`
/// (0: none): it is finished at that process's exit (as `FNTRACE_OUTPUT`'s
/// is by the environment's handler), not at a forked child's, which has
/// no writer thread.
static RECORDED_BY: AtomicU32 = AtomicU32::new(0);

/// `record`: drop mode unless asked otherwise (a live service's latency
/// must not wait on the recorder's disk).
fn record(dir: &Path, mode: crate::record::RecordMode) -> Reply {
    let Some(dir) = dir.to_str() else {
        return Reply::error("the directory is not UTF-8");
    };
    let pending = match selection::check_enable(&format!("record {dir}"), None) {
        Ok(pending) => pending,
        Err(refused) => return Reply::error(refused),
    };
    if let Err(failure) = start_recording(dir, &current_filter(), mode) {
        return Reply::error(failure.1);
    }
    RECORDED_BY.store(std::process::id(), Ordering::Release);
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: `finish_at_exit` is an `extern "C" fn()` that lives as
        // long as the process, as atexit requires.
        if unsafe { libc::atexit(finish_at_exit) } != 0 {
            eprintln!("fntrace: atexit failed: a recording running at exit is not finished");
        }
    });
    selection::with_pending(Reply::ok(format!("recording to {dir}")), &pending)
}

/// At exit: finishes the recording `record` started, if it runs, on a
/// thread of its own (the exiting thread's thread-locals are gone).
extern "C" fn finish_at_exit() {
    if RECORDED_BY.swap(0, Ordering::AcqRel) != std::process::id() {
        return;
    }
    // Started with `spawn_running`: while `pthread_create` runs, the
    // exiting thread blocks every signal, and `stop` patches.
    let finished = spawn_running("fntrace-exit", || {
        if let Some(Err(err)) = take_recording().map(|recording| recording.stop()) {
            eprintln!("fntrace: finishing the recording at exit: {err}");
        }
    })
    .map(|thread| thread.join());
    if !matches!(finished, Ok(Ok(()))) {
        eprintln!("fntrace: the recording could not be finished at exit");
    }
}

fn stop() -> Result<Reply, Error> {
    RECORDED_BY.store(0, Ordering::Release);
    let Some(recording) = take_recording() else {
        return Ok(Reply::error(
            "no recording is running (record DIR starts one)",
        ));
    };
    let done = recording.stop()?;
    let mode = done.mode;
    let reply = Reply::ok(format!("stopped recording to {}", done.dir.display()))
        .with("mode", mode.name())
        .with("events", done.events)
        .with("lost", done.lost);
    // Waits and the buffers' peak exist in lossless mode only (a
    // dropping recording never waits; its figures would read 0).
    let reply = if mode == crate::record::RecordMode::Lossless {
        reply
            .with("waits", done.waits)
            .with("wait_ms", done.wait_time.as_millis())
            .with("memory_peak", done.memory_peak)
    } else {
        reply
    };
    Ok(reply
        .with("threads", done.threads)
        .with("bytes", done.bytes))
}

fn snapshot(dir: &Path) -> Result<Reply, Error> {
    match flight::snapshot_running(dir) {
        None => Ok(Reply::error(
            "no flight recorder is running: start one with `flight start DIR`, or run the \
             program with FNTRACE_FLIGHT=64M (and FNTRACE_OUTPUT); `record DIR` streams instead",
        )),
        Some(written) => {
            let done = written?;
            Ok(Reply::ok(format!("snapshot written to {}", dir.display()))
                .with("events", done.events)
                .with("lost", done.lost)
                .with("threads", done.threads)
                .with("evicted", done.evicted)
                .with("window_ns", done.window().as_nanos()))
        }
    }
}

/// A recorder drains the graph tracer's buffers: what `dump` and `report`
/// would take is its.
fn refuse_while_recording(command: &str) -> Option<Reply> {
    RECORDER_RUNNING.load(Ordering::Acquire).then(|| {
        Reply::error(format!(
            "a recording is running and takes the graph tracer's events: `stop` it before `{command}`"
        ))
    })
}

fn dump(dir: &Path) -> Result<Reply, Error> {
    if let Some(refused) = refuse_while_recording("dump") {
        return Ok(refused);
    }
    let done = control::dump(dir)?;
    Ok(Reply::ok(format!("dumped to {}", dir.display()))
        .with("events", done.events)
        .with("lost", done.lost)
        .with("threads", done.threads))
}

/// The latency table of the graph tracer's events in memory, as
/// `FNTRACE_REPORT=1` prints it at exit. The events stay (for `dump`).
/// The profile tracer's snapshot: a summary, the calls open on each
/// thread (`open TID DEPTH FUNCTION ENTRY_NS CHILDREN_NS`, the function's
/// address in hex, the entry on the snapshot's clock, the completed
/// direct children's summed durations; each thread's outermost first),
/// then the snapshot's text form (`fntrace-profile 1` ... `end`), one
/// line of the reply each. With the open calls a reader counts the part
/// of a call inside an interval (`fntrace top`), not its whole life in
/// the interval it returns in.
fn profile() -> Reply {
    let (snapshot, open) = profile_with_open_calls();
    let mut reply = Reply::ok(format!(
        "profile: {} functions, {} paths, {} threads{}",
        snapshot.functions.len(),
        snapshot.paths.len(),
        snapshot.threads,
        if is_enabled("profile") {
            ""
        } else {
            " (the profile tracer is off)"
        }
    ));
    for call in &open {
        reply = reply.with_lines(&format!(
            "open {} {} {:x} {} {}",
            call.tid, call.depth, call.function, call.entry_ns, call.children_ns
        ));
    }
    for row in super::futures::rows().unwrap_or_default() {
        reply = reply.with_lines(&row.to_line());
    }
    reply.with_lines(&snapshot.to_text())
}

/// The profile's snapshot and the calls open at it. The open calls are
/// read after the snapshot, and once before it too: a call open before
/// and gone after returned while the snapshot was read, and may be in it
/// or not (it read the thread's counters before or after the return).
/// Either way such a call would be counted wrong in one interval and
/// right again in the next; one that had run for more than
/// [`AMBIGUOUS_NS`] is worth reading again for, up to three times.
fn profile_with_open_calls() -> (ProfileSnapshot, Vec<OpenCall>) {
    let mut tries = 0;
    loop {
        tries += 1;
        let before = PROFILE_TRACER.open_calls();
        let snapshot = PROFILE_TRACER.snapshot();
        let after = PROFILE_TRACER.open_calls();
        let returned_long_call = before.iter().any(|call| {
            snapshot.taken_ns.saturating_sub(call.entry_ns) > AMBIGUOUS_NS
                && !after
                    .iter()
                    .any(|c| (c.tid, c.depth, c.entry_ns) == (call.tid, call.depth, call.entry_ns))
        });
        if !returned_long_call || tries == 3 {
            return (snapshot, after);
        }
    }
}

/// How long a call that returned during a profile snapshot may have run
/// and be left to be counted in the next interval (see
/// [`profile_with_open_calls`]): 100 µs, 1 % of `fntrace top`'s shortest
/// interval.
const AMBIGUOUS_NS: u64 = 100_000;

fn report() -> Reply {
    if let Some(refused) = refuse_while_recording("report") {
        return refused;
    }
    // Read where the events are, not collected; they stay.
    let recorded = GRAPH_TRACER.recorded();
    let events = recorded.events();
    let latency = fntrace_format::analysis::latency_of(&recorded);
    drop(recorded);
    let table = match latency {
        Ok(latency) => latency.table(REPORT_ROWS),
        Err(never) => match never {},
    };
    Reply::ok(format!(
        "latency of the graph tracer's {events} events in memory"
    ))
    .with_lines(&table)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `record --mode=MODE`: the mode's words are the recorder's, checked
    /// here (the shared parser carries the text); a bad one is refused
    /// before anything starts.
    #[test]
    fn record_refuses_a_mode_that_is_none() {
        let reply = handle(Request::Record(
            "/nonexistent/fntrace".into(),
            Some("sometimes".into()),
        ));
        let reply = String::from_utf8(reply.encode()).unwrap();
        assert!(
            reply.starts_with("error: record --mode: \"sometimes\" is not a recording mode"),
            "{reply}"
        );
    }
}
