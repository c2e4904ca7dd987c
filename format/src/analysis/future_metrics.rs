//! The runtime future linker's rows in `/metrics` (a process recording
//! with `fntrace record --async`'s values): per async function, the
//! futures completed and the histogram of their latency, first poll to
//! Ready (`fntrace_future_latency_seconds`, the power-of-two buckets of
//! [`DURATION_BUCKETS_NS`], exact), their time in polls
//! (`fntrace_future_busy_seconds`), those dropped before Ready
//! (`fntrace_futures_dropped`), the futures the linker's table had no
//! room for (`fntrace_futures_untracked`) and those it follows now
//! (`fntrace_futures_pending`). The same rows, one line each, ride on the
//! control socket's `profile` reply ([`FutureRow::to_line`]).

use std::fmt::{self, Write};

use super::exposition::TextFormat;
use super::openmetrics::{canonical_seconds, escape, header, seconds, DURATION_BUCKETS_NS};

/// Buckets per power of two of [`FutureRow::buckets`]: a quantile is
/// within 1/16 (6.25 %) of the latency it stands for.
const SUB: usize = 8;

/// Buckets of [`FutureRow::buckets`]: one per ns below 8, then 8 for each
/// power of two from 2^3 to 2^63 (log-linear).
pub const FUTURE_BUCKETS: usize = (64 - 2) * SUB;

/// The bucket of [`FutureRow::buckets`] a latency of `ns` goes in.
pub fn future_bucket(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let exponent = 63 - ns.leading_zeros() as usize;
    let sub = (ns >> (exponent - 3)) as usize & (SUB - 1);
    (exponent - 2) * SUB + sub
}

/// The lowest latency of bucket `index`, and its width.
pub(super) fn bucket_bounds(index: usize) -> (u64, u64) {
    if index < SUB {
        return (index as u64, 1);
    }
    let exponent = index / SUB + 2;
    let width = 1u64 << (exponent - 3);
    ((1u64 << exponent) + (index % SUB) as u64 * width, width)
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
    /// Futures dropped before Ready (seen by their drop function, or by a
    /// new future's first poll at their address): in no other count.
    pub dropped: u64,
}

impl FutureRow {
    /// The latency at quantile `q` (0 to 1, nearest rank) as its bucket's
    /// middle; 0 with no future.
    pub fn quantile(&self, q: f64) -> u64 {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (index, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (lowest, width) = bucket_bounds(index);
                return lowest + (width - 1) / 2;
            }
        }
        0
    }
}

impl FutureRow {
    /// The row as one line of the control socket's `profile` reply, which
    /// `fntrace top` and `ctl profile` read: `future COMPLETED POLLS
    /// LATENCY_NS BUSY_NS BUCKETS NAME`, BUCKETS the non-empty buckets as
    /// `INDEX:COUNT` joined by `,` (`-`: none). The name last: it may hold
    /// spaces.
    pub fn to_line(&self) -> String {
        let mut buckets = String::new();
        for (index, &count) in self.buckets.iter().enumerate() {
            if count != 0 {
                if !buckets.is_empty() {
                    buckets.push(',');
                }
                // Writing into a String cannot fail.
                let _ = write!(buckets, "{index}:{count}");
            }
        }
        if buckets.is_empty() {
            buckets.push('-');
        }
        format!(
            "future {} {} {} {} {} {buckets} {}",
            self.completed, self.polls, self.latency_ns, self.busy_ns, self.dropped, self.function
        )
    }

    /// The row [`FutureRow::to_line`] wrote; `None` if `line` is not one.
    pub fn from_line(line: &str) -> Option<FutureRow> {
        let mut fields = line.strip_prefix("future ")?.splitn(7, ' ');
        let mut number = || fields.next()?.parse::<u64>().ok();
        let (completed, polls, latency_ns, busy_ns) = (number()?, number()?, number()?, number()?);
        let dropped = number()?;
        let mut buckets = [0; FUTURE_BUCKETS];
        let listed = fields.next()?;
        if listed != "-" {
            for pair in listed.split(',') {
                let (index, count) = pair.split_once(':')?;
                *buckets.get_mut(index.parse::<usize>().ok()?)? = count.parse().ok()?;
            }
        }
        let function = fields.next().filter(|name| !name.is_empty())?.to_string();
        Some(FutureRow {
            function,
            completed,
            polls,
            latency_ns,
            busy_ns,
            buckets,
            dropped,
        })
    }

