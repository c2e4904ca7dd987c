//! Futures out of the polls `fntrace record --async` records: each poll of
//! an async function's state machine carries the future's address and
//! rustc's coroutine state at the entry and the exit (a hand-written
//! `Future::poll`'s, the address and the `Poll` it returned), and
//! [`futures_of`] links the polls of every thread into futures, from the
//! first poll to the poll after which the state is Returned, or its drop
//! before that (docs/async.md). `fntrace
//! report`'s async rows and the Chrome and Perfetto exports' async slices
//! are both made from its list.

use std::collections::HashMap;

use fntrace_format::argspec::{self, FunctionSpec};
use fntrace_format::coroutine::{self, PollEnd};
use fntrace_format::{glob, EventKind, EventSource, GraphEvent};

/// How a future's polls ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FutureEnd {
    /// Its last poll returned `Ready`.
    Ready,
    /// Its last poll panicked.
    Panicked,
    /// Dropped before `Ready`: its drop function ran while it was
    /// pending (recorded where it is a function of its own), or a new
    /// future was first polled at its address.
    Dropped,
    /// Still pending when the recording ended.
    Pending,
    /// Ready or panicked, but first polled before the recording began (its
    /// first poll recorded did not begin Unresumed): its latency is not
    /// known.
    StartedBefore,
}

/// One future: the polls of one async function on one address, from a
/// first poll to its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Future {
    /// The async function (its resume function's address, as events carry
    /// it).
    pub function: usize,
    /// The future's address.
    pub address: u64,
    /// Entry of its first poll recorded (ns).
    pub start_ns: u64,
    /// Exit of its last poll recorded (ns): for a `Ready` future, the exit
    /// of the poll that returned `Ready`.
    pub end_ns: u64,
    /// Its polls recorded.
    pub polls: u64,
    /// Time spent in its polls (ns).
    pub busy_ns: u64,
    /// The threads its polls ran on, in the order they first did.
    pub tids: Vec<u32>,
    /// How it ended.
    pub end: FutureEnd,
}

/// The futures of a trace ([`futures_of`]).
#[derive(Clone, Debug, Default)]
pub struct Futures {
    /// Every future, in the order of its first poll.
    pub futures: Vec<Future>,
    /// Polls recorded without their values (a full buffer): not linked.
    pub without_values: u64,
    /// Time of the trace's last event (ns): where a pending future's
    /// slice ends.
    pub last_ns: u64,
}

/// One poll: a call of a resume function with its recorded values.
#[derive(Clone, Copy, Debug)]
struct Poll {
    function: usize,
    future: u64,
    entry_ns: u64,
    exit_ns: u64,
    tid: u32,
    /// The state at its entry; none for a hand-written poll (a poll of an
    /// address with no pending future of its function begins one).
    state_in: Option<u64>,
    /// The state it left its future in (`Linking::state_out`).
    state_out: u64,
}

/// A future's drop function's entry: the future's key (resume function,
/// address) and when.
type DropAt = ((usize, u64), u64);

/// What an event's function is to the linker.
#[derive(Clone)]
enum Role {
    /// An async function whose polls are linked, as they are.
    Poll(coroutine::Linking),
    /// The drop function of the futures of the resume function named.
    Drop(String),
    /// Neither.
    Other,
}

/// A poll entered and not yet returned: its depth, entry time, function,
/// and the future's address and state at the entry (if recorded; a
/// hand-written poll records no state).
type OpenPoll = (u16, u64, usize, Option<(u64, Option<u64>)>);

/// How the polls of the function `name` are linked, if `specs` hold
/// `--async`'s values for it (a state or a `Poll` read at the exit).
fn linking(specs: &[FunctionSpec], name: &str) -> Option<coroutine::Linking> {
    coroutine::linking(&argspec::values_for(specs, |pattern| {
        glob::matches(pattern, name)
    }))
}

