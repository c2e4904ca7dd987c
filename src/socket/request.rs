//! The control protocol's messages: a request line parsed into a
//! [`Request`], and a [`Reply`] encoded as lines (see the module above for
//! the protocol).

use std::path::PathBuf;

use crate::record::RecordMode;

/// The longest request, its `\n` included.
pub(crate) const MAX_REQUEST_BYTES: usize = 4096;

/// The commands, as the error for an unknown one lists them.
const COMMANDS: &str = "status, enable TRACER, disable TRACER, filter GLOBS, record DIR, stop, \
                        snapshot DIR, dump DIR, report, profile [reset], flight start|stop|trigger|triggers|untrigger";

/// The `flight` subcommands, as the error for an unknown one lists them.
const FLIGHT_COMMANDS: &str = "flight start [--budget SIZE] [--rate N] DIR, flight stop, \
                               flight trigger GLOB>DURATION|panic|SIGNAME, flight triggers, \
                               flight untrigger [GLOB|panic|SIGNAME]";

/// A parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// `status`.
    Status,
    /// `enable TRACER`.
    Enable(String),
    /// `disable TRACER`.
    Disable(String),
    /// `filter GLOBS`: the rest of the line.
    Filter(String),
    /// `record [--mode=lossless|drop] DIR` (drop mode by default).
    Record(PathBuf, RecordMode),
    /// `stop`.
    Stop,
    /// `snapshot DIR`.
    Snapshot(PathBuf),
    /// `dump DIR`.
    Dump(PathBuf),
    /// `report`.
    Report,
    /// `profile`: the profile tracer's snapshot, in its text form.
    Profile,
    /// `profile reset`: forget the calls profiled so far.
    ProfileReset,
    /// `flight ...`: the flight recorder.
    Flight(FlightRequest),
}

/// A `flight` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FlightRequest {
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
    /// checked by the handler.
    Trigger(String),
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
        "trigger" => Ok(FlightRequest::Trigger(rest_trimmed.to_string())),
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
pub(crate) fn parse(line: &[u8]) -> Result<Request, String> {
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
        "report" => no_argument(Request::Report),
        "profile" => match rest.trim() {
            "" => Ok(Request::Profile),
            "reset" => Ok(Request::ProfileReset),
            other => Err(format!(
                "profile takes nothing or reset (got {other:?}): profile, profile reset"
            )),
        },
        "enable" => Ok(Request::Enable(one_word("TRACER")?)),
        "disable" => Ok(Request::Disable(one_word("TRACER")?)),
        "filter" => match rest.trim() {
            "" => Err(
                "filter needs globs: filter GLOBS (such as handle_*,!log_*; \
                       * selects every function)"
                    .to_string(),
            ),
            globs => Ok(Request::Filter(globs.to_string())),
        },
        "record" => match rest.trim_start().strip_prefix("--mode=") {
            Some(with_mode) => {
                let (mode, dir) = with_mode.split_once(' ').unwrap_or((with_mode, ""));
                let mode = mode.parse().map_err(|e| format!("record --mode: {e}"))?;
                match dir.trim() {
                    "" => Err("record needs a directory: record [--mode=MODE] DIR".to_string()),
                    dir => Ok(Request::Record(dir.into(), mode)),
                }
            }
            None => Ok(Request::Record(directory()?, RecordMode::Drop)),
        },
        "snapshot" => Ok(Request::Snapshot(directory()?)),
        "dump" => Ok(Request::Dump(directory()?)),
        "flight" => Ok(Request::Flight(parse_flight(rest)?)),
        "" => Err(format!("empty request; the commands are: {COMMANDS}")),
        other => Err(format!(
            "unknown command {other:?}; the commands are: {COMMANDS}"
        )),
    }
}

/// A reply: `ok` with a summary and lines, or an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    ok: bool,
    first: String,
    lines: Vec<String>,
}

impl Reply {
    /// `ok SUMMARY`.
    pub(crate) fn ok(summary: impl Into<String>) -> Reply {
        Reply {
            ok: true,
            first: summary.into(),
            lines: Vec::new(),
        }
    }

    /// `error: MESSAGE`.
    pub(crate) fn error(message: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            first: message.into(),
            lines: Vec::new(),
        }
    }

    /// Adds `text`'s lines after the first.
    pub(crate) fn with_lines(mut self, text: &str) -> Reply {
        self.lines.extend(text.lines().map(String::from));
        self
    }

    /// Adds a `key: value` line.
    pub(crate) fn with(mut self, key: &str, value: impl std::fmt::Display) -> Reply {
        self.lines.push(format!("{key}: {value}"));
        self
    }

    /// The bytes sent: the first line, the others, then an empty line. No
    /// line of a reply is empty (an empty one is sent as one space) and
    /// none holds a control character, so the empty line always ends it.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let clean = |line: &str| -> String {
            let line: String = line
                .chars()
                .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
                .collect();
            if line.is_empty() {
                " ".to_string()
            } else {
                line
            }
        };
        let mut out = String::new();
        match (self.ok, self.first.is_empty()) {
            (true, true) => out.push_str("ok"),
            (true, false) => out.push_str(&format!("ok {}", clean(&self.first))),
            (false, _) => out.push_str(&format!("error: {}", clean(&self.first))),
        }
        out.push('\n');
        for line in &self.lines {
            out.push_str(&clean(line));
            out.push('\n');
        }
        out.push('\n');
        out.into_bytes()
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
            Ok(Request::Record("/tmp/a b".into(), RecordMode::Drop))
        );
        assert_eq!(
            parse(b"record --mode=lossless /tmp/a b"),
            Ok(Request::Record("/tmp/a b".into(), RecordMode::Lossless))
        );
        assert!(parse(b"record --mode=sometimes /t").is_err());
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

    #[test]
    fn replies_end_with_an_empty_line_and_hold_none() {
        let reply = Reply::ok("done").with("events", 3).with_lines("a\n\nb\x07");
        assert_eq!(reply.encode(), b"ok done\nevents: 3\na\n \nb \n\n");
        assert_eq!(Reply::ok("").encode(), b"ok\n\n");
        assert_eq!(Reply::error("bad\nthing").encode(), b"error: bad thing\n\n");
    }
}
