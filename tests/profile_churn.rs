//! Thread churn under the profile tracer: 10,000 short threads, 20 at a
//! time, each making 901 traced calls (gcc -pg code) and exiting. Each
//! thread's block is folded into the retired total at its exit and reused
//! by the next thread: the blocks made stay at the threads alive at once,
//! resident memory grows by a bounded amount, and every call is counted.

use std::sync::atomic::{AtomicUsize, Ordering};

use fntrace::{Filter, PROFILE_TRACER};
use fntrace_fixtures::c_pie;

const THREADS: usize = 10_000;
const AT_ONCE: usize = 20;
/// `run(N)`: 1 + 5N = 901 calls.
const N: i64 = 180;

/// A `/proc/self/status` field, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

#[test]
fn ten_thousand_short_threads_in_bounded_memory() {
    fntrace::init().unwrap();
    fntrace::enable_with("profile", &Filter::new().include("pie_*")).unwrap();
    // Warm-up: the harness's, the allocator's and one block's memory are
    // in the baseline.
    std::thread::spawn(|| std::hint::black_box(c_pie::run(N)))
        .join()
        .unwrap();
    PROFILE_TRACER.reset();
    let before = status_kib("VmRSS");
    // Resets VmHWM to the current resident size.
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let started = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..AT_ONCE {
            scope.spawn(|| {
                while started.fetch_add(1, Ordering::Relaxed) < THREADS {
                    std::thread::spawn(|| std::hint::black_box(c_pie::run(N)))
                        .join()
                        .unwrap();
                }
            });
        }
    });
    fntrace::disable("profile").unwrap();
    let peak_kib = status_kib("VmHWM").saturating_sub(before);
    let after_kib = status_kib("VmRSS").saturating_sub(before);
    let snapshot = PROFILE_TRACER.snapshot();
    let blocks = PROFILE_TRACER.blocks_made();
    println!(
        "threads {THREADS}: blocks made {blocks}, resident growth peak {peak_kib} KiB, \
         after {after_kib} KiB"
    );
    let count = |address: usize| -> u64 {
        snapshot
            .functions
            .iter()
            .filter(|f| f.function == address)
            .map(|f| f.durations.count())
            .sum()
    };
    assert_eq!(snapshot.threads, THREADS as u64);
    assert_eq!(count(c_pie::run_address()), THREADS as u64);
    assert_eq!(count(c_pie::mid_address()), THREADS as u64 * N as u64);
    assert_eq!(count(c_pie::leaf_address()), 4 * THREADS as u64 * N as u64);
    // At most one block per thread alive at once (and the warm-up's).
    assert!(blocks <= AT_ONCE + 1, "{blocks} blocks made");
    // A block's touched pages are tens of KiB; 20 live threads' stacks
    // and blocks, and the allocator's churn, stay far below this.
    assert!(peak_kib < 32 * 1024, "peak growth {peak_kib} KiB");
    assert!(after_kib < 16 * 1024, "growth after {after_kib} KiB");
}
