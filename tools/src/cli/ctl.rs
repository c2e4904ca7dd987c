//! `fntrace ctl SOCK|PID COMMAND`: a client of a running program's control
//! socket (served by the runtime with `FNTRACE_CONTROL` or
//! `fntrace::serve_control`). It sends one request line and prints the
//! reply. The protocol: one line of UTF-8 in (at most 4096 bytes), a reply
//! whose first line is `ok …` or `error: …`, ended by an empty line.
//!
//! Exit status: 0 for `ok`, 1 for `error:` (the message on stderr), 2 when
//! there is no reply (no socket, no permission, bad arguments).

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use fntrace_tools::wire::request::{FlightRequest, Request};

/// `fntrace ctl --help` after the arguments.
pub const CTL_HELP: &str = "\
The program serves the socket when started with FNTRACE_CONTROL=1 (at
/tmp/fntrace-UID/PID.sock, which `fntrace ctl PID` finds) or
FNTRACE_CONTROL=PATH, with fntrace linked or preloaded; a Rust program calls
fntrace::serve_control. Only the program's user and root may control it.
A relative DIR is taken from the current directory. A glob that matches no
function with a call site (filter, the filter enable applies, patch, flight
trigger) is refused, naming the closest functions, and so is enable in a
process with no call site; --pending keeps it for the functions of a library
the program loads later (dlopen).

Exit status: 0 when the program answers ok, 1 when it answers with an error
(printed on stderr), 2 when there is no answer (no such socket or process,
permission denied) or the arguments are wrong.

