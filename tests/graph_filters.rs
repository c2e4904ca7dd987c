//! The graph tracer's filters on real instrumented code: name globs decide
//! which sites are patched at all; maximum depth and minimum duration are
//! applied at run time; a full buffer drops and counts events.

#[macro_use]
mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{check_nesting, jump_shape, shape, text, thread_events, NOP6};
use fntrace::{Filter, GRAPH_TRACER};
use fntrace_fixtures::{c_hazards, c_pie, rust};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    GRAPH_TRACER.take_trace();
    guard
}

#[test]
fn excluded_functions_keep_their_nop() {
    let _serial = serial();
    let filter = Filter::new().include("pie_*").exclude("pie_leaf");
    fntrace::enable_with("graph", &filter).unwrap();
    let leaf = fntrace::site_of(c_pie::leaf_address()).unwrap();
    let mid = fntrace::site_of(c_pie::mid_address()).unwrap();
    assert_eq!(
        text(leaf.address, 6),
        NOP6,
        "an excluded site is not patched"
    );
    // Selected by `graph` alone: a jump to its return stub, the same
    // length as gcc's `67 e8` (tests/graph_fast_path.rs checks the stub).
    assert!(mid.patched && mid.graph_fast_path);
    assert_eq!(text(mid.address, 2), [0x2e, 0xe9]);
    assert_ne!(text(mid.address, 6), mid.original);
    c_pie::run(2);
    fntrace::disable("graph").unwrap();
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    let (run, mid) = (c_pie::run_address(), c_pie::mid_address());
    assert_eq!(
        shape(&events),
        vec![
            ('E', run, 0),
            ('E', mid, 1),
            ('X', mid, 1),
            ('E', mid, 1),
            ('X', mid, 1),
            ('X', run, 0)
        ]
    );
}

#[test]
fn max_depth_keeps_the_outer_calls() {
    let _serial = serial();
    let filter = Filter::new()
        .include("fixture_rust_workload::*")
        .max_depth(1);
    fntrace::enable_with("graph", &filter).unwrap();
    rust::run(3);
    fntrace::disable("graph").unwrap();
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    let (calls, open) = check_nesting(&events);
    assert_eq!(open, 0);
    assert_eq!(
        calls.len(),
        1 + 3,
        "run and its 3 mids; the 12 leaves are deeper"
    );
    assert!(calls.iter().all(|c| c.depth <= 1));
}

extern "C" fn slow(x: i64) -> i64 {
    c_pie::leaf(x); // fast: below the threshold
    std::thread::sleep(Duration::from_millis(3));
    x
}

extern "C" fn slow_inside(x: i64) -> i64 {
    c_pie::mid(x); // fast, with fast children
    c_hazards::call_back(slow, x) // slow: recorded, with this frame
}

#[test]
fn min_duration_records_only_slow_calls_with_their_callers() {
    let _serial = serial();
    let filter = Filter::new()
        .include("hz_*")
        .include("pie_*")
        .min_duration(Duration::from_millis(1));
    fntrace::enable_with("graph", &filter).unwrap();
    let result = c_hazards::call_back(slow_inside, 5);
    c_pie::run(3); // all fast: nothing recorded
    fntrace::disable("graph").unwrap();
    assert_eq!(result, 5 + 1 + 1);
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    let call_back = c_hazards::call_back_address();
    // The outer call_back's entry is written when the inner one (slow)
    // exits; the fast pie_* calls and the fast run are not written.
    assert_eq!(
        shape(&events),
        vec![
            ('E', call_back, 0),
            ('E', call_back, 1),
            ('X', call_back, 1),
            ('X', call_back, 0),
        ]
    );
    let (calls, open) = check_nesting(&events);
    assert_eq!(open, 0);
    assert!(calls.iter().all(|c| c.duration_ns >= 1_000_000));
}

#[test]
fn a_full_buffer_drops_and_counts_events() {
    let _serial = serial();
    let filter = Filter::new().include("fixture_rust_workload::*");
    // A thread that recorded into a large buffer and exited: once drained,
    // its buffer is free, and is not the one a thread starting after the
    // size changed gets (CI once saw 102 events here, not 64).
    fntrace::enable_with("graph", &filter).unwrap();
    std::thread::spawn(|| rust::run(1)).join().unwrap();
    fntrace::disable("graph").unwrap();
    GRAPH_TRACER.take_trace();
    GRAPH_TRACER.set_buffer_events(64); // for threads that record from now on
    fntrace::enable_with("graph", &filter).unwrap();
    let tid = std::thread::spawn(|| {
        rust::run(10); // 51 calls: 102 events
        fntrace::current_tid()
    })
    .join()
    .unwrap();
    fntrace::disable("graph").unwrap();
    GRAPH_TRACER.set_buffer_events(1 << 20);
    let trace = GRAPH_TRACER.take_trace();
    let thread = trace.threads.iter().find(|t| t.tid == tid).unwrap();
    assert_eq!(thread.events.len(), 64);
    assert_eq!(thread.lost, 102 - 64);
    let graph = fntrace_tools::analysis::call_graph(&trace, None);
    assert!(graph.contains("38 events lost"), "{graph}");
}

#[test]
fn min_duration_with_frames_that_longjmp_skipped() {
    // The skipped frames are found dead at the next entry and reported
    // from there; with a duration limit their exits write the entries of
    // their not-yet-written ancestors, which reads the shadow stack the
    // entry is still working on (it once held a second `&mut` to it then).
    let _serial = serial();
    let filter = Filter::new()
        .include("hz_*")
        .min_duration(Duration::from_nanos(1));
    fntrace::enable_with("graph", &filter).unwrap();
    let result = c_hazards::jump(1);
    fntrace::disable("graph").unwrap();
    assert_eq!(result, 42);
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    assert_eq!(shape(&events), jump_shape());
    assert_eq!(check_nesting(&events).1, 0);
}

#[test]
fn a_duration_limit_beyond_u64_nanoseconds_is_refused_and_nothing_patched() {
    let _serial = serial();
    let patched_before = fntrace::stats().patched_sites;
    // 584 years and a bit: this used to wrap to a 5 ns limit.
    let too_long = Duration::from_nanos(u64::MAX) + Duration::from_nanos(6);
    let filter = Filter::new().include("hz_*").min_duration(too_long);
    let err = fntrace::enable_with("graph", &filter).unwrap_err();
    assert!(matches!(err, fntrace::Error::BadFilter(_)), "{err:?}");
    assert!(err.to_string().contains("min_duration"), "{err}");
    assert_eq!(fntrace::stats().patched_sites, patched_before);
    c_hazards::jump(1);
    assert!(GRAPH_TRACER.take_trace().threads.is_empty());
}
