//! The process's tracing session: the state that the three front ends (the
//! C ABI, [`crate::capi`]; live control, [`crate::socket`]; start-up from
//! the environment, [`crate::preload`]) act on alike, so that each of them
//! only reads its own input and reports in its own way: the filter set for
//! the tracers enabled next ([`set_filter`]), the recording started on
//! request ([`start_recording`], [`take_recording`]), the flight recorder
//! ([`flight`]) and the built-in tracers' registration
//! ([`register_builtins`]).

use std::ffi::c_int;
use std::sync::{Mutex, PoisonError};

use fntrace_format::export::ExportError;

use crate::builtin::{function::FUNCTION_TRACER, graph::GRAPH_TRACER, profile::PROFILE_TRACER};
use crate::error::Error;
use crate::filter::Filter;
use crate::record::{self, Recording};
use crate::tracer::{self, Tracer};
use crate::vars;

pub(crate) mod flight;

/// The filter `fntrace_set_filter` set (its globs and itself), for the
/// tracers enabled after it and for recordings.
static FILTER: Mutex<Option<(String, Filter)>> = Mutex::new(None);

/// The recording `fntrace_record_start` or live control's `record`
/// started (the handle that stops it), as opposed to
/// [`RECORDER_RUNNING`](crate::record::RECORDER_RUNNING), which says
/// whether any recorder (streaming or flight) holds the buffers.
static STARTED_RECORDING: Mutex<Option<Recording>> = Mutex::new(None);

/// A failed session call: an errno-style code (the C ABI returns it
/// negated) and the message (live control replies with it).
pub(crate) struct Failure(pub(crate) c_int, pub(crate) String);

impl From<Error> for Failure {
    fn from(err: Error) -> Failure {
        let code = match &err {
            Error::UnknownTracer(_) => libc::ENOENT,
            Error::BadFilter(_) | Error::BadArgSpec(_) => libc::EINVAL,
            Error::Recording(_) => libc::EBUSY,
            Error::Export(ExportError::DirectoryNotEmpty(_)) => libc::ENOTEMPTY,
            Error::Export(ExportError::EmptyPath) => libc::EINVAL,
            Error::Export(ExportError::Io { source, .. }) | Error::Io { source, .. } => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
            Error::Export(_) => libc::EIO,
            Error::ThreadDidNotAcknowledge { .. } => libc::ETIMEDOUT,
            Error::StopSignalInUse { .. } => libc::EBUSY,
            Error::TooManyTracers => libc::ENOSPC,
            _ => libc::EIO,
        };
        Failure(code, err.to_string())
    }
}

/// Registers the built-in tracers that are not yet. Each registers itself
/// with a constructor, but in a program linked with `libfntrace.a` the
/// linker keeps a tracer's object (and constructor) only if something
/// refers to it: the references here keep both, and the registration here
/// covers a constructor left out all the same. Called after the
/// constructors (tracer registrations run first), so it never races them.
pub(crate) fn register_builtins() {
    let builtins: [(&'static str, &'static dyn Tracer); 3] = [
        ("function", &FUNCTION_TRACER),
        ("graph", &GRAPH_TRACER),
        ("profile", &PROFILE_TRACER),
    ];
    for (name, tracer) in builtins {
        if tracer::find(name).is_none() {
            // A duplicate (registered meanwhile) is fine.
            let _ = tracer::register(name, tracer);
        }
    }
}

/// The filter set by `fntrace_set_filter` (every function if none).
pub(crate) fn current_filter() -> Filter {
    FILTER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map(|(_, filter)| filter.clone())
        .unwrap_or_default()
}

/// The globs of the filter set by `fntrace_set_filter`, if one was.
pub(crate) fn current_globs() -> Option<String> {
    FILTER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map(|(globs, _)| globs.clone())
}

/// Sets the filter as `fntrace_set_filter` does.
pub(crate) fn set_filter(globs: &str) -> Result<(), Error> {
    let filter = vars::parse_globs(globs)?;
    *FILTER.lock().unwrap_or_else(PoisonError::into_inner) = Some((globs.to_string(), filter));
    Ok(())
}

/// Starts the recording kept for `fntrace_record_stop`, in `mode`.
pub(crate) fn start_recording(
    dir: &str,
    filter: &Filter,
    mode: record::RecordMode,
) -> Result<(), Failure> {
    let options = record::RecordOptions {
        mode,
        ..record::RecordOptions::default()
    };
    start_recording_with(dir, filter, &options)
}

/// [`start_recording`] with options.
pub(crate) fn start_recording_with(
    dir: &str,
    filter: &Filter,
    options: &record::RecordOptions,
) -> Result<(), Failure> {
    let mut slot = STARTED_RECORDING
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if slot.is_some() {
        return Err(Failure(
            libc::EBUSY,
            "a recording is running already (fntrace_record_stop ends it)".to_string(),
        ));
    }
    *slot = Some(record::record_with("graph", filter, dir, options)?);
    Ok(())
}

/// The recording kept by `fntrace_record_start`, taken out.
pub(crate) fn take_recording() -> Option<Recording> {
    STARTED_RECORDING
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
}

/// Runs `look` on the recording kept by `fntrace_record_start`, if any.
pub(crate) fn with_recording<R>(look: impl FnOnce(Option<&Recording>) -> R) -> R {
    look(
        STARTED_RECORDING
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref(),
    )
}
