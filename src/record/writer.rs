//! The streaming recorder's writer thread: drains every thread's buffer
//! into the [`UftraceStream`] each interval, or as soon as a traced thread
//! asks (lossless mode: its buffer is half full), until told to stop.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fntrace_format::export::{ExportError, StreamTotals, UftraceStream};

use super::exit::FINISH_ASKED;
use super::{directory_write, WriterShared};
use crate::builtin::graph::{describe_process, GRAPH_TRACER};
use crate::error::Error;
use crate::rt::thread::Untraced;
use crate::symbols::opened;
use crate::sys;

/// The writer thread: drains, writes, sleeps, until told to stop; then
/// drains once more. With no `stream`, it joins `dir` at the first events.
pub(super) fn write_until_stopped(
    stream: Result<UftraceStream, (u64, Option<u32>)>,
    dir: &Path,
    shared: &WriterShared,
    interval: Duration,
) -> Result<StreamTotals, Error> {
    // Nothing this thread calls is traced (its own events would feed the
    // stream it writes).
    let _untraced = Untraced::begin();
    super::exit::writer_started();
    // Threads that exit while many exited threads' buffers wait for this
    // writer wait for it to catch up (see `ring::wait_for_reader`).
    let _periodic = crate::builtin::graph::GRAPH_TRACER.periodic_reader();
    let (stream, start_ns, forked_from) = match stream {
        Ok(stream) => (Some(stream), 0, None),
        Err((start_ns, forked_from)) => (None, start_ns, forked_from),
    };
    let mut drainer = Drainer {
        stream,
        dir,
        start_ns,
        forked_from,
        failure: None,
        discarded: 0,
        lost_unwritten: std::collections::BTreeMap::new(),
        // A forked child's parent added the libraries it saw.
        libraries_seen: if forked_from.is_some() {
            opened::newest_seq()
        } else {
            0
        },
    };
    // Lossless while this thread drains: a thread whose buffer is full
    // waits for it. Turned off before it stops, with one more drain for
    // what the waiting threads then wrote.
    let room_at_start = GRAPH_TRACER.room_stats();
    let values_left_out_at_start = GRAPH_TRACER.values_left_out();
    if shared.lossless {
        GRAPH_TRACER.set_lossless(true);
    }
    // Stopped as by `Recording::stop`, or by a signal's handler before the
    // signal ends the process.
    let stopped = || shared.stop.load(Ordering::Acquire) || FINISH_ASKED.load(Ordering::Acquire);
    loop {
        if !stopped() {
            GRAPH_TRACER.reader_sleep(interval);
        }
        let stop = stopped();
        drainer.drain_once(shared);
        if stop {
            if shared.lossless {
                GRAPH_TRACER.set_lossless(false);
                drainer.drain_once(shared);
            }
            break;
        }
    }
    let Drainer {
        stream,
        failure,
        discarded,
        lost_unwritten,
        ..
    } = drainer;
    let writer_cpu_ns = sys::thread_cpu_ns();
    shared.writer_cpu_ns.store(writer_cpu_ns, Ordering::Relaxed);
    let Some(mut stream) = stream else {
        return match failure {
            Some(err) => Err(not_written(dir, discarded, &err, "")),
            None => Ok(StreamTotals::default()),
        };
    };
    let totals = stream.totals();
    let mut note = recorder_note(
        shared,
        &room_at_start,
        GRAPH_TRACER.values_left_out() - values_left_out_at_start,
        totals.events,
        totals.lost + totals.left_out + discarded,
        writer_cpu_ns,
    );
    let _writing = directory_write();
    match failure {
        None => {
            stream.set_recorder_note(&note);
            Ok(stream.finish()?)
        }
        Some(err) => {
            // The directory says what was lost where (lost records at the
            // end of each thread's file, a note that `fntrace record`
            // reads), with the space the stream kept for it.
            note.push_str(" incomplete=write-failed");
            stream.set_recorder_note(&note);
            let lost: Vec<(u32, u64)> = lost_unwritten.into_iter().collect();
            let marked = match stream.finish_incomplete(&lost) {
                Ok(_) => " (counted as lost; the directory marks the gap)".to_string(),
                Err(mark) => format!(" (the directory could not be marked either: {mark})"),
            };
            Err(not_written(dir, discarded, &err, &marked))
        }
    }
}

/// What the recorder says of its session in the directory: mode, events,
/// losses, waits, the writer's CPU, memory (see
/// [`UftraceStream::set_recorder_note`]).
fn recorder_note(
    shared: &WriterShared,
    room_at_start: &crate::rt::ring::RoomStats,
    values_lost: u64,
    events: u64,
    lost: u64,
    writer_cpu_ns: u64,
) -> String {
    let room = GRAPH_TRACER.room_stats();
    // The budget's peak is since the recording set it (lossless only): in
    // a forked child, it includes the parent's threads until they were
    // freed.
    let memory = if shared.lossless {
        let event = crate::record::RECORD_EVENT_BYTES as u64;
        format!(
            " memory={} memory_peak={}",
            room.memory_events * event,
            room.memory_peak_events * event
        )
    } else {
        String::new()
    };
    // Recorded with --async: the futures the runtime linker could not
    // follow (its table full).
    let futures = match crate::builtin::futures::capacity() {
        0 => String::new(),
        _ => format!(
            " futures_untracked={}",
            crate::builtin::futures::untracked()
        ),
    };
    format!(
        "mode={} events={events} lost={lost} values_lost={values_lost} waits={} wait_ns={} \
         writer_cpu_ns={writer_cpu_ns}{memory}{futures}",
        if shared.lossless { "lossless" } else { "drop" },
        room.waits - room_at_start.waits,
        room.wait_ns - room_at_start.wait_ns,
    )
}

