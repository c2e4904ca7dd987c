//! A log-linear latency histogram over `u64` nanoseconds.
//!
//! See [`Histogram`] for the bucket layout, the error bound and the memory
//! used.

use std::collections::VecDeque;

/// Buckets per power of two (above 256): the precision of the histogram.
pub const SUB_BUCKETS: usize = 1 << SUB_BUCKET_BITS;

/// `log2(SUB_BUCKETS)`.
const SUB_BUCKET_BITS: u32 = 7;

/// Buckets needed for the whole `u64` range: 256 exact buckets for
/// `0..=255`, then 128 for each of the 56 powers of two from `2^8` to `2^63`.
const BUCKET_COUNT: usize = (64 - SUB_BUCKET_BITS as usize + 1) * SUB_BUCKETS;

/// Largest relative error of a value reported by [`Histogram::quantile`]
/// with respect to the recorded value it stands for: half a bucket width
/// over the bucket's lowest value, i.e. `1 / (2 × SUB_BUCKETS)`.
pub const MAX_RELATIVE_ERROR: f64 = 1.0 / (2 * SUB_BUCKETS) as f64;

/// Index of the bucket that holds `value`.
fn bucket_index(value: u64) -> usize {
    if value < 2 * SUB_BUCKETS as u64 {
        return value as usize;
    }
    // `value` lies in [2^exponent, 2^(exponent + 1)), exponent >= 8.
    let exponent = 63 - value.leading_zeros();
    let shift = exponent - SUB_BUCKET_BITS;
    let group = (shift + 1) as usize;
    // The top SUB_BUCKET_BITS + 1 bits of `value`, in [128, 256).
    let top_bits = (value >> shift) as usize;
    group * SUB_BUCKETS + (top_bits - SUB_BUCKETS)
}

/// Lowest value and width of bucket `index`.
fn bucket_bounds(index: usize) -> (u64, u64) {
    let group = index / SUB_BUCKETS;
    if group <= 1 {
        return (index as u64, 1);
    }
    let shift = (group - 1) as u32;
    let top_bits = (SUB_BUCKETS + index % SUB_BUCKETS) as u64;
    (top_bits << shift, 1 << shift)
}

/// The value reported for bucket `index`: its middle.
fn bucket_midpoint(index: usize) -> u64 {
    let (lowest, width) = bucket_bounds(index);
    lowest + (width - 1) / 2
}

