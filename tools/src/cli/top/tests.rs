//! Unit tests of `fntrace top`: intervals from samples, open calls split
//! across intervals, the frame's cells.

use super::*;
use fntrace_tools::analysis::{FunctionProfile, Histogram, NotKept, ProfileSnapshot};

fn function(name: &str, values: &[u64], self_ns: u64, running: u64) -> FunctionProfile {
    let mut durations = Histogram::new();
    for &v in values {
        durations.record(v);
    }
    FunctionProfile {
        function: name.len(),
        name: name.into(),
        total_ns: durations.sum(),
        self_ns,
        durations,
        running,
    }
}

fn snapshot(taken_ns: u64, functions: Vec<FunctionProfile>, lost: u64) -> ProfileSnapshot {
    ProfileSnapshot {
        taken_ns,
        threads: 2,
        functions,
        paths: Vec::new(),
        not_kept: NotKept {
            paths: 0,
            functions: lost,
        },
    }
}

/// 1 s apart: `get` went from 2 calls to 2 + 100 (99 of 1 µs, one of
/// 1 ms); `put` did nothing; `idle` has a call running.
fn two() -> (Sample, Sample) {
    let before = snapshot(
        1_000_000_000,
        vec![
            function("get", &[50_000, 50_000], 60_000, 0),
            function("put", &[7_000], 7_000, 0),
        ],
        3,
    );
    let mut later = vec![50_000, 50_000, 1_000_000];
    later.extend([1_000; 99]);
    let after = snapshot(
        2_000_000_000,
        vec![
            function("get", &later, 60_000 + 500_000, 0),
            function("put", &[7_000], 7_000, 0),
            function("idle", &[], 0, 1),
        ],
        5,
    );
    (sample(before), sample(after))
}

fn sample(snapshot: ProfileSnapshot) -> Sample {
    Sample {
        snapshot,
        open: Vec::new(),
        futures: Vec::new(),
    }
}

#[test]
fn the_interval_is_the_difference_of_two_snapshots() {
    let (before, after) = two();
    let interval = interval(&before, &after);
    assert!(!interval.reset);
    assert_eq!(
        (interval.ns, interval.lost, interval.threads),
        (1_000_000_000, 2, 2)
    );
    let get = &interval.rows.iter().find(|r| r.name == "get").unwrap();
    assert_eq!(
        (get.calls, get.total_ns, get.self_ns, get.avg_ns),
        (100, 1_099_000, 500_000, 10_990)
    );
    // The 99th of 100 calls is a 1 µs one; the 1 ms one is the 100th.
    // 1 µs lies in the bucket 1000..=1003: its middle.
    assert_eq!((get.p50_ns, get.p90_ns, get.p99_ns), (1_001, 1_001, 1_001));
    // `put` had no call; `idle` has one running.
    let names: Vec<&str> = interval.rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["get", "idle"]);
}

#[test]
fn a_reset_makes_the_later_snapshot_the_interval() {
    let (before, _) = two();
    let after = snapshot(1_500_000_000, vec![function("get", &[1_000], 1_000, 0)], 0);
    let interval = interval(&before, &sample(after));
    assert!(interval.reset);
    assert_eq!(interval.rows.len(), 1);
    assert_eq!(
        (interval.rows[0].calls, interval.rows[0].total_ns),
        (1, 1_000)
    );
    assert_eq!(interval.lost, 0);
}

#[test]
fn a_frame_as_text() {
    let (before, after) = two();
    let interval = interval(&before, &after);
    let view = View {
        sort: TopSort::Calls,
        filter: None,
        notrace: &[],
        limit: usize::MAX,
    };
    assert_eq!(
        frame_text("4242", &interval, &view),
        "fntrace top 4242: 1.000 s, 2 threads, 100 calls/s, sorted by calls; wall-clock time, \
         blocked time included; off-CPU: not available: not measured; 2 calls \
         not counted (no row left in the profile's budget)\n\
         calls/s  wall%  self-wall%  off-cpu%      avg      p50      p90      p99  running  function\n\
         \x20   100   0.1%        0.1%         -  11.0 µs  1.00 µs  1.00 µs  1.00 µs        0  get\n\
         \x20     0   0.0%        0.0%         -        -        -        -        -        1  idle\n"
    );
    let view = View {
        sort: TopSort::Total,
        filter: Some("id*"),
        notrace: &[],
        limit: 5,
    };
    let off = Interval {
        tracer_off: true,
        ..interval.clone()
    };
    assert!(header("4242", &off, &view)
        .contains("; the profile tracer is off: fntrace ctl 4242 enable profile"));
    let cpu = Interval {
        cpu_percent: Some(3.4),
        ..interval.clone()
    };
    assert!(
        header("4242", &cpu, &view).contains(": 1.000 s, 2 threads, process CPU 3%, 100 calls/s")
    );
    // This test's own process: some CPU time so far, read.
    assert!(process_cpu_ns(std::process::id()).is_some_and(|ns| ns % 10_000_000 == 0));
    let text = frame_text("4242", &interval, &view);
    assert!(
        text.ends_with("  idle\n") && !text.contains("  get\n"),
        "{text}"
    );
}

