//! The one error type of the public API.

use std::fmt;
use std::io;
use std::time::Duration;

/// Everything that can go wrong in fntrace's public API. Nothing in the API
/// panics; each failure names what went wrong and where.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// No tracer is registered under this name.
    UnknownTracer(String),
    /// A tracer with this name is registered already.
    DuplicateTracer(String),
    /// All tracer slots are taken (fntrace supports `fntrace::MAX_TRACERS`).
    TooManyTracers,
    /// A thread did not acknowledge the stop signal within the wait; nothing
    /// was written. Typically the thread blocks the signal: choose another
    /// with `fntrace::set_stop_signal`.
    ThreadDidNotAcknowledge {
        /// Kernel thread id that did not answer.
        tid: i32,
        /// How long fntrace waited for it.
        waited: Duration,
    },
    /// Installing the stop-signal handler or signalling a thread failed.
    Signal {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The program installed its own handler for the stop signal; fntrace
    /// will not replace it, and nothing was written. Choose another stop
    /// signal with [`crate::set_stop_signal`].
    StopSignalInUse {
        /// The signal number.
        signo: i32,
        /// Its name, such as `"SIGUSR2"`.
        name: &'static str,
    },
    /// The bytes at a call site are not what fntrace wrote or recorded there
    /// (someone else changed the text); nothing was written.
    SiteBytesChanged {
        /// Address of the site.
        addr: usize,
        /// The bytes fntrace expected.
        expected: Vec<u8>,
        /// The bytes found.
        found: Vec<u8>,
    },
    /// Writing to the program text failed.
    TextWrite {
        /// Address of the write.
        addr: usize,
        /// The OS error.
        source: io::Error,
    },
    /// Reading the symbol tables of a loaded object failed.
    Symbols {
        /// The object file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The tracer panicked in its `entry` or `exit` and was switched off
    /// then, for every thread (the panic was caught, counted in
    /// `Stats::tracer_panics`); its sites are back to their NOP, or to the
    /// other tracers that select them. Returned by `fntrace::disable`.
    TracerPanicked(String),
    /// A filter pattern is malformed.
    BadFilter(String),
    /// An argument or return-value spec (`-A`/`-R` syntax) is malformed;
    /// says which and why.
    BadArgSpec(String),
    /// Writing or reading a trace failed (the trace stays in memory).
    Export(fntrace_format::export::ExportError),
    /// A recording could not start or stop (see `fntrace::record`); says
    /// why.
    Recording(String),
    /// Attaching to or detaching from a running process (`fntrace attach`,
    /// `fntrace detach`) was refused; says why.
    Attach(String),
    /// Any other I/O failure, with what was being done.
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: io::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownTracer(name) => write!(f, "no tracer named {name:?} is registered"),
            Error::DuplicateTracer(name) => {
                write!(f, "a tracer named {name:?} is registered already")
            }
            Error::TooManyTracers => {
                write!(
                    f,
                    "too many tracers: every tracer slot is taken (fntrace::MAX_TRACERS)"
                )
            }
            Error::ThreadDidNotAcknowledge { tid, waited } => write!(
                f,
                "thread {tid} did not acknowledge the stop signal within {waited:?} \
                 (does it block the signal? see fntrace::set_stop_signal); nothing was patched"
            ),
            Error::Signal { what, source } => write!(f, "{what}: {source}"),
            Error::StopSignalInUse { signo, name } => write!(
                f,
                "the program has its own handler for {name} (signal {signo}), fntrace's stop \
                 signal; fntrace does not replace it and patched nothing. Choose another stop \
                 signal with fntrace::set_stop_signal (SIGUSR1, SIGUSR2 or SIGRTMIN..=SIGRTMAX)"
            ),
            Error::SiteBytesChanged {
                addr,
                expected,
                found,
            } => write!(
                f,
                "call site {addr:#x} holds {} but fntrace expected {}; nothing was patched",
                hex(found),
                hex(expected)
            ),
            Error::TextWrite { addr, source } => {
                write!(f, "writing program text at {addr:#x}: {source}")
            }
            Error::Symbols { path, reason } => {
                write!(f, "reading symbols of {path}: {reason}")
            }
            Error::TracerPanicked(name) => write!(
                f,
                "tracer {name:?} panicked and was switched off on every thread; \
                 its sites are back to their NOP (or to the tracers that still select them)"
            ),
            Error::BadFilter(why) => write!(f, "bad filter: {why}"),
            Error::BadArgSpec(why) => write!(f, "bad argument spec: {why}"),
            Error::Export(err) => write!(f, "{err}"),
            Error::Recording(why) => write!(f, "recording: {why}"),
            Error::Attach(why) => write!(f, "{why}"),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Signal { source, .. }
            | Error::TextWrite { source, .. }
            | Error::Io { source, .. } => Some(source),
            Error::Export(err) => Some(err),
            _ => None,
        }
    }
}

impl From<fntrace_format::export::ExportError> for Error {
    fn from(err: fntrace_format::export::ExportError) -> Self {
        Error::Export(err)
    }
}

fn hex(bytes: &[u8]) -> String {
    let parts: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    parts.join(" ")
}
