//! A recorded [`Trace`] as a uftrace data directory: written whole or
//! streamed, read back, and the safe output directories every file of a
//! trace goes through ([`OutputDir`]). The CLI's other exports (Chrome /
//! Perfetto trace JSON, Perfetto's native protobuf, flame graphs) are in
//! fntrace-tools' `export`, and follow the same design.
//!
//! # Design
//!
//! Every output starts from the same per-thread event list (entries and exits
//! with a nesting depth, see [`ThreadTrace::events`](crate::ThreadTrace::events)).
//! Such a list need not pair up: a call may lack its exit (the trace ended,
//! or a panic or `longjmp` unwound it) and a thread may start with exits
//! whose entries came before tracing was switched on. Every output pairs it
//! by the pass the reports of [`crate::analysis`] use, in the exports'
//! reading, which opens the calls running when tracing started first and
//! pairs exits by depth alone: see
//! [pairing entries with exits](crate::analysis#pairing-entries-with-exits)
//! for the rules; exits that pair with no call are left out. The calls then
//! lie in time as follows (fntrace-tools' `calls.rs` places them for the
//! Chrome JSON and flame graphs; the uftrace writer adds records at these
//! times):
//!
//! - a call running when tracing started begins at the thread's first
//!   timestamp;
//! - a call unwound without its exit (closed as unfinished by an entry at its
//!   depth or a shallower one, or by a caller's exit) ends at the time of
//!   that event;
//! - a call still open when the events end ends at the thread's last
//!   timestamp (uftrace gets no added exit for it);
//! - in the Chrome JSON and flame graphs, a call never begins before its
//!   caller nor ends before its callees, which only a clock going backwards
//!   could cause.
//!
//! Children therefore always lie within their parent. The outputs:
//!
//! - **uftrace** ([`write_uftrace_dir`], [`write_uftrace_dir_of`] from any
//!   [`EventSource`](crate::EventSource) in bounded memory, [`UftraceStream`],
//!   [`UftraceReader`], [`read_uftrace_dir`]): one 16-byte record per event,
//!   so that uftrace's own `replay`, `report`, `graph`, `dump` and `info`
//!   commands work on the directory, and so that it can be read back,
//!   thread by thread and record by record ([`UftraceReader`], an
//!   [`EventSource`](crate::EventSource)), or whole into a [`Trace`]. uftrace pairs exits with entries by its
//!   own stack, not by depth, so the writer adds the entries and exits the
//!   rules above imply, and lists them in a side file that the reader uses
//!   to remove them. Layout and encoding: [`write_uftrace_dir`].
//! - In fntrace-tools: **Chrome trace JSON** (`write_chrome_json`): one
//!   complete event per call, per-thread tracks; nesting is what the Chrome
//!   viewer and Perfetto need to draw a thread's calls as one stack. The
//!   calls go through a scratch file first (`SpooledCalls`, from any
//!   [`EventSource`](crate::EventSource)), so that memory does not grow with
//!   the trace, and the JSON's size is known before it is written.
//! - In fntrace-tools: **Perfetto protobuf** (`write_perfetto`): the same
//!   calls as `TrackEvent` slices with interned names and delta timestamps,
//!   a fraction of the JSON's size.
//! - In fntrace-tools: **Flame graphs** (`folded_stacks`,
//!   `folded_stacks_of`, `write_flame_svg`): call chains weighted by self
//!   time (duration minus the children's, never negative thanks to the
//!   nesting), drawn by `inferno`; memory is one node per distinct chain.
//!
//! - **pprof** ([`pprof_message`], [`profile_of_trace`]): the call-path
//!   trie of a live profile's snapshot or of a trace, as the
//!   `profile.proto` message; here because the runtime's metrics endpoint
//!   serves it (gzip-framed by [`gzip_stored`]) as well as the CLI writes
//!   it (gzipped by fntrace-tools' `write_pprof`).
//!
//! - **gzip** ([`gzip`]): a small deflate compressor (fixed codes, LZ77)
//!   for the metrics text the runtime serves to a scraper that accepts
//!   gzip; the runtime links no compression crate.
//!
//! Errors are [`ExportError`]s: each names the file (or output) concerned and
//! what is wrong with it; nothing here panics on bad input.

use std::fmt;
use std::io;
use std::path::PathBuf;

#[cfg(doc)]
use crate::trace::Trace;

// Each export is reachable at `export::` only: its module is private.
mod deflate;
mod dirfd;
mod pprof;
mod uftrace;

