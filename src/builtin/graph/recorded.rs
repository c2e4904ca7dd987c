//! The graph tracer's recorded events read where they are — the retained
//! ones (moved out of the rings earlier), then each ring's unread ones —
//! as an [`EventSource`], so that a dump or a report reads them as often
//! as it needs without collecting them into a [`Trace`]: memory does not
//! grow with the number of events. [`Recorded::forget`] then drops them,
//! as [`GraphTracer::take_trace`] would have.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::MutexGuard;

use fntrace_format::{EventSource, Gap, GraphEvent, ThreadInfo, ThreadTrace, Trace};

use super::{describe_functions, GraphTracer, RawEvent};
use crate::rt::ops;
use crate::rt::ring::Peek;
use crate::rt::thread::Untraced;
use crate::sites::function_of_site;

/// One thread of [`Recorded`]: its retained events, then those of its
/// rings (a tid can own several over time), as `take_trace` joins them.
struct RecordedThread {
    tid: u32,
    name: Option<String>,
    /// Index in the retained threads.
    retained: Option<usize>,
    /// Indices in the peeked rings, in the order drains read them.
    rings: Vec<usize>,
    events: usize,
    lost: u64,
}

/// Every event the graph tracer recorded so far, held in place; see the
/// [module documentation](self). While it lives, fntrace's operation lock
/// is held: control operations, drains (the recorders' writers) and `fork`
/// wait.
pub(crate) struct Recorded<'a> {
    // Fields drop in order: the rings, the retained events, then the
    // operation lock, which is taken first (after `_untraced`).
    peek: Peek<'a, RawEvent>,
    retained: parking_lot::MutexGuard<'a, Vec<ThreadTrace>>,
    _operation: MutexGuard<'static, ()>,
    /// The reading thread is not traced while it holds the lock.
    _untraced: Untraced,
    threads: Vec<RecordedThread>,
    /// The process, with the names of the functions of the events.
    header: Trace,
}

impl GraphTracer {
    /// Every event recorded so far, in place (see [`Recorded`]); threads
    /// in the order [`GraphTracer::take_trace`] gives them.
    pub(crate) fn recorded(&self) -> Recorded<'_> {
        let untraced = Untraced::begin();
        let operation = ops::operation();
        let retained = self.retained.lock();
        let peek = self.pool.peek();
        let mut threads: Vec<RecordedThread> = retained
            .iter()
            .enumerate()
            .map(|(index, thread)| RecordedThread {
                tid: thread.tid,
                name: thread.name.clone(),
                retained: Some(index),
                rings: Vec::new(),
                events: thread.events.len(),
                lost: thread.lost,
            })
            .collect();
        // Events repeat few functions and sites: skip runs cheaply.
        let mut functions = HashSet::new();
        let mut sites = HashSet::new();
        for thread in retained.iter() {
            let mut last = None;
            for event in &thread.events {
                if last != Some(event.function) {
                    last = Some(event.function);
                    functions.insert(event.function);
                }
            }
        }
        for (index, ring) in peek.rings().iter().enumerate() {
            let position = threads.iter().position(|t| t.tid == ring.tid);
            let thread = match position {
                Some(i) => &mut threads[i],
                None => {
                    threads.push(RecordedThread {
                        tid: ring.tid,
                        name: (!ring.name.is_empty()).then(|| ring.name.clone()),
                        retained: None,
                        rings: Vec::new(),
                        events: 0,
                        lost: 0,
                    });
                    threads.last_mut().expect("just pushed")
                }
            };
            thread.rings.push(index);

            thread.lost += ring.dropped;
            let mut last = None;
            // Argument data is not an event here (see `args`).
            for event in ring.runs().into_iter().flatten().filter(|e| !e.is_data()) {
                thread.events += 1;
                let site = event.site();
                if last != Some(site) {
                    last = Some(site);
                    sites.insert(site);
                }
            }
        }
        functions.extend(sites.into_iter().map(function_of_site));
        Recorded {
            peek,
            retained,
            _operation: operation,
            _untraced: untraced,
            threads,
            header: describe_functions(Vec::new(), functions),
        }
    }
}

impl Recorded<'_> {
    /// The process, and the names of the functions the events name: the
    /// header [`write_uftrace_dir_of`](fntrace_format::export::write_uftrace_dir_of)
    /// wants.
    pub(crate) fn header(&self) -> &Trace {
        &self.header
    }

    /// Threads with events or lost events.
    pub(crate) fn thread_count(&self) -> usize {
        self.threads.len()
    }

    /// Events held.
    pub(crate) fn events(&self) -> usize {
        self.threads.iter().map(|t| t.events).sum()
    }

    /// Events lost (buffers full) among them.
    pub(crate) fn lost(&self) -> u64 {
        self.threads.iter().map(|t| t.lost).sum()
    }

    /// Drops the events held (those recorded since stay).
    pub(crate) fn forget(mut self) {
        self.retained.clear();
        self.peek.consume();
    }
}

