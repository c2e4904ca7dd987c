//! The streaming recorder (`fntrace::record`): exact counts over a
//! recording that drains many times, read back by fntrace and by the real
//! `uftrace report`; a process killed mid-recording leaves a readable
//! directory; 10,000 short-lived threads are all recorded with a few
//! buffers reused; a forked child starts with none of the parent's events.

#[macro_use]
mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{call_counts, expected_c_mid, read_trace_dir, temp_dir, uftrace_calls};
use fntrace::{Filter, GRAPH_TRACER};
use fntrace_fixtures::c_pie;

/// One recording at a time per process: the tests of this file take turns.
static ONE_RECORDING: Mutex<()> = Mutex::new(());

fn pie_filter() -> Filter {
    Filter::new().include("pie_*")
}

#[test]
fn two_threads_recorded_over_many_drains_with_exact_counts() {
    let _turn = ONE_RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    const ROUNDS: i64 = 300;
    const N: i64 = 200; // run(N): 1 + 5N calls
    let dir = temp_dir("record-exact");
    let recording = fntrace::record("graph", &pie_filter(), &dir).unwrap();
    // Spread over ≥ ROUNDS ms: the writer drains it many times.
    common::paced_c_runs(2, ROUNDS, N);
    let report = recording.stop().unwrap();
    let calls = (2 * ROUNDS * (1 + 5 * N)) as u64;
    assert_eq!(report.lost, 0, "{report:?}");
    assert_eq!(report.events, 2 * calls, "{report:?}");
    assert_eq!(report.threads, 2);
    assert_eq!(report.bytes, 16 * 2 * calls);

    let counts = call_counts(&read_trace_dir(&dir));
    let runs = 2 * ROUNDS as u64;
    assert_eq!(counts["pie_run"], (runs, runs));
    assert_eq!(counts["pie_mid"], (runs * N as u64, runs * N as u64));
    assert_eq!(
        counts["pie_leaf"],
        (4 * runs * N as u64, 4 * runs * N as u64)
    );
    assert_eq!(counts.len(), 3, "{counts:?}");

    let uftrace = uftrace_calls(&dir);
    assert_eq!(uftrace.get("pie_run"), Some(&runs));
    assert_eq!(uftrace.get("pie_mid"), Some(&(runs * N as u64)));
    assert_eq!(uftrace.get("pie_leaf"), Some(&(4 * runs * N as u64)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_recording_is_refused_and_a_bad_tracer_named() {
    let _turn = ONE_RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = temp_dir("record-twice");
    let first = fntrace::record("graph", &pie_filter(), &dir).unwrap();
    let second = fntrace::record("graph", &pie_filter(), temp_dir("record-twice-b"));
    assert!(
        matches!(&second, Err(fntrace::Error::Recording(why)) if why.contains("running already")),
        "{:?}",
        second.err()
    );
    c_pie::mid(1);
    let report = first.stop().unwrap();
    assert_eq!(report.events, 10);
    let function = fntrace::record("function", &pie_filter(), temp_dir("record-function"));
    assert!(
        matches!(&function, Err(fntrace::Error::Recording(why)) if why.contains("\"function\"")),
        "{:?}",
        function.err()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ten_thousand_short_lived_threads_are_all_recorded_in_reused_buffers() {
    let _turn = ONE_RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    const THREADS: usize = 10_000;
    const AT_ONCE: usize = 8;
    let dir = temp_dir("record-churn");
    let buffers_before = GRAPH_TRACER.buffers_made();
    let recording = fntrace::record("graph", &pie_filter(), &dir).unwrap();
    let mut wrong = 0;
    let mut tids = std::collections::HashSet::new();
    for batch in 0..THREADS / AT_ONCE {
        let threads: Vec<_> = (0..AT_ONCE)
            .map(|i| {
                let x = (batch * AT_ONCE + i) as i64;
                std::thread::spawn(move || {
                    (c_pie::mid(x) == expected_c_mid(x), fntrace::current_tid())
                })
            })
            .collect();
        for (right, tid) in threads_join(threads) {
            wrong += usize::from(!right);
            tids.insert(tid);
        }
        if batch % 50 == 49 {
            // The writer frees the buffers of exited threads when it drains
            // them (the second drain that finds one idle): let it, however
            // busy the machine is.
            let drains = recording.drains();
            while recording.drains() < drains + 2 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let report = recording.stop().unwrap();
    assert_eq!(wrong, 0);
    assert_eq!(report.lost, 0, "{report:?}");
    let trace = read_trace_dir(&dir);
    // Threads whose file does not hold exactly one thread's 10 events, and
    // test threads with no file: what went where, if anything did.
    let odd: Vec<(u32, usize)> = trace
        .threads
        .iter()
        .filter(|t| t.events.len() != 10 && tids.contains(&t.tid))
        .map(|t| (t.tid, t.events.len()))
        .collect();
    let missing: Vec<&u32> = tids
        .iter()
        .filter(|tid| !trace.threads.iter().any(|t| t.tid == **tid))
        .collect();
    // The kernel may give a tid again (pid_max is 32,768 on some machines):
    // one file per tid.
    assert_eq!(
        report.threads,
        tids.len(),
        "{report:?}; files of test threads with other than 10 events: {odd:?}; \
         test threads with no file: {missing:?}"
    );
    assert_eq!(report.events, (THREADS * 10) as u64);
    let made = GRAPH_TRACER.buffers_made() - buffers_before;
    assert!(
        made <= 3 * 50 * AT_ONCE,
        "{made} buffers made for {THREADS} threads, at most {AT_ONCE} alive at once, \
         the writer draining twice every {} threads",
        50 * AT_ONCE
    );
    let counts = call_counts(&trace);
    assert_eq!(counts["pie_mid"], (THREADS as u64, THREADS as u64));
    assert_eq!(counts["pie_leaf"], (4 * THREADS as u64, 4 * THREADS as u64));
    let _ = std::fs::remove_dir_all(&dir);
}

fn threads_join<T>(threads: Vec<std::thread::JoinHandle<T>>) -> Vec<T> {
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}
