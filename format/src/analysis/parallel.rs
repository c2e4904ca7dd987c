//! The reports of a trace whose threads can be read side by side (an
//! [`EventSource`] that is `Sync`, such as
//! [`UftraceReader`](crate::export::UftraceReader)): [`latency_of`] and
//! [`latency_of_with`] give what the functions of the same names in
//! [`analysis`](super) give, reading threads on every core (the CLI's call
//! tree and call graph have their own, on [`map_threads`] too).
//!
//! [`map_threads`] hands each thread to a function on one of a few worker
//! threads, one per core, and returns the results in the trace's thread
//! order; the reports merge them in that order, so that what they print
//! does not depend on which worker finished first or on the number of
//! cores.

use super::latency::{latency_from, LatencyReport, Rows, ThreadDurations};
use crate::source::EventSource;

pub use super::threads::{map_threads, reading_threads};

/// [`analysis::latency_of`](super::latency_of), threads read side by side.
pub fn latency_of<S>(source: &S) -> Result<LatencyReport, S::Error>
where
    S: EventSource + Sync,
    S::Error: Send,
{
    latency_of_with(source, Rows::ByName)
}

/// [`analysis::latency_of_with`](super::latency_of_with), threads read side
/// by side.
pub fn latency_of_with<S>(source: &S, rows: Rows) -> Result<LatencyReport, S::Error>
where
    S: EventSource + Sync,
    S::Error: Send,
{
    let per_thread = map_threads(source, |_, events| ThreadDurations::of(events))?;
    Ok(latency_from(source, rows, per_thread))
}
