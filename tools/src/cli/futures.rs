//! `fntrace report`'s async rows: the polls of each async state machine
//! (recorded with `fntrace record --async`, see `async_fns`), linked into
//! futures by the future's address, from its first poll to the poll after
//! which its state is Returned, on whichever threads they ran
//! (docs/async.md), by `fntrace_tools::analysis::futures_of`; and the
//! same columns for the runtime future linker's rows that `ctl profile`
//! shows live.

use std::collections::HashMap;
use std::io::{self, Write};

use fntrace_tools::analysis::{self, human_duration, FutureEnd, FutureRow};
use fntrace_tools::argspec::FunctionSpec;
use fntrace_tools::EventSource;

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

impl Futures {
    /// The futures of `source`'s async functions, `None` if it recorded
    /// none (no `--async`).
    pub fn of<S: EventSource>(source: &S, specs: &[FunctionSpec]) -> Result<Option<Futures>, String>
    where
        S::Error: std::fmt::Display,
    {
        let linked = analysis::futures_of(source, specs).map_err(|e| e.to_string())?;
        Ok(linked.map(|linked| Futures::rows_of(source, &linked)))
    }

    /// One row per async function of `linked`, the most total latency
    /// first.
    fn rows_of<S: EventSource>(source: &S, linked: &analysis::Futures) -> Futures {
        let mut rows: HashMap<usize, Row> = HashMap::new();
        for future in &linked.futures {
            let row = rows.entry(future.function).or_default();
            match future.end {
                FutureEnd::Ready => {
                    row.latencies.push(future.end_ns - future.start_ns);
                    row.busy_ns += future.busy_ns;
                    row.polls += future.polls;
                }
                FutureEnd::Pending => row.pending += 1,
                FutureEnd::Dropped => row.dropped += 1,
                FutureEnd::Panicked => row.panicked += 1,
                FutureEnd::StartedBefore => row.before += 1,
            }
        }
        let mut rows: Vec<(String, Row)> = rows
            .into_iter()
            .map(|(function, row)| (source.name_of(function), row))
            .collect();
        rows.sort_by(|a, b| {
            let total = |r: &Row| r.latencies.iter().sum::<u64>();
            total(&b.1).cmp(&total(&a.1)).then_with(|| a.0.cmp(&b.0))
        });
        Futures {
            rows,
            without: linked.without_values,
        }
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

/// The runtime future linker's rows in a `profile` reply (`future`
/// lines: a process recording async functions' polls), those whose name
/// `keep` keeps.
pub fn live_rows(reply: &str, keep: impl Fn(&str) -> bool) -> Vec<FutureRow> {
    let mut rows: Vec<FutureRow> = (reply.lines())
        .take_while(|line| !line.starts_with("fntrace-profile "))
        .filter_map(FutureRow::from_line)
        .filter(|row| keep(&row.function))
        .collect();
    rows.sort_by(|a, b| {
        (b.latency_ns.cmp(&a.latency_ns)).then_with(|| a.function.cmp(&b.function))
    });
    rows
}

/// Writes `rows` (the futures completed so far, from the runtime linker)
/// in the report's async columns, after `ctl profile`'s table.
pub fn write_live(rows: &[FutureRow], out: &mut dyn Write) -> io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\n# async: futures completed so far, first poll to Ready (the runtime future linker; \
         p50/p99 within 6.25 %)"
    )?;
    writeln!(
        out,
        "{:>9} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}  async function",
        "futures", "polls", "total", "p50", "p99", "busy", "waiting"
    )?;
    for row in rows.iter().filter(|row| row.completed != 0) {
        writeln!(
            out,
            "{:>9} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}  {}",
            row.completed,
            row.polls,
            human_duration(row.latency_ns),
            human_duration(row.quantile(0.5)),
            human_duration(row.quantile(0.99)),
            human_duration(row.busy_ns),
            human_duration(row.latency_ns.saturating_sub(row.busy_ns)),
            row.function
        )?;
    }
    for row in rows.iter().filter(|row| row.dropped != 0) {
        let (name, dropped) = (&row.function, row.dropped);
        writeln!(
            out,
            "# {name}: {dropped} dropped before Ready (not in the row)"
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fntrace_tools::analysis::Future;
    use fntrace_tools::Trace;

    fn future(start_ns: u64, end_ns: u64, polls: u64, end: FutureEnd) -> Future {
        Future {
            function: 0x10,
            address: 0xa,
            start_ns,
            end_ns,
            polls,
            busy_ns: polls * 5,
            tids: vec![1],
            end,
        }
    }

    /// A row counts the Ready futures; the others are notes.
    #[test]
    fn rows_count_ready_futures_and_note_the_others() {
        let mut trace = Trace::default();
        trace.names.insert(0x10, "f::{closure#0}".into());
        let linked = analysis::Futures {
            futures: vec![
                future(100, 305, 3, FutureEnd::Ready),
                future(110, 115, 1, FutureEnd::Dropped),
                future(120, 125, 1, FutureEnd::StartedBefore),
                future(130, 135, 1, FutureEnd::Panicked),
                future(140, 145, 1, FutureEnd::Pending),
                future(400, 405, 1, FutureEnd::Ready),
            ],
            without_values: 2,
            last_ns: 405,
        };
        let futures = Futures::rows_of(&trace, &linked);
        let [(name, row)] = &futures.rows[..] else {
            panic!("one row");
        };
        assert_eq!(name, "f::{closure#0}");
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
