//! The flight recorder's in-memory window: every thread's most recent
//! events, 16 bytes each, the oldest (across threads, by time) evicted
//! when the window is over its budget. An event's recorded arguments or
//! return value follow it as slots of 8 bytes of data, 16 bytes each too
//! (counted in the budget, evicted with their event). Only the writer
//! thread touches it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::convert::Infallible;

use fntrace_format::argspec::{DATA_DEPTH, FOLLOWED_BY_DATA};
use fntrace_format::{EventKind, EventSource, Gap, GraphEvent, ThreadInfo, Trace};

use crate::rt::shadow::MAX_HOOKED_DEPTH;

/// Bytes one event (or 8 bytes of its values) takes in the window.
pub const FLIGHT_EVENT_BYTES: usize = std::mem::size_of::<Packed>();

const ADDR_BITS: u32 = 48;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;
const EXIT_BIT: u64 = 1 << 63;
/// The depth field of a lost marker (no event has it): its address field
/// holds how many events the thread's buffer dropped at that point.
const LOST_DEPTH: u64 = 0x7fff;
/// The depth field of a slot of data: its 8 bytes in place of the time.
const DATA_MARK: u64 = 0x7ffe;
/// An event followed by slots of data: the depth field's top bit.
const FOLLOWED_BIT: u64 = 1 << 62;

// An event's depth, with the followed bit or not, is never a marker's.
const _: () = assert!((MAX_HOOKED_DEPTH as u64) | FOLLOWED_BIT >> ADDR_BITS < DATA_MARK);

/// An event in the window: time, then function (bits 0-47), depth (48-61),
/// followed by data (62) and exit (63); or a lost marker; or a slot of data.
#[derive(Clone, Copy, Debug)]
struct Packed {
    time_ns: u64,
    word: u64,
}

const _: () = assert!(std::mem::size_of::<Packed>() == 16);

impl Packed {
    fn event(event: &GraphEvent) -> Packed {
        let exit = if event.kind == EventKind::Exit {
            EXIT_BIT
        } else {
            0
        };
        if event.depth == DATA_DEPTH {
            return Packed {
                time_ns: event.time_ns,
                word: DATA_MARK << ADDR_BITS,
            };
        }
        let followed = match event.depth & FOLLOWED_BY_DATA {
            0 => 0,
            _ => FOLLOWED_BIT,
        };
        let depth = event.depth & !FOLLOWED_BY_DATA;
        Packed {
            time_ns: event.time_ns,
            word: (event.function as u64 & ADDR_MASK)
                | u64::from(depth.min(MAX_HOOKED_DEPTH as u16)) << ADDR_BITS
                | followed
                | exit,
        }
    }

    /// Whether this is a slot of data (of the event before it).
    fn is_data(&self) -> bool {
        (self.word & !EXIT_BIT) >> ADDR_BITS == DATA_MARK
    }

    /// Whether this is an entry or an exit (not a lost marker, not data).
    fn is_event(&self) -> bool {
        self.lost_count().is_none() && !self.is_data()
    }

    /// The event as the uftrace writer takes it, its data among the events
    /// (see [`FOLLOWED_BY_DATA`]).
    fn unpack_with_data(&self) -> GraphEvent {
        if self.is_data() {
            return GraphEvent {
                time_ns: self.time_ns,
                function: 0,
                depth: DATA_DEPTH,
                kind: EventKind::Entry,
            };
        }
        let mut event = self.unpack();
        if self.word & FOLLOWED_BIT != 0 {
            event.depth |= FOLLOWED_BY_DATA;
        }
        event
    }

    fn lost(time_ns: u64, count: u64) -> Packed {
        Packed {
            time_ns,
            word: count.min(ADDR_MASK) | LOST_DEPTH << ADDR_BITS,
        }
    }

    fn lost_count(&self) -> Option<u64> {
        ((self.word & !EXIT_BIT) >> ADDR_BITS == LOST_DEPTH).then_some(self.word & ADDR_MASK)
    }

