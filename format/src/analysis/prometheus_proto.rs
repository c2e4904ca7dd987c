//! The live profile in Prometheus's protobuf exposition format
//! (`io.prometheus.client.MetricFamily` messages, each preceded by its
//! length as a varint), which the metrics endpoint serves to a scraper
//! that asks for it in its `Accept` header: Prometheus does when its
//! native histograms are on (`--enable-feature=native-histograms`).
//!
//! The families and values are those of the text
//! ([`exposition`](super::exposition)), for the same selection; what the text cannot say
//! is the duration histogram as a **native histogram**: exponential
//! buckets at schema [`NATIVE_SCHEMA`] (each power of two split into
//! 2^5 = 32 buckets, each 2.2 % wider than the one before), filled from the
//! profile's own 128 sub-buckets per power of two rather than from the
//! text's 31 powers of two. Each sub-bucket (at most 0.78 % wide) is
//! counted whole in the native bucket that holds its middle, so a native
//! bucket's count may be off by the calls of a sub-bucket that straddles
//! its edge: quantiles stay within about one native bucket (2.2 %) of the
//! profile's own. A native histogram is one series however many buckets it
//! has, so every exported function gets one; the functions whose text
//! carries the classic buckets carry them here too, for readers that
//! ignore native histograms. Calls recorded as 0 ns are
//! the zero bucket's (threshold 0).

use super::exposition::{select, Exposition};
use super::future_metrics::{
    bucket_bounds, FutureRow, LinkerTable, BUSY_HELP, DROPPED_HELP, LATENCY_HELP, PENDING_HELP,
    UNTRACKED_HELP,
};
use super::histogram::Histogram;
use super::openmetrics::{
    counters, cumulative_counts, duration_bounds_ns, gauges, BUILD_INFO_HELP, DURATION_HELP,
    RUNNING_HELP, SELF_HELP,
};
use super::profile::ProfileSnapshot;
use crate::protobuf::{field_bytes, field_double, field_varint, varint, zigzag};

/// The HTTP content type of [`prometheus_protobuf`]'s bytes.
pub const PROTOBUF_CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// The native histograms' schema: 2^5 buckets per power of two.
pub const NATIVE_SCHEMA: i32 = 5;

/// `MetricType` values.
const COUNTER: u64 = 0;
const GAUGE: u64 = 1;
const SUMMARY: u64 = 2;
const HISTOGRAM: u64 = 4;

/// `Metric` fields by what they hold.
const GAUGE_FIELD: u64 = 2;
const COUNTER_FIELD: u64 = 3;
const SUMMARY_FIELD: u64 = 4;
const HISTOGRAM_FIELD: u64 = 7;

/// Whether an HTTP `Accept` header asks for this format (Prometheus
/// names the message type in it).
pub fn accepts_protobuf(accept: &str) -> bool {
    accept.contains("application/vnd.google.protobuf")
        && accept.contains("io.prometheus.client.MetricFamily")
}

