//! What the flight recorder says is what happened:
//!
//! - a trigger's snapshot that cannot be written (a full file system) is
//!   removed, not left half written to be read as a whole one, spends
//!   neither limit (once there is room again, triggers write as many
//!   snapshots as before), and is listed with its error;
//! - a snapshot taken while a thread runs inside a call whose entry was
//!   evicted, with lost events in the window, reads in uftrace 0.13 without
//!   a `<0>` row (the thread's depths start at 0);
//! - `fntrace record --flight` says what the recorder lost over the run,
//!   not "0 lost" for a window that holds no gap.
//!
//! In process, with the `-pg` fixtures (`c_pie`, `c_hazards`), and through
//! `fntrace record` with `tests/fixtures/c/lossless.c`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::native::{self, repo, Scratch, Tmpfs};
use common::{read_trace_dir, uftrace};
use fntrace::{Filter, FlightOptions};
use fntrace_fixtures::{c_hazards, c_pie};

/// One recorder at a time per process: the tests of this file take turns.
static ONE_RECORDER: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_RECORDER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fills the file system of `dir` with the file `name`: writes until it
/// is full.
fn fill(dir: &Path, name: &str) {
    use std::io::Write;
    let mut file = std::fs::File::create(dir.join(name)).unwrap();
    let block = vec![0x5au8; 64 << 10];
    loop {
        match file.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", dir.display()),
        }
    }
}

