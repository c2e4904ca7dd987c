//! Per-function latency statistics: calls, inclusive and self time, and the
//! distribution of call durations, per thread and across threads, one row
//! per function name as `uftrace report` shows them. See [`latency`] for
//! what is measured and how recursion counts.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::histogram::Histogram;
use super::pairing::{duration_ns, CallStep, Calls, Reading};
use crate::source::{infallible, EventSource};
use crate::trace::Trace;

/// Latency statistics of one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionStats {
    /// Entry address of the function; when the row merges several
    /// functions of the same name ([`Rows::ByName`]), the lowest of their
    /// addresses.
    pub function: usize,
    /// Demangled name, or the address in hex when unknown.
    pub name: String,
    /// Completed calls.
    pub calls: u64,
    /// Calls whose exit was not recorded: still running when the trace
    /// ended, or unwound (panic, `longjmp`). Not in the durations.
    pub unfinished: u64,
    /// Sum of the durations of the completed calls that were not nested in
    /// another call of the same function: time spent in the function,
    /// callees included, each recursive descent counted once (see
    /// [`latency`]).
    pub total_ns: u64,
    /// Sum over the completed calls of their duration minus the durations of
    /// their completed direct children.
    pub self_ns: u64,
    /// Shortest call.
    pub min_ns: u64,
    /// Longest call.
    pub max_ns: u64,
    /// Mean duration of the completed calls (nested recursive calls
    /// included, as uftrace's `avg`), rounded to the nearest nanosecond.
    pub mean_ns: u64,
    /// Median call duration, within [`MAX_RELATIVE_ERROR`](super::MAX_RELATIVE_ERROR).
    pub p50_ns: u64,
    /// 90th percentile of the call durations, within the same error.
    pub p90_ns: u64,
    /// 99th percentile of the call durations, within the same error.
    pub p99_ns: u64,
}

/// Per-function latency statistics of a whole trace; see [`latency`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyReport {
    /// Every function with at least one call (completed or
    /// [unfinished](FunctionStats::unfinished)), all threads merged,
    /// sorted by `total_ns`, largest first (ties: by name, then address).
    pub functions: Vec<FunctionStats>,
    /// The same per thread: thread id and its functions in the same order,
    /// one element per [`ThreadTrace`](crate::ThreadTrace), in the
    /// trace's order.
    pub per_thread: Vec<(u32, Vec<FunctionStats>)>,
    /// Exits whose entry was not recorded (tracing started inside the call),
    /// all threads.
    pub unmatched_exits: u64,
    /// Entries whose exit was not recorded (the trace ended first, or the
    /// frame was unwound), all threads. These calls are not in the
    /// statistics.
    pub unfinished_calls: u64,
    /// Of the unfinished calls, those still open when their thread's
    /// events ended (still running when the trace ended, or their exit
    /// lost).
    pub still_running_calls: u64,
    /// Of the unfinished calls, those left without an exit while their
    /// thread went on (unwound by a panic or `longjmp`, or their exit lost):
    /// `unfinished_calls - still_running_calls`.
    pub unwound_calls: u64,
    /// Events lost while recording (buffers full), all threads: the
    /// statistics miss the calls they belonged to.
    pub lost_events: u64,
    /// Each thread read, in the trace's order: its events and losses.
    pub threads: Vec<ThreadSummary>,
}

/// What was read of one thread, for the lines above a report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadSummary {
    /// Kernel thread id.
    pub tid: u32,
    /// The thread's name, when known.
    pub name: Option<String>,
    /// Entries and exits read.
    pub events: u64,
    /// Events lost while recording.
    pub lost: u64,
}

/// How [`latency_of_with`] makes rows of functions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rows {
    /// One row per name, as `uftrace report`: two `static` functions of the
    /// same name in two files, or the names of code folded into one (the
    /// linker's identical code folding), are one row.
    #[default]
    ByName,
    /// One row per function address: functions of the same name apart.
    ByAddress,
}