Examples:
  FNTRACE_CONTROL=1 ./server &
  fntrace ctl $! status                        tracers, filter, recording
  fntrace ctl $! filter 'handle_*,!log_*'      for what is enabled next
  fntrace ctl $! functions 'handle_*'          the functions a glob selects
  fntrace ctl $! record trace.data             stream the graph tracer
  fntrace ctl $! stop                          events, lost, threads
  fntrace report trace.data
  fntrace ctl $! enable graph                  trace into memory ...
  fntrace ctl $! disable graph
  fntrace ctl $! report                        ... and print its latency table
  fntrace ctl /run/my.sock dump /tmp/trace     a socket given by its path
  fntrace ctl $! flight start snaps --budget 64M   keep the last 64 MiB of events
  fntrace ctl $! flight trigger 'handle_*' 20ms    snapshot a call that slow
  fntrace ctl $! flight trigger SIGUSR1            ... or on a signal, a panic
  fntrace ctl $! flight triggers                   list them
  fntrace ctl $! flight untrigger 'handle_*'       remove one (all: no argument)
  fntrace ctl $! snapshot /tmp/now                 the window, now
  fntrace ctl $! flight stop
  fntrace ctl $! enable profile                live per-function latency ...
  fntrace ctl $! profile -s p99 --top 20       ... its table, as report's
  fntrace ctl $! profile --save now.profile    the snapshot (fntrace flame reads it)
  fntrace ctl $! profile reset                 counts from zero again
  fntrace ctl $! metrics | promtool check metrics   the metrics text
  fntrace ctl $! metrics-filter 'kv::*'        what /metrics exports (--clear)
  fntrace ctl $! futures                       async fns' futures (record --async)
  fntrace ctl $! args 'handle_get@arg1/s'      record arguments (retval: -R's)
Sizes: 64M, 1G, 512K or bytes (binary multiples: 1K = 1024).";

/// `fntrace ctl`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// The control socket: its path, or the pid of a program serving the
    /// default path (FNTRACE_CONTROL=1). A path made of digits: write
    /// `./123`.
    #[arg(value_name = "SOCK|PID")]
    pub target: String,
    /// How long to wait for the reply, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub timeout: u64,
    /// What to ask.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// The requests.
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// Pid, tracers (enabled or not), filter, recording, call sites.
    Status,
    /// Enable a tracer (graph, function, or a registered name), with the
    /// filter. Refused when it would trace nothing: the filter matches no
    /// function with a call site, or the process has none.
    Enable {
        /// The tracer.
        tracer: String,
        /// Enable it all the same: for the functions of a library the
        /// program loads later (dlopen).
        #[arg(long)]
        pending: bool,
    },
    /// Disable a tracer.
    Disable {
        /// The tracer.
        tracer: String,
    },
    /// Set the filter for the tracers enabled after it, and recordings.
    /// A glob that matches no function with a call site is refused,
    /// naming the closest functions.
    Filter {
        /// Comma-separated globs, `!glob` to exclude: 'handle_*,!log_*'.
        globs: String,
        /// Keep globs that match nothing yet: for the functions of a
        /// library the program loads later (dlopen).
        #[arg(long)]
        pending: bool,
    },
    /// The functions with a call site (those GLOB selects): what filter,
    /// enable and top -F choose from.
    Functions {
        /// A function glob ('handle_*').
        glob: Option<String>,
    },
    /// Patch the entries of functions built without instrumentation
    /// (uftrace's -P), so that tracers enabled from now on trace them; the
    /// reply lists what was refused and why
    Patch {
        /// Comma-separated globs of demangled names: 'w_*,parse_*'.
        globs: String,
    },
    /// Start streaming the graph tracer into DIR (a new or empty directory).
    Record {
        /// What a thread whose buffer is full does: `drop` (the default
        /// here: the service's latency never waits on the disk; losses are
        /// counted and marked) or `lossless` (it waits for the writer).
        #[arg(long, value_name = "MODE", default_value = "drop", value_parser = ["lossless", "drop"])]
        mode: String,
        /// The uftrace data directory to write.
        dir: PathBuf,
    },
    /// Stop the recording: prints events, lost, threads.
    Stop,
    /// Write the running flight recorder's window into DIR.
    Snapshot {
        /// The uftrace data directory to write.
        dir: PathBuf,
    },
    /// Write the graph tracer's events in memory into DIR.
    Dump {
        /// The uftrace data directory to write.
        dir: PathBuf,
    },
    /// The latency table of the graph tracer's events in memory.
    Report,
    /// Per async function, the futures completed so far, their polls,
    /// latency (total, p50, p99: first poll to Ready), busy and waiting
    /// time, from the runtime future linker (a program recorded with
    /// `fntrace record --async`).
    Futures,
    /// The live profile of the `profile` tracer (enable it first): its
    /// latency table, as `fntrace report` prints a trace's; or `reset`.
    /// Below it, in a program recording with `fntrace record --async`,
    /// the futures each async function completed so far (as `futures`).
    Profile(super::profile::ProfileArgs),
    /// The live profile as metrics text: every function, with its
    /// histogram and full name, in the Prometheus text format 0.0.4 (what
    /// promtool checks); FNTRACE_METRICS serves a selection of it on
    /// /metrics.
    Metrics {
        /// OpenMetrics 1.0 text instead (the counters' families named
        /// without `_total`).
        #[arg(long)]
        openmetrics: bool,
    },
    /// Which functions /metrics exports from now on (FNTRACE_METRICS_FILTER
    /// until then): comma-separated globs, `!glob` to exclude, `*` for
    /// all; --clear for FNTRACE_METRICS_FILTER's again.
    MetricsFilter {
        /// Comma-separated globs: 'kv_service::*,!kv_service::log_*'.
        #[arg(required_unless_present = "clear", conflicts_with = "clear")]
        globs: Option<String>,
        /// Back to FNTRACE_METRICS_FILTER (every function without it).
        #[arg(long)]
        clear: bool,
    },
    /// The arguments the graph tracer records from now on, in place of
    /// those set before (-A's syntax; several joined by `;`); refused
    /// while a recording or the flight recorder runs.
    Args {
        /// `handle_get@arg1/s;parse@arg2`.
        #[arg(required_unless_present = "clear")]
        specs: Option<String>,
        /// None from now on.
        #[arg(long, conflicts_with = "specs")]
        clear: bool,
    },
    /// The return values it records from now on (-R's syntax), as `args`.
    Retval {
        /// `handle_get@retval`.
        #[arg(required_unless_present = "clear")]
        specs: Option<String>,
        /// None from now on.
        #[arg(long, conflicts_with = "specs")]
        clear: bool,
    },
    /// The flight recorder: start, stop, and when it writes a snapshot.
    #[command(subcommand)]
    Flight(FlightCommand),
}

