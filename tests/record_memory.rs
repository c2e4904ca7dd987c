//! The recorder's buffer memory: `Recording::stop` gives the pages of live
//! threads' buffers back to the kernel as well as those of free ones,
//! without losing or spoiling an event of threads that are still calling
//! traced code while it runs; a thread inside tracer code at that moment
//! keeps its pages until a later stop. Exact counts over many record and
//! stop cycles. Its own process: it watches every buffer of the process.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use common::{call_counts, read_trace_dir, temp_dir};
use fntrace::{Filter, GRAPH_TRACER};
use fntrace_fixtures::c_pie;

static ONE_RECORDING: Mutex<()> = Mutex::new(());

fn pie_filter() -> Filter {
    Filter::new().include("pie_*")
}

/// Bytes of event pages in memory, per owner (0: free buffers).
fn resident_by_owner() -> HashMap<u32, usize> {
    let mut by_owner = HashMap::new();
    for (owner, bytes) in GRAPH_TRACER.resident_buffer_bytes() {
        *by_owner.entry(owner).or_default() += bytes;
    }
    by_owner
}

/// Per thread of `trace`: (entries, exits) of each function.
fn counts_by_thread(trace: &fntrace::Trace) -> HashMap<u32, HashMap<String, (u64, u64)>> {
    let mut by_thread: HashMap<u32, HashMap<String, (u64, u64)>> = HashMap::new();
    for thread in &trace.threads {
        let counts = by_thread.entry(thread.tid).or_default();
        for event in &thread.events {
            let entry = counts.entry(trace.name_of(event.function)).or_default();
            match event.kind {
                fntrace::EventKind::Entry => entry.0 += 1,
                fntrace::EventKind::Exit => entry.1 += 1,
            }
        }
    }
    by_thread
}

