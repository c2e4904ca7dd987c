//! The profile tracer's fast path (`asm/x86_64/profile.S`) on real
//! instrumented code: a site selected by `profile` alone holds a direct
//! call to the profile tracer's fast entry (checked byte by byte), its
//! calls no longer reach the generic path once the function's row, path
//! and histogram chunk exist, and what the fast path counts is exact and
//! consistent: calls per function and per path, the children's durations
//! in the parents' self times (to the nanosecond), every histogram bucket
//! within the function's minimum and maximum. A second tracer on the same
//! sites puts the original call back (generic path), with the same counts.

#[macro_use]
mod common;

use std::sync::Mutex;

use common::text;
use fntrace::analysis::{Histogram, ProfileSnapshot};
use fntrace::{Filter, SiteKind, PROFILE_TRACER};
use fntrace_fixtures::{c_fentry, c_pie, rust};

static SERIAL: Mutex<()> = Mutex::new(());

/// An entry-only tracer, to share sites with `profile`.
struct Nothing;
impl fntrace::Tracer for Nothing {
    fn entry(&self, _: &fntrace::Call<'_>) {}
}
static NOTHING: Nothing = Nothing;
fntrace::register_tracer!("nothing", &NOTHING);

struct Variant {
    name: &'static str,
    /// run, mid, leaf: `run(n)` calls `mid` n times, each `leaf` 4 times.
    functions: [usize; 3],
    call_run: fn(i64) -> i64,
    kind: SiteKind,
}

fn rust_run(n: i64) -> i64 {
    rust::run(n as u64) as i64
}

/// Code in the test executable (every site in a direct call's reach).
fn variants() -> Vec<Variant> {
    vec![
        Variant {
            name: "c_pie",
            functions: [
                c_pie::run_address(),
                c_pie::mid_address(),
                c_pie::leaf_address(),
            ],
            call_run: c_pie::run,
            kind: SiteKind::Mcount,
        },
        Variant {
            name: "c_fentry",
            functions: [
                c_fentry::run_address(),
                c_fentry::mid_address(),
                c_fentry::leaf_address(),
            ],
            call_run: c_fentry::run,
            kind: SiteKind::Fentry,
        },
        Variant {
            name: "rust",
            functions: [addr!(rust::run), addr!(rust::mid), addr!(rust::leaf)],
            call_run: rust_run,
            kind: SiteKind::Mcount,
        },
    ]
}

fn filter() -> Filter {
    Filter::new()
        .include("fixture_rust_workload::*")
        .include("pie_*")
        .include("fentry_*")
        .exclude("fentry_nopie_*")
}

/// The fast entry a site's return stub calls, by name.
fn called_by(function: usize) -> Option<String> {
    let site = fntrace::site_of(function).expect("a site");
    fntrace::function_name(common::stubbed_entry_of(&site, "profile"))
}

fn row(snapshot: &ProfileSnapshot, address: usize) -> &fntrace::analysis::FunctionProfile {
    snapshot
        .functions
        .iter()
        .find(|f| f.function == address)
        .unwrap_or_else(|| panic!("no row for {address:#x}"))
}

/// The path run → mid → leaf's nodes (indexes), outermost first.
fn path(snapshot: &ProfileSnapshot, functions: &[usize]) -> Vec<usize> {
    let mut parent = None;
    let mut found = Vec::new();
    for &address in functions {
        let function = snapshot
            .functions
            .iter()
            .position(|f| f.function == address)
            .expect("a row");
        let index = snapshot
            .paths
            .iter()
            .position(|p| p.parent == parent && p.function == function)
            .unwrap_or_else(|| panic!("no path to {address:#x}"));
        parent = Some(index);
        found.push(index);
    }
    found
}

/// Checks the profile of `runs` calls of `run(n)` on this thread: counts
/// exact per function and path, the self times adding up, the buckets
/// inside [min, max].
fn check(snapshot: &ProfileSnapshot, variant: &Variant, runs: u64, n: u64) {
    let name = variant.name;
    let [run, mid, leaf] = variant.functions;
    assert_eq!(snapshot.not_kept, Default::default(), "{name}");
    let expected = [(run, runs), (mid, runs * n), (leaf, runs * n * 4)];
    for (address, calls) in expected {
        let f = row(snapshot, address);
        assert_eq!(f.durations.count(), calls, "{name}: {}", f.name);
        assert_eq!(f.running, 0, "{name}: {}", f.name);
        // Not recursive: every call counts in the total.
        assert_eq!(f.total_ns, f.durations.sum(), "{name}: {}", f.name);
        let (min, max) = (f.durations.min(), f.durations.max());
        assert!(min <= max, "{name}: {}", f.name);
        for (bucket, count) in f.durations.buckets() {
            let (low, width) = Histogram::bucket_range(bucket);
            assert!(count > 0);
            assert!(
                low <= max && low + (width - 1) >= min,
                "{name}: {}: bucket {bucket} [{low}, +{width}) outside [{min}, {max}]",
                f.name
            );
        }
    }
    let nodes = path(snapshot, &[run, mid, leaf]);
    let [run_node, mid_node, leaf_node] = [nodes[0], nodes[1], nodes[2]];
    let p = &snapshot.paths;
    assert_eq!(
        [p[run_node].calls, p[mid_node].calls, p[leaf_node].calls],
        [runs, runs * n, runs * n * 4],
        "{name}"
    );
    // Self time is the duration less the direct children's, exactly.
    assert_eq!(
        p[run_node].self_ns + p[mid_node].total_ns,
        p[run_node].total_ns,
        "{name}"
    );
    assert_eq!(
        p[mid_node].self_ns + p[leaf_node].total_ns,
        p[mid_node].total_ns,
        "{name}"
    );
    assert_eq!(p[leaf_node].self_ns, p[leaf_node].total_ns, "{name}");
    assert_eq!(row(snapshot, leaf).self_ns, p[leaf_node].total_ns, "{name}");
    assert_eq!(
        row(snapshot, mid).durations.sum(),
        p[mid_node].total_ns,
        "{name}"
    );
}

#[test]
fn profile_alone_calls_its_fast_entry_and_counts_exactly() {
    const RUNS: u64 = 50;
    const N: u64 = 7;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &filter()).unwrap();
    for variant in variants() {
        let fast_entry = match variant.kind {
            SiteKind::Mcount => "fntrace_profile_mcount_stubbed",
            SiteKind::Fentry => "fntrace_profile_fentry_stubbed",
        };
        for &function in &variant.functions {
            assert_eq!(
                called_by(function).as_deref(),
                Some(fast_entry),
                "{}",
                variant.name
            );
            assert!(!fntrace::site_of(function).unwrap().graph_fast_path);
        }
        // The first call of each path and each duration's power of two
        // take the generic path (rows, nodes and chunks are made there);
        // after a warm-up, none does.
        PROFILE_TRACER.reset();
        (variant.call_run)(N as i64);
        let mut generic = 0;
        for _ in 1..RUNS {
            let before = fntrace::generic_entries_on_this_thread();
            (variant.call_run)(N as i64);
            generic = fntrace::generic_entries_on_this_thread() - before;
        }
        assert_eq!(
            generic, 0,
            "{}: the last run's generic entries",
            variant.name
        );
        check(&PROFILE_TRACER.snapshot(), &variant, RUNS, N);
    }

