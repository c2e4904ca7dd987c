//! `fntrace record --async` and `fntrace report`'s async rows, checked
//! against an anchor: `examples/async-anchor`, built as a user would
//! (`fntrace cargo build --release`, with full debug info), serves requests
//! that are each their own tokio task (`serve`: STEPS sleeps with CPU work
//! after each), and its client times every request from spawn to answer.
//! fntrace's per-future latency p50/p99 must be within 10 % of the
//! client's, the futures completed and their polls exact (STEPS + 1 a
//! request: one Pending per sleep), busy below latency; and on the
//! multi-thread runtime some future's polls ran on two threads and it is
//! still one future.

mod common;
mod profile_program;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::TempDir;
use fntrace_tools::export::UftraceReader;
use fntrace_tools::{EventKind, EventSource};

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

/// The instrumented release build of the anchor (built once per run).
fn anchor() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        // --async reads the state machines' layout from DWARF.
        let envs = [("CARGO_PROFILE_RELEASE_DEBUG", "2")];
        common::instrumented_release("async-anchor", &envs).join("async-anchor")
    })
}

/// What one recorded run gave: the client's latencies (ns) and the
/// report's text.
struct Run {
    client: Vec<u64>,
    report: String,
    /// serve's polls: (entry time, thread, future address, state at entry).
    polls: Vec<(u64, u32, String, u64)>,
}

/// Runs the anchor with `args` under `fntrace record --async`.
fn record(tag: &str, args: &[&str]) -> Run {
    let dir = TempDir::new(tag);
    let data = dir.0.join("data");
    let output = Command::new(CLI)
        .arg("record")
        .arg("--lib")
        .arg(profile_program::library())
        .arg("-o")
        .arg(&data)
        .arg("--async")
        .arg("--")
        .arg(anchor())
        .args(args)
        .output()
        .expect("running fntrace record");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "fntrace record --async failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let client: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("latency_ns "))
        .map(|v| v.parse().unwrap())
        .collect();
    let show = |command: &str| {
        let out = Command::new(CLI)
            .args([command, "--no-pager"])
            .arg(&data)
            .output()
            .expect("running fntrace");
        assert!(out.status.success(), "fntrace {command}: {:?}", out);
        String::from_utf8(out.stdout).unwrap()
    };
    Run {
        client,
        report: show("report"),
        polls: serve_polls(&data),
    }
}

/// serve's polls in the recording at `data`, read with fntrace-tools'
/// reader: (entry time, thread, future address, state at entry).
fn serve_polls(data: &Path) -> Vec<(u64, u32, String, u64)> {
    let reader = UftraceReader::open(data).expect("reading the recording");
    let mut polls = Vec::new();
    for (index, thread) in reader.threads().iter().enumerate() {
        let values = reader.values_of(index).unwrap();
        let serve: Vec<u64> = reader
            .read_thread(index, |events| {
                events
                    .filter(|e| {
                        e.kind == EventKind::Entry
                            && reader.name_of(e.function) == "async_anchor::serve::{closure#0}"
                    })
                    .map(|e| e.time_ns)
                    .collect()
            })
            .unwrap()
            .0;
        for time in serve {
            let text = &values[&(time, false)];
            let (address, state) = text
                .strip_prefix('(')
                .and_then(|t| t.strip_suffix(')'))
                .and_then(|t| t.split_once(", "))
                .unwrap_or_else(|| panic!("serve's values: {text}"));
            polls.push((
                time,
                thread.tid,
                address.to_string(),
                state.parse().unwrap(),
            ));
        }
    }
    polls.sort();
    polls
}

/// A duration as the report prints it (`45.5 ms`, `253 µs`, `1.84 s`).
fn ns(text: &str) -> f64 {
    let (value, unit) = text.split_once(' ').expect("a value and a unit");
    let value: f64 = value.parse().unwrap();
    value
        * match unit {
            "ns" => 1.0,
            "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            other => panic!("unit {other}"),
        }
}