/// `fntrace ctl TARGET flight ...`.
#[derive(Debug, Subcommand)]
pub enum FlightCommand {
    /// Start the flight recorder (graph tracer, the filter): it keeps the
    /// most recent events in memory; triggers and `snapshot` write them.
    Start {
        /// Where the triggers' snapshots go, each in a directory of its
        /// own named by time and function.
        dir: PathBuf,
        /// How much of the most recent events to keep: 64M, 1G, bytes
        /// (binary multiples: 1K = 1024).
        #[arg(long, value_name = "SIZE", value_parser = parse_budget)]
        budget: Option<u64>,
        /// At most N trigger snapshots a minute (default 6); the triggers
        /// beyond are counted, skipped.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        rate: Option<u32>,
    },
    /// Stop the flight recorder.
    Stop,
    /// Snapshot when a call of a function matching GLOB lasts DURATION or
    /// more (`handle_* 5ms`); or on a panic (`panic`) or a signal
    /// (`SIGUSR1`). Several may be set. A GLOB matching no function with a
    /// call site is refused, naming the closest functions.
    Trigger {
        /// Keep a GLOB that matches nothing yet: for the functions of a
        /// library the program loads later (dlopen).
        #[arg(long)]
        pending: bool,
        /// Which threads a slow call's snapshot holds: `all` (the
        /// default), or `trigger`, only the thread that made the call.
        #[arg(long, value_enum, value_name = "WHICH")]
        threads: Option<SnapshotThreads>,
        /// A function glob, or `panic`, or a signal name.
        what: String,
        /// With a glob: the shortest call that fires (500us, 5ms, 1s).
        duration: Option<String>,
    },
    /// List the triggers.
    Triggers,
    /// Remove the triggers with this glob (or `panic`, a signal name);
    /// all of them without one.
    Untrigger {
        /// The glob, `panic` or the signal name, as `triggers` lists it.
        what: Option<String>,
    },
}

/// `fntrace ctl TARGET flight trigger --threads`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SnapshotThreads {
    /// Every thread's window.
    All,
    /// Only the thread that made the slow call.
    Trigger,
}

/// `--budget`: a size in the one syntax (see `fntrace_tools::units`).
fn parse_budget(text: &str) -> Result<u64, String> {
    fntrace_tools::units::parse_size(text, 16)
}

/// Why there is no reply (exit status 2).
struct NoReply(String);

/// Runs `fntrace ctl`; its exit status. `no_pager`: the table of
/// `profile` goes to stdout even on a terminal.
pub fn main(args: &CtlArgs, no_pager: bool) -> ExitCode {
    match ask(args) {
        Ok((true, text)) => {
            let shown = match &args.command {
                CtlCommand::Profile(profile) if profile.command.is_none() => {
                    // A pprof's file:line needs the process's memory map.
                    let pid = profile
                        .pprof
                        .as_ref()
                        .and_then(|_| served_pid(&args.target));
                    super::profile::show(&text, profile, &args.target, pid, no_pager)
                }
                CtlCommand::Metrics { openmetrics } => super::profile::metrics(&text, *openmetrics),
                _ => {
                    // A closed stdout loses nothing the caller still wants.
                    let _ = std::io::stdout().lock().write_all(text.as_bytes());
                    Ok(())
                }
            };
            match shown {
                Ok(()) => ExitCode::SUCCESS,
                Err(why) => {
                    eprintln!("fntrace: ctl: {why}");
                    ExitCode::from(2)
                }
            }
        }
        Ok((false, message)) => {
            eprintln!("fntrace: {message}");
            ExitCode::from(1)
        }
        Err(NoReply(why)) => {
            eprintln!("fntrace: ctl: {why}");
            ExitCode::from(2)
        }
    }
}

/// Sends the request; whether the reply is `ok`, and the text to print
/// (the reply without `ok `), or the error message.
fn ask(args: &CtlArgs) -> Result<(bool, String), NoReply> {
    let request = request_line(&args.command)?;
    exchange(
        &args.target,
        Duration::from_secs(args.timeout.max(1)),
        &request,
    )
}

/// [`exchange`] for `fntrace attach` and `detach`: the reply to one
/// request line (with its line break), or why there was none.
pub fn exchange_line(
    target: &str,
    timeout: Duration,
    request: &str,
) -> Result<(bool, String), String> {
    exchange(target, timeout, request).map_err(|NoReply(why)| why)
}

