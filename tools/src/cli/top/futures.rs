//! `fntrace top`'s future rows: per async function, the futures the
//! program's runtime future linker saw complete in the interval (a
//! process recording async functions' polls: `fntrace record --async`, or
//! `top --async`), their latency from first poll to Ready (total, and the
//! p50 and p99 of the interval's futures, from the difference of the
//! linker's log-linear histograms: within 6.25 %), the time in their polls
//! (busy) and the rest (waiting); and the futures dropped before Ready in
//! it. Sorted and selected as the functions.

use fntrace_tools::analysis::{human_duration, FutureRow};
use fntrace_tools::glob;

use super::{Interval, TopSort, View};

/// Column headers of the future rows.
pub const FUTURE_COLUMNS: [&str; 10] = [
    "futures/s",
    "futures",
    "polls",
    "latency",
    "p50",
    "p99",
    "busy",
    "waiting",
    "dropped",
    "async function",
];

/// The interval's future rows as cells: selected by `view`'s globs,
/// sorted by its key (total: latency; self: busy; p99; calls: futures),
/// largest first, then by name, cut to its limit.
pub fn future_cells(interval: &Interval, view: &View) -> Vec<Vec<String>> {
    let mut rows: Vec<&FutureRow> = (interval.futures.iter())
        .filter(|row| {
            view.filter
                .is_none_or(|glob| glob::matches(glob, &row.function))
                && !glob::matches_any(view.notrace, &row.function)
        })
        .collect();
    let key = |row: &FutureRow| match view.sort {
        TopSort::Total => row.latency_ns,
        TopSort::SelfTime => row.busy_ns,
        TopSort::P99 => row.quantile(0.99),
        TopSort::Calls => row.completed,
    };
    rows.sort_by(|a, b| {
        key(b)
            .cmp(&key(a))
            .then_with(|| a.function.cmp(&b.function))
    });
    let per_second = |n: u64| match interval.ns {
        0 => 0.0,
        ns => n as f64 * 1e9 / ns as f64,
    };
    rows.iter()
        .take(view.limit)
        .map(|row| {
            vec![
                format!("{:.1}", per_second(row.completed)),
                row.completed.to_string(),
                row.polls.to_string(),
                human_duration(row.latency_ns),
                human_duration(row.quantile(0.5)),
                human_duration(row.quantile(0.99)),
                human_duration(row.busy_ns),
                human_duration(row.latency_ns.saturating_sub(row.busy_ns)),
                row.dropped.to_string(),
                row.function.clone(),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::Sample;
    use super::*;
    use fntrace_tools::analysis::{future_bucket, FUTURE_BUCKETS};

    fn row(name: &str, latencies: &[u64], busy_ns: u64) -> FutureRow {
        let mut buckets = [0; FUTURE_BUCKETS];
        for &ns in latencies {
            buckets[future_bucket(ns)] += 1;
        }
        FutureRow {
            function: name.into(),
            completed: latencies.len() as u64,
            polls: 4 * latencies.len() as u64,
            latency_ns: latencies.iter().sum(),
            busy_ns,
            buckets,
            dropped: 0,
        }
    }

    /// The interval's futures, sorted by the view's key, selected by its
    /// glob, with the columns the functions have.
    #[test]
    fn future_rows_are_sorted_and_selected_as_functions() {
        let before = Sample {
            futures: vec![row("a::serve::{closure#0}", &[30_000_000; 10], 5_000)],
            ..Sample::default()
        };
        let serve = [[30_000_000; 10].as_slice(), &[40_000_000; 4]].concat();
        let after = Sample {
            futures: vec![
                row("a::serve::{closure#0}", &serve, 9_000),
                row("a::client::{closure#0}", &[200_000_000], 1_000),
            ],
            ..Sample::default()
        };
        let interval = super::super::interval(&before, &after);
        let view = View {
            sort: TopSort::Total,
            filter: None,
            notrace: &[],
            limit: 10,
        };
        let cells = future_cells(&interval, &view);
        assert_eq!(cells.len(), 2, "{cells:?}");
        assert_eq!(cells[0][9], "a::client::{closure#0}");
        // Four serve futures of 40 ms in the interval, 16 polls, 4 µs busy.
        assert_eq!(&cells[1][1..3], ["4", "16"]);
        assert_eq!(cells[1][3], human_duration(160_000_000));
        assert_eq!(cells[1][6], human_duration(4_000));
        let p50 = row("", &[40_000_000; 4], 0).quantile(0.5);
        assert_eq!(cells[1][4], human_duration(p50));
        let calls = View {
            sort: TopSort::Calls,
            ..view
        };
        assert_eq!(
            future_cells(&interval, &calls)[0][9],
            "a::serve::{closure#0}"
        );
        let only = View {
            filter: Some("*client*"),
            ..calls
        };
        assert_eq!(future_cells(&interval, &only).len(), 1);
    }
}
