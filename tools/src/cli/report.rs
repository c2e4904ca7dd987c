//! `fntrace report` and `fntrace diff`: per-function tables, with what the
//! trace is missing (lost events, calls without an exit) stated before the
//! numbers it affects.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::io::{self, Write};

use fntrace_tools::analysis::{self, FunctionStats, LatencyReport, Rows, Shortfall};
use fntrace_tools::export::ExportError;
use fntrace_tools::EventSource;

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::output::Output;
use super::select::SelectArgs;

pub(super) const REPORT_HELP: &str = "\
Columns: calls (completed), unfinished (entered, exit not recorded: still
running when the trace ended, or unwound), total (summed durations, callees
included; a call nested in a call of the same function, as in recursion,
adds nothing: its time is in the outer call's, as uftrace counts it), self
(each call's duration minus its completed direct callees'), avg, min, p50,
p90, p99 (nearest rank, within 0.4%: the live profile's histogram, so a trace
and a profile of the same calls agree), max (of every call, nested ones
included). One row per function
name, as uftrace's (two static functions called `helper` are one row);
--by-address splits them. Times in ns, µs, ms, s. Lost events and unfinished
calls are stated above the table: the numbers below them are missing what was
lost.

A live profile's snapshot (a file, from `fntrace ctl PID profile --save`)
gives the same table; its `running` column counts calls entered and not
returned, and -F/-N select rows by name (it keeps no calls).

Examples:
  fntrace report trace-dir                        sorted by total time
  fntrace report trace-dir -s self --top 10       the 10 largest self times
  fntrace report trace-dir -s calls -F 'demo::*'  inside demo's functions
  fntrace report trace-dir --threads --tid 4242   one thread's table
  fntrace report trace-dir --hist 'demo::parse*'  its latency distribution
  fntrace report trace-dir --hist parse --hist-buckets 8   8 rows per power of 2
  fntrace report trace-dir --by-arg arg1 -F handle_get    its calls by first argument";

pub(super) const DIFF_HELP: &str = "\
Rows match functions by name. Changes are DIR2 minus DIR1; percentages are of
DIR1's value. Sorted by the largest change of the first --sort key.

Examples:
  fntrace diff before after
  fntrace diff before after -s self --top 20";

/// `fntrace report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The trace directory, or a live profile's snapshot (`fntrace ctl
    /// PID profile --save FILE`).
    #[arg(value_name = "DIR|SNAPSHOT")]
    pub dir: PathBuf,
    /// Sort by these keys, largest first (the next key breaks ties);
    /// repeatable or comma-separated.
    #[arg(
        short,
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "total"
    )]
    pub sort: Vec<SortKey>,
    /// One table per thread instead of one for the process.
    #[arg(long, conflicts_with = "hist")]
    pub threads: bool,
    /// At most N rows (per table).
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// One row per function address: functions of the same name (static
    /// functions of several files, folded code) apart.
    #[arg(long)]
    pub by_address: bool,
    /// One row per distinct value of the recorded VALUE (`arg1`, `fparg1`,
    /// `retval`, as `fntrace replay` shows it) of the functions -F
    /// selects: calls, total, avg, p50, p99 of each, the --top (10) with
    /// the most total time, then `other` for the rest.
    #[arg(long, value_name = "VALUE", requires = "filter",
          conflicts_with_all = ["hist", "threads", "by_address"])]
    pub by_arg: Option<String>,
    /// The latency distribution of functions instead of the table.
    #[command(flatten)]
    pub hist: super::hist::HistArgs,
    /// Which calls.
    #[command(flatten)]
    pub select: SelectArgs,
}

/// A column of the report to sort by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    /// Time in the function, callees included (a call nested in a call of
    /// the same function counted once, in the outer one).
    Total,
    /// Summed self time.
    #[value(name = "self")]
    SelfTime,
    /// Completed calls.
    Calls,
    /// Mean duration.
    Avg,
    /// Shortest call.
    Min,
    /// Longest call.
    Max,
    /// Median duration.
    P50,
    /// 90th percentile duration.
    P90,
    /// 99th percentile duration.
    P99,
}