    /// The futures of latency below each of [`DURATION_BUCKETS_NS`] (a
    /// classic histogram's cumulative counts): exact, since a power of two
    /// starts a bucket, and those before it hold the latencies below it.
    pub fn below_each_bound(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut below = 0;
        let mut next = 0;
        DURATION_BUCKETS_NS.iter().map(move |&bound| {
            while next < future_bucket(bound) {
                below += self.buckets[next];
                next += 1;
            }
            (bound, below)
        })
    }

    /// What this row counted since `before` (the same function's row
    /// taken earlier): every count less `before`'s; `None` when one went
    /// down (not the same counts: the process restarted them).
    pub fn since(&self, before: &FutureRow) -> Option<FutureRow> {
        let minus = |now: u64, then: u64| now.checked_sub(then);
        let mut buckets = [0; FUTURE_BUCKETS];
        for (to, (now, then)) in buckets
            .iter_mut()
            .zip(self.buckets.iter().zip(&before.buckets))
        {
            *to = minus(*now, *then)?;
        }
        Some(FutureRow {
            function: self.function.clone(),
            completed: minus(self.completed, before.completed)?,
            polls: minus(self.polls, before.polls)?,
            latency_ns: minus(self.latency_ns, before.latency_ns)?,
            busy_ns: minus(self.busy_ns, before.busy_ns)?,
            buckets,
            dropped: minus(self.dropped, before.dropped)?,
        })
    }
}

/// `text` (an exposition ending with `# EOF`) with the futures' families
/// before its end.
pub fn with_future_metrics(
    mut text: String,
    rows: &[FutureRow],
    table: LinkerTable,
    format: TextFormat,
) -> String {
    let end = text.rfind("# EOF").unwrap_or(text.len());
    let eof = text.split_off(end);
    // Writing into a String cannot fail.
    let _ = write_future_metrics(rows, table, format, &mut text);
    text.push_str(&eof);
    text
}

/// The runtime linker's table as `/metrics` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkerTable {
    /// Futures first polled while it was full, so far.
    pub untracked: u64,
    /// Futures it follows now: pending (first polled, not ended).
    pub pending: u64,
}

/// `help` of each family.
pub(super) const LATENCY_HELP: &str = "Latency of the completed futures of each async function, from the entry of their first poll to the exit of the poll that returned Ready (fntrace record --async).";
pub(super) const BUSY_HELP: &str =
    "Time the completed futures of each async function spent in their polls.";
pub(super) const UNTRACKED_HELP: &str =
    "Futures first polled while the runtime future linker's table was full: in no row.";
pub(super) const DROPPED_HELP: &str = "Futures of each async function dropped before Ready (by their drop function, or seen when a new future was first polled at their address).";
pub(super) const PENDING_HELP: &str =
    "Futures the runtime future linker follows now: first polled, neither Ready nor dropped.";

