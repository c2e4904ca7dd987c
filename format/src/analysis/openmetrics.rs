//! The live profile as metrics a monitoring system scrapes: the
//! [OpenMetrics 1.0] text of a [`ProfileSnapshot`], which the runtime serves
//! on `GET /metrics` and `fntrace ctl TARGET metrics` prints.
//!
//! # Two texts
//!
//! [`TextFormat::OpenMetrics`] is OpenMetrics 1.0 (content type
//! [`OPENMETRICS_CONTENT_TYPE`]); [`TextFormat::Prometheus`] is the older
//! Prometheus text format 0.0.4, which `promtool check metrics` lints and
//! which scrapers that do not ask for OpenMetrics read. They differ only
//! in a counter's family name (OpenMetrics: family `foo`, sample
//! `foo_total`; 0.0.4: family and sample `foo_total`): every sample has
//! the same name in both. The `# UNIT` and `# EOF` lines OpenMetrics
//! requires are comments to 0.0.4.
//!
//! # Families
//!
//! | family | type | labels | value |
//! |---|---|---|---|
//! | `fntrace_function_duration_seconds` | histogram | `function`, `le` | durations of completed calls, callees included (the [`Exposition::histograms`] functions with the most total time) |
//! | `fntrace_function_self_seconds` | summary | `function` | their self time (sum) and calls (count) |
//! | `fntrace_function_running_calls` | gauge | `function` | calls entered, not yet returned |
//! | `fntrace_profile_lost_calls` | counter | | completed calls of functions with no row (counted nowhere) |
//! | `fntrace_profile_pathless_calls` | counter | | completed calls counted in their function's row whose call path found no room |
//! | `fntrace_profile_threads` | gauge | | threads that completed traced calls, ended ones included |
//! | `fntrace_metrics_functions_omitted` | gauge | | functions left out by the ceiling ([`Exposition::max_functions`]) |
//! | `fntrace_process_threads` | gauge | | threads alive (with [`Exposition::process`]) |
//! | `fntrace_build_info` | gauge | `version`, `pid`, `exe` | 1 (with [`Exposition::process`]) |
//!
//! Counts and sums run from when the profile was enabled or last reset.
//! Which functions are exported, under which names, and which carry a
//! histogram is [`Exposition`]'s choice (`super::exposition`): functions
//! that share a label value (`static` functions of several C files,
//! generic instances under short names) are one series. An unnamed
//! function is shown by its address (`0x…`).
//!
//! # Buckets
//!
//! The profile keeps 7424 log-linear buckets per function, far too many
//! series for Prometheus. The exposition folds them into the powers of two
//! from 2⁷ ns (128 ns) to 2³⁷ ns (137.4 s), [`DURATION_BUCKETS_NS`]: 31
//! bounds and `+Inf`, a factor 2 apart (what Prometheus's native histograms
//! use at schema 0). Each bound is where one internal bucket ends and the
//! next begins, so every cumulative count is a sum of whole internal
//! buckets: exact, no interpolation. A bucket `le="L"` counts the calls
//! measured shorter than L. (Durations are recorded in whole nanoseconds,
//! truncated: a call recorded as exactly L ns took at least L ns and
//! counts in the next bucket up.)
//!
//! [OpenMetrics 1.0]: https://github.com/OpenObservability/OpenMetrics/blob/main/specification/OpenMetrics.md

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::sync::LazyLock;

use super::exposition::{select, Exposition, TextFormat};
use super::histogram::Histogram;
use super::profile::ProfileSnapshot;

/// The HTTP content type of [`TextFormat::OpenMetrics`]: OpenMetrics 1.0.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The HTTP content type of [`TextFormat::Prometheus`]: the Prometheus
/// text format 0.0.4.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The upper bounds (`le`) of the duration histogram's buckets, in
/// nanoseconds, below `+Inf`: the powers of two from 2⁷ to 2³⁷.
pub const DURATION_BUCKETS_NS: [u64; 31] = {
    let mut bounds = [0; 31];
    let mut i = 0;
    while i < bounds.len() {
        bounds[i] = 1 << (7 + i);
        i += 1;
    }
    bounds
};

