//! The memory budget of lossless recording (`--memory`):
//! a thread whose buffer is full takes more from a budget the threads
//! share, and waits for the writer only when the budget has none left.
//!
//! - `fntrace record --buffer 64K --memory 64M` on a CPU-bound burst of
//!   1.3M calls (`tests/fixtures/c/lossless.c`, built `gcc -O2 -pg`): 2.6M
//!   events, 41.6 MB, fit in the budget, so the thread never waits, even
//!   if the writer drained nothing; with `--memory 64K` (one buffer, no
//!   budget beyond it) the same burst waits. Both lose nothing: entries =
//!   exits = the calls the program counted, read back by fntrace's reader.
//! - Resident memory: each buffer reserves the whole budget's address
//!   space, and is written from one end to the other; the pages of what
//!   the writer consumed go back to the kernel, so a thread that writes
//!   far more than the budget in paced bursts keeps about what it holds in
//!   memory, not the budget (in-process, `c_pie`, through `record_with`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::native::{self, repo};
use fntrace::{Filter, RecordOptions, GRAPH_TRACER};
use fntrace_format::export::recorder_notes;

static SERIAL: Mutex<()> = Mutex::new(());

/// A directory removed when dropped, even when the test fails.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The sum of `key` over the directory's recorder notes (one per session).
fn note_sum(dir: &Path, key: &str) -> u64 {
    recorder_notes(dir)
        .unwrap_or_else(|e| panic!("notes of {}: {e}", dir.display()))
        .iter()
        .flat_map(|note| note.iter())
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum()
}

/// Calls of `lossless_top` by the one worker thread: 1 + 1 + 13 × N calls
/// in all, 2.6M events, 41.6 MB: less than the 64 MiB budget.
const N: u64 = 100_000;

/// Runs `fntrace record --buffer 64K --memory MEMORY` on `lossless 1 N`
/// into `data`, checks every call was recorded, and returns the waits the
/// recorder noted and its summary.
fn record_burst(fntrace: &Path, program: &Path, data: &Path, memory: &str) -> (u64, String) {
    let output = Command::new(fntrace)
        .args([
            "record",
            "--no-libcall",
            "--buffer",
            "64K",
            "--memory",
            memory,
            "-o",
        ])
        .arg(data)
        .arg("--")
        .arg(program)
        .args(["1", &N.to_string()])
        .env_remove("FNTRACE_LIB")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "fntrace record: {stderr}");
    let calls = 2 + 13 * N;
    assert_eq!(
        stdout.trim(),
        format!("calls {calls}"),
        "the program's own count"
    );
    let (counts, lost) = common::streamed_counts(data);
    assert_eq!(lost, 0, "--memory {memory}: {stderr}");
    assert_eq!(note_sum(data, "lost"), 0, "--memory {memory}: {stderr}");
    let expected: BTreeMap<String, (u64, u64)> = [
        ("main", 1),
        ("lossless_worker", 1),
        ("lossless_top", N),
        ("lossless_mid", 4 * N),
        ("lossless_leaf", 8 * N),
    ]
    .into_iter()
    .map(|(name, n)| (name.to_string(), (n, n)))
    .collect();
    assert_eq!(counts, expected, "--memory {memory}: {stderr}");
    assert_eq!(note_sum(data, "events"), 2 * calls);
    (note_sum(data, "waits"), stderr)
}

#[test]
fn a_burst_that_fits_the_budget_never_waits_and_one_buffer_waits() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    native::build_libraries();
    let fntrace = native::cli();
    let scratch = Scratch(common::temp_dir("memory-budget"));
    std::fs::create_dir_all(&scratch.0).unwrap();
    let program = scratch.0.join("lossless");
    native::gcc(&[
        "-O2".as_ref(),
        "-pg".as_ref(),
        "-pthread".as_ref(),
        repo().join("tests/fixtures/c/lossless.c").as_os_str(),
        "-o".as_ref(),
        program.as_os_str(),
    ]);

    let data = scratch.0.join("budget.data");
    let (waits, said) = record_burst(&fntrace, &program, &data, "64M");
    eprintln!("--memory 64M: {said}");
    assert_eq!(waits, 0, "with the budget: {said}");
    assert!(
        said.contains("threads waited for the writer 0 times"),
        "{said}"
    );
    let peak = note_sum(&data, "memory_peak");
    assert!(
        ((64 << 10)..=(64 << 20)).contains(&peak),
        "the budget's peak use, {peak} bytes: at least a buffer, at most the budget"
    );
    assert!(said.contains("MB budget (--memory)"), "{said}");

    let data = scratch.0.join("one-buffer.data");
    let (waits, said) = record_burst(&fntrace, &program, &data, "64K");
    eprintln!("--memory 64K: {said}");
    assert!(waits > 0, "one buffer and no budget beyond it: {said}");
}

