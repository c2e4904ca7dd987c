//! fntrace-tools: the offline side of fntrace, what only the `fntrace`
//! command runs. It holds the reports the CLI prints besides those the
//! runtime shares ([`analysis`]: call trees, call graphs, selections), the
//! exports ([`export`]: Chrome / Perfetto JSON, Perfetto protobuf, flame
//! graphs), and the command built on them.
//!
//! The trace model, the uftrace format, names, globs, units, the control
//! socket's wire protocol and the latency report are the `fntrace-format`
//! crate, which the runtime links too; this crate re-exports it (its
//! [`analysis`] and [`export`] hold both crates' items), so that the CLI
//! names one crate. Nothing here links the tracing runtime: the CLI, which
//! only reads files and talks to sockets, is an ordinary program.
//!
//! ```no_run
//! let trace = fntrace_tools::export::read_uftrace_dir("trace-dir".as_ref())?;
//! println!("{}", fntrace_tools::analysis::call_graph(&trace, Some(30)));
//! # Ok::<(), fntrace_tools::export::ExportError>(())
//! ```
//!
//! A recording of any length is read the same way without holding it:
//! [`UftraceReader`](export::UftraceReader) is an [`EventSource`] that reads
//! each thread's records from its file as a report goes.
//!
//! ```no_run
//! let reader = fntrace_tools::export::UftraceReader::open("trace-dir".as_ref())?;
//! println!("{}", fntrace_tools::analysis::latency_of(&reader)?.table(20));
//! # Ok::<(), fntrace_tools::export::ExportError>(())
//! ```

#![forbid(unsafe_code)]

pub mod analysis;
pub mod export;

pub use fntrace_format::{
    argspec, demangle, demangle_full, elf, glob, maps, uftrace_symbol_name, units, wire, EventKind,
    EventSource, Gap, GraphEvent, Library, ThreadInfo, ThreadTrace, Trace, Values, WithGaps,
};
