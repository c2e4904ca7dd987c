//! Environment control: with fntrace linked, the program is traced with no
//! code change. A constructor (`.init_array`, run before `main`) reads the
//! variables of the table in [`crate::vars`] (also in
//! `docs/environment.md`):
//!
//! - `FNTRACE`: a comma list of tracers to enable (`graph`, `function`, or
//!   registered names);
//! - `FNTRACE_FILTER`: globs as for `fntrace_set_filter` (`handle_*,!log_*`);
//!   a glob of it (or of `FNTRACE_FLIGHT_TRIGGER`) that matches no function
//!   with a call site is said on stderr at start-up, with the closest
//!   names, and kept (a library loaded later may match it);
//! - `FNTRACE_PATCH_FUNCTIONS`: globs of functions built without
//!   instrumentation whose entries are patched at start-up, before any
//!   tracer is enabled (uftrace's `-P`; see `fntrace::patch_functions`);
//!   what was refused is printed on stderr;
//! - `FNTRACE_LIBCALL`: the executable's calls into shared libraries
//!   through its PLT are traced (uftrace's library calls; see
//!   `patch::libcall`), hooked at start-up after the patched functions:
//!   by default whenever `FNTRACE` or `FNTRACE_OUTPUT` asks for tracing
//!   (as `fntrace record` and uftrace do) and the runtime is the preloaded
//!   `libfntrace.so`; `1` or `nested` ask for them by name, `0` turns them
//!   off;
//! - `FNTRACE_DEPTH`: the deepest call recorded (0: the outermost traced
//!   calls);
//! - `FNTRACE_ARGS`, `FNTRACE_RETVAL`: the arguments and return values the
//!   graph tracer records, in uftrace's `-A` and `-R` syntax
//!   (`f@arg1/x,arg2/s`; several joined by `;`), set before it is enabled
//!   (see `fntrace::set_arg_specs`); a glob that selects no function with a
//!   call site is said on stderr;
//! - `FNTRACE_OUTPUT`: a directory to stream to with the recorder (graph
//!   tracer), finished at exit;
//! - `FNTRACE_REPORT=1`: the latency table on stderr at exit (graph tracer);
//! - `FNTRACE_FLIGHT=SIZE`: with `FNTRACE_OUTPUT`, run the flight
//!   recorder instead (the most recent SIZE of events: `64M`, `1G`, bytes;
//!   binary multiples, see `fntrace_format::units`); this process only (the
//!   programs it runs are not recorded). Without triggers, its window is
//!   written to `FNTRACE_OUTPUT` at exit; that directory is checked (made,
//!   empty) when the recorder starts, so that a snapshot that could not be
//!   written is known then, not at exit;
//! - `FNTRACE_FLIGHT_TRIGGER=handle_*>5ms,other>20ms,panic,SIGUSR1`: with
//!   `FNTRACE_FLIGHT`, write a snapshot when a call of a matching function
//!   lasts that long, on a Rust panic, on a signal; each snapshot goes in a
//!   directory of its own under `FNTRACE_OUTPUT`, named by time and
//!   function, and nothing is written at exit;
//! - `FNTRACE_FLIGHT_RATE=N`: at most N trigger snapshots a minute (6);
//! - `FNTRACE_FUTURES_SLOTS=N`: the runtime future linker's table (16384
//!   futures pending at once, with `fntrace record --async`'s values);
//! - `FNTRACE_APPEND=1`: add this process to the recording already in
//!   `FNTRACE_OUTPUT` as a new session (a program exec'd or spawned by a
//!   recorded one) instead of requiring an empty directory. A process that
//!   starts recording sets it, and `FNTRACE_OUTPUT` as an absolute path, in
//!   its own environment, so that the programs it runs join its recording;
//! - `FNTRACE_CONTROL`: live control (see [`crate::socket::live`]); with
//!   it (or `FNTRACE_METRICS`) and no tracing asked, the call sites of an
//!   instrumented executable are found and made NOPs before `main`: the
//!   program runs untraced at no cost per call until a command enables a
//!   tracer;
//! - `FNTRACE_METRICS=HOST:PORT` on a loopback address (or `:PORT`, a
//!   port alone: 127.0.0.1): serve `GET /metrics`, the profile tracer's
//!   metrics text (see [`crate::socket::live::serve_metrics`]); with
//!   `FNTRACE_METRICS_PUBLIC=1` an address other hosts reach, which needs
//!   `FNTRACE_METRICS_TOKEN` (or `FNTRACE_METRICS_TOKEN_FILE`, a file
//!   holding it): the bearer token every request must carry;
//!   `FNTRACE_METRICS_MAX_FUNCTIONS`: the most functions exported (500);
//!   `FNTRACE_METRICS_HISTOGRAMS`: how many of them with a histogram (10);
//!   `FNTRACE_METRICS_BUCKETS_PER_DOUBLING`: classic buckets per power of
//!   two (1, up to 128);
//!   `FNTRACE_METRICS_FILTER`: globs of those exported;
//!   `FNTRACE_METRICS_NAMES=short|full`: labels without or with generic
//!   arguments;
//!
//! - `FNTRACE_MODE=lossless|drop`: with `FNTRACE_OUTPUT`, what a thread
//!   whose buffer is full does (see [`RecordMode`]; `lossless` by default);
//! - `FNTRACE_BUFFER=SIZE`: with `FNTRACE_OUTPUT`, each thread's buffer
//!   (`4M`, bytes; 16 bytes an event, rounded up to a power of two);
//! - `FNTRACE_MEMORY=SIZE`: with `FNTRACE_OUTPUT`, lossless mode, what the
//!   threads' buffers may hold together (`256M`; at least a buffer; unset:
//!   no budget, each thread its buffer); see
//!   [`RecordOptions::memory_bytes`];
//!
//! and `FNTRACE_PATCH`, `FNTRACE_PATCH_PRIORITY` and `FNTRACE_TEXT_WRITES`
//! as always (read by the patcher at its first operation). Every variable
//! set is checked before anything is enabled, whether or not the others
//! ask for tracing: an invalid one prints one line naming the variable,
//! and the program runs untraced (a bad patch setting: the default is
//! kept). What runs at exit (`atexit`, so `exit()` from anywhere) runs on
//! a thread of its own: the exiting thread's thread-locals are gone by
//! then.

