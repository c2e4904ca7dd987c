//! `fntrace::dump` of threads whose buffers filled (4,096 events, two
//! CPU-bound `-pg` threads, nothing draining them): each thread's lost
//! events are one lost record after the events its buffer kept (where the
//! buffer dropped them), uftrace's (time 0, depth 0, the count), with every
//! call closed before it; uftrace 0.13's `report` gives fntrace's figures
//! and its `graph` runs. Its own process: the buffer size is set for
//! buffers made from then on.

mod common;

use std::time::Instant;

use common::{dat_records, read_trace_dir, temp_dir, thread_files, uftrace};
use fntrace::Filter;
use fntrace_fixtures::c_pie;

#[test]
fn a_dump_with_loss_has_a_lost_record_after_each_full_buffer() {
    const N: i64 = 20_000; // run(N): 100,001 calls, 200,002 events
    fntrace::init().unwrap();
    fntrace::GRAPH_TRACER.take_trace();
    fntrace::GRAPH_TRACER.set_buffer_events(4096);
    let started = Instant::now();
    fntrace::enable_with("graph", &Filter::new().include("pie_*")).unwrap();
    let threads: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(|| std::hint::black_box(c_pie::run(N))))
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    fntrace::disable("graph").unwrap();
    let dir = temp_dir("dump-loss");
    let report = fntrace::dump(&dir).unwrap();
    let wall_ns = started.elapsed().as_nanos() as f64;
    assert_eq!(report.threads, 2, "{report:?}");
    assert_eq!(
        report.events as u64 + report.lost,
        2 * 2 * (1 + 5 * N as u64)
    );

    let files = thread_files(&dir);
    assert_eq!(files.len(), 2);
    let mut counted = 0;
    for file in &files {
        let records = dat_records(file);
        let (&(time, last), rest) = records.split_last().unwrap();
        // The last record is the lost one, nothing open before it.
        assert_eq!((time, last & 0xffff), (0, 0x2a), "{file:?}");
        counted += last >> 16;
        let mut open = 0i64;
        for &(_, word) in rest {
            assert!(word & 3 < 2, "one lost record in {file:?}");
            open += if word & 3 == 0 { 1 } else { -1 };
            assert!(open >= 0, "{file:?}");
        }
        assert_eq!(open, 0, "calls open at the lost record of {file:?}");
    }
    assert_eq!(counted, report.lost);

    let trace = read_trace_dir(&dir);
    assert_eq!(trace.lost(), report.lost);
    let ours = fntrace::analysis::latency(&trace);
    assert_eq!(
        (ours.unmatched_exits, ours.unfinished_calls),
        (0, 0),
        "{ours:?}"
    );
    common::assert_uftrace_report_is(&dir, &ours, wall_ns);
    let graph = uftrace(&["graph", "--no-pager"], &dir);
    assert!(graph.contains("pie_run"), "{graph}");
    let _ = std::fs::remove_dir_all(&dir);
}
