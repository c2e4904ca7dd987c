//! A text call graph in the style of Linux ftrace's `function_graph` tracer;
//! see [`call_graph`] for the format.

use std::io::{self, BufWriter, Write};

use rustc_hash::FxHashMap as HashMap;

use fntrace_format::analysis::pairing::{duration_ns, CallStep, Calls, Reading};
use fntrace_format::{EventSource, GraphEvent, ThreadInfo, Trace, Values};

use super::futures::{Future, FutureEnd, Futures};

/// Width of the thread id column.
const TID_WIDTH: usize = 7;
/// Width of the duration column (fits `999999.999  s`, 11 days).
const DURATION_WIDTH: usize = 12;

/// The call graph of `trace` as text.
///
/// Threads are printed one after the other, each as a block in its own time
/// order (not interleaved by time: a block reads as one thread's story). A
/// block starts with a line `thread TID (name)` (`, N events lost` added when
/// the thread's buffer overflowed) and a column header, then has one line per
/// event:
///
/// ```text
/// thread 1234 (main)
///     TID     DURATION   FUNCTION
///    1234                demo::handle_request() {
///    1234     1.250 us     demo::parse_request();
///    1234                  demo::tokenize() {
///    1234     0.310 us       demo::next();
///    1234     0.900 us     }  /* demo::tokenize */
///    1234     3.400 us   }  /* demo::handle_request */
/// ```
///
/// - An entry prints `name() {`, indented two spaces per depth level.
/// - Its exit prints `}  /* name */` with the call's duration.
/// - A call whose exit is the very next event collapses into one line,
///   `name();`, with its duration.
/// - A call whose exit was not recorded (unwound, or the trace ended) is
///   closed where that became known by `}  /* name (no exit) */`, without a
///   duration.
/// - An exit whose entry was not recorded (tracing started inside the call)
///   prints `}  /* name */` without a duration.
///
/// Durations are exact to the nanosecond below one millisecond
/// (`999.999 us`), then truncated to the microsecond (`12.345 ms`) or, from
/// one second on, to the millisecond (`1.500  s`).
///
/// Blocks are separated by an empty line. Entries and exits are paired by
/// the [pairing rules](super#pairing-entries-with-exits).
///
/// With `max_lines`, at most that many event lines are written (thread and
/// column headers do not count), followed, if events were left out, by a
/// line `... truncated after N lines`.
///
/// Given the futures of a recording made with `--async` ([`FutureEnds`]),
/// the poll after which a future was Ready is followed by the future as
/// one line, at the poll's depth: its whole latency (first poll to Ready)
/// in the duration column, then `future NAME(ADDRESS) /* Ready: N polls,
/// busy T */` (the threads, when its polls ran on several).
pub fn call_graph(trace: &Trace, max_lines: Option<usize>) -> String {
    let mut text = Vec::new();
    write_call_graph(trace, max_lines, &mut text).expect("writing to a Vec<u8> does not fail");
    String::from_utf8(text).expect("the call graph is built from Rust strings")
}

/// Writes the call graph of `trace` to `out`, as [`call_graph`] returns it.
/// Output is buffered here; errors of `out` are returned.
pub fn write_call_graph(
    trace: &Trace,
    max_lines: Option<usize>,
    out: impl Write,
) -> io::Result<()> {
    match write_call_graph_of(trace, max_lines, out) {
        Ok(()) => Ok(()),
        Err(ReadOrWrite::Write(e)) => Err(e),
        Err(ReadOrWrite::Read(never)) => match never {},
    }
}

/// Why writing a report of an [`EventSource`] stopped.
#[derive(Debug)]
pub enum ReadOrWrite<E> {
    /// Reading the source failed.
    Read(E),
    /// Writing the output failed.
    Write(io::Error),
}

/// [`write_call_graph`] of any [`EventSource`], read thread by thread, each
/// twice (the thread's line states its lost events before its calls).
/// Memory is one entry per open call and one name per function. (For the
/// first reads side by side, see
/// [`parallel::write_call_graph_of`](super::parallel::write_call_graph_of).)
pub fn write_call_graph_of<S: EventSource>(
    source: &S,
    max_lines: Option<usize>,
    out: impl Write,
) -> Result<(), ReadOrWrite<S::Error>> {
    let counts =
        fntrace_format::analysis::threads::map_threads_here(source, |_, events| events.count())
            .map_err(ReadOrWrite::Read)?;
    write_call_graph_counted(source, &counts, (max_lines, &FutureEnds::default()), out)
}

