//! Buffers nobody reads (found by the chaos benchmark): the
//! `function` tracer enabled where nothing takes its events (a C service,
//! the control socket) kept every exited thread's buffer, and its pages,
//! for ever; and while a recording ran, each thread that exited waited
//! 2 s for the recording's writer to drain those buffers, which it never
//! does (it drains the graph tracer's). Real `-pg` code (`c_pie`), real
//! threads.

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{call_counts, read_trace_dir, temp_dir};
use fntrace::{Filter, FUNCTION_TRACER};
use fntrace_fixtures::c_pie;

static SERIAL: Mutex<()> = Mutex::new(());

/// `c_pie::run(N)`: 1 + 5 × N traced calls.
const N: i64 = 10;
const CALLS: usize = 1 + 5 * N as usize;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    FUNCTION_TRACER.take_events();
    guard
}

/// Runs `threads` threads one after another, each making `CALLS` traced
/// calls.
fn churn(threads: usize) {
    for _ in 0..threads {
        std::thread::spawn(|| std::hint::black_box(c_pie::run(N)))
            .join()
            .unwrap();
    }
}

#[test]
fn exited_threads_buffers_nobody_reads_are_reused_and_counted_lost() {
    let _serial = serial();
    let threads = 300;
    let lost_before = FUNCTION_TRACER.lost_events();
    fntrace::enable_with("function", &Filter::new().include("pie_*")).unwrap();
    churn(threads);
    fntrace::disable("function").unwrap();
    let taken = FUNCTION_TRACER.take_events().len();
    let lost = (FUNCTION_TRACER.lost_events() - lost_before) as usize;
    // Every event is either read or counted lost, whole threads at a time.
    assert_eq!(taken + lost, threads * CALLS);
    assert_eq!(taken % CALLS, 0, "{taken}");
    // At most 64 exited threads' buffers wait for a reader, plus the one
    // of the last thread (it took the 65th's place).
    assert!(
        taken <= 65 * CALLS,
        "{taken} events kept of {threads} threads"
    );
    assert!(
        taken >= 64 * CALLS,
        "{taken} events kept of {threads} threads"
    );
}

#[test]
fn threads_exiting_during_a_recording_do_not_wait_for_buffers_it_does_not_read() {
    let _serial = serial();
    let threads = 120;
    let dir = temp_dir("unread-buffers");
    let filter = Filter::new().include("pie_*");
    let recording = fntrace::record("graph", &filter, &dir).expect("record");
    fntrace::enable_with("function", &filter).unwrap();
    let started = Instant::now();
    churn(threads);
    let took = started.elapsed();
    fntrace::disable("function").unwrap();
    let report = recording.stop().expect("stop");
    assert_eq!(report.lost, 0);
    // Before, each of the threads after the 33rd waited 2 s at its exit
    // (≈ 175 s); a thread's work here takes microseconds.
    assert!(
        took < Duration::from_secs(30),
        "{threads} threads took {took:?}"
    );
    let counts = call_counts(&read_trace_dir(&dir));
    let calls = |name: &str| counts.get(name).copied().unwrap_or_default();
    assert_eq!(calls("pie_run"), (threads as u64, threads as u64));
    let mids = (threads * N as usize) as u64;
    assert_eq!(calls("pie_mid"), (mids, mids));
    assert_eq!(calls("pie_leaf"), (4 * mids, 4 * mids));
    let _ = std::fs::remove_dir_all(&dir);
}
