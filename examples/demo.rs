//! fntrace demo: a small multi-threaded "service" built entirely with
//! `-Zinstrument-mcount` (see the README's first command). Tracing is off,
//! switched on while the workers handle a fixed batch of requests, and off
//! again; then the demo prints what the function tracer saw.
//!
//! `demo [REQUESTS_PER_WORKER]` (default 2000).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Instant;

const WORKERS: usize = 4;

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
    format!(
        "GET /items/{id} user={} region=eu-{} lang=en",
        id % 97,
        id % 5
    )
}

#[inline(never)]
fn handle_request(id: usize, counts: &mut HashMap<u64, u32>) -> u64 {
    let line = parse_request(id);
    let mut total = 0;
    for word in tokenize(&line) {
        let score = score_word(word);
        *counts.entry(score % 64).or_default() += 1;
        total ^= score;
    }
    total
}

#[inline(never)]
fn worker(requests: usize, phases: Arc<[Barrier; 3]>) -> u64 {
    let mut counts = HashMap::new();
    let mut checksum = 0;
    for id in 0..requests {
        checksum ^= handle_request(black_box(id), &mut counts);
    }
    phases[0].wait(); // warmed up, untraced
    phases[1].wait(); // tracing is switched on now
    for id in 0..requests {
        checksum ^= handle_request(black_box(id), &mut counts);
    }
    phases[2].wait(); // tracing is switched off after this
    checksum
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let requests: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(2000);

    let started = Instant::now();
    fntrace::init()?;
    let stats = fntrace::stats();
    println!(
        "fntrace: {} call sites found ({} by the ELF scan over {} functions), all NOPs now ({:?})",
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

    phases[0].wait();
    let patched_at = Instant::now();
    fntrace::enable("function")?;
    let enable_took = patched_at.elapsed();
    phases[1].wait();
    phases[2].wait();
    let disabled_at = Instant::now();
    fntrace::disable("function")?;
    println!(
        "tracing on for {} requests on each of {WORKERS} threads (enable {enable_took:?}, disable {:?})",
        requests,
        disabled_at.elapsed()
    );
    for handle in handles {
        black_box(handle.join().expect("worker"));
    }

    let events = fntrace::FUNCTION_TRACER.take_events();
    let mut per_function: HashMap<usize, (u64, std::collections::BTreeSet<u32>)> = HashMap::new();
    for event in &events {
        let entry = per_function.entry(event.function).or_default();
        entry.0 += 1;
        entry.1.insert(event.tid);
    }
    let mut rows: Vec<_> = per_function.into_iter().collect();
    rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    println!(
        "{} calls traced, {} lost\n\n{:>10}  {:>7}  function",
        events.len(),
        fntrace::FUNCTION_TRACER.lost_events(),
        "calls",
        "threads"
    );
    for (function, (calls, threads)) in rows.iter().take(15) {
        let name = fntrace::function_name(*function).unwrap_or_else(|| format!("{function:#x}"));
        println!("{calls:>10}  {:>7}  {name}", threads.len());
    }
    Ok(())
}