/// The futures a replay shows ([`write_call_graph`]'s last paragraph):
/// those that ended at a poll's exit, by the poll's function and exit time.
#[derive(Default)]
pub struct FutureEnds(HashMap<(usize, u64), Future>);

impl FutureEnds {
    /// The futures of `futures` that were Ready (or panicked) at a poll's
    /// exit.
    pub fn of(futures: &Futures) -> FutureEnds {
        let ended = (futures.futures.iter()).filter(|f| {
            matches!(
                f.end,
                FutureEnd::Ready | FutureEnd::Panicked | FutureEnd::StartedBefore
            )
        });
        FutureEnds(ended.map(|f| ((f.function, f.end_ns), f.clone())).collect())
    }
}

/// [`write_call_graph_of`] once each thread's events and lost events were
/// counted (`counts`, in thread order), with the futures `ends` shows.
pub(super) fn write_call_graph_counted<S: EventSource>(
    source: &S,
    counts: &[(usize, u64)],
    (max_lines, ends): (Option<usize>, &FutureEnds),
    out: impl Write,
) -> Result<(), ReadOrWrite<S::Error>> {
    let name_of = |function| source.name_of(function);
    let mut graph = GraphWriter {
        name_of: &name_of,
        names: HashMap::default(),
        line: Vec::new(),
        out: BufWriter::with_capacity(1 << 20, out),
        lines_left: max_lines,
        max_lines: max_lines.unwrap_or(usize::MAX),
        truncated: false,
        values: Values::default(),
        ends,
    };
    for ((index, thread), &(events, lost)) in source.threads().iter().enumerate().zip(counts) {
        graph.values = source.values_of(index).map_err(ReadOrWrite::Read)?;
        let (written, _) = source
            .read_thread(index, |thread_events| {
                graph.write_thread(thread, lost, events > 0, thread_events, index == 0)
            })
            .map_err(ReadOrWrite::Read)?;
        written.map_err(ReadOrWrite::Write)?;
        if graph.truncated {
            break;
        }
    }
    graph.out.flush().map_err(ReadOrWrite::Write)
}

/// Writes lines and counts them against the line budget.
struct GraphWriter<'t, W: Write> {
    /// Function names.
    name_of: &'t dyn Fn(usize) -> String,
    /// The names asked of `name_of` so far.
    names: HashMap<usize, String>,
    /// The line being written.
    line: Vec<u8>,
    /// Where the lines go.
    out: BufWriter<W>,
    /// Event lines that may still be written; `None`: no limit.
    lines_left: Option<usize>,
    /// The limit, for the truncation note.
    max_lines: usize,
    /// Whether the budget ran out (and the note was written).
    truncated: bool,
    /// The values recorded with the thread's events (`-A`, `-R`).
    values: Values,
    /// The futures shown where they end.
    ends: &'t FutureEnds,
}