/// Durations of one function's completed calls.
#[derive(Clone, Debug, Default)]
struct FunctionDurations {
    /// Each call's duration, callees included.
    inclusive: Histogram,
    /// Summed durations of the calls not nested in a call of the same
    /// function (the outermost frame of each recursion).
    total_ns: u64,
    /// Sum of each call's duration minus its direct children's.
    self_ns: u64,
    /// Calls without their exit.
    unfinished: u64,
    /// While a thread is read: its calls of the function entered and not
    /// yet ended. A call that ends while another is still open was nested
    /// in it (recursion).
    open: u32,
}

impl FunctionDurations {
    /// Ends one of the function's open calls (each Returned or Unfinished
    /// step of the pairing pass ends a call an Entered step opened);
    /// whether another is still open, the ended call nested in it.
    fn close(&mut self) -> bool {
        self.open = self.open.saturating_sub(1);
        self.open > 0
    }

    /// Adds one completed call; `nested` if it ran inside another call of
    /// the same function (its time is already in that call's).
    fn record(&mut self, inclusive_ns: u64, self_ns: u64, nested: bool) {
        self.inclusive.record(inclusive_ns);
        if !nested {
            self.total_ns = self.total_ns.saturating_add(inclusive_ns);
        }
        self.self_ns = self.self_ns.saturating_add(self_ns);
    }

    /// Adds the calls of `other` (another thread's, say).
    fn merge(&mut self, other: &FunctionDurations) {
        self.inclusive.merge(&other.inclusive);
        self.total_ns = self.total_ns.saturating_add(other.total_ns);
        self.self_ns = self.self_ns.saturating_add(other.self_ns);
        self.unfinished += other.unfinished;
    }

    /// The statistics of these calls, for `function` called `name`.
    fn stats(&self, function: usize, name: String) -> FunctionStats {
        let durations = &self.inclusive;
        FunctionStats {
            function,
            name,
            calls: durations.count(),
            unfinished: self.unfinished,
            total_ns: self.total_ns,
            self_ns: self.self_ns,
            min_ns: durations.min(),
            max_ns: durations.max(),
            mean_ns: durations.mean(),
            p50_ns: durations.quantile(0.50),
            p90_ns: durations.quantile(0.90),
            p99_ns: durations.quantile(0.99),
        }
    }
}

/// Computes per-function latency statistics of `trace`, per thread and with
/// all threads merged.
///
/// Only completed calls (entry and exit both recorded) are measured; see the
/// [pairing rules](super#pairing-entries-with-exits). Calls without an exit
/// are counted in [`LatencyReport::unfinished_calls`] and in their function's
/// [`FunctionStats::unfinished`], exits without an entry
/// in [`LatencyReport::unmatched_exits`].
///
/// # Recursion
///
/// As `uftrace report` does, a call made while another call of the same
/// function (the same address) is open on its thread adds to the function's
/// [`calls`](FunctionStats::calls), [`self_ns`](FunctionStats::self_ns) and
/// duration distribution, but not to [`total_ns`](FunctionStats::total_ns):
/// its time is already in the outer call's duration. So `total_ns` is the
/// time spent in the function, callees included, never more than the time
/// of the calls it ran in (`fib` under `main` totals at most `main`'s time).
/// [`FunctionStats::self_ns`] has no overlap to begin with: each call
/// contributes its duration minus the durations of its direct children
/// (recursive or not), so the self times of all functions add up to the time
/// covered by the outermost completed calls.
///
/// # Rows
///
/// One row per function name ([`Rows::ByName`]), as uftrace's; see
/// [`latency_of_with`] for one per address.
///
/// # Cost
///
/// Runs in time linear in the number of events; memory is one bounded
/// [`Histogram`] per function (plus, while a thread is read, one per
/// function that thread called).
///
/// # Example
///
/// ```
/// use fntrace_tools::{analysis, EventKind, GraphEvent, ThreadTrace, Trace};
///
/// let event = |time_ns, function, depth, kind| GraphEvent { time_ns, function, depth, kind };
/// let trace = Trace {
///     threads: vec![ThreadTrace {
///         tid: 1,
///         events: vec![
///             event(0, 0x10, 0, EventKind::Entry),
///             event(100, 0x20, 1, EventKind::Entry),
///             event(400, 0x20, 1, EventKind::Exit),
///             event(1_000, 0x10, 0, EventKind::Exit),
///         ],
///         ..ThreadTrace::default()
///     }],
///     names: [(0x10, "main".to_string()), (0x20, "work".to_string())].into(),
///     ..Trace::default()
/// };
/// let report = analysis::latency(&trace);
/// assert_eq!(report.functions[0].name, "main");
/// assert_eq!(report.functions[0].total_ns, 1_000);
/// assert_eq!(report.functions[0].self_ns, 700);
/// print!("{}", report.table(20));
/// ```
pub fn latency(trace: &Trace) -> LatencyReport {
    infallible(latency_of(trace))
}

