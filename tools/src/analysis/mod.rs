//! Reports computed from a recorded [`Trace`](crate::Trace): those of
//! [`fntrace_format::analysis`] (the latency table, profile snapshots,
//! OpenMetrics; re-exported here), and the CLI's own: a text call graph
//! ([`call_graph`]), call trees ([`call_tree`]) and selections of a trace
//! ([`select`]). All of them pair entries with exits by one pass, whose
//! rules are
//! [pairing entries with exits](fntrace_format::analysis#pairing-entries-with-exits).
//!
//! Each report has a form that reads any [`EventSource`](crate::EventSource)
//! ([`latency_of`], [`call_tree_of`], [`write_call_graph_of`]) and, through
//! [`Selected`], any selection of it; the forms that take a
//! [`Trace`](crate::Trace) (`latency`, `call_tree`, `call_graph`, `select`)
//! are the same code on a trace in memory.

pub use fntrace_format::analysis::*;

mod callgraph;
mod calltree;
mod futures;
pub mod parallel;
mod select;

pub use callgraph::{call_graph, write_call_graph, write_call_graph_of, FutureEnds, ReadOrWrite};
pub use calltree::{call_tree, call_tree_of, Backtrace, CallNode, CallTree};
pub use futures::{futures_of, split_values, Future, FutureEnd, Futures};
pub use select::{select, Selected, Selection, Unmatched};

#[cfg(test)]
pub(crate) mod tests {
    //! Event constructors for the tests of this crate's reports and exports.

    use fntrace_format::{EventKind, GraphEvent};

    /// An event, for tests that build traces by hand.
    pub(crate) fn test_event(
        time_ns: u64,
        function: usize,
        depth: u16,
        kind: EventKind,
    ) -> GraphEvent {
        GraphEvent {
            time_ns,
            function,
            depth,
            kind,
        }
    }

    pub(crate) fn entry(time_ns: u64, function: usize, depth: u16) -> GraphEvent {
        test_event(time_ns, function, depth, EventKind::Entry)
    }

    pub(crate) fn exit(time_ns: u64, function: usize, depth: u16) -> GraphEvent {
        test_event(time_ns, function, depth, EventKind::Exit)
    }
}