/// The error a recording whose directory could not be written ends with.
fn not_written(dir: &Path, discarded: u64, err: &Error, marked: &str) -> Error {
    Error::Recording(format!(
        "writing {} failed, {discarded} events were not written{marked}: {err}",
        dir.display()
    ))
}

/// Adds to `stream` the libraries seen loaded (and perhaps unloaded)
/// since the last call (see [`UftraceStream::add_library`]): uftrace and
/// fntrace's reader name their functions from what it writes.
fn add_libraries(stream: &mut UftraceStream, seen: &mut u64) -> Result<(), Error> {
    for object in opened::seen_since(*seen) {
        *seen = object.seq;
        stream.add_library(
            object.loaded_after_ns,
            object.bias as u64,
            &object.path,
            object.end() as u64,
            || {
                object
                    .functions()
                    .iter()
                    .map(|f| (f.start, f.name.to_string()))
                    .collect()
            },
        )?;
    }
    Ok(())
}

/// The writer thread's state from one drain to the next.
struct Drainer<'a> {
    /// None until a forked child's first events (see `write_until_stopped`).
    stream: Option<UftraceStream>,
    dir: &'a Path,
    start_ns: u64,
    forked_from: Option<u32>,
    failure: Option<Error>,
    /// Events drained but not written (the directory could not be).
    discarded: u64,
    /// Those of each thread (its lost record at the end).
    lost_unwritten: std::collections::BTreeMap<u32, u64>,
    /// The newest object of `symbols::opened` added to the stream.
    libraries_seen: u64,
}

impl Drainer<'_> {
    /// Drains every thread's buffer into the stream once.
    fn drain_once(&mut self, shared: &WriterShared) {
        let Drainer {
            stream,
            dir,
            start_ns,
            forked_from,
            failure,
            discarded,
            lost_unwritten,
            libraries_seen,
        } = self;
        let failed_before = failure.is_some();
        // The loader's objects are listed (under its lock) before the
        // directory's lock is taken, never inside it. Not in a forked
        // child (see `symbols::inherited`; its own `dlclose`s are seen all
        // the same).
        if forked_from.is_none() {
            opened::refresh();
        }
        let writing = directory_write();
        GRAPH_TRACER.stream_converted(&mut |batch| {
            let count = batch.events.len() as u64 + batch.dropped_after;
            let mut lose = |count: u64| {
                *discarded += count;
                *lost_unwritten.entry(batch.tid).or_default() += count;
            };
            if failure.is_some() {
                // The directory cannot be written: keep draining, so the
                // traced threads keep their fast path, and count.
                lose(count);
                return;
            }
            if stream.is_none() {
                let joined = match forked_from {
                    Some(parent) => {
                        UftraceStream::join_forked(dir, describe_process(true), *start_ns, *parent)
                    }
                    None => UftraceStream::join(dir, describe_process(false), *start_ns),
                };
                match joined {
                    Ok(joined) => *stream = Some(joined),
                    Err(err) => {
                        lose(count);
                        *failure = Some(err.into());
                        return;
                    }
                }
            }
            let Some(stream) = stream.as_mut() else {
                return;
            };
            let appended = stream.append_events(
                batch.tid,
                Some(batch.name),
                batch.events,
                batch.dropped_after,
            );
            if let Err(err) = appended {
                // A full file system stops the append between two whole
                // chunks: what it did not write is known exactly.
                lose(match &err {
                    ExportError::Full { unwritten, .. } => *unwritten,
                    _ => count,
                });
                *failure = Some(err.into());
            }
        });
        if failure.is_none() {
            if let Some(stream) = stream.as_mut() {
                if let Err(err) = add_libraries(stream, libraries_seen) {
                    *failure = Some(err);
                }
            }
        }
        if failure.is_none() {
            if let Some(Err(err)) = stream.as_mut().map(UftraceStream::flush) {
                *failure = Some(err.into());
            }
        }
        drop(writing);
        if let (false, Some(err)) = (failed_before, &failure) {
            // Said when it happens, not only when the recording ends.
            eprintln!(
                "fntrace: the recording stopped writing {}: {err}; from now on its events are \
                 counted as lost",
                dir.display()
            );
        }
        if let Some(stream) = &stream {
            let totals = stream.totals();
            shared.written.store(totals.events, Ordering::Relaxed);
            shared.lost.store(
                totals.lost + totals.left_out + *discarded,
                Ordering::Relaxed,
            );
        }
        shared.drains.fetch_add(1, Ordering::Release);
    }
}