/// [`latency`] of any [`EventSource`], read thread by thread, each once: a
/// uftrace directory is read record by record
/// ([`UftraceReader`](crate::export::UftraceReader)), in memory bounded by
/// the open calls and one histogram per function.
pub fn latency_of<S: EventSource>(source: &S) -> Result<LatencyReport, S::Error> {
    latency_of_with(source, Rows::ByName)
}

/// [`latency_of`] with the functions made into `rows`: by name (as
/// [`latency_of`]) or by address.
pub fn latency_of_with<S: EventSource>(source: &S, rows: Rows) -> Result<LatencyReport, S::Error> {
    let mut report = LatencyReport::default();
    let mut merged: HashMap<usize, FunctionDurations> = HashMap::new();
    for (index, thread) in source.threads().into_iter().enumerate() {
        let mut functions: HashMap<usize, FunctionDurations> = HashMap::new();
        let mut events = 0u64;
        let ((), lost) = source.read_thread(index, |thread_events| {
            let counted = thread_events.inspect(|_| events += 1);
            for step in Calls::streaming(counted, Vec::new(), Reading::Reports) {
                match step {
                    CallStep::Entered { entry, .. } => {
                        functions.entry(entry.function).or_default().open += 1;
                    }
                    CallStep::Returned {
                        entry,
                        exit,
                        children_ns,
                        ..
                    } => {
                        let inclusive_ns = duration_ns(&entry, &exit);
                        let function = functions.entry(entry.function).or_default();
                        let nested = function.close();
                        function.record(
                            inclusive_ns,
                            inclusive_ns.saturating_sub(children_ns),
                            nested,
                        );
                    }
                    CallStep::Unfinished { entry, unwound_by } => {
                        let function = functions.entry(entry.function).or_default();
                        function.close();
                        function.unfinished += 1;
                        report.unfinished_calls += 1;
                        if unwound_by.is_some() {
                            report.unwound_calls += 1;
                        } else {
                            report.still_running_calls += 1;
                        }
                    }
                    CallStep::UnmatchedExit { .. } => report.unmatched_exits += 1,
                }
            }
        })?;
        for (&function, durations) in &functions {
            merged.entry(function).or_default().merge(durations);
        }
        report
            .per_thread
            .push((thread.tid, sorted_stats(source, &functions, rows)));
        report.lost_events += lost;
        report.threads.push(ThreadSummary {
            tid: thread.tid,
            name: thread.name,
            events,
            lost,
        });
    }
    report.functions = sorted_stats(source, &merged, rows);
    Ok(report)
}

