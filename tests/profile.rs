//! The profile tracer on real instrumented code (gcc -pg, -mfentry, rustc
//! -Zinstrument-mcount): exact call counts per function and per call path
//! once quiescent, total and self consistent, recursion counted once, the
//! same numbers as `fntrace report` computes from the graph tracer's trace
//! of the same calls, and reset; a dispatcher of 1,000 callees counted
//! exactly.

#[macro_use]
mod common;

use std::sync::Mutex;

use fntrace::analysis::{latency, ProfileSnapshot, Rows};
use fntrace::{Filter, GRAPH_TRACER, PROFILE_TRACER};
use fntrace_fixtures::{c_dispatch, c_fentry, c_hazards, c_pie, c_tail, rust};

static SERIAL: Mutex<()> = Mutex::new(());

fn fixture_filter() -> Filter {
    Filter::new()
        .include("fixture_rust_workload::*")
        .include("pie_*")
        .include("fentry_*")
        .include("hz_*")
        .exclude("fentry_nopie_*")
}

/// Completed calls of the function at `address` (0 if it has no row).
fn calls(snapshot: &ProfileSnapshot, address: usize) -> u64 {
    snapshot
        .functions
        .iter()
        .filter(|f| f.function == address)
        .map(|f| f.durations.count())
        .sum()
}

fn index_of(snapshot: &ProfileSnapshot, address: usize) -> usize {
    snapshot
        .functions
        .iter()
        .position(|f| f.function == address)
        .unwrap_or_else(|| panic!("no row for {address:#x}: {snapshot:#?}"))
}

/// The path of the functions at `addresses`, outermost first.
fn path_calls(snapshot: &ProfileSnapshot, addresses: &[usize]) -> u64 {
    let mut parent = None;
    let mut found = None;
    for &address in addresses {
        let function = index_of(snapshot, address);
        let index = snapshot
            .paths
            .iter()
            .position(|p| p.parent == parent && p.function == function)
            .unwrap_or_else(|| panic!("no path to {address:#x}"));
        parent = Some(index);
        found = Some(index);
    }
    snapshot.paths[found.expect("a path")].calls
}

#[test]
fn counts_equal_calls_made_on_several_threads() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &fixture_filter()).unwrap();
    const THREADS: u64 = 4;
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                c_pie::run(50);
                rust::run(30);
                c_fentry::run(20);
            });
        }
    });
    // A live thread too: its block is read, not retired.
    c_pie::run(7);
    fntrace::disable("profile").unwrap();
    let snapshot = PROFILE_TRACER.snapshot();
    assert_eq!(snapshot.threads, THREADS + 1);
    assert_eq!(snapshot.not_kept, Default::default());
    let cases = [
        (
            c_pie::run_address(),
            c_pie::mid_address(),
            c_pie::leaf_address(),
            50 * THREADS + 7,
            THREADS + 1,
        ),
        (
            addr!(rust::run),
            addr!(rust::mid),
            addr!(rust::leaf),
            30 * THREADS,
            THREADS,
        ),
        (
            c_fentry::run_address(),
            c_fentry::mid_address(),
            c_fentry::leaf_address(),
            20 * THREADS,
            THREADS,
        ),
    ];
    for (run, mid, leaf, mids, runs) in cases {
        assert_eq!(calls(&snapshot, run), runs);
        assert_eq!(calls(&snapshot, mid), mids);
        assert_eq!(calls(&snapshot, leaf), 4 * mids);
        assert_eq!(path_calls(&snapshot, &[run]), runs);
        assert_eq!(path_calls(&snapshot, &[run, mid]), mids);
        assert_eq!(path_calls(&snapshot, &[run, mid, leaf]), 4 * mids);
        let [run_row, mid_row, leaf_row] =
            [run, mid, leaf].map(|a| &snapshot.functions[index_of(&snapshot, a)]);
        // No recursion: total = sum of durations; self adds up to at most
        // the outermost total; a parent's total covers its children's.
        for row in [run_row, mid_row, leaf_row] {
            assert_eq!(row.total_ns, row.durations.sum(), "{}", row.name);
            assert!(row.self_ns <= row.total_ns, "{}", row.name);
            assert_eq!(row.running, 0);
            assert!(row.durations.min() <= row.durations.max());
        }
        assert!(run_row.self_ns + mid_row.self_ns + leaf_row.self_ns <= run_row.total_ns);
        assert!(mid_row.total_ns <= run_row.total_ns);
        assert!(leaf_row.total_ns <= mid_row.total_ns);
        assert_eq!(
            leaf_row.self_ns, leaf_row.total_ns,
            "a leaf has no traced children"
        );
    }
    // The text form carries it whole.
    assert_eq!(
        ProfileSnapshot::from_text(&snapshot.to_text()).unwrap(),
        snapshot
    );
}