/// A value as replay shows it (`0x7f12`, `0`, `3`).
fn number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// The values of a replay text (`("key", 3)`, ` = 5`), split where replay
/// separates them (outside quotes).
pub fn split_values(text: &str) -> Vec<String> {
    let inner = match text.strip_prefix(" = ") {
        Some(retval) => return vec![retval.to_string()],
        None => text.strip_prefix('(').and_then(|t| t.strip_suffix(')')),
    };
    let Some(inner) = inner else {
        return Vec::new();
    };
    let (mut values, mut current) = (Vec::new(), String::new());
    let (mut quote, mut escaped) = (None, false);
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                _ if c == q => quote = None,
                _ => {}
            }
        } else if c == '"' || c == '\'' {
            quote = Some(c);
        } else if c == ',' && chars.peek() == Some(&' ') {
            chars.next();
            values.push(std::mem::take(&mut current));
            continue;
        }
        current.push(c);
    }
    values.push(current);
    values
}

/// The futures of `source`'s async functions, as `specs` (the recording's
/// argument specs) select them; `None` if it recorded none (no `--async`).
/// Polls of one future on different threads are one future.
pub fn futures_of<S: EventSource>(
    source: &S,
    specs: &[FunctionSpec],
) -> Result<Option<Futures>, S::Error> {
    if !specs.iter().any(|s| coroutine::links_polls(&s.values)) {
        return Ok(None);
    }
    let mut selected: HashMap<usize, Role> = HashMap::new();
    // Drops by resume function name: the resume function's address is
    // known from its polls.
    let mut drops: Vec<(String, u64, u64)> = Vec::new();
    let mut polls = Vec::new();
    let mut without = 0;
    let mut last_ns = 0;
    for (index, thread) in source.threads().into_iter().enumerate() {
        let values = source.values_of(index)?;
        let mut open: Vec<OpenPoll> = Vec::new();
        let mut read = |events: &mut dyn Iterator<Item = GraphEvent>| {
            for event in events {
                last_ns = last_ns.max(event.time_ns);
                let role = selected.entry(event.function).or_insert_with(|| {
                    let name = source.name_of(event.function);
                    match (linking(specs, &name), coroutine::dropped_by(&name)) {
                        (Some(linking), _) => Role::Poll(linking),
                        (None, Some(resume)) => Role::Drop(resume.to_string()),
                        (None, None) => Role::Other,
                    }
                });
                let linking = match role {
                    Role::Poll(linking) => *linking,
                    Role::Drop(resume) if event.kind != EventKind::Exit => {
                        let dropped = values
                            .get(&(event.time_ns, false))
                            .and_then(|text| number(split_values(text).first()?));
                        if let Some(address) = dropped {
                            drops.push((resume.clone(), address, event.time_ns));
                        }
                        continue;
                    }
                    Role::Drop(_) | Role::Other => continue,
                };
                if event.kind != EventKind::Exit {
                    open.retain(|&(depth, ..)| depth < event.depth);
                    let entered = values.get(&(event.time_ns, false)).and_then(|text| {
                        let v = split_values(text);
                        let address = number(v.first()?)?;
                        match linking {
                            coroutine::Linking::States => Some((address, Some(number(v.get(1)?)?))),
                            coroutine::Linking::Returns { .. } => Some((address, None)),
                        }
                    });
                    open.push((event.depth, event.time_ns, event.function, entered));
                    continue;
                }
                open.retain(|&(depth, ..)| depth <= event.depth);
                if open.last().map(|&(d, _, f, _)| (d, f)) != Some((event.depth, event.function)) {
                    continue;
                }
                let Some((_, entry_ns, function, entered)) = open.pop() else {
                    continue;
                };
                let state_out = values
                    .get(&(event.time_ns, true))
                    .and_then(|text| number(split_values(text).first()?))
                    .map(|value| linking.state_out(value));
                let (Some((future, state_in)), Some(state_out)) = (entered, state_out) else {
                    without += 1;
                    continue;
                };
                polls.push(Poll {
                    function,
                    future,
                    entry_ns,
                    exit_ns: event.time_ns,
                    tid: thread.tid,
                    state_in,
                    state_out,
                });
            }
        };
        source.read_thread(index, |events| read(events))?;
    }
    // rustc may emit a resume function in several codegen units (one
    // name, several addresses): its futures are one function's, named by
    // the first address seen, whichever copy polls or drops them.
    // Keyed by the futures' type as their drop function names it (a
    // hand-written poll's `T`, a resume function's own name).
    let mut resumes: HashMap<String, usize> = HashMap::new();
    let mut canonical: HashMap<usize, usize> = HashMap::new();
    for poll in &mut polls {
        let function = *canonical.entry(poll.function).or_insert_with(|| {
            let name = source.name_of(poll.function);
            *resumes
                .entry(coroutine::future_type(&name).to_string())
                .or_insert(poll.function)
        });
        poll.function = function;
    }
    let drops = (drops.into_iter())
        .filter_map(|(resume, address, at)| Some(((*resumes.get(&resume)?, address), at)))
        .collect();
    let mut futures = link(polls, drops);
    futures.without_values = without;
    futures.last_ns = last_ns;
    Ok(Some(futures))
}