/// Statistics of each function in `functions` (by address), made into
/// `rows`, largest total first.
fn sorted_stats<S: EventSource>(
    source: &S,
    functions: &HashMap<usize, FunctionDurations>,
    rows: Rows,
) -> Vec<FunctionStats> {
    let mut stats: Vec<FunctionStats> = match rows {
        Rows::ByAddress => functions
            .iter()
            .map(|(&function, durations)| durations.stats(function, source.name_of(function)))
            .collect(),
        Rows::ByName => {
            // Name → lowest address and the merged durations.
            let mut by_name: HashMap<String, (usize, FunctionDurations)> = HashMap::new();
            for (&function, durations) in functions {
                let row = by_name
                    .entry(source.name_of(function))
                    .or_insert_with(|| (function, FunctionDurations::default()));
                row.0 = row.0.min(function);
                row.1.merge(durations);
            }
            by_name
                .into_iter()
                .map(|(name, (function, durations))| durations.stats(function, name))
                .collect()
        }
    };
    stats.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.function.cmp(&b.function))
    });
    stats
}

/// Column headers of [`LatencyReport::table`]; all but the last are
/// right-aligned durations (or counts).
const TABLE_HEADERS: [&str; 10] = [
    "calls", "total", "self", "avg", "min", "p50", "p90", "p99", "max", "function",
];

impl LatencyReport {
    /// The merged statistics as an aligned text table, largest total first,
    /// at most `limit` function rows (`usize::MAX` for all).
    ///
    /// Columns: `calls total self avg min p50 p90 p99 max function`, two
    /// spaces apart, numbers right-aligned, each column as wide as its widest
    /// cell. Durations are in ns, µs, ms or s with three significant digits
    /// (`812 ns`, `1.25 µs`, `31.4 ms`, `2.00 s`). When events were lost, a
    /// first line starting with `#` says how many, before anything else: the
    /// counts below miss their calls. When rows were left out, a last line
    /// says how many. Every line ends with `\n`.
    pub fn table(&self, limit: usize) -> String {
        let mut out = String::new();
        if self.lost_events > 0 {
            out.push_str(&format!(
                "# {} events lost while recording (buffers full): the calls they belonged to are missing below\n",
                self.lost_events
            ));
        }
        out.push_str(&self.rows_table(limit));
        out
    }

    fn rows_table(&self, limit: usize) -> String {
        let rows: Vec<[String; 10]> = self
            .functions
            .iter()
            .take(limit)
            .map(|stats| {
                [
                    stats.calls.to_string(),
                    human_duration(stats.total_ns),
                    human_duration(stats.self_ns),
                    human_duration(stats.mean_ns),
                    human_duration(stats.min_ns),
                    human_duration(stats.p50_ns),
                    human_duration(stats.p90_ns),
                    human_duration(stats.p99_ns),
                    human_duration(stats.max_ns),
                    stats.name.clone(),
                ]
            })
            .collect();

        let mut widths = TABLE_HEADERS.map(|header| header.chars().count());
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }

        let mut table = String::new();
        let headers = TABLE_HEADERS.map(String::from);
        for row in std::iter::once(&headers).chain(&rows) {
            let (name, numbers) = row.split_last().expect("the table has columns");
            for (cell, &width) in numbers.iter().zip(&widths) {
                let _ = write!(table, "{cell:>width$}  ");
            }
            table.push_str(name);
            table.push('\n');
        }
        let left_out = self.functions.len().saturating_sub(limit);
        if left_out > 0 {
            let plural = if left_out == 1 { "" } else { "s" };
            let _ = writeln!(table, "... {left_out} more function{plural}");
        }
        table
    }
}

