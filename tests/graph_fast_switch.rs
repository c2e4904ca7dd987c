//! Sites switching between the graph tracer's fast entry and the generic
//! path under load: `graph` stays on while another tracer is toggled 200
//! times over the same sites, so each toggle rewrites every site from a
//! direct call of the fast entry to the original call and back, while 8
//! threads run through them. Frames hooked by one path return through the
//! other. Since `graph` is on throughout, it must see every call exactly:
//! each thread's entries and exits equal the calls it made. (Workers do at
//! most [`ROUNDS_PER_TOGGLE`] rounds per toggle, so the trace, drained
//! after each toggle, never outgrows its buffers.)

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{expected_c_mid as c_mid, expected_rust_run as expected_rust, Nesting};
use fntrace::{EventKind, Filter, GRAPH_TRACER};
use fntrace_fixtures::{c_fentry, c_pie, rust};

const WORKERS: usize = 8;
const TOGGLES: usize = 200;
const ROUNDS_PER_TOGGLE: u64 = 2_000;
/// Bumped after each toggle's drain: a new quota of rounds for every worker.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Counts entries, so the toggled tracer does something real.
struct Entries(AtomicU64);
impl fntrace::Tracer for Entries {
    fn entry(&self, _: &fntrace::Call<'_>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}
static ENTRIES: Entries = Entries(AtomicU64::new(0));
fntrace::register_tracer!("entries", &ENTRIES);

#[test]
fn every_call_is_seen_while_sites_switch_paths_two_hundred_times() {
    fntrace::init().unwrap();
    GRAPH_TRACER.set_buffer_events(1 << 22);
    GRAPH_TRACER.take_trace();
    let filter = Filter::new()
        .include("fixture_rust_workload::*")
        .include("pie_*")
        .include("fentry_*");
    fntrace::enable_with("graph", &filter).unwrap();
    let fast_sites = |expected: bool| {
        for function in [
            addr!(rust::run),
            c_pie::mid_address(),
            c_fentry::mid_address(),
        ] {
            let site = fntrace::site_of(function).unwrap();
            assert_eq!(site.graph_fast_path, expected, "{site:?}");
        }
    };
    fast_sites(true);

    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let (mut calls, mut wrong) = (0u64, 0u32);
                let (mut generation, mut rounds) = (u64::MAX, 0);
                while !stop.load(Ordering::Relaxed) {
                    let now = GENERATION.load(Ordering::Relaxed);
                    if now != generation {
                        (generation, rounds) = (now, 0);
                    }
                    if rounds == ROUNDS_PER_TOGGLE {
                        std::thread::yield_now();
                        continue;
                    }
                    rounds += 1;
                    let x = i as i64;
                    match i % 3 {
                        // run(2): run + 2 × (mid + 4 × leaf)
                        0 => {
                            wrong += (rust::run(2) != expected_rust(2)) as u32;
                            calls += 11;
                        }
                        // mid + 4 × leaf
                        1 => {
                            wrong += (c_pie::mid(x) != c_mid(x)) as u32;
                            calls += 5;
                        }
                        _ => {
                            wrong += (c_fentry::mid(x) != c_mid(x)) as u32;
                            calls += 5;
                        }
                    }
                }
                (fntrace::current_tid(), calls, wrong)
            })
        })
        .collect();

    let mut nesting: HashMap<u32, Nesting> = HashMap::new();
    let mut counts: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut completed = Vec::new();
    let mut drain = |nesting: &mut HashMap<u32, Nesting>| {
        let trace = GRAPH_TRACER.take_trace();
        assert_eq!(trace.lost(), 0);
        for thread in trace.threads {
            nesting
                .entry(thread.tid)
                .or_default()
                .feed(&thread.events, &mut completed);
            completed.clear();
            let count = counts.entry(thread.tid).or_default();
            for event in &thread.events {
                match event.kind {
                    EventKind::Entry => count.0 += 1,
                    EventKind::Exit => count.1 += 1,
                }
            }
        }
    };
    for i in 0..TOGGLES {
        fntrace::enable("entries").unwrap_or_else(|e| panic!("enable #{i}: {e}"));
        if i == 0 {
            fast_sites(false);
        }
        std::thread::yield_now();
        fntrace::disable("entries").unwrap_or_else(|e| panic!("disable #{i}: {e}"));
        if i == 0 {
            fast_sites(true);
        }
        drain(&mut nesting);
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
    stop.store(true, Ordering::Relaxed);
    let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    fntrace::disable("graph").unwrap();
    drain(&mut nesting);

    assert!(
        ENTRIES.0.load(Ordering::Relaxed) > 0,
        "the toggled tracer ran"
    );
    for (tid, calls, wrong) in results {
        assert_eq!(wrong, 0, "thread {tid} computed wrong results");
        assert!(calls > 0, "thread {tid} made no call");
        assert_eq!(counts.get(&tid), Some(&(calls, calls)), "thread {tid}");
        assert_eq!(nesting[&tid].unfinished(), 0, "thread {tid}");
    }
}
