//! Lost records at the gaps of a source that knows where its threads lost
//! events ([`EventSource::gaps`]): the records around each gap, byte by
//! byte, what fntrace's reader gives back, and the same figures from the
//! real `uftrace report` and fntrace's report of the directory.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fs;

use super::format::{decode, RECORD_SIZE, TYPE_ENTRY, TYPE_EXIT, TYPE_LOST};
use super::tests::{ev, sample_trace, uftrace, In, Out, TempDir, T0};
use super::{read_uftrace_dir, write_uftrace_dir_of};
use crate::analysis::latency;
use crate::source::{EventSource, Gap, ThreadInfo};
use crate::trace::{GraphEvent, ThreadTrace, Trace};

/// A trace with the places of its threads' losses: `gaps[i]` for thread `i`.
struct Gapped {
    trace: Trace,
    gaps: Vec<Vec<Gap>>,
}

impl EventSource for Gapped {
    type Error = Infallible;

    fn pid(&self) -> u32 {
        self.trace.pid
    }

    fn exe(&self) -> &str {
        &self.trace.exe
    }

    fn threads(&self) -> Vec<ThreadInfo> {
        self.trace.threads()
    }

    fn name_of(&self, function: usize) -> String {
        self.trace.name_of(function)
    }

    fn read_thread<R>(
        &self,
        index: usize,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), Infallible> {
        self.trace.read_thread(index, read)
    }

    fn gaps(&self, index: usize) -> Vec<Gap> {
        self.gaps[index].clone()
    }
}

/// Thread 7001: a call of leaf inside mid inside main, a gap of 5 events
/// while all three run, then exits of calls entered before or in the gap,
/// a whole call of mid, and main's exit. Thread 7002: two calls running
/// when tracing started (exits only), a gap of 2, an exit (main's) after
/// it, then a whole call of main.
fn gapped() -> Gapped {
    let header = sample_trace();
    let by_name: HashMap<&str, usize> = header
        .names
        .iter()
        .map(|(&address, name)| (name.as_str(), address))
        .collect();
    let (main, mid, leaf) = (by_name["main"], by_name["mid"], by_name["leaf"]);
    let first = ThreadTrace {
        tid: 7001,
        name: None,
        events: vec![
            ev(T0 + 100, main, 0, In),
            ev(T0 + 110, mid, 1, In),
            ev(T0 + 120, leaf, 2, In),
            ev(T0 + 130, leaf, 2, Out),
            // gap: 5 events
            ev(T0 + 200, leaf, 2, Out),
            ev(T0 + 210, mid, 1, Out),
            ev(T0 + 220, mid, 1, In),
            ev(T0 + 230, leaf, 2, In),
            ev(T0 + 240, leaf, 2, Out),
            ev(T0 + 250, mid, 1, Out),
            ev(T0 + 300, main, 0, Out),
        ],
        lost: 5,
    };
    let second = ThreadTrace {
        tid: 7002,
        name: None,
        events: vec![
            ev(T0 + 50, leaf, 2, Out),
            ev(T0 + 60, mid, 1, Out),
            // gap: 2 events
            ev(T0 + 70, main, 0, Out),
            ev(T0 + 80, main, 0, In),
            ev(T0 + 90, main, 0, Out),
        ],
        lost: 2,
    };
    Gapped {
        trace: Trace {
            threads: vec![first, second],
            ..header
        },
        gaps: vec![
            vec![Gap { after: 4, count: 5 }],
            vec![Gap { after: 2, count: 2 }],
        ],
    }
}

/// A `.dat` file's records: (time, type, depth, address).
fn records(path: &std::path::Path) -> Vec<(u64, u64, u16, u64)> {
    let bytes = fs::read(path).unwrap();
    bytes
        .as_chunks::<RECORD_SIZE>()
        .0
        .iter()
        .map(|record| {
            let r = decode(record);
            assert!(!r.more && r.magic == 5);
            (r.time, r.kind, r.depth, r.addr)
        })
        .collect()
}