pub use deflate::gzip;
pub use dirfd::{prepare_output_dir, OutputDir, Replacement, TraceOutput};
pub use pprof::{
    gzip_stored, pprof_message, profile_of_trace, PprofInfo, SourceLine, TraceProfile,
};
pub use uftrace::{
    add_debug_info, process_ledger, read_uftrace_dir, read_uftrace_dir_with_progress,
    recorder_notes, settle_recording, write_uftrace_dir, write_uftrace_dir_into,
    write_uftrace_dir_of, DataSymbol, ProcessLedger, StreamTotals, UftraceReader, UftraceStream,
    MAX_SYMBOL_SIZE, PROCESS_LEDGER,
};

/// What can go wrong while exporting a trace or loading one back.
#[derive(Debug)]
#[non_exhaustive]
pub enum ExportError {
    /// Reading or writing a file or directory failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done (e.g. `"writing"`, `"opening"`).
        action: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// Writing to the caller's output stream failed.
    Output {
        /// What was being written (e.g. `"Chrome trace JSON"`).
        what: &'static str,
        /// The underlying error.
        source: io::Error,
    },
    /// A file of a uftrace data directory is missing or is not in the format
    /// fntrace reads.
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong with it, with the line or byte offset when known.
        problem: String,
    },
    /// The directory to write a uftrace data directory into exists and is
    /// not empty (or is not a directory); nothing was written.
    DirectoryNotEmpty(PathBuf),
    /// The path given for a uftrace data directory is empty (which would mean
    /// the current directory); nothing was written.
    EmptyPath,
    /// A path of a trace directory is refused for safety: a directory
    /// another user could write into, a symbolic link, a FIFO or another
    /// file that is not a regular one, a name that exists already (see the
    /// rules in `dirfd.rs`). Nothing was written through it.
    Refused {
        /// The file or directory.
        path: PathBuf,
        /// Why, as one sentence.
        why: String,
    },
    /// The trace has nothing this output can show (e.g. a flame graph of a
    /// trace without any timed call); nothing was written.
    Empty(&'static str),
    /// The file system is full (or the user's quota is spent). A
    /// [`UftraceStream`] finished the write it was making with the space
    /// it keeps in reserve, then stopped: `unwritten` events of the
    /// append that met the error were not written (none of a later one
    /// will be: [`UftraceStream::finish_incomplete`] marks the gap).
    Full {
        /// The file being written.
        path: PathBuf,
        /// Events of the append that were not written.
        unwritten: u64,
        /// The OS error (`ENOSPC` or `EDQUOT`).
        source: io::Error,
    },
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::Io {
                path,
                action,
                source,
            } => write!(f, "{action} {}: {source}", path.display()),
            ExportError::Output { what, source } => write!(f, "writing {what}: {source}"),
            ExportError::Malformed { path, problem } => {
                write!(f, "{}: {problem}", path.display())
            }
            ExportError::DirectoryNotEmpty(path) => write!(
                f,
                "{} exists and is not an empty directory; remove it or choose another \
                 (nothing was written)",
                path.display()
            ),
            ExportError::EmptyPath => write!(
                f,
                "the uftrace data directory path is empty; give a directory \
                 (nothing was written)"
            ),
            ExportError::Refused { path, why } => write!(f, "{} {why}", path.display()),
            ExportError::Empty(why) => write!(f, "nothing to export: {why}"),
            ExportError::Full { path, source, .. } => {
                write!(f, "writing {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for ExportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ExportError::Io { source, .. }
            | ExportError::Output { source, .. }
            | ExportError::Full { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<std::convert::Infallible> for ExportError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

impl ExportError {
    /// An [`ExportError::Io`]: `action` on `path` failed with `source`.
    pub fn io(path: impl Into<PathBuf>, action: &'static str, source: io::Error) -> Self {
        ExportError::Io {
            path: path.into(),
            action,
            source,
        }
    }

    /// An [`ExportError::Malformed`]: `path` is not what a reader expects.
    pub fn malformed(path: impl Into<PathBuf>, problem: impl Into<String>) -> Self {
        ExportError::Malformed {
            path: path.into(),
            problem: problem.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let e = ExportError::malformed("/d/1.dat", "truncated record at byte 16");
        assert_eq!(e.to_string(), "/d/1.dat: truncated record at byte 16");
        let e = ExportError::io(
            "/d/info",
            "opening",
            io::Error::from(io::ErrorKind::NotFound),
        );
        assert!(e.to_string().starts_with("opening /d/info: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        let e = ExportError::DirectoryNotEmpty("/d".into());
        assert!(e.to_string().contains("/d exists"), "{e}");
    }
}
