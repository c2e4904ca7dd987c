//! The calls of a thread, for the Chrome JSON and flame graph outputs: the
//! [pairing pass](crate::analysis#pairing-entries-with-exits) in the exports'
//! reading, placed in time as the [`crate::export`] documentation says.

use std::cell::Cell;

#[cfg(test)]
use fntrace_format::analysis::pairing::entries_of_calls_running_at_start;
use fntrace_format::analysis::pairing::{CallStep, Calls, Reading};
use fntrace_format::GraphEvent;

/// How a reconstructed call began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Began {
    /// Its entry event was recorded.
    Entered,
    /// Only its exit was recorded: it was running when tracing started; it
    /// starts at the thread's first timestamp.
    BeforeTrace,
}

/// How a reconstructed call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its exit event was recorded.
    Returned,
    /// A caller's exit, or a new call at its depth or above, came first: it
    /// was unwound (panic, `longjmp`) and ends there.
    Unwound,
    /// Still running when the trace ended: it ends at the thread's last
    /// timestamp.
    StillRunning,
}

/// One call, nested within its parent: `parent.start <= start` and
/// `end <= parent.end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NestedCall {
    /// Entry address of the function.
    pub function: usize,
    /// Nesting depth as recorded.
    pub depth: u16,
    /// Start, nanoseconds.
    pub start: u64,
    /// End, nanoseconds (`>= start`).
    pub end: u64,
    /// Index of the calling call in the same vector (always smaller than
    /// this call's index), if it was traced.
    pub parent: Option<usize>,
    /// How the call began.
    pub began: Began,
    /// How the call ended.
    pub ended: Ended,
}

impl NestedCall {
    /// Duration in nanoseconds.
    pub fn duration(&self) -> u64 {
        self.end - self.start
    }
}