/// `fntrace diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The trace before.
    pub dir1: PathBuf,
    /// The trace after.
    pub dir2: PathBuf,
    /// Sort by the change of these keys (total, self or calls).
    #[arg(
        short,
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "total"
    )]
    pub sort: Vec<SortKey>,
    /// At most N rows.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Which calls (in both traces).
    #[command(flatten)]
    pub select: SelectArgs,
}

/// What a table is made from: the process and the latency report of its
/// selected calls.
pub struct TraceReport {
    /// Executable path.
    pub exe: String,
    /// Process id.
    pub pid: u32,
    /// The statistics, with what was read of each thread.
    pub latency: LatencyReport,
}

impl TraceReport {
    /// Reads `source` once for its report, its functions made into `rows`.
    pub fn of<S: EventSource<Error = ExportError> + Sync>(
        source: &S,
        rows: Rows,
    ) -> Result<TraceReport, String> {
        Ok(TraceReport {
            exe: source.exe().to_string(),
            pid: source.pid(),
            latency: analysis::parallel::latency_of_with(source, rows)
                .map_err(|e| e.to_string())?,
        })
    }
}

/// Writes the lines that say what the trace lacks: events lost (per
/// thread) and calls without an exit. Nothing when it lacks nothing.
pub fn write_lost_and_unfinished(shortfall: &Shortfall, out: &mut Output) -> io::Result<()> {
    if shortfall.lost_events > 0 {
        let threads: Vec<String> = (shortfall.lost_by_thread.iter())
            .map(|(tid, lost)| format!("thread {tid} lost {lost}"))
            .collect();
        let line = format!(
            "# {} events were lost while recording (buffers full, or a directory that could not be written: {}); the numbers below lack them",
            shortfall.lost_events,
            threads.join(", ")
        );
        writeln!(out, "{}", out.warn(&line))?;
    }
    if shortfall.unfinished_calls > 0 {
        let unfinished = &shortfall.unfinished_by_function;
        let names: Vec<String> = (unfinished.iter().take(5))
            .map(|(name, calls)| format!("{name} ×{calls}"))
            .collect();
        let more = if unfinished.len() > 5 { ", …" } else { "" };
        let line = format!(
            "# {}: {}{more}",
            no_exit_summary(shortfall),
            names.join(", ")
        );
        writeln!(out, "{}", out.warn(&line))?;
    }
    Ok(())
}

/// `3 calls have no exit (1 still running when the trace ended, 2
/// unwound)`, what the exits of the unfinished calls became; when events
/// were lost, either kind may be a lost exit, and it says so.
fn no_exit_summary(shortfall: &Shortfall) -> String {
    let calls = match shortfall.unfinished_calls {
        1 => "1 call has".to_string(),
        n => format!("{n} calls have"),
    };
    let mut kinds = Vec::new();
    if shortfall.still_running_calls > 0 {
        kinds.push(format!(
            "{} still running when the trace ended",
            shortfall.still_running_calls
        ));
    }
    if shortfall.unwound_calls > 0 {
        kinds.push(format!(
            "{} unwound by a panic or longjmp",
            shortfall.unwound_calls
        ));
    }
    let lost = if shortfall.lost_events > 0 {
        "; or their exits were among the lost events"
    } else {
        ""
    };
    format!("{calls} no exit ({}{lost})", kinds.join(", "))
}

