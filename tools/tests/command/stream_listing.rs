//! The streamed recording lists its threads in the session files (task.txt,
//! info): with threads coming and going by the thousand, writing those
//! files again for every new thread cost O(threads) each time (a recording
//! of 10,001 short-lived threads: 8.6 s of the writer's CPU, 35 s against
//! uftrace's 11 s). New threads are now listed in growing groups; none is
//! left out at the end.

use crate::common;

use common::TempDir;
use fntrace_tools::export::{read_uftrace_dir, UftraceStream};
use fntrace_tools::{EventKind, GraphEvent, Trace};

const FUNCTION: usize = 0x40_1000;

#[test]
fn threads_are_listed_in_groups_and_all_of_them_at_the_end() {
    let parent = TempDir::new("stream-listing");
    let dir = parent.0.join("rec");
    let header = Trace {
        pid: std::process::id(),
        exe: "/usr/bin/service".into(),
        names: [(FUNCTION, "handle".to_string())].into(),
        ..Trace::default()
    };
    let mut stream = UftraceStream::create(&dir, header, 1_000).unwrap();
    let threads = 2_000u32;
    // One new thread between flushes, as a writer draining every few
    // milliseconds sees short-lived threads.
    for tid in 1..=threads {
        let t = 2_000 + u64::from(tid) * 100;
        let events = [EventKind::Entry, EventKind::Exit]
            .into_iter()
            .enumerate()
            .map(|(i, kind)| GraphEvent {
                time_ns: t + 10 * i as u64,
                function: FUNCTION,
                depth: 0,
                kind,
            });
        stream
            .append_events(100_000 + tid, Some("worker"), events, 0)
            .unwrap();
        stream.flush().unwrap();
    }
    let writes = stream.session_writes();
    // Growth by an eighth each time: about 60 writes for 2,000 threads,
    // plus two a second of the test's run time; once per thread before.
    assert!(
        writes < 150,
        "{writes} writes of the session files for {threads} threads"
    );
    stream.finish().unwrap();
    let trace = read_uftrace_dir(&dir).unwrap();
    assert_eq!(trace.threads.len(), threads as usize);
    assert!(trace
        .threads
        .iter()
        .all(|t| t.events.len() == 2 && t.lost == 0));
    let task = std::fs::read_to_string(dir.join("task.txt")).unwrap();
    assert_eq!(
        task.lines().filter(|l| l.starts_with("TASK")).count(),
        threads as usize
    );
}
