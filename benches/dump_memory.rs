//! Peak memory of a dump: 4 threads each make 500,001 traced calls of real
//! `-pg` C code (1,000,002 events a thread, 4,000,008 in all, held in the
//! threads' buffers), then the trace is dumped to a uftrace directory,
//! either as `fntrace::dump` did before (the whole trace collected into a
//! `Trace`, then written: `GRAPH_TRACER.snapshot()` + `write_uftrace_dir`)
//! or as it does now (written from the buffers, in place). Each dump runs
//! in a child process of its own; the child resets its peak RSS (`VmHWM`,
//! `/proc/self/clear_refs`) just before the dump, so the figure is the
//! dump's own peak, buffers included. Then the same events in a flight
//! recorder's window (64 MiB budget, buffers big enough that nothing is
//! lost), drained by a first snapshot, and a second snapshot of it,
//! written from the window in place (before, the writer copied the window,
//! 24 bytes an event, and the caller wrote the copy). Three runs of each; prints a Markdown table.
//!
//! `cargo bench --bench dump_memory`

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use fntrace::Filter;
use fntrace_fixtures::c_pie;

const CHILD: &str = "FNTRACE_DUMP_BENCH_MODE";
const THREADS: usize = 4;
/// `pie_run(N)` makes 1 + N + 4N calls: 500,001 calls, 1,000,002 events.
const N: i64 = 100_000;
const RUNS: usize = 3;

fn main() {
    if let Ok(mode) = std::env::var(CHILD) {
        child(&mode);
        return;
    }
    println!("| dump | events | resident before (MiB) | peak RSS during the dump (MiB) | growth (MiB) | time (s) | directory (MiB) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for _ in 0..RUNS {
        for mode in [
            "whole trace (before)",
            "in place (now)",
            "flight snapshot, in place (now)",
        ] {
            let output = Command::new(std::env::current_exe().unwrap())
                .env(CHILD, mode)
                .output()
                .expect("running the child");
            assert!(
                output.status.success(),
                "{mode}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            print!("{}", String::from_utf8_lossy(&output.stdout));
        }
    }
}

/// A `/proc/self/status` field, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.trim().strip_suffix("kB"))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
        .trim()
        .parse()
        .unwrap()
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

fn child(mode: &str) {
    fntrace::init().unwrap();
    let filter = Filter::new().include("pie_*");
    let flight = mode.starts_with("flight").then(|| {
        let options = fntrace::FlightOptions {
            budget_bytes: 64 << 20,
            buffer_events: 1 << 20,
            ..Default::default()
        };
        fntrace::flight_record("graph", &filter, options).unwrap()
    });
    if flight.is_none() {
        fntrace::enable_with("graph", &filter).unwrap();
    }
    let threads: Vec<_> = (0..THREADS)
        .map(|_| std::thread::spawn(|| c_pie::run(N)))
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    if flight.is_none() {
        fntrace::disable("graph").unwrap();
    }
    let dir = std::env::temp_dir().join(format!("fntrace-dump-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    if let Some(flight) = &flight {
        // A first snapshot drains every buffer into the window: the one
        // measured then writes the window alone.
        let warm = dir.with_extension("warm");
        flight.snapshot(&warm).unwrap();
        let _ = std::fs::remove_dir_all(&warm);
    }
    let resident_before = status_kib("VmRSS:");
    // Resets the peak resident set size to the current one.
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting VmHWM");
    let started = Instant::now();
    let (events, lost) = if let Some(flight) = &flight {
        let snapshot = flight.snapshot(&dir).unwrap();
        (snapshot.events as usize, snapshot.lost + snapshot.evicted)
    } else if mode.starts_with("whole") {
        let trace = fntrace::GRAPH_TRACER.snapshot();
        fntrace::export::write_uftrace_dir(&trace, &dir, None).unwrap();
        fntrace::GRAPH_TRACER.forget(&trace);
        let events: usize = trace.threads.iter().map(|t| t.events.len()).sum();
        (events, trace.lost())
    } else {
        let report = fntrace::dump(&dir).unwrap();
        (report.events, report.lost)
    };
    let seconds = started.elapsed().as_secs_f64();
    let peak = status_kib("VmHWM:");
    assert_eq!(lost, 0);
    assert_eq!(events, THREADS * 2 * (1 + 5 * N as usize));
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "| {mode} | {events} | {:.1} | {:.1} | {:.1} | {seconds:.2} | {:.0} |",
        mib(resident_before),
        mib(peak),
        mib(peak.saturating_sub(resident_before)),
        dir_bytes(&dir) as f64 / (1024.0 * 1024.0),
    );
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(flight) = flight {
        flight.stop().unwrap();
    }
}
