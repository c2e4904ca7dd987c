//! The pairing pass: the one place where a thread's entry and exit events
//! are paired into calls, for the reports of this module and the CLI's
//! (fntrace-tools), and for the [exports](crate::export) (uftrace here,
//! Chrome, Perfetto and flame graphs there). The rules, and how the two
//! readings of them differ, are stated in the
//! [module documentation](super#pairing-entries-with-exits).

use std::collections::VecDeque;

use crate::trace::{EventKind, GraphEvent};

/// Which reading of the pairing rules a pass applies; the two differ only
/// on events that contradict each other, see the
/// [module documentation](super#pairing-entries-with-exits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// The reports' ([`latency`](super::latency()), the CLI's call graph):
    /// the events as recorded, every exit that does not end an open call
    /// unmatched.
    Reports,
    /// The exports' ([`crate::export`]): calls that nest, including those
    /// running when tracing started.
    Exports,
}

impl Reading {
    /// Whether the calls running when tracing started are opened before the
    /// events are read, by made-up entries.
    fn opens_calls_running_at_start(self) -> bool {
        self == Reading::Exports
    }

    /// Whether an exit completes the open call of its depth only if it
    /// names that call's function.
    fn exit_must_name_the_function(self) -> bool {
        self == Reading::Reports
    }

    /// Whether an exit with no open call at its depth still closes the open
    /// calls deeper than it.
    fn unmatched_exit_closes_deeper_calls(self) -> bool {
        self == Reading::Reports
    }
}

/// One outcome of pairing a thread's events; see the
/// [module documentation](super#pairing-entries-with-exits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallStep {
    /// A call was entered; a later `Returned` or `Unfinished` step with the
    /// same `entry` ends it.
    Entered {
        /// Index of the entry among the events the pass reads: the made-up
        /// entries of the calls running when tracing started, if any (see
        /// [`Calls::made_up_entries`]), then the thread's events.
        entry_index: usize,
        /// The entry event.
        entry: GraphEvent,
    },
    /// A call completed with its exit.
    Returned {
        /// Index of the entry, as in `Entered`.
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
        /// The event that showed that the call had been left (an entry at
        /// its depth or a shallower one, or an exit that closed it); `None`
        /// if the events ended first.
        unwound_by: Option<GraphEvent>,
    },
    /// An exit whose entry was not recorded.
    UnmatchedExit {
        /// The exit event.
        exit: GraphEvent,
    },
}

/// Duration between an entry and its exit (0 if the clock went backwards).
pub fn duration_ns(entry: &GraphEvent, exit: &GraphEvent) -> u64 {
    exit.time_ns.saturating_sub(entry.time_ns)
}

/// A call that has been entered and not yet ended.
#[derive(Clone, Copy, Debug)]
struct OpenCall {
    /// Index of the entry, as in [`CallStep::Entered`].
    entry_index: usize,
    /// The entry event.
    entry: GraphEvent,
    /// Summed durations of the direct children that returned so far.
    children_ns: u64,
}

/// The pairing pass over one thread's events: an iterator of [`CallStep`]s
/// in event order. Every `Returned` or `Unfinished` step ends the innermost
/// call still open.
#[derive(Debug)]
pub struct Calls<I> {
    /// The reading applied.
    reading: Reading,
    /// Entries made up for the calls running when tracing started,
    /// outermost first, read before `events`.
    made_up_entries: Vec<GraphEvent>,
    /// The thread's events.
    events: I,
    /// Index of the next event to read, counting `made_up_entries` first.
    next_event: usize,
    /// Whether `events` has ended (and the open calls were closed).
    ended: bool,
    /// Calls entered and not ended, outermost first; depths increase
    /// strictly from bottom to top.
    open: Vec<OpenCall>,
    /// Steps caused by the events read, not yet returned by `next`.
    ready: VecDeque<CallStep>,
}

#[cfg(test)]
impl<'a> Calls<std::iter::Copied<std::slice::Iter<'a, GraphEvent>>> {
    /// Pairs `events`, which must be one thread's events in time order, by
    /// `reading` (finding the calls running when tracing started in them
    /// first, if the reading opens those).
    pub(crate) fn new(events: &'a [GraphEvent], reading: Reading) -> Self {
        let made_up_entries = if reading.opens_calls_running_at_start() {
            entries_of_calls_running_at_start(events.iter().copied())
        } else {
            Vec::new()
        };
        Calls::streaming(events.iter().copied(), made_up_entries, reading)
    }
}

