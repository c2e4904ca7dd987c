//! fntrace-format: what the fntrace runtime and the `fntrace` command share.
//! It holds the in-memory trace model ([`Trace`], and [`EventSource`] for
//! reading one without holding it), the uftrace data directory (written
//! whole, streamed by the recorder, read back: [`export`]), function names
//! and name globs ([`glob`]), sizes and durations ([`units`]), the control
//! socket's wire protocol ([`wire`]), and the reports the runtime serves
//! live ([`analysis`]: the latency table, profile snapshots, OpenMetrics).
//!
//! The runtime (the `fntrace` library, which defines `mcount` and
//! `__fentry__`) links this crate and nothing of the CLI: the reports and
//! exporters only the command prints (call trees, call graphs, selections,
//! Chrome, Perfetto, flame graphs) are the `fntrace-tools` crate, built on
//! this one.
//!
//! ```no_run
//! let trace = fntrace_format::export::read_uftrace_dir("trace-dir".as_ref())?;
//! println!("{}", fntrace_format::analysis::latency(&trace).table(20));
//! # Ok::<(), fntrace_format::export::ExportError>(())
//! ```
//!
//! A recording of any length is read the same way without holding it:
//! [`UftraceReader`](export::UftraceReader) is an [`EventSource`] that reads
//! each thread's records from its file as a report goes.
//!
//! ```no_run
//! let reader = fntrace_format::export::UftraceReader::open("trace-dir".as_ref())?;
//! println!("{}", fntrace_format::analysis::latency_of(&reader)?.table(20));
//! # Ok::<(), fntrace_format::export::ExportError>(())
//! ```

#![forbid(unsafe_code)]

pub mod analysis;
pub mod argspec;
pub mod coroutine;
pub mod elf;
pub mod export;
pub mod glob;
pub mod maps;
mod names;
mod protobuf;
mod source;
mod trace;
pub mod units;
pub mod wire;

pub use names::{demangle, demangle_full, short_name, uftrace_symbol_name};
pub use source::{infallible, EventSource, Gap, ThreadInfo, Values, WithGaps};
pub use trace::{EventKind, GraphEvent, Library, ThreadTrace, Trace};