/// The snapshot's metrics in the protobuf exposition format, the functions
/// `options` select (its text format aside). Every exported function has a
/// native duration histogram, one series whatever its buckets; those that
/// carry the histogram in the text ([`Exposition::histograms`]) carry its
/// classic buckets too.
pub fn prometheus_protobuf(snapshot: &ProfileSnapshot, options: &Exposition) -> Vec<u8> {
    // Label values as they are: protobuf strings need no escaping.
    let (series, omitted) = select(snapshot, options, str::to_string);
    let bounds = duration_bounds_ns(options.buckets_per_doubling);
    let mut out = Vec::new();

    let metrics = series.iter().map(|row| {
        let durations = row.durations();
        let mut histogram = Vec::new();
        field_varint(&mut histogram, 1, durations.count());
        field_double(&mut histogram, 2, durations.sum() as f64 * 1e-9);
        if row.histogram {
            let counts = cumulative_counts(&durations, &bounds);
            for (&bound, count) in bounds.iter().zip(counts) {
                // Bucket.cumulative_count (1), upper_bound (2).
                let mut bucket = Vec::new();
                field_varint(&mut bucket, 1, count);
                field_double(&mut bucket, 2, bound as f64 * 1e-9);
                field_bytes(&mut histogram, 3, &bucket);
            }
        }
        native_fields(&durations, &mut histogram);
        metric(&[("function", &row.name)], HISTOGRAM_FIELD, &histogram)
    });
    let name = "fntrace_function_duration_seconds";
    family(&mut out, name, DURATION_HELP, HISTOGRAM, metrics);

    let metrics = series.iter().map(|row| {
        // Summary.sample_count (1), sample_sum (2).
        let mut summary = Vec::new();
        field_varint(&mut summary, 1, row.calls());
        field_double(&mut summary, 2, row.self_ns() as f64 * 1e-9);
        metric(&[("function", &row.name)], SUMMARY_FIELD, &summary)
    });
    let name = "fntrace_function_self_seconds";
    family(&mut out, name, SELF_HELP, SUMMARY, metrics);

    let metrics = series.iter().map(|row| {
        metric(
            &[("function", &row.name)],
            GAUGE_FIELD,
            &value(row.running()),
        )
    });
    let name = "fntrace_function_running_calls";
    family(&mut out, name, RUNNING_HELP, GAUGE, metrics);

    for (name, help, count) in counters(snapshot) {
        // A counter family is named as its sample, `_total` included.
        let unlabelled = metric(&[], COUNTER_FIELD, &value(count));
        family(
            &mut out,
            &format!("{name}_total"),
            help,
            COUNTER,
            [unlabelled],
        );
    }
    for (name, help, level) in gauges(snapshot, omitted, options) {
        let unlabelled = metric(&[], GAUGE_FIELD, &value(level));
        family(&mut out, name, help, GAUGE, [unlabelled]);
    }
    if let Some(process) = &options.process {
        let pid = process.pid.to_string();
        let labels = [
            ("version", process.version.as_str()),
            ("pid", &pid),
            ("exe", &process.exe),
        ];
        let info = metric(&labels, GAUGE_FIELD, &value(1));
        family(
            &mut out,
            "fntrace_build_info",
            BUILD_INFO_HELP,
            GAUGE,
            [info],
        );
    }
    out
}

/// The runtime future linker's families (as the text's,
/// [`write_future_metrics`](super::write_future_metrics)), appended to
/// `out`: the latency of each async function's completed futures as a
/// histogram with the text's exact classic buckets and a native one at
/// [`NATIVE_SCHEMA`] (each of the linker's buckets, 1/8 of a power of two
/// wide, counted whole in the native bucket that holds its middle: a
/// quantile within the linker's 6.25 % and one native bucket), their
/// busy time, dropped, untracked and pending futures.
pub fn write_future_protobuf(rows: &[FutureRow], table: LinkerTable, out: &mut Vec<u8>) {
    let metrics = rows.iter().map(|row| {
        let mut histogram = Vec::new();
        field_varint(&mut histogram, 1, row.completed);
        field_double(&mut histogram, 2, row.latency_ns as f64 * 1e-9);
        for (bound, below) in row.below_each_bound() {
            let mut bucket = Vec::new();
            field_varint(&mut bucket, 1, below);
            field_double(&mut bucket, 2, bound as f64 * 1e-9);
            field_bytes(&mut histogram, 3, &bucket);
        }
        let buckets = (row.buckets.iter().enumerate())
            .filter(|(_, &count)| count != 0)
            .map(|(index, &count)| (bucket_bounds(index), count));
        write_native(native_of(buckets), &mut histogram);
        metric(&[("function", &row.function)], HISTOGRAM_FIELD, &histogram)
    });
    let name = "fntrace_future_latency_seconds";
    family(out, name, LATENCY_HELP, HISTOGRAM, metrics);
    let metrics = rows.iter().map(|row| {
        let mut summary = Vec::new();
        field_varint(&mut summary, 1, row.completed);
        field_double(&mut summary, 2, row.busy_ns as f64 * 1e-9);
        metric(&[("function", &row.function)], SUMMARY_FIELD, &summary)
    });
    family(
        out,
        "fntrace_future_busy_seconds",
        BUSY_HELP,
        SUMMARY,
        metrics,
    );
    let metrics = rows.iter().map(|row| {
        let labels = [("function", row.function.as_str())];
        metric(&labels, COUNTER_FIELD, &value(row.dropped))
    });
    let name = "fntrace_futures_dropped_total";
    family(out, name, DROPPED_HELP, COUNTER, metrics);
    let untracked = metric(&[], COUNTER_FIELD, &value(table.untracked));
    let name = "fntrace_futures_untracked_total";
    family(out, name, UNTRACKED_HELP, COUNTER, [untracked]);
    let pending = metric(&[], GAUGE_FIELD, &value(table.pending));
    family(
        out,
        "fntrace_futures_pending",
        PENDING_HELP,
        GAUGE,
        [pending],
    );
}

