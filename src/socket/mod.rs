//! Live control of a running process through a Unix socket: the transport
//! and the protocol (this module and [`server`], [`conn`], [`reply`],
//! [`path`], [`http`]; the requests' words are
//! `fntrace_format::wire::request`, shared with `fntrace ctl`), and what
//! each command does ([`live`], which hands
//! [`serve`] its handler). The commands act on the session's state (the
//! filter, the recording, the flight recorder: `crate::session`), which
//! the C ABI shares, so that `filter` is `fntrace_set_filter` and `stop`
//! ends what `fntrace_record_start` started.
//!
//! # Protocol
//!
//! A client connects, sends one request line, and reads one reply; the
//! server then closes the connection.
//!
//! - **Request**: one line of UTF-8 text ending in `\n` (a `\r` before it
//!   is dropped), at most 4096 bytes with the `\n`: a command and its
//!   arguments, separated by spaces. No control characters but tabs.
//! - **Reply**: a first line, `ok` or `ok SUMMARY` on success,
//!   `error: MESSAGE` on failure; then lines of details (`key: value`, or a
//!   table); then an empty line, which ends it. No other line of a reply is
//!   empty.
//!
//! | request | what it does |
//! |---|---|
//! | `status` | pid, tracers (enabled or not), filter, recording, sites |
//! | `enable [--pending] TRACER` / `disable TRACER` | as `fntrace_enable`/`fntrace_disable` (refused when nothing would be traced, unless `--pending`) |
//! | `filter [--pending] GLOBS` | as `fntrace_set_filter`: for tracers enabled after it, and recordings (a glob matching no function is refused, unless `--pending`) |
//! | `functions [GLOB]` | the functions with a call site (those GLOB selects; none: an error naming the closest) |
//! | `record DIR` | as `fntrace_record_start` (the streaming recorder, graph tracer) |
//! | `stop` | as `fntrace_record_stop`; replies with events, lost, threads |
//! | `snapshot DIR` | a snapshot of the running flight recorder |
//! | `dump DIR` | as `fntrace_dump` |
//! | `report` | the latency table of the graph tracer's events in memory |
//! | `profile` / `profile reset` | the calls open on each thread, then the profile tracer's snapshot (text form) / forget it |
//! | `detach` | (a process `fntrace attach` started serving) every tracer off, the text as before attach, the server stopped |
//!
//! The metrics endpoint (`GET /metrics` over HTTP, [`http`], and
//! `GET /debug/pprof/profile?seconds=N`, [`pprof`]) is served
//! apart, on a TCP address (loopback unless asked otherwise, with a
//! bearer token then), by a thread of its own with its own defences
//! against idle clients ([`MetricsOptions`]).
//!
//! DIR is an absolute path (the rest of the line: it may hold spaces).
//!
//! # A client that gave up
//!
//! A request is run only if its client is still connected when the server
//! has read it: right before running the command, the server checks the
//! connection (`poll`'s `POLLHUP`), and drops the request of a client that
//! closed it. So a client that stopped waiting (`fntrace ctl --timeout 2`
//! on a process that was stopped with `SIGSTOP`, which exits 2 "no reply")
//! and exited changes nothing when the process runs again. A client that
//! only shut down its writing side (`shutdown(SHUT_WR)`, as `socat` does at
//! the end of its input) is still waiting, and is served. Why not a deadline
//! sent with the request: it would need a clock both sides read alike (the
//! monotonic clock differs across time namespaces, the wall clock can
//! step) and a change to every client, where closing the connection is
//! what every client does when it gives up. What remains: a client that
//! gives up while its command is running gets no reply, and the command is
//! done.
//!
//! # Hostile clients
//!
//! One thread (`fntrace-control`, untraced) serves every connection with
//! `poll`: at most [`ControlOptions::max_clients`] at once (more get
//! `error: busy` and are closed); a request must arrive within
//! [`ControlOptions::request_timeout`] of the connection, and the reply be
//! taken within [`ControlOptions::reply_timeout`]; a line over 4096 bytes,
//! text that is not UTF-8 or a control character get an error reply and
//! the connection is closed. Replies are sent with `MSG_NOSIGNAL`: a client
//! gone mid-reply never raises `SIGPIPE`. Commands run one at a time, on
//! that thread. The socket is made mode 0600, and a peer whose uid
//! (`SO_PEERCRED`) is neither the process's nor root's gets an error reply.

