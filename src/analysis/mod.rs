//! Reports computed from a recorded [`Trace`](crate::Trace):
//! per-function latency statistics ([`latency()`]) and a text call graph
//! ([`call_graph`]).
//!
//! # Pairing entries with exits
//!
//! Both reports read a thread's events through one pairing pass
//! (`Calls`), which walks the events in time order with a stack of open
//! calls and applies the rules of the data model:
//!
//! - An entry at depth `d` closes (as *unfinished*) every open call of depth
//!   `≥ d`: a new call at the same or a shallower depth means those frames
//!   were left without their exit being recorded (unwound by a panic or
//!   `longjmp`). Then it opens a call.
//! - An exit at depth `d` first closes, as unfinished, every open call deeper
//!   than `d`. If the innermost open call then has depth `d` and the same
//!   function, the exit completes it. Otherwise the exit is *unmatched*: its
//!   entry was never recorded (tracing was switched on in the middle of the
//!   call, or the entry was lost); if an open call of depth `d` but of
//!   another function was left, it is closed as unfinished too.
//! - Calls still open when the events end are unfinished.
//!
//! A completed call knows its duration (exit time minus entry time) and the
//! summed durations of its completed *direct* children (the completed calls
//! that were innermost-open-inside it), from which self time follows.
//! Unfinished children have no duration and are not subtracted: their time
//! stays in the parent's self time.
//!
//! # Costs
//!
//! The pairing pass is linear in the number of events and keeps one stack
//! entry per open call. [`latency()`] keeps one [`Histogram`] per function per
//! thread while it reads that thread, then folds it into the process-wide
//! histogram of the function; [`call_graph`] streams its lines to a writer.

mod callgraph;
mod histogram;
mod latency;

pub use callgraph::{call_graph, write_call_graph};
pub use histogram::{Histogram, MAX_RELATIVE_ERROR, SUB_BUCKETS};
pub use latency::{latency, FunctionStats, LatencyReport};

use std::collections::VecDeque;

use crate::trace::{EventKind, GraphEvent};

/// One outcome of pairing a thread's events; see the
/// [module documentation](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallStep {
    /// A call was entered; a later `Returned` or `Unfinished` step with the
    /// same `entry_index` ends it.
    Entered {
        /// Index of the entry event in the thread's events.
        entry_index: usize,
        /// The entry event.
        entry: GraphEvent,
    },
    /// A call completed with its exit.
    Returned {
        /// Index of the entry event in the thread's events.
        entry_index: usize,
        /// The entry event.
        entry: GraphEvent,
        /// The exit event.
        exit: GraphEvent,
        /// Summed durations of the call's completed direct children.
        children_ns: u64,
    },
    /// A call whose exit was not recorded.
    Unfinished {
        /// The entry event.
        entry: GraphEvent,
    },
    /// An exit whose entry was not recorded.
    UnmatchedExit {
        /// The exit event.
        exit: GraphEvent,
    },
}

/// Duration between an entry and its exit (0 if the clock went backwards).
pub(crate) fn duration_ns(entry: &GraphEvent, exit: &GraphEvent) -> u64 {
    exit.time_ns.saturating_sub(entry.time_ns)
}

/// A call that has been entered and not yet ended.
#[derive(Clone, Copy, Debug)]
struct OpenCall {
    /// Index of the entry event in the thread's events.
    entry_index: usize,
    /// The entry event.
    entry: GraphEvent,
    /// Summed durations of the direct children that returned so far.
    children_ns: u64,
}

/// The pairing pass over one thread's events: an iterator of [`CallStep`]s
/// in event order.
#[derive(Debug)]
pub(crate) struct Calls<'a> {
    /// The thread's events.
    events: &'a [GraphEvent],
    /// Index of the first event not read yet.
    next_event: usize,
    /// Calls entered and not ended, outermost first; depths increase
    /// strictly from bottom to top.
    open: Vec<OpenCall>,
    /// Steps caused by the events read, not yet returned by `next`.
    ready: VecDeque<CallStep>,
}

impl<'a> Calls<'a> {
    /// Pairs `events`, which must be one thread's events in time order.
    pub(crate) fn new(events: &'a [GraphEvent]) -> Self {
        Calls {
            events,
            next_event: 0,
            open: Vec::new(),
            ready: VecDeque::new(),
        }
    }

    /// Closes, as unfinished, every open call deeper than `depth`
    /// (`None`: every open call).
    fn abandon_deeper_than(&mut self, depth: Option<u16>) {
        while let Some(call) = self.open.last() {
            if depth.is_some_and(|depth| call.entry.depth <= depth) {
                break;
            }
            self.ready
                .push_back(CallStep::Unfinished { entry: call.entry });
            self.open.pop();
        }
    }

