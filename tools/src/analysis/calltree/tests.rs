//! The call tree's tests: trees built from events, and their text.
use super::*;
use crate::analysis::tests::{entry, exit};
use fntrace_format::ThreadTrace;

const MAIN: usize = 0x10;
const OUTER: usize = 0x20;
const INNER: usize = 0x30;
const LEAF: usize = 0x40;

/// main { outer { inner { leaf } inner { leaf } } leaf }, then main
/// again, still running when the trace ends.
fn trace() -> Trace {
    Trace {
        exe: "/bin/t".into(),
        threads: vec![ThreadTrace {
            tid: 1,
            events: vec![
                entry(0, MAIN, 0),
                entry(1_000, OUTER, 1),
                entry(2_000, INNER, 2),
                entry(2_500, LEAF, 3),
                exit(2_600, LEAF, 3),
                exit(3_000, INNER, 2),
                entry(4_000, INNER, 2),
                entry(4_500, LEAF, 3),
                exit(4_600, LEAF, 3),
                exit(5_000, INNER, 2),
                exit(6_000, OUTER, 1),
                entry(7_000, LEAF, 1),
                exit(7_040, LEAF, 1),
                exit(8_000, MAIN, 0),
                entry(9_000, MAIN, 0),
                entry(9_500, OUTER, 1),
                exit(9_700, OUTER, 1),
            ],
            ..ThreadTrace::default()
        }],
        names: [
            (MAIN, "main".to_string()),
            (OUTER, "outer".to_string()),
            (INNER, "inner".to_string()),
            (LEAF, "leaf".to_string()),
        ]
        .into(),
        ..Trace::default()
    }
}

#[test]
fn the_whole_program_in_uftrace_format() {
    let tree = call_tree(&trace(), None);
    // The unfinished main counts until the thread's last event.
    assert_eq!(tree.root.children[0].calls, 2);
    assert_eq!(tree.root.children[0].total_ns, 8_000 + 700);
    assert_eq!(
        tree.text(),
        "\
# Function Call Graph for 't'
========== FUNCTION CALL GRAPH ==========
# TOTAL TIME   FUNCTION
    8.700 us : (1) t
    8.700 us : (2) main
    5.200 us :  +-(2) outer
    2.000 us :  | (2) inner
    0.200 us :  | (2) leaf
             :  | 
    0.040 us :  +-(1) leaf

"
    );
}

#[test]
fn one_function_with_its_backtraces() {
    let tree = call_tree(&trace(), Some("inner"));
    assert_eq!(
        tree.text(),
        "\
# Function Call Graph for 'inner'
=============== BACKTRACE ===============
 backtrace #0: hit 2, time   2.000 us
   [0] main
   [1] outer
   [2] inner

========== FUNCTION CALL GRAPH ==========
# TOTAL TIME   FUNCTION
    2.000 us : (2) inner
    0.200 us : (2) leaf

"
    );
}

/// Two threads, the one read second started first: its paths come
/// first, as uftrace (which reads all threads merged by time) lists
/// them, and its backtrace, seen first, is listed last.
#[test]
fn threads_are_merged_by_time() {
    let thread = |tid, start, function| ThreadTrace {
        tid,
        events: vec![
            entry(start, function, 0),
            entry(start + 10, LEAF, 1),
            exit(start + 20, LEAF, 1),
            exit(start + 30, function, 0),
        ],
        ..ThreadTrace::default()
    };
    let trace = Trace {
        exe: "/bin/t".into(),
        threads: vec![thread(1, 5_000, OUTER), thread(2, 1_000, INNER)],
        names: [
            (OUTER, "outer".to_string()),
            (INNER, "inner".to_string()),
            (LEAF, "leaf".to_string()),
        ]
        .into(),
        ..Trace::default()
    };
    let tree = call_tree(&trace, None);
    let names: Vec<&str> = tree.root.children.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["inner", "outer"]);
    assert_eq!(tree.root.children[0].first_entry_ns, 1_000);
    let tree = call_tree(&trace, Some("leaf"));
    let callers: Vec<&str> = tree
        .backtraces
        .iter()
        .map(|b| b.frames[0].as_str())
        .collect();
    assert_eq!(callers, ["outer", "inner"]);
}

#[test]
fn times_as_uftrace_prints_them() {
    assert_eq!(uftrace_time(0), "          ");
    assert_eq!(uftrace_time(3_696), "  3.696 us");
    assert_eq!(uftrace_time(12_345_678), " 12.345 ms");
    assert_eq!(uftrace_time(1_500_000_000), "  1.500  s");
}