/// A log-linear (HDR-style) histogram of `u64` values (nanoseconds) with
/// bounded relative error, O(1) recording and bounded memory; histograms
/// merge exactly.
///
/// # Bucket layout
///
/// Values below 2 × [`SUB_BUCKETS`] (256) each get a bucket of their own, so
/// they are recorded exactly. Above that, every power of two `[2^e, 2^(e+1))`
/// is split into [`SUB_BUCKETS`] (128) buckets of equal width `2^(e-7)`:
///
/// | values               | bucket width | buckets |
/// |----------------------|--------------|---------|
/// | `0 ..= 255`          | 1            | 256     |
/// | `256 ..= 511`        | 2            | 128     |
/// | `512 ..= 1023`       | 4            | 128     |
/// | …                    | …            | …       |
/// | `2^63 ..= u64::MAX`  | `2^56`       | 128     |
///
/// 7424 buckets cover the whole `u64` range. A bucket's lowest value is at
/// least 128 times its width, so reporting the middle of the bucket is off by
/// at most half a width: a relative error of at most 1/256 (0.39 %), see
/// [`MAX_RELATIVE_ERROR`].
///
/// # Memory
///
/// Counters are allocated only for the span of buckets between the smallest
/// and the largest value recorded so far (a typical function's latencies span
/// a few powers of two: a few hundred counters). The span never exceeds the
/// 7424 buckets of the full range (58 KiB), however many values are recorded.
/// Recording is O(1): an index computation and an increment, plus, when a
/// value falls outside the span so far, a one-off extension bounded by the
/// full range.
///
/// The exact count, sum, minimum and maximum are kept beside the buckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// Bucket index of `counts[0]`.
    first_bucket: usize,
    /// Counts of buckets `first_bucket ..`; empty when nothing was recorded,
    /// otherwise its first and last counters are non-zero.
    counts: VecDeque<u64>,
    /// Values recorded.
    count: u64,
    /// Their sum, saturating.
    sum: u64,
    /// Their minimum; `u64::MAX` when empty.
    min: u64,
    /// Their maximum; 0 when empty.
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Histogram {
            first_bucket: 0,
            counts: VecDeque::new(),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Records one occurrence of `value`.
    pub fn record(&mut self, value: u64) {
        self.record_n(value, 1);
    }

    /// Records `occurrences` occurrences of `value`.
    pub fn record_n(&mut self, value: u64, occurrences: u64) {
        if occurrences == 0 {
            return;
        }
        self.add_to_bucket(bucket_index(value), occurrences);
        self.count += occurrences;
        self.sum = self.sum.saturating_add(value.saturating_mul(occurrences));
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Adds everything recorded in `other` to `self`, as if each of its
    /// values had been recorded here.
    pub fn merge(&mut self, other: &Histogram) {
        if other.count == 0 {
            return;
        }
        for (offset, &occurrences) in other.counts.iter().enumerate() {
            if occurrences != 0 {
                self.add_to_bucket(other.first_bucket + offset, occurrences);
            }
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Exact sum of the values recorded (saturating at `u64::MAX`).
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Exact smallest value recorded; 0 when empty.
    pub fn min(&self) -> u64 {
        if self.is_empty() {
            0
        } else {
            self.min
        }
    }

    /// Exact largest value recorded; 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Exact mean of the values recorded, rounded to the nearest integer;
    /// 0 when empty.
    pub fn mean(&self) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let count = u128::from(self.count);
        ((u128::from(self.sum) + count / 2) / count) as u64
    }

    /// The `q`-quantile (`0.0 ..= 1.0`) by nearest rank: a value within
    /// [`MAX_RELATIVE_ERROR`] of the `⌈q × count⌉`-th smallest value recorded,
    /// and never outside [`min`](Self::min) ..= [`max`](Self::max).
    /// `q <= 0` gives the exact minimum, `q >= 1` the exact maximum.
    /// 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.is_empty() {
            return 0;
        }
        if q.is_nan() || q <= 0.0 {
            return self.min;
        }
        if q >= 1.0 {
            return self.max;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (offset, &occurrences) in self.counts.iter().enumerate() {
            seen += occurrences;
            if seen >= rank {
                return bucket_midpoint(self.first_bucket + offset).clamp(self.min, self.max);
            }
        }
        // The counters add up to `count`, and `rank <= count`.
        unreachable!("histogram counters add up to less than its count")
    }

    /// Index of the bucket that holds `value` (see the layout above): what
    /// a recorder that keeps its own counters (the runtime's `profile`
    /// tracer) counts by, to hand over with [`Histogram::from_buckets`].
    pub fn bucket_of(value: u64) -> usize {
        bucket_index(value)
    }

    /// Lowest value and width of bucket `index` (`index <` 7424).
    pub fn bucket_range(index: usize) -> (u64, u64) {
        bucket_bounds(index)
    }

    /// The non-empty buckets, lowest first: `(bucket index, count)`.
    pub fn buckets(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|&(_, &count)| count != 0)
            .map(|(offset, &count)| (self.first_bucket + offset, count))
    }

    /// A histogram from counters kept elsewhere: `buckets` as
    /// `(bucket index, count)` (any order, repeats add up), with the exact
    /// sum, minimum and maximum of the values they stand for. The count is
    /// the counters' total.
    pub fn from_buckets(
        buckets: impl IntoIterator<Item = (usize, u64)>,
        sum: u64,
        min: u64,
        max: u64,
    ) -> Histogram {
        let mut histogram = Histogram::new();
        for (index, count) in buckets {
            if count != 0 && index < BUCKET_COUNT {
                histogram.add_to_bucket(index, count);
                histogram.count += count;
            }
        }
        if histogram.count != 0 {
            histogram.sum = sum;
            histogram.min = min;
            histogram.max = max;
        }
        histogram
    }

    /// Adds `occurrences` to bucket `index`, widening the allocated span.
    fn add_to_bucket(&mut self, index: usize, occurrences: u64) {
        if self.counts.is_empty() {
            self.first_bucket = index;
            self.counts.push_back(0);
        } else if index < self.first_bucket {
            for _ in index..self.first_bucket {
                self.counts.push_front(0);
            }
            self.first_bucket = index;
        } else if index >= self.first_bucket + self.counts.len() {
            self.counts.resize(index - self.first_bucket + 1, 0);
        }
        debug_assert!(self.counts.len() <= BUCKET_COUNT);
        self.counts[index - self.first_bucket] += occurrences;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nearest-rank `q`-quantile of sorted `values`.
    fn exact_quantile(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    fn relative_error(reported: u64, exact: u64) -> f64 {
        if exact == 0 {
            return if reported == 0 { 0.0 } else { f64::INFINITY };
        }
        (reported as f64 - exact as f64).abs() / exact as f64
    }

    /// Deterministic pseudo-random numbers (xorshift64*).
    struct Xorshift(u64);

    impl Xorshift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        /// Uniform in [0, 1).
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    const QUANTILES: [f64; 9] = [0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999];

    fn assert_quantiles_within_bound(values: &[u64]) {
        let mut histogram = Histogram::new();
        for &value in values {
            histogram.record(value);
        }
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        for q in QUANTILES {
            let exact = exact_quantile(&sorted, q);
            let reported = histogram.quantile(q);
            let error = relative_error(reported, exact);
            assert!(
                error <= MAX_RELATIVE_ERROR,
                "q={q}: reported {reported}, exact {exact}, error {error}"
            );
            assert!(error <= 0.01);
        }
        assert_eq!(histogram.quantile(0.0), sorted[0]);
        assert_eq!(histogram.quantile(1.0), *sorted.last().unwrap());
        assert_eq!(histogram.min(), sorted[0]);
        assert_eq!(histogram.max(), *sorted.last().unwrap());
        assert_eq!(histogram.count(), values.len() as u64);
        assert_eq!(histogram.sum(), values.iter().sum::<u64>());
    }

    #[test]
    fn bucket_layout_covers_u64_contiguously() {
        assert_eq!(BUCKET_COUNT, 7424);
        assert_eq!(bucket_index(0), 0);
        assert_eq!(bucket_index(255), 255);
        assert_eq!(bucket_index(256), 256);
        assert_eq!(bucket_index(257), 256);
        assert_eq!(bucket_index(u64::MAX), BUCKET_COUNT - 1);
        let mut expected_lowest = 0u64;
        for index in 0..BUCKET_COUNT {
            let (lowest, width) = bucket_bounds(index);
            assert_eq!(lowest, expected_lowest, "bucket {index}");
            let highest = lowest + (width - 1);
            assert_eq!(bucket_index(lowest), index);
            assert_eq!(bucket_index(highest), index);
            expected_lowest = highest.wrapping_add(1);
        }
        assert_eq!(expected_lowest, 0, "the last bucket ends at u64::MAX");
    }

    #[test]
    fn midpoint_of_any_bucket_is_within_the_bound_of_its_values() {
        let mut random = Xorshift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..100_000 {
            // Spread the magnitudes evenly over the whole range.
            let value = random.next() >> (random.next() % 64);
            let reported = bucket_midpoint(bucket_index(value));
            assert!(
                relative_error(reported, value) <= MAX_RELATIVE_ERROR,
                "{value}"
            );
        }
        for value in 0..256 {
            assert_eq!(bucket_midpoint(bucket_index(value)), value);
        }
    }

    #[test]
    fn uniform_distribution_quantiles_within_one_percent() {
        let values: Vec<u64> = (1..=200_000).collect();
        assert_quantiles_within_bound(&values);
    }

    #[test]
    fn exponential_distribution_quantiles_within_one_percent() {
        let mut random = Xorshift(42);
        // Mean 50 µs.
        let values: Vec<u64> = (0..100_000)
            .map(|_| (-(1.0 - random.unit()).ln() * 50_000.0) as u64)
            .collect();
        assert_quantiles_within_bound(&values);
    }

    #[test]
    fn log_uniform_distribution_quantiles_within_one_percent() {
        let mut random = Xorshift(7);
        // From 10 ns to 10 s.
        let values: Vec<u64> = (0..100_000)
            .map(|_| 10f64.powf(1.0 + 9.0 * random.unit()) as u64)
            .collect();
        assert_quantiles_within_bound(&values);
    }

    #[test]
    fn small_values_are_exact() {
        let mut histogram = Histogram::new();
        for value in [3, 1, 4, 1, 5, 9, 2, 6] {
            histogram.record(value);
        }
        // Sorted: 1 1 2 3 4 5 6 9.
        assert_eq!(histogram.quantile(0.5), 3);
        assert_eq!(histogram.quantile(0.9), 9);
        assert_eq!(histogram.quantile(0.125), 1);
        assert_eq!(histogram.quantile(0.25), 1);
        assert_eq!(histogram.quantile(0.26), 2);
        assert_eq!(histogram.mean(), 4); // 31 / 8 = 3.875
    }

    #[test]
    fn extremes_of_the_range() {
        let mut histogram = Histogram::new();
        histogram.record(0);
        histogram.record(u64::MAX);
        assert_eq!(histogram.counts.len(), BUCKET_COUNT);
        assert_eq!(histogram.quantile(0.5), 0);
        let near_max = histogram.quantile(0.51);
        assert!(relative_error(near_max, u64::MAX) <= MAX_RELATIVE_ERROR);
        assert_eq!(histogram.quantile(1.0), u64::MAX);
        assert_eq!(histogram.sum(), u64::MAX);
        histogram.record(5);
        assert_eq!(histogram.sum(), u64::MAX, "saturates");
        assert_eq!(histogram.counts.len(), BUCKET_COUNT, "memory stays bounded");
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        let histogram = Histogram::new();
        assert!(histogram.is_empty());
        assert_eq!(histogram.count(), 0);
        assert_eq!(histogram.min(), 0);
        assert_eq!(histogram.max(), 0);
        assert_eq!(histogram.mean(), 0);
        assert_eq!(histogram.quantile(0.5), 0);
        assert_eq!(histogram, Histogram::default());
    }

    #[test]
    fn merge_equals_recording_everything() {
        let mut random = Xorshift(1234);
        let values: Vec<u64> = (0..20_000).map(|_| random.next() >> 40).collect();
        let mut all = Histogram::new();
        values.iter().for_each(|&value| all.record(value));

        // Split so that the two halves cover different spans of buckets.
        let (small, large): (Vec<u64>, Vec<u64>) = values.iter().partition(|&&v| v < 1 << 20);
        let mut merged = Histogram::new();
        small.iter().for_each(|&value| merged.record(value));
        let mut other = Histogram::new();
        large.iter().for_each(|&value| other.record(value));
        merged.merge(&other);
        assert_eq!(merged, all);

        // And the other way round, and with empty histograms.
        let mut merged = Histogram::new();
        merged.merge(&other);
        let mut small_half = Histogram::new();
        small.iter().for_each(|&value| small_half.record(value));
        merged.merge(&small_half);
        merged.merge(&Histogram::new());
        assert_eq!(merged, all);
        for q in QUANTILES {
            assert_eq!(merged.quantile(q), all.quantile(q));
        }
    }

    #[test]
    fn record_n_equals_repeated_record() {
        let mut once = Histogram::new();
        once.record_n(1_000, 3);
        once.record_n(7, 0);
        let mut repeated = Histogram::new();
        (0..3).for_each(|_| repeated.record(1_000));
        assert_eq!(once, repeated);
    }
}