/// Waits (up to `limit`) until `done(triggered)`; the snapshots triggered.
fn wait_for(
    flight: &fntrace::FlightRecorder,
    limit: Duration,
    mut poke: impl FnMut(),
    done: impl Fn(&[fntrace::TriggeredSnapshot]) -> bool,
) -> Vec<fntrace::TriggeredSnapshot> {
    let deadline = Instant::now() + limit;
    loop {
        let triggered = flight.triggered();
        if done(&triggered) || Instant::now() > deadline {
            return triggered;
        }
        poke();
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_snapshot_that_cannot_be_written_is_removed_and_spends_no_limit() {
    let _turn = turn();
    let scratch = Scratch::new("flight-full");
    let mount = Tmpfs::mount(&scratch.path().join("small"), "4m");
    let snaps = mount.0.join("snaps");
    std::fs::create_dir(&snaps).unwrap();
    // Two snapshots in the recorder's life: failed writes must not use them.
    const LIFE: usize = 2;
    let options = FlightOptions {
        budget_bytes: 1 << 20,
        max_trigger_snapshots: LIFE,
        snapshots_per_minute: 1000,
        ..FlightOptions::default()
    };
    let flight = fntrace::flight_record("graph", &Filter::new().include("pie_*"), options).unwrap();
    flight
        .trigger_on_slow_call("pie_run", Duration::from_millis(1), &snaps)
        .unwrap();
    fill(&mount.0, "filler");
    // Each run(200,000) is 1,000,001 calls: slow enough, every time.
    let slow_call = || {
        std::hint::black_box(c_pie::run(200_000));
    };
    let failed = wait_for(&flight, Duration::from_secs(60), slow_call, |t| {
        t.iter().filter(|t| t.result.is_err()).count() >= 2
    });
    let errors: Vec<&String> = failed
        .iter()
        .filter_map(|t| t.result.as_ref().err())
        .collect();
    assert!(errors.len() >= 2, "no failed snapshot: {failed:?}");
    assert!(failed.iter().all(|t| t.result.is_err()), "{failed:?}");
    for error in &errors {
        assert!(error.contains("No space left"), "{error}");
    }
    let left: Vec<_> = std::fs::read_dir(&snaps).unwrap().collect();
    assert!(left.is_empty(), "half-written snapshots left: {left:?}");

    // Room again: the recorder's whole life of snapshots is still there.
    std::fs::remove_file(mount.0.join("filler")).unwrap();
    let all = wait_for(&flight, Duration::from_secs(120), slow_call, |t| {
        t.iter().filter(|t| t.result.is_ok()).count() >= LIFE
    });
    let written: Vec<&fntrace::SnapshotReport> =
        all.iter().filter_map(|t| t.result.as_ref().ok()).collect();
    assert_eq!(written.len(), LIFE, "{all:?}");
    for snapshot in &written {
        // Whole: fntrace and uftrace read it (records closing and opening
        // calls at a gap in the window, if any, come on top of its events).
        let trace = read_trace_dir(&snapshot.dir);
        let read: u64 = trace.threads.iter().map(|t| t.events.len() as u64).sum();
        assert!(
            read >= snapshot.events && snapshot.events > 0,
            "{snapshot:?}"
        );
        let report = uftrace(&["report", "--no-pager"], &snapshot.dir);
        assert!(report.contains("pie_leaf"), "{report}");
        let trigger = std::fs::read_to_string(snapshot.dir.join(fntrace::TRIGGER_FILE)).unwrap();
        assert!(trigger.contains("slow call pie_run"), "{trigger}");
    }
    let report = flight.stop().unwrap();
    assert_eq!(
        report.triggered.iter().filter(|t| t.result.is_ok()).count(),
        LIFE
    );
    // Every other trigger's snapshot failed, said with its error.
    let failures = report
        .triggered
        .iter()
        .filter(|t| t.result.is_err())
        .count();
    assert!(failures >= errors.len(), "{report:?}");
    assert_eq!(report.triggered.len(), LIFE + failures, "{report:?}");
    let on_disk = std::fs::read_dir(&snaps).unwrap().count();
    assert_eq!(on_disk, LIFE, "one directory a snapshot written, no other");
}

/// Where the thread inside `hz_call_back` is: 0 running, 1 waiting for the
/// snapshot, 2 snapshot taken.
static INSIDE: AtomicU8 = AtomicU8::new(0);

/// Called from the traced C frame `hz_call_back`: many calls that its
/// thread's small buffer cannot hold (events lost) and the small window
/// cannot keep (the frame's entry evicted), then waits, still inside the
/// frame, while the snapshot is taken.
extern "C" fn busy_inside(rounds: i64) -> i64 {
    let mut sum = 0;
    for _ in 0..rounds {
        sum += std::hint::black_box(c_pie::run(20_000));
    }
    INSIDE.store(1, Ordering::Release);
    while INSIDE.load(Ordering::Acquire) != 2 {
        std::thread::sleep(Duration::from_millis(1));
    }
    sum
}

#[test]
fn uftrace_shows_no_phantom_row_for_frames_evicted_from_a_window_with_gaps() {
    let _turn = turn();
    let scratch = Scratch::new("flight-phantom");
    let dir = scratch.path().join("snapshot");
    let options = FlightOptions {
        budget_bytes: 64 << 10,
        buffer_events: 4096,
        drain_interval: Duration::from_millis(20),
        ..FlightOptions::default()
    };
    let filter = Filter::new().include("pie_*").include("hz_call_back");
    let flight = fntrace::flight_record("graph", &filter, options).unwrap();
    INSIDE.store(0, Ordering::Release);
    // A new thread: its buffer is made now, with 4,096 slots.
    let worker = std::thread::spawn(|| c_hazards::call_back(busy_inside, 4));
    while INSIDE.load(Ordering::Acquire) != 1 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let snapshot = flight.snapshot(&dir).unwrap();
    INSIDE.store(2, Ordering::Release);
    worker.join().unwrap();
    flight.stop().unwrap();
    assert!(snapshot.lost > 0, "no gap in the window: {snapshot:?}");
    assert!(snapshot.evicted > 0, "nothing evicted: {snapshot:?}");

    // fntrace's reading: the worker's thread starts at depth 0, inside the
    // evicted frame (its calls of pie_run, pie_mid and pie_leaf only).
    let trace = read_trace_dir(&dir);
    let names: Vec<String> = trace
        .threads
        .iter()
        .flat_map(|t| t.events.iter().map(|e| trace.name_of(e.function)))
        .collect();
    assert!(!names.iter().any(|n| n == "hz_call_back"), "{names:?}");
    for thread in &trace.threads {
        let least = thread.events.iter().map(|e| e.depth).min();
        assert_eq!(least, Some(0), "thread {}", thread.tid);
    }
    let report = uftrace(&["report", "--no-pager"], &dir);
    assert!(report.contains("pie_leaf"), "{report}");
    assert!(!report.contains("<0>"), "a phantom row: {report}");
    let graph = uftrace(&["graph", "--no-pager"], &dir);
    assert!(!graph.contains("<0>"), "a phantom frame: {graph}");
}

/// `tests/fixtures/c/lossless.c` built `gcc -O2 -pg` into `dir`.
fn build_lossless(dir: &Path) -> PathBuf {
    let program = dir.join("lossless");
    native::gcc(&[
        "-O2".as_ref(),
        "-pg".as_ref(),
        "-pthread".as_ref(),
        repo().join("tests/fixtures/c/lossless.c").as_os_str(),
        "-o".as_ref(),
        program.as_os_str(),
    ]);
    program
}

#[test]
fn record_flight_says_what_the_recorder_lost_over_the_run() {
    let scratch = Scratch::new("flight-said");
    let program = build_lossless(scratch.path());
    let dir = scratch.path().join("window");
    // Buffers of 4,096 events and a window of 64 KiB: 2 threads making
    // 13 million events lose some, and the window keeps the last 3,072.
    let output = Command::new(native::cli_with_library())
        .args([
            "record",
            "--no-libcall",
            "--flight",
            "64K",
            "--buffer",
            "64K",
            "-o",
        ])
        .arg(&dir)
        .arg("--")
        .arg(&program)
        .args(["2", "500000"])
        .env_remove("FNTRACE_LIB")
        .output()
        .unwrap();
    let stderr = native::stderr_of(&output);
    assert!(output.status.success(), "{stderr}");
    let notes = fntrace_format::export::recorder_notes(&dir).unwrap();
    let noted = |key: &str| -> u64 {
        notes
            .iter()
            .flatten()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.parse::<u64>().unwrap())
            .sum()
    };
    let (lost, events) = (noted("flight_lost"), noted("flight_events"));
    assert!(lost > 0, "nothing lost (the test needs a loss): {stderr}");
    // Every event the program made was kept for a while or lost: 2 per
    // call (lossless.c: 1 + 2 + 13 * 2 * n calls).
    assert_eq!(events + lost, 2 * (1 + 2 + 13 * 2 * 500_000), "{notes:?}");
    assert!(
        stderr.contains(&format!(
            "the flight recorder LOST {lost} of {}",
            events + lost
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{lost} lost over the run")),
        "{stderr}"
    );
    assert!(
        !stderr.contains(" 0 lost"),
        "0 lost beside a loss: {stderr}"
    );
    // And the directory says it to whoever reads it later.
    let report = Command::new(native::cli())
        .args(["report", "--no-pager"])
        .arg(&dir)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.contains(&format!(
            "over its run the recorder lost {lost} events ({} in this window)",
            noted("window_lost")
        )),
        "{report}"
    );
}

/// Calls of pie_leaf the pacing thread makes each tick (a sleep of 200 µs
/// or more between ticks).
static PER_TICK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static PACING: AtomicU8 = AtomicU8::new(0);
static PACED_CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Buffers of the staging test, in events.
const STAGING_BUFFER: u64 = 65_536;

/// What one try of the staging test saw: calls the pacing thread made
/// while the first snapshot was written, in all, and what the last
/// snapshot holds of its thread (entries, lost).
struct Paced {
    during: u64,
    made: u64,
    entries: u64,
    lost: u64,
}

/// A flight recorder whose window holds 15 million events, a thread
/// calling pie_leaf `per_tick` times a tick meanwhile, a snapshot written
/// (which takes long), then another: what the second holds of the thread.
fn paced_through_a_snapshot(scratch: &Path, per_tick: u64) -> Paced {
    let options = FlightOptions {
        budget_bytes: 512 << 20,
        buffer_events: STAGING_BUFFER as usize,
        ..FlightOptions::default()
    };
    let flight = fntrace::flight_record("graph", &Filter::new().include("pie_*"), options).unwrap();
    // Millions of events in the window, writing which takes a while: 250
    // threads of 60,002 events each (their buffers hold them whole).
    for _ in 0..250 {
        std::thread::spawn(|| std::hint::black_box(c_pie::run(6_000)))
            .join()
            .unwrap();
    }
    PER_TICK.store(per_tick, Ordering::Release);
    PACING.store(0, Ordering::Release);
    PACED_CALLS.store(0, Ordering::Release);
    let pacer = std::thread::spawn(|| {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let per_tick = PER_TICK.load(Ordering::Acquire);
        while PACING.load(Ordering::Acquire) != 2 {
            for i in 0..per_tick {
                std::hint::black_box(c_pie::leaf(i as i64));
            }
            PACED_CALLS.fetch_add(per_tick, Ordering::AcqRel);
            std::thread::sleep(Duration::from_micros(200));
        }
        tid
    });
    std::thread::sleep(Duration::from_millis(50));
    let before = PACED_CALLS.load(Ordering::Acquire);
    let first = scratch.join(format!("first-{per_tick}"));
    flight.snapshot(&first).unwrap();
    let during = PACED_CALLS.load(Ordering::Acquire) - before;
    PACING.store(2, Ordering::Release);
    let tid = pacer.join().unwrap();
    let made = PACED_CALLS.load(Ordering::Acquire);
    let last = scratch.join(format!("last-{per_tick}"));
    let snapshot = flight.snapshot(&last).unwrap();
    flight.stop().unwrap();
    assert_eq!(snapshot.evicted, 0, "{snapshot:?}");
    let trace = read_trace_dir(&last);
    let thread = trace.threads.iter().find(|t| t.tid == tid).unwrap();
    let entries = thread
        .events
        .iter()
        .filter(|e| e.kind == fntrace::EventKind::Entry)
        .count() as u64;
    // The snapshots are large: gone before the next try.
    let _ = std::fs::remove_dir_all(&first);
    let _ = std::fs::remove_dir_all(&last);
    Paced {
        during,
        made,
        entries,
        lost: thread.lost,
    }
}

#[test]
fn the_window_keeps_recording_while_a_snapshot_is_written() {
    let _turn = turn();
    let scratch = Scratch::new("flight-staging");
    // The test tells only if the thread made more events during the first
    // write than its buffer holds (a quarter more): the write's length
    // varies with the machine's load, so the pace doubles until it does.
    // The slowest pace leaves the writer most room: its buffer then holds
    // about a second of calls.
    let mut tried = Vec::new();
    for per_tick in [10, 20, 40, 80] {
        let paced = paced_through_a_snapshot(scratch.path(), per_tick);
        if 2 * paced.during <= STAGING_BUFFER + STAGING_BUFFER / 4 {
            tried.push((per_tick, paced.during));
            continue;
        }
        // Every call it made is in the last snapshot, none lost.
        assert_eq!(
            paced.lost, 0,
            "{} calls made during the first snapshot",
            paced.during
        );
        assert_eq!(paced.entries, paced.made);
        return;
    }
    panic!(
        "each snapshot was written before the pacing thread made {} events (calls per \
         tick, calls during the write: {tried:?}): make the window larger",
        STAGING_BUFFER + STAGING_BUFFER / 4
    );
}
