//! The control protocol's requests, defined once for both ends: the
//! runtime parses a request line into a [`Request`] ([`parse`]), and
//! `fntrace ctl` writes one with [`Request::line`]. A request is one line
//! of UTF-8 text: a command and its arguments, separated by spaces; a
//! directory is the rest of the line (it may hold spaces), an absolute
//! path. The replies are the runtime's (`ok …` or `error: …`, lines, an
//! empty line).

use std::path::PathBuf;

/// The longest request, its `\n` included.
pub const MAX_REQUEST_BYTES: usize = 4096;

/// The commands, as the error for an unknown one lists them.
const COMMANDS: &str = "status, enable [--pending] TRACER, disable TRACER, filter [--pending] GLOBS, \
                        functions [GLOB], patch GLOBS, record DIR, stop, snapshot DIR, dump DIR, report, futures, \
                        profile [reset], metrics-filter GLOBS|--clear, args SPECS, retval SPECS, \
                        flight start|stop|trigger|triggers|untrigger, detach";

/// The `flight` subcommands, as the error for an unknown one lists them.
const FLIGHT_COMMANDS: &str = "flight start [--budget SIZE] [--rate N] DIR, flight stop, \
                               flight trigger [--pending] GLOB>DURATION|panic|SIGNAME, flight triggers, \
                               flight untrigger [GLOB|panic|SIGNAME]";

/// A request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `status`.
    Status,
    /// `enable TRACER`: refused when the filter selects no function with
    /// a call site (or the process has none).
    Enable(String),
    /// `enable --pending TRACER`: enabled all the same, for functions
    /// with sites to come (a library loaded later with `dlopen`).
    EnablePending(String),
    /// `disable TRACER`.
    Disable(String),
    /// `filter GLOBS`: the rest of the line; refused when a glob matches
    /// no function with a call site.
    Filter(String),
    /// `filter --pending GLOBS`: set all the same, for functions with
    /// sites to come (a library loaded later with `dlopen`).
    FilterPending(String),
    /// `functions [GLOB]`: the functions with a call site (those GLOB
    /// selects), or an error naming the closest ones when it selects none
    /// (or the process has none). What `fntrace top -F` checks first.
    Functions(Option<String>),
    /// `patch GLOBS`: the rest of the line, comma-separated globs of
    /// functions built without instrumentation whose entries to patch
    /// (uftrace's `-P`; checked by the handler).
    Patch(String),
    /// `record [--mode=MODE] DIR`: the mode's text (`lossless` or `drop`,
    /// checked by the handler; none: drop), and the directory.
    Record(PathBuf, Option<String>),
    /// `stop`.
    Stop,
    /// `snapshot DIR`.
    Snapshot(PathBuf),
    /// `dump DIR`.
    Dump(PathBuf),
    /// `report`.
    Report,
    /// `futures`: the runtime future linker's rows (a process recording
    /// with `fntrace record --async`'s values): per async function, the
    /// futures completed, their latency p50/p99 and busy time.
    Futures,
    /// `profile`: the profile tracer's snapshot, in its text form.
    Profile,
    /// `profile reset`: forget the calls profiled so far.
    ProfileReset,
    /// `metrics-filter GLOBS`: the functions `GET /metrics` exports from
    /// now on (the rest of the line, checked by the handler);
    /// `metrics-filter --clear` (`None`): those of `FNTRACE_METRICS_FILTER`
    /// again.
    MetricsFilter(Option<String>),
    /// `args SPECS`: the arguments the graph tracer records from now on
    /// (`-A` specs, several joined by `;`; replacing those set before);
    /// `args --clear` (empty): none.
    Args(String),
    /// `retval SPECS`: the return values it records from now on (`-R`);
    /// `retval --clear` (empty): none.
    Retval(String),
    /// `flight ...`: the flight recorder.
    Flight(FlightRequest),
    /// `detach`: in a process `fntrace attach` made serve, every tracer
    /// off, the text fntrace wrote given back, the server stopped.
    Detach,
}

/// A `flight` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlightRequest {
    /// `flight start [--budget SIZE] [--rate N] DIR`: the texts of the
    /// options, checked by the handler.
    Start {
        /// The window's budget (`64M`).
        budget: Option<String>,
        /// Snapshots per minute.
        rate: Option<String>,
        /// Where snapshots go.
        dir: PathBuf,
    },
    /// `flight stop`.
    Stop,
    /// `flight trigger SPEC` (`GLOB>DURATION`, `panic`, `SIGNAME`),
    /// checked by the handler (a GLOB matching no function with a call
    /// site is refused).
    Trigger(String),
    /// `flight trigger --pending SPEC`: a GLOB matching no function yet is
    /// kept (a library loaded later with `dlopen`).
    TriggerPending(String),
    /// `flight triggers`.
    Triggers,
    /// `flight untrigger [WHICH]`.
    Untrigger(Option<String>),
}

