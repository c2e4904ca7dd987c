//! A function's call durations as rows of value ranges with their counts,
//! printed as bcc's `funclatency` prints them: one row per power of two
//! (`[lo, hi)` in nanoseconds, the count, a bar of `*`), or finer rows.
//!
//! Every row is a union of whole [`Histogram`] buckets (a bucket never
//! straddles a power of two, and a power of two holds 128 buckets of equal
//! width), so each row's count is exact: the calls whose duration lies in
//! its range, not an estimate.

use std::fmt::Write as _;

use super::histogram::{Histogram, SUB_BUCKETS};

/// Width of the bar of the largest row, in `*`, as `funclatency`'s.
const BAR_WIDTH: u64 = 40;

/// One row of a [`distribution`]: the values in `[low, high)` and how
/// many were recorded there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DistributionRow {
    /// Lowest value of the row.
    pub low: u64,
    /// One past its highest value (`2^64` for the last row of the range,
    /// hence `u128`).
    pub high: u128,
    /// Values recorded in the row: exact.
    pub count: u64,
}

/// The row that holds `value` when each power of two is split into
/// `per_power` rows (never narrower than 1): `(low, high)`.
fn row_of(value: u64, per_power: u64) -> (u64, u128) {
    if value == 0 {
        return (0, 1);
    }
    let base = 1u64 << value.ilog2();
    let width = (base / per_power).max(1);
    let low = base + (value - base) / width * width;
    (low, u128::from(low) + u128::from(width))
}

/// The values of `histogram` in rows, from the row of its smallest value
/// to the row of its largest, empty rows between included: `[0, 1)`, then
/// each power of two `[2^k, 2^(k+1))` split into `per_power` rows of equal
/// width (never narrower than 1 ns). `per_power` is taken up to a power
/// of two, from 1 (log2 rows, as `funclatency`) to [`SUB_BUCKETS`] (128:
/// the histogram's own buckets; more is taken as 128). Empty when the histogram is.
pub fn distribution(histogram: &Histogram, per_power: u32) -> Vec<DistributionRow> {
    let per_power = u64::from(per_power.clamp(1, SUB_BUCKETS as u32)).next_power_of_two();
    let mut rows: Vec<DistributionRow> = Vec::new();
    for (bucket, count) in histogram.buckets() {
        // The whole bucket lies in the row of its lowest value: a row is
        // at least as wide as the buckets of its power of two, and aligned
        // to them.
        let (lowest, _) = Histogram::bucket_range(bucket);
        let (low, high) = row_of(lowest, per_power);
        if let Some(last) = rows.last_mut().filter(|row| row.low == low) {
            last.count += count;
            continue;
        }
        // The empty rows since the last one.
        while let Some(next) = rows
            .last()
            .map(|row| row.high)
            .filter(|&h| h < u128::from(low))
        {
            let (empty_low, empty_high) = row_of(next as u64, per_power);
            rows.push(DistributionRow {
                low: empty_low,
                high: empty_high,
                count: 0,
            });
        }
        rows.push(DistributionRow { low, high, count });
    }
    rows
}

