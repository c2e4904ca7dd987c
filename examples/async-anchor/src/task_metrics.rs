//! `ANCHOR_TASK_METRICS=FILE`: each request's task runs under a
//! `tokio_metrics::TaskMonitor` of its own, and at exit FILE gets every
//! monitor's cumulative figures and its future's address, one `task` line
//! each, and the figures' sum (a `total` line: what one monitor shared by
//! all the tasks would count). The figures fntrace's async rows are
//! compared with (`tools/tests/command/async_tokio_metrics.rs`). Unset, requests
//! are spawned exactly as without this module.
//!
//! The monitor's wrapper (`Instrumented`) is the task's future, around the
//! request's future boxed; each of its polls times one poll of `serve`'s
//! state machine, so its polls and fntrace's polls of
//! `serve::{closure#0}` are one-to-one.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock};

use tokio::task::JoinHandle;
use tokio_metrics::{TaskMetrics, TaskMonitor};

/// The output file and the monitors so far, each with its future's
/// address, when the variable is set.
struct Monitors {
    path: String,
    monitors: Mutex<Vec<(usize, TaskMonitor)>>,
}

/// Read once, at the first request (or at exit if there was none).
fn monitors() -> Option<&'static Monitors> {
    static MONITORS: OnceLock<Option<Monitors>> = OnceLock::new();
    MONITORS
        .get_or_init(|| {
            let path = std::env::var("ANCHOR_TASK_METRICS").ok()?;
            Some(Monitors {
                path,
                monitors: Mutex::new(Vec::new()),
            })
        })
        .as_ref()
}

/// `tokio::spawn(future)`, under a monitor of its own when the variable is
/// set.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let Some(monitors) = monitors() else {
        return tokio::spawn(future);
    };
    let monitor = TaskMonitor::new();
    // Polled through its vtable: at opt-level 3 LLVM inlines `serve`'s
    // resume function into the monitor's small poll, where fntrace sees no
    // call of it (a function inlined has no call site).
    let boxed: Pin<Box<dyn Future<Output = F::Output> + Send>> = Box::pin(future);
    // Where the future lives: its polls' first argument, the address
    // fntrace links them by (the test pairs tasks and futures with it).
    let address = (&*boxed as *const dyn Future<Output = F::Output>).cast::<()>() as usize;
    let task = monitor.instrument(boxed);
    monitors.monitors.lock().unwrap().push((address, monitor));
    tokio::spawn(task)
}

/// The figures compared, as `key value` pairs (durations in ns).
fn figures(m: &TaskMetrics) -> [(&'static str, u64); 11] {
    let ns = |d: std::time::Duration| d.as_nanos() as u64;
    [
        ("instrumented", m.instrumented_count),
        ("dropped", m.dropped_count),
        ("first_polls", m.first_poll_count),
        ("first_poll_delay_ns", ns(m.total_first_poll_delay)),
        ("polls", m.total_poll_count),
        ("poll_ns", ns(m.total_poll_duration)),
        ("slow_polls", m.total_slow_poll_count),
        ("idled", m.total_idled_count),
        ("idle_ns", ns(m.total_idle_duration)),
        ("scheduled", m.total_scheduled_count),
        ("scheduled_ns", ns(m.total_scheduled_duration)),
    ]
}

/// Writes the monitors' figures to the variable's file (when set): one
/// `task` line per request, in the order spawned (its future's address
/// first: `future_address`), then `total`.
pub fn write() {
    let Some(monitors) = monitors() else {
        return;
    };
    let mut text = String::new();
    // Every figure is a count or a sum: the total is their sum.
    let mut total = [0u64; 11];
    for (address, monitor) in monitors.monitors.lock().unwrap().iter() {
        write!(text, "task future_address {address}").unwrap();
        for (i, (key, value)) in figures(&monitor.cumulative()).into_iter().enumerate() {
            write!(text, " {key} {value}").unwrap();
            total[i] += value;
        }
        text.push('\n');
    }
    text.push_str("total");
    let keys = figures(&TaskMetrics::default()).map(|(key, _)| key);
    for (key, value) in keys.iter().zip(total) {
        write!(text, " {key} {value}").unwrap();
    }
    text.push('\n');
    std::fs::write(&monitors.path, text)
        .unwrap_or_else(|e| panic!("ANCHOR_TASK_METRICS={}: {e}", monitors.path));
}
