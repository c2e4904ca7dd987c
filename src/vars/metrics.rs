//! The `FNTRACE_METRICS*` variables' parsers: where the metrics endpoint
//! listens, who may scrape it (the public opt-in's flag is the common
//! `parse_flag`; the bearer token, from the variable or a file), and how
//! many functions it exports. The errors about a token describe it
//! (length, the first wrong character), never print it.

use fntrace_format::analysis::MAX_BUCKETS_PER_DOUBLING;
use std::path::PathBuf;

/// `FNTRACE_METRICS`: the address to serve `GET /metrics` on, `None` for
/// none: `HOST:PORT`, or `:PORT` or a port alone (both on 127.0.0.1).
/// Whether the host resolves, to a loopback address (or
/// `FNTRACE_METRICS_PUBLIC` allows another), and the port is free is
/// known when it is bound.
pub(crate) fn parse_metrics(value: &str) -> Result<Option<String>, String> {
    let value = value.trim();
    if value.is_empty() || value == "0" {
        return Ok(None);
    }
    let port = value.strip_prefix(':').unwrap_or(value);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(Some(format!("127.0.0.1:{port}")));
    }
    let expected = "expected HOST:PORT on a loopback address (127.0.0.1:9464, [::1]:9464), \
                    :PORT or a port alone (127.0.0.1), PORT from 0 to 65535, or 0 (none)";
    let why = match value.rsplit_once(':') {
        // A port alone, or `:PORT`, that is no port.
        _ if value.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{value} is not a port (over 65535)")
        }
        None => format!("{value:?} has no port"),
        Some((_, "")) => format!("{value:?} has no port after its ':'"),
        Some(("", port)) => format!("port {port:?} is not a number from 0 to 65535"),
        Some((host, port)) => match port.parse::<u16>() {
            Ok(_) => return Ok(Some(value.to_string())),
            Err(_) => format!("port {port:?} of host {host} is not a number from 0 to 65535"),
        },
    };
    Err(format!("{why}; {expected}"))
}

/// The longest bearer token accepted (a request head holds at most 8 KiB).
pub(crate) const MAX_TOKEN_BYTES: usize = 4096;

/// The shortest bearer token accepted: 16 characters (96 bits and more
/// when drawn at random, as `openssl rand -hex 16` gives 32).
pub(crate) const MIN_TOKEN_BYTES: usize = 16;

/// `FNTRACE_METRICS_TOKEN` (and the token file's line,
/// `MetricsOptions::token`): a bearer token as RFC 6750 writes it
/// (`b64token`: letters, digits, `-._~+/`, then `=` padding), at least
/// [`MIN_TOKEN_BYTES`] long. The errors describe it without printing it.
pub(crate) fn parse_token(value: &str) -> Result<String, String> {
    let body = value.trim_end_matches('=');
    if let Some((at, c)) = body.char_indices().find(|&(_, c)| {
        !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~' | '+' | '/'))
    }) {
        let at = value[..at].chars().count() + 1;
        let what = match c {
            ' ' => "a space".to_string(),
            c if c.is_control() => format!("a control character ({c:?})"),
            _ => format!("{c:?}"),
        };
        return Err(format!(
            "character {at} is {what}; a bearer token holds only A-Z a-z 0-9 - . _ ~ + / \
             (= at the end)"
        ));
    }
    if body.is_empty() || value.len() < MIN_TOKEN_BYTES {
        return Err(format!(
            "too short: at least {MIN_TOKEN_BYTES} characters (openssl rand -hex 32 makes one)"
        ));
    }
    if value.len() > MAX_TOKEN_BYTES {
        return Err(format!("too long: at most {MAX_TOKEN_BYTES} characters"));
    }
    Ok(value.to_string())
}

/// `FNTRACE_METRICS_TOKEN_FILE`: an absolute path (read at start-up,
/// [`read_token_file`]).
pub(crate) fn parse_token_file(value: &str) -> Result<PathBuf, String> {
    match value {
        path if path.starts_with('/') => Ok(PathBuf::from(path)),
        _ => Err("use an absolute path to a file holding the token".to_string()),
    }
}

/// The token in the file `FNTRACE_METRICS_TOKEN_FILE` names: its first
/// line, without the line feed (and a `\r` before it); nothing may follow
/// but empty lines. The errors never hold the file's text.
pub(crate) fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| {
            file.take(MAX_TOKEN_BYTES as u64 + 64)
                .read_to_string(&mut text)
        })
        .map_err(|e| format!("cannot read it: {e}"))?;
    let mut lines = text.lines();
    let token = lines.next().unwrap_or("");
    if lines.any(|line| !line.trim().is_empty()) {
        return Err("the file holds more than one line; the token is its one line".to_string());
    }
    parse_token(token).map_err(|e| format!("its line is not a token: {e}"))
}

/// `FNTRACE_METRICS_MAX_FUNCTIONS`: 0 to 1,000,000.
pub(crate) fn parse_max_functions(value: &str) -> Result<usize, String> {
    value
        .trim()
        .parse()
        .ok()
        .filter(|&n| n <= 1_000_000)
        .ok_or_else(|| "not a number of functions (a whole number from 0 to 1000000)".into())
}

/// `FNTRACE_METRICS_HISTOGRAMS`: 0 to 1,000,000.
pub(crate) fn parse_histograms(value: &str) -> Result<usize, String> {
    parse_max_functions(value)
}