/// Sends `request` (one line, ending with a line break) to the socket at
/// `target`; whether the reply is `ok`, and the text after `ok ` or the
/// error message.
fn exchange(target: &str, timeout: Duration, request: &str) -> Result<(bool, String), NoReply> {
    let (path, pid) = socket_path(target)?;
    let mut stream = UnixStream::connect(&path).map_err(|err| {
        NoReply(match (pid, err.kind()) {
            (Some(pid), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => format!(
                "no fntrace control socket for pid {pid} at {}: is the program running with \
             FNTRACE_CONTROL=1? (`fntrace attach {pid}` makes a running program serve it)",
                path.display()
            ),
            (None, ErrorKind::NotFound) => format!(
                "no control socket at {}: is the program running with FNTRACE_CONTROL={0}?",
                path.display()
            ),
            (None, ErrorKind::ConnectionRefused) => {
                format!("nothing serves {} (the program exited?)", path.display())
            }
            (_, ErrorKind::PermissionDenied) => format!(
                "{}: permission denied (only the program's user or root may control it)",
                path.display()
            ),
            _ => format!("connecting to {}: {err}", path.display()),
        })
    })?;
    let io = |err: std::io::Error| {
        NoReply(match err.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                format!(
                    "no reply from {} within {timeout:?} (the program does not run a request \
                     it reads after this client has gone)",
                    path.display()
                )
            }
            _ => format!("talking to {}: {err}", path.display()),
        })
    };
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    // A server that refuses the client (busy, another user) replies and
    // closes at once, maybe before the request is written: its reply
    // still waits to be read, and says more than the write's error.
    let written = stream.write_all(request.as_bytes());
    let mut lines = Vec::new();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        let read = reader.read_line(&mut line);
        match read {
            Err(err) => return Err(io(written.err().unwrap_or(err))),
            Ok(0) if lines.is_empty() && written.is_err() => {
                return Err(io(written.unwrap_err()));
            }
            Ok(0) => {
                return Err(NoReply(format!(
                    "{} closed the connection before the reply ended{}",
                    path.display(),
                    match lines.first() {
                        Some(first) => format!(" (it began {first:?})"),
                        None => String::new(),
                    }
                )))
            }
            Ok(_) => {}
        }
        let line = line.strip_suffix('\n').unwrap_or(&line).to_string();
        if line.is_empty() {
            break;
        }
        lines.push(line);
    }
    if lines.is_empty() {
        return Err(NoReply(format!(
            "{} is not an fntrace control socket (an empty reply)",
            path.display()
        )));
    }
    let first = lines.remove(0);
    if let Some(message) = first.strip_prefix("error: ") {
        return Ok((false, message.to_string()));
    }
    let summary = match first.strip_prefix("ok") {
        Some("") => None,
        Some(rest) if rest.starts_with(' ') => Some(rest[1..].to_string()),
        _ => {
            return Err(NoReply(format!(
                "{} is not an fntrace control socket (it answered {first:?})",
                path.display()
            )))
        }
    };
    let mut text = String::new();
    for line in summary.iter().chain(&lines) {
        // Empty lines are sent as one space (an empty one ends the reply).
        text.push_str(if line == " " { "" } else { line });
        text.push('\n');
    }
    Ok((true, text))
}

