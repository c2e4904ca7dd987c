//! Flight recorder snapshots whose threads lost events (buffers of 4,096
//! events, two CPU-bound `-pg` threads): each gap is a lost record where it
//! happened, with no call open across it; uftrace 0.13 reads the snapshot
//! sanely (`graph` runs, `replay` shows every gap, `report` totals are
//! within the recording) and its `report` gives fntrace's figures, function
//! by function; and the lost records have the layout of those uftrace's own
//! recorder writes when it loses records (made to, for real).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{native, read_trace_dir, temp_dir, uftrace};
use fntrace::{Filter, FlightOptions};
use fntrace_fixtures::c_pie;

/// One recorder at a time per process: the tests of this file take turns.
static ONE_RECORDER: Mutex<()> = Mutex::new(());

const TYPE_ENTRY: u64 = 0;
const TYPE_EXIT: u64 = 1;
const TYPE_LOST: u64 = 2;
const RECORD_MAGIC: u64 = 5;

/// A snapshot of two threads each running the `-pg` fixture's `run(n)`
/// (5n + 1 calls), with buffers of 4,096 events drained every 20 ms: they
/// fill many times over and drop events. The window (64 MiB) evicts none.
fn lossy_snapshot(dir: &Path, n: i64) -> fntrace::SnapshotReport {
    let options = FlightOptions {
        buffer_events: 4096,
        drain_interval: Duration::from_millis(20),
        ..FlightOptions::default()
    };
    let flight = fntrace::flight_record("graph", &Filter::new().include("pie_*"), options).unwrap();
    // New threads: their buffers are made now, with 4,096 slots.
    let threads: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || std::hint::black_box(c_pie::run(n))))
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let snapshot = flight.snapshot(dir).unwrap();
    flight.stop().unwrap();
    assert!(snapshot.lost > 0, "{snapshot:?}");
    assert_eq!(snapshot.evicted, 0, "{snapshot:?}");
    snapshot
}