/// The futures' families, in `format`.
pub fn write_future_metrics(
    rows: &[FutureRow],
    table: LinkerTable,
    format: TextFormat,
    out: &mut impl Write,
) -> fmt::Result {
    let counter = |family: &'static str| (family, format!("{family}_total"));
    let family = "fntrace_future_latency_seconds";
    header(out, family, "histogram", true, LATENCY_HELP)?;
    for row in rows {
        let label = escape(&row.function);
        for (bound, below) in row.below_each_bound() {
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
    let (family, sample) = counter("fntrace_futures_dropped");
    header(
        out,
        counter_name(family, &sample, format),
        "counter",
        false,
        DROPPED_HELP,
    )?;
    for row in rows {
        let label = escape(&row.function);
        writeln!(out, "{sample}{{function=\"{label}\"}} {}", row.dropped)?;
    }
    let (family, sample) = counter("fntrace_futures_untracked");
    header(
        out,
        counter_name(family, &sample, format),
        "counter",
        false,
        UNTRACKED_HELP,
    )?;
    writeln!(out, "{sample} {}", table.untracked)?;
    let family = "fntrace_futures_pending";
    header(out, family, "gauge", false, PENDING_HELP)?;
    writeln!(out, "{family} {}", table.pending)
}

/// A counter family's name in `format`: OpenMetrics names it without the
/// `_total` its sample has.
fn counter_name<'a>(family: &'a str, sample: &'a str, format: TextFormat) -> &'a str {
    match format {
        TextFormat::OpenMetrics => family,
        TextFormat::Prometheus => sample,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row goes through its line whole (a name with spaces too), and
    /// the difference of two is each count's.
    #[test]
    fn rows_go_through_their_lines() {
        let mut row = FutureRow {
            function: "<a::S as b::T>::serve::{closure#0}".into(),
            completed: 3,
            polls: 12,
            latency_ns: 90_000_000,
            busy_ns: 3_000,
            buckets: [0; FUTURE_BUCKETS],
            dropped: 7,
        };
        assert_eq!(FutureRow::from_line(&row.to_line()), Some(row.clone()));
        for ns in [30_000_000, 30_000_001, 1 << 40] {
            row.buckets[future_bucket(ns)] += 1;
        }
        let line = row.to_line();
        assert!(line.starts_with("future 3 12 90000000 3000 7 "), "{line}");
        assert_eq!(FutureRow::from_line(&line), Some(row.clone()));
        assert_eq!(FutureRow::from_line("future 1 2 3 x 0 - f"), None);
        let mut later = row.clone();
        later.completed += 2;
        later.buckets[future_bucket(5)] += 2;
        let interval = later.since(&row).unwrap();
        assert_eq!((interval.completed, interval.polls), (2, 0));
        assert_eq!(interval.buckets.iter().sum::<u64>(), 2);
        assert_eq!(row.since(&later), None);
    }

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
            dropped: 5,
        };
        let table = LinkerTable {
            untracked: 2,
            pending: 3,
        };
        let text =
            with_future_metrics("x 1\n# EOF\n".into(), &[row], table, TextFormat::Prometheus);
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
        assert_eq!(
            line("fntrace_futures_dropped_total{function=\"a::serve::{closure#0}\"}"),
            "5"
        );
        assert_eq!(line("fntrace_futures_pending"), "3");
        assert!(
            text.starts_with("x 1\n") && text.ends_with("\n# EOF\n"),
            "{text}"
        );
    }

    /// Every latency's bucket holds it, and a quantile is within 1/16 of
    /// the latency it stands for.
    #[test]
    fn buckets_hold_their_latencies() {
        for ns in (0..5000).chain([1 << 20, (1 << 20) + 1, 30_000_000, u64::MAX]) {
            let (lowest, width) = bucket_bounds(future_bucket(ns));
            assert!(lowest <= ns && ns - lowest < width, "{ns}");
            let middle = lowest + (width - 1) / 2;
            assert!(middle.abs_diff(ns) as f64 <= ns as f64 / 16.0, "{ns}");
        }
        assert_eq!(future_bucket(u64::MAX), FUTURE_BUCKETS - 1);
        let mut row = FutureRow {
            function: String::new(),
            completed: 0,
            polls: 0,
            latency_ns: 0,
            busy_ns: 0,
            buckets: [0; FUTURE_BUCKETS],
            dropped: 0,
        };
        for ms in 1..=100u64 {
            row.buckets[future_bucket(ms * 1_000_000)] += 1;
        }
        let p50 = row.quantile(0.5) as f64;
        let p99 = row.quantile(0.99) as f64;
        assert!((p50 - 50e6).abs() <= 50e6 / 16.0, "{p50}");
        assert!((p99 - 99e6).abs() <= 99e6 / 16.0, "{p99}");
    }
}
