//! The `FNTRACE_*` variables the runtime reads: one table ([`VARIABLES`])
//! of their names, meanings and parsers. Start-up
//! (`preload::env`) checks every variable of the table that is
//! set, whatever the others say; the `exec` wrappers
//! (`preload::exec`) pass on those marked `passed_on`; the module
//! doc of `preload::env` and `docs/environment.md` list each (a test
//! checks).
//!
//! Each parser is the only one of its variable: start-up, the C ABI and
//! live control use it to read the value, and the table to check it. It
//! sits below all three (and above the recorders whose settings it
//! parses).

use std::path::PathBuf;
use std::time::Duration;

use fntrace_format::argspec::{self, FunctionSpec, SpecKind};
use fntrace_format::units::{parse_duration_ns, parse_size};

use crate::error::Error;
use crate::filter::Filter;

mod metrics;
pub(crate) use metrics::{
    parse_buckets_per_doubling, parse_histograms, parse_max_functions, parse_metrics,
    parse_metrics_filter, parse_names, parse_token, parse_token_file, read_token_file,
};

/// A variable the runtime reads.
pub(crate) struct Variable {
    /// Its name.
    pub name: &'static str,
    /// What it sets, and its values (one line; the table is read by
    /// people and the docs test, not by code).
    #[cfg_attr(not(test), allow(dead_code))]
    pub meaning: &'static str,
    /// Checks a value; the error follows `NAME=VALUE: ` in the line printed.
    pub check: fn(&str) -> Result<(), String>,
    /// Added to the environment of a program exec'd during a recording
    /// when that environment lacks it.
    pub passed_on: bool,
    /// What a bad value does: stops tracing (the program runs untraced),
    /// or is reported and the default kept (read where it is used).
    pub on_bad: OnBad,
    /// A secret (a token): a bad value is described, never printed.
    pub secret: bool,
}

/// What a bad value of a variable does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnBad {
    /// One line; the program runs untraced.
    Untraced,
    /// One line; the program runs without live control.
    NoControl,
    /// One line; the program runs without the metrics endpoint.
    NoMetrics,
    /// One line; the default is kept (the patch settings, read by the
    /// patcher at its first operation, which prints the line then).
    KeepDefault,
}

fn ok<T>(result: Result<T, String>) -> Result<(), String> {
    result.map(drop)
}