#[test]
fn a_memory_budget_smaller_than_a_buffer_is_refused() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    native::build_libraries();
    let output = Command::new(native::cli())
        .args(["record", "--buffer", "1M", "--memory", "512K", "--", "true"])
        .env_remove("FNTRACE_LIB")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--memory 524288 is smaller than one thread's buffer (1048576 bytes"),
        "{stderr}"
    );
    // The library's own check (FNTRACE_MEMORY, RecordOptions).
    let dir = common::temp_dir("memory-budget-refused");
    let options = RecordOptions {
        buffer_events: 1 << 16,
        memory_bytes: 512 << 10,
        ..RecordOptions::default()
    };
    let refused = fntrace::record_with("graph", &Filter::new().include("pie_*"), &dir, &options)
        .err()
        .expect("a budget below one buffer must be refused")
        .to_string();
    assert!(
        refused.contains("the memory budget (524288 bytes, --memory/FNTRACE_MEMORY) is smaller"),
        "{refused}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bytes of the graph tracer's buffer pages in memory, all buffers.
fn resident() -> usize {
    GRAPH_TRACER
        .resident_buffer_bytes()
        .iter()
        .map(|&(_, bytes)| bytes)
        .sum()
}

/// The most [`resident`] gave, sampled every millisecond from another
/// thread until stopped.
struct ResidentSampler {
    done: Arc<AtomicBool>,
    most: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl ResidentSampler {
    fn start() -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let most = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (done, most) = (Arc::clone(&done), Arc::clone(&most));
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    most.fetch_max(resident(), Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            })
        };
        ResidentSampler { done, most, thread }
    }

    fn stop(self) -> usize {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.most.load(Ordering::Relaxed)
    }
}

#[test]
fn buffers_reserved_for_the_budget_keep_about_what_they_hold_in_memory() {
    // 64 KiB buffers: pages given back 4 KiB at a time.
    check_resident(4096, 64 << 20, 1_000);
}

#[test]
fn buffers_of_huge_pages_keep_about_what_they_hold_in_memory() {
    // 2 MiB buffers: backed by transparent huge pages where the kernel has
    // them, given back 2 MiB at a time.
    check_resident(1 << 17, 256 << 20, 4_000);
}

/// Two threads run `c_pie::run(RUN)` 400 times each, paced, while
/// recording with the given buffer and budget; the most resident bytes of
/// the buffers, sampled every millisecond, stay within what the threads
/// held and a few units per thread, far below what they wrote.
#[allow(non_snake_case)]
fn check_resident(BUFFER_EVENTS: usize, MEMORY: usize, RUN: i64) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const THREADS: usize = 2;
    const ROUNDS: i64 = 400;
    let dir = Scratch(common::temp_dir("memory-budget-resident"));
    let options = RecordOptions {
        buffer_events: BUFFER_EVENTS,
        memory_bytes: MEMORY,
        ..RecordOptions::default()
    };
    let recording =
        fntrace::record_with("graph", &Filter::new().include("pie_*"), &dir.0, &options).unwrap();
    // Sampled every millisecond while the threads run.
    let sampler = ResidentSampler::start();
    // Paced bursts (a 1 ms sleep after each run): the writer keeps up, and
    // the threads hold little of the budget.
    common::paced_c_runs(THREADS, ROUNDS, RUN);
    let most = sampler.stop();
    let report = recording.stop().unwrap();

    let calls = assert_paced_runs_recorded(&report, &dir.0, (THREADS, ROUNDS, RUN));

    // Per thread, three ranges of at most what it held (the peak): the
    // events not yet drained, those a running drain has read (their pages
    // go back at its end, all at once), and the pages made present ahead
    // of its head (no more than it held); each range with a partial unit
    // at both ends (pages, or 2 MiB huge pages for buffers of 2 MiB or
    // more); one window (a buffer) consumed and not yet given back, the
    // 64 KiB made present ahead at least, and the header's page; plus the
    // 2 ready buffers' 256 KiB (in a huge page each, where they are used).
    // (Two ranges were counted until 2026-11-27: on a quiet host the
    // threads, faster, wrote enough during a drain to exceed that by
    // 1-4 huge pages, 2 runs in 8.)
    let buffer = BUFFER_EVENTS * 16;
    let unit = if buffer >= 2 << 20 { 2 << 20 } else { 4096 };
    let bound = 3 * report.memory_peak as usize
        + THREADS * (buffer + (64 << 10) + 6 * unit + 4096)
        + 2 * (256 << 10).max(unit);
    let written = 2 * calls as usize * 16;
    eprintln!(
        "buffer {} KiB: {} MiB written by {THREADS} threads; peak held {} KiB of {} MiB; most resident {} KiB, \
         bound {} KiB; waits {}",
        buffer >> 10,
        written >> 20,
        report.memory_peak >> 10,
        MEMORY >> 20,
        most >> 10,
        bound >> 10,
        report.waits,
    );
    // Without the pages given back, each thread's buffer would keep what
    // it wrote (up to its capacity, the budget).
    // (The bound grows with what the threads held: a writer starved of
    // CPU lets them hold most of the budget.)
    let kept_without = THREADS * (written / THREADS).min(MEMORY);
    assert!(
        kept_without > bound,
        "the test would not tell: {kept_without} bytes, bound {bound}"
    );
    assert!(most <= bound, "{most} bytes resident, bound {bound}");
}

