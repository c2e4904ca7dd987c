//! The latency report's unit tests.
use super::*;
use crate::analysis::tests::{entry, exit};
use crate::trace::{GraphEvent, ThreadTrace};

const MAIN: usize = 0x1000;
const PARSE: usize = 0x2000;
const TOKENIZE: usize = 0x3000;
const NEXT: usize = 0x4000;
const FACT: usize = 0x5000;

fn trace(threads: Vec<(u32, Vec<GraphEvent>)>) -> Trace {
    let names = [
        (MAIN, "demo::main"),
        (PARSE, "demo::parse"),
        (TOKENIZE, "demo::tokenize"),
        (NEXT, "demo::next"),
        (FACT, "demo::fact"),
    ];
    Trace {
        pid: 1,
        exe: "/bin/demo".into(),
        threads: threads
            .into_iter()
            .map(|(tid, events)| ThreadTrace {
                tid,
                name: None,
                events,
                lost: 0,
            })
            .collect(),
        names: names
            .into_iter()
            .map(|(address, name)| (address, name.to_string()))
            .collect(),
        maps: String::new(),
        ..Trace::default()
    }
}

/// Stats of a function whose every call took `durations_ns` (already
/// sorted), all of them small enough to be exact in the histogram.
#[allow(clippy::too_many_arguments)]
fn stats(
    function: usize,
    name: &str,
    calls: u64,
    total_ns: u64,
    self_ns: u64,
    min_ns: u64,
    max_ns: u64,
    mean_ns: u64,
    [p50_ns, p90_ns, p99_ns]: [u64; 3],
) -> FunctionStats {
    FunctionStats {
        function,
        name: name.into(),
        calls,
        unfinished: 0,
        total_ns,
        self_ns,
        min_ns,
        max_ns,
        mean_ns,
        p50_ns,
        p90_ns,
        p99_ns,
    }
}

/// main { parse; tokenize { next; next } }
fn nested_events() -> Vec<GraphEvent> {
    vec![
        entry(0, MAIN, 0),
        entry(10, PARSE, 1),
        exit(40, PARSE, 1),
        entry(50, TOKENIZE, 1),
        entry(60, NEXT, 2),
        exit(70, NEXT, 2),
        entry(80, NEXT, 2),
        exit(100, NEXT, 2),
        exit(150, TOKENIZE, 1),
        exit(200, MAIN, 0),
    ]
}

#[test]
fn nested_calls_self_time() {
    let report = latency(&trace(vec![(7, nested_events())]));
    let expected = vec![
        stats(MAIN, "demo::main", 1, 200, 70, 200, 200, 200, [200; 3]),
        stats(
            TOKENIZE,
            "demo::tokenize",
            1,
            100,
            70,
            100,
            100,
            100,
            [100; 3],
        ),
        // Same total as parse: ordered by name.
        stats(NEXT, "demo::next", 2, 30, 30, 10, 20, 15, [10, 20, 20]),
        stats(PARSE, "demo::parse", 1, 30, 30, 30, 30, 30, [30; 3]),
    ];
    assert_eq!(report.functions, expected);
    assert_eq!(report.per_thread, vec![(7, expected)]);
    assert_eq!(report.unmatched_exits, 0);
    assert_eq!(report.unfinished_calls, 0);
}

#[test]
fn lost_events_are_stated_before_the_table() {
    let mut lossy = trace(vec![(7, nested_events())]);
    lossy.threads[0].lost = 12;
    let table = latency(&lossy).table(10);
    let first = table.lines().next().unwrap();
    assert_eq!(
            first,
            "# 12 events lost while recording (buffers full): the calls they belonged to are missing below"
        );
    let whole = latency(&trace(vec![(7, nested_events())])).table(10);
    assert!(
        whole.starts_with("# durations: wall-clock time, blocked time included\ncalls"),
        "{whole}"
    );
}

#[test]
fn recursion_counts_the_outermost_call_once() {
    // main { fact(3) { fact(2) { next; fact(1) } } fact(1) }
    let events = vec![
        entry(0, MAIN, 0),
        entry(5, FACT, 1),
        entry(10, FACT, 2),
        entry(12, NEXT, 3),
        exit(14, NEXT, 3),
        entry(20, FACT, 3),
        exit(50, FACT, 3),
        exit(80, FACT, 2),
        exit(100, FACT, 1),
        entry(110, FACT, 1),
        exit(120, FACT, 1),
        exit(200, MAIN, 0),
    ];
    let report = latency(&trace(vec![(7, events)]));
    // Durations 30, 70, 95 and 10; self 30, 38, 25 and 10. The total
    // is the two outermost calls' (95 + 10), not every frame's (205):
    // never more than main's 200.
    assert_eq!(
        report.functions,
        vec![
            stats(MAIN, "demo::main", 1, 200, 95, 200, 200, 200, [200; 3]),
            stats(FACT, "demo::fact", 4, 105, 103, 10, 95, 51, [30, 95, 95]),
            stats(NEXT, "demo::next", 1, 2, 2, 2, 2, 2, [2; 3]),
        ]
    );
}