impl<I: Iterator<Item = GraphEvent>> Calls<I> {
    /// Pairs `events`, one thread's events in time order, by `reading`.
    /// `made_up_entries` are those [`entries_of_calls_running_at_start`]
    /// found in the same events, if the reading opens those calls (a first
    /// pass over the events); otherwise empty.
    pub fn streaming(events: I, made_up_entries: Vec<GraphEvent>, reading: Reading) -> Self {
        debug_assert!(made_up_entries.is_empty() || reading.opens_calls_running_at_start());
        Calls {
            reading,
            made_up_entries,
            events,
            next_event: 0,
            ended: false,
            open: Vec::new(),
            ready: VecDeque::new(),
        }
    }

    /// How many made-up entries, of calls running when tracing started, the
    /// pass reads before the thread's events: a call entered with an
    /// `entry_index` below this number is one of them.
    pub fn made_up_entries(&self) -> usize {
        self.made_up_entries.len()
    }

    /// Closes, as unfinished, the open calls from index `first` of the stack
    /// on, innermost first.
    fn close_as_unfinished_from(&mut self, first: usize, unwound_by: Option<GraphEvent>) {
        // Nearly every event closes nothing: skip the queue's extend.
        if first >= self.open.len() {
            return;
        }
        self.ready.extend(
            self.open
                .drain(first..)
                .rev()
                .map(|call| CallStep::Unfinished {
                    entry: call.entry,
                    unwound_by,
                }),
        );
    }

    /// Reads the event at `index` (counting the made-up entries first),
    /// queueing the steps it causes.
    fn read_event(&mut self, index: usize, event: GraphEvent) {
        match event.kind {
            EventKind::Entry => {
                // Nearly always the new call is deeper than every open one.
                let shallower_calls = match self.open.last() {
                    Some(top) if top.entry.depth >= event.depth => self
                        .open
                        .partition_point(|call| call.entry.depth < event.depth),
                    _ => self.open.len(),
                };
                self.close_as_unfinished_from(shallower_calls, Some(event));
                self.open.push(OpenCall {
                    entry_index: index,
                    entry: event,
                    children_ns: 0,
                });
                self.ready.push_back(CallStep::Entered {
                    entry_index: index,
                    entry: event,
                });
            }
            EventKind::Exit => self.read_exit(event),
        }
    }

    /// Reads an exit event, queueing the steps it causes.
    fn read_exit(&mut self, exit: GraphEvent) {
        // Nearly always the exit is the innermost open call's.
        let calls_not_deeper = match self.open.last() {
            Some(top) if top.entry.depth <= exit.depth => self.open.len(),
            _ => self
                .open
                .partition_point(|call| call.entry.depth <= exit.depth),
        };
        let has_call_at_depth =
            calls_not_deeper > 0 && self.open[calls_not_deeper - 1].entry.depth == exit.depth;
        if has_call_at_depth || self.reading.unmatched_exit_closes_deeper_calls() {
            self.close_as_unfinished_from(calls_not_deeper, Some(exit));
        }
        if !has_call_at_depth {
            self.ready.push_back(CallStep::UnmatchedExit { exit });
            return;
        }
        let call = self
            .open
            .pop()
            .expect("the call at the exit's depth is open");
        if self.reading.exit_must_name_the_function() && call.entry.function != exit.function {
            self.ready.push_back(CallStep::Unfinished {
                entry: call.entry,
                unwound_by: Some(exit),
            });
            self.ready.push_back(CallStep::UnmatchedExit { exit });
            return;
        }
        if let Some(parent) = self.open.last_mut() {
            parent.children_ns = parent
                .children_ns
                .saturating_add(duration_ns(&call.entry, &exit));
        }
        self.ready.push_back(CallStep::Returned {
            entry_index: call.entry_index,
            entry: call.entry,
            exit,
            children_ns: call.children_ns,
        });
    }
}

impl<I: Iterator<Item = GraphEvent>> Iterator for Calls<I> {
    type Item = CallStep;

    fn next(&mut self) -> Option<CallStep> {
        loop {
            if let Some(step) = self.ready.pop_front() {
                return Some(step);
            }
            if self.ended {
                return None;
            }
            let index = self.next_event;
            let event = match index.checked_sub(self.made_up_entries.len()) {
                None => Some(self.made_up_entries[index]),
                Some(_) => self.events.next(),
            };
            if let Some(event) = event {
                self.next_event += 1;
                self.read_event(index, event);
            } else {
                self.ended = true;
                self.close_as_unfinished_from(0, None);
            }
        }
    }
}

