//! The graph tracer toggled 300 times while 8 threads keep calling
//! instrumented C and Rust code: frames hooked in one enable window return
//! in another or after disable; nothing crashes, every call returns its
//! right value, nothing is lost (the trace is drained after every toggle)
//! and every thread's events nest (checked drain by drain, across windows).

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{expected_c_mid as c_mid, expected_rust_run as expected_rust, Nesting};
use fntrace::{Filter, GRAPH_TRACER};
use fntrace_fixtures::{c_fentry, c_pie, rust};

const WORKERS: usize = 8;
const TOGGLES: usize = 300;

#[test]
fn eight_threads_under_three_hundred_graph_toggles() {
    fntrace::init().unwrap();
    GRAPH_TRACER.set_buffer_events(1 << 22);
    let filter = Filter::new()
        .include("fixture_rust_workload::*")
        .include("pie_*")
        .include("fentry_*");
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                // Busy all the same, but the toggling thread, which also
                // drains millions of events per window, gets a fair share
                // of the 2 cores rather than a ninth of them.
                // SAFETY: setpriority on the calling thread (who = 0 is the
                // caller's thread id on Linux); no memory is involved.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
                let (mut wrong, mut rounds) = (0, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let x = i as i64;
                    match i % 3 {
                        0 => wrong += (rust::run(2) != expected_rust(2)) as u32,
                        1 => wrong += (c_pie::mid(x) != c_mid(x)) as u32,
                        _ => wrong += (c_fentry::mid(x) != c_mid(x)) as u32,
                    }
                    rounds += 1;
                }
                (fntrace::current_tid(), wrong, rounds)
            })
        })
        .collect();

    let mut nesting: HashMap<u32, Nesting> = HashMap::new();
    let mut completed = Vec::new();
    let mut total_calls = 0;
    let mut lost = 0;
    for i in 0..TOGGLES {
        fntrace::enable_with("graph", &filter).unwrap_or_else(|e| panic!("enable #{i}: {e}"));
        std::thread::yield_now();
        fntrace::disable("graph").unwrap_or_else(|e| panic!("disable #{i}: {e}"));
        let trace = GRAPH_TRACER.take_trace();
        lost += trace.lost();
        for thread in trace.threads {
            let checker = nesting.entry(thread.tid).or_default();
            checker.feed(&thread.events, &mut completed);
            total_calls += completed.len();
            completed.clear();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    for (tid, wrong, rounds) in &results {
        assert_eq!(*wrong, 0, "thread {tid} computed wrong results");
        assert!(*rounds > 0);
    }
    assert_eq!(lost, 0);
    assert!(total_calls > 0, "the workers were traced at least once");
}
