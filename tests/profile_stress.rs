//! The profile tracer under load: 16 threads calling (gcc -pg code) while
//! another thread takes snapshots and switches the tracer off and on
//! `TOGGLES` times; no crash, every snapshot's counts only grow and stay
//! within the calls made, and after a final quiescent enable period the
//! counts are exact.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use fntrace::analysis::ProfileSnapshot;
use fntrace::{Filter, PROFILE_TRACER};
use fntrace_fixtures::c_pie;

const THREADS: usize = 16;
const TOGGLES: usize = 200;
/// Each `run(N)` makes 1 + 5N calls: 1 run, N mid, 4N leaf.
const N: i64 = 10;

fn calls(snapshot: &ProfileSnapshot, address: usize) -> u64 {
    snapshot
        .functions
        .iter()
        .filter(|f| f.function == address)
        .map(|f| f.durations.count())
        .sum()
}

#[test]
fn snapshots_and_toggles_while_sixteen_threads_call() {
    fntrace::init().unwrap();
    let filter = Filter::new().include("pie_*");
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &filter).unwrap();
    let stop = AtomicBool::new(false);
    let runs = AtomicU64::new(0);
    let mut snapshots = 0;
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::black_box(c_pie::run(N));
                    runs.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let mut last_mid = 0;
        for toggle in 0..TOGGLES {
            let snapshot = PROFILE_TRACER.snapshot();
            snapshots += 1;
            let mid = calls(&snapshot, c_pie::mid_address());
            // Counters only grow; a call counted has been made (runs in
            // flight may have completed calls not yet in `runs`).
            let made = (runs.load(Ordering::Relaxed) + THREADS as u64) * N as u64;
            assert!(mid >= last_mid, "snapshot {toggle}: {mid} < {last_mid}");
            assert!(
                mid <= made,
                "snapshot {toggle}: {mid} calls counted, {made} made"
            );
            assert_eq!(snapshot.not_kept, Default::default());
            last_mid = mid;
            fntrace::disable("profile").unwrap();
            if toggle % 2 == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
            let _ = PROFILE_TRACER.snapshot();
            fntrace::enable_with("profile", &filter).unwrap();
            std::thread::sleep(Duration::from_micros(500));
        }
        stop.store(true, Ordering::Relaxed);
    });
    fntrace::disable("profile").unwrap();
    assert!(snapshots == TOGGLES && runs.load(Ordering::Relaxed) > 0);

    // The final period, quiescent before and after: exact counts.
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &filter).unwrap();
    const FINAL: i64 = 300;
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| std::hint::black_box(c_pie::run(FINAL)));
        }
    });
    fntrace::disable("profile").unwrap();
    let snapshot = PROFILE_TRACER.snapshot();
    let threads = THREADS as u64;
    assert_eq!(calls(&snapshot, c_pie::run_address()), threads);
    assert_eq!(
        calls(&snapshot, c_pie::mid_address()),
        threads * FINAL as u64
    );
    assert_eq!(
        calls(&snapshot, c_pie::leaf_address()),
        4 * threads * FINAL as u64
    );
    assert_eq!(snapshot.threads, threads);
    assert_eq!(snapshot.paths.len(), 3);
    assert!(snapshot.paths.iter().all(|p| p.calls > 0));
}
