//! The graph tracer's fast path on real instrumented code, for every site
//! form: a site selected by `graph` alone jumps to its return stub, which
//! calls the fast entry, checked byte by byte (in the executable and in a
//! shared object); its calls never reach the generic path
//! (counted per thread), and the events are exactly those of the generic
//! path. Adding a
//! second tracer, or a run-time limit, puts the original call back.

#[macro_use]
mod common;

use std::sync::Mutex;

use common::{shape, stubbed_entry_of, text, thread_events, NOP5, NOP6};
use fntrace::{Filter, SiteForm, SiteInfo, SiteKind, GRAPH_TRACER};
use fntrace_fixtures::{c_fentry, c_fentry_nopie, c_nopie, c_pie, c_shared, rust};

static SERIAL: Mutex<()> = Mutex::new(());

/// An entry-only tracer, to share sites with `graph`.
struct Nothing;
impl fntrace::Tracer for Nothing {
    fn entry(&self, _: &fntrace::Call<'_>) {}
}
static NOTHING: Nothing = Nothing;
fntrace::register_tracer!("nothing", &NOTHING);

struct Variant {
    name: &'static str,
    functions: [usize; 3],
    call_run: fn(i64) -> i64,
    kind: SiteKind,
}

fn rust_run(n: i64) -> i64 {
    rust::run(n as u64) as i64
}

fn variants() -> Vec<Variant> {
    macro_rules! c {
        ($m:ident, $kind:expr) => {
            Variant {
                name: stringify!($m),
                functions: [$m::run_address(), $m::mid_address(), $m::leaf_address()],
                call_run: $m::run,
                kind: $kind,
            }
        };
    }
    vec![
        c!(c_pie, SiteKind::Mcount),
        c!(c_nopie, SiteKind::Mcount),
        c!(c_fentry, SiteKind::Fentry),
        c!(c_fentry_nopie, SiteKind::Fentry),
        c!(c_shared, SiteKind::Mcount),
        Variant {
            name: "rust",
            functions: [addr!(rust::run), addr!(rust::mid), addr!(rust::leaf)],
            call_run: rust_run,
            kind: SiteKind::Mcount,
        },
    ]
}

fn sites(variant: &Variant) -> Vec<SiteInfo> {
    variant
        .functions
        .iter()
        .map(|&f| fntrace::site_of(f).unwrap_or_else(|| panic!("{}: no site", variant.name)))
        .collect()
}

fn fast_entry_name(kind: SiteKind) -> &'static str {
    match kind {
        SiteKind::Mcount => "fntrace_graph_mcount_stubbed",
        SiteKind::Fentry => "fntrace_graph_fentry_stubbed",
    }
}

/// Runs `run(3)` (16 calls) twice and returns the calls of the second run
/// that took the generic path, after checking the graph events exactly.
fn run_and_count_generic(variant: &Variant) -> u64 {
    common::generic_entries_of_run(variant.name, variant.functions, variant.call_run)
}

#[test]
fn graph_alone_calls_the_fast_entry_and_shares_the_original_call() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    fntrace::enable("graph").unwrap();
    for variant in variants() {
        for site in sites(&variant) {
            assert!(site.graph_fast_path, "{}: {site:?}", variant.name);
            let entry = stubbed_entry_of(&site, variant.name);
            assert_eq!(
                fntrace::function_name(entry).as_deref(),
                Some(fast_entry_name(variant.kind)),
                "{}",
                variant.name
            );
        }
        assert_eq!(run_and_count_generic(&variant), 0, "{}", variant.name);
    }

    // A second tracer on the same sites: the original call, generic path.
    fntrace::enable("nothing").unwrap();
    for variant in variants() {
        for site in sites(&variant) {
            assert!(!site.graph_fast_path, "{}", variant.name);
            assert_eq!(text(site.address, site.original.len()), site.original);
        }
        assert_eq!(run_and_count_generic(&variant), 16, "{}", variant.name);
    }
    fntrace::disable("nothing").unwrap();
    for variant in variants() {
        assert!(sites(&variant).iter().all(|s| s.graph_fast_path));
        assert_eq!(run_and_count_generic(&variant), 0, "{}", variant.name);
    }

    fntrace::disable("graph").unwrap();
    for variant in variants() {
        for site in sites(&variant) {
            let nop = match site.form {
                Some(SiteForm::CallRel32) => NOP5.to_vec(),
                _ => NOP6.to_vec(),
            };
            assert!(!site.graph_fast_path && !site.patched);
            assert_eq!(text(site.address, site.original.len()), nop);
        }
    }
}

#[test]
fn depth_limit_on_the_fast_path_and_duration_limit_on_the_generic_one() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    let variant = &variants()[0];
    assert_eq!(variant.name, "c_pie");
    let [run, mid, _leaf] = variant.functions;

    // A depth limit: the fast paths apply it (leaves, at depth 2, are
    // hooked but not recorded).
    fntrace::enable_with("graph", &Filter::new().include("pie_*").max_depth(1)).unwrap();
    assert!(sites(variant).iter().all(|s| s.graph_fast_path));
    (variant.call_run)(3); // the thread's buffers exist from here on
    GRAPH_TRACER.take_trace();
    let before = fntrace::generic_entries_on_this_thread();
    (variant.call_run)(3);
    assert_eq!(fntrace::generic_entries_on_this_thread() - before, 0);
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    let mut expected = vec![('E', run, 0)];
    for _ in 0..3 {
        expected.extend([('E', mid, 1), ('X', mid, 1)]);
    }
    expected.push(('X', run, 0));
    assert_eq!(shape(&events), expected);

    // A duration limit needs the generic path (entries written late).
    let filter = Filter::new()
        .include("pie_*")
        .min_duration(std::time::Duration::from_nanos(1));
    fntrace::enable_with("graph", &filter).unwrap();
    for site in sites(variant) {
        assert!(site.patched && !site.graph_fast_path);
        assert_eq!(text(site.address, 6), site.original);
    }
    assert_eq!(run_and_count_generic(variant), 16);

    // The same selection without limits: the fast entry, every call.
    fntrace::enable_with("graph", &Filter::new().include("pie_*")).unwrap();
    assert!(sites(variant).iter().all(|s| s.graph_fast_path));
    assert_eq!(run_and_count_generic(variant), 0);
    fntrace::disable("graph").unwrap();
}