/// One step of [`stream_calls`]: a call began (its end not known yet), or
/// ended (now final). Both give the call's index among the thread's calls in
/// the order they began.
#[derive(Debug)]
pub(crate) enum CallEvent<'c> {
    /// A call began; `end` and `ended` are not final.
    Opened(usize, &'c NestedCall),
    /// The call ended: every field is final. Calls end innermost first, so
    /// its callees all ended before.
    Closed(usize, &'c NestedCall),
}

/// The calls of one thread, as its events are read: `sink` is told when each
/// begins and when it ends. `events` are the thread's events in time order;
/// `made_up_entries` are the entries of the calls running when tracing
/// started, found in the same events by a first pass
/// ([`entries_of_calls_running_at_start`]). Memory: one entry per open call.
pub(crate) fn stream_calls(
    events: impl Iterator<Item = GraphEvent>,
    made_up_entries: Vec<GraphEvent>,
    mut sink: impl FnMut(CallEvent<'_>),
) {
    let made_up = made_up_entries.len();
    // The latest timestamp read: calls still open at the end end there.
    let last = Cell::new(0u64);
    let events = events.inspect(|event| last.set(last.get().max(event.time_ns)));
    let pairing = Calls::streaming(events, made_up_entries, Reading::Exports);
    let mut calls = 0usize;
    // Open calls, innermost last: its index, the call, and the latest end of
    // its closed children, so that a parent never ends before a child (only
    // possible if timestamps go backwards).
    let mut open: Vec<(usize, NestedCall, u64)> = Vec::new();
    let close = |open: &mut Vec<(usize, NestedCall, u64)>,
                 time: u64,
                 how: Ended,
                 sink: &mut dyn FnMut(CallEvent<'_>)| {
        if let Some((index, mut call, children_end)) = open.pop() {
            call.end = time.max(call.start).max(children_end);
            call.ended = how;
            if let Some(parent) = open.last_mut() {
                parent.2 = parent.2.max(call.end);
            }
            sink(CallEvent::Closed(index, &call));
        }
    };
    for step in pairing {
        match step {
            CallStep::Entered { entry_index, entry } => {
                let parent = open.last().map(|(index, call, _)| (*index, call.start));
                let start = match parent {
                    Some((_, parent_start)) => entry.time_ns.max(parent_start),
                    None => entry.time_ns,
                };
                let call = NestedCall {
                    function: entry.function,
                    depth: entry.depth,
                    start,
                    end: start,
                    parent: parent.map(|(index, _)| index),
                    began: if entry_index < made_up {
                        Began::BeforeTrace
                    } else {
                        Began::Entered
                    },
                    ended: Ended::StillRunning,
                };
                sink(CallEvent::Opened(calls, &call));
                open.push((calls, call, start));
                calls += 1;
            }
            CallStep::Returned { exit, .. } => {
                close(&mut open, exit.time_ns, Ended::Returned, &mut sink)
            }
            CallStep::Unfinished {
                unwound_by: Some(event),
                ..
            } => close(&mut open, event.time_ns, Ended::Unwound, &mut sink),
            CallStep::Unfinished {
                unwound_by: None, ..
            } => close(&mut open, last.get(), Ended::StillRunning, &mut sink),
            // An exit that pairs with no call: left out.
            CallStep::UnmatchedExit { .. } => {}
        }
    }
}

/// What an export had to make up because the trace lacks it, to be told
/// before the export is written: events lost while recording, and calls
/// whose entry or exit was not recorded (drawn to the thread's last event,
/// to where they were left, or from the thread's first event).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Incomplete {
    /// Events lost while recording (buffers full).
    pub lost_events: u64,
    /// Calls still running when the trace ended: drawn to the thread's last
    /// event.
    pub still_running: u64,
    /// Calls left without an exit (unwound by a panic or `longjmp`, or
    /// their exit lost): drawn to where that became known.
    pub unwound: u64,
    /// Calls running when tracing started (only their exit recorded):
    /// drawn from the thread's first event.
    pub running_at_start: u64,
}

impl Incomplete {
    /// Counts how `call` began and ended.
    pub(crate) fn count(&mut self, call: &NestedCall) {
        match call.ended {
            Ended::Returned => {}
            Ended::Unwound => self.unwound += 1,
            Ended::StillRunning => self.still_running += 1,
        }
        if call.began == Began::BeforeTrace {
            self.running_at_start += 1;
        }
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Incomplete) {
        self.lost_events += other.lost_events;
        self.still_running += other.still_running;
        self.unwound += other.unwound;
        self.running_at_start += other.running_at_start;
    }

    /// One line saying what is missing, or `None` when nothing is:
    /// `12 events lost while recording (buffers full); 3 calls without an
    /// exit: 1 still running at the end (drawn to it), 2 unwound or their
    /// exit lost (drawn to where they were left)`.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.lost_events > 0 {
            parts.push(format!(
                "{} events lost while recording (buffers full)",
                self.lost_events
            ));
        }
        let no_exit = self.still_running + self.unwound;
        if no_exit > 0 {
            let mut kinds = Vec::new();
            if self.still_running > 0 {
                kinds.push(format!(
                    "{} still running when the trace ended (drawn to its end)",
                    self.still_running
                ));
            }
            if self.unwound > 0 {
                let why = if self.lost_events > 0 {
                    "unwound or their exit lost"
                } else {
                    "unwound"
                };
                kinds.push(format!(
                    "{} {why} (drawn to where they were left)",
                    self.unwound
                ));
            }
            parts.push(format!(
                "{no_exit} calls without an exit: {}",
                kinds.join(", ")
            ));
        }
        if self.running_at_start > 0 {
            parts.push(format!(
                "{} calls running when tracing started (drawn from its start)",
                self.running_at_start
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// The calls of one thread, in the order they began (parents before their
/// children).
#[cfg(test)]
pub(crate) fn thread_calls(events: &[GraphEvent]) -> Vec<NestedCall> {
    let mut calls: Vec<NestedCall> = Vec::new();
    stream_calls(
        events.iter().copied(),
        entries_of_calls_running_at_start(events.iter().copied()),
        |event| match event {
            CallEvent::Opened(_, call) => calls.push(call.clone()),
            CallEvent::Closed(index, call) => calls[index] = call.clone(),
        },
    );
    calls
}

#[cfg(test)]
mod tests {
    use super::*;
    use fntrace_format::EventKind;

    #[test]
    fn incomplete_calls_are_told_apart() {
        use crate::analysis::tests::test_event as ev;
        use EventKind::{Entry as In, Exit as Out};
        // f running at start; g unwound by h's entry; h still running.
        let events = [
            ev(10, 1, 0, Out),
            ev(20, 2, 0, In),
            ev(30, 3, 0, In),
            ev(40, 4, 1, In),
            ev(50, 4, 1, Out),
        ];
        let mut incomplete = Incomplete::default();
        for call in thread_calls(&events) {
            incomplete.count(&call);
        }
        assert_eq!(
            incomplete,
            Incomplete {
                lost_events: 0,
                still_running: 1,
                unwound: 1,
                running_at_start: 1,
            }
        );
        assert_eq!(
            incomplete.describe().unwrap(),
            "2 calls without an exit: 1 still running when the trace ended (drawn to its end), \
             1 unwound (drawn to where they were left); 1 calls running when tracing started \
             (drawn from its start)"
        );
        incomplete.add(&Incomplete {
            lost_events: 5,
            ..Incomplete::default()
        });
        assert!(incomplete
            .describe()
            .unwrap()
            .starts_with("5 events lost while recording (buffers full); 2 calls"));
        assert!(incomplete
            .describe()
            .unwrap()
            .contains("unwound or their exit lost"));
        assert_eq!(Incomplete::default().describe(), None);
    }

    use crate::analysis::tests::test_event as ev;
    use EventKind::{Entry as In, Exit as Out};

    fn summary(calls: &[NestedCall]) -> Vec<(usize, u64, u64, Option<usize>, Began, Ended)> {
        calls
            .iter()
            .map(|c| (c.function, c.start, c.end, c.parent, c.began, c.ended))
            .collect()
    }

    #[test]
    fn nested_calls_pair_up() {
        let events = [
            ev(10, 1, 0, In),
            ev(20, 2, 1, In),
            ev(30, 2, 1, Out),
            ev(40, 3, 1, In),
            ev(45, 3, 1, Out),
            ev(50, 1, 0, Out),
        ];
        assert_eq!(
            summary(&thread_calls(&events)),
            vec![
                (1, 10, 50, None, Began::Entered, Ended::Returned),
                (2, 20, 30, Some(0), Began::Entered, Ended::Returned),
                (3, 40, 45, Some(0), Began::Entered, Ended::Returned),
            ]
        );
    }

    #[test]
    fn missing_exits_end_at_the_last_timestamp_or_when_unwound() {
        let events = [
            ev(10, 1, 0, In),
            ev(20, 2, 1, In),
            ev(25, 3, 2, In), // unwound by 2's exit
            ev(30, 2, 1, Out),
            ev(40, 4, 1, In), // never returns
            ev(60, 5, 2, In),
            ev(70, 5, 2, Out),
        ];
        assert_eq!(
            summary(&thread_calls(&events)),
            vec![
                (1, 10, 70, None, Began::Entered, Ended::StillRunning),
                (2, 20, 30, Some(0), Began::Entered, Ended::Returned),
                (3, 25, 30, Some(1), Began::Entered, Ended::Unwound),
                (4, 40, 70, Some(0), Began::Entered, Ended::StillRunning),
                (5, 60, 70, Some(3), Began::Entered, Ended::Returned),
            ]
        );
    }

    #[test]
    fn an_entry_at_an_open_depth_ends_the_unwound_calls() {
        let events = [
            ev(10, 1, 0, In),
            ev(20, 2, 1, In), // longjmp'd over: no exit
            ev(30, 3, 1, In),
            ev(40, 3, 1, Out),
            ev(50, 1, 0, Out),
        ];
        assert_eq!(
            summary(&thread_calls(&events)),
            vec![
                (1, 10, 50, None, Began::Entered, Ended::Returned),
                (2, 20, 30, Some(0), Began::Entered, Ended::Unwound),
                (3, 30, 40, Some(0), Began::Entered, Ended::Returned),
            ]
        );
    }

    #[test]
    fn exits_without_entries_start_at_the_first_timestamp() {
        let events = [
            ev(10, 7, 3, In),
            ev(15, 7, 3, Out),
            ev(20, 2, 2, Out), // running when tracing started
            ev(30, 4, 2, In),
            ev(35, 4, 2, Out),
            ev(40, 1, 1, Out), // its caller, also running
            ev(45, 9, 0, In),
            ev(46, 9, 0, Out),
            ev(47, 6, 0, Out), // after an entry at depth 0: ignored
            ev(48, 9, 5, Out), // deeper than the last: ignored
            ev(50, 8, 1, In),
        ];
        assert_eq!(
            summary(&thread_calls(&events)),
            vec![
                (1, 10, 40, None, Began::BeforeTrace, Ended::Returned),
                (2, 10, 20, Some(0), Began::BeforeTrace, Ended::Returned),
                (7, 10, 15, Some(1), Began::Entered, Ended::Returned),
                (4, 30, 35, Some(0), Began::Entered, Ended::Returned),
                (9, 45, 46, None, Began::Entered, Ended::Returned),
                (8, 50, 50, None, Began::Entered, Ended::StillRunning),
            ]
        );
    }

    #[test]
    fn children_never_outlast_parents_even_if_time_goes_backwards() {
        let events = [
            ev(100, 1, 0, In),
            ev(90, 2, 1, In),
            ev(200, 2, 1, Out),
            ev(150, 1, 0, Out),
        ];
        let calls = thread_calls(&events);
        assert_eq!(calls[0].start, 100);
        assert_eq!(calls[1].start, 100);
        assert_eq!(calls[1].end, 200);
        assert_eq!(calls[0].end, 200);
    }

    #[test]
    fn no_events_no_calls() {
        assert!(thread_calls(&[]).is_empty());
    }
}
