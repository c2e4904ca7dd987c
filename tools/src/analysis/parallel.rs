//! The reports of a trace whose threads can be read side by side (an
//! [`EventSource`] that is `Sync`, such as
//! [`UftraceReader`](crate::export::UftraceReader)): [`latency_of`],
//! [`call_tree_of`], [`write_call_graph_of`] give what the functions of the
//! same names in [`analysis`](super) give, reading threads on every core.
//! The latency forms and [`map_threads`] are
//! [`fntrace_format::analysis::parallel`]'s.

use std::io::Write;

use fntrace_format::EventSource;

use super::callgraph::{write_call_graph_counted, FutureEnds, ReadOrWrite};
use super::calltree::{call_tree_from, CallTree, TreeBuilder};

pub use fntrace_format::analysis::parallel::{
    latency_of, latency_of_with, map_threads, reading_threads,
};

/// [`analysis::call_tree_of`](super::call_tree_of), threads read side by
/// side.
pub fn call_tree_of<S>(source: &S, function: Option<&str>) -> Result<CallTree, S::Error>
where
    S: EventSource + Sync,
    S::Error: Send,
{
    let per_thread = map_threads(source, |_, events| {
        TreeBuilder::of_thread(source, function, events)
    })?;
    Ok(call_tree_from(source, function, per_thread))
}

/// [`analysis::write_call_graph_of`](super::write_call_graph_of), the
/// threads' first reads (which count their events) side by side; the lines
/// are written one thread after another.
pub fn write_call_graph_of<S>(
    source: &S,
    max_lines: Option<usize>,
    out: impl Write,
) -> Result<(), ReadOrWrite<S::Error>>
where
    S: EventSource + Sync,
    S::Error: Send,
{
    write_call_graph_with_futures(source, (max_lines, &FutureEnds::default()), out)
}

/// [`write_call_graph_of`], each future of `ends` shown where it ended
/// (`fntrace replay` of a recording made with `--async`).
pub fn write_call_graph_with_futures<S>(
    source: &S,
    (max_lines, ends): (Option<usize>, &FutureEnds),
    out: impl Write,
) -> Result<(), ReadOrWrite<S::Error>>
where
    S: EventSource + Sync,
    S::Error: Send,
{
    let counts = map_threads(source, |_, events| events.count()).map_err(ReadOrWrite::Read)?;
    write_call_graph_counted(source, &counts, (max_lines, ends), out)
}