/// A flight recorder's snapshot: what the recorder lost and evicted over
/// its run, which its window alone does not show (from the recorder note
/// in `fntrace.txt`). Nothing for other traces.
fn write_flight_totals(dir: &std::path::Path, out: &mut Output) -> io::Result<()> {
    let notes = fntrace_tools::export::recorder_notes(dir).unwrap_or_default();
    for note in notes
        .iter()
        .filter(|n| n.iter().any(|(k, _)| k == "flight"))
    {
        let value = |key: &str| -> u64 {
            (note.iter().find(|(k, _)| k == key)).map_or(0, |(_, v)| v.parse().unwrap_or(0))
        };
        let (lost, evicted) = (value("flight_lost"), value("flight_evicted"));
        let line = format!(
            "# a flight recorder's window: over its run the recorder lost {lost} events ({} in \
             this window) and evicted {evicted} older ones",
            value("window_lost")
        );
        match lost {
            0 => writeln!(out, "{line}")?,
            _ => writeln!(out, "{}", out.warn(&line))?,
        }
    }
    Ok(())
}

/// `fntrace report`.
pub fn write_report(trace: TraceReport, args: &ReportArgs, out: &mut Output) -> io::Result<()> {
    // A flight recorder's snapshot says what fired it: that comes first.
    let fired = args.dir.join("trigger.txt");
    if std::fs::symlink_metadata(&fired).is_ok_and(|m| m.is_file()) {
        for line in std::fs::read_to_string(&fired)?.lines() {
            writeln!(out, "# {line}")?;
        }
    }
    let report = trace.latency;
    let events: u64 = report.threads.iter().map(|t| t.events).sum();
    // With a selection, the counts are the selection's, and say so.
    let select = &args.select;
    let mut selected: Vec<String> = Vec::new();
    selected.extend(select.filter.iter().map(|glob| format!("-F {glob}")));
    selected.extend(select.notrace.iter().map(|glob| format!("-N {glob}")));
    selected.extend(select.tid.iter().map(|tid| format!("--tid {tid}")));
    selected.extend(
        select
            .time_range
            .iter()
            .map(|r| format!("--time-range {r}")),
    );
    let of_selection = if selected.is_empty() {
        String::new()
    } else {
        format!(" selected by {}", selected.join(" "))
    };
    writeln!(
        out,
        "# {} (pid {}): {} threads, {events} events{of_selection}; durations: {}",
        trace.exe,
        trace.pid,
        report.threads.len(),
        fntrace_tools::analysis::WALL_TIME
    )?;
    write_lost_and_unfinished(&report.shortfall(), out)?;
    write_flight_totals(&args.dir, out)?;
    let top = args.top.unwrap_or(usize::MAX);
    if let Some(pattern) = &args.hist.hist {
        writeln!(out)?;
        return super::hist::write(&report, pattern, args.hist.hist_buckets, "unfinished", out);
    }
    if args.threads {
        for (tid, functions) in &report.per_thread {
            let thread = report.threads.iter().find(|t| t.tid == *tid);
            let name = thread.and_then(|t| t.name.as_deref()).unwrap_or("");
            writeln!(out, "\n{}", out.bold(&format!("thread {tid} {name}")))?;
            write_table(functions.clone(), &args.sort, top, out)?;
        }
        Ok(())
    } else {
        writeln!(out)?;
        write_table(report.functions, &args.sort, top, out)
    }
}

/// The value of `key` in `stats`.
fn key_value(stats: &FunctionStats, key: SortKey) -> u64 {
    match key {
        SortKey::Total => stats.total_ns,
        SortKey::SelfTime => stats.self_ns,
        SortKey::Calls => stats.calls,
        SortKey::Avg => stats.mean_ns,
        SortKey::Min => stats.min_ns,
        SortKey::Max => stats.max_ns,
        SortKey::P50 => stats.p50_ns,
        SortKey::P90 => stats.p90_ns,
        SortKey::P99 => stats.p99_ns,
    }
}

/// Column headers of the report table.
const HEADERS: [&str; 11] = [
    "calls",
    "unfinished",
    "total",
    "self",
    "avg",
    "min",
    "p50",
    "p90",
    "p99",
    "max",
    "function",
];

/// One table, sorted by `keys` (largest first, then by name).
fn write_table(
    functions: Vec<FunctionStats>,
    keys: &[SortKey],
    top: usize,
    out: &mut Output,
) -> io::Result<()> {
    write_rows(functions, keys, top, "unfinished", out)
}