/// Every `FNTRACE_*` variable the runtime reads.
pub(crate) const VARIABLES: &[Variable] = &[
    Variable {
        name: "FNTRACE",
        meaning: "a comma list of tracers to enable: graph, function, or registered names",
        check: |v| ok(parse_tracers(v)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_FILTER",
        meaning: "globs selecting the functions traced: handle_*,!log_*",
        check: |v| ok(parse_filter(v)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_PATCH_FUNCTIONS",
        meaning: "globs of functions built without instrumentation to patch at run time (uftrace's -P): w_*,parse_*",
        check: |v| ok(parse_patch_functions(v)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_LIBCALL",
        meaning: "the executable's calls into shared libraries through its PLT \
                  (uftrace's libcalls), on by default with FNTRACE or FNTRACE_OUTPUT \
                  under libfntrace.so; 1: asked by name; nested: also the libraries' \
                  calls into other libraries (uftrace's --nest-libcall); 0 or empty: off",
        check: |v| ok(parse_libcall(v)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_DEPTH",
        meaning: "the deepest call recorded, 0 to 65535 (0: the outermost traced calls)",
        check: |v| ok(parse_depth(v)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_ARGS",
        meaning: "arguments the graph tracer records, uftrace's -A syntax: f@arg1/x,arg2/s;g*@fparg1",
        check: |v| ok(parse_arg_specs(v, SpecKind::Arguments)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_RETVAL",
        meaning: "return values the graph tracer records, uftrace's -R syntax: f@retval/d;g@retval/x",
        check: |v| ok(parse_arg_specs(v, SpecKind::Retval)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_OUTPUT",
        meaning: "a directory to stream the graph tracer to, finished at exit \
                  (with FNTRACE_FLIGHT: where snapshots go)",
        check: |_| Ok(()),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_REPORT",
        meaning: "1: the latency table on stderr at exit (graph tracer); 0 or empty: none",
        check: |v| ok(parse_flag(v)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_APPEND",
        meaning: "1: add this process to the recording in FNTRACE_OUTPUT as a new session",
        check: |v| ok(parse_flag(v)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_MODE",
        meaning: "lossless (default): a thread whose buffer is full waits for the writer; \
                  drop: the event is dropped, counted and marked by a lost record",
        check: |v| ok(parse_mode(v)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_BUFFER",
        meaning: "each thread's buffer while recording, a size (4M, bytes; 16 bytes an event, \
                  rounded up to a power of two)",
        check: |v| ok(parse_buffer_events(v)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_MEMORY",
        meaning: "lossless recording: what the threads' buffers may hold together, a size \
                  (at least FNTRACE_BUFFER; unset: no budget, each thread its buffer): a thread whose buffer is full \
                  takes more of it, and waits for the writer only when none is left",
        check: |v| ok(parse_memory_bytes(v)),
        passed_on: true,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_FLIGHT",
        meaning: "a size (64M, 1G, bytes): run the flight recorder keeping that much of \
                  the most recent events; needs FNTRACE_OUTPUT",
        check: |v| ok(parse_flight_budget(v)),
        passed_on: false,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_FLIGHT_TRIGGER",
        meaning: "when the flight recorder writes a snapshot: GLOB>DURATION (a call \
                  that long), panic, SIGNAME; comma-separated; needs FNTRACE_FLIGHT",
        check: |v| ok(parse_triggers(v)),
        passed_on: false,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_FLIGHT_RATE",
        meaning: "the most snapshots triggers write per minute (default 6; more are \
                  counted, skipped); needs FNTRACE_FLIGHT",
        check: |v| ok(parse_rate(v)),
        passed_on: false,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_FUTURES_SLOTS",
        meaning: "the runtime future linker's table (futures pending at once that \
                  --async follows; 16384)",
        check: |v| ok(parse_futures_slots(v)),
        passed_on: false,
        on_bad: OnBad::Untraced,
        secret: false,
    },
    Variable {
        name: "FNTRACE_CONTROL",
        meaning: "1: serve live control at /tmp/fntrace-UID/PID.sock; an absolute path: \
                  serve it; 0 or empty: no socket",
        check: |v| ok(parse_control(v)),
        passed_on: false,
        on_bad: OnBad::NoControl,
        secret: false,
    },
    Variable {
        name: "FNTRACE_METRICS",
        meaning: "HOST:PORT on a loopback address (127.0.0.1:9464, [::1]:9464, localhost:9464), \
                  or :PORT or a port alone (127.0.0.1): serve GET /metrics (the profile \
                  tracer's OpenMetrics text) and /debug/pprof/profile?seconds=N (a \
                  window's calls as pprof) over HTTP; another address needs \
                  FNTRACE_METRICS_PUBLIC=1 and a token; 0 or empty: none",
        check: |v| ok(parse_metrics(v)),
        passed_on: false,
        on_bad: OnBad::NoMetrics,
        secret: false,
    },
    Variable {
        name: "FNTRACE_METRICS_PUBLIC",
        meaning: "1: FNTRACE_METRICS may be an address other hosts reach (0.0.0.0:9464), \
                  with a token required; 0 or empty: such an address is refused",
        check: |v| ok(parse_flag(v)),
        passed_on: false,
        on_bad: OnBad::NoMetrics,
        secret: false,
    },
    Variable {
        name: "FNTRACE_METRICS_TOKEN",
        meaning: "a bearer token, 16 to 4096 characters of A-Z a-z 0-9 - . _ ~ + / (= at the \
                  end): every request needs Authorization: Bearer TOKEN, else 401",
        check: |v| ok(parse_token(v)),
        passed_on: false,
        on_bad: OnBad::NoMetrics,
        secret: true,
    },
    Variable {
        name: "FNTRACE_METRICS_TOKEN_FILE",
        meaning: "an absolute path to a file holding the bearer token (its one line), \
                  read at start-up, instead of FNTRACE_METRICS_TOKEN",
        check: |v| ok(parse_token_file(v)),
        passed_on: false,
        on_bad: OnBad::NoMetrics,
        secret: false,
    },
    Variable {
        name: "FNTRACE_METRICS_MAX_FUNCTIONS",
        meaning: "the most functions GET /metrics exports, 0 to 1000000 (500): those with \
                  the most total time; the others are counted in \
                  fntrace_metrics_functions_omitted",
        check: |v| ok(parse_max_functions(v)),
        passed_on: false,
        on_bad: OnBad::NoMetrics,
        secret: false,
    },
    Variable {
        name: "FNTRACE_METRICS_HISTOGRAMS",
        meaning: "how many of the exported functions carry the duration histogram, 0 to \
                  1000000 (10): those with the most total time; the others are 3 series each",
        check: |v| ok(parse_histograms(v)),
        passed_on: false,
        on_bad: OnBad::NoMetrics,
        secret: false,
    },
    Variable {
        name: "FNTRACE_METRICS_BUCKETS_PER_DOUBLING",
        meaning: "classic duration histogram buckets per power of two, 1 2 4 .. 128 (1): \
                  finer quantiles for scrapers without native histograms; 30 x N + 1 \
                  buckets per function with a histogram",
        check: |v| ok(parse_buckets_per_doubling(v)),
        passed_on: false,
        on_bad: OnBad::NoMetrics,
        secret: false,
    },
    Variable {
        name: "FNTRACE_METRICS_FILTER",
        meaning: "globs selecting the functions GET /metrics exports, as FNTRACE_FILTER: \
                  kv_service::*,!kv_service::log_*; empty: all (fntrace ctl PID \
                  metrics-filter changes it live)",
        check: |v| ok(parse_metrics_filter(v)),
        passed_on: false,
        on_bad: OnBad::NoMetrics,
        secret: false,
    },
    Variable {
        name: "FNTRACE_METRICS_NAMES",
        meaning: "short (default): function labels without generic arguments, the \
                  instances of a generic function one series; full: as demangled",
        check: |v| ok(parse_names(v)),
        passed_on: false,
        on_bad: OnBad::NoMetrics,
        secret: false,
    },
    Variable {
        name: "FNTRACE_PATCH",
        meaning: "how text is patched: breakpoint (default) or stop",
        check: |v| words(v, &["breakpoint", "stop"]),
        passed_on: true,
        on_bad: OnBad::KeepDefault,
        secret: false,
    },
    Variable {
        name: "FNTRACE_PATCH_PRIORITY",
        meaning: "the patching thread's priority: realtime (default) or normal",
        check: |v| words(v, &["realtime", "normal"]),
        passed_on: true,
        on_bad: OnBad::KeepDefault,
        secret: false,
    },
    Variable {
        name: "FNTRACE_TEXT_WRITES",
        meaning: "how text is written: proc-mem (default) or alias",
        check: |v| words(v, &["alias", "proc-mem"]),
        passed_on: true,
        on_bad: OnBad::KeepDefault,
        secret: false,
    },
];

fn words(value: &str, allowed: &[&str]) -> Result<(), String> {
    if allowed.contains(&value) {
        return Ok(());
    }
    let quoted: Vec<String> = allowed.iter().map(|w| format!("{w:?}")).collect();
    Err(format!("use {}", quoted.join(" or ")))
}

/// The table's entry for `name`.
#[cfg(test)]
pub(crate) fn variable(name: &str) -> Option<&'static Variable> {
    VARIABLES.iter().find(|v| v.name == name)
}

/// A variable's value; `Err` (the line, without `fntrace: `) if it is not
/// UTF-8.
pub(crate) fn var(name: &str) -> Result<Option<String>, String> {
    match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(format!("{name}={}: not valid UTF-8", v.to_string_lossy()))
        }
    }
}

/// `NAME=VALUE` as an error line begins, the value echoed; a secret's
/// value is described by its length, never printed (the line goes to a
/// log others may read).
pub(crate) fn shown(variable: &Variable, value: &str) -> String {
    if variable.secret {
        format!(
            "{}=({} characters, not shown)",
            variable.name,
            value.chars().count()
        )
    } else {
        format!("{}={value}", variable.name)
    }
}

/// Checks every set variable of the table whose bad value has `on_bad`;
/// the line for the first bad one (without `fntrace: `).
pub(crate) fn check_set(on_bad: OnBad) -> Result<(), String> {
    for variable in VARIABLES.iter().filter(|v| v.on_bad == on_bad) {
        if let Some(value) = var(variable.name)? {
            (variable.check)(&value).map_err(|e| {
                if on_bad == OnBad::KeepDefault {
                    // The patcher, reading it later, says nothing more.
                    crate::sys::note_bad_setting_reported(variable.name);
                }
                format!("{}: {e}", shown(variable, &value))
            })?;
        }
    }
    Ok(())
}

/// `FNTRACE_FILTER` and `fntrace_set_filter`: parses a comma-separated list of globs: `glob` includes, `!glob`
/// excludes; spaces around items are ignored. An empty list selects every
/// function.
pub(crate) fn parse_globs(globs: &str) -> Result<Filter, Error> {
    let mut filter = Filter::new();
    if globs.trim().is_empty() {
        return Ok(filter);
    }
    for (n, item) in globs.split(',').enumerate() {
        let item = item.trim();
        let (exclude, glob) = match item.strip_prefix('!') {
            Some(glob) => (true, glob.trim()),
            None => (false, item),
        };
        if glob.is_empty() {
            return Err(Error::BadFilter(format!(
                "item {} of {globs:?} is an empty glob",
                n + 1
            )));
        }
        // Inner spaces are a name's own: `<a::F as core::future::future::Future>::poll`.
        if let Some(c) = glob.chars().find(|c| c.is_control()) {
            return Err(Error::BadFilter(format!(
                "glob {glob:?} contains {c:?}; function names have no control characters"
            )));
        }
        filter = if exclude {
            filter.exclude(glob)
        } else {
            filter.include(glob)
        };
    }
    Ok(filter)
}

/// Rows of the latency table `FNTRACE_REPORT=1` prints at exit and live
/// control's `report` sends.
pub(crate) const REPORT_ROWS: usize = 50;

/// `FNTRACE`: the tracer names (not checked against the registered ones:
/// start-up does that once the tracers are registered).
pub(crate) fn parse_tracers(value: &str) -> Result<Vec<String>, String> {
    Ok(value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect())
}

/// `FNTRACE_FILTER`.
pub(crate) fn parse_filter(value: &str) -> Result<Filter, String> {
    parse_globs(value).map_err(|e| e.to_string())
}

/// `FNTRACE_PATCH_FUNCTIONS`: comma-separated globs (`*`, `?`), none
/// empty; no `!` (it selects functions to patch, it excludes nothing).
pub(crate) fn parse_patch_functions(value: &str) -> Result<Vec<String>, String> {
    value
        .split(',')
        .map(str::trim)
        .map(|glob| match glob {
            "" => Err("an empty glob".to_string()),
            _ if glob.starts_with('!') => Err(format!("{glob}: `!` excludes nothing here")),
            _ => Ok(glob.to_string()),
        })
        .collect()
}

/// `FNTRACE_ARGS` (`kind`: arguments) and `FNTRACE_RETVAL` (return
/// values): uftrace's `-A` and `-R` specs, several joined by `;`.
pub(crate) fn parse_arg_specs(value: &str, kind: SpecKind) -> Result<Vec<FunctionSpec>, String> {
    argspec::parse(value, kind)
}

/// `FNTRACE_DEPTH`.
pub(crate) fn parse_depth(value: &str) -> Result<u16, String> {
    value
        .trim()
        .parse()
        .map_err(|_| "not a depth (a whole number from 0 to 65535)".to_string())
}

/// `FNTRACE_REPORT`, `FNTRACE_APPEND`: `1` on; `0` or empty off.
pub(crate) fn parse_flag(value: &str) -> Result<bool, String> {
    match value {
        "" | "0" => Ok(false),
        "1" => Ok(true),
        _ => Err("use 1 (or 0)".to_string()),
    }
}

/// `FNTRACE_LIBCALL`: `1` the executable's library calls, `nested` the
/// libraries' too; `0` or empty none (unset: the default, decided at
/// start-up).
pub(crate) fn parse_libcall(value: &str) -> Result<Option<crate::control::LibcallScope>, String> {
    match value {
        "" | "0" => Ok(None),
        "1" => Ok(Some(crate::control::LibcallScope::Executable)),
        "nested" => Ok(Some(crate::control::LibcallScope::Nested)),
        _ => Err("use 1, nested (or 0)".to_string()),
    }
}

/// `FNTRACE_MODE`: `lossless` or `drop`.
pub(crate) fn parse_mode(value: &str) -> Result<crate::record::RecordMode, String> {
    value.trim().parse()
}

/// `FNTRACE_BUFFER`: a thread buffer's size, in events (256 bytes to 64 GiB).
pub(crate) fn parse_buffer_events(value: &str) -> Result<usize, String> {
    let event = crate::record::RECORD_EVENT_BYTES as u64;
    let bytes = parse_size(value, 16 * event)?;
    if bytes > 64 << 30 {
        return Err("at most 64G".to_string());
    }
    Ok((bytes / event) as usize)
}

/// `FNTRACE_MEMORY`: the lossless buffers' memory budget in bytes (16
/// bytes to 1 TiB; whether it holds a buffer is checked when the
/// recording starts, against `FNTRACE_BUFFER`).
pub(crate) fn parse_memory_bytes(value: &str) -> Result<usize, String> {
    let bytes = parse_size(value, crate::record::RECORD_EVENT_BYTES as u64)?;
    if bytes > 1 << 40 {
        return Err("at most 1T".to_string());
    }
    Ok(bytes as usize)
}

/// `FNTRACE_FLIGHT`: the window's budget in bytes (16 bytes to 4 GiB,
/// [`MAX_FLIGHT_BUDGET_BYTES`](crate::flight::MAX_FLIGHT_BUDGET_BYTES)).
pub(crate) fn parse_flight_budget(value: &str) -> Result<usize, String> {
    let bytes = parse_size(value, crate::flight::FLIGHT_EVENT_BYTES as u64)?;
    let most = crate::flight::MAX_FLIGHT_BUDGET_BYTES;
    match usize::try_from(bytes) {
        Ok(bytes) if bytes <= most => Ok(bytes),
        _ => Err(format!(
            "{bytes} bytes is over the flight window's limit, 4G ({most} bytes)"
        )),
    }
}

/// `FNTRACE_FLIGHT_RATE`: snapshots per minute, at least 1.
pub(crate) fn parse_rate(value: &str) -> Result<u32, String> {
    value
        .parse()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| "not a number of snapshots per minute (a whole number, at least 1)".into())
}

/// `FNTRACE_FUTURES_SLOTS`: the runtime future linker's slots, 64 to 2^24.
pub(crate) fn parse_futures_slots(value: &str) -> Result<usize, String> {
    value
        .parse()
        .ok()
        .filter(|n| (64..=1 << 24).contains(n))
        .ok_or_else(|| "not a number of slots (a whole number from 64 to 16777216)".into())
}

/// What makes the flight recorder write a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TriggerSpec {
    /// A call of a function matching the glob lasting at least this long;
    /// its snapshot holds these threads (`@trigger-thread`: its own).
    Slow(String, Duration, crate::flight::SnapshotThreads),
    /// A Rust panic.
    Panic,
    /// A signal, by number.
    Signal(i32),
}

/// One trigger: `GLOB>DURATION` (`@trigger-thread` after it: its snapshot
/// holds only the slow call's thread), `panic` or a signal name
/// (`SIGUSR1`).
pub(crate) fn parse_trigger(item: &str) -> Result<TriggerSpec, String> {
    let item = item.trim();
    if item == "panic" {
        return Ok(TriggerSpec::Panic);
    }
    // The last '>': a name may hold some (`<a::F as b::T>::poll>4ms`), a
    // duration none.
    if let Some((glob, duration)) = item.rsplit_once('>') {
        let glob = glob.trim();
        if glob.is_empty() {
            return Err(format!("{item:?}: no function glob before '>'"));
        }
        if let Some(c) = glob.chars().find(|c| c.is_control()) {
            return Err(format!(
                "glob {glob:?} contains {c:?}; function names have no control characters"
            ));
        }
        let (duration, threads) = match duration.split_once('@') {
            None => (duration, crate::flight::SnapshotThreads::All),
            Some((duration, "trigger-thread")) => {
                (duration, crate::flight::SnapshotThreads::Trigger)
            }
            Some((_, other)) => {
                return Err(format!(
                    "{item:?}: @{other} is not a snapshot's threads (only @trigger-thread: the \
                     slow call's thread alone; nothing: every thread)"
                ))
            }
        };
        let ns = parse_duration_ns(duration.trim()).map_err(|e| format!("{item:?}: {e}"))?;
        return Ok(TriggerSpec::Slow(
            glob.to_string(),
            Duration::from_nanos(ns),
            threads,
        ));
    }
    if item.starts_with("SIG") {
        if let Some(signo) = (1..=64).find(|&n| crate::sys::signal::name(n) == item) {
            // A flag-setting handler on a fault (SIGSEGV ...) would return
            // to the faulting instruction forever; SIGUSR2 stops threads
            // for fntrace's patching.
            let allowed = signo == libc::SIGUSR1
                || signo == libc::SIGHUP
                || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signo);
            return match allowed {
                true => Ok(TriggerSpec::Signal(signo)),
                false => Err(format!(
                    "{item} cannot trigger a snapshot (use SIGUSR1, SIGHUP or a real-time \
                     signal: SIGUSR2 is fntrace's stop signal, others end or stop the program)"
                )),
            };
        }
    }
    Err(format!(
        "{item:?} is not a trigger (GLOB>DURATION such as handle_*>5ms, panic, or a signal \
         name such as SIGUSR1)"
    ))
}

/// `FNTRACE_FLIGHT_TRIGGER`: a comma list of triggers, at least one.
pub(crate) fn parse_triggers(value: &str) -> Result<Vec<TriggerSpec>, String> {
    let triggers = value
        .split(',')
        .map(parse_trigger)
        .collect::<Result<Vec<_>, _>>()?;
    if triggers.is_empty() || value.trim().is_empty() {
        return Err("no trigger (GLOB>DURATION, panic, SIGNAME)".to_string());
    }
    Ok(triggers)
}

/// `FNTRACE_CONTROL`: the socket to serve, `None` for none. `1` is the
/// default path; otherwise an absolute path (a relative one would be
/// taken from whatever directory the program starts in, and a word such
/// as `yes` made a socket of that name there).
pub(crate) fn parse_control(value: &str) -> Result<Option<PathBuf>, String> {
    match value {
        "" | "0" => Ok(None),
        "1" => Ok(Some(fntrace_format::wire::own_control_socket_path())),
        path if path.starts_with('/') => Ok(Some(PathBuf::from(path))),
        _ => Err(
            "use 1 (the default socket, /tmp/fntrace-UID/PID.sock), an absolute path, \
             or 0 (none)"
                .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests;