/// The `le` values of [`DURATION_BUCKETS_NS`], rendered once.
static BUCKET_LABELS: LazyLock<Vec<String>> = LazyLock::new(|| {
    DURATION_BUCKETS_NS
        .iter()
        .map(|&ns| canonical_seconds(ns))
        .collect()
});

/// The most buckets per power of two a classic histogram may have
/// ([`Exposition::buckets_per_doubling`]): the profile's own, so that each
/// bound is still where one internal bucket ends.
pub const MAX_BUCKETS_PER_DOUBLING: u32 = 128;

/// The classic histogram's bounds (ns, below `+Inf`) with `per_doubling`
/// buckets per power of two (a power of two from 1 to
/// [`MAX_BUCKETS_PER_DOUBLING`]): [`DURATION_BUCKETS_NS`] each followed
/// by the `per_doubling - 1` bounds that split the interval to the next
/// into equal parts, up to 2³⁷ ns. Each is the start of an internal bucket
/// (an internal bucket of `[2^e, 2^(e+1))` is 2^(e-7) wide), so the
/// counts stay exact.
pub fn duration_bounds_ns(per_doubling: u32) -> Vec<u64> {
    let parts = u64::from(
        per_doubling
            .clamp(1, MAX_BUCKETS_PER_DOUBLING)
            .next_power_of_two(),
    );
    let last = DURATION_BUCKETS_NS[DURATION_BUCKETS_NS.len() - 1];
    let mut bounds = Vec::new();
    for &power in &DURATION_BUCKETS_NS {
        let step = power / parts;
        bounds.extend(
            (0..parts)
                .map(|j| power + j * step)
                .take_while(|&b| b <= last),
        );
    }
    bounds
}

/// The `le` value of each of `bounds`.
fn bound_labels(bounds: &[u64]) -> Cow<'static, [String]> {
    if bounds == DURATION_BUCKETS_NS {
        Cow::Borrowed(&BUCKET_LABELS[..])
    } else {
        Cow::Owned(bounds.iter().map(|&ns| canonical_seconds(ns)).collect())
    }
}

/// The snapshot's metrics as text (see the module docs) with what
/// `options` ask for, ending with `# EOF`.
pub fn exposition(snapshot: &ProfileSnapshot, options: &Exposition) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = write_exposition(snapshot, options, &mut text);
    text
}

/// Every function, each with its histogram, under its full name, in
/// OpenMetrics text: [`exposition`] with [`Exposition::everything`].
pub fn openmetrics(snapshot: &ProfileSnapshot) -> String {
    exposition(snapshot, &Exposition::everything(TextFormat::OpenMetrics))
}