#[test]
fn recursion_counted_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &fixture_filter()).unwrap();
    assert_eq!(c_hazards::recurse(20), 20);
    fntrace::disable("profile").unwrap();
    let snapshot = PROFILE_TRACER.snapshot();
    let address = c_hazards::recurse_address();
    let row = &snapshot.functions[index_of(&snapshot, address)];
    assert_eq!(row.durations.count(), 21);
    // The outermost call alone makes the total: the path of one call.
    assert_eq!(path_calls(&snapshot, &[address]), 1);
    let root = snapshot.paths.iter().find(|p| p.parent.is_none()).unwrap();
    assert_eq!(row.total_ns, root.total_ns);
    assert_eq!(row.durations.max(), root.total_ns);
    assert!(row.total_ns < row.durations.sum());
    // Each level's self time adds up to the outermost call's duration.
    assert_eq!(row.self_ns, row.total_ns);
    assert_eq!(snapshot.paths.len(), 21, "one path per depth");
}

/// Both tracers on the same sites see the same entries and exits (the
/// generic path reports each to both): the profile's rows are what
/// `fntrace report` computes from the graph tracer's trace.
#[test]
fn same_rows_as_the_report_of_a_recorded_trace() {
    same_rows_as_the_report(5, 11, |n| {
        c_hazards::recurse(n);
        rust::recurse(n as u64 + 3);
        c_pie::run(n);
        c_fentry::run(2);
        rust::run(n as u64);
    });
}

/// The same with tail calls (a callee nested in the caller whose frame it
/// took) and `longjmp` (frames that vanish, reported when noticed).
#[test]
fn same_rows_as_the_report_with_tail_calls_and_longjmp() {
    same_rows_as_the_report(6, 10, |n| {
        for build in &c_tail::BUILDS {
            assert_eq!(build.tc_main(n), (n + 1) * 2 + 1);
        }
        assert_eq!(c_hazards::jump(n), 42);
    });
}

/// `longjmp` on two threads at once, many times: every call counted
/// exactly (the frames a jump leaves are given up when noticed, and
/// counted then). Regression: the fixture's jump buffer was one for the
/// whole process, so a thread's `longjmp` could land on the other
/// thread's stack, which then aborted with "a hooked function returned,
/// but its frame is not on the shadow stack" (or crashed, untraced).
#[test]
fn longjmp_on_two_threads_at_once() {
    const JUMPS: u64 = 20_000;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &fixture_filter()).unwrap();
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for n in 0..JUMPS {
                    assert_eq!(c_hazards::jump(n as i64), 42);
                }
            });
        }
    });
    fntrace::disable("profile").unwrap();
    let snapshot = PROFILE_TRACER.snapshot();
    for address in c_hazards::jump_addresses() {
        assert_eq!(calls(&snapshot, address), 2 * JUMPS, "{address:#x}");
    }
}