impl EventSource for Recorded<'_> {
    type Error = Infallible;

    fn pid(&self) -> u32 {
        self.header.pid
    }

    fn exe(&self) -> &str {
        &self.header.exe
    }

    fn threads(&self) -> Vec<ThreadInfo> {
        self.threads
            .iter()
            .map(|thread| ThreadInfo {
                tid: thread.tid,
                name: thread.name.clone(),
            })
            .collect()
    }

    fn name_of(&self, function: usize) -> String {
        self.header.name_of(function)
    }

    /// The thread that forked this process, in a forked child: its calls
    /// running at the fork are its parent's (a dump continues them, as
    /// uftrace and the streaming recorder do).
    fn continues_parent_frames(&self, index: usize) -> bool {
        crate::rt::thread::forked_thread() == Some(self.threads[index].tid)
    }

    fn read_thread<R>(
        &self,
        index: usize,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), Infallible> {
        let thread = &self.threads[index];
        let retained = thread
            .retained
            .map_or(&[][..], |i| &self.retained[i].events[..]);
        let rings = self.peek.rings();
        let mut last_site = (0, 0);
        // The rings hold raw timestamps and site addresses: converted as
        // they are read, as a drain converts them.
        let mut events = retained.iter().copied().chain(
            thread
                .rings
                .iter()
                .flat_map(|&ring| rings[ring].runs())
                .flatten()
                .filter(|raw| !raw.is_data())
                .map(move |raw| raw.converted(&mut last_site)),
        );
        Ok((read(&mut events), thread.lost))
    }

    /// A ring drops events only when it is full, that is after the events
    /// it holds: its gap is after them. The retained events' losses (from
    /// earlier collections, which add up the counts) are placed after the
    /// retained events, where the last of them happened.
    fn gaps(&self, index: usize) -> Vec<Gap> {
        let thread = &self.threads[index];
        let rings = self.peek.rings();
        let mut gaps = Vec::new();
        let mut after = 0;
        if let Some(i) = thread.retained {
            let retained = &self.retained[i];
            after = retained.events.len();
            gaps.push(Gap {
                after,
                count: retained.lost,
            });
        }
        for &ring in &thread.rings {
            after += rings[ring].len();
            gaps.push(Gap {
                after,
                count: rings[ring].dropped,
            });
        }
        gaps.retain(|gap| gap.count > 0);
        gaps
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use fntrace_format::export::write_uftrace_dir_of;
    use fntrace_format::EventKind::{self, Entry, Exit};
    use fntrace_format::{EventSource, Gap};

    use super::super::{GraphTracer, RawEvent, GRAPH_TRACER};
    use super::Untraced;
    use crate::sys::clock::now_ticks;

    /// Pushes an event of a made-up site at `depth` into this thread's ring.
    fn push(depth: usize, kind: EventKind) {
        let site = 0x40_0000 + depth * 0x10;
        GRAPH_TRACER.push(RawEvent::new(now_ticks(), site, depth, kind));
    }

    fn on_a_thread(events: &'static [(usize, EventKind)]) {
        std::thread::spawn(move || {
            for &(depth, kind) in events {
                push(depth, kind);
            }
        })
        .join()
        .unwrap();
    }

    fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&path).unwrap())
            })
            .collect()
    }

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fntrace-recorded-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// The events read in place are written as `take_trace`'s Trace of
    /// them would be, byte for byte: retained and ring events of one
    /// thread joined, threads in the same order, lost events counted, and
    /// placed after the events of the ring that dropped them.
    #[test]
    fn events_in_place_write_what_the_whole_trace_writes() {
        let _untraced = Untraced::begin();
        // The clock settled first (as `init` does): events stamped before
        // another test switches it to the TSC would be read as TSC ticks
        // (seen: timestamps 0.385 x what they were, one run in many).
        crate::sys::clock::calibrate(std::time::Duration::from_millis(10));
        let tracer: &GraphTracer = &GRAPH_TRACER;
        tracer.take_trace();
        on_a_thread(&[(0, Entry), (1, Entry), (1, Exit), (0, Exit)]);
        // This thread: some events retained, more in its ring.
        push(0, Entry);
        push(1, Entry);
        tracer.retain_buffered();
        push(1, Exit);
        push(1, Entry);
        // Calls running at the start, and one left open.
        on_a_thread(&[(2, Exit), (1, Exit), (0, Entry), (1, Entry)]);
        // A ring that fills: 16 events kept, 24 lost.
        tracer.set_buffer_events(16);
        on_a_thread([(0, Entry), (0, Exit)].repeat(20).leak());
        tracer.set_buffer_events(crate::rt::ring::DEFAULT_RING_EVENTS);

        let (in_place, whole) = (temp("in-place"), temp("whole"));
        let recorded = tracer.recorded();
        let (threads, events, lost) = (recorded.thread_count(), recorded.events(), recorded.lost());
        let gaps: Vec<Vec<Gap>> = (0..threads).map(|i| recorded.gaps(i)).collect();
        assert_eq!(
            gaps.iter().flatten().collect::<Vec<_>>(),
            [&Gap {
                after: 16,
                count: 24
            }]
        );
        write_uftrace_dir_of(recorded.header(), &recorded, &in_place, None).unwrap();
        // The process's maps as the header read them: other tests map and
        // unmap memory meanwhile, and the events are what is compared.
        let maps = recorded.header().maps.clone();
        drop(recorded); // not forgotten: take_trace finds the same events
        let mut trace = tracer.take_trace();
        trace.maps = maps;
        let trace_with_gaps = fntrace_format::WithGaps {
            source: &trace,
            gaps,
        };
        write_uftrace_dir_of(&trace, &trace_with_gaps, &whole, None).unwrap();
        assert_eq!(threads, trace.threads.len());
        assert_eq!(events, trace.threads.iter().map(|t| t.events.len()).sum());
        assert_eq!((lost, trace.lost()), (24, 24));
        assert_eq!(events, 4 + 4 + 4 + 16);
        assert_eq!(files(&in_place), files(&whole));

        // Forgotten: gone, and later events stay.
        on_a_thread(&[(0, Entry), (0, Exit)]);
        tracer.recorded().forget();
        push(0, Exit);
        assert_eq!(tracer.recorded().events(), 1);
        assert_eq!(tracer.take_trace().threads[0].events.len(), 1);
        let _ = std::fs::remove_dir_all(&in_place);
        let _ = std::fs::remove_dir_all(&whole);
    }
}