#[test]
fn rows_merge_functions_of_one_name_unless_by_address() {
    const OTHER_NEXT: usize = 0x6000;
    let mut two = trace(vec![(
        7,
        vec![
            entry(0, NEXT, 0),
            exit(10, NEXT, 0),
            entry(20, OTHER_NEXT, 0),
            exit(50, OTHER_NEXT, 0),
        ],
    )]);
    two.names.insert(OTHER_NEXT, "demo::next".to_string());
    let merged = stats(NEXT, "demo::next", 2, 40, 40, 10, 30, 20, [10, 30, 30]);
    let report = latency(&two);
    assert_eq!(report.functions, vec![merged.clone()]);
    assert_eq!(report.per_thread, vec![(7, vec![merged])]);
    let apart = infallible(latency_of_with(&two, Rows::ByAddress));
    assert_eq!(
        apart.functions,
        vec![
            stats(OTHER_NEXT, "demo::next", 1, 30, 30, 30, 30, 30, [30; 3]),
            stats(NEXT, "demo::next", 1, 10, 10, 10, 10, 10, [10; 3]),
        ]
    );
}

#[test]
fn two_threads_merged() {
    let first = vec![entry(0, MAIN, 0), exit(100, MAIN, 0)];
    let second = vec![
        entry(1_000, MAIN, 0),
        entry(1_010, PARSE, 1),
        exit(1_020, PARSE, 1),
        exit(1_300, MAIN, 0),
    ];
    let report = latency(&trace(vec![(1, first), (2, second)]));
    assert_eq!(
        report.functions,
        vec![
            stats(
                MAIN,
                "demo::main",
                2,
                400,
                390,
                100,
                300,
                200,
                [100, 300, 300]
            ),
            stats(PARSE, "demo::parse", 1, 10, 10, 10, 10, 10, [10; 3]),
        ]
    );
    assert_eq!(
        report.per_thread,
        vec![
            (
                1,
                vec![stats(
                    MAIN,
                    "demo::main",
                    1,
                    100,
                    100,
                    100,
                    100,
                    100,
                    [100; 3]
                )]
            ),
            (
                2,
                vec![
                    stats(MAIN, "demo::main", 1, 300, 290, 300, 300, 300, [300; 3]),
                    stats(PARSE, "demo::parse", 1, 10, 10, 10, 10, 10, [10; 3]),
                ]
            ),
        ]
    );
}

#[test]
fn missing_exits_are_not_measured_but_counted() {
    let events = vec![
        entry(0, MAIN, 0),
        entry(10, PARSE, 1),
        entry(20, NEXT, 2),
        // parse and next were unwound (a panic caught in main).
        entry(50, TOKENIZE, 1),
        exit(60, TOKENIZE, 1),
        exit(100, MAIN, 0),
        // The trace ends inside this call.
        entry(200, MAIN, 0),
    ];
    let report = latency(&trace(vec![(7, events)]));
    assert_eq!(
        report.functions,
        vec![
            // The unwound calls' time stays in main's self time.
            FunctionStats {
                unfinished: 1,
                ..stats(MAIN, "demo::main", 1, 100, 90, 100, 100, 100, [100; 3])
            },
            stats(TOKENIZE, "demo::tokenize", 1, 10, 10, 10, 10, 10, [10; 3]),
            // Calls without an exit do not vanish from the report.
            FunctionStats {
                unfinished: 1,
                ..stats(NEXT, "demo::next", 0, 0, 0, 0, 0, 0, [0; 3])
            },
            FunctionStats {
                unfinished: 1,
                ..stats(PARSE, "demo::parse", 0, 0, 0, 0, 0, 0, [0; 3])
            },
        ]
    );
    assert_eq!(report.unfinished_calls, 3);
    assert_eq!((report.unwound_calls, report.still_running_calls), (2, 1));
    assert_eq!(report.unmatched_exits, 0);
}

#[test]
fn depth_starting_above_zero_and_unmatched_exits() {
    // Tracing was switched on inside main → parse.
    let events = vec![
        entry(0, NEXT, 2),
        exit(5, NEXT, 2),
        exit(10, PARSE, 1),
        entry(20, TOKENIZE, 1),
        entry(22, NEXT, 2),
        exit(25, NEXT, 2),
        exit(30, TOKENIZE, 1),
        exit(40, MAIN, 0),
    ];
    let report = latency(&trace(vec![(7, events)]));
    assert_eq!(
        report.functions,
        vec![
            stats(TOKENIZE, "demo::tokenize", 1, 10, 7, 10, 10, 10, [10; 3]),
            stats(NEXT, "demo::next", 2, 8, 8, 3, 5, 4, [3, 5, 5]),
        ]
    );
    assert_eq!(report.unmatched_exits, 2);
    assert_eq!(report.unfinished_calls, 0);
}

