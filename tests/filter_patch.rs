//! `Filter::patch`: the Rust API's way to uftrace's `-P`. `workload.c`
//! built by gcc `-O2` with no instrumentation at all (the fixtures'
//! `plain_` variant, linked into this test) has no call site; a filter
//! that patches `plain_*` gives its functions sites when the tracer is
//! enabled, and the graph tracer then records exactly the calls `run(n)`
//! makes, with their depths. Before, the same calls record nothing.

#[macro_use]
mod common;

use common::{check_nesting, expected_run, shape, thread_events};
use fntrace::{Filter, GRAPH_TRACER};
use fntrace_fixtures::c_plain;

#[test]
fn a_filter_that_patches_traces_functions_built_without_instrumentation() {
    fntrace::init().unwrap();
    let only_plain = Filter::new().include("plain_*");

    // Without `patch`: the functions have no site, nothing is recorded.
    fntrace::enable_with("graph", &only_plain).unwrap();
    let tid = fntrace::current_tid();
    c_plain::run(3);
    fntrace::disable("graph").unwrap();
    let trace = GRAPH_TRACER.take_trace();
    assert_eq!(
        thread_events(&trace, tid),
        vec![],
        "no site before patching"
    );

    // With it: patched when enabled, recorded exactly.
    let patching = only_plain
        .clone()
        .patch("plain_run")
        .patch("plain_mid")
        .patch("plain_leaf");
    assert_eq!(
        patching.get_patch(),
        ["plain_run", "plain_mid", "plain_leaf"]
    );
    fntrace::enable_with("graph", &patching).unwrap();
    c_plain::run(3);
    fntrace::disable("graph").unwrap();
    let report = fntrace::patch_report();
    assert_eq!(report.patched.len(), 3, "{report:?}");
    assert!(report.refused.is_empty(), "{report:?}");
    let trace = GRAPH_TRACER.take_trace();
    assert_eq!(trace.lost(), 0);
    let events = thread_events(&trace, tid);
    let (run, mid, leaf) = (
        c_plain::run_address(),
        c_plain::mid_address(),
        c_plain::leaf_address(),
    );
    assert_eq!(shape(&events), expected_run(3, run, mid, leaf));
    let (calls, open) = check_nesting(&events);
    assert_eq!((calls.len(), open), (16, 0));
    assert_eq!(trace.name_of(c_plain::mid_address()), "plain_mid");
}