/// A `Gauge` or `Counter` message (both hold a double in field 1).
fn value(value: u64) -> Vec<u8> {
    let mut message = Vec::new();
    field_double(&mut message, 1, value as f64);
    message
}

/// A `Metric` with `labels` (`LabelPair` name 1, value 2, in field 1)
/// holding `value` in field `kind`.
fn metric(labels: &[(&str, &str)], kind: u64, value: &[u8]) -> Vec<u8> {
    let mut metric = Vec::new();
    for (name, text) in labels {
        let mut pair = Vec::new();
        field_bytes(&mut pair, 1, name.as_bytes());
        field_bytes(&mut pair, 2, text.as_bytes());
        field_bytes(&mut metric, 1, &pair);
    }
    field_bytes(&mut metric, kind, value);
    metric
}

/// Appends a length-prefixed `MetricFamily` (name 1, help 2, type 3,
/// metric 4).
fn family(
    out: &mut Vec<u8>,
    name: &str,
    help: &str,
    kind: u64,
    metrics: impl IntoIterator<Item = Vec<u8>>,
) {
    let mut family = Vec::new();
    field_bytes(&mut family, 1, name.as_bytes());
    field_bytes(&mut family, 2, help.as_bytes());
    field_varint(&mut family, 3, kind);
    for metric in metrics {
        field_bytes(&mut family, 4, &metric);
    }
    varint(out, family.len() as u64);
    out.extend_from_slice(&family);
}

/// The native histogram's fields of a `Histogram` message: schema (5),
/// zero threshold (6, 0: left out) and count (7), positive spans (12) and
/// deltas (13). A histogram without calls still gets the no-op span that
/// marks it native.
fn native_fields(durations: &Histogram, histogram: &mut Vec<u8>) {
    write_native(native_buckets(durations), histogram);
}

/// [`native_fields`] of `buckets`.
fn write_native(buckets: NativeBuckets, histogram: &mut Vec<u8>) {
    field_varint(histogram, 5, zigzag(NATIVE_SCHEMA.into()));
    field_varint(histogram, 7, buckets.zero);
    let mut spans: Vec<(i64, u32)> = Vec::new();
    let mut previous: Option<i64> = None;
    for &(index, _) in &buckets.positive {
        match (previous, spans.last_mut()) {
            (Some(last), Some(span)) if index == last + 1 => span.1 += 1,
            (Some(last), _) => spans.push((index - last - 1, 1)),
            (None, _) => spans.push((index, 1)),
        }
        previous = Some(index);
    }
    if spans.is_empty() {
        spans.push((0, 0));
    }
    for (offset, length) in spans {
        // BucketSpan.offset (1, sint32), length (2). A no-op span's zeros
        // are written as an empty message, which reads as the same.
        let mut span = Vec::new();
        field_varint(&mut span, 1, zigzag(offset));
        field_varint(&mut span, 2, length.into());
        field_bytes(histogram, 12, &span);
    }
    let mut deltas = Vec::new();
    let mut before = 0i64;
    for &(_, count) in &buckets.positive {
        let count = count as i64;
        varint(&mut deltas, zigzag(count - before));
        before = count;
    }
    if !deltas.is_empty() {
        field_bytes(histogram, 13, &deltas);
    }
}

/// A histogram's calls in native buckets.
#[derive(Debug, Default, PartialEq)]
struct NativeBuckets {
    /// Calls of 0 ns.
    zero: u64,
    /// `(bucket index, calls)`, by index, none empty.
    positive: Vec<(i64, u64)>,
}

