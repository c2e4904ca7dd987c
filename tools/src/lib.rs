//! fntrace-tools: the offline side of fntrace. It holds the in-memory trace
//! model ([`Trace`]), the reports computed from it ([`analysis`]), its
//! exports and the uftrace reader ([`export`]), and the `fntrace` command-line
//! tool built on them.
//!
//! Nothing here links the tracing runtime: the `fntrace` library (which
//! defines `mcount`, `__fentry__` and patches the running program) depends on
//! this crate to write its dumps, never the reverse. So the CLI, which only
//! reads files, is an ordinary program.
//!
//! ```no_run
//! let trace = fntrace_tools::export::read_uftrace_dir("trace-dir".as_ref())?;
//! println!("{}", fntrace_tools::analysis::latency(&trace).table(20));
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
pub mod control;
#[cfg(feature = "elf")]
pub mod elf;
pub mod export;
pub mod glob;
mod names;
mod source;
mod trace;
pub mod units;

pub use names::{demangle, demangle_full, uftrace_symbol_name};
pub use source::{EventSource, Gap, ThreadInfo, WithGaps};
pub use trace::{EventKind, GraphEvent, Library, ThreadTrace, Trace};
