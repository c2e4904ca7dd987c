//! The graph tracer's argument entries on real instrumented code (mcount
//! and fentry sites): a function whose `-A`/`-R` values are all integer
//! registers jumps to its return stub, which calls the argument entry; its
//! calls never reach the generic path (counted per thread), the program's
//! results are unchanged, and the events are exactly those of the generic
//! path. A string spec sends the same sites to the generic path; no specs
//! put them back on the plain fast entry. (The values themselves are
//! compared with uftrace's in tests/programs/args_vs_uftrace.rs and the others.)

#[macro_use]
mod common;

use common::stubbed_entry_of;
use fntrace::{SiteInfo, SiteKind};
use fntrace_fixtures::{c_fentry, c_pie};

struct Variant {
    name: &'static str,
    prefix: &'static str,
    functions: [usize; 3],
    call_run: fn(i64) -> i64,
    kind: SiteKind,
}

fn variants() -> Vec<Variant> {
    macro_rules! c {
        ($m:ident, $prefix:expr, $kind:expr) => {
            Variant {
                name: stringify!($m),
                prefix: $prefix,
                functions: [$m::run_address(), $m::mid_address(), $m::leaf_address()],
                call_run: $m::run,
                kind: $kind,
            }
        };
    }
    vec![
        c!(c_pie, "pie_", SiteKind::Mcount),
        c!(c_fentry, "fentry_", SiteKind::Fentry),
    ]
}

fn sites(variant: &Variant) -> Vec<SiteInfo> {
    variant
        .functions
        .iter()
        .map(|&f| fntrace::site_of(f).unwrap_or_else(|| panic!("{}: no site", variant.name)))
        .collect()
}

/// The name of the entry `site`'s stub calls.
fn entry_name(site: &SiteInfo, variant: &Variant) -> String {
    let entry = stubbed_entry_of(site, variant.name);
    fntrace::function_name(entry).unwrap_or_default()
}

/// Runs `run(3)` (16 calls) twice and returns the calls of the second run
/// that took the generic path, after checking its result and the graph
/// events exactly.
fn run_and_count_generic(variant: &Variant) -> u64 {
    // leaf(x) = 3x + 1, mid(x) = 12x + 22, run(3) = 102.
    assert_eq!((variant.call_run)(3), 102, "{}", variant.name);
    common::generic_entries_of_run(variant.name, variant.functions, variant.call_run)
}

#[test]
fn integer_specs_take_the_argument_entries() {
    fntrace::init().unwrap();
    fntrace::enable("graph").unwrap();
    let arguments = "*_mid@arg1;*_leaf@arg1/i32,arg1/x8";
    let retval = "*_leaf@retval/u16;*_run@retval";
    fntrace::set_arg_specs(arguments, retval).unwrap();
    for variant in variants() {
        let args_entry = match variant.kind {
            SiteKind::Mcount => "fntrace_graph_args_mcount_stubbed",
            SiteKind::Fentry => "fntrace_graph_args_fentry_stubbed",
        };
        for site in sites(&variant) {
            assert_eq!(entry_name(&site, &variant), args_entry, "{site:?}");
        }
        assert_eq!(run_and_count_generic(&variant), 0, "{}", variant.name);
    }

    // A string value: the generic path, every call.
    let leaf = |v: &Variant| format!("{}leaf@arg1/s", v.prefix);
    let strings: Vec<String> = variants().iter().map(leaf).collect();
    fntrace::set_arg_specs(&strings.join(";"), retval).unwrap();
    for variant in variants() {
        let [run, mid, leaf] = sites(&variant).try_into().unwrap();
        assert!(!leaf.graph_fast_path && leaf.patched, "{leaf:?}");
        // run keeps its return value, mid has no values left.
        let name = entry_name(&run, &variant);
        assert!(name.starts_with("fntrace_graph_args_"), "{name}");
        let name = entry_name(&mid, &variant);
        assert!(
            name.starts_with("fntrace_graph_") && !name.contains("args"),
            "{name}"
        );
        // The leaf is called 12 times in run(3).
        assert_eq!(run_and_count_generic(&variant), 12, "{}", variant.name);
    }

    // No specs: the plain fast entry.
    fntrace::set_arg_specs("", "").unwrap();
    for variant in variants() {
        let plain = match variant.kind {
            SiteKind::Mcount => "fntrace_graph_mcount_stubbed",
            SiteKind::Fentry => "fntrace_graph_fentry_stubbed",
        };
        for site in sites(&variant) {
            assert_eq!(entry_name(&site, &variant), plain, "{site:?}");
        }
        assert_eq!(run_and_count_generic(&variant), 0, "{}", variant.name);
    }
    fntrace::disable("graph").unwrap();
}
