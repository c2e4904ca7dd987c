//! fntrace: an in-process function tracer for x86-64 Linux.
//!
//! Every function compiled with mcount/fentry instrumentation (`gcc -pg`,
//! `gcc -pg -mfentry`, `rustc -Zinstrument-mcount`) calls `mcount` or
//! `__fentry__` at its entry. fntrace provides those symbols, finds every such
//! call site ([`init`]), turns each into a NOP, and on [`enable`] patches the
//! sites back into calls that reach the registered [`Tracer`]s, while the
//! process's other threads keep running. [`disable`] puts the NOPs back.
//!
//! ```no_run
//! fntrace::init()?;
//! fntrace::enable("function")?;
//! // ... the service runs ...
//! fntrace::disable("function")?;
//! for event in fntrace::FUNCTION_TRACER.take_events() {
//!     println!("{:#x} called from {:#x}", event.function, event.parent);
//! }
//! # Ok::<(), fntrace::Error>(())
//! ```

#![warn(missing_docs)]

pub mod analysis;
mod arch;
mod control;
mod error;
pub mod export;
mod filter;
mod patch;
mod rt;
mod sites;
mod symbols;
mod sys;
mod trace;
mod tracer;

pub use arch::x86_64::{SavedRegs, SiteForm};
pub use control::{
    disable, dump, dump_with_progress, enable, enable_with, flush, function_name, init, site_of,
    sites, stats, DumpReport, Stats,
};
pub use error::Error;
pub use filter::Filter;
pub use patch::stop_world::{set_ack_timeout, set_stop_signal};
pub use rt::shadow::MAX_DEPTH as MAX_HOOKED_DEPTH;
pub use rt::thread::{current_tid, generic_entries_on_this_thread, untraced};
pub use sites::{ScanReport, SiteInfo, SiteKind};
pub use trace::{EventKind, GraphEvent, ThreadTrace, Trace};
pub use tracer::function::{FunctionEvent, FunctionTracer, FUNCTION_TRACER};
pub use tracer::graph::{GraphTracer, GRAPH_TRACER};
pub use tracer::{names as tracers, register, Call, Return, Tracer, MAX_TRACERS};
