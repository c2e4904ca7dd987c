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

//! # Layers
//! Each module uses only the ones listed before it:
//! `error`, `filter` (plain types) → `arch` (instruction encodings, saved
//! registers) → `sys` (clock, thread ids, errno, futex, `/proc`) →
//! `symbols` → `sites` (the call-site table, discovery) → `patch` (the
//! one seam for writing live text, one file per protocol) → `tracer` (the
//! tracer interface and registry) → `rt` (the traced-call path: what the
//! trampolines call; it reaches tracers only through that interface) →
//! `builtin` (the built-in `function`, `graph` and `profile` tracers) → `control`
//! (init, enable, disable, dump) → `record` (the streaming recorder) →
//! `flight` (the flight recorder) → `vars` (the table of `FNTRACE_*`
//! variables and their parsers) → `session` (the process-wide state the
//! front ends share: the filter, the recording, the flight recorder) →
//! `capi` (the C ABI of `include/fntrace.h`) → `socket` (live control: the control socket's transport and
//! protocol, and what its commands do) → `preload` (start-up from the
//! environment, and the C library functions fntrace interposes) → this
//! root (the public API). The trace
//! model, the uftrace format, the wire protocol and the latency report are
//! the `fntrace-format` crate; the CLI's reports and exporters are
//! `fntrace-tools`, which the runtime does not link.

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("fntrace supports x86-64 Linux only: its trampolines are x86-64 assembly");

mod arch;
mod builtin;
mod capi;
mod control;
mod error;
mod filter;
mod flight;
mod patch;
mod preload;
mod record;
mod rt;
mod session;
mod sites;
mod socket;
mod symbols;
mod sys;
mod tracer;
mod vars;

pub use arch::x86_64::{SavedRegs, SiteForm};
pub use control::{
    disable, dump, dump_with_progress, enable, enable_with, flush, function_name, init,
    patch_functions, patch_report, set_arg_specs, site_of, sites, stats, DumpReport, Stats,
};
pub use error::Error;
pub use filter::Filter;
pub use flight::{
    flight_record, FlightOptions, FlightRecorder, FlightReport, SnapshotReport, SnapshotThreads,
    Trigger, TriggeredSnapshot, DEFAULT_SNAPSHOTS_PER_MINUTE, FLIGHT_EVENT_BYTES,
    MAX_FLIGHT_BUDGET_BYTES, TRIGGER_FILE,
};
pub use patch::entry_patch::{EntryPatchReport, Refusal};
pub use socket::live::{serve_control, serve_control_with, serve_metrics, serve_metrics_with};
// The trace model, the uftrace format and the latency report are the
// fntrace-format crate's, which the runtime writes and serves them with;
// reachable here under their old paths. (The CLI's call graphs, call trees
// and exporters are fntrace-tools', not the runtime's.)
pub use builtin::function::{
    FunctionEvent, FunctionTracer, DEFAULT_FUNCTION_BUFFER_EVENTS, FUNCTION_TRACER,
};
pub use builtin::graph::{GraphTracer, GRAPH_TRACER};
pub use builtin::profile::{ProfileTracer, PROFILE_TRACER};
pub use fntrace_format::{analysis, export, EventKind, GraphEvent, ThreadTrace, Trace};
pub use patch::priority::{patch_priority, set_patch_priority, PatchBoost, PatchPriority};
pub use patch::stop_world::{set_ack_timeout, set_stop_signal};
pub use patch::{patch_protocol, set_patch_protocol, PatchProtocol};
pub use record::{
    record, record_with, RecordMode, RecordOptions, RecordReport, Recording,
    DEFAULT_DRAIN_INTERVAL, DEFAULT_RECORD_BUFFER_EVENTS, DEFAULT_RECORD_MEMORY_BYTES,
    RECORD_EVENT_BYTES,
};
pub use rt::shadow::MAX_HOOKED_DEPTH;
pub use rt::thread::{current_tid, generic_entries_on_this_thread, untraced};
pub use sites::{ScanReport, SiteInfo, SiteKind};
pub use socket::{
    default_control_path, ControlOptions, ControlServer, MetricsOptions, MetricsServer,
};
pub use tracer::{register, tracer_names, Call, Return, Tracer, MAX_TRACERS};