mod arg_specs;
mod conn;
mod futures;
mod http;
pub(crate) mod live;
mod path;
mod pprof;
mod reply;
mod selection;
mod server;

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, PoisonError};
use std::time::Duration;

use crate::error::Error;
use crate::rt::spawn::spawn_running;
use conn::{wake_pipe, ServerThread};

pub(crate) use fntrace_format::wire::request::{FlightRequest, Request};
pub(crate) use http::{
    options_from_env as metrics_options_from_env, serve_metrics, set_metrics_filter,
};
pub use http::{MetricsOptions, MetricsServer};
pub use path::default_control_path;
pub(crate) use path::prepare_default_dir;
pub(crate) use reply::Reply;
pub(crate) use server::stop_after_reply;

/// What runs a request (on the server's thread) and says what happened.
pub(crate) type Handler = fn(Request) -> Reply;

/// How a control server treats its clients; see
/// [`serve_control_with`](crate::serve_control_with).
#[derive(Clone, Debug)]
pub struct ControlOptions {
    /// Connections served at once (16); more get `error: busy`.
    pub max_clients: usize,
    /// How long a client has, from its connection, to send its request
    /// line (2 s); then it gets an error reply and is closed.
    pub request_timeout: Duration,
    /// How long a client has to take its reply (10 s); then it is closed.
    pub reply_timeout: Duration,
}

impl Default for ControlOptions {
    fn default() -> Self {
        ControlOptions {
            max_clients: 16,
            request_timeout: Duration::from_secs(2),
            reply_timeout: Duration::from_secs(10),
        }
    }
}

/// A running control server; see [`serve_control`](crate::serve_control).
/// Dropping it stops it as [`ControlServer::stop`] does.
pub struct ControlServer {
    path: PathBuf,
    thread: ServerThread,
}

/// The socket files of this process's running servers, removed at exit:
/// (pid that made it, device, inode, path). A forked child inherits the
/// list but not the sockets, so only the maker's entries are removed.
static LIVE_SOCKETS: Mutex<Vec<(u32, u64, u64, PathBuf)>> = Mutex::new(Vec::new());

/// Serves `path` with `handler` on a thread of its own.
pub(crate) fn serve(
    path: &Path,
    options: &ControlOptions,
    handler: Handler,
) -> Result<ControlServer, Error> {
    let path = std::path::absolute(path).map_err(|source| Error::Io {
        what: format!("control socket {}", path.display()),
        source,
    })?;
    let io = |what: &str| {
        let path = path.clone();
        let what = what.to_string();
        move |source| Error::Io {
            what: format!("control socket {}: {what}", path.display()),
            source,
        }
    };
    path::check_length(&path)?;
    // The socket is made, checked and chmod-ed in its directory through
    // that directory's descriptor (`/proc/self/fd/N/NAME`), the directory
    // opened as every output directory is (`fntrace_format::export`'s
    // OutputDir: no link followed in any component, refused if someone else
    // could plant or swap names in it): neither bind nor chmod goes through
    // a link planted at a parent or swapped in meanwhile.
    let (dir, name) = fntrace_format::export::OutputDir::of_file(&path).map_err(|e| match e {
        // As bind says it: the directory is missing.
        fntrace_format::export::ExportError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            io("binding")(source)
        }
        e => e.into(),
    })?;
    let at = PathBuf::from(format!("/proc/self/fd/{}/{name}", dir.as_fd().as_raw_fd()));
    path::check_length(&at)?;
    remove_stale_socket(&path, &at)?;
    let listener = UnixListener::bind(&at).map_err(io("binding"))?;
    // A client may connect between bind and chmod: the peer check covers it.
    let made = (|| {
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        std::fs::symlink_metadata(&at)
    })();
    let made = match made {
        Ok(made) => made,
        Err(source) => {
            let _ = std::fs::remove_file(&at);
            return Err(io("setting it up")(source));
        }
    };
    let (wake_read, wake_write) = match wake_pipe() {
        Ok(pipe) => pipe,
        Err(source) => {
            let _ = std::fs::remove_file(&at);
            return Err(io("making its wake-up pipe")(source));
        }
    };
    // Kept by the server's handle: the thread may end by itself (`detach`)
    // before it is stopped.
    let reader = match wake_read.try_clone() {
        Ok(reader) => reader,
        Err(source) => {
            let _ = std::fs::remove_file(&path);
            return Err(io("making its wake-up pipe")(source));
        }
    };
    let options = options.clone();
    let thread = spawn_running("fntrace-control", move || {
        server::run(listener, wake_read, &options, handler)
    });
    let thread = match thread {
        Ok(thread) => thread,
        Err(source) => {
            let _ = std::fs::remove_file(&at);
            return Err(io("starting its thread")(source));
        }
    };
    drop(dir);
    LIVE_SOCKETS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((std::process::id(), made.dev(), made.ino(), path.clone()));
    remove_at_exit();
    Ok(ControlServer {
        path,
        thread: ServerThread::keeping_reader(wake_write, reader, thread),
    })
}