/// The `fntrace` command, built.
fn fntrace_cli(args: &[&str], dir: &Path) -> String {
    let output = Command::new(native::cli())
        .args(args)
        .arg(dir)
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "fntrace {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn uftrace_gives_fntrace_figures_on_a_snapshot_with_loss() {
    let _turn = ONE_RECORDER.lock().unwrap_or_else(|e| e.into_inner());
    let dir = temp_dir("flight-loss");
    let started = Instant::now();
    let snapshot = lossy_snapshot(&dir, 200_000);
    let wall_ns = started.elapsed().as_nanos() as f64;

    // Each lost record is uftrace's (time 0, depth 0, the count), with no
    // call open at it (entries and exits balance since the previous one),
    // and some sit between records, where the gaps were.
    let (mut lost_records, mut inside, mut counted) = (0, 0, 0);
    for file in common::thread_files(&dir) {
        let records = common::dat_records(&file);
        let mut open = 0i64;
        for (index, &(time, word)) in records.iter().enumerate() {
            assert_eq!((word >> 3) & 7, RECORD_MAGIC);
            match word & 3 {
                TYPE_ENTRY => open += 1,
                TYPE_EXIT => open -= 1,
                TYPE_LOST => {
                    assert_eq!((time, word & 0xffff), (0, 0x2a), "{}", file.display());
                    assert_eq!(open, 0, "a call open at lost record {index} of {file:?}");
                    lost_records += 1;
                    counted += word >> 16;
                    inside += usize::from(index > 0 && index + 1 < records.len());
                }
                _ => panic!("event record in {file:?}"),
            }
            assert!(open >= 0, "an exit without entry in {file:?}");
        }
    }
    assert!(inside > 0, "no lost record between records");
    // The lost records count the events the buffers dropped, and the exits
    // left out after a gap (their entries were lost).
    let trace = read_trace_dir(&dir);
    assert_eq!(trace.lost(), counted);
    assert!(counted >= snapshot.lost, "{counted} {snapshot:?}");

    // fntrace's report of the directory: every call completed (calls open
    // at a gap end there, the threads ended before the snapshot).
    let ours = fntrace::analysis::latency(&trace);
    assert_eq!(
        (ours.unmatched_exits, ours.unfinished_calls),
        (0, 0),
        "{ours:?}"
    );
    let table = fntrace_cli(&["report"], &dir);
    assert!(table.contains("lost while recording"), "{table}");
    for function in ["pie_run", "pie_mid", "pie_leaf"] {
        assert!(table.contains(function), "{table}");
    }
    fntrace_cli(&["graph"], &dir);
    fntrace_cli(&["replay"], &dir);

    // uftrace's report: per function, the calls and the total and self
    // times fntrace's report gives, none longer than the test.
    common::assert_uftrace_report_is(&dir, &ours, wall_ns);

    // uftrace's graph runs (it crashed with calls open at a lost record),
    // and counts the calls fntrace counts under pie_mid.
    uftrace(&["graph", "--no-pager"], &dir);
    let graph = Command::new("uftrace")
        .args(["graph", "--no-pager", "-d"])
        .arg(&dir)
        .arg("pie_mid")
        .output()
        .unwrap();
    assert!(graph.status.success(), "{graph:?}");
    let graph = String::from_utf8(graph.stdout).unwrap();
    let calls = |name: &str| {
        ours.functions
            .iter()
            .find(|f| f.name == name)
            .map_or(0, |f| f.calls)
    };
    let mid_line = format!("({}) pie_mid", calls("pie_mid"));
    let leaf_line = format!("({}) pie_leaf", calls("pie_leaf"));
    assert!(
        graph.contains(&mid_line) && graph.contains(&leaf_line),
        "{mid_line}, {leaf_line}:\n{graph}"
    );

    // uftrace's replay shows every lost record (outside every call, so
    // only with --kernel-full; its default hides those).
    let replay = uftrace(&["replay", "--no-pager", "--kernel-full"], &dir);
    assert_eq!(replay.matches("/* LOST ").count(), lost_records);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lost records of a `uftrace record -b 4K` of `uftrace_loses.c`,
/// made to lose records: (time, second word) each.
fn uftrace_lost_records() -> Vec<(u64, u64)> {
    let work = temp_dir("uftrace-loses");
    std::fs::create_dir_all(&work).unwrap();
    let program = work.join("uftrace_loses");
    let source = native::repo().join("tests/c/uftrace_loses.c");
    let gcc = Command::new("gcc")
        .args(["-O2", "-pg", "-o"])
        .arg(&program)
        .arg(&source)
        .output()
        .unwrap();
    assert!(gcc.status.success(), "{gcc:?}");
    let data = work.join("data");
    // 250,001 calls; about 64 buffers of 4 KiB fit in the address space
    // left: the recorder falls behind that many within milliseconds.
    let status = Command::new("timeout")
        .args([
            "120",
            "uftrace",
            "record",
            "--no-event",
            "--no-sched",
            "-b",
            "4K",
        ])
        .arg("-d")
        .arg(&data)
        .arg(&program)
        .args(["50000", "256"])
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let lost: Vec<(u64, u64)> = common::thread_files(&data)
        .iter()
        .flat_map(|file| common::dat_records(file))
        .filter(|&(_, word)| word & 3 == TYPE_LOST)
        .collect();
    let _ = std::fs::remove_dir_all(&work);
    lost
}

#[test]
fn lost_records_are_laid_out_as_uftrace_writes_them() {
    let theirs = uftrace_lost_records();
    assert!(!theirs.is_empty(), "uftrace lost no record");
    let ours: Vec<(u64, u64)> = {
        let _turn = ONE_RECORDER.lock().unwrap_or_else(|e| e.into_inner());
        let dir = temp_dir("flight-loss-layout");
        lossy_snapshot(&dir, 20_000);
        let lost = common::thread_files(&dir)
            .iter()
            .flat_map(|file| common::dat_records(file))
            .filter(|&(_, word)| word & 3 == TYPE_LOST)
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        lost
    };
    assert!(!ours.is_empty());
    // Field by field: time 0; type 2 (lost), more 0, magic 5; the count in
    // the 48 address bits. uftrace leaves the depth bits as the reused
    // buffer had them; fntrace writes depth 0 (uftrace's in a fresh buffer).
    let fields = |(time, word): (u64, u64)| {
        (
            time,
            word & 3,
            (word >> 2) & 1,
            (word >> 3) & 7,
            word >> 16 > 0,
        )
    };
    for record in theirs.iter().chain(&ours) {
        assert_eq!(fields(*record), (0, TYPE_LOST, 0, RECORD_MAGIC, true));
    }
    for &(_, word) in &ours {
        assert_eq!((word >> 6) & 0x3ff, 0, "depth");
    }
}
