//! The flight recorder (`fntrace::flight_record`) with real instrumented
//! fixtures: a large window holds every call exactly; a small one only the
//! newest, evictions counted exactly, exits without entries only for calls
//! that enclose the window; a slow call, a panic and a signal each write
//! one snapshot, read back by fntrace and by the real uftrace; a slow
//! call's snapshot may hold its thread alone.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use common::{
    call_counts as counts, read_trace_dir as read, temp_dir, uftrace as run_uftrace, uftrace_calls,
};
use fntrace::{EventKind, Filter, FlightOptions, Trigger};
use fntrace_fixtures::{c_hazards, c_pie, fixture_rust_workload as rust};

/// One recorder at a time per process: the tests of this file take turns.
static ONE_RECORDER: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_RECORDER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits (up to 10 s) until `flight` reports `n` triggered snapshots.
fn wait_for_triggers(
    flight: &fntrace::FlightRecorder,
    n: usize,
) -> Vec<fntrace::TriggeredSnapshot> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let triggered = flight.triggered();
        if triggered.len() >= n || Instant::now() > deadline {
            return triggered;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn pie_filter() -> Filter {
    Filter::new().include("pie_*")
}

#[test]
fn a_large_window_holds_every_call_of_two_threads_exactly() {
    let _turn = turn();
    const ROUNDS: i64 = 50;
    const N: i64 = 100; // run(N): 1 + 5N calls
    let flight = fntrace::flight_record("graph", &pie_filter(), FlightOptions::default()).unwrap();
    // Spread over ≥ ROUNDS ms: the writer drains it many times.
    common::paced_c_runs(2, ROUNDS, N);
    let dir = temp_dir("flight-large");
    let snapshot = flight.snapshot(&dir).unwrap();
    let runs = 2 * ROUNDS as u64;
    let calls = runs * (1 + 5 * N as u64);
    assert_eq!(snapshot.events, 2 * calls, "{snapshot:?}");
    assert_eq!((snapshot.lost, snapshot.evicted), (0, 0), "{snapshot:?}");
    assert_eq!(snapshot.threads, 2);
    assert!(snapshot.window() > Duration::from_millis(ROUNDS as u64));

    let trace = read(&dir);
    let counts = counts(&trace);
    let n = N as u64;
    assert_eq!(counts["pie_run"], (runs, runs));
    assert_eq!(counts["pie_mid"], (runs * n, runs * n));
    assert_eq!(counts["pie_leaf"], (4 * runs * n, 4 * runs * n));
    assert_eq!(counts.len(), 3, "{counts:?}");
    let uftrace = uftrace_calls(&dir);
    assert_eq!(uftrace.get("pie_run"), Some(&runs));
    assert_eq!(uftrace.get("pie_mid"), Some(&(runs * n)));
    assert_eq!(uftrace.get("pie_leaf"), Some(&(4 * runs * n)));

    // A snapshot takes nothing away: the next one holds the same calls
    // and what came since.
    c_pie::mid(1);
    let again = temp_dir("flight-large-again");
    let second = flight.snapshot(&again).unwrap();
    assert_eq!(second.events, 2 * calls + 10);
    let report = flight.stop().unwrap();
    assert_eq!(
        (report.events, report.evicted, report.lost),
        (2 * calls + 10, 0, 0)
    );
    assert!(report.triggered.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&again);
}

#[test]
fn a_small_window_keeps_only_the_newest_calls_and_counts_evictions() {
    let _turn = turn();
    const BUDGET_EVENTS: u64 = 10_000;
    const OLD: i64 = 1_000;
    const ROUNDS: i64 = 40;
    const N: i64 = 100;
    let options = FlightOptions {
        budget_bytes: BUDGET_EVENTS as usize * fntrace::FLIGHT_EVENT_BYTES,
        ..Default::default()
    };
    let flight = fntrace::flight_record("graph", &pie_filter(), options).unwrap();
    // Both threads' rounds end before either makes its newest call: on a
    // loaded host one thread may otherwise finish while the other has
    // more than a window of rounds left, which evicts the first's end.
    let rounds_done = Arc::new(Barrier::new(2));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let rounds_done = rounds_done.clone();
            std::thread::spawn(move || {
                // The oldest calls: evicted long before the end.
                for i in 0..OLD {
                    std::hint::black_box(c_pie::cold(i));
                }
                for _ in 0..ROUNDS {
                    std::hint::black_box(c_pie::run(N));
                    std::thread::sleep(Duration::from_millis(1));
                }
                rounds_done.wait();
                // The newest call.
                std::hint::black_box(c_pie::many_args(1, 2, 3, 4, 5, 6, 0.5, 2.0));
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let dir = temp_dir("flight-small");
    let snapshot = flight.snapshot(&dir).unwrap();
    let made = 2 * 2 * (OLD + 1 + ROUNDS * (1 + 5 * N)) as u64;
    assert_eq!(snapshot.lost, 0, "{snapshot:?}");
    // Evicted down to the window's three quarters of the budget exactly
    // (no lost markers take room; the last quarter holds what comes in
    // while a snapshot is written).
    assert_eq!(snapshot.events, BUDGET_EVENTS * 3 / 4, "{snapshot:?}");
    assert_eq!(snapshot.evicted, made - snapshot.events, "{snapshot:?}");

    let trace = read(&dir);
    assert_eq!(
        trace
            .threads
            .iter()
            .map(|t| t.events.len() as u64)
            .sum::<u64>(),
        snapshot.events
    );
    let counts = counts(&trace);
    assert_eq!(counts.get("pie_many_args"), Some(&(2, 2)), "{counts:?}");
    assert_eq!(counts.get("pie_cold"), None, "{counts:?}");
    for thread in &trace.threads {
        // The newest event is the thread's last call's exit.
        let last = thread.events.last().unwrap();
        assert_eq!(trace.name_of(last.function), "pie_many_args");
        assert_eq!(last.kind, EventKind::Exit);
        // An exit whose entry was evicted belongs to a call that encloses
        // everything before it in the window.
        let mut open: Vec<(u16, usize)> = Vec::new();
        for event in &thread.events {
            match event.kind {
                EventKind::Entry => open.push((event.depth, event.function)),
                EventKind::Exit if open.last() == Some(&(event.depth, event.function)) => {
                    open.pop();
                }
                EventKind::Exit => assert!(open.is_empty(), "a stray exit: {event:?}"),
            }
        }
        assert!(open.is_empty(), "calls left open: {open:?}");
    }
    // uftrace reads it (calls running at the window's start get entries).
    let uftrace = uftrace_calls(&dir);
    assert_eq!(uftrace.get("pie_many_args"), Some(&2), "{uftrace:?}");
    assert_eq!(uftrace.get("pie_cold"), None);
    assert!(run_uftrace(&["replay", "--no-pager"], &dir).contains("pie_many_args"));

    let report = flight.stop().unwrap();
    assert_eq!(report.events, made);
    assert_eq!(report.evicted, snapshot.evicted);
    let _ = std::fs::remove_dir_all(&dir);
}

extern "C" fn quick(x: i64) -> i64 {
    x + 1
}

extern "C" fn slow(x: i64) -> i64 {
    std::thread::sleep(Duration::from_millis(60));
    x + 1
}

/// `snapshot` is `parent/TIME-what`, TIME as `20261125T231501.123`.
fn assert_snapshot_dir(snapshot: &std::path::Path, parent: &std::path::Path, what: &str) {
    assert_eq!(snapshot.parent(), Some(parent));
    let name = snapshot.file_name().unwrap().to_str().unwrap();
    let (time, rest) = name.split_at(19);
    assert_eq!(rest, format!("-{what}"), "{name}");
    let shape: String = time
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    assert_eq!(shape, "99999999T999999.999", "{name}");
    assert!(time.starts_with("20"), "{name}");
}

#[test]
fn a_slow_call_writes_exactly_one_snapshot_holding_it() {
    let _turn = turn();
    let filter = pie_filter().include("hz_call_back");
    let flight = fntrace::flight_record("graph", &filter, FlightOptions::default()).unwrap();
    let dir = temp_dir("flight-slow");
    flight
        .trigger_on_slow_call("hz_call_*", Duration::from_millis(30), &dir)
        .unwrap();
    static DONE: AtomicBool = AtomicBool::new(false);
    static RUNS: AtomicU64 = AtomicU64::new(0);
    DONE.store(false, Ordering::Relaxed);
    let busy = std::thread::spawn(|| {
        while !DONE.load(Ordering::Relaxed) {
            std::hint::black_box(c_pie::run(10));
            RUNS.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    for i in 0..20 {
        assert_eq!(c_hazards::call_back(quick, i), i + 2);
    }
    let before = Instant::now();
    assert_eq!(c_hazards::call_back(slow, 5), 7);
    let slow_took = before.elapsed();
    for i in 0..5 {
        c_hazards::call_back(quick, i);
    }
    let triggered = wait_for_triggers(&flight, 1);
    // Another drain or ten: still one.
    std::thread::sleep(Duration::from_millis(100));
    DONE.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    let report = flight.stop().unwrap();
    assert_eq!(report.triggered, triggered);
    assert_eq!(triggered.len(), 1, "{triggered:?}");
    let Trigger::SlowCall {
        function,
        duration,
        tid,
        ..
    } = &triggered[0].trigger
    else {
        panic!("{triggered:?}");
    };
    assert_eq!(function, "hz_call_back");
    assert!(*duration >= Duration::from_millis(60) && *duration <= slow_took);
    let snapshot = triggered[0].result.clone().unwrap();
    assert_eq!(*tid, fntrace::current_tid());
    assert!(triggered[0].more.is_empty());
    assert_snapshot_dir(&snapshot.dir, &dir, "hz_call_back");
    let fired = std::fs::read_to_string(snapshot.dir.join(fntrace::TRIGGER_FILE)).unwrap();
    assert!(
        fired.starts_with(&format!(
            "fired by:\n  slow call hz_call_back: thread {tid}, start "
        )),
        "{fired}"
    );
    let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(entries.len(), 1, "one snapshot directory");

    let trace = read(&snapshot.dir);
    let counts = counts(&trace);
    assert_eq!(counts["hz_call_back"], (26, 26), "{counts:?}");
    // The slow call, with its duration.
    let me = trace
        .threads
        .iter()
        .find(|t| t.tid == fntrace::current_tid())
        .expect("the calling thread");
    let back = me
        .events
        .iter()
        .filter(|e| trace.name_of(e.function) == "hz_call_back")
        .collect::<Vec<_>>();
    let longest = back
        .chunks(2)
        .map(|pair| pair[1].time_ns - pair[0].time_ns)
        .max()
        .unwrap();
    assert_eq!(Duration::from_nanos(longest), *duration);
    // Every thread's events around it: the busy thread ran during it.
    assert_eq!(trace.threads.len(), 2);
    assert!(counts["pie_run"].1 > 0);
    assert!(run_uftrace(&["replay", "--no-pager"], &snapshot.dir).contains("hz_call_back"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_trigger_thread_snapshot_holds_only_the_slow_calls_thread() {
    let _turn = turn();
    let filter = pie_filter().include("hz_call_back");
    let flight = fntrace::flight_record("graph", &filter, FlightOptions::default()).unwrap();
    let dir = temp_dir("flight-trigger-thread");
    flight
        .trigger_on_slow_call_with(
            "hz_call_*",
            Duration::from_millis(30),
            &dir,
            fntrace::SnapshotThreads::Trigger,
        )
        .unwrap();
    assert_eq!(
        flight.triggers(),
        [("hz_call_*>30ms@trigger-thread".to_string(), dir.clone())]
    );
    static DONE: AtomicBool = AtomicBool::new(false);
    static RUNS: AtomicU64 = AtomicU64::new(0);
    DONE.store(false, Ordering::Relaxed);
    RUNS.store(0, Ordering::Relaxed);
    let busy: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                while !DONE.load(Ordering::Relaxed) {
                    std::hint::black_box(c_pie::run(10));
                    RUNS.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    // Both busy threads have run before the slow call (and during it).
    let deadline = Instant::now() + Duration::from_secs(30);
    while RUNS.load(Ordering::Relaxed) < 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(c_hazards::call_back(slow, 5), 7);
    let triggered = wait_for_triggers(&flight, 1);
    // The window itself holds all three threads.
    let whole = temp_dir("flight-trigger-thread-whole");
    let all = flight.snapshot(&whole).unwrap();
    DONE.store(true, Ordering::Relaxed);
    for thread in busy {
        thread.join().unwrap();
    }
    flight.stop().unwrap();
    assert_eq!(all.threads, 3, "{all:?}");
    assert_eq!(triggered.len(), 1, "{triggered:?}");
    let me = fntrace::current_tid();
    let Trigger::SlowCall { tid, .. } = &triggered[0].trigger else {
        panic!("{triggered:?}");
    };
    assert_eq!(*tid, me);
    let snapshot = triggered[0].result.clone().unwrap();
    assert_eq!(snapshot.threads, 1, "{snapshot:?}");
    let trace = read(&snapshot.dir);
    let tids: Vec<u32> = trace.threads.iter().map(|t| t.tid).collect();
    assert_eq!(tids, [me]);
    assert_eq!(counts(&trace)["hz_call_back"], (1, 1));
    assert_eq!(counts(&trace).get("pie_run"), None);
    let dat: Vec<String> = std::fs::read_dir(&snapshot.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".dat"))
        .collect();
    assert_eq!(dat, [format!("{me}.dat")]);
    let fired = std::fs::read_to_string(snapshot.dir.join(fntrace::TRIGGER_FILE)).unwrap();
    assert!(
        fired.contains(&format!(
            ", 1 threads, {} events, 0 lost\nthreads: only {me}, the slow calls' \
             (@trigger-thread); the others are left out\n",
            snapshot.events
        )),
        "{fired}"
    );
    let report = run_uftrace(&["report", "--no-pager"], &snapshot.dir);
    assert!(report.contains("hz_call_back"), "{report}");
    assert!(!report.contains("pie_run"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&whole);
}

#[test]
fn a_panic_writes_a_snapshot_then_runs_the_previous_hook() {
    let _turn = turn();
    static PREVIOUS_HOOK_RAN: AtomicU64 = AtomicU64::new(0);
    std::panic::set_hook(Box::new(|_| {
        PREVIOUS_HOOK_RAN.fetch_add(1, Ordering::Relaxed);
    }));
    let filter = Filter::new().include("fixture_rust_workload::*");
    let flight = fntrace::flight_record("graph", &filter, FlightOptions::default()).unwrap();
    let dir = temp_dir("flight-panic");
    flight.snapshot_on_panic(&dir);
    let worker = std::thread::spawn(|| {
        std::hint::black_box(rust::run(3));
        rust::panic_outer(1)
    });
    assert!(worker.join().is_err());
    assert_eq!(PREVIOUS_HOOK_RAN.load(Ordering::Relaxed), 1);
    // Written before the hook returned: there now, no waiting.
    let triggered = flight.triggered();
    let report = flight.stop().unwrap();
    let _ = std::panic::take_hook();
    assert_eq!(triggered.len(), 1, "{triggered:?}");
    assert_eq!(report.triggered, triggered);
    assert!(
        matches!(&triggered[0].trigger, Trigger::Panic(message) if message.contains("fixture panic 1")),
        "{triggered:?}"
    );
    let snapshot = triggered[0].result.clone().unwrap();
    assert_snapshot_dir(&snapshot.dir, &dir, "panic");
    let counts = counts(&read(&snapshot.dir));
    // run(3): 1 + 5 * 3 calls, complete; the panicking calls still running.
    assert_eq!(counts["fixture_rust_workload::run"], (1, 1));
    assert_eq!(counts["fixture_rust_workload::leaf"], (12, 12));
    assert_eq!(counts["fixture_rust_workload::panic_outer"], (1, 0));
    assert_eq!(counts["fixture_rust_workload::panic_inner"], (1, 0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_signal_writes_a_snapshot_and_the_handler_goes_at_stop() {
    let _turn = turn();
    let flight = fntrace::flight_record("graph", &pie_filter(), FlightOptions::default()).unwrap();
    let dir = temp_dir("flight-signal");
    flight.snapshot_on_signal(libc::SIGUSR1, &dir).unwrap();
    let worker = std::thread::spawn(|| {
        for _ in 0..10 {
            std::hint::black_box(c_pie::run(20));
        }
    });
    worker.join().unwrap();
    // SAFETY: raising a signal whose handler the recorder installed.
    assert_eq!(unsafe { libc::raise(libc::SIGUSR1) }, 0);
    let triggered = wait_for_triggers(&flight, 1);
    let report = flight.stop().unwrap();
    assert_eq!(report.triggered, triggered);
    assert_eq!(triggered.len(), 1, "{triggered:?}");
    assert_eq!(triggered[0].trigger, Trigger::Signal(libc::SIGUSR1));
    let snapshot = triggered[0].result.clone().unwrap();
    assert_snapshot_dir(&snapshot.dir, &dir, "SIGUSR1");
    assert_eq!(snapshot.events, 2 * 10 * 101);
    let uftrace = uftrace_calls(&snapshot.dir);
    assert_eq!(uftrace.get("pie_run"), Some(&10));
    assert_eq!(uftrace.get("pie_leaf"), Some(&800));

    // SAFETY: an all-zero sigaction is a valid out-value.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `now` is a valid out-pointer; a null `act` only queries.
    let queried = unsafe { libc::sigaction(libc::SIGUSR1, std::ptr::null(), &mut now) };
    assert_eq!(queried, 0);
    assert_eq!(now.sa_sigaction, libc::SIG_DFL, "the default is back");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_recorder_at_a_time() {
    let _turn = turn();
    let flight = fntrace::flight_record("graph", &pie_filter(), FlightOptions::default()).unwrap();
    let streaming = fntrace::record("graph", &pie_filter(), temp_dir("flight-refused"));
    assert!(
        matches!(&streaming, Err(fntrace::Error::Recording(why)) if why.contains("running already")),
        "{:?}",
        streaming.err()
    );
    let second = fntrace::flight_record("graph", &pie_filter(), FlightOptions::default());
    assert!(second.is_err());
    c_pie::mid(1);
    assert_eq!(flight.stop().unwrap().events, 10);
    let dir = temp_dir("flight-after");
    let recording = fntrace::record("graph", &pie_filter(), &dir).unwrap();
    assert_eq!(recording.stop().unwrap().events, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A snapshot holds every event made before it was asked for, even when
/// the writer was in the middle of a long drain then (4 threads have just
/// made 250,002 events each, which their buffers hold whole): requests
/// made during a drain wait for the next one.
#[test]
fn a_snapshot_holds_every_event_made_before_it() {
    let _turn = turn();
    const THREADS: u64 = 4;
    const N: i64 = 25_000; // run(N): 1 + 5N calls, 250,002 events
    let options = FlightOptions {
        budget_bytes: 64 << 20,
        drain_interval: Duration::from_millis(1),
        ..Default::default()
    };
    let flight = fntrace::flight_record("graph", &pie_filter(), options).unwrap();
    let threads: Vec<_> = (0..THREADS)
        .map(|_| std::thread::spawn(|| c_pie::run(N)))
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let dir = temp_dir("flight-all-before");
    let snapshot = flight.snapshot(&dir).unwrap();
    let events = THREADS * 2 * (1 + 5 * N as u64);
    assert_eq!(
        (snapshot.events, snapshot.lost, snapshot.evicted),
        (events, 0, 0)
    );
    assert_eq!(snapshot.threads, THREADS as usize);
    assert_eq!(
        uftrace_calls(&dir).get("pie_leaf"),
        Some(&(THREADS * 4 * N as u64))
    );
    let report = flight.stop().unwrap();
    assert_eq!((report.events, report.lost), (events, 0));
    let _ = std::fs::remove_dir_all(&dir);
}