/// Parses what follows `flight`.
fn parse_flight(rest: &str) -> Result<FlightRequest, String> {
    let (sub, mut rest) = match rest.find([' ', '\t']) {
        Some(at) => (&rest[..at], rest[at..].trim_start()),
        None => (rest, ""),
    };
    let rest_trimmed = rest.trim();
    match sub {
        "start" => {
            let (mut budget, mut rate) = (None, None);
            loop {
                let (option, after) = match rest.find([' ', '\t']) {
                    Some(at) => (&rest[..at], rest[at..].trim_start()),
                    None => (rest, ""),
                };
                let slot = match option {
                    "--budget" => &mut budget,
                    "--rate" => &mut rate,
                    _ => break,
                };
                let (value, after) = match after.find([' ', '\t']) {
                    Some(at) => (&after[..at], after[at..].trim_start()),
                    None => (after, ""),
                };
                if value.is_empty() {
                    return Err(format!("flight start: {option} needs a value"));
                }
                *slot = Some(value.to_string());
                rest = after;
            }
            let dir = rest.trim_end();
            if dir.is_empty() {
                return Err(
                    "flight start needs a directory for the snapshots: flight start [--budget \
                     SIZE] [--rate N] DIR"
                        .to_string(),
                );
            }
            if !dir.starts_with('/') {
                return Err(format!(
                    "flight start: {dir:?} is not an absolute path (the program's working \
                     directory is not the client's)"
                ));
            }
            Ok(FlightRequest::Start {
                budget,
                rate,
                dir: PathBuf::from(dir),
            })
        }
        "stop" | "triggers" if !rest_trimmed.is_empty() => Err(format!(
            "flight {sub} takes no argument (got {rest_trimmed:?})"
        )),
        "stop" => Ok(FlightRequest::Stop),
        "triggers" => Ok(FlightRequest::Triggers),
        "trigger" if rest_trimmed.is_empty() => Err(
            "flight trigger needs a trigger: GLOB>DURATION (handle_*>5ms), panic or SIGNAME"
                .to_string(),
        ),
        "trigger" => match rest_trimmed.strip_prefix("--pending") {
            Some(spec) if spec.starts_with([' ', '\t']) => {
                Ok(FlightRequest::TriggerPending(spec.trim().to_string()))
            }
            Some("") => Err("flight trigger --pending needs a trigger: GLOB>DURATION".to_string()),
            _ => Ok(FlightRequest::Trigger(rest_trimmed.to_string())),
        },
        "untrigger" => Ok(FlightRequest::Untrigger(
            (!rest_trimmed.is_empty()).then(|| rest_trimmed.to_string()),
        )),
        "" => Err(format!("flight needs a command: {FLIGHT_COMMANDS}")),
        other => Err(format!(
            "unknown flight command {other:?}; they are: {FLIGHT_COMMANDS}"
        )),
    }
}

