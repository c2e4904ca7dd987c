//! `fntrace report`'s async rows: the polls of each async state machine
//! (recorded with `fntrace record --async`, see `async_fns`) linked into
//! futures by the future's address, from its first poll to the poll after
//! which its state is Returned, on whichever threads they ran
//! (docs/async.md).

use std::collections::HashMap;
use std::io::{self, Write};

use fntrace_tools::analysis::human_duration;
use fntrace_tools::argspec::{self, ArgSlot, FunctionSpec};
use fntrace_tools::{glob, EventKind, EventSource};

use super::by_arg::split_values;

/// rustc's coroutine states (its `Unresumed`, `Returned`, `Panicked`;
/// suspend points are 3 and up).
const UNRESUMED: u64 = 0;
const RETURNED: u64 = 1;
const PANICKED: u64 = 2;

/// One poll: a call of a resume function with its recorded values.
struct Poll {
    function: usize,
    future: u64,
    entry_ns: u64,
    exit_ns: u64,
    state_in: u64,
    state_out: u64,
}

/// A poll entered and not yet returned: its depth, entry time, function,
/// and the future's address and state at the entry (if recorded).
type OpenPoll = (u16, u64, usize, Option<(u64, u64)>);

/// One async function's futures.
#[derive(Default)]
struct Row {
    latencies: Vec<u64>,
    busy_ns: u64,
    polls: u64,
    pending: u64,
    dropped: u64,
    panicked: u64,
    before: u64,
}

/// The async rows of a trace.
pub struct Futures {
    rows: Vec<(String, Row)>,
    /// Polls recorded without their values (a full buffer).
    without: u64,
}

/// Whether the values `specs` give `name` are `--async`'s (a state read at
/// the exit).
fn is_async(specs: &[FunctionSpec], name: &str) -> bool {
    argspec::values_for(specs, |pattern| glob::matches(pattern, name))
        .iter()
        .any(|v| matches!(v.slot, ArgSlot::Deref { at_exit: true, .. }))
}

/// A value as replay shows it (`0x7f12`, `0`, `3`).
fn number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

impl Futures {
    /// The futures of `source`'s async functions, `None` if it recorded
    /// none (no `--async`).
    pub fn of<S: EventSource>(source: &S, specs: &[FunctionSpec]) -> Result<Option<Futures>, String>
    where
        S::Error: std::fmt::Display,
    {
        if !specs
            .iter()
            .flat_map(|s| &s.values)
            .any(|v| matches!(v.slot, ArgSlot::Deref { at_exit: true, .. }))
        {
            return Ok(None);
        }
        let mut selected: HashMap<usize, bool> = HashMap::new();
        let mut polls = Vec::new();
        let mut without = 0;
        for index in 0..source.threads().len() {
            let values = source.values_of(index).map_err(|e| e.to_string())?;
            let mut open: Vec<OpenPoll> = Vec::new();
            let mut read = |events: &mut dyn Iterator<Item = fntrace_tools::GraphEvent>| {
                for event in events {
                    let wanted = *selected
                        .entry(event.function)
                        .or_insert_with(|| is_async(specs, &source.name_of(event.function)));
                    if !wanted {
                        continue;
                    }
                    if event.kind != EventKind::Exit {
                        open.retain(|&(depth, ..)| depth < event.depth);
                        let entered = values.get(&(event.time_ns, false)).and_then(|text| {
                            let v = split_values(text);
                            Some((number(v.first()?)?, number(v.get(1)?)?))
                        });
                        open.push((event.depth, event.time_ns, event.function, entered));
                        continue;
                    }
                    open.retain(|&(depth, ..)| depth <= event.depth);
                    if open.last().map(|&(d, _, f, _)| (d, f))
                        != Some((event.depth, event.function))
                    {
                        continue;
                    }
                    let Some((_, entry_ns, function, entered)) = open.pop() else {
                        continue;
                    };
                    let state_out = values
                        .get(&(event.time_ns, true))
                        .and_then(|text| number(split_values(text).first()?));
                    let (Some((future, state_in)), Some(state_out)) = (entered, state_out) else {
                        without += 1;
                        continue;
                    };
                    polls.push(Poll {
                        function,
                        future,
                        entry_ns,
                        exit_ns: event.time_ns,
                        state_in,
                        state_out,
                    });
                }
            };
            source
                .read_thread(index, |events| read(events))
                .map_err(|e| e.to_string())?;
        }
        Ok(Some(Futures::link(source, polls, without)))
    }