/// The request line for `command` (relative directories made absolute),
/// written by the protocol's one definition ([`Request::line`]).
fn request_line(command: &CtlCommand) -> Result<String, NoReply> {
    let dir = |dir: &Path| -> Result<PathBuf, NoReply> {
        let absolute =
            std::path::absolute(dir).map_err(|e| NoReply(format!("{}: {e}", dir.display())))?;
        match absolute.to_str() {
            Some(_) => Ok(absolute),
            None => Err(NoReply(format!(
                "{}: not UTF-8 (the protocol is)",
                dir.display()
            ))),
        }
    };
    let request = match command {
        CtlCommand::Status => Request::Status,
        CtlCommand::Enable {
            tracer,
            pending: false,
        } => Request::Enable(tracer.clone()),
        CtlCommand::Enable {
            tracer,
            pending: true,
        } => Request::EnablePending(tracer.clone()),
        CtlCommand::Functions { glob } => Request::Functions(glob.clone()),
        CtlCommand::Disable { tracer } => Request::Disable(tracer.clone()),
        CtlCommand::Filter {
            globs,
            pending: false,
        } => Request::Filter(globs.clone()),
        CtlCommand::Filter {
            globs,
            pending: true,
        } => Request::FilterPending(globs.clone()),
        CtlCommand::Patch { globs } => Request::Patch(globs.clone()),
        // Drop mode is the server's default: the plain form then.
        CtlCommand::Record { mode, dir: d } if mode == "drop" => Request::Record(dir(d)?, None),
        CtlCommand::Record { mode, dir: d } => Request::Record(dir(d)?, Some(mode.clone())),
        CtlCommand::Stop => Request::Stop,
        CtlCommand::Snapshot { dir: d } => Request::Snapshot(dir(d)?),
        CtlCommand::Dump { dir: d } => Request::Dump(dir(d)?),
        CtlCommand::Report => Request::Report,
        CtlCommand::Futures => Request::Futures,
        CtlCommand::Profile(profile) => match profile.command {
            Some(super::profile::ProfileCommand::Reset) => Request::ProfileReset,
            None => Request::Profile,
        },
        CtlCommand::Metrics { .. } => Request::Profile,
        CtlCommand::MetricsFilter { globs, .. } => Request::MetricsFilter(globs.clone()),
        // --clear: empty specs.
        CtlCommand::Args { specs, .. } => Request::Args(specs.clone().unwrap_or_default()),
        CtlCommand::Retval { specs, .. } => Request::Retval(specs.clone().unwrap_or_default()),
        CtlCommand::Flight(flight) => Request::Flight(match flight {
            FlightCommand::Start {
                dir: d,
                budget,
                rate,
            } => FlightRequest::Start {
                budget: budget.map(fntrace_tools::units::format_size),
                rate: rate.map(|rate| rate.to_string()),
                dir: dir(d)?,
            },
            FlightCommand::Stop => FlightRequest::Stop,
            FlightCommand::Trigger {
                what,
                duration,
                pending,
                threads,
            } => {
                let only = match threads {
                    Some(SnapshotThreads::Trigger) => "@trigger-thread",
                    Some(SnapshotThreads::All) | None => "",
                };
                let spec = match duration {
                    Some(duration) => {
                        fntrace_tools::units::parse_duration_ns(duration)
                            .map_err(|e| NoReply(format!("flight trigger: {e}")))?;
                        format!("{what}>{duration}{only}")
                    }
                    None if threads.is_some() => {
                        return Err(NoReply(format!(
                            "flight trigger {what} --threads: only a slow-call trigger (GLOB \
                             DURATION) keeps some threads; panic and signal snapshots hold all"
                        )))
                    }
                    None => what.clone(),
                };
                match pending {
                    true => FlightRequest::TriggerPending(spec),
                    false => FlightRequest::Trigger(spec),
                }
            }
            FlightCommand::Triggers => FlightRequest::Triggers,
            FlightCommand::Untrigger { what } => FlightRequest::Untrigger(what.clone()),
        }),
    };
    // Every directory was checked to be UTF-8 above.
    let line = request
        .line()
        .ok_or_else(|| NoReply("a directory is not UTF-8 (the protocol is)".to_string()))?;
    if line.contains(['\n', '\r']) {
        return Err(NoReply(format!(
            "{line:?}: an argument holds a line break; a request is one line"
        )));
    }
    Ok(line + "\n")
}

/// The process serving `target`: the pid it names, or the one its socket
/// says (the first line of `status`); `None` when neither is known.
fn served_pid(target: &str) -> Option<u32> {
    if let Ok(pid) = target.parse() {
        return Some(pid);
    }
    let (ok, status) = exchange_line(target, Duration::from_secs(5), "status\n").ok()?;
    let first = status.lines().next()?;
    first
        .strip_prefix("pid ")
        .filter(|_| ok)?
        .trim()
        .parse()
        .ok()
}

/// The socket at `target`: a path, or a pid's default path (with the pid).
fn socket_path(target: &str) -> Result<(PathBuf, Option<u32>), NoReply> {
    if target.is_empty() || !target.bytes().all(|b| b.is_ascii_digit()) {
        return Ok((PathBuf::from(target), None));
    }
    let pid: u32 = target
        .parse()
        .map_err(|_| NoReply(format!("{target}: not a pid")))?;
    let path = fntrace_tools::wire::control_socket_path_of(pid).map_err(NoReply)?;
    Ok((path, Some(pid)))
}
