//! `fntrace top --async`: the futures of a running program that was not
//! started under `fntrace record --async`. What that recording sets at
//! the start is set here through the control socket instead, for as long
//! as top runs: the argument specs of the program's async functions
//! (found in its executable's DWARF, as `record --async` finds them), a
//! filter naming them, and the flight recorder (the graph tracer, its
//! memory bounded) on them; the runtime future linker then follows every
//! future those polls make, and top's frames show its rows. At the end
//! the flight recorder stops, the specs are cleared and the filter set
//! back.

use std::path::PathBuf;
use std::time::Duration;

use super::super::{async_drops, ctl};

/// The flight recorder's memory while top runs: its events are never read
/// (no trigger), only the linker's counts are.
const FLIGHT_BUDGET: &str = "16M";

/// What [`set_up`] changed in the program, for [`SetUp::tear_down`].
pub(super) struct SetUp {
    target: String,
    timeout: Duration,
    /// The filter before (`None`: every function).
    filter_before: Option<String>,
    /// Where the flight recorder would write snapshots (none are asked).
    snapshots: PathBuf,
}

/// How long a set-up or tear-down step is waited for at least: a step
/// given up leaves the program half set (a request read after its client
/// has gone is not run), and under load a step that patches sites (the
/// flight recorder's start and stop) took over 5 s beside four busy
/// threads and a CPU hog (`tests/programs/async_poll_stress.rs`).
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// Asks `target` for `line`; its reply, or its error.
fn ask(target: &str, timeout: Duration, line: &str) -> Result<String, String> {
    match ctl::exchange_line(target, timeout.max(STEP_TIMEOUT), line) {
        Ok((true, reply)) => Ok(reply),
        Ok((false, why)) | Err(why) => Err(format!("{}: {why}", line.trim_end())),
    }
}

/// The filter a `status` reply says is set, `None` for every function.
fn filter_of(status: &str) -> Option<String> {
    let line = status.lines().find_map(|l| l.strip_prefix("filter: "))?;
    let globs = line.split(" (").next()?.trim();
    (!globs.is_empty() && !line.starts_with("none")).then(|| globs.to_string())
}

/// Sets the program `pid` (asked through `target`) up to link its async
/// functions' polls into futures; what to undo at the end.
pub(super) fn set_up(target: &str, timeout: Duration, pid: u32) -> Result<SetUp, String> {
    let (arguments, retvals) = async_drops::specs_of_process(pid, false)?;
    // The functions the specs name, for the filter: a name with a comma
    // cannot be one glob of the list (its polls are then not traced).
    let names: Vec<&str> = (arguments.iter())
        .filter_map(|spec| spec.split_once('@').map(|(name, _)| name))
        .filter(|name| !name.contains(','))
        .collect();
    let status = ask(target, timeout, "status\n")?;
    let snapshots =
        std::env::temp_dir().join(format!("fntrace-top-async-{}-{pid}", std::process::id()));
    let set_up = SetUp {
        target: target.to_string(),
        timeout,
        filter_before: filter_of(&status),
        snapshots,
    };
    let steps = [
        format!("args {}\n", arguments.join(";")),
        format!("retval {}\n", retvals.join(";")),
        format!("filter {}\n", names.join(",")),
        format!(
            "flight start --budget {FLIGHT_BUDGET} {}\n",
            set_up.snapshots.display()
        ),
    ];
    for step in &steps {
        if let Err(why) = ask(target, timeout, step) {
            set_up.tear_down();
            return Err(format!("--async: {why}"));
        }
    }
    Ok(set_up)
}

impl SetUp {
    /// Stops the flight recorder, clears the specs and sets the filter
    /// back; what fails is said on stderr (the program keeps running).
    pub(super) fn tear_down(&self) {
        let filter = match &self.filter_before {
            Some(globs) => format!("filter {globs}\n"),
            None => "filter *\n".to_string(),
        };
        let stop = ask(&self.target, self.timeout, "flight stop\n");
        // Not running (a failed start): nothing to stop.
        let stop = stop.map_err(|why| (!why.contains("no flight recorder")).then_some(why));
        for result in [
            stop,
            ask(&self.target, self.timeout, "args --clear\n").map_err(Some),
            ask(&self.target, self.timeout, "retval --clear\n").map_err(Some),
            ask(&self.target, self.timeout, &filter).map_err(Some),
        ] {
            if let Err(Some(why)) = result {
                eprintln!("fntrace: top --async: setting the program back: {why}");
            }
        }
        let _ = std::fs::remove_dir(&self.snapshots);
    }
}

#[cfg(test)]
mod tests {
    use super::filter_of;

    #[test]
    fn the_filter_before_is_read_from_status() {
        let status = "pid 7\ntracers: profile (enabled)\nfilter: kv::*,!kv::log (for tracers \
                      enabled from now on, and recordings)\nrecording: none\n";
        assert_eq!(filter_of(status).as_deref(), Some("kv::*,!kv::log"));
        let none = "pid 7\nfilter: none (every function)\n";
        assert_eq!(filter_of(none), None);
    }
}
