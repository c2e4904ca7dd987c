//! Buffers reused by short-lived threads (found by the chaos benchmark's
//! peak RSS growth). A thread that took the buffer of a thread
//! that had exited went on writing where that one stopped, so a buffer
//! reused by thread after thread touched page after page until all of it
//! was in memory; and the pages of buffers freed by a dump (which reads
//! the buffers in place) were never given back. In the chaos benchmark
//! the free buffers held 10-18 MiB at its peaks. Real `-pg` code
//! (`c_pie`), real threads, 4 at a time, as the chaos service churns them.

mod common;

use std::sync::Mutex;

use common::temp_dir;
use fntrace::{Filter, GRAPH_TRACER};
use fntrace_fixtures::c_pie;

static SERIAL: Mutex<()> = Mutex::new(());

/// Threads alive at once in each round.
const AT_ONCE: usize = 4;

/// Events of the graph tracer per thread buffer here (the recorder's
/// default: 4 MiB of 16-byte events).
const BUFFER_EVENTS: usize = 1 << 18;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    GRAPH_TRACER.set_buffer_events(BUFFER_EVENTS);
    guard
}

/// `AT_ONCE` threads at once, each calling `c_pie::run(n)` (1 + 5n traced
/// calls: 2 + 10n events), joined.
fn round(n: i64) {
    let threads: Vec<_> = (0..AT_ONCE)
        .map(|_| std::thread::spawn(move || std::hint::black_box(c_pie::run(n))))
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

/// Bytes of the graph tracer's buffer pages in memory, all buffers.
fn resident() -> usize {
    GRAPH_TRACER
        .resident_buffer_bytes()
        .iter()
        .map(|&(_, bytes)| bytes)
        .sum()
}

/// Rounds of threads, each round's events read back before the next
/// (`read`), then the graph tracer's buffer pages in memory; the bound is
/// what `AT_ONCE` threads write in one round (plus a page each), and 1
/// MiB of margin: the old code kept `rounds` times that.
fn check_reused_buffers_stay_small(rounds: usize, n: i64, read: &mut dyn FnMut(usize)) {
    fntrace::enable_with("graph", &Filter::new().include("pie_*")).unwrap();
    for index in 0..rounds {
        round(n);
        read(index);
    }
    fntrace::disable("graph").unwrap();
    read(rounds);
    let per_thread = (2 + 10 * n as usize) * 16;
    let written = rounds * AT_ONCE * per_thread;
    let bound = AT_ONCE * (per_thread + 4096) + (1 << 20);
    let held = resident();
    eprintln!(
        "{rounds} rounds of {AT_ONCE} threads wrote {} KiB; buffer pages in memory: {} KiB \
         (bound {} KiB); buffers made: {}",
        written >> 10,
        held >> 10,
        bound >> 10,
        GRAPH_TRACER.buffers_made()
    );
    assert!(written > 4 * bound, "the test would not tell");
    assert!(
        held <= bound,
        "{} KiB of buffer pages in memory after {rounds} rounds of {AT_ONCE} threads \
         ({} KiB written): reused buffers keep what every owner wrote",
        held >> 10,
        written >> 10
    );
}

/// Read by draining (`take_trace`): a freed buffer's pages were given back
/// only beyond the 2 kept warm, and those 2 (the ones the next threads
/// take) grew by each owner's events.
#[test]
fn buffers_reused_after_a_drain_keep_one_owners_pages() {
    let _serial = serial();
    let mut events = 0;
    check_reused_buffers_stay_small(60, 400, &mut |_| {
        events += GRAPH_TRACER
            .take_trace()
            .threads
            .iter()
            .map(|t| t.events.len())
            .sum::<usize>();
    });
    // Every call was recorded (the reads are real).
    assert_eq!(events, 60 * AT_ONCE * (2 + 10 * 400));
}

/// Read by dumps (the buffers read in place, then freed): no free
/// buffer's pages were ever given back.
#[test]
fn buffers_freed_by_a_dump_give_their_pages_back() {
    let _serial = serial();
    let dir = temp_dir("reused-buffers-dump");
    let mut events = 0;
    check_reused_buffers_stay_small(30, 400, &mut |index| {
        let out = dir.join(index.to_string());
        events += fntrace::dump(&out).expect("dump").events;
        let _ = std::fs::remove_dir_all(&out);
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(events, 30 * AT_ONCE * (2 + 10 * 400));
}