/// Parses one request line (without its `\n`; a `\r` before it is
/// dropped). The error is the message of the reply.
pub fn parse(line: &[u8]) -> Result<Request, String> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = std::str::from_utf8(line)
        .map_err(|e| format!("the request is not UTF-8 (byte {})", e.valid_up_to() + 1))?;
    if let Some(c) = line.chars().find(|&c| c.is_control() && c != '\t') {
        return Err(format!(
            "the request contains the control character {c:?}; send one line of text"
        ));
    }
    let line = line.trim_start();
    let (command, rest) = match line.find([' ', '\t']) {
        Some(at) => (&line[..at], line[at..].trim_start()),
        None => (line, ""),
    };
    let no_argument = |request: Request| {
        if rest.trim().is_empty() {
            Ok(request)
        } else {
            Err(format!(
                "{command} takes no argument (got {:?})",
                rest.trim()
            ))
        }
    };
    let one_word = |what: &str| -> Result<String, String> {
        let mut words = rest.split_whitespace();
        match (words.next(), words.next()) {
            (Some(word), None) => Ok(word.to_string()),
            (None, _) => Err(format!("{command} needs {what}: {command} {what}")),
            (Some(_), Some(extra)) => Err(format!(
                "{command} takes one {what}, not more (got {extra:?} after it)"
            )),
        }
    };
    let directory = || -> Result<PathBuf, String> {
        // The rest of the line, so that a path may hold spaces.
        let dir = rest.trim_end();
        if dir.is_empty() {
            return Err(format!("{command} needs a directory: {command} DIR"));
        }
        if !dir.starts_with('/') {
            return Err(format!(
                "{command}: {dir:?} is not an absolute path (the program's working directory \
                 is not the client's)"
            ));
        }
        Ok(PathBuf::from(dir))
    };
    match command {
        "status" => no_argument(Request::Status),
        "stop" => no_argument(Request::Stop),
        "detach" => no_argument(Request::Detach),
        "report" => no_argument(Request::Report),
        "futures" => no_argument(Request::Futures),
        "profile" => match rest.trim() {
            "" => Ok(Request::Profile),
            "reset" => Ok(Request::ProfileReset),
            other => Err(format!(
                "profile takes nothing or reset (got {other:?}): profile, profile reset"
            )),
        },
        "enable" => match rest.trim().strip_prefix("--pending") {
            Some(tracer) if tracer.starts_with([' ', '\t']) => {
                let tracer = tracer.trim();
                match tracer.split_whitespace().count() {
                    1 => Ok(Request::EnablePending(tracer.to_string())),
                    _ => Err(format!(
                        "enable --pending takes one TRACER (got {tracer:?})"
                    )),
                }
            }
            Some("") => Err("enable --pending needs TRACER: enable --pending TRACER".to_string()),
            _ => Ok(Request::Enable(one_word("TRACER")?)),
        },
        "disable" => Ok(Request::Disable(one_word("TRACER")?)),
        "filter" => match rest.trim() {
            "" => Err(
                "filter needs globs: filter GLOBS (such as handle_*,!log_*; \
                       * selects every function)"
                    .to_string(),
            ),
            globs => match globs.strip_prefix("--pending") {
                Some(rest) if rest.starts_with([' ', '\t']) => {
                    Ok(Request::FilterPending(rest.trim().to_string()))
                }
                Some("") => Err("filter --pending needs globs: filter --pending GLOBS".to_string()),
                _ => Ok(Request::Filter(globs.to_string())),
            },
        },
        "functions" => match rest.trim() {
            "" => Ok(Request::Functions(None)),
            _ => Ok(Request::Functions(Some(one_word("GLOB")?))),
        },
        "patch" => match rest.trim() {
            "" => Err("patch needs globs: patch GLOBS (such as w_*,parse_*)".to_string()),
            globs => Ok(Request::Patch(globs.to_string())),
        },
        "record" => match rest.trim_start().strip_prefix("--mode=") {
            Some(with_mode) => {
                let (mode, dir) = with_mode.split_once(' ').unwrap_or((with_mode, ""));
                match dir.trim() {
                    "" => Err("record needs a directory: record [--mode=MODE] DIR".to_string()),
                    dir => Ok(Request::Record(dir.into(), Some(mode.to_string()))),
                }
            }
            None => Ok(Request::Record(directory()?, None)),
        },
        "snapshot" => Ok(Request::Snapshot(directory()?)),
        "dump" => Ok(Request::Dump(directory()?)),
        "flight" => Ok(Request::Flight(parse_flight(rest)?)),
        "metrics-filter" => match rest.trim() {
            "" => Err(
                "metrics-filter needs globs (such as kv::*,!kv::log_*; * for every \
                       function) or --clear"
                    .to_string(),
            ),
            "--clear" => Ok(Request::MetricsFilter(None)),
            globs => Ok(Request::MetricsFilter(Some(globs.to_string()))),
        },
        "args" | "retval" => match rest.trim() {
            "" => Err(format!(
                "{command} needs specs (such as f@arg1/s;g@retval) or --clear"
            )),
            "--clear" if command == "args" => Ok(Request::Args(String::new())),
            "--clear" => Ok(Request::Retval(String::new())),
            specs if command == "args" => Ok(Request::Args(specs.to_string())),
            specs => Ok(Request::Retval(specs.to_string())),
        },
        "" => Err(format!("empty request; the commands are: {COMMANDS}")),
        other => Err(format!(
            "unknown command {other:?}; the commands are: {COMMANDS}"
        )),
    }
}

