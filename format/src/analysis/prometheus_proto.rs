//! The live profile in Prometheus's protobuf exposition format
//! (`io.prometheus.client.MetricFamily` messages, each preceded by its
//! length as a varint), which the metrics endpoint serves to a scraper
//! that asks for it in its `Accept` header: Prometheus does when its
//! native histograms are on (`--enable-feature=native-histograms`).
//!
//! The families and values are those of the OpenMetrics text
//! ([`openmetrics_top`](super::openmetrics_top)); what the text cannot say
//! is the duration histogram as a **native histogram**: exponential
//! buckets at schema [`NATIVE_SCHEMA`] (each power of two split into
//! 2^5 = 32 buckets, each 2.2 % wider than the one before), filled from the
//! profile's own 128 sub-buckets per power of two rather than from the
//! text's 31 powers of two. Each sub-bucket (at most 0.78 % wide) is
//! counted whole in the native bucket that holds its middle, so a native
//! bucket's count may be off by the calls of a sub-bucket that straddles
//! its edge: quantiles stay within about one native bucket (2.2 %) of the
//! profile's own. The classic buckets of the text are in the same message
//! for readers that ignore native histograms. Calls recorded as 0 ns are
//! the zero bucket's (threshold 0).

use super::histogram::Histogram;
use super::openmetrics::{
    cumulative_counts, process_gauges, top_series, DURATION_BUCKETS_NS, DURATION_HELP,
    RUNNING_HELP, SELF_HELP,
};
use super::profile::ProfileSnapshot;
use crate::protobuf::{field_bytes, field_double, field_varint, varint, zigzag};

/// The HTTP content type of [`prometheus_protobuf_top`]'s bytes.
pub const PROTOBUF_CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// The native histograms' schema: 2^5 buckets per power of two.
pub const NATIVE_SCHEMA: i32 = 5;

/// `MetricType` values.
const GAUGE: u64 = 1;
const SUMMARY: u64 = 2;
const HISTOGRAM: u64 = 4;

/// Whether an HTTP `Accept` header asks for this format (Prometheus
/// names the message type in it).
pub fn accepts_protobuf(accept: &str) -> bool {
    accept.contains("application/vnd.google.protobuf")
        && accept.contains("io.prometheus.client.MetricFamily")
}

/// The snapshot's metrics in the protobuf exposition format, for the
/// `max_functions` series names with the most total time (as
/// [`openmetrics_top`](super::openmetrics_top) chooses them).
pub fn prometheus_protobuf_top(snapshot: &ProfileSnapshot, max_functions: usize) -> Vec<u8> {
    let (series, omitted) = top_series(snapshot, max_functions);
    let mut out = Vec::new();

    let metrics = series.iter().map(|row| {
        let durations = row.durations();
        let mut histogram = Vec::new();
        field_varint(&mut histogram, 1, durations.count());
        field_double(&mut histogram, 2, durations.sum() as f64 * 1e-9);
        for (&bound, count) in DURATION_BUCKETS_NS
            .iter()
            .zip(cumulative_counts(&durations))
        {
            // Bucket.cumulative_count (1), upper_bound (2).
            let mut bucket = Vec::new();
            field_varint(&mut bucket, 1, count);
            field_double(&mut bucket, 2, bound as f64 * 1e-9);
            field_bytes(&mut histogram, 3, &bucket);
        }
        native_fields(&durations, &mut histogram);
        metric(&row.name, 7, &histogram)
    });
    family(
        &mut out,
        "fntrace_function_duration_seconds",
        DURATION_HELP,
        HISTOGRAM,
        metrics,
    );

    let metrics = series.iter().map(|row| {
        let calls: u64 = row.functions.iter().map(|f| f.durations.count()).sum();
        // Summary.sample_count (1), sample_sum (2).
        let mut summary = Vec::new();
        field_varint(&mut summary, 1, calls);
        field_double(&mut summary, 2, row.self_ns() as f64 * 1e-9);
        metric(&row.name, 4, &summary)
    });
    family(
        &mut out,
        "fntrace_function_self_seconds",
        SELF_HELP,
        SUMMARY,
        metrics,
    );

    let metrics = series
        .iter()
        .map(|row| metric(&row.name, 2, &gauge(row.running())));
    family(
        &mut out,
        "fntrace_function_running_calls",
        RUNNING_HELP,
        GAUGE,
        metrics,
    );

    for (name, help, value) in process_gauges(snapshot, omitted) {
        let unlabelled = metric_of(&[], 2, &gauge(value));
        family(&mut out, name, help, GAUGE, [unlabelled]);
    }
    out
}

/// A `Gauge` message.
fn gauge(value: u64) -> Vec<u8> {
    let mut gauge = Vec::new();
    field_double(&mut gauge, 1, value as f64);
    gauge
}

/// A `Metric` labelled `function` (its escaped text value given) holding
/// `value` in field `kind` (gauge 2, summary 4, histogram 7).
fn metric(escaped_name: &str, kind: u64, value: &[u8]) -> Vec<u8> {
    let function = unescape(escaped_name);
    metric_of(&[("function", &function)], kind, value)
}

/// A `Metric` with `labels` (`LabelPair` name 1, value 2 in field 1).
fn metric_of(labels: &[(&str, &str)], kind: u64, value: &[u8]) -> Vec<u8> {
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
    let buckets = native_buckets(durations);
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
    let mut native = NativeBuckets::default();
    for (index, count) in durations.buckets() {
        let (lowest, width) = Histogram::bucket_range(index);
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

/// The label value of a text series name (`\\`, `\"`, `\n` undone).
fn unescape(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => plain.push('\n'),
                Some(other) => plain.push(other),
                None => plain.push('\\'),
            },
            (c, false) => plain.push(c),
        }
    }
    plain
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

    #[test]
    fn label_values_are_unescaped() {
        assert_eq!(unescape(r#"a\\b\"c\nd"#), "a\\b\"c\nd");
    }
}
