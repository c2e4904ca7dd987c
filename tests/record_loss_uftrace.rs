//! A drop-mode recording that loses most events, read by uftrace 0.13:
//! `uftrace graph` must not crash, `uftrace report` must give no time
//! longer than the recording and the call counts fntrace's reader gives,
//! and `uftrace replay` must show the gaps. Its own process: buffer sizes
//! are set for rings made from now on.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{call_counts, read_trace_dir, temp_dir, uftrace};
use fntrace::{Filter, RecordMode, RecordOptions};
use fntrace_fixtures::c_pie;

/// A `uftrace report` time (`730.509 ms`, `1.019 h`) in nanoseconds.
fn report_ns(value: &str, unit: &str) -> f64 {
    let value: f64 = value
        .parse()
        .unwrap_or_else(|_| panic!("not a time: {value}"));
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        _ => panic!("not a time unit: {unit}"),
    };
    value * scale
}

/// `uftrace report` rows: function → (total ns, self ns, calls). A time
/// of zero is printed blank.
fn uftrace_report(dir: &std::path::Path) -> HashMap<String, (f64, f64, u64)> {
    let text = uftrace(&["report", "--no-pager"], dir);
    let mut rows = HashMap::new();
    for line in text.lines().skip(2) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [times @ .., calls, function] = &words[..] else {
            continue;
        };
        let times: Vec<f64> = times
            .chunks(2)
            .map(|pair| report_ns(pair[0], pair.get(1).copied().unwrap_or("")))
            .collect();
        // Two blank columns: zeros; one: which it is cannot be told, the
        // larger is kept for both (only upper bounds are checked).
        let (total, own) = match times[..] {
            [total, own] => (total, own),
            [one] => (one, one),
            _ => (0.0, 0.0),
        };
        let calls = calls.parse().unwrap_or_else(|_| panic!("row {line:?}"));
        rows.insert(function.to_string(), (total, own, calls));
    }
    rows
}

#[test]
fn uftrace_reads_a_recording_with_gaps_sanely() {
    const N: i64 = 200_000; // run(N) per thread: 1,000,001 calls
    let dir = temp_dir("loss-uftrace");
    // Rings of 4,096 events: two CPU-bound threads fill them between two
    // drains many times over, so the trace has gaps inside deep calls.
    let options = RecordOptions {
        drain_interval: Duration::from_millis(20),
        buffer_events: 4096,
        mode: RecordMode::Drop,
        ..RecordOptions::default()
    };
    let started = Instant::now();
    let recording =
        fntrace::record_with("graph", &Filter::new().include("pie_*"), &dir, &options).unwrap();
    let threads: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(|| std::hint::black_box(c_pie::run(N))))
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let report = recording.stop().unwrap();
    let duration_ns = started.elapsed().as_nanos() as f64;
    assert!(report.lost > 0, "{report:?}");

    let trace = read_trace_dir(&dir);
    assert!(trace.lost() > 0, "no lost record written");

    // Crashed with SIGSEGV (exit 139) when calls were open at a lost record.
    let graph = uftrace(&["graph", "--no-pager"], &dir);
    assert!(graph.contains("pie_run"), "{graph}");

    // uftrace counts every call whose entry it read (ended by its exit, by
    // the made-up exit at a gap, or by the end of the file): fntrace's
    // reader's entries.
    let rows = uftrace_report(&dir);
    let counts = call_counts(&trace);
    for (function, &(entries, _exits)) in &counts {
        let Some(&(total, own, calls)) = rows.get(function) else {
            panic!("uftrace report has no {function}: {rows:?}");
        };
        assert_eq!(
            calls, entries,
            "{function}: uftrace {rows:?}, fntrace {counts:?}"
        );
        assert!(
            total <= duration_ns && own <= duration_ns,
            "{function}: total {total} ns, self {own} ns in a recording of {duration_ns} ns: \
             {rows:?}"
        );
    }
    assert_eq!(rows.len(), counts.len(), "{rows:?} {counts:?}");

    // uftrace's replay shows a lost record outside every user function
    // only with --kernel-full (its default, --kernel-skip-out, hides it);
    // at a gap every call has been closed.
    let replay = uftrace(&["replay", "--no-pager", "--kernel-full"], &dir);
    assert!(replay.contains("LOST"), "uftrace replay shows no loss");
    let _ = std::fs::remove_dir_all(&dir);
}