use std::panic::catch_unwind;

use crate::builtin::graph::GRAPH_TRACER;
use crate::control;
use crate::filter::Filter;
use crate::tracer;
use fntrace_format::analysis::latency_of;
use fntrace_format::export::UftraceReader;

use crate::record::{RecordMode, RecordOptions};
use crate::session::flight as slot;
use crate::session::{register_builtins, start_recording_with, take_recording};
use crate::vars::{self, var, OnBad, REPORT_ROWS};

/// Run before `main` (after the tracer registrations, which have a
/// constructor priority).
#[used]
#[unsafe(link_section = ".init_array")]
pub(super) static START: extern "C" fn() = start;

/// What the environment asks for.
struct Settings {
    tracers: Vec<String>,
    filter: Filter,
    /// `FNTRACE_PATCH_FUNCTIONS`.
    patch: Vec<String>,
    /// `FNTRACE_LIBCALL`, or the default.
    libcall: Option<crate::control::LibcallScope>,
    /// Whether `libcall` is the default (the variable unset), not asked
    /// for by name: it does not make a wrapper trace, and a failure to
    /// hook leaves the program traced without library calls.
    libcall_by_default: bool,
    output: Option<String>,
    flight: Option<FlightSettings>,
    append: bool,
    report: bool,
    mode: RecordMode,
    /// Events per thread buffer (`FNTRACE_BUFFER`), if set.
    buffer_events: Option<usize>,
    /// The lossless buffers' memory budget (`FNTRACE_MEMORY`), if set.
    memory_bytes: Option<usize>,
    /// `FNTRACE_ARGS` and `FNTRACE_RETVAL` (empty if unset).
    arg_specs: (String, String),
    /// `FNTRACE_FUTURES_SLOTS`, if set.
    futures_slots: Option<usize>,
}

/// What `FNTRACE_FLIGHT` and the variables after it ask for.
struct FlightSettings {
    budget_bytes: usize,
    triggers: Vec<vars::TriggerSpec>,
    rate: Option<u32>,
}

/// The settings `start` applied, for the exit handler.
static APPLIED: std::sync::Mutex<Option<(bool, bool)>> = std::sync::Mutex::new(None);