/// A call of `outer` from 0.5 s to 3.5 s on thread 7, calling `inner`
/// (1.0 s to 1.2 s, then 2.0 s to 2.6 s, open at 2.5 s), sampled every
/// second: each interval holds the part of each call inside it, and
/// the parts add up to the calls' durations (outer: 3 s, 2.2 s self).
#[test]
fn a_long_call_counts_in_each_interval_for_its_part() {
    let at = |s: f64| (s * 1e9).round() as u64;
    let profile = |taken: f64, outer: &[u64], inner: &[u64], running: (u64, u64)| {
        let mut outer = function("outer", outer, 0, running.0);
        outer.function = 1;
        outer.self_ns = outer.total_ns.saturating_sub(at(0.8));
        let self_ns = inner.iter().sum();
        let mut inner = function("inner", inner, self_ns, running.1);
        inner.function = 2;
        snapshot(at(taken), vec![outer, inner], 0)
    };
    let open = |function, depth, entry: f64, children: f64| OpenCall {
        tid: 7,
        depth,
        function,
        entry_ns: at(entry),
        children_ns: at(children),
    };
    let samples = [
        Sample {
            snapshot: profile(0.5, &[], &[], (0, 0)),
            open: vec![],
            futures: vec![],
        },
        Sample {
            snapshot: profile(1.5, &[], &[at(0.2)], (1, 0)),
            open: vec![open(1, 0, 0.5, 0.2)],
            futures: vec![],
        },
        Sample {
            snapshot: profile(2.5, &[], &[at(0.2)], (1, 1)),
            open: vec![open(1, 0, 0.5, 0.2), open(2, 1, 2.0, 0.0)],
            futures: vec![],
        },
        Sample {
            snapshot: profile(3.5, &[at(3.0)], &[at(0.2), at(0.6)], (0, 0)),
            open: vec![],
            futures: vec![],
        },
    ];
    let rows: Vec<Vec<(String, u64, u64)>> = samples
        .windows(2)
        .map(|pair| {
            interval(&pair[0], &pair[1])
                .rows
                .iter()
                .map(|r| (r.name.clone(), r.total_ns, r.self_ns))
                .collect()
        })
        .collect();
    let row = |name: &str, total: f64, self_s: f64| (name.to_string(), at(total), at(self_s));
    assert_eq!(
        rows,
        [
            vec![row("inner", 0.2, 0.2), row("outer", 1.0, 0.8)],
            vec![row("inner", 0.5, 0.5), row("outer", 1.0, 0.5)],
            vec![row("inner", 0.1, 0.1), row("outer", 1.0, 0.9)],
        ]
    );
}

/// Open calls come in the reply before the snapshot's text.
#[test]
fn a_sample_from_a_reply() {
    let (_, after) = two();
    let reply = format!(
        "profile: 3 functions, 0 paths, 2 threads\nopen 7 0 3 1500 200\nopen 7 1 4 1700 0\n{}",
        after.snapshot.to_text()
    );
    let sample = Sample::of_reply(&reply).unwrap();
    assert_eq!(sample.snapshot, after.snapshot);
    assert_eq!(
        sample.open,
        [
            OpenCall {
                tid: 7,
                depth: 0,
                function: 3,
                entry_ns: 1500,
                children_ns: 200
            },
            OpenCall {
                tid: 7,
                depth: 1,
                function: 4,
                entry_ns: 1700,
                children_ns: 0
            }
        ]
    );
    assert!(Sample::of_reply(&reply.replace("open 7 1 4", "open 7 1 zz")).is_err());
}

/// Threads 7 and 8 each have a call open through the interval (7 in
/// `outer` then `inner`, 8 in `outer`); thread 9's call began inside it.
/// The off-CPU time goes to the spanning calls' functions, once a thread.
#[test]
fn off_cpu_time_goes_to_the_calls_open_through_the_interval() {
    let call = |tid, depth, function, entry_ns| OpenCall {
        tid,
        depth,
        function,
        entry_ns,
        children_ns: 0,
    };
    let functions = |taken| {
        let mut outer = function("outer", &[], 0, 2);
        outer.function = 1;
        let mut inner = function("inner", &[], 0, 1);
        inner.function = 2;
        let mut late = function("late", &[], 0, 1);
        late.function = 3;
        snapshot(taken, vec![outer, inner, late], 0)
    };
    let spanning = vec![call(7, 0, 1, 10), call(7, 1, 2, 20), call(8, 0, 1, 30)];
    let before = Sample {
        snapshot: functions(1_000),
        open: spanning.clone(),
        futures: Vec::new(),
    };
    let mut open = spanning;
    // outer's completed children grew: still the same call.
    open[0].children_ns = 400;
    open.push(call(9, 0, 3, 1_500));
    let after = Sample {
        snapshot: functions(2_000),
        open,
        futures: Vec::new(),
    };
    let mut interval = interval(&before, &after);
    let time = |on_cpu_ns, runq_ns| sched::ThreadTime {
        window_ns: 1_000,
        on_cpu_ns,
        runq_ns,
    };
    let threads = [(7, time(100, 50)), (8, time(900, 100)), (9, time(0, 0))]
        .into_iter()
        .collect();
    sched::attribute(&mut interval, &before, &after, &threads);
    let row = |name: &str| {
        let row = interval.rows.iter().find(|r| r.name == name).unwrap();
        (row.off_cpu_ns, row.spanning_ns)
    };
    assert_eq!(
        (row("outer"), row("inner"), row("late")),
        ((1_000, 2_000), (900, 1_000), (0, 0))
    );
    let view = View {
        sort: TopSort::Total,
        filter: None,
        notrace: &[],
        limit: usize::MAX,
    };
    assert_eq!(
        thread_cells(&interval, &view),
        [
            ["7", "10.0%", "5.0%", "85.0%", "inner"],
            ["8", "90.0%", "10.0%", "0.0%", "outer"]
        ]
    );
    let inner_only = View {
        filter: Some("in*"),
        ..view
    };
    assert_eq!(thread_cells(&interval, &inner_only).len(), 1);
    let text = frame_text("4242", &interval, &view);
    assert!(!text.contains("off-CPU: not available"), "{text}");
    assert!(
        text.contains("\nthread  on-cpu%  runq%  blocked%  open through\n"),
        "{text}"
    );
}