    fn unpack(&self) -> GraphEvent {
        GraphEvent {
            time_ns: self.time_ns,
            function: (self.word & ADDR_MASK) as usize,
            depth: ((self.word & !(EXIT_BIT | FOLLOWED_BIT)) >> ADDR_BITS) as u16,
            kind: if self.word & EXIT_BIT != 0 {
                EventKind::Exit
            } else {
                EventKind::Entry
            },
        }
    }
}

/// What [`Window::for_each_new`] passes: an event and the bytes of its
/// values, or the time where events were lost.
pub type NewEvent<'a> = Result<(&'a GraphEvent, &'a [u8]), u64>;

/// One thread's part of the window.
struct ThreadWindow {
    tid: u32,
    name: String,
    events: VecDeque<Packed>,
    /// Events appended by the current drain start here.
    new_from: usize,
}

/// Every thread's most recent events.
pub struct Window {
    threads: Vec<ThreadWindow>,
    /// Events (and lost markers) the window may hold.
    capacity: usize,
    held: usize,
    /// Entries and exits evicted so far.
    evicted: u64,
    /// Entries and exits appended so far.
    appended: u64,
    /// Events the threads' buffers dropped so far.
    lost: u64,
}

/// What the window holds, in counts; see [`Window::summary`].
pub struct Summary {
    /// Threads with events or lost markers.
    pub threads: usize,
    /// Entries and exits.
    pub events: u64,
    /// Events the threads' buffers dropped, by the lost markers.
    pub lost: u64,
    /// Time of the oldest event, if any.
    pub first_ns: Option<u64>,
    /// Time of the newest event, if any.
    pub last_ns: Option<u64>,
}

/// The window as an [`EventSource`] for the uftrace writer: its threads'
/// events read in place (lost markers counted, not read, and listed by
/// [`EventSource::gaps`], so that each is a lost record where it is), with
/// `header`'s process description and names.
pub struct WindowEvents<'a> {
    pub window: &'a Window,
    pub header: Trace,
    /// The recorder's note for the directory (see
    /// [`EventSource::recorder_note`]).
    pub note: Option<String>,
    /// The window's threads it shows, by index ([`Window::indexes_of`]).
    pub indexes: Vec<usize>,
}

impl EventSource for WindowEvents<'_> {
    type Error = Infallible;

    fn pid(&self) -> u32 {
        self.header.pid
    }

    fn exe(&self) -> &str {
        &self.header.exe
    }

    fn threads(&self) -> Vec<ThreadInfo> {
        self.indexes
            .iter()
            .map(|&index| &self.window.threads[index])
            .map(|thread| ThreadInfo {
                tid: thread.tid,
                name: (!thread.name.is_empty()).then(|| thread.name.clone()),
            })
            .collect()
    }

    fn name_of(&self, function: usize) -> String {
        self.header.name_of(function)
    }

    fn read_thread<R>(
        &self,
        index: usize,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), Infallible> {
        let thread = &self.window.threads[self.indexes[index]];
        let lost = thread.events.iter().filter_map(Packed::lost_count).sum();
        let mut events = thread
            .events
            .iter()
            .filter(|packed| packed.lost_count().is_none())
            .map(Packed::unpack_with_data);
        Ok((read(&mut events), lost))
    }

    fn recorder_note(&self) -> Option<String> {
        self.note.clone()
    }

    /// The lost markers, where they are among the events (data not
    /// counted: the writer takes it out first).
    fn gaps(&self, index: usize) -> Vec<Gap> {
        let mut gaps = Vec::new();
        let mut events = 0;
        for packed in &self.window.threads[self.indexes[index]].events {
            match packed.lost_count() {
                Some(count) => gaps.push(Gap {
                    after: events,
                    count,
                }),
                None => events += usize::from(!packed.is_data()),
            }
        }
        gaps
    }
}

impl Window {
    /// A window holding at most `budget_bytes` of events (at least one).
    pub fn new(budget_bytes: usize) -> Window {
        Window {
            threads: Vec::new(),
            capacity: (budget_bytes / FLIGHT_EVENT_BYTES).max(1),
            held: 0,
            evicted: 0,
            appended: 0,
            lost: 0,
        }
    }

    /// Marks where the events of the coming drain start.
    pub fn begin_drain(&mut self) {
        for thread in &mut self.threads {
            thread.new_from = thread.events.len();
        }
    }

