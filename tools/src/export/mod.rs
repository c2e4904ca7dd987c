//! Exports of a recorded [`Trace`](crate::Trace): those of
//! [`fntrace_format::export`] (the uftrace data directory, written and
//! read, and the safe output directories; re-exported here), and the CLI's
//! own: Chrome / Perfetto trace JSON, Perfetto's native protobuf, and flame
//! graphs (folded stacks and SVG). How every output pairs and places the
//! calls is the format's [design](fntrace_format::export#design).
//!
//! - **Chrome trace JSON** ([`write_chrome_json`]): one complete event per
//!   call, per-thread tracks. The calls go through a scratch file first
//!   ([`SpooledCalls`], from any [`EventSource`](crate::EventSource)), so
//!   that memory does not grow with the trace, and the JSON's size is known
//!   before it is written.
//! - **Perfetto protobuf** (`write_perfetto`, feature `exporters`): the same
//!   calls as `TrackEvent` slices with interned names and delta timestamps.
//! - **Flame graphs** (`folded_stacks`, `folded_stacks_of`,
//!   `write_flame_svg`, feature `exporters`): call chains weighted by self
//!   time, drawn by `inferno`.
//! - **pprof** (`write_pprof`, feature `exporters`): the format's
//!   `profile.proto` message of a snapshot or a trace
//!   ([`pprof_message`], [`profile_of_trace`]), gzipped.
//!
//! Errors are [`ExportError`]s: each names the file (or output) concerned and
//! what is wrong with it; nothing here panics on bad input.

pub use fntrace_format::export::*;

// Each export is reachable at `export::` only: its module is private.
mod calls;
mod chrome;
#[cfg(feature = "exporters")]
mod flame;
#[cfg(feature = "exporters")]
mod perfetto;
#[cfg(feature = "exporters")]
mod pprof;
mod spool;

pub use calls::Incomplete;
pub use chrome::write_chrome_json;
#[cfg(feature = "exporters")]
pub use flame::{
    folded_stacks, folded_stacks_by_thread, folded_stacks_of, folded_stacks_of_profile,
    write_flame_svg, write_folded_svg,
};
#[cfg(feature = "exporters")]
pub use perfetto::write_perfetto;
#[cfg(feature = "exporters")]
pub use pprof::write_pprof;
pub use spool::{CallExportOptions, SpooledCalls};