/// The report's table of `functions`, sorted by `keys` (largest first,
/// then by name), at most `top` rows; `second_column` heads the column of
/// calls without an exit (`unfinished` in a trace, `running` in a live
/// profile).
pub fn write_rows(
    mut functions: Vec<FunctionStats>,
    keys: &[SortKey],
    top: usize,
    second_column: &str,
    out: &mut Output,
) -> io::Result<()> {
    functions.sort_by(|a, b| {
        keys.iter()
            .map(|&key| key_value(b, key).cmp(&key_value(a, key)))
            .find(|order| order.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.name.cmp(&b.name))
    });
    let rows: Vec<Vec<String>> = functions
        .iter()
        .take(top)
        .map(|s| {
            // A function with only unfinished calls has no durations.
            let time = |ns| {
                if s.calls == 0 {
                    "-".to_string()
                } else {
                    duration(ns)
                }
            };
            vec![
                s.calls.to_string(),
                s.unfinished.to_string(),
                time(s.total_ns),
                time(s.self_ns),
                time(s.mean_ns),
                time(s.min_ns),
                time(s.p50_ns),
                time(s.p90_ns),
                time(s.p99_ns),
                time(s.max_ns),
                s.name.clone(),
            ]
        })
        .collect();
    let mut headers: Vec<String> = HEADERS.iter().map(|h| h.to_string()).collect();
    headers[1] = second_column.to_string();
    write_aligned(&headers, &rows, out)?;
    let left_out = functions.len().saturating_sub(top);
    if left_out > 0 {
        writeln!(out, "... {left_out} more (--top)")?;
    }
    Ok(())
}