/// [`exposition`] into any writer.
pub fn write_exposition(
    snapshot: &ProfileSnapshot,
    options: &Exposition,
    out: &mut impl fmt::Write,
) -> fmt::Result {
    let (series, omitted) = select(snapshot, options, escape);
    let bounds = duration_bounds_ns(options.buckets_per_doubling);
    let labels = bound_labels(&bounds);

    let family = "fntrace_function_duration_seconds";
    header(out, family, "histogram", true, DURATION_HELP)?;
    for row in series.iter().filter(|row| row.histogram) {
        let label = &row.name;
        let durations = row.durations();
        let counts = cumulative_counts(&durations, &bounds);
        for (bound, count) in labels.iter().zip(counts) {
            writeln!(
                out,
                "{family}_bucket{{function=\"{label}\",le=\"{bound}\"}} {count}"
            )?;
        }
        let calls = durations.count();
        writeln!(
            out,
            "{family}_bucket{{function=\"{label}\",le=\"+Inf\"}} {calls}"
        )?;
        writeln!(
            out,
            "{family}_sum{{function=\"{label}\"}} {}",
            seconds(durations.sum())
        )?;
        writeln!(out, "{family}_count{{function=\"{label}\"}} {calls}")?;
    }

    let family = "fntrace_function_self_seconds";
    header(out, family, "summary", true, SELF_HELP)?;
    for row in &series {
        let label = &row.name;
        writeln!(
            out,
            "{family}_sum{{function=\"{label}\"}} {}",
            seconds(row.self_ns())
        )?;
        writeln!(
            out,
            "{family}_count{{function=\"{label}\"}} {}",
            row.calls()
        )?;
    }

    let family = "fntrace_function_running_calls";
    header(out, family, "gauge", false, RUNNING_HELP)?;
    for row in &series {
        writeln!(
            out,
            "{family}{{function=\"{}\"}} {}",
            row.name,
            row.running()
        )?;
    }

    for (family, help, value) in counters(snapshot) {
        // A counter's sample is `_total` in both formats; its family is
        // named without it in OpenMetrics, with it in 0.0.4.
        let sample = format!("{family}_total");
        let family = match options.format {
            TextFormat::OpenMetrics => family,
            TextFormat::Prometheus => &sample,
        };
        header(out, family, "counter", false, help)?;
        writeln!(out, "{sample} {value}")?;
    }
    for (family, help, value) in gauges(snapshot, omitted, options) {
        header(out, family, "gauge", false, help)?;
        writeln!(out, "{family} {value}")?;
    }
    if let Some(process) = &options.process {
        let family = "fntrace_build_info";
        header(out, family, "gauge", false, BUILD_INFO_HELP)?;
        writeln!(
            out,
            "{family}{{version=\"{}\",pid=\"{}\",exe=\"{}\"}} 1",
            escape(&process.version),
            process.pid,
            escape(&process.exe)
        )?;
    }
    writeln!(out, "# EOF")
}

/// `# HELP` of `fntrace_function_duration_seconds`.
pub(super) const DURATION_HELP: &str = "Durations (wall-clock time, blocked time included) of the completed calls of each traced function, callees included (the functions with the most total time).";
/// `# HELP` of `fntrace_function_self_seconds`.
pub(super) const SELF_HELP: &str = "Self time (wall-clock time, blocked time included) of the completed calls of each traced function: their durations minus their direct callees'.";
/// `# HELP` of `fntrace_function_running_calls`.
pub(super) const RUNNING_HELP: &str = "Calls of each traced function entered and not yet returned.";
/// `# HELP` of `fntrace_build_info`.
pub(super) const BUILD_INFO_HELP: &str =
    "Always 1: the fntrace runtime's version and the process it runs in, labels to group by.";

/// The process-wide counters: family (without `_total`), help, value.
pub(super) fn counters(snapshot: &ProfileSnapshot) -> [(&'static str, &'static str, u64); 2] {
    [
        (
            "fntrace_profile_lost_calls",
            "Completed calls of functions that found no row in the profile's memory budget: counted nowhere else.",
            snapshot.not_kept.functions,
        ),
        (
            "fntrace_profile_pathless_calls",
            "Completed calls counted in their function's row whose call path found no room in the profile's call tree.",
            snapshot.not_kept.paths,
        ),
    ]
}

/// The process-wide gauges: family, help, value.
pub(super) fn gauges(
    snapshot: &ProfileSnapshot,
    omitted: usize,
    options: &Exposition,
) -> Vec<(&'static str, &'static str, u64)> {
    let mut gauges = vec![
        (
            "fntrace_profile_threads",
            "Threads that completed traced calls since the profile was enabled or reset, ended ones included (fntrace_process_threads: those alive).",
            snapshot.threads,
        ),
        (
            "fntrace_metrics_functions_omitted",
            "Traced functions left out of this text by the endpoint's ceiling (FNTRACE_METRICS_MAX_FUNCTIONS, 500 by default): only the functions with the most total time are exported.",
            omitted as u64,
        ),
    ];
    if let Some(process) = &options.process {
        gauges.push((
            "fntrace_process_threads",
            "Threads of the process alive when this text was made.",
            process.threads,
        ));
    }
    gauges
}