    // A second tracer on the same sites: the original call, the generic
    // path, the same counts.
    fntrace::enable_with("nothing", &filter()).unwrap();
    for variant in variants() {
        for &function in &variant.functions {
            let site = fntrace::site_of(function).unwrap();
            assert_eq!(text(site.address, site.original.len()), site.original);
        }
        PROFILE_TRACER.reset();
        let before = fntrace::generic_entries_on_this_thread();
        for _ in 0..RUNS {
            (variant.call_run)(N as i64);
        }
        let generic = fntrace::generic_entries_on_this_thread() - before;
        assert_eq!(generic, RUNS * (1 + 5 * N), "{}", variant.name);
        check(&PROFILE_TRACER.snapshot(), &variant, RUNS, N);
    }
    fntrace::disable("nothing").unwrap();
    for variant in variants() {
        let fast = variant
            .functions
            .iter()
            .all(|&f| called_by(f).is_some_and(|n| n.starts_with("fntrace_profile_")));
        assert!(fast, "{}: the fast entry again", variant.name);
    }
    fntrace::disable("profile").unwrap();
}

/// Calls on several threads at once, half of them in a thread's first
/// runs (generic path) and then on the fast path; signals of the threads'
/// own making are not needed here (`profile_stress` toggles the tracer
/// under load): counts exact once quiescent.
#[test]
fn fast_path_counts_exactly_on_four_threads() {
    const RUNS: u64 = 2_000;
    const N: u64 = 3;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &filter()).unwrap();
    let variant = &variants()[0];
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..RUNS {
                    (variant.call_run)(N as i64);
                }
            });
        }
    });
    fntrace::disable("profile").unwrap();
    check(&PROFILE_TRACER.snapshot(), variant, 4 * RUNS, N);
}

