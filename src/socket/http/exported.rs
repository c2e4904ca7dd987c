//! What the metrics endpoint exports beyond its connections: its options
//! from the `FNTRACE_METRICS_*` variables, the filter `fntrace ctl PID
//! metrics-filter` sets while the program runs, and the process lines
//! (`fntrace_build_info`, `fntrace_process_threads`).

use super::MetricsOptions;
use crate::socket::Reply;
use crate::vars;
use fntrace_format::analysis::ProcessInfo;

/// The options `FNTRACE_METRICS_*` ask for (each checked already).
pub(crate) fn options_from_env() -> Result<MetricsOptions, String> {
    let mut options = MetricsOptions::default();
    if let Some(value) = vars::var("FNTRACE_METRICS_PUBLIC")? {
        options.public = vars::parse_flag(&value)?;
    }
    if let Some(value) = vars::var("FNTRACE_METRICS_MAX_FUNCTIONS")? {
        options.max_functions = vars::parse_max_functions(&value)?;
    }
    if let Some(value) = vars::var("FNTRACE_METRICS_HISTOGRAMS")? {
        options.histograms = vars::parse_histograms(&value)?;
    }
    if let Some(value) = vars::var("FNTRACE_METRICS_BUCKETS_PER_DOUBLING")? {
        options.buckets_per_doubling = vars::parse_buckets_per_doubling(&value)?;
    }
    if let Some(value) = vars::var("FNTRACE_METRICS_FILTER")? {
        options.filter = vars::parse_metrics_filter(&value)?;
    }
    if let Some(value) = vars::var("FNTRACE_METRICS_NAMES")? {
        options.full_names = vars::parse_names(&value)?;
    }
    let token = vars::var("FNTRACE_METRICS_TOKEN")?;
    let file = vars::var("FNTRACE_METRICS_TOKEN_FILE")?;
    options.token = match (token, file) {
        (Some(_), Some(_)) => {
            return Err(
                "FNTRACE_METRICS_TOKEN and FNTRACE_METRICS_TOKEN_FILE are both set: \
                        use one"
                    .to_string(),
            )
        }
        (Some(token), None) => Some(vars::parse_token(&token)?),
        (None, Some(path)) => {
            let read = vars::parse_token_file(&path).and_then(|p| vars::read_token_file(&p));
            Some(read.map_err(|e| format!("FNTRACE_METRICS_TOKEN_FILE={path}: {e}"))?)
        }
        (None, None) => None,
    };
    Ok(options)
}

/// The filter `fntrace ctl PID metrics-filter` set, which replaces every
/// endpoint's [`MetricsOptions::filter`] until it is cleared (`None`).
/// Read by the metrics thread once a scrape, set by the control thread.
static LIVE_FILTER: parking_lot::Mutex<Option<Vec<String>>> = parking_lot::Mutex::new(None);

/// The live filter, if one is set.
pub(super) fn live_filter() -> Option<Vec<String>> {
    LIVE_FILTER.lock().clone()
}

/// `metrics-filter GLOBS` (`Some`) or `metrics-filter --clear` (`None`).
pub(crate) fn set_metrics_filter(globs: Option<&str>) -> Reply {
    let Some(globs) = globs else {
        *LIVE_FILTER.lock() = None;
        return Reply::ok(
            "metrics-filter cleared: /metrics exports what FNTRACE_METRICS_FILTER selects \
             (every function without it)",
        );
    };
    // `*` alone: every function, as for the trace filter.
    let parsed = match globs.trim() {
        "*" => Ok(Vec::new()),
        globs => vars::parse_metrics_filter(globs),
    };
    match parsed {
        Ok(filter) => {
            *LIVE_FILTER.lock() = Some(filter);
            Reply::ok(format!(
                "metrics-filter {globs}: /metrics exports the functions these select"
            ))
        }
        Err(e) => Reply::error(format!("metrics-filter {globs}: {e}")),
    }
}

/// This process as `fntrace_build_info` and `fntrace_process_threads`
/// describe it: the threads alive now, read from `/proc/self/task`
/// (the profile counts every thread that ever made a traced call).
pub(super) fn process_info() -> ProcessInfo {
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |tasks| tasks.count() as u64);
    let exe = std::env::current_exe()
        .ok()
        .and_then(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    ProcessInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        exe,
        threads,
    }
}