impl<W: Write> GraphWriter<'_, W> {
    /// Writes one thread's block, preceded by an empty line unless it is the
    /// `first`. Stops early once the line budget runs out.
    fn write_thread(
        &mut self,
        thread: &ThreadInfo,
        lost: u64,
        has_events: bool,
        events: &mut dyn Iterator<Item = GraphEvent>,
        first: bool,
    ) -> io::Result<()> {
        if self.lines_left == Some(0) && has_events {
            return self.truncate();
        }
        if !first {
            writeln!(self.out)?;
        }
        write!(self.out, "thread {}", thread.tid)?;
        if let Some(name) = &thread.name {
            write!(self.out, " ({name})")?;
        }
        if lost > 0 {
            write!(self.out, ", {lost} events lost")?;
        }
        writeln!(
            self.out,
            "\n{:>TID_WIDTH$} {:>DURATION_WIDTH$}   FUNCTION",
            "TID", "DURATION"
        )?;

        let tid = thread.tid;
        // An entry whose line waits for the next step: if that step is its
        // return, the two collapse into one line.
        let mut waiting_entry: Option<(usize, GraphEvent)> = None;
        for step in Calls::streaming(events, Vec::new(), Reading::Reports) {
            match (waiting_entry.take(), step) {
                (
                    Some((waiting_index, _)),
                    CallStep::Returned {
                        entry_index,
                        entry,
                        exit,
                        ..
                    },
                ) if waiting_index == entry_index => {
                    let duration = Some(duration_ns(&entry, &exit));
                    let (args, ret) = (self.args(&entry), self.retval(&exit));
                    self.line_text(tid, duration, &entry, ["", &args, &ret, ";"])?;
                    self.future_line(tid, &exit)?;
                }
                (waiting, step) => {
                    if let Some((_, entry)) = waiting {
                        let args = self.args(&entry);
                        self.line_text(tid, None, &entry, ["", &args, "", " {"])?;
                    }
                    match step {
                        CallStep::Entered { entry_index, entry } => {
                            waiting_entry = Some((entry_index, entry));
                        }
                        CallStep::Returned { entry, exit, .. } => {
                            let duration = Some(duration_ns(&entry, &exit));
                            match self.values.get(&(exit.time_ns, true)).cloned() {
                                // uftrace's `} = 5; /* f */`.
                                Some(ret) => {
                                    let before = format!("}}{ret}; /* ");
                                    self.line_text(tid, duration, &entry, [&before, "", "", " */"])?
                                }
                                None => self.closing_line(tid, duration, &entry, "")?,
                            }
                            self.future_line(tid, &exit)?;
                        }
                        CallStep::Unfinished { entry, .. } => {
                            self.closing_line(tid, None, &entry, " (no exit)")?;
                        }
                        CallStep::UnmatchedExit { exit } => {
                            self.closing_line(tid, None, &exit, "")?;
                        }
                    }
                }
            }
            if self.truncated {
                return Ok(());
            }
        }
        // Every entry ends in a return or an unfinished step, which wrote it.
        debug_assert!(waiting_entry.is_none());
        Ok(())
    }

    /// Writes the future that ended with the poll `exit` returned, if one
    /// did, as one line at the poll's depth.
    fn future_line(&mut self, tid: u32, exit: &GraphEvent) -> io::Result<()> {
        let Some(future) = self.ends.0.get(&(exit.function, exit.time_ns)) else {
            return Ok(());
        };
        let latency_ns = future.end_ns.saturating_sub(future.start_ns);
        let (latency, how) = match future.end {
            FutureEnd::Ready => (Some(latency_ns), "Ready"),
            FutureEnd::Panicked => (Some(latency_ns), "panicked"),
            _ => (None, "Ready, first polled before the recording began"),
        };
        let (whole, thousandths, unit) = graph_duration_parts(future.busy_ns);
        let threads = match &future.tids[..] {
            [_] | [] => String::new(),
            tids => {
                let tids: Vec<String> = tids.iter().map(u32::to_string).collect();
                format!(" on threads {}", tids.join(", "))
            }
        };
        let polls = future.polls;
        let text = format!(
            "({:#x}) /* {how}: {polls} polls{threads}, busy {whole}.{thousandths:03} {unit} */",
            future.address
        );
        self.line_text(tid, latency, exit, ["future ", &text, "", ""])
    }

    /// Writes `}  /* name{note} */` for the call `event` belongs to.
    fn closing_line(
        &mut self,
        tid: u32,
        duration_ns: Option<u64>,
        event: &GraphEvent,
        note: &str,
    ) -> io::Result<()> {
        self.line_text(tid, duration_ns, event, ["}  /* ", note, "", " */"])
    }

    /// The arguments recorded with `entry`, as uftrace shows them: `()`
    /// when none.
    fn args(&self, entry: &GraphEvent) -> String {
        self.values
            .get(&(entry.time_ns, false))
            .cloned()
            .unwrap_or_else(|| "()".to_string())
    }

    /// The return value recorded with `exit` (` = 5`), or nothing.
    fn retval(&self, exit: &GraphEvent) -> String {
        self.values
            .get(&(exit.time_ns, true))
            .cloned()
            .unwrap_or_default()
    }

    /// Writes one event line, `parts[0]`, the function's name, `parts[1]`,
    /// `parts[2]` and `parts[3]` after the columns, or, once the budget is spent, the
    /// truncation note (once). Built byte by byte: a replay writes hundreds
    /// of millions of lines, and `format!`'s padding writes one character
    /// at a time.
    fn line_text(
        &mut self,
        tid: u32,
        duration_ns: Option<u64>,
        event: &GraphEvent,
        parts: [&str; 4],
    ) -> io::Result<()> {
        match &mut self.lines_left {
            Some(0) => return self.truncate(),
            Some(lines_left) => *lines_left -= 1,
            None => {}
        }
        let name_of = self.name_of;
        let name = self
            .names
            .entry(event.function)
            .or_insert_with(|| name_of(event.function));
        let line = &mut self.line;
        line.clear();
        write!(line, "{tid:>TID_WIDTH$} ")?;
        match duration_ns {
            Some(ns) => {
                let (whole, thousandths, unit) = graph_duration_parts(ns);
                let width = decimal_digits(whole) + 7;
                pad(line, DURATION_WIDTH.saturating_sub(width));
                write!(line, "{whole}.{thousandths:03} {unit}")?;
            }
            None => pad(line, DURATION_WIDTH),
        }
        pad(line, 3 + usize::from(event.depth) * 2);
        line.extend_from_slice(parts[0].as_bytes());
        line.extend_from_slice(name.as_bytes());
        line.extend_from_slice(parts[1].as_bytes());
        line.extend_from_slice(parts[2].as_bytes());
        line.extend_from_slice(parts[3].as_bytes());
        line.push(b'\n');
        self.out.write_all(line)
    }

    /// Writes the line saying that event lines were left out, once.
    fn truncate(&mut self) -> io::Result<()> {
        if !self.truncated {
            self.truncated = true;
            writeln!(self.out, "... truncated after {} lines", self.max_lines)?;
        }
        Ok(())
    }
}