    fn thread(&mut self, tid: u32, name: &str) -> &mut ThreadWindow {
        let position = self.threads.iter().position(|t| t.tid == tid);
        let index = position.unwrap_or_else(|| {
            self.threads.push(ThreadWindow {
                tid,
                name: name.to_string(),
                events: VecDeque::new(),
                new_from: 0,
            });
            self.threads.len() - 1
        });
        &mut self.threads[index]
    }

    /// Appends a drained batch of thread `tid`: `events` (their data
    /// among them, see [`FOLLOWED_BY_DATA`]), then a lost marker if its
    /// buffer dropped `dropped_after` events after them.
    pub fn append(&mut self, tid: u32, name: &str, events: &[GraphEvent], dropped_after: u64) {
        let thread = self.thread(tid, name);
        let last_time = thread.events.iter().rev().find(|e| e.is_event());
        let last_time = last_time.map_or(0, |e| e.time_ns);
        thread.events.extend(events.iter().map(Packed::event));
        let data = events.iter().filter(|e| e.depth == DATA_DEPTH).count();
        if dropped_after != 0 {
            let last = events.iter().rev().find(|e| e.depth != DATA_DEPTH);
            let time = last.map_or(last_time, |e| e.time_ns);
            thread.events.push_back(Packed::lost(time, dropped_after));
        }
        self.held += events.len() + usize::from(dropped_after != 0);
        self.appended += (events.len() - data) as u64;
        self.lost += dropped_after;
    }