/// Entries, at the thread's first timestamp and outermost first, for the
/// calls that were running when tracing started: the exits that match no
/// entry, as long as each is shallower than the one before it (an inner call
/// returns before its caller does) and no call was entered at its depth or
/// a shallower one before it (that call would have had to return first).
///
/// An exit shallower than every entry before it matches none of them, so
/// these exits need no pairing to be found; and once an entry at depth 0
/// was read, no exit can be shallower: with none found by then, reading
/// stops there.
pub fn entries_of_calls_running_at_start(
    events: impl Iterator<Item = GraphEvent>,
) -> Vec<GraphEvent> {
    let mut first = u64::MAX;
    let mut entries: Vec<GraphEvent> = Vec::new();
    let mut shallowest_entry = u16::MAX;
    for event in events {
        // No exit can be shallower than an entry at depth 0: with none found
        // by then, there are none (and their time does not matter).
        if shallowest_entry == 0 && entries.is_empty() {
            break;
        }
        first = first.min(event.time_ns);
        match event.kind {
            EventKind::Entry => shallowest_entry = shallowest_entry.min(event.depth),
            EventKind::Exit => {
                if event.depth < shallowest_entry
                    && entries.last().is_none_or(|inner| event.depth < inner.depth)
                {
                    entries.push(GraphEvent {
                        kind: EventKind::Entry,
                        ..event
                    });
                }
            }
        }
    }
    entries.reverse();
    for entry in &mut entries {
        entry.time_ns = first;
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::{entry, exit};

    /// Steps of `reading` as short strings: `>f@i` entered, `<f:dur/children`
    /// returned, `!f` unfinished, `?f` unmatched exit.
    fn steps_read_by(events: &[GraphEvent], reading: Reading) -> Vec<String> {
        Calls::new(events, reading)
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
                CallStep::Unfinished { entry, .. } => format!("!{:x}", entry.function),
                CallStep::UnmatchedExit { exit } => format!("?{:x}", exit.function),
            })
            .collect()
    }

    /// Steps of the reports' reading, as [`steps_read_by`] writes them.
    fn steps(events: &[GraphEvent]) -> Vec<String> {
        steps_read_by(events, Reading::Reports)
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

    #[test]
    fn exports_open_the_calls_running_at_start_first() {
        // Tracing started inside a (depth 0) → b (depth 1); e's exit at
        // depth 0 follows an entry at depth 0, so e was not running.
        let events = [
            entry(3, 0xc, 2),
            exit(5, 0xc, 2),
            exit(6, 0xb, 1),
            exit(9, 0xa, 0),
            entry(10, 0xd, 0),
            exit(11, 0xd, 0),
            exit(12, 0xe, 0),
        ];
        let calls = Calls::new(&events, Reading::Exports);
        assert_eq!(calls.made_up_entries(), 2);
        assert_eq!(
            calls.collect::<Vec<_>>()[..2],
            [
                CallStep::Entered {
                    entry_index: 0,
                    entry: entry(3, 0xa, 0)
                },
                CallStep::Entered {
                    entry_index: 1,
                    entry: entry(3, 0xb, 1)
                },
            ]
        );
        assert_eq!(
            steps_read_by(&events, Reading::Exports),
            [">a@0", ">b@1", ">c@2", "<c:2/0", "<b:3/2", "<a:6/3", ">d@6", "<d:1/0", "?e"]
        );
    }

    #[test]
    fn exports_pair_an_exit_by_its_depth_alone() {
        let events = [entry(0, 0xa, 1), exit(5, 0xb, 1)];
        assert_eq!(steps_read_by(&events, Reading::Exports), [">a@0", "<a:5/0"]);
    }

    #[test]
    fn unmatched_exits_close_deeper_calls_in_reports_only() {
        // No call of depth 1 is open when b's exit comes.
        let events = [
            entry(0, 0xa, 0),
            entry(1, 0xc, 2),
            exit(2, 0xb, 1),
            exit(3, 0xc, 2),
        ];
        assert_eq!(steps(&events), [">a@0", ">c@1", "!c", "?b", "?c", "!a"]);
        assert_eq!(
            steps_read_by(&events, Reading::Exports),
            [">a@0", ">c@1", "?b", "<c:2/0", "!a"]
        );
    }

    #[test]
    fn unfinished_calls_name_the_event_that_unwound_them() {
        let events = [
            entry(0, 0xa, 0),
            entry(1, 0xb, 1),
            entry(2, 0xc, 1),
            exit(3, 0xa, 0),
            entry(4, 0xd, 0),
        ];
        let unwound_by: Vec<_> = Calls::new(&events, Reading::Reports)
            .filter_map(|step| match step {
                CallStep::Unfinished { entry, unwound_by } => Some((entry, unwound_by)),
                _ => None,
            })
            .collect();
        assert_eq!(
            unwound_by,
            [
                (events[1], Some(events[2])),
                (events[2], Some(events[3])),
                (events[4], None)
            ]
        );
    }
}