/// Makes room for the socket at `path`, reached as `at` (through its
/// directory's descriptor): nothing there, or a socket no one listens on
/// (left by a process that died), which is removed. Anything else is left
/// alone and refused.
fn remove_stale_socket(path: &Path, at: &Path) -> Result<(), Error> {
    let refuse = |why: String| Error::Io {
        what: format!("control socket {}", path.display()),
        source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, why),
    };
    let metadata = match std::fs::symlink_metadata(at) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Io {
                what: format!("control socket {}", path.display()),
                source,
            })
        }
    };
    if !metadata.file_type().is_socket() {
        return Err(refuse(
            "the path exists and is not a socket; it is left alone".to_string(),
        ));
    }
    match UnixStream::connect(at) {
        Ok(_) => Err(refuse(
            "a running process serves this socket already".to_string(),
        )),
        Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => std::fs::remove_file(at)
            .map_err(|source| Error::Io {
                what: format!("removing the stale control socket {}", path.display()),
                source,
            }),
        Err(err) => Err(refuse(format!(
            "a socket is there and cannot be checked ({err}); it is left alone"
        ))),
    }
}

/// Registers, once, the exit handler that removes the socket files.
fn remove_at_exit() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: `remove_sockets` is an `extern "C" fn()` that lives as
        // long as the process, as atexit requires.
        if unsafe { libc::atexit(remove_sockets) } != 0 {
            eprintln!("fntrace: atexit failed: control sockets stay after exit");
        }
    });
}

/// At exit: removes this process's socket files (the server threads end
/// with the process).
extern "C" fn remove_sockets() {
    let _ = std::panic::catch_unwind(|| {
        let live = LIVE_SOCKETS.lock().unwrap_or_else(PoisonError::into_inner);
        for (pid, dev, ino, path) in live.iter() {
            if *pid == std::process::id() {
                remove_if_same(path, *dev, *ino);
            }
        }
    });
}

/// Removes `path` if it is still the socket (`dev`, `ino`) this process
/// made, not one another process put there since.
fn remove_if_same(path: &Path, dev: u64, ino: u64) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == dev && m.ino() == ino) {
        let _ = std::fs::remove_file(path);
    }
}

impl ControlServer {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops serving: clients being served get no reply, the thread ends
    /// (after the command it runs, if any) and the socket file is removed.
    pub fn stop(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if !self.thread.stop() {
            return;
        }
        let mut live = LIVE_SOCKETS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = live.iter().position(|entry| entry.3 == self.path) {
            let (_, dev, ino, path) = live.swap_remove(at);
            remove_if_same(&path, dev, ino);
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.finish();
    }
}

impl std::fmt::Debug for ControlServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlServer")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}
