//! Tests of the streaming reader: it reads what `read_uftrace_dir` reads,
//! as many times as asked, a thread at a time, and says how far it got.

use std::fs;
use std::sync::{Arc, Mutex};

use super::tests::{sample_trace, written};
use super::{read_uftrace_dir, UftraceReader};
use crate::source::EventSource;
use crate::trace::GraphEvent;

#[test]
fn threads_read_one_at_a_time_and_again_give_the_whole_trace() {
    let trace = sample_trace();
    let dir = written(&trace, "reader");
    let whole = read_uftrace_dir(&dir.0).unwrap();
    let reader = UftraceReader::open(&dir.0).unwrap();
    assert_eq!(reader.pid(), trace.pid);
    assert_eq!(reader.exe(), trace.exe);
    let dat_bytes: u64 = whole
        .threads
        .iter()
        .map(|t| {
            fs::metadata(dir.0.join(format!("{}.dat", t.tid)))
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(reader.data_bytes(), dat_bytes);
    let progress = Arc::new(Mutex::new(Vec::new()));
    let seen = progress.clone();
    reader.set_progress(move |bytes| seen.lock().unwrap().push(bytes));

    let threads = reader.threads();
    assert_eq!(
        threads
            .iter()
            .map(|t| (t.tid, t.name.as_deref()))
            .collect::<Vec<_>>(),
        [(4001, Some("main")), (4002, Some("worker \"w1\""))]
    );
    for pass in 0..2 {
        for (index, thread) in whole.threads.iter().enumerate() {
            let (events, lost) = reader
                .read_thread(index, |events| events.collect::<Vec<GraphEvent>>())
                .unwrap();
            assert_eq!(events, thread.events, "pass {pass}, thread {}", thread.tid);
            assert_eq!(lost, thread.lost);
        }
    }
    // Told at the end of each thread's read, with the bytes read so far.
    let first = fs::metadata(dir.0.join("4001.dat")).unwrap().len();
    assert_eq!(
        *progress.lock().unwrap(),
        [first, dat_bytes, dat_bytes + first, 2 * dat_bytes]
    );
    assert_eq!(reader.bytes_read(), 2 * dat_bytes);
    for event in &whole.threads[0].events {
        assert_eq!(
            reader.name_of(event.function),
            whole.name_of(event.function)
        );
        assert_eq!(
            reader.symbol_name(event.function),
            whole.symbols.get(&event.function).map(String::as_str)
        );
    }
    assert_eq!(reader.name_of(0x10), "0x10");
}

#[test]
fn a_partial_read_stops_reading_and_an_error_is_returned() {
    let dir = written(&sample_trace(), "reader-partial");
    let reader = UftraceReader::open(&dir.0).unwrap();
    // The worker's first two events: its file holds a lost record, the
    // entries added for the two calls running when tracing started, then
    // their exits; the rest is left unread (read on this thread: a
    // pipelined read decodes ahead).
    let (first_two, lost) = reader
        .read_here(1, reader.records_of(1).unwrap(), |events| {
            events.take(2).count()
        })
        .unwrap();
    assert_eq!((first_two, lost), (2, 3));
    assert_eq!(reader.bytes_read(), 5 * 16);
    assert!(fs::metadata(dir.0.join("4002.dat")).unwrap().len() > 5 * 16);

    // A record cut short, in the middle of the first thread.
    let path = dir.0.join("4001.dat");
    let data = fs::read(&path).unwrap();
    fs::write(&path, &data[..data.len() - 8]).unwrap();
    let reader = UftraceReader::open(&dir.0).unwrap();
    let err = reader
        .read_thread(0, |events| events.count())
        .unwrap_err()
        .to_string();
    let at = data.len() - 16;
    assert!(
        err.ends_with(&format!(
            "4001.dat: truncated record at byte {at}: 8 bytes left, records have 16"
        )),
        "{err}"
    );
}

/// A thread of `events` calls of two functions, nested, with a lost record
/// in the middle: more than two of the pipeline's batches.
fn long_thread_trace(events: usize) -> crate::trace::Trace {
    use crate::trace::{EventKind, ThreadTrace};
    let mut trace = sample_trace();
    let functions: Vec<usize> = trace.names.keys().copied().take(2).collect();
    let mut thread = Vec::with_capacity(events);
    for call in 0..events / 4 {
        let time = 1_000_000 + call as u64 * 40;
        let event = |offset, function, depth, kind| GraphEvent {
            time_ns: time + offset,
            function,
            depth,
            kind,
        };
        thread.push(event(0, functions[0], 0, EventKind::Entry));
        thread.push(event(10, functions[1], 1, EventKind::Entry));
        thread.push(event(20, functions[1], 1, EventKind::Exit));
        thread.push(event(30, functions[0], 0, EventKind::Exit));
    }
    trace.threads = vec![ThreadTrace {
        tid: 4100,
        name: None,
        events: thread,
        lost: 3,
    }];
    trace
}

#[test]
fn a_pipelined_read_gives_what_a_read_on_one_thread_gives() {
    let trace = long_thread_trace(100_003);
    let dir = written(&trace, "pipelined");
    let reader = UftraceReader::open(&dir.0).unwrap();
    let collect = |events: &mut dyn Iterator<Item = GraphEvent>| events.collect::<Vec<_>>();
    let here = reader
        .read_here(0, reader.records_of(0).unwrap(), collect)
        .unwrap();
    let pipelined = (reader.read_pipelined(0, reader.records_of(0).unwrap(), collect)).unwrap();
    assert_eq!(here.0.len(), 100_000);
    assert_eq!(here.1, 3, "the lost record is counted");
    assert_eq!(pipelined, here);
    assert_eq!(reader.bytes_read(), 2 * reader.data_bytes());
    // A reader that stops early stops the decoding thread too.
    let (first, _) = reader
        .read_pipelined(0, reader.records_of(0).unwrap(), |events| {
            events.take(5).collect::<Vec<_>>()
        })
        .unwrap();
    assert_eq!(first, here.0[..5]);
}