/// `rows` as text: a header `nsecs : count  distribution`, then one line
/// per row, `[low, high) : count  |bar|`, the bar 40 `*` for the largest
/// count and `count × 40 / largest` (rounded down) for the others, as
/// `funclatency`'s. With `merge_empty`, each run of empty rows is one line
/// spanning them. Every line ends with `\n`; nothing when `rows` is empty.
pub fn distribution_text(rows: &[DistributionRow], merge_empty: bool) -> String {
    let mut shown: Vec<DistributionRow> = Vec::with_capacity(rows.len());
    for &row in rows {
        match shown.last_mut() {
            Some(last) if merge_empty && last.count == 0 && row.count == 0 => last.high = row.high,
            _ => shown.push(row),
        }
    }
    let Some(last) = shown.last() else {
        return String::new();
    };
    let digits = last.high.to_string().len();
    let largest = shown.iter().map(|row| row.count).max().unwrap_or(0).max(1);
    let count_width = largest.to_string().len().max("count".len());
    let range_width = 2 * digits + "[, )".len();
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{:>range_width$} : {:<count_width$}  distribution",
        "nsecs", "count"
    );
    for row in &shown {
        let stars = "*".repeat((row.count * BAR_WIDTH / largest) as usize);
        let _ = writeln!(
            text,
            "[{:>digits$}, {:>digits$}) : {:<count_width$}  |{stars:<bar$}|",
            row.low,
            row.high,
            row.count,
            bar = BAR_WIDTH as usize
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(values: &[(u64, u64)]) -> Histogram {
        let mut histogram = Histogram::new();
        for &(value, times) in values {
            histogram.record_n(value, times);
        }
        histogram
    }

    fn row(low: u64, high: u128, count: u64) -> DistributionRow {
        DistributionRow { low, high, count }
    }

    #[test]
    fn log2_rows_count_exactly_with_empty_rows_between() {
        let values = histogram(&[(10_000, 40), (16_383, 1), (300_000, 45), (5_000_000, 15)]);
        let rows = distribution(&values, 1);
        assert_eq!(rows.len(), 10, "{rows:?}");
        assert_eq!(rows[0], row(8_192, 16_384, 41));
        assert_eq!(rows[1], row(16_384, 32_768, 0));
        assert_eq!(rows[5], row(262_144, 524_288, 45));
        assert_eq!(rows[9], row(4_194_304, 8_388_608, 15));
        assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), 101);
        for pair in rows.windows(2) {
            assert_eq!(u128::from(pair[1].low), pair[0].high, "contiguous");
        }
    }

    #[test]
    fn finer_rows_split_each_power_of_two() {
        let values = histogram(&[(0, 2), (1, 1), (5, 3), (1_000, 1), (1_023, 1)]);
        assert_eq!(
            distribution(&values, 1),
            [
                row(0, 1, 2),
                row(1, 2, 1),
                row(2, 4, 0),
                row(4, 8, 3),
                row(8, 16, 0),
                row(16, 32, 0),
                row(32, 64, 0),
                row(64, 128, 0),
                row(128, 256, 0),
                row(256, 512, 0),
                row(512, 1_024, 2),
            ]
        );
        // 4 rows per power of two: [512, 640) … [896, 1024); below 4 the
        // rows are 1 wide.
        let rows = distribution(&values, 4);
        assert_eq!(
            rows[..4],
            [row(0, 1, 2), row(1, 2, 1), row(2, 3, 0), row(3, 4, 0)]
        );
        assert_eq!(
            rows[4..8],
            [row(4, 5, 0), row(5, 6, 3), row(6, 7, 0), row(7, 8, 0)]
        );
        assert_eq!(
            rows[rows.len() - 4..],
            [
                row(512, 640, 0),
                row(640, 768, 0),
                row(768, 896, 0),
                row(896, 1_024, 2),
            ]
        );
        // 128 a power: the histogram's own buckets; more is taken as 128.
        let fine = distribution(&histogram(&[(1_000_000, 1)]), 128);
        assert_eq!(fine, [row(999_424, 1_003_520, 1)]);
        assert_eq!(distribution(&histogram(&[(1_000_000, 1)]), 1_000), fine);
        // Not a power of two: the next one.
        assert_eq!(distribution(&values, 3), rows);
    }

    #[test]
    fn the_whole_range_ends_at_two_to_the_64() {
        let rows = distribution(&histogram(&[(u64::MAX, 1)]), 1);
        assert_eq!(rows, [row(1 << 63, 1 << 64, 1)]);
        assert!(distribution(&Histogram::new(), 1).is_empty());
        assert_eq!(distribution_text(&[], false), "");
    }

    #[test]
    fn text_as_funclatency() {
        let values = histogram(&[(10_000, 40), (30_000, 20), (100_000, 1)]);
        let text = distribution_text(&distribution(&values, 1), false);
        assert_eq!(
            text,
            concat!(
                "           nsecs : count  distribution\n",
                "[  8192,  16384) : 40     |****************************************|\n",
                "[ 16384,  32768) : 20     |********************                    |\n",
                "[ 32768,  65536) : 0      |                                        |\n",
                "[ 65536, 131072) : 1      |*                                       |\n",
            )
        );
        let merged = distribution_text(&distribution(&histogram(&[(1, 1), (100, 2)]), 2), true);
        assert_eq!(
            merged,
            concat!(
                "     nsecs : count  distribution\n",
                "[  1,   2) : 1      |********************                    |\n",
                "[  2,  96) : 0      |                                        |\n",
                "[ 96, 128) : 2      |****************************************|\n",
            )
        );
    }
}
