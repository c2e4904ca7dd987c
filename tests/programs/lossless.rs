//! `fntrace record -- CMD` with its default options loses nothing on a
//! CPU-bound program: `tests/fixtures/c/lossless.c` (built `gcc -O2 -pg`,
//! PIE), 2 threads calling a known call tree back to back, 52,000,003
//! calls in all (and its 9 library calls), is recorded by the CLI as a user runs it, read back by
//! fntrace's reader (thread by thread, streaming: 104M events do not fit
//! in a `Trace` comfortably), and every function has exactly as many
//! entries and exits as the program made calls, with no lost records.
//!
//! `cargo test` builds only the rlib of the root crate, so the test builds
//! `libfntrace.so` and the `fntrace` binary (`common::native`) first.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::native::{self, repo};

/// Worker threads, and `lossless_top` calls each makes: 2 × 2M × 13 + 3
/// calls, ≥ 50M (enough to outrun the writer), in about a second untraced.
const THREADS: u64 = 2;
const N: u64 = 2_000_000;

/// A directory removed when dropped, even when the test fails: a failed
/// recording still leaves gigabytes behind.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `tests/fixtures/c/lossless.c` built `gcc -O2 -pg` into `dir`.
fn build_program(dir: &Path) -> PathBuf {
    let program = dir.join("lossless");
    let output = Command::new("gcc")
        .args(["-O2", "-pg", "-pthread"])
        .arg(repo().join("tests/fixtures/c/lossless.c"))
        .arg("-o")
        .arg(&program)
        .output()
        .expect("cannot run gcc; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    program
}

#[test]
fn cpu_bound_threads_lose_no_call_by_default() {
    native::build_libraries();
    let fntrace = native::cli();
    let scratch = Scratch(common::temp_dir("lossless"));
    std::fs::create_dir_all(&scratch.0).unwrap();
    let program = build_program(&scratch.0);
    let data = scratch.0.join("lossless.data");

    let start = Instant::now();
    let output = Command::new(&fntrace)
        .arg("record")
        .arg("-o")
        .arg(&data)
        .arg("--")
        .arg(&program)
        .args([THREADS.to_string(), N.to_string()])
        .env_remove("FNTRACE_LIB")
        .output()
        .unwrap();
    let recorded_in = start.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "fntrace record: {stderr}");
    let calls = 1 + THREADS + 13 * THREADS * N;
    assert_eq!(
        stdout.trim(),
        format!("calls {calls}"),
        "the program's own count"
    );

    let start = Instant::now();
    let (counts, lost) = common::streamed_counts(&data);
    eprintln!(
        "recorded in {recorded_in:.1?}, read in {:.1?}; fntrace record said: {}",
        start.elapsed(),
        stderr.trim()
    );
    let expected: BTreeMap<String, (u64, u64)> = [
        ("main", 1),
        ("lossless_worker", THREADS),
        ("lossless_top", THREADS * N),
        ("lossless_mid", 4 * THREADS * N),
        ("lossless_leaf", 8 * THREADS * N),
        // Library calls, recorded by default as by uftrace: gcrt1's two at
        // start-up, the arguments' two strtol (atoi), the threads'
        // creation and joining, the result's printf.
        ("__monstartup", 1),
        ("__cxa_atexit", 1),
        ("strtol", 2),
        ("pthread_create", THREADS),
        ("pthread_join", THREADS),
        ("printf", 1),
    ]
    .into_iter()
    .map(|(name, n)| (name.to_string(), (n, n)))
    .collect();
    let events: u64 = counts
        .values()
        .map(|(entries, exits)| entries + exits)
        .sum();
    assert_eq!(
        lost,
        0,
        "{lost} events lost of {} ({:.1} %), {events} written",
        2 * calls,
        100.0 * lost as f64 / (2 * calls) as f64
    );
    assert_eq!(
        counts, expected,
        "entries and exits per function (expected: each equal to the calls made)"
    );
}