/// Links `polls` (of every thread) into futures, in time order; a drop
/// (`drops`) ends its future if it is pending.
fn link(mut polls: Vec<Poll>, mut drops: Vec<DropAt>) -> Futures {
    polls.sort_by_key(|p| (p.entry_ns, p.exit_ns));
    drops.sort_by_key(|&(key, at)| (at, key));
    let mut drops = drops.into_iter().peekable();
    // A future while it lives, and whether its first poll did not begin
    // Unresumed.
    let mut live: HashMap<(usize, u64), (Future, bool)> = HashMap::new();
    let mut done = Vec::new();
    for poll in &polls {
        // The drops before this poll: a future is never dropped in a poll.
        while let Some((key, _)) = drops.next_if(|&(_, at)| at < poll.entry_ns) {
            if let Some((mut dropped, _)) = live.remove(&key) {
                dropped.end = FutureEnd::Dropped;
                done.push(dropped);
            }
        }
        let key = (poll.function, poll.future);
        // A hand-written poll's future begins at the first poll of its
        // address seen (no state says more).
        let first = poll.state_in.is_none_or(coroutine::first_poll);
        if poll.state_in.is_some_and(coroutine::first_poll) {
            // A new future at an address where one was left pending: that
            // one was dropped before it was Ready.
            if let Some((mut dropped, _)) = live.remove(&key) {
                dropped.end = FutureEnd::Dropped;
                done.push(dropped);
            }
        }
        let (future, _) = live.entry(key).or_insert_with(|| {
            let future = Future {
                function: poll.function,
                address: poll.future,
                start_ns: poll.entry_ns,
                end_ns: poll.exit_ns,
                polls: 0,
                busy_ns: 0,
                tids: Vec::new(),
                end: FutureEnd::Pending,
            };
            (future, !first)
        });
        future.end_ns = poll.exit_ns;
        future.busy_ns += poll.exit_ns.saturating_sub(poll.entry_ns);
        future.polls += 1;
        if !future.tids.contains(&poll.tid) {
            future.tids.push(poll.tid);
        }
        let end = coroutine::poll_end(poll.state_out);
        if end != PollEnd::Pending {
            if let Some((mut future, before)) = live.remove(&key) {
                future.end = match end {
                    _ if before => FutureEnd::StartedBefore,
                    PollEnd::Panicked => FutureEnd::Panicked,
                    _ => FutureEnd::Ready,
                };
                done.push(future);
            }
        }
    }
    for (key, _) in drops {
        if let Some((mut dropped, _)) = live.remove(&key) {
            dropped.end = FutureEnd::Dropped;
            done.push(dropped);
        }
    }
    done.extend(live.into_values().map(|(future, _)| future));
    done.sort_by_key(|f| (f.start_ns, f.function, f.address));
    Futures {
        futures: done,
        ..Futures::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fntrace_format::coroutine::{PANICKED, RETURNED, UNRESUMED};

    fn poll(future: u64, at: u64, tid: u32, state_in: u64, state_out: u64) -> Poll {
        Poll {
            function: 0x10,
            future,
            entry_ns: at,
            exit_ns: at + 5,
            tid,
            state_in: Some(state_in),
            state_out,
        }
    }

    /// A hand-written poll's future: from the first poll of its address
    /// seen to the poll that returned `Ready`, then a new one at the same
    /// address; a future first polled before the recording cannot be told
    /// apart (it begins at its first poll seen).
    #[test]
    fn hand_written_polls_link_by_address_alone() {
        use fntrace_format::coroutine::SUSPENDED;
        let hand = |future, at, tid, state_out| Poll {
            state_in: None,
            ..poll(future, at, tid, 0, state_out)
        };
        let polls = vec![
            hand(0xa, 100, 1, SUSPENDED),
            hand(0xa, 200, 2, SUSPENDED),
            hand(0xa, 300, 1, RETURNED),
            hand(0xa, 400, 2, RETURNED),
            hand(0xb, 110, 1, SUSPENDED),
        ];
        let summary: Vec<_> = (link(polls, Vec::new()).futures.iter())
            .map(|f| {
                (
                    f.address,
                    f.start_ns,
                    f.end_ns,
                    f.polls,
                    f.tids.clone(),
                    f.end,
                )
            })
            .collect();
        use FutureEnd::*;
        assert_eq!(
            summary,
            [
                (0xa, 100, 305, 3, vec![1, 2], Ready),
                (0xb, 110, 115, 1, vec![1], Pending),
                (0xa, 400, 405, 1, vec![2], Ready),
            ]
        );
    }

    /// Each way a future ends, or does not, in one function's polls.
    #[test]
    fn polls_link_into_futures_by_address_and_state() {
        let polls = vec![
            // A: three polls on two threads, Ready at the third.
            poll(0xa, 100, 1, UNRESUMED, 3),
            poll(0xa, 200, 2, 3, 4),
            poll(0xa, 300, 1, 4, RETURNED),
            // B: left pending, and a new future at its address later.
            poll(0xb, 110, 1, UNRESUMED, 3),
            poll(0xb, 400, 1, UNRESUMED, RETURNED),
            // C: first polled before the recording; D: panicked; E: still
            // pending at the end.
            poll(0xc, 120, 1, 3, RETURNED),
            poll(0xd, 130, 1, UNRESUMED, PANICKED),
            poll(0xe, 140, 1, UNRESUMED, 3),
        ];
        // F: dropped while pending, after its first poll; G: dropped
        // after Ready (nothing to end).
        let polls = [
            polls,
            vec![
                poll(0xf, 150, 2, UNRESUMED, 3),
                poll(0x9, 160, 2, UNRESUMED, RETURNED),
            ],
        ]
        .concat();
        let drops = vec![((0x10, 0xf), 170), ((0x10, 0x9), 180)];
        let summary: Vec<_> = link(polls, drops)
            .futures
            .iter()
            .map(|f| {
                (
                    f.address,
                    f.start_ns,
                    f.end_ns,
                    f.polls,
                    f.busy_ns,
                    f.tids.clone(),
                    f.end,
                )
            })
            .collect();
        use FutureEnd::*;
        assert_eq!(
            summary,
            [
                (0xa, 100, 305, 3, 15, vec![1, 2], Ready),
                (0xb, 110, 115, 1, 5, vec![1], Dropped),
                (0xc, 120, 125, 1, 5, vec![1], StartedBefore),
                (0xd, 130, 135, 1, 5, vec![1], Panicked),
                (0xe, 140, 145, 1, 5, vec![1], Pending),
                (0xf, 150, 155, 1, 5, vec![2], Dropped),
                (0x9, 160, 165, 1, 5, vec![2], Ready),
                (0xb, 400, 405, 1, 5, vec![1], Ready),
            ]
        );
    }

    #[test]
    fn values_split_outside_quotes() {
        assert_eq!(split_values("(0x7f, 3)"), ["0x7f", "3"]);
        assert_eq!(split_values(" = 1"), ["1"]);
        assert_eq!(split_values("(\"a, b\", 2)"), ["\"a, b\"", "2"]);
    }
}