/// The `# TYPE`, `# UNIT` (seconds) and `# HELP` lines of a family, in the
/// order the format recommends.
pub(super) fn header(
    out: &mut impl fmt::Write,
    family: &str,
    kind: &str,
    in_seconds: bool,
    help: &str,
) -> fmt::Result {
    writeln!(out, "# TYPE {family} {kind}")?;
    if in_seconds {
        writeln!(out, "# UNIT {family} seconds")?;
    }
    writeln!(out, "# HELP {family} {}", escape(help))
}

/// The cumulative count of each of `bounds` (ascending, each the start
/// of an internal bucket: [`duration_bounds_ns`]): the calls in internal
/// buckets that end at or below it.
pub(super) fn cumulative_counts(durations: &Histogram, bounds: &[u64]) -> Vec<u64> {
    let mut counts = Vec::with_capacity(bounds.len());
    let mut buckets = durations.buckets().peekable();
    let mut below = 0;
    for &bound in bounds {
        // The bound starts an internal bucket, so the buckets before it
        // hold exactly the values below it.
        let first_above = Histogram::bucket_of(bound);
        while let Some(&(index, n)) = buckets.peek() {
            if index >= first_above {
                break;
            }
            below += n;
            buckets.next();
        }
        counts.push(below);
    }
    counts
}

/// A label value or help text escaped: backslash, double quote and line
/// feed (the only characters OpenMetrics escapes).
pub(super) fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// `ns` nanoseconds as seconds, in exact decimal (`1.5`, `0.0000015`,
/// `0.0`): integer arithmetic, no float rounding.
pub(super) fn seconds(ns: u64) -> String {
    let mut text = format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
    while text.ends_with('0') && !text.ends_with(".0") {
        text.pop();
    }
    text
}