/// Which native bucket holds `seconds` (> 0) at [`NATIVE_SCHEMA`]: bucket
/// `i` holds (2^((i-1)/2^s), 2^(i/2^s)].
fn native_index(seconds: f64) -> i64 {
    (seconds.log2() * f64::from(1 << NATIVE_SCHEMA)).ceil() as i64
}

/// Each sub-bucket of `durations` counted in the native bucket that holds
/// its middle.
fn native_buckets(durations: &Histogram) -> NativeBuckets {
    let buckets =
        (durations.buckets()).map(|(index, count)| (Histogram::bucket_range(index), count));
    native_of(buckets)
}

/// Buckets (lowest value, width, in ns; by value) with their counts, each
/// counted in the native bucket that holds its middle.
fn native_of(buckets: impl Iterator<Item = ((u64, u64), u64)>) -> NativeBuckets {
    let mut native = NativeBuckets::default();
    for ((lowest, width), count) in buckets {
        if lowest == 0 && width == 1 {
            native.zero += count;
            continue;
        }
        let middle_ns = lowest as f64 + (width - 1) as f64 / 2.0;
        let at = native_index(middle_ns * 1e-9);
        match native.positive.last_mut() {
            Some((last, calls)) if *last == at => *calls += count,
            _ => native.positive.push((at, count)),
        }
    }
    native
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_buckets_hold_their_values() {
        // 1 µs is 2^-19.93 s: index ceil(-19.93 × 32) = -637.
        assert_eq!(native_index(1e-6), -637);
        // A power of two is the upper edge of its bucket.
        assert_eq!(native_index(0.5), -32);
        assert_eq!(native_index(1.0), 0);
        let mut durations = Histogram::new();
        durations.record_n(0, 3);
        durations.record_n(1_000, 5);
        durations.record_n(1_001, 2);
        durations.record_n(2_000_000, 7);
        let buckets = native_buckets(&durations);
        assert_eq!(buckets.zero, 3);
        // 1,000 and 1,001 ns lie in one sub-bucket and one native bucket.
        assert_eq!(buckets.positive, [(-637, 7), (native_index(2e-3), 7)]);
    }

    #[test]
    fn every_sub_bucket_lands_within_one_native_bucket_of_its_values() {
        let width = 2f64.powf(1.0 / f64::from(1 << NATIVE_SCHEMA));
        for ns in [300u64, 4_095, 65_537, 1_000_000, 123_456_789] {
            let mut one = Histogram::new();
            one.record(ns);
            let (index, _) = native_buckets(&one).positive[0];
            let upper = width.powi(index as i32);
            let seconds = ns as f64 * 1e-9;
            assert!(
                seconds <= upper * width && seconds > upper / width / width,
                "{ns}"
            );
        }
    }

    #[test]
    fn spans_and_deltas_encode_gaps_and_counts() {
        let mut durations = Histogram::new();
        durations.record_n(1_000, 4);
        durations.record_n(1_020, 1);
        durations.record_n(4_000, 2);
        let buckets = native_buckets(&durations);
        let mut histogram = Vec::new();
        native_fields(&durations, &mut histogram);
        let first = buckets.positive[0].0;
        let second = buckets.positive[1].0;
        assert_eq!(second, first + 1, "1,000 and 1,020 ns: adjacent buckets");
        let third = buckets.positive[2].0;
        let mut expected = Vec::new();
        field_varint(&mut expected, 5, zigzag(5));
        let mut span = Vec::new();
        field_varint(&mut span, 1, zigzag(first));
        field_varint(&mut span, 2, 2);
        field_bytes(&mut expected, 12, &span);
        let mut span = Vec::new();
        field_varint(&mut span, 1, zigzag(third - second - 1));
        field_varint(&mut span, 2, 1);
        field_bytes(&mut expected, 12, &span);
        field_bytes(
            &mut expected,
            13,
            &[zigzag(4) as u8, zigzag(-3) as u8, zigzag(1) as u8],
        );
        assert_eq!(histogram, expected);
    }

    #[test]
    fn an_empty_histogram_has_the_no_op_span() {
        let mut histogram = Vec::new();
        native_fields(&Histogram::new(), &mut histogram);
        let mut expected = Vec::new();
        field_varint(&mut expected, 5, zigzag(5));
        field_bytes(&mut expected, 12, &[]);
        assert_eq!(histogram, expected);
    }
}
