//! Reports computed from a recorded [`Trace`](crate::Trace) that the
//! runtime serves live as well as the CLI prints: per-function latency
//! statistics ([`latency()`]), the profile tracer's snapshots
//! ([`ProfileSnapshot`]) and their OpenMetrics text ([`openmetrics`]). The
//! CLI's other reports (call trees, call graphs, selections) are in
//! fntrace-tools, on the pairing pass of [`pairing`].
//!
//! # Pairing entries with exits
//!
//! Every report, and every [export](crate::export), reads a thread's events
//! through one pairing pass (the [`pairing`] module), which walks
//! the events in time order with a stack of open calls, their depths
//! increasing from the outermost call to the innermost, and applies the
//! rules of the data model:
//!
//! - An entry at depth `d` closes (as *unfinished*) every open call of depth
//!   `≥ d`: a new call at the same or a shallower depth means those frames
//!   were left without their exit being recorded (unwound by a panic or
//!   `longjmp`). Then it opens a call.
//! - An exit at depth `d` completes the open call of depth `d`, after closing,
//!   as unfinished, every open call deeper than `d`. If no call of depth `d`
//!   is open, the exit is *unmatched*: its entry was never recorded (tracing
//!   was switched on in the middle of the call, or the entry was lost).
//! - Calls still open when the events end are unfinished.
//!
//! The reports show the events as recorded; the exports need calls that
//! nest, starting with those already running when tracing started. So the
//! pass has two readings, which differ where the events contradict each other
//! or tracing started inside calls:
//!
//! - *Calls running when tracing started.* The reports assume none: their
//!   exits are unmatched (and still close the open calls deeper than them).
//!   The exports open them before the first event, outermost first, as if
//!   entered at the thread's first timestamp; their exits complete them. They
//!   are the exits that match no entry, as long as each is shallower than the
//!   one before it (an inner call returns before its caller does) and no call
//!   was entered at its depth or a shallower one before it (that call would
//!   have had to return first).
//! - *An exit naming another function than the open call of its depth.* The
//!   reports close that call as unfinished and count the exit as unmatched.
//!   The exports pair by depth alone, as the data model does
//!   ([`ThreadTrace::events`](crate::ThreadTrace::events)): the exit
//!   completes the call.
//! - *Any other unmatched exit.* The reports close the open calls deeper than
//!   it as unfinished; the exports leave them open and ignore the exit.
//!
//! A completed call knows its duration (exit time minus entry time) and the
//! summed durations of its completed *direct* children (the completed calls
//! that were innermost-open-inside it), from which self time follows.
//! Unfinished children have no duration and are not subtracted: their time
//! stays in the parent's self time.
//!
//! # Costs
//!
//! The pairing pass takes time linear in the number of events, times the
//! logarithm of the nesting depth (an exit finds the open call of its depth
//! by binary search), and keeps one stack entry per open call. [`latency()`]
//! keeps one [`Histogram`] per function per thread while it reads that
//! thread, then folds it into the process-wide histogram of the function.
//!
//! # Reading from files
//!
//! Each report has a form that reads any [`EventSource`](crate::EventSource)
//! ([`latency_of`]; the CLI's `call_tree_of`, `write_call_graph_of`) and,
//! through the CLI's `Selected`, any selection of it: on a uftrace
//! directory opened with
//! [`UftraceReader`](crate::export::UftraceReader) they read each thread's
//! records as they go, so memory is what the report keeps (histograms, call
//! paths, open calls), never the events. The forms that take a [`Trace`](crate::Trace)
//! (`latency`, and the CLI's `call_tree`, `call_graph`, `select`) are the
//! same code on a trace in memory.

mod distribution;
mod exposition;
#[cfg(test)]
mod exposition_tests;
mod future_metrics;
mod fxhash;
mod histogram;
mod latency;
mod openmetrics;
pub mod pairing;
pub mod parallel;
mod profile;
mod prometheus_proto;
mod since;
pub mod threads;

/// Which time every duration of these reports is, as tables, flame graphs
/// and metrics say it: measured from a call's entry to its exit, so a call
/// blocked (in `read`, on a lock, off the CPU waiting for it) counts as
/// much as one computing.
pub const WALL_TIME: &str = "wall-clock time, blocked time included";

pub use distribution::{distribution, distribution_text, DistributionRow};
pub use exposition::{
    Exposition, ProcessInfo, TextFormat, DEFAULT_HISTOGRAMS, DEFAULT_MAX_FUNCTIONS,
};
pub use future_metrics::{
    future_bucket, with_future_metrics, write_future_metrics, FutureRow, LinkerTable,
    FUTURE_BUCKETS,
};
pub use histogram::{Histogram, MAX_RELATIVE_ERROR, SUB_BUCKETS};
pub use latency::{
    human_duration, latency, latency_of, latency_of_with, FunctionStats, LatencyReport, Rows,
    Shortfall, ThreadSummary,
};
pub use openmetrics::{
    duration_bounds_ns, exposition, openmetrics, write_exposition, DURATION_BUCKETS_NS,
    MAX_BUCKETS_PER_DOUBLING, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE,
};
pub use profile::{FunctionProfile, NotKept, PathProfile, ProfileSnapshot, ProfileTextError};
pub use prometheus_proto::{
    accepts_protobuf, prometheus_protobuf, write_future_protobuf, NATIVE_SCHEMA,
    PROTOBUF_CONTENT_TYPE,
};
pub use since::NotLater;

#[cfg(test)]
mod tests {
    //! Event constructors for the tests of this module's files.

    use crate::trace::{test_event, EventKind, GraphEvent};

    pub(crate) fn entry(time_ns: u64, function: usize, depth: u16) -> GraphEvent {
        test_event(time_ns, function, depth, EventKind::Entry)
    }

    pub(crate) fn exit(time_ns: u64, function: usize, depth: u16) -> GraphEvent {
        test_event(time_ns, function, depth, EventKind::Exit)
    }
}