/// Tail calls on the fast path: `tc_caller` ends in a `jmp` to
/// `tc_callee`, whose frame nests in the caller's (same slot, the
/// trampoline already in it), as on the generic path; every call counted,
/// the callee's time in the caller's, and no call takes the generic path
/// after a warm-up.
#[test]
fn tail_calls_nest_on_the_fast_path() {
    const RUNS: u64 = 100;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    fntrace::enable_with("profile", &Filter::new().include("tail_*")).unwrap();
    for build in &fntrace_fixtures::c_tail::BUILDS {
        PROFILE_TRACER.reset();
        assert_eq!(build.tc_main(2), 7);
        let mut generic = 0;
        for _ in 1..RUNS {
            let before = fntrace::generic_entries_on_this_thread();
            assert_eq!(build.tc_main(2), 7);
            generic = fntrace::generic_entries_on_this_thread() - before;
        }
        assert_eq!(generic, 0, "{}", build.flags);
        let snapshot = PROFILE_TRACER.snapshot();
        assert_eq!(snapshot.not_kept, Default::default(), "{}", build.flags);
        let names = ["tc_main", "tc_caller", "tc_callee", "tc_leaf"];
        let index = |name: &str| {
            let full = format!("{}{name}", build.prefix);
            snapshot
                .functions
                .iter()
                .position(|f| f.name == full)
                .unwrap_or_else(|| panic!("{}: no row for {full}", build.flags))
        };
        let mut parent = None;
        let mut nodes = Vec::new();
        for name in names {
            let f = &snapshot.functions[index(name)];
            assert_eq!(f.durations.count(), RUNS, "{}: {name}", build.flags);
            let node = snapshot
                .paths
                .iter()
                .position(|p| p.parent == parent && p.function == index(name))
                .unwrap_or_else(|| panic!("{}: no path to {name}", build.flags));
            assert_eq!(snapshot.paths[node].calls, RUNS, "{}: {name}", build.flags);
            parent = Some(node);
            nodes.push(node);
        }
        let p = &snapshot.paths;
        for pair in nodes.windows(2) {
            assert_eq!(
                p[pair[0]].self_ns + p[pair[1]].total_ns,
                p[pair[0]].total_ns,
                "{}",
                build.flags
            );
        }
    }
    fntrace::disable("profile").unwrap();
}

/// Both fast paths at once, nested: `graph` alone on `run` and `leaf`,
/// `profile` alone on `mid` (run → mid → 4 × leaf). Each site calls its
/// own tracer's fast entry (the site's text flags tell the two apart); the
/// shadow frames of both share one stack, so the graph events have the
/// generic path's depths, and the return trampoline's fast path sends
/// each frame to its own tracer's exit; no call takes the generic path.
#[test]
fn graph_and_profile_fast_paths_nest() {
    const N: i64 = 3;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    let [run, mid, leaf] = [
        c_pie::run_address(),
        c_pie::mid_address(),
        c_pie::leaf_address(),
    ];
    let name = |address: usize| fntrace::function_name(address).expect("a name");
    let graph = Filter::new().include(&name(run)).include(&name(leaf));
    let profile = Filter::new().include(&name(mid));
    PROFILE_TRACER.reset();
    let _ = fntrace::GRAPH_TRACER.take_trace();
    fntrace::enable_with("graph", &graph).unwrap();
    fntrace::enable_with("profile", &profile).unwrap();
    assert_eq!(
        called_by(run).as_deref(),
        Some("fntrace_graph_mcount_stubbed")
    );
    assert_eq!(
        called_by(leaf).as_deref(),
        Some("fntrace_graph_mcount_stubbed")
    );
    assert_eq!(
        called_by(mid).as_deref(),
        Some("fntrace_profile_mcount_stubbed")
    );
    assert!(fntrace::site_of(run).unwrap().graph_fast_path);
    assert!(!fntrace::site_of(mid).unwrap().graph_fast_path);
    c_pie::run(N); // rows, nodes, chunks and the ring made
    PROFILE_TRACER.reset();
    c_pie::run(N); // the profile's era caught up
    let _ = fntrace::GRAPH_TRACER.take_trace();
    let before = fntrace::generic_entries_on_this_thread();
    c_pie::run(N);
    let generic = fntrace::generic_entries_on_this_thread() - before;
    fntrace::disable("profile").unwrap();
    fntrace::disable("graph").unwrap();
    assert_eq!(generic, 0);
    let trace = fntrace::GRAPH_TRACER.take_trace();
    let events = common::thread_events(&trace, fntrace::current_tid());
    let mut expected = vec![('E', run, 0)];
    for _ in 0..N {
        for _ in 0..4 {
            expected.extend([('E', leaf, 2), ('X', leaf, 2)]);
        }
    }
    expected.push(('X', run, 0));
    assert_eq!(common::shape(&events), expected);
    let snapshot = PROFILE_TRACER.snapshot();
    let mid_row = row(&snapshot, mid);
    // The run before the last one's calls, and the last one's.
    assert_eq!(mid_row.durations.count(), 2 * N as u64);
    assert_eq!(mid_row.running, 0);
    // Its only direct children (leaf) are not profiled: self = total.
    assert_eq!(mid_row.self_ns, mid_row.durations.sum());
    assert_eq!(snapshot.not_kept, Default::default());
}
