//! The metrics endpoint's `GET /debug/pprof/profile?seconds=N`: the calls
//! of the next N seconds (30 when not given, 1 to 300) as a pprof profile,
//! as Go's `net/http/pprof` serves the CPU samples of a window: the
//! profile tracer's snapshot when the request comes, another N seconds
//! later, and their difference
//! ([`ProfileSnapshot::since`](fntrace_format::analysis::ProfileSnapshot::since)),
//! encoded by `fntrace_format::export::pprof_message` and framed as gzip
//! of stored blocks (`gzip_stored`: what Go serves is gzip, and the
//! runtime links no compressor).
//!
//! The wait blocks nothing: the request is a [`Window`] the server's
//! `poll` loop holds, its deadline the end of the window, while it goes
//! on answering other scrapes. At most [`MAX_WINDOWS`] are open at once
//! in the process (each holds a snapshot); more get `503`. The profile
//! tracer must be enabled when the window opens (else `503`: enabling it
//! would patch the program for a scrape) and still be when it ends, and
//! the profile not reset in between (else `409`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::builtin::profile::PROFILE_TRACER;
use fntrace_format::analysis::ProfileSnapshot;
use fntrace_format::export::{gzip_stored, pprof_message, PprofInfo};

/// The path served.
pub(super) const PATH: &str = "/debug/pprof/profile";

/// The window when `seconds` is not given: Go's.
const DEFAULT_SECONDS: u64 = 30;

/// The longest window, in seconds.
const MAX_SECONDS: u64 = 300;

/// Windows open at once in the process.
pub(crate) const MAX_WINDOWS: usize = 4;

/// Windows open now.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// A reply: status, body, extra header lines.
pub(super) type Reply = (u16, Vec<u8>, &'static str);

/// A request waiting for the end of its window.
pub(super) struct Window {
    /// The profile when it opened.
    first: ProfileSnapshot,
    /// The profile's resets then.
    resets: u64,
    /// Its length, as asked.
    seconds: u64,
    /// When it opened (monotonic, and since the Unix epoch in ns).
    opened: Instant,
    opened_unix_ns: i64,
    /// Whether the reply carries its body (a `GET`, not a `HEAD`).
    pub(super) with_body: bool,
}

impl Window {
    /// When it ends.
    pub(super) fn due(&self) -> Instant {
        self.opened + Duration::from_secs(self.seconds)
    }

    /// The reply, at its end: the profile of its calls, or why not.
    pub(super) fn finish(&self) -> Reply {
        let second = PROFILE_TRACER.snapshot();
        let elapsed = self.opened.elapsed();
        if !PROFILE_TRACER.is_enabled() {
            return conflict(
                "the profile tracer was disabled during the window: its calls are not all counted"
                    .into(),
            );
        }
        if PROFILE_TRACER.resets() != self.resets {
            return conflict(
                "the profile was reset during the window: its calls before the reset are gone"
                    .into(),
            );
        }
        let window = match second.since(&self.first) {
            Ok(window) => window,
            Err(why) => return conflict(why.to_string()),
        };
        let program = std::env::current_exe()
            .map(|path| path.to_string_lossy().into_owned())
            .unwrap_or_default();
        let info = PprofInfo {
            time_nanos: self.opened_unix_ns,
            duration_nanos: i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX),
            comments: vec![format!(
                "fntrace {PATH}?seconds={}: the calls of {:.3} s",
                self.seconds,
                elapsed.as_secs_f64()
            )],
            program,
            // The runtime reads no debug information: functions by name.
            sources: Default::default(),
        };
        let body = gzip_stored(&pprof_message(&window, &info));
        (
            200,
            body,
            "Content-Disposition: attachment; filename=\"profile\"\r\n",
        )
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A `409` saying `why`.
fn conflict(why: String) -> Reply {
    (409, format!("{why}\n").into_bytes(), "")
}

/// The window a request for `target` (`PATH?QUERY`) opens, or the reply
/// refusing it.
pub(super) fn open(target: &str, with_body: bool) -> Result<Window, Reply> {
    let seconds = seconds(target).map_err(|why| (400, why.into_bytes(), ""))?;
    if !PROFILE_TRACER.is_enabled() {
        let why = "the profile tracer is not enabled: enable it (FNTRACE_TRACER=profile, \
                   or fntrace ctl PID enable profile), then ask again\n";
        return Err((503, why.as_bytes().to_vec(), ""));
    }
    let claimed = OPEN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
        (open < MAX_WINDOWS).then_some(open + 1)
    });
    if claimed.is_err() {
        let why = format!(
            "{MAX_WINDOWS} profile windows are open already: try again when one has ended\n"
        );
        return Err((503, why.into_bytes(), ""));
    }
    let resets = PROFILE_TRACER.resets();
    let first = PROFILE_TRACER.snapshot();
    let opened_unix_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
        });
    Ok(Window {
        first,
        resets,
        seconds,
        opened: Instant::now(),
        opened_unix_ns,
        with_body,
    })
}

/// The `seconds` of a target's query: [`DEFAULT_SECONDS`] when not given,
/// else a whole number from 1 to [`MAX_SECONDS`].
fn seconds(target: &str) -> Result<u64, String> {
    let query = target.split_once('?').map_or("", |(_, query)| query);
    let Some(value) = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("seconds="))
    else {
        return Ok(DEFAULT_SECONDS);
    };
    match value.parse::<u64>() {
        Ok(n) if (1..=MAX_SECONDS).contains(&n) => Ok(n),
        _ => Err(format!(
            "seconds={value} is not a window: a whole number of seconds from 1 to {MAX_SECONDS}\n"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_bounded() {
        assert_eq!(seconds(PATH), Ok(30));
        assert_eq!(seconds("/debug/pprof/profile?seconds=2"), Ok(2));
        assert_eq!(seconds("/debug/pprof/profile?debug=0&seconds=300"), Ok(300));
        for bad in ["0", "301", "-1", "1.5", "", "x"] {
            let why = seconds(&format!("{PATH}?seconds={bad}")).unwrap_err();
            assert!(why.contains("from 1 to 300"), "{bad}: {why}");
        }
    }
}