#[test]
fn unknown_names_show_the_address_and_empty_traces_report_nothing() {
    let report = latency(&trace(vec![(
        7,
        vec![entry(0, 0xabc, 0), exit(9, 0xabc, 0)],
    )]));
    assert_eq!(report.functions[0].name, "0xabc");

    let report = latency(&trace(vec![(7, Vec::new())]));
    assert_eq!(report.functions, Vec::new());
    assert_eq!(report.per_thread, vec![(7, Vec::new())]);
    assert_eq!(
        report.table(10),
        format!(
            "# durations: {}\n{}\n",
            crate::analysis::WALL_TIME,
            TABLE_HEADERS.join("  ")
        )
    );
}

#[test]
fn large_durations_use_the_histogram() {
    let events: Vec<GraphEvent> = (0..100u64)
        .flat_map(|call| {
            let start = call * 10_000_000;
            // Durations 1 ms, 2 ms, ..., 100 ms: not exactly representable.
            [
                entry(start, MAIN, 0),
                exit(start + (call + 1) * 1_000_000, MAIN, 0),
            ]
        })
        .collect();
    let stats = &latency(&trace(vec![(7, events)])).functions[0];
    assert_eq!(stats.calls, 100);
    assert_eq!(stats.total_ns, 5_050_000_000);
    assert_eq!(
        (stats.min_ns, stats.max_ns, stats.mean_ns),
        (1_000_000, 100_000_000, 50_500_000)
    );
    for (reported, exact) in [
        (stats.p50_ns, 50_000_000),
        (stats.p90_ns, 90_000_000),
        (stats.p99_ns, 99_000_000),
    ] {
        let error = (reported as f64 - exact as f64).abs() / exact as f64;
        assert!(
            error <= super::super::MAX_RELATIVE_ERROR,
            "{reported} vs {exact}"
        );
    }
}

#[test]
fn table_layout() {
    let mut events = nested_events();
    // A second, long main call, to exercise the units.
    events.extend([entry(1_000, MAIN, 0), exit(1_500_001_000, MAIN, 0)]);
    let report = latency(&trace(vec![(7, events)]));
    let expected = "\
# durations: wall-clock time, blocked time included
calls   total    self     avg     min     p50     p90     p99     max  function
    2  1.50 s  1.50 s  750 ms  200 ns  200 ns  1.50 s  1.50 s  1.50 s  demo::main
    1  100 ns   70 ns  100 ns  100 ns  100 ns  100 ns  100 ns  100 ns  demo::tokenize
    2   30 ns   30 ns   15 ns   10 ns   10 ns   20 ns   20 ns   20 ns  demo::next
    1   30 ns   30 ns   30 ns   30 ns   30 ns   30 ns   30 ns   30 ns  demo::parse
";
    assert_eq!(report.table(usize::MAX), expected);

    let expected_top = "\
# durations: wall-clock time, blocked time included
calls   total    self     avg     min     p50     p90     p99     max  function
    2  1.50 s  1.50 s  750 ms  200 ns  200 ns  1.50 s  1.50 s  1.50 s  demo::main
... 3 more functions
";
    assert_eq!(report.table(1), expected_top);
}

#[test]
fn table_aligns_micro_sign_by_characters() {
    let report = LatencyReport {
        functions: vec![
            stats(
                PARSE,
                "demo::parse",
                12,
                15_040,
                1_250,
                999,
                2_000,
                1_253,
                [1_250, 1_500, 2_000],
            ),
            stats(NEXT, "demo::next", 1_000, 900, 900, 1, 1, 1, [1; 3]),
        ],
        ..LatencyReport::default()
    };
    let expected = "\
# durations: wall-clock time, blocked time included
calls    total     self      avg     min      p50      p90      p99      max  function
   12  15.0 µs  1.25 µs  1.25 µs  999 ns  1.25 µs  1.50 µs  2.00 µs  2.00 µs  demo::parse
 1000   900 ns   900 ns     1 ns    1 ns     1 ns     1 ns     1 ns     1 ns  demo::next
";
    assert_eq!(report.table(10), expected);
}

#[test]
fn human_durations() {
    let cases = [
        (0, "0 ns"),
        (999, "999 ns"),
        (1_000, "1.00 µs"),
        (1_250, "1.25 µs"),
        (1_255, "1.26 µs"),
        (9_995, "10.0 µs"),
        (12_345, "12.3 µs"),
        (999_499, "999 µs"),
        (999_500, "1.00 ms"),
        (31_400_000, "31.4 ms"),
        (1_234_567_890, "1.23 s"),
        (999_600_000_000, "1000 s"),
        (3_456_000_000_000, "3460 s"),
        (u64::MAX, "18400000000 s"),
    ];
    for (ns, text) in cases {
        assert_eq!(human_duration(ns), text, "{ns} ns");
    }
}
