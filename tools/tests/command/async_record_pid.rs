//! `fntrace record -p PID --async`: a running program that was not
//! started under `fntrace record --async` (the anchor, preloaded and
//! serving its control socket, not recording) gets the specs `--async`
//! would give it for the recording alone. The recording, started before
//! the anchor's runtime does (`ASYNC_ANCHOR_START_MS`) and stopped after
//! its last answer, links exactly the futures the anchor completed
//! (REQUESTS of `serve`, STEPS + 1 polls each; one per client slot), and
//! at its end the process records no values any more.

use crate::common;
use crate::profile_program;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TempDir;

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");
const SERVE: &str = "async_anchor::serve::{closure#0}";
const CLIENT: &str = "async_anchor::client::{closure#0}";

/// The futures and polls of `function`'s row in a report's async table.
fn future_row(report: &str, function: &str) -> Option<(u64, u64)> {
    let mut in_table = false;
    for line in report.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"futures") {
            in_table = true;
        } else if in_table && words.last() == Some(&function) {
            return Some((words[0].parse().ok()?, words[1].parse().ok()?));
        }
    }
    None
}

#[test]
fn record_p_async_links_the_futures_of_a_running_program() {
    const REQUESTS: u64 = 24;
    const SLOTS: u64 = 4;
    const STEPS: u64 = 3;
    const START_MS: u64 = 6000;
    let dir = TempDir::new("record-p-async");
    let mut child = Command::new(common::async_anchor())
        .args(["2", &REQUESTS.to_string(), &SLOTS.to_string()])
        .args([&STEPS.to_string(), "10"])
        .env("LD_PRELOAD", profile_program::library())
        .env("FNTRACE_CONTROL", "1")
        .env("ASYNC_ANCHOR_START_MS", START_MS.to_string())
        .env("ASYNC_ANCHOR_LINGER_MS", "30000")
        .stdout(Stdio::piped())
        .spawn()
        .expect("running the anchor");
    let start = Instant::now();
    let pid = child.id().to_string();
    let socket = fntrace_format::wire::control_socket_path_of(child.id()).unwrap();
    common::wait_for_socket(&socket);
    let ctl = |request: &str| {
        let out = Command::new(CLI)
            .args(["ctl", &pid])
            .args(request.split(' '))
            .output()
            .expect("running fntrace ctl");
        assert!(out.status.success(), "fntrace ctl {request}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let data = dir.0.join("data");
    // Long enough for the anchor's answers (a few hundred ms after its
    // start), short of its linger.
    let record = Command::new(CLI)
        .args(["record", "-p", &pid, "--async", "--duration", "14s", "-o"])
        .arg(&data)
        .stderr(Stdio::piped())
        .spawn()
        .expect("running fntrace record");
    // The recording runs before the first answer.
    let recording = loop {
        if !ctl("status").contains("recording: none") {
            break start.elapsed();
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no recording");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first_answer = loop {
        let line = lines.next().expect("the anchor's answers").unwrap();
        if line.starts_with("latency_ns ") {
            break start.elapsed();
        }
    };
    loop {
        let line = lines.next().expect("the anchor's answers").unwrap();
        if line == format!("requests {REQUESTS}") {
            break;
        }
    }
    let recorded = record.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&recorded.stderr).into_owned();
    // What the process records now: `retval --clear` says the arguments
    // it keeps.
    let after = ctl("retval --clear");
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
    assert!(
        after.contains("arguments: none; return values: none"),
        "{after}"
    );
    let report = Command::new(CLI)
        .args(["report", "--no-pager"])
        .arg(&data)
        .output()
        .expect("running fntrace report");
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    assert_eq!(
        future_row(&report, SERVE),
        Some((REQUESTS, REQUESTS * (STEPS + 1))),
        "{report}"
    );
    assert_eq!(
        future_row(&report, CLIENT),
        Some((SLOTS, SLOTS * (REQUESTS / SLOTS + 1))),
        "{report}"
    );
}