    /// Calls `each(tid, Ok((event, data)))` for every event the current
    /// drain appended, in order, `data` the bytes of its values (empty if
    /// none), and `each(tid, Err(time))` where the thread's buffer began
    /// to drop events, `time` the time of the last event kept before (an
    /// exit after the gap may end a call other than the one open before
    /// it).
    pub fn for_each_new(&self, each: &mut dyn FnMut(u32, NewEvent<'_>)) {
        let mut data = Vec::new();
        for thread in &self.threads {
            let from = thread.new_from.min(thread.events.len());
            let mut packed = thread.events.range(from..).peekable();
            while let Some(next) = packed.next() {
                if let Some(_lost) = next.lost_count() {
                    each(thread.tid, Err(next.time_ns));
                    continue;
                }
                if next.is_data() {
                    continue;
                }
                data.clear();
                while let Some(slot) = packed.next_if(|p| p.is_data()) {
                    data.extend_from_slice(&slot.time_ns.to_le_bytes());
                }
                each(thread.tid, Ok((&next.unpack(), &data)));
            }
        }
    }

    /// Evicts the oldest events (across threads, by time) until the window
    /// is within its budget; forgets threads left with nothing.
    pub fn evict(&mut self) {
        if self.held > self.capacity {
            let mut fronts: BinaryHeap<Reverse<(u64, usize)>> = self
                .threads
                .iter()
                .enumerate()
                .filter_map(|(i, t)| Some(Reverse((t.events.front()?.time_ns, i))))
                .collect();
            while self.held > self.capacity {
                let Some(Reverse((_, i))) = fronts.pop() else {
                    break;
                };
                let thread = &mut self.threads[i];
                let Some(oldest) = thread.events.pop_front() else {
                    continue;
                };
                // Its data goes with it.
                let mut gone = 1;
                while thread.events.front().is_some_and(Packed::is_data) {
                    thread.events.pop_front();
                    gone += 1;
                }
                thread.new_from = thread.new_from.saturating_sub(gone);
                self.held -= gone;
                if oldest.is_event() {
                    self.evicted += 1;
                }
                if let Some(next) = thread.events.front() {
                    fronts.push(Reverse((next.time_ns, i)));
                }
            }
        }
        self.threads.retain(|t| !t.events.is_empty());
        // A thread's events may move to others: give back what a window no
        // longer uses, so that the windows' memory follows the budget.
        for thread in &mut self.threads {
            let (len, capacity) = (thread.events.len(), thread.events.capacity());
            if capacity > 4096 && len < capacity / 4 {
                thread.events.shrink_to(len * 2);
            }
        }
    }

    /// Whether it holds as many events as its budget allows, or more.
    pub fn is_full(&self) -> bool {
        self.held >= self.capacity
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Moves every event of `other` to the end of its thread's here, as a
    /// drain would append them, with `other`'s counts; `other` is left
    /// empty.
    pub fn take_all(&mut self, other: &mut Window) {
        for mut theirs in other.threads.drain(..) {
            let events = std::mem::take(&mut theirs.events);
            self.held += events.len();
            self.thread(theirs.tid, &theirs.name).events.extend(events);
        }
        self.appended += std::mem::take(&mut other.appended);
        self.lost += std::mem::take(&mut other.lost);
        other.held = 0;
    }

    /// The indexes of its threads whose tid is in `tids`, or of all of
    /// them (`None`).
    pub fn indexes_of(&self, tids: Option<&[u32]>) -> Vec<usize> {
        (0..self.threads.len())
            .filter(|&i| tids.is_none_or(|tids| tids.contains(&self.threads[i].tid)))
            .collect()
    }

    /// What the threads at `indexes` hold, in counts.
    pub fn summary(&self, indexes: &[usize]) -> Summary {
        let mut summary = Summary {
            threads: indexes.len(),
            events: 0,
            lost: 0,
            first_ns: None,
            last_ns: None,
        };
        for thread in indexes.iter().map(|&i| &self.threads[i]) {
            let mut events = thread.events.iter().filter(|p| p.is_event());
            if let Some(first) = events.next() {
                let last = events.next_back().unwrap_or(first);
                summary.first_ns = Some(
                    summary
                        .first_ns
                        .map_or(first.time_ns, |t| t.min(first.time_ns)),
                );
                summary.last_ns = Some(
                    summary
                        .last_ns
                        .map_or(last.time_ns, |t| t.max(last.time_ns)),
                );
            }
            for packed in &thread.events {
                match packed.lost_count() {
                    Some(count) => summary.lost += count,
                    None => summary.events += u64::from(!packed.is_data()),
                }
            }
        }
        summary
    }

    /// The functions of the events held.
    pub fn functions(&self) -> HashSet<usize> {
        let mut functions = HashSet::new();
        for thread in &self.threads {
            // Events repeat few functions: skip runs of the same one cheaply.
            let mut last = None;
            for packed in thread.events.iter().filter(|p| p.is_event()) {
                let function = packed.unpack().function;
                if last != Some(function) {
                    last = Some(function);
                    functions.insert(function);
                }
            }
        }
        functions
    }

    /// Entries and exits evicted so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Entries and exits the window took in so far.
    pub fn appended(&self) -> u64 {
        self.appended
    }

    /// Events the threads' buffers dropped so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Events the window holds now.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(time_ns: u64, function: usize, depth: u16, kind: EventKind) -> GraphEvent {
        GraphEvent {
            time_ns,
            function,
            depth,
            kind,
        }
    }

    /// 8 bytes of data as the drain passes them.
    fn data(bytes: u64) -> GraphEvent {
        event(bytes, 0, DATA_DEPTH, EventKind::Entry)
    }

    #[test]
    fn values_count_in_the_budget_and_go_with_their_event() {
        let mut window = Window::new(5 * FLIGHT_EVENT_BYTES);
        let followed = FOLLOWED_BY_DATA;
        window.append(
            1,
            "a",
            &[
                event(10, 0x10, followed, EventKind::Entry),
                data(0x1111),
                data(0x2222),
                event(20, 0x10, 0, EventKind::Exit),
            ],
            0,
        );
        let mut seen = Vec::new();
        window.for_each_new(&mut |_, e| {
            let (e, data) = e.unwrap();
            seen.push((e.time_ns, e.depth, data.to_vec()));
        });
        let bytes: Vec<u8> = [0x1111u64, 0x2222]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        assert_eq!(seen, [(10, 0, bytes), (20, 0, Vec::new())]);
        window.append(
            1,
            "a",
            &[event(30, 0x20, followed, EventKind::Entry), data(7)],
            0,
        );
        // Six slots held, five fit: the oldest event goes, its data too.
        window.evict();
        assert_eq!(
            (window.held(), window.evicted(), window.appended()),
            (3, 1, 3)
        );
        let summary = window.summary(&window.indexes_of(None));
        assert_eq!((summary.events, summary.first_ns), (2, Some(20)));
        let source = WindowEvents {
            window: &window,
            header: Trace::default(),
            note: None,
            indexes: window.indexes_of(None),
        };
        let (read, _) = source.read_thread(0, |e| e.collect::<Vec<_>>()).unwrap();
        assert_eq!(
            read,
            [
                event(20, 0x10, 0, EventKind::Exit),
                event(30, 0x20, followed, EventKind::Entry),
                data(7)
            ]
        );
        assert_eq!(window.functions().len(), 2);
    }

    #[test]
    fn evicts_the_oldest_across_threads_and_counts() {
        let mut window = Window::new(4 * FLIGHT_EVENT_BYTES);
        window.append(1, "a", &[event(10, 0x10, 0, EventKind::Entry)], 0);
        window.append(2, "b", &[event(20, 0x20, 0, EventKind::Entry)], 0);
        window.append(
            1,
            "a",
            &[
                event(30, 0x10, 0, EventKind::Exit),
                event(40, 0x30, 1, EventKind::Entry),
            ],
            7,
        );
        window.append(2, "b", &[event(50, 0x20, 0, EventKind::Exit)], 0);
        // Six held (a lost marker counts), four fit: times 10 and 20 go.
        window.evict();
        assert_eq!(window.evicted(), 2);
        assert_eq!(window.held(), 4);
        let summary = window.summary(&window.indexes_of(None));
        assert_eq!((summary.threads, summary.events, summary.lost), (2, 3, 7));
        assert_eq!((summary.first_ns, summary.last_ns), (Some(30), Some(50)));
        let source = WindowEvents {
            window: &window,
            header: Trace::default(),
            note: None,
            indexes: window.indexes_of(None),
        };
        let read = |index| {
            source
                .read_thread(index, |events| events.collect::<Vec<_>>())
                .unwrap()
        };
        assert_eq!(
            read(0),
            (
                vec![
                    event(30, 0x10, 0, EventKind::Exit),
                    event(40, 0x30, 1, EventKind::Entry)
                ],
                7
            )
        );
        assert_eq!(read(1), (vec![event(50, 0x20, 0, EventKind::Exit)], 0));

        // Written in place, the window gives the files the whole-trace
        // writer gives for a Trace of the same threads, with the lost
        // marker where it is (what snapshots wrote from a copy of the
        // window before, but for the marker's place).
        let threads = vec![
            fntrace_format::ThreadTrace {
                tid: 1,
                name: Some("a".into()),
                events: read(0).0,
                lost: 7,
            },
            fntrace_format::ThreadTrace {
                tid: 2,
                name: Some("b".into()),
                events: read(1).0,
                lost: 0,
            },
        ];
        let whole = Trace {
            pid: 9,
            exe: "/bin/window".into(),
            threads,
            ..Trace::default()
        };
        let header = Trace {
            threads: Vec::new(),
            ..whole.clone()
        };
        let in_place = WindowEvents {
            window: &window,
            header,
            note: None,
            indexes: window.indexes_of(None),
        };
        let base = std::env::temp_dir().join(format!("fntrace-window-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (a, b) = (base.join("in-place"), base.join("whole"));
        fntrace_format::export::write_uftrace_dir_of(&in_place.header, &in_place, &a, None)
            .unwrap();
        let gaps: Vec<Vec<Gap>> = (0..2).map(|i| in_place.gaps(i)).collect();
        assert_eq!(gaps, [vec![Gap { after: 2, count: 7 }], vec![]]);
        let with_gaps = fntrace_format::WithGaps {
            source: &whole,
            gaps,
        };
        fntrace_format::export::write_uftrace_dir_of(&whole, &with_gaps, &b, None).unwrap();
        let files = |dir: &std::path::Path| -> Vec<(std::ffi::OsString, Vec<u8>)> {
            let mut files: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| {
                    let path = e.unwrap().path();
                    (
                        path.file_name().unwrap().to_owned(),
                        std::fs::read(&path).unwrap(),
                    )
                })
                .collect();
            files.sort();
            files
        };
        assert_eq!(files(&a).len(), 7);
        assert_eq!(files(&a), files(&b));
        let _ = std::fs::remove_dir_all(&base);
    }
}
