//! The graph tracer on real instrumented code: exact entry/exit sequences
//! and depths for C (gcc -pg, -mfentry) and Rust (-Zinstrument-mcount) on
//! several threads; return values in every return register survive the
//! return trampoline; disabling while frames are hooked.

#[macro_use]
mod common;

use std::sync::mpsc;
use std::sync::Mutex;

use common::{check_nesting, expected_run, shape, thread_events};
use fntrace::{Filter, GRAPH_TRACER};
use fntrace_fixtures::{c_fentry, c_hazards, c_pie, rust};

fn fixture_filter() -> Filter {
    Filter::new()
        .include("fixture_rust_workload::*")
        .include("pie_*")
        .include("fentry_*")
        .include("hz_*")
        .exclude("fentry_nopie_*")
}

static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn exact_entry_exit_sequences_on_several_threads() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    fntrace::enable_with("graph", &fixture_filter()).unwrap();
    let tids: Vec<u32> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    rust::run(3);
                    c_pie::run(2);
                    c_fentry::run(1);
                    fntrace::current_tid()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    fntrace::disable("graph").unwrap();
    let trace = GRAPH_TRACER.take_trace();
    assert_eq!(trace.lost(), 0);

    let mut expected = expected_run(3, addr!(rust::run), addr!(rust::mid), addr!(rust::leaf));
    expected.extend(expected_run(
        2,
        c_pie::run_address(),
        c_pie::mid_address(),
        c_pie::leaf_address(),
    ));
    expected.extend(expected_run(
        1,
        c_fentry::run_address(),
        c_fentry::mid_address(),
        c_fentry::leaf_address(),
    ));
    for tid in tids {
        let events = thread_events(&trace, tid);
        assert_eq!(shape(&events), expected, "thread {tid}");
        let (calls, open) = check_nesting(&events);
        assert_eq!(open, 0);
        assert_eq!(calls.len(), expected.len() / 2);
    }
    assert_eq!(
        trace.name_of(addr!(rust::leaf)),
        "fixture_rust_workload::leaf"
    );
    assert_eq!(trace.name_of(c_pie::mid_address()), "pie_mid");
    assert!(trace.threads.iter().all(|t| t.name.is_some()));
}

#[test]
fn return_values_survive_the_return_trampoline() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    fntrace::enable_with("graph", &fixture_filter()).unwrap();
    let tid = fntrace::current_tid();
    let pair = c_hazards::pair(5);
    let doubles = c_hazards::doubles(8.0);
    let long_double = c_hazards::long_double_survives();
    let many = rust::many_args(1, 2, 3, 4, 5, 6, 0.5, 4.0);
    fntrace::disable("graph").unwrap();
    assert_eq!(
        pair,
        c_hazards::Pair {
            first: 5,
            second: 50
        }
    );
    assert_eq!(
        doubles,
        c_hazards::Doubles {
            first: 8.0,
            second: 2.0
        }
    );
    assert!(long_double);
    assert_eq!(many, (1 + 4 + 9 + 16 + 25 + 36) as f64 + 2.0);
    let events = thread_events(&GRAPH_TRACER.take_trace(), tid);
    let (calls, open) = check_nesting(&events);
    assert_eq!(open, 0);
    // pair, doubles, long_double_check → long_double, many_args.
    assert_eq!(calls.len(), 5, "{events:?}");
}

extern "C" fn wait_for_release(x: i64) -> i64 {
    HOOKED.with(|h| h.0.send(()).unwrap());
    HOOKED.with(|h| h.1.lock().unwrap().recv().unwrap());
    x * 2
}

thread_local! {
    static HOOKED: (mpsc::Sender<()>, Mutex<mpsc::Receiver<()>>) = {
        let (tx, rx) = CHANNELS.lock().unwrap().take().unwrap();
        (tx, Mutex::new(rx))
    };
}
static CHANNELS: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>> = Mutex::new(None);

#[test]
fn disabling_while_frames_are_hooked_still_returns_correctly() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    let (inside_tx, inside_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    *CHANNELS.lock().unwrap() = Some((inside_tx, release_rx));
    fntrace::enable_with("graph", &fixture_filter()).unwrap();
    let worker = std::thread::spawn(|| {
        let result = c_hazards::call_back(wait_for_release, 21);
        (result, fntrace::current_tid())
    });
    inside_rx.recv().unwrap(); // the worker is inside a hooked frame
    fntrace::disable("graph").unwrap();
    release_tx.send(()).unwrap();
    let (result, tid) = worker.join().unwrap();
    assert_eq!(result, 43);
    let events = thread_events(&GRAPH_TRACER.take_trace(), tid);
    // The entry was recorded; the exit came after disable and is not.
    assert_eq!(
        shape(&events),
        vec![('E', c_hazards::call_back_address(), 0)]
    );
}

/// A user-written tracer that wants exits.
struct EntryExitCounter {
    entries: std::sync::atomic::AtomicU64,
    exits: std::sync::atomic::AtomicU64,
    deepest: std::sync::atomic::AtomicUsize,
    backwards: std::sync::atomic::AtomicU64,
}

impl fntrace::Tracer for EntryExitCounter {
    fn entry(&self, call: &fntrace::Call<'_>) {
        use std::sync::atomic::Ordering::Relaxed;
        self.entries.fetch_add(1, Relaxed);
        self.deepest.fetch_max(call.depth(), Relaxed);
    }
    fn wants_exit(&self) -> bool {
        true
    }
    fn exit(&self, ret: &fntrace::Return) {
        use std::sync::atomic::Ordering::Relaxed;
        self.exits.fetch_add(1, Relaxed);
        if ret.exit_ns() < ret.entry_ns() || ret.vanished() {
            self.backwards.fetch_add(1, Relaxed);
        }
    }
}

static USER_GRAPH: EntryExitCounter = EntryExitCounter {
    entries: std::sync::atomic::AtomicU64::new(0),
    exits: std::sync::atomic::AtomicU64::new(0),
    deepest: std::sync::atomic::AtomicUsize::new(0),
    backwards: std::sync::atomic::AtomicU64::new(0),
};
fntrace::register_tracer!("user-graph", &USER_GRAPH);

#[test]
fn a_user_tracer_sees_exits_also_beside_the_graph_tracer() {
    use std::sync::atomic::Ordering::Relaxed;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    GRAPH_TRACER.take_trace();
    let rust_only = Filter::new().include("fixture_rust_workload::*");
    fntrace::enable_with("user-graph", &rust_only).unwrap();
    rust::run(2); // 1 + 2 + 8 calls
    fntrace::enable_with("graph", &rust_only).unwrap(); // two exit tracers
    rust::run(3); // 1 + 3 + 12 calls
    fntrace::disable("user-graph").unwrap();
    fntrace::disable("graph").unwrap();
    assert_eq!(USER_GRAPH.entries.load(Relaxed), 11 + 16);
    assert_eq!(USER_GRAPH.exits.load(Relaxed), 11 + 16);
    assert_eq!(USER_GRAPH.deepest.load(Relaxed), 2);
    assert_eq!(USER_GRAPH.backwards.load(Relaxed), 0);
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    assert_eq!(
        shape(&events),
        expected_run(3, addr!(rust::run), addr!(rust::mid), addr!(rust::leaf))
    );
}
