//! `--hist GLOB` of `fntrace report` and `fntrace ctl PID profile`: the
//! latency distribution of each function matching GLOB, as bcc's
//! `funclatency` prints one (log2 rows of `[lo, hi)` nanoseconds, counts,
//! bars), or finer with `--hist-buckets N`. A recorded trace and a live
//! profile count calls in the same histogram, so both print the same rows.

use std::io::{self, Write};

use clap::Args;
use fntrace_tools::analysis::{distribution, distribution_text, human_duration, LatencyReport};
use fntrace_tools::glob;

use super::output::Output;

/// `--hist` and `--hist-buckets`.
#[derive(Clone, Debug, Default, Args)]
pub struct HistArgs {
    /// Instead of the table, the latency distribution of each function
    /// matching GLOB: one row per power of two of nanoseconds, `[lo, hi)`,
    /// with its count of calls (exact) and a bar.
    #[arg(long, value_name = "GLOB")]
    pub hist: Option<String>,
    /// With --hist: split each power of two into N rows of equal width (1,
    /// 2, 4 … 128; runs of empty rows then print as one).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "hist",
          value_parser = parse_buckets)]
    pub hist_buckets: u32,
}

/// `--hist-buckets`: a power of two from 1 to 128 (the histogram's own
/// buckets per power of two: rows finer than those would be made up).
fn parse_buckets(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if n.is_power_of_two() && n <= 128 => Ok(n),
        _ => Err(format!("{text}: a power of two from 1 to 128")),
    }
}

/// Fails, naming the closest names, when `pattern` matches no row of
/// `report` (`place` says where the rows come from).
pub fn check(report: &LatencyReport, pattern: &str, place: &str) -> Result<(), String> {
    let names = || report.functions.iter().map(|f| f.name.as_str());
    if names().any(|name| glob::matches(pattern, name)) {
        return Ok(());
    }
    Err(super::no_match("--hist", pattern, place, names()))
}

/// Writes the distribution of each row of `report` matching `pattern`, in
/// the report's order (largest total first), a blank line between two;
/// `unfinished` names the calls without an exit (`unfinished`, or
/// `running` in a live profile).
pub fn write(
    report: &LatencyReport,
    pattern: &str,
    buckets: u32,
    unfinished: &str,
    out: &mut Output,
) -> io::Result<()> {
    let matching = report
        .functions
        .iter()
        .filter(|f| glob::matches(pattern, &f.name));
    for (index, stats) in matching.enumerate() {
        if index > 0 {
            writeln!(out)?;
        }
        let mut line = format!("# {}: {} calls", stats.name, stats.calls);
        if stats.calls > 0 {
            line += &format!(
                ", p50 {}, p90 {}, p99 {}, max {}",
                human_duration(stats.p50_ns),
                human_duration(stats.p90_ns),
                human_duration(stats.p99_ns),
                human_duration(stats.max_ns)
            );
        }
        if stats.unfinished > 0 {
            line += &format!(" ({} {unfinished}, not counted below)", stats.unfinished);
        }
        writeln!(out, "{}", out.bold(&line))?;
        if let Some(durations) = report.durations.get(&stats.function) {
            let rows = distribution(durations, buckets);
            out.write_all(distribution_text(&rows, buckets > 1).as_bytes())?;
        }
    }
    Ok(())
}