/// Minor page faults of this process so far (the kernel zeroes a fresh
/// anonymous page at each first touch).
fn minor_faults() -> i64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is valid.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
    usage.ru_minflt
}

/// Two threads write 38 MB in paced bursts of half a buffer (64 KiB
/// buffers, a 4 MiB budget: each buffer reserves 4 MiB; 3 ms between
/// bursts), the writer draining every millisecond: it keeps up, so each buffer is empty when
/// its thread starts its next burst, and the thread wraps back to the
/// buffer's first pages. The buffers keep about a buffer each in memory,
/// and the kernel zeroes few pages: without the early wrap each buffer
/// swept its 4 MiB, a fresh page at a time (≈ 9,400 faults, one per page
/// written). Every event is recorded.
#[test]
fn buffers_whose_writer_keeps_up_stay_in_their_first_pages() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const THREADS: usize = 2;
    const ROUNDS: i64 = 600;
    const RUN: i64 = 200;
    const BUFFER_EVENTS: usize = 4096;
    let dir = Scratch(common::temp_dir("memory-budget-wrap"));
    let options = RecordOptions {
        buffer_events: BUFFER_EVENTS,
        memory_bytes: 4 << 20,
        drain_interval: std::time::Duration::from_millis(1),
        ..RecordOptions::default()
    };
    let recording =
        fntrace::record_with("graph", &Filter::new().include("pie_*"), &dir.0, &options).unwrap();
    let sampler = ResidentSampler::start();
    let faults_before = minor_faults();
    // A 3 ms pause after each burst (a burst is ≈ 0.1 ms of the writer's
    // work): the writer keeps up even on a loaded machine.
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..ROUNDS {
                    std::hint::black_box(fntrace_fixtures::c_pie::run(RUN));
                    std::thread::sleep(std::time::Duration::from_millis(3));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let faults = minor_faults() - faults_before;
    let most = sampler.stop();
    let report = recording.stop().unwrap();

    let calls = assert_paced_runs_recorded(&report, &dir.0, (THREADS, ROUNDS, RUN));

    let buffer = BUFFER_EVENTS * 16;
    let written = 2 * calls as usize * 16;
    let pages_written = written / 4096;
    // As in `check_resident`: what the threads held (twice), and per
    // thread its buffer (the home, never given back), the 64 KiB made
    // present ahead and the header's page; plus the 2 ready buffers'
    // 256 KiB.
    let bound =
        2 * report.memory_peak as usize + THREADS * (buffer + (64 << 10) + 4096) + 2 * (256 << 10);
    eprintln!(
        "{} MiB written ({pages_written} pages) by {THREADS} threads; most resident {} KiB, bound \
         {} KiB; {faults} minor faults; waits {}; peak held {} KiB",
        written >> 20,
        most >> 10,
        bound >> 10,
        report.waits,
        report.memory_peak >> 10,
    );
    assert!(most <= bound, "{most} bytes resident, bound {bound}");
    // Without the early wrap: 9,900 faults (one per page written, and the
    // process's own); with it, 190-410 here (1,200-2,500 with 1 ms pauses,
    // mostly the writer's and the test's own, a few per drain).
    assert!(
        faults < (pages_written / 4) as i64,
        "{faults} minor faults for {pages_written} pages written"
    );
}

/// The calls of `common::paced_c_runs(threads, rounds, run)`, each
/// recorded exactly: `report`'s events, and the functions' entries and
/// exits read back from `dir`; 0 lost. Returns the calls.
fn assert_paced_runs_recorded(
    report: &fntrace::RecordReport,
    dir: &Path,
    (threads, rounds, run): (usize, i64, i64),
) -> u64 {
    let calls = threads as u64 * rounds as u64 * (1 + 5 * run as u64);
    assert_eq!((report.events, report.lost), (2 * calls, 0), "{report:?}");
    let (counts, lost) = common::streamed_counts(dir);
    assert_eq!(lost, 0);
    let runs = threads as u64 * rounds as u64;
    assert_eq!(counts["pie_run"], (runs, runs));
    assert_eq!(counts["pie_mid"], (runs * run as u64, runs * run as u64));
    assert_eq!(
        counts["pie_leaf"],
        (4 * runs * run as u64, 4 * runs * run as u64)
    );
    calls
}
