//! Per-function latency statistics: calls, inclusive and self time, and the
//! distribution of call durations, per thread and across threads, one row
//! per function name as `uftrace report` shows them. See [`latency`] for
//! what is measured and how recursion counts.

use super::fxhash::FxHashMap as HashMap;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::histogram::Histogram;
use super::pairing::{duration_ns, CallStep, Calls, Reading};
use crate::source::{infallible, EventSource};
use crate::trace::{GraphEvent, Trace};

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
    /// The durations of each row of [`functions`](Self::functions)' calls,
    /// by its [`function`](FunctionStats::function) (unique per row): what
    /// its quantiles were taken from, for
    /// [`distribution`](super::distribution()).
    pub durations: BTreeMap<usize, Histogram>,
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

/// What a trace lacks, said above every report of it: events lost while
/// recording, and calls without an exit ([`LatencyReport::shortfall`], and
/// the CLI's call tree's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shortfall {
    /// Events lost while recording, all threads.
    pub lost_events: u64,
    /// The threads that lost events (thread id, events lost), in the
    /// trace's order.
    pub lost_by_thread: Vec<(u32, u64)>,
    /// Calls whose exit was not recorded.
    pub unfinished_calls: u64,
    /// Of those, the calls still open when their thread's events ended.
    pub still_running_calls: u64,
    /// Of those, the calls left while their thread went on (unwound by a
    /// panic or `longjmp`, or their exit lost).
    pub unwound_calls: u64,
    /// Per function name, its calls without an exit: most first, ties by
    /// name.
    pub unfinished_by_function: Vec<(String, u64)>,
}

impl Shortfall {
    /// Sorts [`unfinished_by_function`](Self::unfinished_by_function) into
    /// its order.
    pub fn sort(&mut self) {
        self.unfinished_by_function
            .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    }
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
        FunctionStats::from_durations(
            function,
            name,
            &self.inclusive,
            self.total_ns,
            self.self_ns,
            self.unfinished,
        )
    }
}

impl FunctionStats {
    /// The statistics of completed calls whose durations are `durations`:
    /// `total_ns` and `self_ns` as defined on the fields, `unfinished` calls
    /// without their exit. What a live profile
    /// ([`ProfileSnapshot`](super::ProfileSnapshot)) hands to the same
    /// tables as a recorded trace.
    pub fn from_durations(
        function: usize,
        name: String,
        durations: &Histogram,
        total_ns: u64,
        self_ns: u64,
        unfinished: u64,
    ) -> FunctionStats {
        FunctionStats {
            function,
            name,
            calls: durations.count(),
            unfinished,
            total_ns,
            self_ns,
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
/// use fntrace_format::{analysis, EventKind, GraphEvent, ThreadTrace, Trace};
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

/// What one thread's read adds to a [`LatencyReport`].
#[derive(Default)]
pub(super) struct ThreadDurations {
    functions: HashMap<usize, FunctionDurations>,
    events: u64,
    unfinished_calls: u64,
    unwound_calls: u64,
    still_running_calls: u64,
    unmatched_exits: u64,
}

impl ThreadDurations {
    /// Pairs one thread's `events` and measures its calls.
    pub(super) fn of(events: &mut dyn Iterator<Item = GraphEvent>) -> ThreadDurations {
        let mut thread = ThreadDurations::default();
        let mut count = 0u64;
        let counted = events.inspect(|_| count += 1);
        for step in Calls::streaming(counted, Vec::new(), Reading::Reports) {
            match step {
                CallStep::Entered { entry, .. } => {
                    thread.functions.entry(entry.function).or_default().open += 1;
                }
                CallStep::Returned {
                    entry,
                    exit,
                    children_ns,
                    ..
                } => {
                    let inclusive_ns = duration_ns(&entry, &exit);
                    let function = thread.functions.entry(entry.function).or_default();
                    let nested = function.close();
                    function.record(
                        inclusive_ns,
                        inclusive_ns.saturating_sub(children_ns),
                        nested,
                    );
                }
                CallStep::Unfinished { entry, unwound_by } => {
                    let function = thread.functions.entry(entry.function).or_default();
                    function.close();
                    function.unfinished += 1;
                    thread.unfinished_calls += 1;
                    if unwound_by.is_some() {
                        thread.unwound_calls += 1;
                    } else {
                        thread.still_running_calls += 1;
                    }
                }
                CallStep::UnmatchedExit { .. } => thread.unmatched_exits += 1,
            }
        }
        thread.events = count;
        thread
    }
}

/// [`latency_of`] with the functions made into `rows`: by name (as
/// [`latency_of`]) or by address. (For threads read side by side, see
/// [`parallel::latency_of_with`](super::parallel::latency_of_with).)
pub fn latency_of_with<S: EventSource>(source: &S, rows: Rows) -> Result<LatencyReport, S::Error> {
    let per_thread =
        super::threads::map_threads_here(source, |_, events| ThreadDurations::of(events))?;
    Ok(latency_from(source, rows, per_thread))
}

/// The report of `source` whose threads' calls, in thread order, are
/// `per_thread` (with each thread's lost events).
pub(super) fn latency_from<S: EventSource>(
    source: &S,
    rows: Rows,
    per_thread: Vec<(ThreadDurations, u64)>,
) -> LatencyReport {
    let mut report = LatencyReport::default();
    let mut merged: HashMap<usize, FunctionDurations> = HashMap::default();
    for (thread, (durations, lost)) in source.threads().into_iter().zip(per_thread) {
        for (&function, calls) in &durations.functions {
            merged.entry(function).or_default().merge(calls);
        }
        report.unfinished_calls += durations.unfinished_calls;
        report.unwound_calls += durations.unwound_calls;
        report.still_running_calls += durations.still_running_calls;
        report.unmatched_exits += durations.unmatched_exits;
        let (stats, _) = sorted_stats(source, &durations.functions, rows);
        report.per_thread.push((thread.tid, stats));
        report.lost_events += lost;
        report.threads.push(ThreadSummary {
            tid: thread.tid,
            name: thread.name,
            events: durations.events,
            lost,
        });
    }
    (report.functions, report.durations) = sorted_stats(source, &merged, rows);
    report
}

/// Sorts rows as every latency table shows them: largest total first
/// (ties: by name, then address).
pub(crate) fn sort_rows(stats: &mut [FunctionStats]) {
    stats.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.function.cmp(&b.function))
    });
}