    /// Reads the next event, queueing the steps it causes.
    fn read_event(&mut self) {
        let entry_index = self.next_event;
        let event = self.events[entry_index];
        self.next_event += 1;
        match event.kind {
            EventKind::Entry => {
                self.abandon_deeper_than(event.depth.checked_sub(1));
                self.open.push(OpenCall {
                    entry_index,
                    entry: event,
                    children_ns: 0,
                });
                self.ready.push_back(CallStep::Entered {
                    entry_index,
                    entry: event,
                });
            }
            EventKind::Exit => {
                self.abandon_deeper_than(Some(event.depth));
                let Some(&call) = self.open.last() else {
                    self.ready
                        .push_back(CallStep::UnmatchedExit { exit: event });
                    return;
                };
                if call.entry.depth != event.depth {
                    self.ready
                        .push_back(CallStep::UnmatchedExit { exit: event });
                    return;
                }
                self.open.pop();
                if call.entry.function != event.function {
                    self.ready
                        .push_back(CallStep::Unfinished { entry: call.entry });
                    self.ready
                        .push_back(CallStep::UnmatchedExit { exit: event });
                    return;
                }
                if let Some(parent) = self.open.last_mut() {
                    parent.children_ns = parent
                        .children_ns
                        .saturating_add(duration_ns(&call.entry, &event));
                }
                self.ready.push_back(CallStep::Returned {
                    entry_index: call.entry_index,
                    entry: call.entry,
                    exit: event,
                    children_ns: call.children_ns,
                });
            }
        }
    }
}

impl Iterator for Calls<'_> {
    type Item = CallStep;

    fn next(&mut self) -> Option<CallStep> {
        loop {
            if let Some(step) = self.ready.pop_front() {
                return Some(step);
            }
            if self.next_event < self.events.len() {
                self.read_event();
            } else {
                self.abandon_deeper_than(None);
                return self.ready.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn entry(time_ns: u64, function: usize, depth: u16) -> GraphEvent {
        GraphEvent {
            time_ns,
            function,
            depth,
            kind: EventKind::Entry,
        }
    }

    pub(crate) fn exit(time_ns: u64, function: usize, depth: u16) -> GraphEvent {
        GraphEvent {
            time_ns,
            function,
            depth,
            kind: EventKind::Exit,
        }
    }

    /// Steps as short strings: `>f@i` entered, `<f:dur/children` returned,
    /// `!f` unfinished, `?f` unmatched exit.
    fn steps(events: &[GraphEvent]) -> Vec<String> {
        Calls::new(events)
            .map(|step| match step {
                CallStep::Entered { entry_index, entry } => {
                    format!(">{:x}@{entry_index}", entry.function)
                }
                CallStep::Returned {
                    entry,
                    exit,
                    children_ns,
                    ..
                } => format!(
                    "<{:x}:{}/{children_ns}",
                    entry.function,
                    duration_ns(&entry, &exit)
                ),
                CallStep::Unfinished { entry } => format!("!{:x}", entry.function),
                CallStep::UnmatchedExit { exit } => format!("?{:x}", exit.function),
            })
            .collect()
    }

    #[test]
    fn nested_calls_pair_and_sum_direct_children() {
        let events = [
            entry(0, 0xa, 0),
            entry(10, 0xb, 1),
            entry(12, 0xc, 2),
            exit(15, 0xc, 2),
            exit(20, 0xb, 1),
            entry(30, 0xb, 1),
            exit(35, 0xb, 1),
            exit(100, 0xa, 0),
        ];
        assert_eq!(
            steps(&events),
            [
                ">a@0",
                ">b@1",
                ">c@2",
                "<c:3/0",
                "<b:10/3",
                ">b@5",
                "<b:5/0",
                "<a:100/15"
            ]
        );
    }

    #[test]
    fn unwound_and_trailing_calls_are_unfinished() {
        let events = [
            entry(0, 0xa, 0),
            entry(1, 0xb, 1),
            entry(2, 0xc, 2),
            // b and c were unwound: the next event is at depth 1.
            entry(5, 0xd, 1),
            exit(6, 0xd, 1),
            // An exit at depth 0 closes nothing deeper here.
            exit(9, 0xa, 0),
            entry(10, 0xe, 0),
            entry(11, 0xf, 1),
        ];
        assert_eq!(
            steps(&events),
            [
                ">a@0", ">b@1", ">c@2", "!c", "!b", ">d@3", "<d:1/0", "<a:9/1", ">e@6", ">f@7",
                "!f", "!e"
            ]
        );
    }

    #[test]
    fn exit_at_shallower_depth_abandons_deeper_calls() {
        let events = [entry(0, 0xa, 0), entry(1, 0xb, 1), exit(4, 0xa, 0)];
        assert_eq!(steps(&events), [">a@0", ">b@1", "!b", "<a:4/0"]);
    }

    #[test]
    fn exits_without_entries_are_unmatched() {
        // Tracing started inside a (depth 0) → b (depth 1).
        let events = [
            entry(0, 0xc, 2),
            exit(5, 0xc, 2),
            exit(6, 0xb, 1),
            entry(7, 0xd, 1),
            exit(8, 0xd, 1),
            exit(9, 0xa, 0),
        ];
        assert_eq!(
            steps(&events),
            [">c@0", "<c:5/0", "?b", ">d@3", "<d:1/0", "?a"]
        );
    }

    #[test]
    fn exit_of_another_function_at_the_same_depth() {
        let events = [entry(0, 0xa, 1), exit(5, 0xb, 1)];
        assert_eq!(steps(&events), [">a@0", "!a", "?b"]);
    }
}
