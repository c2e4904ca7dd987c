//! `fntrace record -p PID --async`: a running program that was not
//! started under `fntrace record --async` (the anchor, preloaded and
//! serving its control socket, not recording) gets the specs `--async`
//! would give it for the recording alone. The recording, started before
//! the anchor's runtime does (`ASYNC_ANCHOR_START_MS`) and stopped after
//! its last answer, links exactly the futures the anchor completed
//! (REQUESTS of `serve`, STEPS + 1 polls each; one per client slot), and
//! at its end the process records no values any more. The same with the
//! anchor started without fntrace, which record attaches to first.

use crate::common;
use crate::profile_program;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TempDir;

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");
const SERVE: &str = "async_anchor::serve::{closure#0}";
const CLIENT: &str = "async_anchor::client::{closure#0}";
const REQUESTS: u64 = 24;
const SLOTS: u64 = 4;
const STEPS: u64 = 3;
/// The anchor's runtime starts this late: the recording is on by then.
const START_MS: u64 = 10000;

/// What one `record -p PID --async` of the anchor gave: the recording's
/// report, what record said, and (preloaded only) the reply of `ctl PID
/// retval --clear` afterwards, which says the arguments kept.
struct Recorded {
    report: String,
    said: String,
    after: Option<String>,
}

/// Runs the anchor (`preloaded`: with fntrace and its control socket,
/// else bare, for record to attach to while its only thread sleeps) and
/// `fntrace record -p PID --async` from before its runtime starts to
/// after its last answer.
fn record_anchor(name: &str, preloaded: bool) -> Recorded {
    let dir = TempDir::new(name);
    let mut anchor = Command::new(common::async_anchor());
    anchor
        .args(["2", &REQUESTS.to_string(), &SLOTS.to_string()])
        .args([&STEPS.to_string(), "10"])
        .env("ASYNC_ANCHOR_START_MS", START_MS.to_string())
        .env("ASYNC_ANCHOR_LINGER_MS", "30000")
        .env_remove("LD_PRELOAD")
        .env_remove("FNTRACE_CONTROL")
        .stdout(Stdio::piped());
    if preloaded {
        anchor
            .env("LD_PRELOAD", profile_program::library())
            .env("FNTRACE_CONTROL", "1");
    }
    let mut child = anchor.spawn().expect("running the anchor");
    let start = Instant::now();
    let pid = child.id().to_string();
    let socket = fntrace_format::wire::control_socket_path_of(child.id()).unwrap();
    if preloaded {
        common::wait_for_socket(&socket);
    }
    let ctl = |request: &str| {
        Command::new(CLI)
            .args(["ctl", &pid])
            .args(request.split(' '))
            .output()
            .expect("running fntrace ctl")
    };
    let data = dir.0.join("data");
    // Long enough for the anchor's answers (a few hundred ms after its
    // start), short of its linger.
    let record = Command::new(CLI)
        .args(["record", "-p", &pid, "--async", "--duration", "18s", "-o"])
        .arg(&data)
        .env("FNTRACE_LIB", profile_program::library())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running fntrace record");
    // The recording runs before the first answer.
    let recording = loop {
        let status = ctl("status");
        if status.status.success()
            && !String::from_utf8_lossy(&status.stdout).contains("recording: none")
        {
            break start.elapsed();
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no recording");
        std::thread::sleep(Duration::from_millis(50));
    };
    let first_answer = common::anchor_answered(child.stdout.take().unwrap(), REQUESTS, start);
    let recorded = record.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&recorded.stderr).into_owned();
    let after = preloaded.then(|| {
        let out = ctl("retval --clear");
        assert!(out.status.success(), "fntrace ctl retval --clear: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_file(&socket);

    assert!(recorded.status.success(), "fntrace record -p: {said}");
    assert!(
        recording < first_answer && first_answer > Duration::from_millis(START_MS),
        "recording from {recording:?}, first answer at {first_answer:?}"
    );
    assert!(
        said.contains("--async: the polls of 2 async function(s)"),
        "{said}"
    );
    let report = Command::new(CLI)
        .args(["report", "--no-pager"])
        .arg(&data)
        .output()
        .expect("running fntrace report");
    Recorded {
        report: String::from_utf8_lossy(&report.stdout).into_owned(),
        said,
        after,
    }
}

/// Every future the anchor completed, exactly.
fn assert_every_future(report: &str) {
    assert_eq!(
        common::future_row(report, SERVE),
        Some((REQUESTS, REQUESTS * (STEPS + 1))),
        "{report}"
    );
    assert_eq!(
        common::future_row(report, CLIENT),
        Some((SLOTS, SLOTS * (REQUESTS / SLOTS + 1))),
        "{report}"
    );
}

#[test]
fn record_p_async_links_the_futures_of_a_running_program() {
    let recorded = record_anchor("record-p-async", true);
    assert_every_future(&recorded.report);
    // The specs were the recording's alone.
    let after = recorded.after.unwrap_or_default();
    assert!(
        after.contains("arguments: none; return values: none"),
        "{after}"
    );
}

/// The same anchor started without fntrace: record attaches to it while
/// its one thread sleeps in `clock_nanosleep` (a `struct sigaction` that
/// Rust's runtime left on that stack once kept every attach out).
#[test]
fn record_p_async_attaches_to_a_sleeping_program() {
    let recorded = record_anchor("record-p-async-attach", false);
    assert!(
        recorded
            .said
            .contains("serves no control socket: attached to it"),
        "{}",
        recorded.said
    );
    assert_every_future(&recorded.report);
}

/// A program with no async function is refused before it is touched:
/// nothing attached, nothing recorded.
#[test]
fn record_p_async_refuses_a_program_without_futures_untouched() {
    let dir = TempDir::new("record-p-async-none");
    let mut sleeper = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("running sleep");
    let out = Command::new(CLI)
        .args(["record", "-p", &sleeper.id().to_string(), "--async"])
        .args(["--duration", "1s", "-o"])
        .arg(dir.0.join("data"))
        .output()
        .expect("running fntrace record");
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", sleeper.id())).unwrap();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("has no async fn or block"), "{said}");
    assert!(!maps.contains("libfntrace"), "{maps}");
    assert!(!dir.0.join("data").exists());
}