/// `ns` as ftrace shows durations: three decimals of the largest unit among
/// us, ms and s that keeps the integer part below 1000 (s: unbounded).
/// Truncates, so the value shown never exceeds the real one.
#[cfg(test)]
fn graph_duration(ns: u64) -> String {
    let (whole, thousandths, unit) = graph_duration_parts(ns);
    format!("{whole}.{thousandths:03} {unit}")
}

/// [`graph_duration`]'s integer part, thousandths and unit (` s` padded to
/// two characters).
fn graph_duration_parts(ns: u64) -> (u64, u64, &'static str) {
    if ns < 1_000_000 {
        (ns / 1_000, ns % 1_000, "us")
    } else if ns < 1_000_000_000 {
        let us = ns / 1_000;
        (us / 1_000, us % 1_000, "ms")
    } else {
        let ms = ns / 1_000_000;
        (ms / 1_000, ms % 1_000, " s")
    }
}

/// Digits of `n` in decimal.
fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// Appends `count` spaces to `line`.
fn pad(line: &mut Vec<u8>, count: usize) {
    line.resize(line.len() + count, b' ');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::{entry, exit};
    use fntrace_format::{GraphEvent, ThreadTrace};

    const HANDLE: usize = 0x1000;
    const PARSE: usize = 0x2000;
    const TOKENIZE: usize = 0x3000;
    const NEXT: usize = 0x4000;

    fn thread(tid: u32, name: Option<&str>, events: Vec<GraphEvent>) -> ThreadTrace {
        ThreadTrace {
            tid,
            name: name.map(String::from),
            events,
            lost: 0,
        }
    }

    fn trace(threads: Vec<ThreadTrace>) -> Trace {
        let names = [
            (HANDLE, "demo::handle_request"),
            (PARSE, "demo::parse_request"),
            (TOKENIZE, "demo::tokenize"),
            (NEXT, "demo::next"),
        ];
        Trace {
            pid: 1,
            exe: "/bin/demo".into(),
            threads,
            names: names
                .into_iter()
                .map(|(address, name)| (address, name.to_string()))
                .collect(),
            maps: String::new(),
            ..Trace::default()
        }
    }

    fn request_events(start: u64) -> Vec<GraphEvent> {
        vec![
            entry(start, HANDLE, 0),
            entry(start + 100, PARSE, 1),
            exit(start + 1_350, PARSE, 1),
            entry(start + 1_500, TOKENIZE, 1),
            entry(start + 1_600, NEXT, 2),
            exit(start + 1_910, NEXT, 2),
            exit(start + 2_400, TOKENIZE, 1),
            exit(start + 3_400, HANDLE, 0),
        ]
    }

    const REQUEST_GRAPH: &str = "\
thread 1234 (main)
    TID     DURATION   FUNCTION
   1234                demo::handle_request() {
   1234     1.250 us     demo::parse_request();
   1234                  demo::tokenize() {
   1234     0.310 us       demo::next();
   1234     0.900 us     }  /* demo::tokenize */
   1234     3.400 us   }  /* demo::handle_request */
";

    #[test]
    fn nested_calls() {
        let trace = trace(vec![thread(1234, Some("main"), request_events(0))]);
        assert_eq!(call_graph(&trace, None), REQUEST_GRAPH);
    }

    #[test]
    fn threads_in_blocks() {
        let mut second = thread(
            77,
            None,
            vec![
                entry(10, NEXT, 0),
                exit(2_000_010, NEXT, 0),
                entry(3_000_000_000, PARSE, 0),
            ],
        );
        second.events.push(exit(4_500_000_000, PARSE, 0));
        second.lost = 3;
        let trace = trace(vec![thread(1234, Some("main"), request_events(5)), second]);
        let expected = format!(
            "{REQUEST_GRAPH}
thread 77, 3 events lost
    TID     DURATION   FUNCTION
     77     2.000 ms   demo::next();
     77     1.500  s   demo::parse_request();
"
        );
        assert_eq!(call_graph(&trace, None), expected);
    }

    #[test]
    fn missing_exits_and_entries() {
        // Tracing started inside handle_request → parse_request; tokenize
        // was unwound by a panic caught in handle_request; the trace ends
        // inside the last handle_request.
        let events = vec![
            entry(0, NEXT, 2),
            exit(40, NEXT, 2),
            exit(50, PARSE, 1),
            entry(60, TOKENIZE, 1),
            entry(70, NEXT, 2),
            entry(80, PARSE, 1),
            exit(90, PARSE, 1),
            exit(100, HANDLE, 0),
            entry(200, HANDLE, 0),
        ];
        let trace = trace(vec![thread(5, None, events)]);
        let expected = "\
thread 5
    TID     DURATION   FUNCTION
      5     0.040 us       demo::next();
      5                  }  /* demo::parse_request */
      5                  demo::tokenize() {
      5                    demo::next() {
      5                    }  /* demo::next (no exit) */
      5                  }  /* demo::tokenize (no exit) */
      5     0.010 us     demo::parse_request();
      5                }  /* demo::handle_request */
      5                demo::handle_request() {
      5                }  /* demo::handle_request (no exit) */