/// Statistics of each function in `functions` (by address), made into
/// `rows`, largest total first, and each row's durations by its address.
fn sorted_stats<S: EventSource>(
    source: &S,
    functions: &HashMap<usize, FunctionDurations>,
    rows: Rows,
) -> (Vec<FunctionStats>, BTreeMap<usize, Histogram>) {
    let (mut stats, durations): (Vec<FunctionStats>, BTreeMap<usize, Histogram>) = match rows {
        Rows::ByAddress => functions
            .iter()
            .map(|(&function, durations)| {
                let stats = durations.stats(function, source.name_of(function));
                (stats, (function, durations.inclusive.clone()))
            })
            .unzip(),
        Rows::ByName => {
            // Name → lowest address and the merged durations.
            let mut by_name: HashMap<String, (usize, FunctionDurations)> = HashMap::default();
            for (&function, durations) in functions {
                let row = by_name
                    .entry(source.name_of(function))
                    .or_insert_with(|| (function, FunctionDurations::default()));
                row.0 = row.0.min(function);
                row.1.merge(durations);
            }
            by_name
                .into_iter()
                .map(|(name, (function, durations))| {
                    let stats = durations.stats(function, name);
                    (stats, (function, durations.inclusive))
                })
                .unzip()
        }
    };
    sort_rows(&mut stats);
    (stats, durations)
}

/// Column headers of [`LatencyReport::table`]; all but the last are
/// right-aligned durations (or counts).
const TABLE_HEADERS: [&str; 10] = [
    "calls", "total", "self", "avg", "min", "p50", "p90", "p99", "max", "function",
];

impl LatencyReport {
    /// What the trace lacks: lost events and calls without an exit.
    pub fn shortfall(&self) -> Shortfall {
        let mut unfinished = HashMap::<&str, u64>::default();
        for stats in self.functions.iter().filter(|stats| stats.unfinished > 0) {
            *unfinished.entry(&stats.name).or_default() += stats.unfinished;
        }
        let mut shortfall = Shortfall {
            lost_events: self.lost_events,
            lost_by_thread: (self.threads.iter())
                .filter(|thread| thread.lost > 0)
                .map(|thread| (thread.tid, thread.lost))
                .collect(),
            unfinished_calls: self.unfinished_calls,
            still_running_calls: self.still_running_calls,
            unwound_calls: self.unwound_calls,
            unfinished_by_function: (unfinished.into_iter())
                .map(|(name, calls)| (name.to_string(), calls))
                .collect(),
        };
        shortfall.sort();
        shortfall
    }

    /// The merged statistics as an aligned text table, largest total first,
    /// at most `limit` function rows (`usize::MAX` for all).
    ///
    /// Columns: `calls total self avg min p50 p90 p99 max function`, two
    /// spaces apart, numbers right-aligned, each column as wide as its widest
    /// cell. Durations are in ns, µs, ms or s with three significant digits
    /// (`812 ns`, `1.25 µs`, `31.4 ms`, `2.00 s`). When events were lost, a
    /// first line starting with `#` says how many, before anything else: the
    /// counts below miss their calls. A line `# durations: wall-clock time,
    /// blocked time included` ([`WALL_TIME`](super::WALL_TIME)) comes before
    /// the column headers. When rows were left out, a last line
    /// says how many. Every line ends with `\n`.
    pub fn table(&self, limit: usize) -> String {
        let mut out = String::new();
        if self.lost_events > 0 {
            out.push_str(&format!(
                "# {} events lost while recording (buffers full): the calls they belonged to are missing below\n",
                self.lost_events
            ));
        }
        out.push_str(&format!("# durations: {}\n", super::WALL_TIME));
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
mod tests;