/// `ns` in the largest of ns, µs, ms and s that keeps it ≥ 1, rounded to
/// three significant digits (half up): `999 ns`, `1.00 µs`, `12.3 ms`,
/// `120 s`. From 1000 s on, the three significant digits are followed by
/// zeros (`1230 s`).
pub fn human_duration(ns: u64) -> String {
    if ns < 1_000 {
        return format!("{ns} ns");
    }
    let ns = u128::from(ns);
    // Number of decimal digits of `ns`, at least 4 here.
    let mut digits = ns.ilog10() + 1;
    let dropped = 10u128.pow(digits - 3);
    let mut significant = (ns + dropped / 2) / dropped;
    if significant == 1_000 {
        significant = 100;
        digits += 1;
    }
    // ns = significant × 10^(digits - 3); the unit is 10^unit_exponent ns.
    let (unit, unit_exponent) = match digits {
        ..=6 => ("µs", 3),
        7..=9 => ("ms", 6),
        _ => ("s", 9),
    };
    match digits as i32 - 3 - unit_exponent {
        -2 => format!("{}.{:02} {unit}", significant / 100, significant % 100),
        -1 => format!("{}.{} {unit}", significant / 10, significant % 10),
        zeros => format!("{}{} {unit}", significant, "0".repeat(zeros as usize)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::{entry, exit};
    use crate::trace::{GraphEvent, ThreadTrace};

    const MAIN: usize = 0x1000;
    const PARSE: usize = 0x2000;
    const TOKENIZE: usize = 0x3000;
    const NEXT: usize = 0x4000;
    const FACT: usize = 0x5000;

    fn trace(threads: Vec<(u32, Vec<GraphEvent>)>) -> Trace {
        let names = [
            (MAIN, "demo::main"),
            (PARSE, "demo::parse"),
            (TOKENIZE, "demo::tokenize"),
            (NEXT, "demo::next"),
            (FACT, "demo::fact"),
        ];
        Trace {
            pid: 1,
            exe: "/bin/demo".into(),
            threads: threads
                .into_iter()
                .map(|(tid, events)| ThreadTrace {
                    tid,
                    name: None,
                    events,
                    lost: 0,
                })
                .collect(),
            names: names
                .into_iter()
                .map(|(address, name)| (address, name.to_string()))
                .collect(),
            maps: String::new(),
            ..Trace::default()
        }
    }

    /// Stats of a function whose every call took `durations_ns` (already
    /// sorted), all of them small enough to be exact in the histogram.
    #[allow(clippy::too_many_arguments)]
    fn stats(
        function: usize,
        name: &str,
        calls: u64,
        total_ns: u64,
        self_ns: u64,
        min_ns: u64,
        max_ns: u64,
        mean_ns: u64,
        [p50_ns, p90_ns, p99_ns]: [u64; 3],
    ) -> FunctionStats {
        FunctionStats {
            function,
            name: name.into(),
            calls,
            unfinished: 0,
            total_ns,
            self_ns,
            min_ns,
            max_ns,
            mean_ns,
            p50_ns,
            p90_ns,
            p99_ns,
        }
    }

    /// main { parse; tokenize { next; next } }
    fn nested_events() -> Vec<GraphEvent> {
        vec![
            entry(0, MAIN, 0),
            entry(10, PARSE, 1),
            exit(40, PARSE, 1),
            entry(50, TOKENIZE, 1),
            entry(60, NEXT, 2),
            exit(70, NEXT, 2),
            entry(80, NEXT, 2),
            exit(100, NEXT, 2),
            exit(150, TOKENIZE, 1),
            exit(200, MAIN, 0),
        ]
    }

    #[test]
    fn nested_calls_self_time() {
        let report = latency(&trace(vec![(7, nested_events())]));
        let expected = vec![
            stats(MAIN, "demo::main", 1, 200, 70, 200, 200, 200, [200; 3]),
            stats(
                TOKENIZE,
                "demo::tokenize",
                1,
                100,
                70,
                100,
                100,
                100,
                [100; 3],
            ),
            // Same total as parse: ordered by name.
            stats(NEXT, "demo::next", 2, 30, 30, 10, 20, 15, [10, 20, 20]),
            stats(PARSE, "demo::parse", 1, 30, 30, 30, 30, 30, [30; 3]),
        ];
        assert_eq!(report.functions, expected);
        assert_eq!(report.per_thread, vec![(7, expected)]);
        assert_eq!(report.unmatched_exits, 0);
        assert_eq!(report.unfinished_calls, 0);
    }

    #[test]
    fn lost_events_are_stated_before_the_table() {
        let mut lossy = trace(vec![(7, nested_events())]);
        lossy.threads[0].lost = 12;
        let table = latency(&lossy).table(10);
        let first = table.lines().next().unwrap();
        assert_eq!(
            first,
            "# 12 events lost while recording (buffers full): the calls they belonged to are missing below"
        );
        let whole = latency(&trace(vec![(7, nested_events())])).table(10);
        assert!(whole.starts_with("calls"), "{whole}");
    }

    #[test]
    fn recursion_counts_the_outermost_call_once() {
        // main { fact(3) { fact(2) { next; fact(1) } } fact(1) }
        let events = vec![
            entry(0, MAIN, 0),
            entry(5, FACT, 1),
            entry(10, FACT, 2),
            entry(12, NEXT, 3),
            exit(14, NEXT, 3),
            entry(20, FACT, 3),
            exit(50, FACT, 3),
            exit(80, FACT, 2),
            exit(100, FACT, 1),
            entry(110, FACT, 1),
            exit(120, FACT, 1),
            exit(200, MAIN, 0),
        ];
        let report = latency(&trace(vec![(7, events)]));
        // Durations 30, 70, 95 and 10; self 30, 38, 25 and 10. The total
        // is the two outermost calls' (95 + 10), not every frame's (205):
        // never more than main's 200.
        assert_eq!(
            report.functions,
            vec![
                stats(MAIN, "demo::main", 1, 200, 95, 200, 200, 200, [200; 3]),
                stats(FACT, "demo::fact", 4, 105, 103, 10, 95, 51, [30, 95, 95]),
                stats(NEXT, "demo::next", 1, 2, 2, 2, 2, 2, [2; 3]),
            ]
        );
    }

    #[test]
    fn rows_merge_functions_of_one_name_unless_by_address() {
        const OTHER_NEXT: usize = 0x6000;
        let mut two = trace(vec![(
            7,
            vec![
                entry(0, NEXT, 0),
                exit(10, NEXT, 0),
                entry(20, OTHER_NEXT, 0),
                exit(50, OTHER_NEXT, 0),
            ],
        )]);
        two.names.insert(OTHER_NEXT, "demo::next".to_string());
        let merged = stats(NEXT, "demo::next", 2, 40, 40, 10, 30, 20, [10, 30, 30]);
        let report = latency(&two);
        assert_eq!(report.functions, vec![merged.clone()]);
        assert_eq!(report.per_thread, vec![(7, vec![merged])]);
        let apart = infallible(latency_of_with(&two, Rows::ByAddress));
        assert_eq!(
            apart.functions,
            vec![
                stats(OTHER_NEXT, "demo::next", 1, 30, 30, 30, 30, 30, [30; 3]),
                stats(NEXT, "demo::next", 1, 10, 10, 10, 10, 10, [10; 3]),
            ]
        );
    }

    #[test]
    fn two_threads_merged() {
        let first = vec![entry(0, MAIN, 0), exit(100, MAIN, 0)];
        let second = vec![
            entry(1_000, MAIN, 0),
            entry(1_010, PARSE, 1),
            exit(1_020, PARSE, 1),
            exit(1_300, MAIN, 0),
        ];
        let report = latency(&trace(vec![(1, first), (2, second)]));
        assert_eq!(
            report.functions,
            vec![
                stats(
                    MAIN,
                    "demo::main",
                    2,
                    400,
                    390,
                    100,
                    300,
                    200,
                    [100, 300, 300]
                ),
                stats(PARSE, "demo::parse", 1, 10, 10, 10, 10, 10, [10; 3]),
            ]
        );
        assert_eq!(
            report.per_thread,
            vec![
                (
                    1,
                    vec![stats(
                        MAIN,
                        "demo::main",
                        1,
                        100,
                        100,
                        100,
                        100,
                        100,
                        [100; 3]
                    )]
                ),
                (
                    2,
                    vec![
                        stats(MAIN, "demo::main", 1, 300, 290, 300, 300, 300, [300; 3]),
                        stats(PARSE, "demo::parse", 1, 10, 10, 10, 10, 10, [10; 3]),
                    ]
                ),
            ]
        );
    }

    #[test]
    fn missing_exits_are_not_measured_but_counted() {
        let events = vec![
            entry(0, MAIN, 0),
            entry(10, PARSE, 1),
            entry(20, NEXT, 2),
            // parse and next were unwound (a panic caught in main).
            entry(50, TOKENIZE, 1),
            exit(60, TOKENIZE, 1),
            exit(100, MAIN, 0),
            // The trace ends inside this call.
            entry(200, MAIN, 0),
        ];
        let report = latency(&trace(vec![(7, events)]));
        assert_eq!(
            report.functions,
            vec![
                // The unwound calls' time stays in main's self time.
                FunctionStats {
                    unfinished: 1,
                    ..stats(MAIN, "demo::main", 1, 100, 90, 100, 100, 100, [100; 3])
                },
                stats(TOKENIZE, "demo::tokenize", 1, 10, 10, 10, 10, 10, [10; 3]),
                // Calls without an exit do not vanish from the report.
                FunctionStats {
                    unfinished: 1,
                    ..stats(NEXT, "demo::next", 0, 0, 0, 0, 0, 0, [0; 3])
                },
                FunctionStats {
                    unfinished: 1,
                    ..stats(PARSE, "demo::parse", 0, 0, 0, 0, 0, 0, [0; 3])
                },
            ]
        );
        assert_eq!(report.unfinished_calls, 3);
        assert_eq!((report.unwound_calls, report.still_running_calls), (2, 1));
        assert_eq!(report.unmatched_exits, 0);
    }

    #[test]
    fn depth_starting_above_zero_and_unmatched_exits() {
        // Tracing was switched on inside main → parse.
        let events = vec![
            entry(0, NEXT, 2),
            exit(5, NEXT, 2),
            exit(10, PARSE, 1),
            entry(20, TOKENIZE, 1),
            entry(22, NEXT, 2),
            exit(25, NEXT, 2),
            exit(30, TOKENIZE, 1),
            exit(40, MAIN, 0),
        ];
        let report = latency(&trace(vec![(7, events)]));
        assert_eq!(
            report.functions,
            vec![
                stats(TOKENIZE, "demo::tokenize", 1, 10, 7, 10, 10, 10, [10; 3]),
                stats(NEXT, "demo::next", 2, 8, 8, 3, 5, 4, [3, 5, 5]),
            ]
        );
        assert_eq!(report.unmatched_exits, 2);
        assert_eq!(report.unfinished_calls, 0);
    }

    #[test]
    fn unknown_names_show_the_address_and_empty_traces_report_nothing() {
        let report = latency(&trace(vec![(
            7,
            vec![entry(0, 0xabc, 0), exit(9, 0xabc, 0)],
        )]));
        assert_eq!(report.functions[0].name, "0xabc");

        let report = latency(&trace(vec![(7, Vec::new())]));
        assert_eq!(report.functions, Vec::new());
        assert_eq!(report.per_thread, vec![(7, Vec::new())]);
        assert_eq!(report.table(10), format!("{}\n", TABLE_HEADERS.join("  ")));
    }

    #[test]
    fn large_durations_use_the_histogram() {
        let events: Vec<GraphEvent> = (0..100u64)
            .flat_map(|call| {
                let start = call * 10_000_000;
                // Durations 1 ms, 2 ms, ..., 100 ms: not exactly representable.
                [
                    entry(start, MAIN, 0),
                    exit(start + (call + 1) * 1_000_000, MAIN, 0),
                ]
            })
            .collect();
        let stats = &latency(&trace(vec![(7, events)])).functions[0];
        assert_eq!(stats.calls, 100);
        assert_eq!(stats.total_ns, 5_050_000_000);
        assert_eq!(
            (stats.min_ns, stats.max_ns, stats.mean_ns),
            (1_000_000, 100_000_000, 50_500_000)
        );
        for (reported, exact) in [
            (stats.p50_ns, 50_000_000),
            (stats.p90_ns, 90_000_000),
            (stats.p99_ns, 99_000_000),
        ] {
            let error = (reported as f64 - exact as f64).abs() / exact as f64;
            assert!(
                error <= super::super::MAX_RELATIVE_ERROR,
                "{reported} vs {exact}"
            );
        }
    }

    #[test]
    fn table_layout() {
        let mut events = nested_events();
        // A second, long main call, to exercise the units.
        events.extend([entry(1_000, MAIN, 0), exit(1_500_001_000, MAIN, 0)]);
        let report = latency(&trace(vec![(7, events)]));
        let expected = "\
calls   total    self     avg     min     p50     p90     p99     max  function
    2  1.50 s  1.50 s  750 ms  200 ns  200 ns  1.50 s  1.50 s  1.50 s  demo::main
    1  100 ns   70 ns  100 ns  100 ns  100 ns  100 ns  100 ns  100 ns  demo::tokenize
    2   30 ns   30 ns   15 ns   10 ns   10 ns   20 ns   20 ns   20 ns  demo::next
    1   30 ns   30 ns   30 ns   30 ns   30 ns   30 ns   30 ns   30 ns  demo::parse
";
        assert_eq!(report.table(usize::MAX), expected);

        let expected_top = "\
calls   total    self     avg     min     p50     p90     p99     max  function
    2  1.50 s  1.50 s  750 ms  200 ns  200 ns  1.50 s  1.50 s  1.50 s  demo::main
... 3 more functions
";
        assert_eq!(report.table(1), expected_top);
    }

    #[test]
    fn table_aligns_micro_sign_by_characters() {
        let report = LatencyReport {
            functions: vec![
                stats(
                    PARSE,
                    "demo::parse",
                    12,
                    15_040,
                    1_250,
                    999,
                    2_000,
                    1_253,
                    [1_250, 1_500, 2_000],
                ),
                stats(NEXT, "demo::next", 1_000, 900, 900, 1, 1, 1, [1; 3]),
            ],
            ..LatencyReport::default()
        };
        let expected = "\
calls    total     self      avg     min      p50      p90      p99      max  function
   12  15.0 µs  1.25 µs  1.25 µs  999 ns  1.25 µs  1.50 µs  2.00 µs  2.00 µs  demo::parse
 1000   900 ns   900 ns     1 ns    1 ns     1 ns     1 ns     1 ns     1 ns  demo::next
";
        assert_eq!(report.table(10), expected);
    }

    #[test]
    fn human_durations() {
        let cases = [
            (0, "0 ns"),
            (999, "999 ns"),
            (1_000, "1.00 µs"),
            (1_250, "1.25 µs"),
            (1_255, "1.26 µs"),
            (9_995, "10.0 µs"),
            (12_345, "12.3 µs"),
            (999_499, "999 µs"),
            (999_500, "1.00 ms"),
            (31_400_000, "31.4 ms"),
            (1_234_567_890, "1.23 s"),
            (999_600_000_000, "1000 s"),
            (3_456_000_000_000, "3460 s"),
            (u64::MAX, "18400000000 s"),
        ];
        for (ns, text) in cases {
            assert_eq!(human_duration(ns), text, "{ns} ns");
        }
    }
}
