//! The runtime future linker's rows in `/metrics` (a process recording
//! with `fntrace record --async`'s values): per async function, the
//! futures completed and the histogram of their latency, first poll to
//! Ready (`fntrace_future_latency_seconds`, the power-of-two buckets of
//! [`DURATION_BUCKETS_NS`], exact), their time in polls
//! (`fntrace_future_busy_seconds`), and the futures the linker's table
//! had no room for (`fntrace_futures_untracked`).

use std::fmt::{self, Write};

use super::exposition::TextFormat;
use super::openmetrics::{canonical_seconds, escape, header, seconds, DURATION_BUCKETS_NS};

/// Buckets of [`FutureRow::buckets`]: bucket 0 holds latencies of 0 ns,
/// bucket `i` those in `[2^(i-1), 2^i)` ns.
pub const FUTURE_BUCKETS: usize = 65;

/// The bucket of [`FutureRow::buckets`] a latency of `ns` goes in.
pub fn future_bucket(ns: u64) -> usize {
    (64 - ns.leading_zeros()) as usize
}

/// One async function's completed futures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FutureRow {
    /// The resume function's demangled name (`kv::serve::{closure#0}`).
    pub function: String,
    /// Futures that returned Ready.
    pub completed: u64,
    /// Their polls.
    pub polls: u64,
    /// Their latency, summed (ns).
    pub latency_ns: u64,
    /// Their time in polls, summed (ns).
    pub busy_ns: u64,
    /// Their latencies by [`future_bucket`].
    pub buckets: [u64; FUTURE_BUCKETS],
}

/// `text` (an exposition ending with `# EOF`) with the futures' families
/// before its end.
pub fn with_future_metrics(
    mut text: String,
    rows: &[FutureRow],
    untracked: u64,
    format: TextFormat,
) -> String {
    let end = text.rfind("# EOF").unwrap_or(text.len());
    let eof = text.split_off(end);
    // Writing into a String cannot fail.
    let _ = write_future_metrics(rows, untracked, format, &mut text);
    text.push_str(&eof);
    text
}

/// `help` of each family.
const LATENCY_HELP: &str = "Latency of the completed futures of each async function, from the entry of their first poll to the exit of the poll that returned Ready (fntrace record --async).";
const BUSY_HELP: &str = "Time the completed futures of each async function spent in their polls.";
const UNTRACKED_HELP: &str =
    "Futures first polled while the runtime future linker's table was full: in no row.";

/// The futures' families, in `format`.
pub fn write_future_metrics(
    rows: &[FutureRow],
    untracked: u64,
    format: TextFormat,
    out: &mut impl Write,
) -> fmt::Result {
    let family = "fntrace_future_latency_seconds";
    header(out, family, "histogram", true, LATENCY_HELP)?;
    for row in rows {
        let label = escape(&row.function);
        let mut below = 0;
        let mut next = 0;
        for &bound in &DURATION_BUCKETS_NS {
            // Bucket i holds values below 2^i: those below the bound.
            while next < FUTURE_BUCKETS && (next == 0 || 1u64 << (next - 1) < bound) {
                below += row.buckets[next];
                next += 1;
            }
            let le = canonical_seconds(bound);
            writeln!(
                out,
                "{family}_bucket{{function=\"{label}\",le=\"{le}\"}} {below}"
            )?;
        }
        let count = row.completed;
        writeln!(
            out,
            "{family}_bucket{{function=\"{label}\",le=\"+Inf\"}} {count}"
        )?;
        writeln!(
            out,
            "{family}_sum{{function=\"{label}\"}} {}",
            seconds(row.latency_ns)
        )?;
        writeln!(out, "{family}_count{{function=\"{label}\"}} {count}")?;
    }
    let family = "fntrace_future_busy_seconds";
    header(out, family, "summary", true, BUSY_HELP)?;
    for row in rows {
        let label = escape(&row.function);
        writeln!(
            out,
            "{family}_sum{{function=\"{label}\"}} {}",
            seconds(row.busy_ns)
        )?;
        writeln!(
            out,
            "{family}_count{{function=\"{label}\"}} {}",
            row.completed
        )?;
    }
    let family = "fntrace_futures_untracked";
    let sample = format!("{family}_total");
    let named = match format {
        TextFormat::OpenMetrics => family,
        TextFormat::Prometheus => &sample,
    };
    header(out, named, "counter", false, UNTRACKED_HELP)?;
    writeln!(out, "{sample} {untracked}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Latencies counted below each bound exactly, in the families'
    /// order, before `# EOF`.
    #[test]
    fn futures_families_before_the_end() {
        let mut buckets = [0; FUTURE_BUCKETS];
        // 100 ns, 128 ns (not below 2^7), 30 ms, twice.
        for ns in [100, 128, 30_000_000, 30_000_000] {
            buckets[future_bucket(ns)] += 1;
        }
        let row = FutureRow {
            function: "a::serve::{closure#0}".into(),
            completed: 4,
            polls: 16,
            latency_ns: 60_000_228,
            busy_ns: 1_500,
            buckets,
        };
        let text = with_future_metrics("x 1\n# EOF\n".into(), &[row], 2, TextFormat::Prometheus);
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix} in:\n{text}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        };
        let bucket = |le: &str| {
            line(&format!(
                "fntrace_future_latency_seconds_bucket{{function=\"a::serve::{{closure#0}}\",le=\"{le}\"}}"
            ))
        };
        assert_eq!(bucket("1.28e-07"), "1");
        assert_eq!(bucket("2.56e-07"), "2");
        assert_eq!(bucket("0.016777216"), "2");
        assert_eq!(bucket("0.033554432"), "4");
        assert_eq!(bucket("+Inf"), "4");
        assert_eq!(line("fntrace_future_latency_seconds_sum"), "0.060000228");
        assert_eq!(line("fntrace_future_busy_seconds_sum"), "0.0000015");
        assert_eq!(line("fntrace_futures_untracked_total"), "2");
        assert!(
            text.starts_with("x 1\n") && text.ends_with("\n# EOF\n"),
            "{text}"
        );
    }
}