#[test]
fn each_gap_is_a_lost_record_with_every_call_closed_before_it() {
    let source = gapped();
    let dir = TempDir::new("gaps");
    write_uftrace_dir_of(&source.trace, &source, &dir.0, None).unwrap();
    let f = |name: &str| {
        source
            .trace
            .names
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(&a, _)| a as u64)
            .unwrap()
    };
    let (main, mid, leaf) = (f("main"), f("mid"), f("leaf"));
    assert_eq!(
        records(&dir.0.join("7001.dat")),
        [
            (T0 + 100, TYPE_ENTRY, 0, main),
            (T0 + 110, TYPE_ENTRY, 1, mid),
            (T0 + 120, TYPE_ENTRY, 2, leaf),
            (T0 + 130, TYPE_EXIT, 2, leaf),
            // Closed at the gap, at the last record's time.
            (T0 + 130, TYPE_EXIT, 1, mid),
            (T0 + 130, TYPE_EXIT, 0, main),
            // uftrace's lost record: time 0, depth 0, the count.
            (0, TYPE_LOST, 0, 5),
            // The calls whose exits follow: entries at the first event's
            // time.
            (T0 + 200, TYPE_ENTRY, 0, main),
            (T0 + 200, TYPE_ENTRY, 1, mid),
            (T0 + 200, TYPE_ENTRY, 2, leaf),
            (T0 + 200, TYPE_EXIT, 2, leaf),
            (T0 + 210, TYPE_EXIT, 1, mid),
            (T0 + 220, TYPE_ENTRY, 1, mid),
            (T0 + 230, TYPE_ENTRY, 2, leaf),
            (T0 + 240, TYPE_EXIT, 2, leaf),
            (T0 + 250, TYPE_EXIT, 1, mid),
            (T0 + 300, TYPE_EXIT, 0, main),
        ]
    );
    assert_eq!(
        records(&dir.0.join("7002.dat")),
        [
            // Calls running at the start: made-up entries (added).
            (T0 + 50, TYPE_ENTRY, 1, mid),
            (T0 + 50, TYPE_ENTRY, 2, leaf),
            (T0 + 50, TYPE_EXIT, 2, leaf),
            (T0 + 60, TYPE_EXIT, 1, mid),
            (0, TYPE_LOST, 0, 2),
            // main's exit after the gap: its entry there, none at the
            // thread's start.
            (T0 + 70, TYPE_ENTRY, 0, main),
            (T0 + 70, TYPE_EXIT, 0, main),
            (T0 + 80, TYPE_ENTRY, 0, main),
            (T0 + 90, TYPE_EXIT, 0, main),
        ]
    );
    let notes = fs::read_to_string(dir.0.join(super::format::FNTRACE_FILE)).unwrap();
    assert!(notes.contains("added 7002 0 1\n"), "{notes}");
    assert!(!notes.contains("added 7001"), "{notes}");

    // Read back: the events written, with the exits at the gap; the lost
    // records' counts.
    let back = read_uftrace_dir(&dir.0).unwrap();
    let first = back.threads.iter().find(|t| t.tid == 7001).unwrap();
    let shape: Vec<(u64, u16)> = first
        .events
        .iter()
        .map(|e| (e.time_ns - T0, e.depth))
        .collect();
    assert_eq!(
        shape,
        [
            (100, 0),
            (110, 1),
            (120, 2),
            (130, 2),
            (130, 1),
            (130, 0),
            (200, 0),
            (200, 1),
            (200, 2),
            (200, 2),
            (210, 1),
            (220, 1),
            (230, 2),
            (240, 2),
            (250, 1),
            (300, 0)
        ]
    );
    assert_eq!(first.lost, 5);
}

/// A `uftrace report` time (`0.130 us`) in nanoseconds, and its last
/// printed digit (uftrace cuts off the digits after it).
fn report_ns(value: &str, unit: &str) -> (f64, f64) {
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => panic!("unit {unit}"),
    };
    let decimals = value.split_once('.').map_or(0, |(_, d)| d.len());
    let value: f64 = value.parse().unwrap();
    (value * scale, scale / 10f64.powi(decimals as i32))
}

/// uftrace reads the directory sanely (graph and replay run, replay shows
/// the gaps), and its report of thread 7001 gives the calls, total and self
/// times of fntrace's report of the same directory. (Thread 7002 starts
/// inside two calls: uftrace counts them from their made-up entries,
/// fntrace's reader leaves those out.)
#[test]
fn uftrace_report_gives_fntrace_figures_on_a_directory_with_gaps() {
    let source = gapped();
    let dir = TempDir::new("gaps-report");
    write_uftrace_dir_of(&source.trace, &source, &dir.0, None).unwrap();
    let report = latency(&read_uftrace_dir(&dir.0).unwrap());
    let ours = &report
        .per_thread
        .iter()
        .find(|(tid, _)| *tid == 7001)
        .unwrap()
        .1;
    let out = uftrace(
        &["report", "-f", "total,self,call", "--tid", "7001"],
        &dir.0,
    );
    let mut rows = 0;
    for line in out.lines().skip(2) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [total, total_unit, own, own_unit, calls, name] = words[..] else {
            panic!("row {line:?} of\n{out}");
        };
        let row = ours
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("{name} not in {ours:?}"));
        assert_eq!(calls.parse::<u64>().unwrap(), row.calls, "{name}:\n{out}");
        for (value, unit, ns) in [
            (total, total_unit, row.total_ns),
            (own, own_unit, row.self_ns),
        ] {
            let (theirs, within) = report_ns(value, unit);
            assert!(
                (-0.5..within).contains(&(ns as f64 - theirs)),
                "{name}: uftrace {value} {unit}, fntrace {ns} ns:\n{out}"
            );
        }
        rows += 1;
    }
    assert_eq!(rows, ours.len(), "{out}");
    // mid: 20 ns (closed at the gap), 10 ns (after the gap), 30 ns.
    let mid = ours.iter().find(|f| f.name == "mid").unwrap();
    assert_eq!((mid.calls, mid.total_ns), (3, 60));

    let graph = uftrace(&["graph"], &dir.0);
    assert!(graph.contains("mid"), "{graph}");
    let replay = uftrace(&["replay", "--kernel-full"], &dir.0);
    assert_eq!(replay.matches("LOST").count(), 2, "{replay}");
    assert!(replay.contains("/* LOST 5 records!! */"), "{replay}");
}