/// A dispatcher calling 1,000 distinct functions (one call-trie node with
/// 1,000 children), in round robin and in a seeded random order, with
/// mcount and with fentry sites (a thread each: one thread's 2,000
/// functions could need more histogram chunks than its block has):
/// every callee's calls counted exactly, in its row and in its path under
/// the dispatcher that called it; nothing left out.
#[test]
fn a_dispatcher_of_1000_callees_counted_exactly() {
    const CALLS: u64 = 5 * c_dispatch::CALLEES as u64 + 7;
    const SEED: u64 = 0x5eed_0f38;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    let filter = Filter::new().include("dsp_*").include("dspf_*");
    fntrace::enable_with("profile", &filter).unwrap();
    let builds = c_dispatch::builds();
    std::thread::scope(|scope| {
        for build in &builds {
            scope.spawn(move || {
                // Twice over: the second pass finds every path made by the
                // first.
                for _ in 0..2 {
                    build.round_robin(CALLS as i64);
                    build.random_order(CALLS as i64, SEED);
                }
            });
        }
    });
    fntrace::disable("profile").unwrap();
    let snapshot = PROFILE_TRACER.snapshot();
    assert_eq!(snapshot.not_kept, Default::default());
    let round_robin = c_dispatch::round_robin_counts(CALLS);
    let random = c_dispatch::random_counts(CALLS, SEED);
    // Not a round robin in disguise: some callees drawn more than others.
    assert_ne!(random.iter().min(), random.iter().max());
    for build in &builds {
        let (rr, ro) = (build.round_robin_address(), build.random_order_address());
        assert_eq!(calls(&snapshot, rr), 2, "{}round_robin", build.prefix);
        assert_eq!(calls(&snapshot, ro), 2, "{}random_order", build.prefix);
        let callees = build.callee_addresses();
        assert_eq!(callees.len(), c_dispatch::CALLEES);
        for (i, &callee) in callees.iter().enumerate() {
            let what = format!("{}f{i:03}", build.prefix);
            assert_eq!(
                calls(&snapshot, callee),
                2 * (round_robin[i] + random[i]),
                "{what}"
            );
            assert_eq!(
                path_calls(&snapshot, &[rr, callee]),
                2 * round_robin[i],
                "{what}"
            );
            if random[i] > 0 {
                assert_eq!(
                    path_calls(&snapshot, &[ro, callee]),
                    2 * random[i],
                    "{what}"
                );
            }
        }
    }
    // Per build: two dispatchers, and each callee under each dispatcher
    // that drew it.
    let drawn = random.iter().filter(|&&n| n > 0).count();
    assert_eq!(
        snapshot.paths.len(),
        builds.len() * (2 + c_dispatch::CALLEES + drawn)
    );
}

/// The same rows as the graph tracer's report for the dispatcher: calls,
/// total, self, minimum, maximum and percentiles of each of its callees
/// (mcount sites).
#[test]
fn same_rows_as_the_report_with_1000_callees() {
    same_rows_as_the_report(1500, c_dispatch::CALLEES, |n| {
        let build = &c_dispatch::builds()[0];
        build.round_robin(n);
        build.random_order(n, 17 + n as u64);
    });
}

/// The same with fentry sites.
#[test]
fn same_rows_as_the_report_with_1000_callees_fentry() {
    same_rows_as_the_report(1500, c_dispatch::CALLEES, |n| {
        let build = &c_dispatch::builds()[1];
        build.round_robin(n);
        build.random_order(n, 17 + n as u64);
    });
}

/// Runs `work(first)` and `work(9)` on two threads under both tracers and
/// compares the rows (at least `at_least` functions).
fn same_rows_as_the_report(first: i64, at_least: usize, work: fn(i64)) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    let _ = GRAPH_TRACER.take_trace();
    let filter = fixture_filter()
        .include("tail_*")
        .include("dsp_*")
        .include("dspf_*");
    fntrace::enable_with("graph", &filter).unwrap();
    fntrace::enable_with("profile", &filter).unwrap();
    std::thread::scope(|scope| {
        for n in [first, 9] {
            scope.spawn(move || work(n));
        }
    });
    fntrace::disable("profile").unwrap();
    fntrace::disable("graph").unwrap();
    let profile = PROFILE_TRACER.snapshot().latency_report(Rows::ByAddress);
    let trace = GRAPH_TRACER.take_trace();
    assert_eq!(trace.lost(), 0);
    let report = latency(&trace);
    assert_eq!(profile.functions.len(), report.functions.len());
    assert!(
        profile.functions.len() >= at_least,
        "{}",
        profile.functions.len()
    );
    for row in &report.functions {
        let mine = profile
            .functions
            .iter()
            .find(|f| f.function == row.function)
            .unwrap_or_else(|| panic!("no profile row for {}", row.name));
        assert_eq!(mine.name, row.name);
        let pick = |f: &fntrace::analysis::FunctionStats| {
            (
                f.calls, f.total_ns, f.self_ns, f.min_ns, f.max_ns, f.p50_ns, f.p90_ns, f.p99_ns,
            )
        };
        assert_eq!(pick(mine), pick(row), "{}", row.name);
    }
}