/// Writes `headers` (bold) and `rows` with every column but the last
/// right-aligned to its widest cell, two spaces apart.
fn write_aligned(headers: &[String], rows: &[Vec<String>], out: &mut Output) -> io::Result<()> {
    let mut lines = aligned_lines(headers, rows).into_iter();
    if let Some(header) = lines.next() {
        writeln!(out, "{}", out.bold(&header))?;
    }
    for line in lines {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// The lines of a table: `headers`, then `rows`, every column but the last
/// right-aligned to its widest cell, two spaces apart.
pub fn aligned_lines(headers: &[String], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |row: &[String]| {
        let (last, numbers) = row.split_last().expect("columns");
        let mut text = String::new();
        for (cell, &width) in numbers.iter().zip(&widths) {
            text.push_str(&format!("{cell:>width$}  "));
        }
        text.push_str(last);
        text
    };
    std::iter::once(headers)
        .chain(rows.iter().map(Vec::as_slice))
        .map(line)
        .collect()
}

/// A duration as the report shows it: three significant digits.
fn duration(ns: u64) -> String {
    fntrace_tools::analysis::human_duration(ns)
}

/// `fntrace diff`.
pub fn write_diff(
    before: TraceReport,
    after: TraceReport,
    args: &DiffArgs,
    out: &mut Output,
) -> io::Result<()> {
    writeln!(out, "# before: {} (pid {})", before.exe, before.pid)?;
    writeln!(out, "# after:  {} (pid {})", after.exe, after.pid)?;
    // What each trace lacks, told apart: events lost while recording,
    // calls still running at its end, calls unwound.
    for (label, trace) in [("before", &before), ("after", &after)] {
        if trace.latency.lost_events > 0 {
            let line = format!(
                "# {label}: {} events were lost while recording (buffers full)",
                trace.latency.lost_events
            );
            writeln!(out, "{}", out.warn(&line))?;
        }
        if trace.latency.unfinished_calls > 0 {
            let line = format!("# {label}: {}", no_exit_summary(&trace.latency.shortfall()));
            writeln!(out, "{}", out.warn(&line))?;
        }
    }
    // Functions with calls in a trace, completed or not: a function whose
    // calls all lack their exit is not gone.
    let present = |trace: &TraceReport| -> std::collections::HashSet<String> {
        trace
            .latency
            .functions
            .iter()
            .map(|stats| stats.name.clone())
            .collect()
    };
    let (was, is) = (present(&before), present(&after));
    let by_name = |trace: TraceReport| -> HashMap<String, FunctionStats> {
        trace
            .latency
            .functions
            .into_iter()
            .map(|stats| (stats.name.clone(), stats))
            .collect()
    };
    let (old, new) = (by_name(before), by_name(after));
    let mut names: Vec<&String> = old.keys().chain(new.keys()).collect();
    names.sort();
    names.dedup();
    let value = |map: &HashMap<String, FunctionStats>, name: &String, key| {
        map.get(name).map_or(0, |stats| key_value(stats, key))
    };
    let change = |name: &String, key| -> i128 {
        i128::from(value(&new, name, key)) - i128::from(value(&old, name, key))
    };
    let key = args.sort.first().copied().unwrap_or(SortKey::Total);
    names.sort_by_key(|name| Reverse(change(name, key).unsigned_abs()));
    let top = args.top.unwrap_or(usize::MAX);
    let rows: Vec<Vec<String>> = names
        .iter()
        .take(top)
        .map(|name| {
            let mut row = Vec::new();
            for key in [SortKey::Calls, SortKey::Total, SortKey::SelfTime] {
                let (a, b) = (value(&old, name, key), value(&new, name, key));
                let show = |v: u64| {
                    if key == SortKey::Calls {
                        v.to_string()
                    } else {
                        duration(v)
                    }
                };
                let delta = change(name, key);
                let sign = if delta < 0 { "-" } else { "+" };
                row.push(show(a));
                row.push(show(b));
                row.push(format!("{sign}{}", show(delta.unsigned_abs() as u64)));
                row.push(percent(a, b, was.contains(*name), is.contains(*name)));
            }
            row.push((*name).clone());
            row
        })
        .collect();
    let headers: Vec<String> = [
        "calls", "→", "Δcalls", "%", "total", "→", "Δtotal", "%", "self", "→", "Δself", "%",
        "function",
    ]
    .iter()
    .map(|h| h.to_string())
    .collect();
    writeln!(out)?;
    write_aligned(&headers, &rows, out)?;
    let left_out = names.len().saturating_sub(top);
    if left_out > 0 {
        writeln!(out, "... {left_out} more (--top)")?;
    }
    Ok(())
}

/// The change from `a` to `b` in percent of `a`: `new` or `gone` when the
/// function was called in one trace only, `no exit` when it was called in
/// both but its calls lack their exits in one (nothing measured there).
fn percent(a: u64, b: u64, was_called: bool, is_called: bool) -> String {
    match (a, b) {
        (0, 0) => "0%".to_string(),
        (0, _) if was_called => "no exit".to_string(),
        (0, _) => "new".to_string(),
        (_, 0) if is_called => "no exit".to_string(),
        (_, 0) => "gone".to_string(),
        _ => format!("{:+.1}%", (b as f64 - a as f64) * 100.0 / a as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_without_exits_is_not_gone() {
        assert_eq!(percent(10, 0, true, true), "no exit");
        assert_eq!(percent(10, 0, true, false), "gone");
        assert_eq!(percent(0, 10, true, true), "no exit");
        assert_eq!(percent(0, 10, false, true), "new");
        assert_eq!(percent(10, 15, true, true), "+50.0%");
    }

    #[test]
    fn unfinished_calls_are_told_apart() {
        let mut report = Shortfall {
            unfinished_calls: 3,
            still_running_calls: 1,
            unwound_calls: 2,
            ..Shortfall::default()
        };
        assert_eq!(
            no_exit_summary(&report),
            "3 calls have no exit (1 still running when the trace ended, 2 unwound by a \
             panic or longjmp)"
        );
        report.lost_events = 7;
        assert!(no_exit_summary(&report).ends_with("; or their exits were among the lost events)"));
    }
}