impl Request {
    /// The request line, without its `\n`: what [`parse`] reads back as
    /// this request. Directories are written as they are (the client makes
    /// them absolute first); `None` if one is not UTF-8 (the protocol is).
    pub fn line(&self) -> Option<String> {
        let dir = |dir: &PathBuf| dir.to_str().map(String::from);
        Some(match self {
            Request::Status => "status".to_string(),
            Request::Enable(tracer) => format!("enable {tracer}"),
            Request::EnablePending(tracer) => format!("enable --pending {tracer}"),
            Request::FilterPending(globs) => format!("filter --pending {globs}"),
            Request::Functions(None) => "functions".to_string(),
            Request::Functions(Some(glob)) => format!("functions {glob}"),
            Request::Disable(tracer) => format!("disable {tracer}"),
            Request::Filter(globs) => format!("filter {globs}"),
            Request::Patch(globs) => format!("patch {globs}"),
            Request::Record(d, None) => format!("record {}", dir(d)?),
            Request::Record(d, Some(mode)) => format!("record --mode={mode} {}", dir(d)?),
            Request::Stop => "stop".to_string(),
            Request::Detach => "detach".to_string(),
            Request::Snapshot(d) => format!("snapshot {}", dir(d)?),
            Request::Dump(d) => format!("dump {}", dir(d)?),
            Request::Report => "report".to_string(),
            Request::Futures => "futures".to_string(),
            Request::Profile => "profile".to_string(),
            Request::ProfileReset => "profile reset".to_string(),
            Request::MetricsFilter(None) => "metrics-filter --clear".to_string(),
            Request::MetricsFilter(Some(globs)) => format!("metrics-filter {globs}"),
            Request::Args(specs) if specs.is_empty() => "args --clear".to_string(),
            Request::Retval(specs) if specs.is_empty() => "retval --clear".to_string(),
            Request::Args(specs) => format!("args {specs}"),
            Request::Retval(specs) => format!("retval {specs}"),
            Request::Flight(flight) => match flight {
                FlightRequest::Start {
                    budget,
                    rate,
                    dir: d,
                } => {
                    let mut line = "flight start".to_string();
                    if let Some(budget) = budget {
                        line += &format!(" --budget {budget}");
                    }
                    if let Some(rate) = rate {
                        line += &format!(" --rate {rate}");
                    }
                    format!("{line} {}", dir(d)?)
                }
                FlightRequest::Stop => "flight stop".to_string(),
                FlightRequest::Trigger(spec) => format!("flight trigger {spec}"),
                FlightRequest::TriggerPending(spec) => format!("flight trigger --pending {spec}"),
                FlightRequest::Triggers => "flight triggers".to_string(),
                FlightRequest::Untrigger(None) => "flight untrigger".to_string(),
                FlightRequest::Untrigger(Some(which)) => format!("flight untrigger {which}"),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_command() {
        assert_eq!(parse(b"status"), Ok(Request::Status));
        assert_eq!(parse(b"  status \r"), Ok(Request::Status));
        assert_eq!(parse(b"stop"), Ok(Request::Stop));
        assert_eq!(parse(b"report"), Ok(Request::Report));
        assert_eq!(parse(b"futures"), Ok(Request::Futures));
        assert_eq!(parse(b"profile"), Ok(Request::Profile));
        assert_eq!(parse(b"profile  reset "), Ok(Request::ProfileReset));
        assert!(parse(b"profile now").is_err());
        assert_eq!(parse(b"enable graph"), Ok(Request::Enable("graph".into())));
        assert_eq!(
            parse(b"disable\tfunction "),
            Ok(Request::Disable("function".into()))
        );
        assert_eq!(
            parse(b"filter handle_*, !log_*"),
            Ok(Request::Filter("handle_*, !log_*".into()))
        );
        assert_eq!(
            parse(b"record /tmp/a b"),
            Ok(Request::Record("/tmp/a b".into(), None))
        );
        assert_eq!(
            parse(b"record --mode=lossless /tmp/a b"),
            Ok(Request::Record("/tmp/a b".into(), Some("lossless".into())))
        );
        assert!(parse(b"record --mode=drop").is_err());
        assert_eq!(parse(b"snapshot /s"), Ok(Request::Snapshot("/s".into())));
        assert_eq!(parse(b"dump /d"), Ok(Request::Dump("/d".into())));
        let flight = |request| Ok(Request::Flight(request));
        assert_eq!(
            parse(b"flight start /s p"),
            flight(FlightRequest::Start {
                budget: None,
                rate: None,
                dir: "/s p".into()
            })
        );
        assert_eq!(
            parse(b"flight start --budget 64M --rate 2 /s"),
            flight(FlightRequest::Start {
                budget: Some("64M".into()),
                rate: Some("2".into()),
                dir: "/s".into()
            })
        );
        assert_eq!(parse(b"flight stop"), flight(FlightRequest::Stop));
        assert_eq!(parse(b"flight triggers"), flight(FlightRequest::Triggers));
        assert_eq!(
            parse(b"flight trigger handle_*>5ms"),
            flight(FlightRequest::Trigger("handle_*>5ms".into()))
        );
        assert_eq!(
            parse(b"flight untrigger"),
            flight(FlightRequest::Untrigger(None))
        );
        assert_eq!(
            parse(b"flight untrigger panic"),
            flight(FlightRequest::Untrigger(Some("panic".into())))
        );
    }

    #[test]
    fn refuses_what_is_not_a_request() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "empty request"),
            (b"   ", "empty request"),
            (b"bogus", "unknown command \"bogus\""),
            (b"STATUS", "unknown command"),
            (b"status now", "status takes no argument"),
            (b"stop it", "stop takes no argument"),
            (b"enable", "enable needs TRACER"),
            (b"enable graph function", "takes one TRACER"),
            (b"disable", "disable needs TRACER"),
            (b"filter", "filter needs globs"),
            (b"filter --pending", "filter --pending needs globs"),
            (b"enable --pending", "enable --pending needs TRACER"),
            (b"enable --pending a b", "takes one TRACER"),
            (b"functions a b", "takes one GLOB"),
            (b"record", "record needs a directory"),
            (b"record rel/dir", "not an absolute path"),
            (b"dump ", "dump needs a directory"),
            (b"snapshot x", "not an absolute path"),
            (b"flight", "flight needs a command"),
            (b"flight go", "unknown flight command \"go\""),
            (b"flight start", "needs a directory"),
            (b"flight start --budget", "--budget needs a value"),
            (b"flight start --budget 64M rel", "not an absolute path"),
            (b"flight stop now", "takes no argument"),
            (b"flight trigger", "needs a trigger"),
            (b"st\xffatus", "not UTF-8 (byte 3)"),
            (b"\x00\x01\x02", "control character"),
            (b"status\x1b[2J", "control character"),
        ];
        for (line, message) in cases {
            let err = parse(line).unwrap_err();
            assert!(err.contains(message), "{line:?}: {err}");
        }
    }

    /// Every request the client can write is read back as itself: the
    /// words are defined once, here, for both ends.
    #[test]
    fn every_request_line_parses_back_to_its_request() {
        let flight = Request::Flight;
        let requests = [
            Request::Status,
            Request::Enable("graph".into()),
            Request::Disable("function".into()),
            Request::Filter("handle_*,!log_*".into()),
            Request::FilterPending("plugin_*".into()),
            Request::EnablePending("profile".into()),
            Request::Functions(None),
            Request::Functions(Some("handle_*".into())),
            Request::Patch("w_*,parse_*".into()),
            Request::Record("/tmp/a b".into(), None),
            Request::Record("/tmp/a".into(), Some("lossless".into())),
            Request::Stop,
            Request::Detach,
            Request::Snapshot("/s p".into()),
            Request::Dump("/d".into()),
            Request::Report,
            Request::Profile,
            Request::ProfileReset,
            Request::MetricsFilter(Some("kv::*, !kv::log".into())),
            Request::MetricsFilter(None),
            Request::Args("f@arg1/s;g@arg2".into()),
            Request::Args(String::new()),
            Request::Retval("f@retval".into()),
            Request::Retval(String::new()),
            flight(FlightRequest::Start {
                budget: None,
                rate: None,
                dir: "/s".into(),
            }),
            flight(FlightRequest::Start {
                budget: Some("64M".into()),
                rate: Some("2".into()),
                dir: "/s p".into(),
            }),
            flight(FlightRequest::Stop),
            flight(FlightRequest::Trigger("handle_*>5ms".into())),
            flight(FlightRequest::TriggerPending("plugin_*>5ms".into())),
            flight(FlightRequest::Triggers),
            flight(FlightRequest::Untrigger(None)),
            flight(FlightRequest::Untrigger(Some("SIGUSR1".into()))),
        ];
        for request in requests {
            let line = request.line().unwrap();
            assert!(line.len() < MAX_REQUEST_BYTES && !line.contains('\n'));
            assert_eq!(parse(line.as_bytes()), Ok(request), "{line}");
        }
    }
}
