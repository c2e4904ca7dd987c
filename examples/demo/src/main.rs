//! fntrace demo: a small multi-threaded "service" built entirely with
//! `-Zinstrument-mcount` (see the README's first command). Tracing is off,
//! switched on while the workers handle a fixed batch of requests, and off
//! again, with the streaming recorder writing a uftrace data directory as
//! it goes; then the demo reads it back and prints what the graph tracer
//! saw, losses first. One request in
//! 500 is malformed: its handler panics, and the worker catches the panic
//! and goes on, as a server would (the trace stays whole: the unwound
//! calls end where the panic is caught).
//!
//! `demo [REQUESTS_PER_WORKER] [DIR]` (defaults: 2000, and
//! `fntrace-demo.data` in the temporary directory, replaced if it exists).

use std::collections::HashMap;
use std::hint::black_box;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Barrier};
use std::time::Instant;

const WORKERS: usize = 4;
/// Request ids `n * MALFORMED_EVERY - 1` are malformed.
const MALFORMED_EVERY: usize = 500;

#[inline(never)]
fn tokenize(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[inline(never)]
fn score_word(word: &str) -> u64 {
    word.bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
}

#[inline(never)]
fn parse_request(id: usize) -> String {
    let lang = if id % MALFORMED_EVERY == MALFORMED_EVERY - 1 {
        "??"
    } else {
        "en"
    };
    format!(
        "GET /items/{id} user={} region=eu-{} lang={lang}",
        id % 97,
        id % 5
    )
}

#[inline(never)]
fn reject(word: &str) -> ! {
    panic!("malformed request: {word}")
}

#[inline(never)]
fn handle_request(id: usize, counts: &mut HashMap<u64, u32>) -> u64 {
    let line = parse_request(id);
    let mut total = 0;
    for word in tokenize(&line) {
        if word == "lang=??" {
            reject(word);
        }
        let score = score_word(word);
        *counts.entry(score % 64).or_default() += 1;
        total ^= score;
    }
    total
}

/// Handles one request; a panic fails it, not the worker.
#[inline(never)]
fn serve(id: usize, counts: &mut HashMap<u64, u32>) -> Option<u64> {
    panic::catch_unwind(AssertUnwindSafe(|| handle_request(black_box(id), counts))).ok()
}

/// Returns a checksum and the number of failed requests while traced.
#[inline(never)]
fn worker(requests: usize, phases: Arc<[Barrier; 3]>) -> (u64, usize) {
    let mut counts = HashMap::new();
    let mut checksum = 0;
    for id in 0..requests {
        checksum ^= serve(id, &mut counts).unwrap_or(0);
    }
    phases[0].wait(); // warmed up, untraced
    phases[1].wait(); // tracing is switched on now
    let mut failed = 0;
    for id in 0..requests {
        match serve(id, &mut counts) {
            Some(sum) => checksum ^= sum,
            None => failed += 1,
        }
    }
    phases[2].wait(); // tracing is switched off after this
    (checksum, failed)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let requests: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(2000);

    // Malformed requests panic on purpose; the workers count them.
    panic::set_hook(Box::new(|_| {}));

    let started = Instant::now();
    fntrace::init()?;
    let stats = fntrace::stats();
    println!(
        "fntrace: {} call sites found ({} by the ELF scan over {} functions), all NOPs now ({:.1?})",
        stats.sites,
        stats.scan.sites_found,
        stats.scan.functions_scanned,
        started.elapsed()
    );

    let phases = Arc::new([(); 3].map(|_| Barrier::new(WORKERS + 1)));
    let handles: Vec<_> = (0..WORKERS)
        .map(|_| {
            let phases = Arc::clone(&phases);
            std::thread::spawn(move || worker(requests, phases))
        })
        .collect();

    let dir = std::env::args()
        .nth(2)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("fntrace-demo.data"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }

    phases[0].wait();
    let patched_at = Instant::now();
    let recording = fntrace::record("graph", &fntrace::Filter::new(), &dir)?;
    let enable_took = patched_at.elapsed();
    phases[1].wait();
    phases[2].wait();
    let disabled_at = Instant::now();
    let recorded = recording.stop()?;
    println!(
        "tracing on for {requests} requests on each of {WORKERS} threads \
         (record {enable_took:.1?}, stop {:.1?}, clock: {})",
        disabled_at.elapsed(),
        if fntrace::stats().tsc_clock {
            "TSC"
        } else {
            "clock_gettime"
        }
    );
    let mut failed = 0;
    for handle in handles {
        let (checksum, failures) = handle.join().expect("worker");
        black_box(checksum);
        failed += failures;
    }
    println!("{failed} requests failed while traced (handler panicked; caught)");

    println!(
        "{} events written, {} lost ({} bytes, {} threads) to {}\n\
         (read it again with `cargo run --release --bin fntrace -- report {}`, \
         or `fntrace report` after `cargo install --path tools`; or `uftrace replay -d {}`)\n",
        recorded.events,
        recorded.lost,
        recorded.bytes,
        recorded.threads,
        dir.display(),
        dir.display(),
        dir.display(),
    );
    let trace = fntrace::export::read_uftrace_dir(&dir)?;
    let report = fntrace::analysis::latency(&trace);
    println!("{}", report.table(15));

    // A piece of one worker's call graph.
    let mut one_thread = trace.clone();
    one_thread
        .threads
        .retain(|t| t.name.as_deref() != Some("main"));
    one_thread.threads.truncate(1);
    println!(
        "{}",
        fntrace_tools::analysis::call_graph(&one_thread, Some(30))
    );
    Ok(())
}
