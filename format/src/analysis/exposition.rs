//! What a metrics text holds: which functions ([`Exposition`]: a filter,
//! a ceiling, short or full names), which of them carry a duration
//! histogram, in which text format, and the process it describes. The
//! selection is separate from the writing ([`super::openmetrics`]), so
//! that another encoding (a protobuf exposition) can take the same rows.
//!
//! # Series a monitoring system can take
//!
//! A function with a histogram is 37 series (32 buckets, its sum and
//! count, the self-time summary's sum and count, running calls); without,
//! 3 (the summary and running calls: its calls and self time). Only the
//! [`Exposition::histograms`] functions with the most total time carry the
//! histogram by default. Labels are [`short_name`]s by default (generic
//! arguments make most of a Rust service's label bytes, and a series of
//! every instance); the instances of one short name are merged
//! into one series (as functions of one name already were), never told
//! apart by a suffix that would change with what else is profiled.

use std::borrow::Cow;
use std::collections::HashMap;

use super::histogram::Histogram;
use super::profile::{FunctionProfile, ProfileSnapshot};
use crate::glob;
use crate::names::short_name;

/// The most functions (series names) the metrics endpoint exports by
/// default (`FNTRACE_METRICS_MAX_FUNCTIONS`).
pub const DEFAULT_MAX_FUNCTIONS: usize = 500;

/// How many of the exported functions carry a duration histogram by
/// default (`FNTRACE_METRICS_HISTOGRAMS`): those with the most total
/// time. 10 × 37 series, the others 3 each.
pub const DEFAULT_HISTOGRAMS: usize = 10;

/// The text an exposition is written in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TextFormat {
    /// OpenMetrics 1.0 (`application/openmetrics-text`): a counter is
    /// family `x`, sample `x_total`.
    #[default]
    OpenMetrics,
    /// The Prometheus text format 0.0.4 (`text/plain; version=0.0.4`),
    /// which `promtool check metrics` lints: a counter is family and
    /// sample `x_total`. Everything else is written alike.
    Prometheus,
}

/// The process a text describes: `fntrace_build_info`'s labels and
/// `fntrace_process_threads`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The fntrace runtime's version (`0.1.0`).
    pub version: String,
    /// The process id.
    pub pid: u32,
    /// The executable's file name (`kv-service`).
    pub exe: String,
    /// Threads alive when the text was made (`/proc/self/task`).
    pub threads: u64,
}

/// What a metrics text exports and how it is written.
#[derive(Clone, Debug)]
pub struct Exposition {
    /// The text format.
    pub format: TextFormat,
    /// Globs (the trace filter's, [`glob`]) a function's full name must
    /// match to be exported, and `!glob`s it must not match; no plain
    /// glob: every function not excluded.
    pub filter: Vec<String>,
    /// The most series names exported: those with the most total time;
    /// the others are counted in `fntrace_metrics_functions_omitted`.
    pub max_functions: usize,
    /// How many of them carry the duration histogram: those with the most
    /// total time.
    pub histograms: usize,
    /// Label values in full (generic arguments kept) rather than
    /// [`short_name`]s.
    pub full_names: bool,
    /// Classic histogram buckets per power of two (1, 2, 4 … 128): each
    /// power of two from 128 ns to 137 s split into that many equal parts
    /// ([`duration_bounds_ns`](super::duration_bounds_ns)), for scrapers
    /// without native histograms that need finer quantiles; 30 × this
    /// many bounds and one.
    pub buckets_per_doubling: u32,
    /// The process, for `fntrace_build_info` and `fntrace_process_threads`
    /// (left out when `None`).
    pub process: Option<ProcessInfo>,
}

impl Default for Exposition {
    /// The metrics endpoint's defaults: short names, 500 functions at
    /// most, the 10 with the most total time with histograms.
    fn default() -> Self {
        Exposition {
            format: TextFormat::OpenMetrics,
            filter: Vec::new(),
            max_functions: DEFAULT_MAX_FUNCTIONS,
            histograms: DEFAULT_HISTOGRAMS,
            full_names: false,
            buckets_per_doubling: 1,
            process: None,
        }
    }
}