/// `ns` nanoseconds as seconds in the canonical rendering OpenMetrics asks
/// for `le` values: Go's `%g` (shortest digits, exponent form below 1e-4
/// and from 1e+6, a two-digit exponent at least) with `.0` appended when
/// there is neither a point nor an exponent. Exact decimal: `ns` has at
/// most 20 digits, all of which a float64 `%g` would print.
pub(super) fn canonical_seconds(ns: u64) -> String {
    if ns == 0 {
        return "0.0".into();
    }
    let digits = ns.to_string();
    // The value is 0.d1d2… × 10^(exponent + 1).
    let exponent = digits.len() as i32 - 1 - 9;
    let significant = digits.trim_end_matches('0');
    if !(-4..6).contains(&exponent) {
        let (first, rest) = significant.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{first}{point}{rest}e{sign}{:02}", exponent.abs());
    }
    if exponent < 0 {
        let zeros = "0".repeat((-exponent - 1) as usize);
        return format!("0.{zeros}{significant}");
    }
    let whole = (exponent + 1) as usize;
    let fraction = significant.get(whole..).unwrap_or("");
    let mut text = significant.get(..whole).unwrap_or(significant).to_string();
    // Whole digits dropped as trailing zeros come back.
    while text.len() < whole {
        text.push('0');
    }
    let _ = write!(
        text,
        ".{}",
        if fraction.is_empty() { "0" } else { fraction }
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{FunctionProfile, NotKept};

    fn durations(values: &[u64]) -> Histogram {
        let mut histogram = Histogram::new();
        for &value in values {
            histogram.record(value);
        }
        histogram
    }

    #[test]
    fn le_values_follow_the_canonical_rendering() {
        // The spec's own examples of canonical numbers.
        let cases = [
            (100_000, "0.0001"),
            (1, "1e-09"),
            (10_000, "1e-05"),
            (100_000_000, "0.1"),
            (1_000_000_000, "1.0"),
            (1_700_000_000, "1.7"),
            (10_000_000_000, "10.0"),
            (100_000_000_000_000, "100000.0"),
            (1_000_000_000_000_000, "1e+06"),
            (1_000_000, "0.001"),
            (950_000_000, "0.95"),
        ];
        for (ns, text) in cases {
            assert_eq!(canonical_seconds(ns), text, "{ns} ns");
        }
        let bounds: Vec<String> = DURATION_BUCKETS_NS
            .iter()
            .map(|&ns| canonical_seconds(ns))
            .collect();
        assert_eq!(bounds[0], "1.28e-07");
        assert_eq!(bounds[3], "1.024e-06");
        assert_eq!(bounds[10], "0.000131072");
        assert_eq!(bounds[23], "1.073741824");
        assert_eq!(bounds[30], "137.438953472");
    }

    #[test]
    fn sums_are_exact_decimals() {
        assert_eq!(seconds(0), "0.0");
        assert_eq!(seconds(1_500), "0.0000015");
        assert_eq!(seconds(2_000_000_000), "2.0");
        assert_eq!(seconds(u64::MAX), "18446744073.709551615");
    }

    #[test]
    fn cumulative_counts_are_the_calls_below_each_bound() {
        for per_doubling in [1, 2, 8, 128] {
            let bounds = duration_bounds_ns(per_doubling);
            // Values around every bound: just below, at, just above.
            let mut values = Vec::new();
            for &bound in &bounds {
                values.extend([bound - 1, bound, bound + 1, bound + bound / 300]);
            }
            values.extend([0, 5, 127, u64::MAX]);
            let histogram = durations(&values);
            let counts = cumulative_counts(&histogram, &bounds);
            for (&bound, &count) in bounds.iter().zip(&counts) {
                let below = values.iter().filter(|&&v| v < bound).count() as u64;
                assert_eq!(count, below, "le {bound} ns, {per_doubling} per doubling");
            }
        }
    }

    #[test]
    fn finer_bounds_split_each_power_of_two_evenly() {
        assert_eq!(duration_bounds_ns(1), DURATION_BUCKETS_NS);
        let four = duration_bounds_ns(4);
        assert_eq!(four[..5], [128, 160, 192, 224, 256]);
        // Up to 2^37 ns, the last power of two: 30 doublings of 4, and it.
        assert_eq!(four.len(), 30 * 4 + 1);
        assert_eq!(four.last(), Some(&(1 << 37)));
        assert_eq!(duration_bounds_ns(128).len(), 30 * 128 + 1);
        // Each bound starts an internal bucket: what keeps counts exact.
        for &bound in &duration_bounds_ns(128) {
            assert_eq!(
                Histogram::bucket_range(Histogram::bucket_of(bound)).0,
                bound
            );
        }
    }

    #[test]
    fn the_exposition_is_exactly_this() {
        let snapshot = ProfileSnapshot {
            taken_ns: 7,
            threads: 2,
            functions: vec![
                FunctionProfile {
                    function: 0x2000,
                    name: "work".into(),
                    durations: durations(&[300, 1_000]),
                    total_ns: 1_300,
                    self_ns: 800,
                    running: 1,
                },
                FunctionProfile {
                    function: 0x1000,
                    name: "a\\b\"c\nd".into(),
                    durations: durations(&[]),
                    total_ns: 0,
                    self_ns: 0,
                    running: 2,
                },
                // Another `work` (a static function in another file): one
                // series with the first.
                FunctionProfile {
                    function: 0x3000,
                    name: "work".into(),
                    durations: durations(&[3_000_000_000]),
                    total_ns: 3_000_000_000,
                    self_ns: 2_000_000_001,
                    running: 0,
                },
            ],
            paths: Vec::new(),
            not_kept: NotKept {
                paths: 4,
                functions: 5,
            },
        };
        let mut expected = String::from(
            "# TYPE fntrace_function_duration_seconds histogram\n\
             # UNIT fntrace_function_duration_seconds seconds\n\
             # HELP fntrace_function_duration_seconds Durations (wall-clock time, blocked time included) of the completed calls of each traced function, callees included (the functions with the most total time).\n",
        );
        let le = [
            "1.28e-07",
            "2.56e-07",
            "5.12e-07",
            "1.024e-06",
            "2.048e-06",
            "4.096e-06",
            "8.192e-06",
            "1.6384e-05",
            "3.2768e-05",
            "6.5536e-05",
            "0.000131072",
            "0.000262144",
            "0.000524288",
            "0.001048576",
            "0.002097152",
            "0.004194304",
            "0.008388608",
            "0.016777216",
            "0.033554432",
            "0.067108864",
            "0.134217728",
            "0.268435456",
            "0.536870912",
            "1.073741824",
            "2.147483648",
            "4.294967296",
            "8.589934592",
            "17.179869184",
            "34.359738368",
            "68.719476736",
            "137.438953472",
        ];
        let name = "a\\\\b\\\"c\\nd";
        for bound in le {
            expected += &format!(
                "fntrace_function_duration_seconds_bucket{{function=\"{name}\",le=\"{bound}\"}} 0\n"
            );
        }
        expected += &format!(
            "fntrace_function_duration_seconds_bucket{{function=\"{name}\",le=\"+Inf\"}} 0\n\
             fntrace_function_duration_seconds_sum{{function=\"{name}\"}} 0.0\n\
             fntrace_function_duration_seconds_count{{function=\"{name}\"}} 0\n"
        );
        // work: 300 ns (above 256), 1000 ns (above 512), 3 s (above 2.1 s).
        for (i, bound) in le.iter().enumerate() {
            let count = match i {
                0..=1 => 0,
                2..=2 => 1,
                3..=24 => 2,
                _ => 3,
            };
            expected += &format!(
                "fntrace_function_duration_seconds_bucket{{function=\"work\",le=\"{bound}\"}} {count}\n"
            );
        }
        expected += "fntrace_function_duration_seconds_bucket{function=\"work\",le=\"+Inf\"} 3\n\
             fntrace_function_duration_seconds_sum{function=\"work\"} 3.0000013\n\
             fntrace_function_duration_seconds_count{function=\"work\"} 3\n";
        expected += &format!(
            "# TYPE fntrace_function_self_seconds summary\n\
             # UNIT fntrace_function_self_seconds seconds\n\
             # HELP fntrace_function_self_seconds Self time (wall-clock time, blocked time included) of the completed calls of each traced function: their durations minus their direct callees'.\n\
             fntrace_function_self_seconds_sum{{function=\"{name}\"}} 0.0\n\
             fntrace_function_self_seconds_count{{function=\"{name}\"}} 0\n\
             fntrace_function_self_seconds_sum{{function=\"work\"}} 2.000000801\n\
             fntrace_function_self_seconds_count{{function=\"work\"}} 3\n\
             # TYPE fntrace_function_running_calls gauge\n\
             # HELP fntrace_function_running_calls Calls of each traced function entered and not yet returned.\n\
             fntrace_function_running_calls{{function=\"{name}\"}} 2\n\
             fntrace_function_running_calls{{function=\"work\"}} 1\n\
             # TYPE fntrace_profile_lost_calls counter\n\
             # HELP fntrace_profile_lost_calls Completed calls of functions that found no row in the profile's memory budget: counted nowhere else.\n\
             fntrace_profile_lost_calls_total 5\n\
             # TYPE fntrace_profile_pathless_calls counter\n\
             # HELP fntrace_profile_pathless_calls Completed calls counted in their function's row whose call path found no room in the profile's call tree.\n\
             fntrace_profile_pathless_calls_total 4\n\
             # TYPE fntrace_profile_threads gauge\n\
             # HELP fntrace_profile_threads Threads that completed traced calls since the profile was enabled or reset, ended ones included (fntrace_process_threads: those alive).\n\
             fntrace_profile_threads 2\n\
             # TYPE fntrace_metrics_functions_omitted gauge\n\
             # HELP fntrace_metrics_functions_omitted Traced functions left out of this text by the endpoint's ceiling (FNTRACE_METRICS_MAX_FUNCTIONS, 500 by default): only the functions with the most total time are exported.\n\
             fntrace_metrics_functions_omitted 0\n\
             # EOF\n"
        );
        assert_eq!(openmetrics(&snapshot), expected);
        // The 0.0.4 text differs in the counters' family names only.
        let prometheus = exposition(&snapshot, &Exposition::everything(TextFormat::Prometheus));
        let renamed = expected
            .replace("lost_calls counter", "lost_calls_total counter")
            .replace(
                "HELP fntrace_profile_lost_calls ",
                "HELP fntrace_profile_lost_calls_total ",
            )
            .replace("pathless_calls counter", "pathless_calls_total counter")
            .replace(
                "HELP fntrace_profile_pathless_calls ",
                "HELP fntrace_profile_pathless_calls_total ",
            );
        assert_eq!(prometheus, renamed);
    }

    #[test]
    fn the_ceiling_keeps_the_most_total_time_and_counts_the_rest() {
        let function = |name: &str, total_ns: u64| FunctionProfile {
            function: 0x1000 + total_ns as usize,
            name: name.into(),
            durations: durations(&[total_ns]),
            total_ns,
            ..FunctionProfile::default()
        };
        let snapshot = ProfileSnapshot {
            functions: vec![
                function("f1", 100),
                function("f2", 200),
                function("f3", 300),
                // Two of one name: one series, ranked by their sum (50 + 260).
                function("twice", 50),
                function("twice", 260),
                // A tie with f3, taken by name order.
                function("e3", 300),
                function("g0", 10),
            ],
            ..ProfileSnapshot::default()
        };
        let exported = |text: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| l.strip_prefix("fntrace_function_running_calls{function=\""))
                .map(|l| l.split('"').next().unwrap().to_string())
                .collect()
        };
        let top = |max_functions| {
            let options = Exposition {
                max_functions,
                ..Exposition::everything(TextFormat::OpenMetrics)
            };
            exposition(&snapshot, &options)
        };
        let text = top(3);
        assert_eq!(exported(&text), ["e3", "f3", "twice"], "{text}");
        assert!(
            text.contains("\nfntrace_metrics_functions_omitted 3\n"),
            "{text}"
        );
        assert!(text.contains("fntrace_function_duration_seconds_count{function=\"twice\"} 2\n"));
        // The bucket and sum lines of the exported ones only.
        assert_eq!(
            text.lines()
                .filter(|l| l.contains("function=\"f1\""))
                .count(),
            0
        );
        let all = openmetrics(&snapshot);
        assert_eq!(exported(&all).len(), 6);
        assert!(all.contains("\nfntrace_metrics_functions_omitted 0\n"));
        let none = top(0);
        assert!(exported(&none).is_empty());
        assert!(none.contains("\nfntrace_metrics_functions_omitted 6\n"));
        // The same text as the unlimited one when the ceiling is not reached.
        assert_eq!(top(6), all);
    }

    #[test]
    fn an_unnamed_function_is_shown_by_its_address() {
        let snapshot = ProfileSnapshot {
            functions: vec![FunctionProfile {
                function: 0x401136,
                durations: durations(&[10]),
                ..FunctionProfile::default()
            }],
            ..ProfileSnapshot::default()
        };
        let text = openmetrics(&snapshot);
        assert!(
            text.contains("fntrace_function_duration_seconds_count{function=\"0x401136\"} 1\n"),
            "{text}"
        );
    }
}