/// `FNTRACE_METRICS_BUCKETS_PER_DOUBLING`: 1, 2, 4 … 128.
pub(crate) fn parse_buckets_per_doubling(value: &str) -> Result<u32, String> {
    value
        .trim()
        .parse()
        .ok()
        .filter(|&n: &u32| n.is_power_of_two() && n <= MAX_BUCKETS_PER_DOUBLING)
        .ok_or_else(|| "not 1, 2, 4, 8, 16, 32, 64 or 128 (buckets per power of two)".into())
}

/// `FNTRACE_METRICS_FILTER` (and `ctl metrics-filter`'s words): globs,
/// comma-separated, as `FNTRACE_FILTER` takes them: `glob` exports the
/// functions it matches, `!glob` leaves out those it matches; spaces
/// around items ignored; empty: every function.
pub(crate) fn parse_metrics_filter(value: &str) -> Result<Vec<String>, String> {
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(str::trim)
        .map(|glob| match glob.trim_start_matches('!') {
            "" => Err("an empty glob (globs are comma-separated: kv::*,!kv::log)".to_string()),
            _ => Ok(glob.to_string()),
        })
        .collect()
}

/// `FNTRACE_METRICS_NAMES`: `short` (the default: generic arguments left
/// out) or `full`; whether full.
pub(crate) fn parse_names(value: &str) -> Result<bool, String> {
    match value.trim() {
        "" | "short" => Ok(false),
        "full" => Ok(true),
        _ => Err("expected short (generic arguments left out) or full".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{shown, variable};
    use super::*;

    #[test]
    fn addresses_tokens_and_ceilings() {
        assert_eq!(parse_metrics(":9464"), Ok(Some("127.0.0.1:9464".into())));
        assert_eq!(parse_metrics("9464"), Ok(Some("127.0.0.1:9464".into())));
        assert_eq!(parse_metrics("[::1]:9464"), Ok(Some("[::1]:9464".into())));
        assert_eq!(parse_metrics("0"), Ok(None));
        assert_eq!(parse_max_functions("500"), Ok(500));
        assert_eq!(parse_max_functions("0"), Ok(0));
        assert_eq!(
            parse_metrics_filter(" kv::*, !kv::log ,x"),
            Ok(vec!["kv::*".into(), "!kv::log".into(), "x".into()])
        );
        assert_eq!(parse_metrics_filter(""), Ok(vec![]));
        assert!(parse_metrics_filter("a,,b").is_err());
        assert!(parse_metrics_filter("!").is_err());
        assert_eq!(parse_names("full"), Ok(true));
        assert_eq!(parse_names("short"), Ok(false));
        assert!(parse_names("long").is_err());
        let token = "0123456789abcdefABCD-._~+/==";
        assert_eq!(parse_token(token), Ok(token.to_string()));
        assert!(parse_token(&"a".repeat(MAX_TOKEN_BYTES + 1))
            .unwrap_err()
            .contains("too long"));
    }

    #[test]
    fn a_bad_token_is_described_never_printed() {
        let secret = "s3cret-but with a space";
        let line = check_line("FNTRACE_METRICS_TOKEN", secret);
        assert!(!line.contains("s3cret"), "{line}");
        assert!(line.contains("(23 characters, not shown)"), "{line}");
        assert!(line.contains("character 11 is a space"), "{line}");
        // Other variables echo their value.
        let line = check_line("FNTRACE_METRICS_MAX_FUNCTIONS", "lots");
        assert!(
            line.starts_with("FNTRACE_METRICS_MAX_FUNCTIONS=lots: "),
            "{line}"
        );
    }

    #[test]
    fn a_bad_address_names_what_is_wrong_and_what_is_expected() {
        let expected = "expected HOST:PORT on a loopback address (127.0.0.1:9464, \
                        [::1]:9464), :PORT or a port alone (127.0.0.1), PORT from 0 to 65535, \
                        or 0 (none)";
        for (value, why) in [
            (
                "localhost:abc",
                "port \"abc\" of host localhost is not a number from 0 to 65535",
            ),
            (
                "localhost:-1",
                "port \"-1\" of host localhost is not a number from 0 to 65535",
            ),
            (":", "\":\" has no port after its ':'"),
            ("host:", "\"host:\" has no port after its ':'"),
            ("99999", "99999 is not a port (over 65535)"),
            (":99999", "port \"99999\" is not a number from 0 to 65535"),
            ("localhost", "\"localhost\" has no port"),
        ] {
            assert_eq!(
                check_line("FNTRACE_METRICS", value),
                format!("FNTRACE_METRICS={value}: {why}; {expected}")
            );
        }
    }

    /// The line a bad value of `name` prints (as `check_set` makes it).
    fn check_line(name: &str, value: &str) -> String {
        let variable = variable(name).unwrap();
        let err = (variable.check)(value).unwrap_err();
        format!("{}: {err}", shown(variable, value))
    }

    #[test]
    fn the_token_file_is_its_one_line() {
        let dir = std::env::temp_dir().join(format!("fntrace-vars-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "0123456789abcdef0123\n").unwrap();
        assert_eq!(read_token_file(&file), Ok("0123456789abcdef0123".into()));
        std::fs::write(&file, "0123456789abcdef0123\r\n\n").unwrap();
        assert_eq!(read_token_file(&file), Ok("0123456789abcdef0123".into()));
        std::fs::write(&file, "0123456789abcdef0123\nsecond\n").unwrap();
        assert!(read_token_file(&file)
            .unwrap_err()
            .contains("more than one line"));
        std::fs::write(&file, "hunter2\n").unwrap();
        let err = read_token_file(&file).unwrap_err();
        assert!(
            err.contains("too short") && !err.contains("hunter2"),
            "{err}"
        );
        let err = read_token_file(&dir.join("missing")).unwrap_err();
        assert!(err.starts_with("cannot read it: "), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