extern "C" fn start() {
    // Nothing fntrace does at start-up is the program's: with `-P '*'`,
    // the C library's functions it calls (`setenv`, `pthread_create`) are
    // patched too.
    let _untraced = crate::rt::thread::Untraced::begin();
    // FNTRACE_CONTROL and FNTRACE_METRICS, whatever the others say.
    let controlled = crate::socket::live::serve_from_env();
    let controlled = crate::socket::live::serve_metrics_from_env() || controlled;
    let outcome = catch_unwind(|| match settings() {
        Ok(Some(settings)) => apply(settings, controlled),
        Ok(None) if controlled && crate::symbols::executable_instrumentation().is_some() => {
            // A program that waits for `fntrace ctl` (or a scrape that
            // enables nothing) runs untraced until then: its sites are
            // NOPs from the start, not calls that return at once. (Not in
            // one with no sites, a shell that inherited FNTRACE_CONTROL=1,
            // say: its start-up is not made to wait for a scan.)
            control::init().map_err(|e| format!("finding the call sites: {e}"))
        }
        Ok(None) => {
            // No patching starts now: the patcher, which reads these at its
            // first operation and reports a bad value then, may never run.
            if let Err(line) = vars::check_set(OnBad::KeepDefault) {
                eprintln!("fntrace: {line}; the default is kept");
            }
            Ok(())
        }
        Err(message) => Err(message),
    });
    let message = match outcome {
        Ok(Ok(())) => return,
        Ok(Err(message)) => message,
        Err(_) => "start-up panicked (a bug)".to_string(),
    };
    eprintln!("fntrace: {message}; the program runs untraced");
}

/// Patches the entries of the functions `globs` select
/// (`FNTRACE_PATCH_FUNCTIONS`) and says on stderr how many were patched
/// and which were refused, and why.
fn patch_functions(globs: &[String]) -> Result<(), String> {
    let globs: Vec<&str> = globs.iter().map(String::as_str).collect();
    let report = control::patch_functions(&globs)
        .map_err(|e| format!("FNTRACE_PATCH_FUNCTIONS={}: {e}", globs.join(",")))?;
    if report.patched.is_empty() && report.refused.is_empty() {
        eprintln!(
            "fntrace: -P {}: no function of the program matches (an inlined function has no \
             entry of its own)",
            globs.join(",")
        );
        return Ok(());
    }
    eprintln!(
        "fntrace: -P {}: {} functions patched, {} refused",
        globs.join(","),
        report.patched.len(),
        report.refused.len()
    );
    for (name, why) in &report.refused {
        eprintln!("fntrace: -P: {name} not patched: {why}");
    }
    Ok(())
}

/// Hooks the library calls `FNTRACE_LIBCALL` asks for (or the default);
/// the lines to say on stderr once the start-up succeeded: how many (when
/// asked for by name), and which imports could not be hooked, and why
/// (those left alone on purpose, `exit` or `setjmp`, only counted). A start-up that fails
/// later says only why it failed (the hooks stay: a library call then
/// costs its stub's jump and NOP, no tracer being enabled).
fn trace_library_calls(
    scope: crate::control::LibcallScope,
    by_default: bool,
) -> Result<Vec<String>, String> {
    let value = match scope {
        crate::control::LibcallScope::Executable => "1",
        crate::control::LibcallScope::Nested => "nested",
    };
    let report = match control::trace_library_calls(scope) {
        Ok(report) => report,
        // On by default, not asked for: the rest of the tracing goes on.
        Err(e) if by_default => {
            return Ok(vec![format!(
                "fntrace: library calls (on by default, FNTRACE_LIBCALL=0 turns them off): {e}; \
                 traced without them"
            )]);
        }
        Err(e) => return Err(format!("FNTRACE_LIBCALL={value}: {e}")),
    };
    // The default is quiet (a service's stderr stays its own); asked for
    // by name (`fntrace record`), the count is said.
    let mut lines = Vec::new();
    if !by_default {
        lines.push(format!(
            "fntrace: library calls: {} library functions hooked in {} object(s), {} left alone",
            report.hooked.len(),
            report.objects,
            report.skipped.len()
        ));
    }
    for (name, why) in report.skipped.iter().filter(|(_, why)| !why.on_purpose()) {
        lines.push(format!("fntrace: library calls: {name} not hooked: {why}"));
    }
    Ok(lines)
}