";
        assert_eq!(call_graph(&trace, None), expected);
    }

    #[test]
    fn line_limit() {
        let trace = trace(vec![
            thread(1234, Some("main"), request_events(0)),
            thread(99, None, request_events(0)),
        ]);
        let expected = "\
thread 1234 (main)
    TID     DURATION   FUNCTION
   1234                demo::handle_request() {
   1234     1.250 us     demo::parse_request();
   1234                  demo::tokenize() {
... truncated after 3 lines
";
        assert_eq!(call_graph(&trace, Some(3)), expected);
        // Exactly as many lines as the first thread has: the note replaces
        // the second thread's block.
        let expected = format!("{REQUEST_GRAPH}... truncated after 6 lines\n");
        assert_eq!(call_graph(&trace, Some(6)), expected);
        // Threads without events still show their header.
        let mut trace = trace;
        trace.threads[1].events.clear();
        let expected = format!("{REQUEST_GRAPH}\nthread 99\n    TID     DURATION   FUNCTION\n");
        assert_eq!(call_graph(&trace, Some(6)), expected);
        // Enough lines: no note.
        assert!(!call_graph(&trace, Some(12)).contains("truncated"));
    }

    #[test]
    fn writer_variant_matches_and_reports_errors() {
        let trace = trace(vec![thread(1234, Some("main"), request_events(0))]);
        let mut text = Vec::new();
        write_call_graph(&trace, None, &mut text).unwrap();
        assert_eq!(String::from_utf8(text).unwrap(), REQUEST_GRAPH);

        struct Failing;
        impl Write for Failing {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::other("disk full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let error = write_call_graph(&trace, None, Failing).unwrap_err();
        assert_eq!(error.to_string(), "disk full");
    }

    #[test]
    fn graph_durations() {
        assert_eq!(graph_duration(0), "0.000 us");
        assert_eq!(graph_duration(999_999), "999.999 us");
        assert_eq!(graph_duration(1_000_000), "1.000 ms");
        assert_eq!(graph_duration(12_345_678), "12.345 ms");
        assert_eq!(graph_duration(1_500_000_000), "1.500  s");
        assert_eq!(graph_duration(86_400_000_000_000), "86400.000  s");
    }
}