#[test]
fn reset_forgets_every_call_so_far() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &fixture_filter()).unwrap();
    c_pie::run(3);
    std::thread::spawn(|| c_pie::run(4)).join().unwrap();
    assert_eq!(calls(&PROFILE_TRACER.snapshot(), c_pie::mid_address()), 7);
    PROFILE_TRACER.reset();
    let empty = PROFILE_TRACER.snapshot();
    assert_eq!(calls(&empty, c_pie::mid_address()), 0);
    assert_eq!(empty.threads, 0);
    c_pie::run(2);
    fntrace::disable("profile").unwrap();
    let after = PROFILE_TRACER.snapshot();
    assert_eq!(calls(&after, c_pie::mid_address()), 2);
    assert_eq!(calls(&after, c_pie::leaf_address()), 8);
    assert_eq!(after.threads, 1);
}

/// Calls open when the tracer is switched off and on again are forgotten,
/// and do not disturb the counts of the calls made after.
#[test]
fn calls_spanning_a_disable_are_not_counted() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &fixture_filter()).unwrap();
    // A traced C frame calls back into Rust, which toggles the tracer.
    extern "C" fn toggle(x: i64) -> i64 {
        fntrace::disable("profile").unwrap();
        fntrace::enable_with("profile", &fixture_filter()).unwrap();
        c_pie::run(2);
        x
    }
    c_hazards::call_back(toggle, 1);
    c_pie::run(1);
    fntrace::disable("profile").unwrap();
    let snapshot = PROFILE_TRACER.snapshot();
    assert_eq!(calls(&snapshot, c_hazards::call_back_address()), 0);
    assert_eq!(calls(&snapshot, c_pie::run_address()), 2);
    assert_eq!(calls(&snapshot, c_pie::mid_address()), 3);
    assert_eq!(path_calls(&snapshot, &[c_pie::run_address()]), 2);
    assert!(snapshot.functions.iter().all(|f| f.running == 0));
}

/// A Rust panic unwinds through traced frames: fntrace reports them as
/// vanished when the landing pad is chosen (`rt::unwind`), and the profile
/// counts them as `fntrace report` does (a call each); nothing stays
/// running, and the calls after count exactly.
#[test]
fn frames_a_panic_unwound_count_once_and_stop_running() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &fixture_filter()).unwrap();
    std::thread::spawn(|| {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let caught = std::panic::catch_unwind(|| rust::panic_outer(1));
        std::panic::set_hook(hook);
        assert!(caught.is_err());
        rust::run(2);
        let snapshot = PROFILE_TRACER.snapshot();
        for f in &snapshot.functions {
            assert_eq!(f.running, 0, "{} running", f.name);
        }
        assert_eq!(calls(&snapshot, addr!(rust::panic_outer)), 1);
        assert_eq!(calls(&snapshot, addr!(rust::panic_inner)), 1);
        let inner = [addr!(rust::panic_outer), addr!(rust::panic_inner)];
        assert_eq!(path_calls(&snapshot, &inner), 1);
        assert_eq!(calls(&snapshot, addr!(rust::mid)), 2);
        assert_eq!(
            path_calls(&snapshot, &[addr!(rust::run), addr!(rust::mid)]),
            2
        );
    })
    .join()
    .unwrap();
    fntrace::disable("profile").unwrap();
}

/// A C thread whose traced frames end in `pthread_exit`: they never
/// return and are not counted (as uftrace shows them); the thread's block
/// is folded at its exit all the same.
#[test]
fn a_thread_ending_in_pthread_exit_is_folded() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &fixture_filter()).unwrap();
    assert_eq!(c_hazards::thread_exit(5), 15);
    c_pie::run(1);
    let snapshot = PROFILE_TRACER.snapshot();
    fntrace::disable("profile").unwrap();
    for address in c_hazards::thread_exit_addresses() {
        assert_eq!(calls(&snapshot, address), 0);
    }
    assert!(
        snapshot.functions.iter().all(|f| f.running == 0),
        "{snapshot:?}"
    );
    assert_eq!(calls(&snapshot, c_pie::mid_address()), 1);
    assert_eq!(snapshot.threads, 2, "the exited thread and this one");
}