#[test]
fn stop_gives_back_live_threads_buffers_over_many_cycles_while_others_call() {
    let _turn = ONE_RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    const CYCLES: usize = 25;
    const COUNTED: usize = 4; // threads that call only inside a recording
    const BUSY: usize = 2; // threads that never stop calling
    const TURNS: i64 = 20;
    const N: i64 = 50; // run(N): 251 calls
    let calls_per_thread = (TURNS * (1 + 5 * N)) as u64;

    // Counted threads: each cycle, TURNS × run(N) between two barriers,
    // then they wait (outside tracer code) while the recording stops.
    let go = Arc::new(Barrier::new(COUNTED + 1));
    let done = Arc::new(Barrier::new(COUNTED + 1));
    let counted: Vec<_> = (0..COUNTED)
        .map(|_| {
            let (go, done) = (Arc::clone(&go), Arc::clone(&done));
            std::thread::spawn(move || {
                for _ in 0..=CYCLES {
                    go.wait();
                    for _ in 0..TURNS {
                        std::hint::black_box(c_pie::run(N));
                    }
                    done.wait();
                }
                fntrace::current_tid()
            })
        })
        .collect();
    // Busy threads: in and out of the fast paths all the time, also while
    // a stop gives pages back.
    let stop_busy = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..BUSY)
        .map(|_| {
            let stop_busy = Arc::clone(&stop_busy);
            std::thread::spawn(move || {
                let mut runs = 0u64;
                while !stop_busy.load(Ordering::Relaxed) {
                    std::hint::black_box(c_pie::run(3));
                    runs += 1;
                }
                (fntrace::current_tid(), runs)
            })
        })
        .collect();

    let mut counted_tids: Vec<u32> = Vec::new();
    let mut busy_written = 0u64;
    for cycle in 0..CYCLES {
        let dir = temp_dir(&format!("record-memory-{cycle}"));
        let recording = fntrace::record("graph", &pie_filter(), &dir).unwrap();
        go.wait();
        done.wait();
        let report = recording.stop().unwrap();

        let trace = read_trace_dir(&dir);
        let by_thread = counts_by_thread(&trace);
        if counted_tids.is_empty() {
            // The counted threads are those with exactly their calls.
            counted_tids = by_thread
                .iter()
                .filter(|(_, counts)| {
                    let (runs, mids) = (TURNS as u64, (TURNS * N) as u64);
                    counts.get("pie_run") == Some(&(runs, runs))
                        && counts.get("pie_mid") == Some(&(mids, mids))
                })
                .map(|(&tid, _)| tid)
                .collect();
            assert_eq!(counted_tids.len(), COUNTED, "{by_thread:?}");
        }
        let runs = TURNS as u64;
        for tid in &counted_tids {
            let counts = &by_thread[tid];
            assert_eq!(
                counts["pie_run"],
                (runs, runs),
                "cycle {cycle}, thread {tid}"
            );
            assert_eq!(counts["pie_mid"], (runs * N as u64, runs * N as u64));
            assert_eq!(
                counts["pie_leaf"],
                (4 * runs * N as u64, 4 * runs * N as u64)
            );
            assert_eq!(counts.len(), 3, "{counts:?}");
        }
        // Every event written names a function of the fixture: nothing was
        // zeroed or torn by a page given back under a writer.
        let all = call_counts(&trace);
        for (function, (entries, exits)) in &all {
            assert!(
                function.starts_with("pie_"),
                "cycle {cycle}: event of {function:?} ({entries} entries, {exits} exits)"
            );
        }
        let written: u64 = all.values().map(|(n, x)| n + x).sum();
        assert_eq!(written, report.events, "cycle {cycle}: {report:?}");
        // (The busy threads may lose events to full buffers: counted.)
        busy_written += written - 2 * calls_per_thread * COUNTED as u64;

        // The counted threads wait at `go`, outside tracer code: their
        // buffers' pages went back; so did those of unused buffers.
        let resident = resident_by_owner();
        for tid in &counted_tids {
            assert_eq!(resident.get(tid), Some(&0), "cycle {cycle}: {resident:?}");
        }
        assert_eq!(resident.get(&0).copied().unwrap_or(0), 0, "{resident:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
    go.wait();
    done.wait();
    for thread in counted {
        assert!(counted_tids.contains(&thread.join().unwrap()));
    }
    stop_busy.store(true, Ordering::Relaxed);
    let busy_runs: u64 = busy.into_iter().map(|t| t.join().unwrap().1).sum();
    // The busy threads' events recorded outside the recordings (none: the
    // tracer is off between them) and those left in their buffers by a
    // fast path that finished after the last drain: all of the fixture.
    let left = GRAPH_TRACER.take_trace();
    for (function, _) in call_counts(&left) {
        assert!(function.starts_with("pie_"), "{function:?}");
    }
    assert!(
        busy_written > 0 && busy_written <= 2 * 16 * busy_runs,
        "busy threads: {busy_written} events written, {busy_runs} runs of 16 calls"
    );
}

#[test]
fn a_thread_inside_tracer_code_keeps_its_pages_until_a_later_stop() {
    let _turn = ONE_RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    let inside = Arc::new(Barrier::new(2));
    let leave = Arc::new(Barrier::new(2));
    let again = Arc::new(Barrier::new(2));
    let dir = temp_dir("record-memory-inside");
    let recording = fntrace::record("graph", &pie_filter(), &dir).unwrap();
    let thread = {
        let (inside, leave, again) = (Arc::clone(&inside), Arc::clone(&leave), Arc::clone(&again));
        std::thread::spawn(move || {
            std::hint::black_box(c_pie::run(2_000));
            // `untraced` holds the recursion guard, as tracer code does.
            fntrace::untraced(|| {
                inside.wait();
                leave.wait();
            });
            again.wait(); // the second recording
            std::hint::black_box(c_pie::run(2_000));
            again.wait();
            again.wait(); // its stop
            fntrace::current_tid()
        })
    };
    inside.wait();
    let report = recording.stop().unwrap();
    assert_eq!(report.events, 2 * (1 + 5 * 2_000), "{report:?}");
    let tid = read_trace_dir(&dir).threads[0].tid;
    // 10,001 calls: 20,002 events of 16 bytes, 312 KiB: more than 64
    // whole pages after the first.
    let kept = resident_by_owner()[&tid];
    assert!(kept >= 64 * 4096, "{kept} bytes resident");
    leave.wait();

    let dir2 = temp_dir("record-memory-inside-2");
    let recording = fntrace::record("graph", &pie_filter(), &dir2).unwrap();
    again.wait();
    again.wait();
    let report = recording.stop().unwrap();
    assert_eq!(report.events, 2 * (1 + 5 * 2_000), "{report:?}");
    assert_eq!(resident_by_owner()[&tid], 0);
    again.wait();
    assert_eq!(thread.join().unwrap(), tid);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}
