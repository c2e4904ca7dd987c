//! Writing the flight recorder's window as a uftrace data directory (a
//! snapshot), in place, and the timestamps its trigger file shows.

use std::path::Path;

use super::window::{Window, WindowEvents};
use super::SnapshotReport;
use crate::builtin::graph::describe_functions;
use crate::error::Error;
use fntrace_format::export::TraceOutput;

/// Where [`write_snapshot`] writes.
pub(super) enum SnapshotAt<'a> {
    /// A path, opened as every trace directory is (made if missing; it
    /// must be empty).
    Path(&'a Path),
    /// A directory the writer has just made and holds open.
    Made(&'a TraceOutput),
}

/// Writes the window as a uftrace directory, reading it in place: the
/// threads `tids` names, or every one (`None`).
pub(super) fn write_snapshot(
    window: &Window,
    at: SnapshotAt<'_>,
    tids: Option<&[u32]>,
) -> Result<SnapshotReport, Error> {
    let indexes = window.indexes_of(tids);
    let summary = window.summary(&indexes);
    // What the window cannot show: the recorder's totals over its life
    // (events evicted, and lost before the window began: `fntrace record
    // --flight` and `fntrace report` say them beside the window's own).
    let note = format!(
        "flight=1 flight_events={} flight_lost={} flight_evicted={} window_lost={} \
         futures_untracked={}",
        window.appended(),
        window.lost(),
        window.evicted(),
        summary.lost,
        crate::builtin::futures::untracked()
    );
    let source = WindowEvents {
        window,
        header: describe_functions(Vec::new(), window.functions()),
        note: Some(note),
        indexes,
    };
    let dir = match at {
        SnapshotAt::Path(dir) => {
            fntrace_format::export::write_uftrace_dir_of(&source.header, &source, dir, None)?;
            dir
        }
        SnapshotAt::Made(dir) => {
            fntrace_format::export::write_uftrace_dir_into(&source.header, &source, dir, None)?;
            dir.path()
        }
    };
    Ok(SnapshotReport {
        dir: dir.to_path_buf(),
        events: summary.events,
        lost: summary.lost,
        threads: summary.threads,
        evicted: window.evicted(),
        first_ns: summary.first_ns,
        last_ns: summary.last_ns,
    })
}

/// Monotonic nanoseconds as uftrace shows timestamps (`51234.000100200`).
pub(super) fn timestamp(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}