/// The async row of `function`: futures, polls, total, p50, p99, busy,
/// waiting (durations in ns).
fn row(report: &str, function: &str) -> (u64, u64, [f64; 5]) {
    let after = report
        .split("# async: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no async rows in:\n{report}"));
    let line = after
        .lines()
        .find(|l| l.ends_with(&format!("  {function}")))
        .unwrap_or_else(|| panic!("no row of {function} in:\n{after}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let d = |i: usize| ns(&format!("{} {}", words[i], words[i + 1]));
    (
        words[0].parse().unwrap(),
        words[1].parse().unwrap(),
        [d(2), d(4), d(6), d(8), d(10)],
    )
}

/// Nearest-rank percentile of `values`, as the report computes it.
fn rank(values: &[u64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let at = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at] as f64
}

fn within_10_percent(what: &str, fntrace: f64, client: f64) {
    let off = (fntrace - client).abs() / client;
    assert!(
        off <= 0.10,
        "{what}: fntrace {fntrace} ns, client {client} ns ({:.1} % apart)",
        off * 100.0
    );
}

/// Checks one run's `serve` and `client` rows: `requests` futures of
/// `steps + 1` polls each, `slots` clients of `requests / slots + 1`.
fn check(run: &Run, requests: u64, slots: u64, steps: u64) {
    assert_eq!(run.client.len() as u64, requests, "the client's answers");
    let (futures, polls, [total, p50, p99, busy, waiting]) =
        row(&run.report, "async_anchor::serve::{closure#0}");
    assert_eq!(
        futures, requests,
        "serve futures completed:\n{}",
        run.report
    );
    assert_eq!(
        polls,
        requests * (steps + 1),
        "serve polls:\n{}",
        run.report
    );
    within_10_percent("serve p50", p50, rank(&run.client, 0.5));
    within_10_percent("serve p99", p99, rank(&run.client, 0.99));
    assert!(busy > 0.0 && busy < total, "busy {busy} of {total}");
    // Rounded as shown (3 significant digits).
    assert!(
        (total - busy - waiting).abs() <= total * 0.01,
        "waiting {waiting}"
    );
    // A client awaits its requests one at a time: one poll to start, one
    // per answer.
    let (clients, client_polls, _) = row(&run.report, "async_anchor::client::{closure#0}");
    assert_eq!(clients, slots, "client futures:\n{}", run.report);
    assert_eq!(client_polls, slots * (requests / slots + 1));
    assert!(
        !run.report.contains("pending at the end") && !run.report.contains("dropped"),
        "{}",
        run.report
    );
}

#[test]
fn futures_on_the_current_thread_runtime_match_the_client() {
    let run = record("async-current", &["0", "24", "4", "3", "10"]);
    check(&run, 24, 4, 3);
}

#[test]
fn a_future_polled_on_two_threads_is_one_future() {
    let run = record("async-multi", &["2", "40", "8", "4", "10"]);
    check(&run, 40, 8, 4);
    // Group the polls by future: a new one starts where the state at the
    // entry is Unresumed (0).
    assert_eq!(run.polls.len(), 40 * 5, "serve polls recorded");
    let mut threads_of: HashMap<&str, HashSet<u32>> = HashMap::new();
    let mut migrated = 0;
    for (_, tid, address, state) in &run.polls {
        if *state == 0 {
            if threads_of
                .get(address.as_str())
                .is_some_and(|t| t.len() > 1)
            {
                migrated += 1;
            }
            threads_of.insert(address, HashSet::new());
        }
        threads_of.get_mut(address.as_str()).unwrap().insert(*tid);
    }
    migrated += threads_of.values().filter(|t| t.len() > 1).count();
    assert!(
        migrated > 0,
        "no future's polls ran on two threads (40 futures on 2 workers)"
    );
}