impl Exposition {
    /// Every function, each with its histogram, under its full name, in
    /// `format`: what `fntrace ctl TARGET metrics` prints.
    pub fn everything(format: TextFormat) -> Self {
        Exposition {
            format,
            max_functions: usize::MAX,
            histograms: usize::MAX,
            full_names: true,
            ..Exposition::default()
        }
    }
}

/// The functions of one label value (one series), merged.
pub(super) struct Series<'a> {
    /// Its label value, escaped.
    pub(super) name: String,
    /// The functions of that name; one most of the time.
    pub(super) functions: Vec<&'a FunctionProfile>,
    /// Their summed total time: what the ceiling ranks by.
    pub(super) total_ns: u64,
    /// Whether it carries the duration histogram.
    pub(super) histogram: bool,
}

impl Series<'_> {
    /// The merged durations: the one function's own when there is one
    /// (no copy).
    pub(super) fn durations(&self) -> Cow<'_, Histogram> {
        match self.functions[..] {
            [one] => Cow::Borrowed(&one.durations),
            _ => {
                let mut merged = Histogram::new();
                for function in &self.functions {
                    merged.merge(&function.durations);
                }
                Cow::Owned(merged)
            }
        }
    }

    pub(super) fn self_ns(&self) -> u64 {
        self.functions
            .iter()
            .fold(0u64, |sum, f| sum.saturating_add(f.self_ns))
    }

    pub(super) fn calls(&self) -> u64 {
        self.functions.iter().map(|f| f.durations.count()).sum()
    }

    pub(super) fn running(&self) -> u64 {
        self.functions.iter().map(|f| f.running).sum()
    }
}

/// The series `options` export from `snapshot`, merged by label value, in
/// label order, and how many series names were left out by the ceiling
/// (those the filter leaves out are not counted: they were not asked
/// for).
pub(super) fn select<'a>(
    snapshot: &'a ProfileSnapshot,
    options: &Exposition,
    escape: impl Fn(&str) -> String,
) -> (Vec<Series<'a>>, usize) {
    let (excluded, included): (Vec<&str>, Vec<&str>) = options
        .filter
        .iter()
        .map(|glob| glob.as_str())
        .partition(|glob| glob.starts_with('!'));
    let excluded: Vec<&str> = excluded.iter().map(|glob| &glob[1..]).collect();
    let mut by_name: HashMap<Cow<'a, str>, Series<'a>> = HashMap::new();
    for function in &snapshot.functions {
        if (!included.is_empty() && !glob::matches_any(&included, &function.name))
            || glob::matches_any(&excluded, &function.name)
        {
            continue;
        }
        let name = if function.name.is_empty() {
            Cow::Owned(format!("{:#x}", function.function))
        } else if options.full_names {
            Cow::Borrowed(function.name.as_str())
        } else {
            short_name(&function.name)
        };
        let row = by_name.entry(name).or_insert_with_key(|name| Series {
            name: escape(name),
            functions: Vec::with_capacity(1),
            total_ns: 0,
            histogram: false,
        });
        row.functions.push(function);
        row.total_ns = row.total_ns.saturating_add(function.total_ns);
    }
    let mut series: Vec<(Cow<'_, str>, Series<'_>)> = by_name.into_iter().collect();
    // The most total time first, ties by name: the same choice on every
    // scrape of the same profile.
    let rank = |(a_name, a): &(Cow<'_, str>, Series<'_>),
                (b_name, b): &(Cow<'_, str>, Series<'_>)| {
        b.total_ns.cmp(&a.total_ns).then_with(|| a_name.cmp(b_name))
    };
    let omitted = series.len().saturating_sub(options.max_functions);
    if omitted > 0 {
        series.select_nth_unstable_by(options.max_functions, rank);
        series.truncate(options.max_functions);
    }
    if options.histograms >= series.len() {
        series.iter_mut().for_each(|(_, row)| row.histogram = true);
    } else if options.histograms > 0 {
        series.select_nth_unstable_by(options.histograms, rank);
        series[..options.histograms]
            .iter_mut()
            .for_each(|(_, row)| row.histogram = true);
    }
    // By name, in byte order: the same series in the same order on every
    // scrape, which parsers that cache the last scrape prefer.
    series.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
    (series.into_iter().map(|(_, row)| row).collect(), omitted)
}