    /// Links `polls` (of every thread) into futures, in time order.
    fn link<S: EventSource>(source: &S, mut polls: Vec<Poll>, without: u64) -> Futures {
        polls.sort_by_key(|p| (p.entry_ns, p.exit_ns));
        // A future while it lives: its first poll's entry, busy, polls.
        let mut live: HashMap<(usize, u64), (u64, u64, u64, bool)> = HashMap::new();
        let mut rows: HashMap<usize, Row> = HashMap::new();
        for poll in &polls {
            let row = rows.entry(poll.function).or_default();
            let key = (poll.function, poll.future);
            if poll.state_in == UNRESUMED {
                // A new future at an address where one was left pending:
                // that one was dropped before it was Ready.
                if live.remove(&key).is_some() {
                    row.dropped += 1;
                }
            }
            let started_before = poll.state_in != UNRESUMED;
            let future = live
                .entry(key)
                .or_insert((poll.entry_ns, 0, 0, started_before));
            future.1 += poll.exit_ns.saturating_sub(poll.entry_ns);
            future.2 += 1;
            match poll.state_out {
                RETURNED | PANICKED => {
                    let (first, busy, count, before) = live.remove(&key).unwrap_or_default();
                    if before {
                        row.before += 1;
                    } else if poll.state_out == PANICKED {
                        row.panicked += 1;
                    } else {
                        row.latencies.push(poll.exit_ns.saturating_sub(first));
                        row.busy_ns += busy;
                        row.polls += count;
                    }
                }
                _ => {}
            }
        }
        for (function, _) in live.keys() {
            rows.entry(*function).or_default().pending += 1;
        }
        let mut rows: Vec<(String, Row)> = rows
            .into_iter()
            .map(|(function, row)| (source.name_of(function), row))
            .collect();
        rows.sort_by(|a, b| {
            let total = |r: &Row| r.latencies.iter().sum::<u64>();
            total(&b.1).cmp(&total(&a.1)).then_with(|| a.0.cmp(&b.0))
        });
        Futures { rows, without }
    }

    /// Writes the rows after the report's table.
    pub fn write(mut self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "\n# async: futures from their first poll to Ready (fntrace record --async)"
        )?;
        writeln!(
            out,
            "{:>9} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}  async function",
            "futures", "polls", "total", "p50", "p99", "busy", "waiting"
        )?;
        let mut notes = Vec::new();
        for (name, row) in &mut self.rows {
            row.latencies.sort_unstable();
            let total: u64 = row.latencies.iter().sum();
            let rank = |q: f64| -> u64 {
                let n = row.latencies.len();
                if n == 0 {
                    return 0;
                }
                let at = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
                row.latencies[at]
            };
            writeln!(
                out,
                "{:>9} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}  {name}",
                row.latencies.len(),
                row.polls,
                human_duration(total),
                human_duration(rank(0.5)),
                human_duration(rank(0.99)),
                human_duration(row.busy_ns),
                human_duration(total.saturating_sub(row.busy_ns)),
            )?;
            for (count, what) in [
                (row.pending, "still pending at the end"),
                (row.dropped, "dropped before Ready"),
                (row.panicked, "panicked"),
                (row.before, "first polled before the recording"),
            ] {
                if count != 0 {
                    notes.push(format!("{name}: {count} {what}"));
                }
            }
        }
        for note in notes {
            writeln!(out, "# {note} (not in the row)")?;
        }
        if self.without != 0 {
            writeln!(
                out,
                "# {} polls recorded without their values (not linked)",
                self.without
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fntrace_tools::Trace;

    fn poll(future: u64, at: u64, state_in: u64, state_out: u64) -> Poll {
        Poll {
            function: 0x10,
            future,
            entry_ns: at,
            exit_ns: at + 5,
            state_in,
            state_out,
        }
    }

    /// Each way a future ends, or does not, in one function's polls.
    #[test]
    fn polls_link_into_futures_by_address_and_state() {
        let mut trace = Trace::default();
        trace.names.insert(0x10, "f::{closure#0}".into());
        let polls = vec![
            // A: three polls, Ready at the third.
            poll(0xa, 100, UNRESUMED, 3),
            poll(0xa, 200, 3, 4),
            poll(0xa, 300, 4, RETURNED),
            // B: left pending, and a new future at its address later.
            poll(0xb, 110, UNRESUMED, 3),
            poll(0xb, 400, UNRESUMED, RETURNED),
            // C: first polled before the recording; D: panicked; E: still
            // pending at the end.
            poll(0xc, 120, 3, RETURNED),
            poll(0xd, 130, UNRESUMED, PANICKED),
            poll(0xe, 140, UNRESUMED, 3),
        ];
        let futures = Futures::link(&trace, polls, 2);
        let [(name, row)] = &futures.rows[..] else {
            panic!("one row");
        };
        assert_eq!(name, "f::{closure#0}");
        // A (205 ns, 3 polls, 15 busy) and B's second (5 ns, 1 poll).
        assert_eq!(row.latencies, vec![205, 5]);
        assert_eq!((row.polls, row.busy_ns), (4, 20));
        assert_eq!(
            (row.dropped, row.before, row.panicked, row.pending),
            (1, 1, 1, 1)
        );
        let mut out = Vec::new();
        futures.write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("        2       4 "), "{text}");
        for note in [
            "f::{closure#0}: 1 still pending at the end",
            "f::{closure#0}: 1 dropped before Ready",
            "f::{closure#0}: 1 panicked",
            "f::{closure#0}: 1 first polled before the recording",
            "# 2 polls recorded without their values",
        ] {
            assert!(text.contains(note), "{note} in:\n{text}");
        }
    }
}
