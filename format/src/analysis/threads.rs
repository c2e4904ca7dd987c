//! Reading a trace's threads one by one or side by side: what every
//! report's first step is ([`map_threads`], [`map_threads_here`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::source::EventSource;
use crate::trace::GraphEvent;

/// Reads each thread of `source` with `map` on the calling thread, in
/// order: [`map_threads`] for sources that cannot be shared.
pub fn map_threads_here<S: EventSource, R>(
    source: &S,
    mut map: impl FnMut(usize, &mut dyn Iterator<Item = GraphEvent>) -> R,
) -> Result<Vec<(R, u64)>, S::Error> {
    (0..source.threads().len())
        .map(|index| source.read_thread(index, |events| map(index, events)))
        .collect()
}

/// Where a worker leaves one thread's result.
type Slot<R, E> = Mutex<Option<Result<(R, u64), E>>>;

/// How many threads of a trace [`map_threads`] reads at once: one per core
/// the process may run on (`FNTRACE_READERS` overrides it, 1 reads one
/// thread after another), never more than there are threads to read.
pub fn reading_threads(threads: usize) -> usize {
    let cores = std::env::var("FNTRACE_READERS")
        .ok()
        .and_then(|text| text.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    cores.min(threads).max(1)
}

/// Calls `map(index, events)` for each thread of `source` and returns the
/// results with each thread's count of lost events, in thread order.
///
/// Threads are read by [`reading_threads`] workers at once, each taking the
/// next unread thread, largest first by [`EventSource::size_hint`] (the
/// trace's order can put the longest thread last and leave a core idle at
/// the end).
/// Memory is what `map` keeps plus, per worker, what one read takes. The
/// first error (in thread order) is returned; threads not yet started are
/// then not read.
pub fn map_threads<S, R>(
    source: &S,
    map: impl Fn(usize, &mut dyn Iterator<Item = GraphEvent>) -> R + Sync,
) -> Result<Vec<(R, u64)>, S::Error>
where
    S: EventSource + Sync,
    S::Error: Send,
    R: Send,
{
    let count = source.threads().len();
    map_threads_on(source, reading_threads(count), map)
}

/// [`map_threads`] on `workers` threads.
fn map_threads_on<S, R>(
    source: &S,
    workers: usize,
    map: impl Fn(usize, &mut dyn Iterator<Item = GraphEvent>) -> R + Sync,
) -> Result<Vec<(R, u64)>, S::Error>
where
    S: EventSource + Sync,
    S::Error: Send,
    R: Send,
{
    let count = source.threads().len();
    if workers <= 1 {
        return (0..count)
            .map(|index| source.read_thread(index, |events| map(index, events)))
            .collect();
    }
    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by_key(|&index| std::cmp::Reverse(source.size_hint(index)));
    let next = AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    // Per thread, its read's result once read.
    let results: Vec<Slot<R, S::Error>> = (0..count).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                if failed.load(Ordering::Relaxed) {
                    break;
                }
                let Some(&index) = order.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    break;
                };
                let result = source.read_thread(index, |events| map(index, events));
                if result.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                *results[index]
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(result);
            });
        }
    });
    let mut values = Vec::with_capacity(count);
    for slot in results {
        match slot
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
        {
            Some(Ok(value)) => values.push(value),
            Some(Err(error)) => return Err(error),
            // Not read: an earlier-started read failed, and its error is
            // in a later slot.
            None => {}
        }
    }
    // Only reached without an error when every thread was read.
    debug_assert_eq!(values.len(), count);
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::ThreadInfo;
    use crate::trace::{EventKind, ThreadTrace, Trace};

    /// Threads of 1..=7 events, the longest last.
    fn trace() -> Trace {
        let threads = (1..=7u32)
            .map(|tid| ThreadTrace {
                tid,
                events: (0..tid)
                    .map(|n| GraphEvent {
                        time_ns: u64::from(n),
                        function: 0x10,
                        depth: 0,
                        kind: EventKind::Entry,
                    })
                    .collect(),
                lost: u64::from(tid) * 10,
                ..ThreadTrace::default()
            })
            .collect();
        Trace {
            threads,
            ..Trace::default()
        }
    }

    #[test]
    fn results_come_in_thread_order_whatever_the_workers() {
        let trace = trace();
        for workers in 1..=4 {
            let counts =
                map_threads_on(&trace, workers, |index, events| (index, events.count())).unwrap();
            let expected: Vec<((usize, usize), u64)> = (0..7)
                .map(|index| ((index, index + 1), (index as u64 + 1) * 10))
                .collect();
            assert_eq!(counts, expected, "{workers} workers");
        }
    }

    /// A trace whose thread 3 cannot be read.
    struct Failing(Trace);

    impl EventSource for Failing {
        type Error = String;
        fn pid(&self) -> u32 {
            0
        }
        fn exe(&self) -> &str {
            ""
        }
        fn threads(&self) -> Vec<ThreadInfo> {
            self.0.threads()
        }
        fn name_of(&self, function: usize) -> String {
            format!("{function:#x}")
        }
        fn read_thread<R>(
            &self,
            index: usize,
            read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
        ) -> Result<(R, u64), String> {
            if index == 3 {
                return Err("thread 3 is unreadable".to_string());
            }
            self.0
                .read_thread(index, read)
                .map_err(|never| match never {})
        }
    }

    #[test]
    fn an_unreadable_thread_is_the_error() {
        let failing = Failing(trace());
        for workers in 1..=3 {
            let result = map_threads_on(&failing, workers, |_, events| events.count());
            assert_eq!(
                result,
                Err("thread 3 is unreadable".to_string()),
                "{workers} workers"
            );
        }
    }
}