/// Whether this runtime is its own shared object (`libfntrace.so`,
/// preloaded or loaded), not linked into the executable (`libfntrace.a`),
/// where library calls cannot be hooked (see `patch::libcall`): the
/// object holding this function is not the one holding the program's
/// entry point.
fn runtime_is_preloaded() -> bool {
    let object_base = |address: usize| {
        // SAFETY: `Dl_info` is plain data, zeroes a valid value; `dladdr`
        // only writes it, and reads nothing at `address`.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `info` is a valid out-pointer.
        match unsafe { libc::dladdr(address as *const libc::c_void, &mut info) } {
            0 => None,
            _ => Some(info.dli_fbase as usize),
        }
    };
    // SAFETY: getauxval reads the process's auxiliary vector, always there.
    let entry = unsafe { libc::getauxval(libc::AT_ENTRY) } as usize;
    let this = runtime_is_preloaded as *const () as usize;
    match (object_base(entry), object_base(this)) {
        (Some(program), Some(runtime)) => program != runtime,
        _ => false,
    }
}

/// The settings, `None` when the environment asks for no tracing, or a
/// line naming the first invalid variable. Every variable of the table
/// that is set is checked, whether or not tracing is asked for.
fn settings() -> Result<Option<Settings>, String> {
    vars::check_set(OnBad::Untraced)?;
    let tracers = vars::parse_tracers(&var("FNTRACE")?.unwrap_or_default())?;
    let output = var("FNTRACE_OUTPUT")?.filter(|dir| !dir.is_empty());
    // The values were checked above: the parsers cannot fail here, but
    // their errors are kept, named, rather than unwrapped.
    let named = |name: &str, value: &str, e: String| format!("{name}={value}: {e}");
    let mut filter = match var("FNTRACE_FILTER")? {
        Some(globs) => {
            vars::parse_filter(&globs).map_err(|e| named("FNTRACE_FILTER", &globs, e))?
        }
        None => Filter::new(),
    };
    let patch = match var("FNTRACE_PATCH_FUNCTIONS")? {
        Some(globs) => vars::parse_patch_functions(&globs)
            .map_err(|e| named("FNTRACE_PATCH_FUNCTIONS", &globs, e))?,
        None => Vec::new(),
    };
    let libcall_set = var("FNTRACE_LIBCALL")?;
    let mut libcall = match &libcall_set {
        Some(v) => vars::parse_libcall(v).map_err(|e| named("FNTRACE_LIBCALL", v, e))?,
        None => None,
    };
    if let Some(depth) = var("FNTRACE_DEPTH")? {
        let n = vars::parse_depth(&depth).map_err(|e| named("FNTRACE_DEPTH", &depth, e))?;
        filter = filter.max_depth(n);
    }
    let report = match var("FNTRACE_REPORT")? {
        Some(v) => vars::parse_flag(&v).map_err(|e| named("FNTRACE_REPORT", &v, e))?,
        None => false,
    };
    let append = match var("FNTRACE_APPEND")? {
        Some(v) => vars::parse_flag(&v).map_err(|e| named("FNTRACE_APPEND", &v, e))?,
        None => false,
    };
    let flight = match var("FNTRACE_FLIGHT")? {
        None => None,
        Some(bytes) => {
            let budget = vars::parse_flight_budget(&bytes)
                .map_err(|e| named("FNTRACE_FLIGHT", &bytes, e))?;
            if output.is_none() {
                return Err(format!(
                    "FNTRACE_FLIGHT={bytes} needs FNTRACE_OUTPUT (where snapshots are written)"
                ));
            }
            Some(budget)
        }
    };
    let triggers = match var("FNTRACE_FLIGHT_TRIGGER")? {
        Some(v) => vars::parse_triggers(&v).map_err(|e| named("FNTRACE_FLIGHT_TRIGGER", &v, e))?,
        None => Vec::new(),
    };
    let futures_slots = match var("FNTRACE_FUTURES_SLOTS")? {
        Some(v) => {
            Some(vars::parse_futures_slots(&v).map_err(|e| named("FNTRACE_FUTURES_SLOTS", &v, e))?)
        }
        None => None,
    };
    let rate = match var("FNTRACE_FLIGHT_RATE")? {
        Some(v) => Some(vars::parse_rate(&v).map_err(|e| named("FNTRACE_FLIGHT_RATE", &v, e))?),
        None => None,
    };
    if flight.is_none() {
        for name in ["FNTRACE_FLIGHT_TRIGGER", "FNTRACE_FLIGHT_RATE"] {
            if let Some(value) = var(name)? {
                return Err(format!(
                    "{name}={value} needs FNTRACE_FLIGHT (the flight recorder's budget: 64M)"
                ));
            }
        }
    }
    let graph = tracers.iter().any(|t| t == "graph");
    if report && !graph && output.is_none() {
        return Err(
            "FNTRACE_REPORT=1 needs the graph tracer: set FNTRACE=graph or FNTRACE_OUTPUT"
                .to_string(),
        );
    }
    // Patching and library-call hooking are done whenever asked: with no
    // tracer yet, the sites they make wait as NOPs for `fntrace ctl` (or
    // the C API) to enable one.
    if tracers.is_empty() && output.is_none() && patch.is_empty() && libcall.is_none() {
        return Ok(None);
    }
    // Library calls are on by default whenever tracing is asked for (a
    // tracer, a recording, the flight recorder), as under `fntrace record`
    // and uftrace; possible only when the runtime is its own shared object.
    let tracing = !tracers.is_empty() || output.is_some();
    let libcall_by_default = libcall_set.is_none() && tracing && runtime_is_preloaded();
    if libcall_by_default {
        libcall = Some(crate::control::LibcallScope::Executable);
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
    let mode = match var("FNTRACE_MODE")? {
        Some(v) => vars::parse_mode(&v).map_err(|e| named("FNTRACE_MODE", &v, e))?,
        None => RecordMode::Lossless,
    };
    let buffer_events = match var("FNTRACE_BUFFER")? {
        Some(v) => Some(vars::parse_buffer_events(&v).map_err(|e| named("FNTRACE_BUFFER", &v, e))?),
        None => None,
    };
    let memory_bytes = match var("FNTRACE_MEMORY")? {
        Some(v) => Some(vars::parse_memory_bytes(&v).map_err(|e| named("FNTRACE_MEMORY", &v, e))?),
        None => None,
    };
    let arg_specs = (
        var("FNTRACE_ARGS")?.unwrap_or_default(),
        var("FNTRACE_RETVAL")?.unwrap_or_default(),
    );
    Ok(Some(Settings {
        arg_specs,
        futures_slots,
        tracers,
        filter,
        patch,
        libcall,
        libcall_by_default,
        output,
        flight: flight.map(|budget_bytes| FlightSettings {
            budget_bytes,
            triggers,
            rate,
        }),
        append,
        report,
        mode,
        buffer_events,
        memory_bytes,
    }))
}

/// Enables what `settings` asks for, all or nothing, and registers the
/// exit handler. A process with nothing to trace (no call sites in any
/// object loaded at start-up) and nothing asked by name (no `-P`, library
/// calls or live control) is taken for a wrapper that starts the program meant (`timeout`, `sh -c`, `env`,
/// `nice`, `setsid`, a script that execs): it stays silent and leaves the
/// environment as it found it, for that program. (A program whose only
/// instrumented code is a library it will `dlopen` is taken for one too:
/// `docs/limits.md`.)
fn apply(settings: Settings, controlled: bool) -> Result<(), String> {
    // Asked for by name (functions to patch, library calls, live control):
    // never a wrapper's business.
    let libcall_asked = settings.libcall.is_some() && !settings.libcall_by_default;
    let asked = !settings.patch.is_empty() || libcall_asked || controlled;
    if !asked && !crate::symbols::process_has_call_sites() {
        return Ok(());
    }
    let mut enabled: Vec<&str> = Vec::new();
    let mut said: Vec<String> = Vec::new();
    let result = (|| {
        if !settings.patch.is_empty() {
            patch_functions(&settings.patch)?;
        }
        if let Some(scope) = settings.libcall {
            said = trace_library_calls(scope, settings.libcall_by_default)?;
        }
        if let Some(slots) = settings.futures_slots {
            crate::builtin::futures::set_slots(slots);
        }
        let (arguments, retval) = &settings.arg_specs;
        if !arguments.is_empty() || !retval.is_empty() {
            let unmatched = crate::control::set_arg_specs(arguments, retval)
                .map_err(|e| format!("FNTRACE_ARGS/FNTRACE_RETVAL: {e}"))?;
            said.extend(
                unmatched
                    .into_iter()
                    .map(|m| format!("fntrace: FNTRACE_ARGS/FNTRACE_RETVAL: {m}")),
            );
        }
        if let (Some(dir), Some(flight)) = (&settings.output, &settings.flight) {
            let start = slot::Start {
                dir: dir.as_ref(),
                budget_bytes: flight.budget_bytes,
                snapshots_per_minute: flight.rate,
                snapshot_at_exit: flight.triggers.is_empty(),
                filter: &settings.filter,
            };
            slot::start(&start)
                .map_err(|f| format!("FNTRACE_FLIGHT with FNTRACE_OUTPUT={dir}: {}", f.1))?;
            for trigger in &flight.triggers {
                slot::add_trigger(trigger)
                    .map_err(|f| format!("FNTRACE_FLIGHT_TRIGGER: {}", f.1))?;
            }
            // The programs this one runs are not recorded.
            for name in [
                "FNTRACE_OUTPUT",
                "FNTRACE_FLIGHT",
                "FNTRACE_FLIGHT_TRIGGER",
                "FNTRACE_FLIGHT_RATE",
                "FNTRACE",
            ] {
                std::env::remove_var(name);
            }
        } else if let Some(dir) = &settings.output {
            let defaults = RecordOptions::default();
            let options = RecordOptions {
                append: settings.append,
                mode: settings.mode,
                buffer_events: settings.buffer_events.unwrap_or(defaults.buffer_events),
                memory_bytes: settings.memory_bytes.unwrap_or(defaults.memory_bytes),
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
        if let Some(slot) = slot::take() {
            let _ = slot.recorder.stop();
        }
        return Err(message);
    }
    for line in said {
        eprintln!("{line}");
    }
    warn_unmatched(&settings);
    *APPLIED.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((settings.output.is_some(), settings.report));
    // SAFETY: `finish` is an `extern "C" fn()` that lives as long as the
    // process, as atexit requires.
    if unsafe { libc::atexit(finish) } != 0 {
        eprintln!("fntrace: atexit failed: the trace is not finished at exit");
    }
    Ok(())
}

/// Says on stderr, once, each glob of `FNTRACE_FILTER` and of
/// `FNTRACE_FLIGHT_TRIGGER` that matches no function with a call site,
/// with the closest names: a typo, most likely, but the program runs on
/// and the glob is kept (a library it loads later may match it).
fn warn_unmatched(settings: &Settings) {
    use crate::control::names::{traced_names, unmatched, WITH_SITES};
    let globs: Vec<&str> = settings.filter.name_globs().collect();
    let triggers: Vec<&str> = settings
        .flight
        .iter()
        .flat_map(|flight| &flight.triggers)
        .filter_map(|trigger| match trigger {
            vars::TriggerSpec::Slow(glob, ..) => Some(glob.as_str()),
            _ => None,
        })
        .collect();
    if globs.is_empty() && triggers.is_empty() || !control::stats().initialized {
        return;
    }
    let Ok(names) = traced_names() else {
        return;
    };
    // A trigger may name an async fn (recorded with --async's values):
    // its futures are what it fires on.
    let mut with_async = names.clone();
    if let Some(table) = crate::builtin::graph::args::table() {
        for function in table.futures.addresses() {
            if let Some(name) = control::function_name(function) {
                with_async.push(fntrace_format::coroutine::async_fn_name(&name).to_string());
            }
        }
    }
    let kept = "kept (a library loaded later may match it)";
    for (variable, globs, names) in [
        ("FNTRACE_FILTER", globs, &names),
        ("FNTRACE_FLIGHT_TRIGGER", triggers, &with_async),
    ] {
        for message in unmatched(globs, names, WITH_SITES) {
            eprintln!("fntrace: {variable}: {message}; {kept}");
        }
    }
}

/// Sets up this process's environment so that the programs it runs (which
/// inherit it) add to its recording at `dir`: before `main`, so no other
/// thread reads the environment meanwhile.
fn pass_recording_on(dir: &str) {
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.into());
    std::env::set_var("FNTRACE_OUTPUT", absolute);
    std::env::set_var("FNTRACE_APPEND", "1");
}

/// At exit: finishes the recording, prints the report.
extern "C" fn finish() {
    // Its calls (`pthread_create`, `pthread_join`) are fntrace's.
    let _untraced = crate::rt::thread::Untraced::begin();
    // Started as the recorder's threads are: a thread being created has
    // every signal blocked, which would make a patch now fall back to
    // stopping the world.
    let finished =
        crate::rt::spawn::spawn_running("fntrace-exit", || catch_unwind(finish_on_this_thread));
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
    if let Some(slot) = slot::take() {
        dir = slot::finish(slot);
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
