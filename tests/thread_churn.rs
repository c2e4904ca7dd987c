//! Short-lived threads during a recording:
//! threads that each make 901 traced calls and exit, 20 at a time. A
//! thread's buffer goes back to the pool at its exit and is reused by the
//! next thread once the writer drained it; free buffers beyond a few give
//! their pages back. Before, buffers of exited threads were found only by
//! the reader (idle across two drains), the ones kept ready were filled
//! with pages and never emptied again: memory grew by a buffer's pages per
//! thread (0.6-5.2 GB for 10,000 threads).
//!
//! The recording runs in a child process (this test binary again), so
//! that its resident memory is the recording's alone: it prints the peak
//! growth (`VmHWM`, reset before the recording) and what is left after
//! `stop`, over the resident size before. The parent checks every
//! thread's calls exactly, with fntrace's reader and with `uftrace
//! report`, and the memory against fixed bounds, whatever the number of
//! threads (64 MiB peak, 16 MiB after stop).
//!
//! `FNTRACE_CHURN_THREADS` (default 1,000) sets how many threads; the
//! issue's figure is 10,000 (`uftrace report` then takes minutes).
//! `FNTRACE_CHURN_READY` sets the recording's `ready_buffers`.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{call_counts, read_trace_dir, temp_dir, uftrace_calls};
use fntrace::Filter;
use fntrace_fixtures::c_pie;

const CHILD: &str = "FNTRACE_THREAD_CHURN_CHILD";
/// Threads alive at a time.
const AT_ONCE: usize = 20;
/// Each thread's `run(N)`: 1 + 5 × N = 901 traced calls.
const N: i64 = 180;

fn threads() -> usize {
    std::env::var("FNTRACE_CHURN_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000)
}

/// A `/proc/self/status` field, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// The child: records while the threads run; prints the memory figures
/// and `done`.
#[test]
fn child() {
    let Ok(dir) = std::env::var(CHILD) else {
        return;
    };
    let threads = threads();
    fntrace::init().unwrap();
    // Warm-up outside the recording: the test harness's and the
    // allocator's memory is in the baseline.
    std::thread::spawn(|| std::hint::black_box(c_pie::run(N)))
        .join()
        .unwrap();
    let before = status_kib("VmRSS");
    // Resets VmHWM to the current resident size.
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let mut options = fntrace::RecordOptions::default();
    if let Some(ready) = std::env::var("FNTRACE_CHURN_READY")
        .ok()
        .and_then(|r| r.parse().ok())
    {
        options.ready_buffers = ready;
    }
    let recording = fntrace::record_with(
        "graph",
        &Filter::new().include("pie_*"),
        Path::new(&dir),
        &options,
    )
    .expect("record");
    let started = AtomicUsize::new(0);
    let finished = std::sync::atomic::AtomicBool::new(false);
    let mut buffer_peak = 0;
    std::thread::scope(|scope| {
        // The buffers' share of the memory (a diagnostic): sampled.
        let sampler = scope.spawn(|| {
            let mut peak = 0;
            while !finished.load(Ordering::Relaxed) {
                let buffers = fntrace::GRAPH_TRACER.resident_buffer_bytes();
                let resident: usize = buffers.iter().map(|(_, bytes)| bytes).sum();
                peak = peak.max(resident);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            peak
        });
        let spawners: Vec<_> = (0..AT_ONCE)
            .map(|_| {
                scope.spawn(|| {
                    while started.fetch_add(1, Ordering::Relaxed) < threads {
                        std::thread::spawn(|| std::hint::black_box(c_pie::run(N)))
                            .join()
                            .unwrap();
                    }
                })
            })
            .collect();
        for spawner in spawners {
            spawner.join().unwrap();
        }
        finished.store(true, Ordering::Relaxed);
        buffer_peak = sampler.join().unwrap();
    });
    let report = recording.stop().expect("stop");
    let peak = status_kib("VmHWM").saturating_sub(before);
    let after = status_kib("VmRSS").saturating_sub(before);
    println!(
        "figures: threads {threads} peak_growth_kib {peak} after_stop_kib {after} \
         buffer_peak_kib {} buffers_made {} events {} lost {}",
        buffer_peak / 1024,
        fntrace::GRAPH_TRACER.buffers_made(),
        report.events,
        report.lost
    );
    println!("done");
}

/// The value after `name` in the child's figures line.
fn figure(stdout: &str, name: &str) -> u64 {
    let line = stdout
        .lines()
        .find_map(|line| line.split_once("figures: ").map(|(_, f)| f))
        .expect("figures");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let at = fields.iter().position(|f| *f == name).expect(name);
    fields[at + 1].parse().unwrap()
}

#[test]
fn short_lived_threads_reuse_buffers_and_every_call_is_recorded() {
    let threads = threads();
    let dir = temp_dir("thread-churn");
    let (stdout, lines) = common::run_child_test(CHILD, dir.to_str().unwrap(), &[], "done");
    assert!(lines.is_empty(), "{lines:?}");
    let (peak, after) = (
        figure(&stdout, "peak_growth_kib"),
        figure(&stdout, "after_stop_kib"),
    );
    eprintln!(
        "{threads} threads: peak growth {:.1} MiB (buffers {:.1} MiB), {:.1} MiB after stop, \
         {} buffers",
        peak as f64 / 1024.0,
        figure(&stdout, "buffer_peak_kib") as f64 / 1024.0,
        after as f64 / 1024.0,
        figure(&stdout, "buffers_made")
    );
    assert_eq!(figure(&stdout, "lost"), 0);

    // Every thread's calls, exactly: fntrace's reader ...
    let trace = read_trace_dir(&dir);
    let workers: Vec<_> = trace
        .threads
        .iter()
        .filter(|thread| !thread.events.is_empty())
        .collect();
    // (The warm-up thread ran before the recording.)
    assert_eq!(workers.len(), threads);
    let n = threads as u64;
    let per_thread = [
        ("pie_run", 1),
        ("pie_mid", N as u64),
        ("pie_leaf", 4 * N as u64),
    ];
    let counts = call_counts(&trace);
    for (name, calls) in per_thread {
        assert_eq!(
            counts.get(name),
            Some(&(n * calls, n * calls)),
            "{counts:?}"
        );
    }
    assert_eq!(counts.len(), 3, "{counts:?}");
    // ... and uftrace's.
    let uftrace = uftrace_calls(&dir);
    for (name, calls) in per_thread {
        assert_eq!(uftrace.get(name), Some(&(n * calls)), "{uftrace:?}");
    }

    // The bounds, with margin to spare on the fixed code (see the
    // figures printed above).
    assert!(peak <= 64 * 1024, "peak growth {peak} KiB");
    assert!(after <= 16 * 1024, "after stop {after} KiB");
    let _ = std::fs::remove_dir_all(&dir);
}
