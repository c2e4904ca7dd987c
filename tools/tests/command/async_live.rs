//! The runtime future linker's rows in `fntrace top` and `fntrace ctl
//! PID profile`, against the anchor (`examples/async-anchor`) recorded
//! with `fntrace record --async`: `top`'s frames, sampled from before the
//! anchor's runtime starts (`ASYNC_ANCHOR_START_MS`) to after its last
//! answer, count between them exactly the futures it completed (REQUESTS
//! of `serve` with STEPS + 1 polls each, one per client), and `ctl
//! profile` shows them all once it has answered.

use crate::common;
use crate::profile_program;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TempDir;

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");
const SERVE: &str = "async_anchor::serve::{closure#0}";
const CLIENT: &str = "async_anchor::client::{closure#0}";

/// Per async function named in `text`'s future tables (the rows below a
/// header starting with `header`), the futures and polls of its rows,
/// summed; `at` the columns of those two.
fn summed(text: &str, header: &str, at: (usize, usize), function: &str) -> (u64, u64) {
    let mut in_table = false;
    let mut sum = (0, 0);
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&header) {
            in_table = true;
            continue;
        }
        // Another table, frame or note ends it.
        let number = words.get(at.0).is_some_and(|w| w.parse::<u64>().is_ok());
        if !number || line.starts_with('#') {
            in_table = false;
            continue;
        }
        if in_table && words.last() == Some(&function) {
            sum.0 += words[at.0].parse::<u64>().unwrap();
            sum.1 += words[at.1].parse::<u64>().unwrap();
        }
    }
    sum
}

#[test]
fn top_and_ctl_profile_count_the_anchors_futures() {
    const REQUESTS: u64 = 24;
    const SLOTS: u64 = 4;
    const STEPS: u64 = 3;
    let dir = TempDir::new("async-live");
    let socket = dir.0.join("control.sock");
    let mut child = common::record_anchor_async(
        &profile_program::library(),
        &dir.0.join("data"),
        &[
            "2",
            &REQUESTS.to_string(),
            &SLOTS.to_string(),
            &STEPS.to_string(),
            "10",
        ],
    )
    .env("FNTRACE_CONTROL", &socket)
    // top's first sample comes before the first future, its last
    // after the last answer.
    .env("ASYNC_ANCHOR_START_MS", "4000")
    .env("ASYNC_ANCHOR_LINGER_MS", "16000")
    .stdout(Stdio::piped())
    .spawn()
    .expect("running fntrace record");
    common::wait_for_socket(&socket);
    let top = Command::new(CLI)
        .arg("top")
        .arg(&socket)
        .args(["--frames", "6", "--interval", "2s"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("running fntrace top");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("the anchor's answers").unwrap();
        if line == format!("requests {REQUESTS}") {
            break;
        }
    }
    // Every future completed before the line was printed.
    let ctl = Command::new(CLI)
        .arg("ctl")
        .arg(&socket)
        .arg("profile")
        .output()
        .expect("running fntrace ctl");
    let profile = String::from_utf8_lossy(&ctl.stdout).into_owned();
    assert!(ctl.status.success(), "fntrace ctl profile: {ctl:?}");
    let top = top.wait_with_output().unwrap();
    let frames = String::from_utf8_lossy(&top.stdout).into_owned();
    assert!(top.status.success(), "fntrace top: {top:?}");
    let status = child.wait().unwrap();
    assert!(status.success(), "fntrace record: {status:?}");

    let polls = REQUESTS * (STEPS + 1);
    assert_eq!(
        summed(&profile, "futures", (0, 1), SERVE),
        (REQUESTS, polls),
        "{profile}"
    );
    // A client: one poll per answer awaited, one for its spawn, one for
    // its last (Ready).
    let client_polls = SLOTS * (REQUESTS / SLOTS + 1);
    assert_eq!(
        summed(&profile, "futures", (0, 1), CLIENT),
        (SLOTS, client_polls),
        "{profile}"
    );
    assert!(
        profile.contains("# async: futures completed so far"),
        "{profile}"
    );
    // The frames' rows, each an interval's futures, add up to every one.
    assert_eq!(frames.matches("fntrace top ").count(), 6, "{frames}");
    assert_eq!(
        summed(&frames, "futures/s", (1, 2), SERVE),
        (REQUESTS, polls),
        "{frames}"
    );
    assert_eq!(
        summed(&frames, "futures/s", (1, 2), CLIENT),
        (SLOTS, client_polls),
        "{frames}"
    );
}

/// `GET /metrics` on `127.0.0.1:port`: the body.
fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// Futures dropped while pending (the anchor's client aborts every third
/// request, `ASYNC_ANCHOR_CANCEL=3`, once its handler waits in its first
/// sleep; the requests' futures are boxed, so their drop glue is a
/// function of its own that `--async` records): the linker frees their
/// slots at the drop, so that none is left once the anchor has answered,
/// and counts them dropped, exactly, in `ctl futures` and `/metrics`, as
/// the offline linker does from the recording.
#[test]
fn futures_dropped_while_pending_leave_the_table() {
    const REQUESTS: u64 = 24;
    const SLOTS: u64 = 4;
    const STEPS: u64 = 3;
    const CANCELLED: u64 = REQUESTS / 3;
    let dir = TempDir::new("async-drops");
    let data = dir.0.join("data");
    let socket = dir.0.join("control.sock");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = common::record_anchor_async(
        &profile_program::library(),
        &data,
        &[
            "2",
            &REQUESTS.to_string(),
            &SLOTS.to_string(),
            &STEPS.to_string(),
            "10",
        ],
    )
    .env("FNTRACE_CONTROL", &socket)
    .env("FNTRACE_METRICS", format!("127.0.0.1:{port}"))
    .env("ASYNC_ANCHOR_CANCEL", "3")
    .env("ASYNC_ANCHOR_LINGER_MS", "5000")
    .stdout(Stdio::piped())
    .spawn()
    .expect("running fntrace record");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let answered = REQUESTS - CANCELLED;
    let mut cancelled = None;
    loop {
        let line = lines.next().expect("the anchor's answers").unwrap();
        if let Some(n) = line.strip_prefix("cancelled ") {
            cancelled = Some(n.parse::<u64>().unwrap());
        }
        if line == format!("requests {answered}") {
            break;
        }
    }
    assert_eq!(cancelled, Some(CANCELLED));
    let rows = common::ctl_futures(&socket);
    let text = scrape(port);
    let status = child.wait().unwrap();
    assert!(status.success(), "fntrace record: {status:?}");
    // The recording, linked offline (said beside a live count that is
    // wrong: whether the drops were recorded at all).
    let report = common::fntrace_ok(&["report"], &data);
    let both = format!("{rows}\n--- offline:\n{report}");

    assert_eq!(
        summed(&rows, "futures", (0, 1), SERVE),
        (answered, answered * (STEPS + 1)),
        "{both}"
    );
    assert!(
        rows.contains(&format!("# {SERVE}: {CANCELLED} dropped before Ready")),
        "{both}"
    );
    assert!(rows.contains("; 0 pending now; 0 untracked"), "{both}");
    assert_eq!(rows.matches(" dropped before Ready").count(), 1, "{both}");
    let serve = format!("{{function=\"{SERVE}\"}}");
    for (sample, value) in [
        (format!("fntrace_futures_dropped_total{serve}"), CANCELLED),
        (
            format!("fntrace_future_latency_seconds_count{serve}"),
            answered,
        ),
        ("fntrace_futures_pending".to_string(), 0),
    ] {
        let found = text
            .lines()
            .find_map(|l| l.strip_prefix(&sample)?.strip_prefix(' '));
        assert_eq!(found, Some(value.to_string().as_str()), "{sample}:\n{text}");
    }

    // Offline: the same futures dropped, none left pending.
    assert!(
        report.contains(&format!("# {SERVE}: {CANCELLED} dropped before Ready")),
        "{report}"
    );
    assert!(!report.contains("still pending"), "{report}");
}

/// `fntrace top --async` on the anchor started with the library preloaded
/// and a control socket, not under `fntrace record --async`: top sets the
/// futures up while the anchor's runtime has not started
/// (`ASYNC_ANCHOR_START_MS`), and its frames and `ctl profile` count
/// exactly the futures the anchor completed; at the end the flight
/// recorder is stopped, the filter back to none and no future counted any
/// more.
#[test]
fn top_async_follows_the_futures_of_a_program_not_recorded_with_async() {
    const REQUESTS: u64 = 24;
    const SLOTS: u64 = 4;
    const STEPS: u64 = 3;
    let dir = TempDir::new("top-async");
    let socket = dir.0.join("control.sock");
    let mut child = Command::new(common::async_anchor())
        .args(["2", &REQUESTS.to_string(), &SLOTS.to_string()])
        .args([&STEPS.to_string(), "10"])
        .env("LD_PRELOAD", profile_program::library())
        .env("FNTRACE_CONTROL", &socket)
        .env("ASYNC_ANCHOR_START_MS", "8000")
        .env("ASYNC_ANCHOR_LINGER_MS", "20000")
        .stdout(Stdio::piped())
        .spawn()
        .expect("running the anchor");
    let start = Instant::now();
    common::wait_for_socket(&socket);
    let ctl = |request: &str| {
        let out = Command::new(CLI)
            .arg("ctl")
            .arg(&socket)
            .args(request.split(' '))
            .output()
            .expect("running fntrace ctl");
        assert!(out.status.success(), "fntrace ctl {request}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    ctl("enable profile");
    let top = Command::new(CLI)
        .arg("top")
        .arg(&socket)
        .args(["--pid", &child.id().to_string(), "--async"])
        .args(["--frames", "8", "--interval", "2s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running fntrace top");
    let first_answer = common::anchor_answered(child.stdout.take().unwrap(), REQUESTS, start);
    let profile = ctl("profile");
    let top = top.wait_with_output().unwrap();
    let frames = String::from_utf8_lossy(&top.stdout).into_owned();
    assert!(top.status.success(), "fntrace top: {top:?}");
    let status = ctl("status");
    let after = Command::new(CLI)
        .arg("ctl")
        .arg(&socket)
        .arg("futures")
        .output()
        .expect("running fntrace ctl");
    child.kill().unwrap();
    child.wait().unwrap();

    let polls = REQUESTS * (STEPS + 1);
    let client_polls = SLOTS * (REQUESTS / SLOTS + 1);
    assert!(first_answer > Duration::from_secs(8), "{first_answer:?}");
    assert_eq!(
        summed(&profile, "futures", (0, 1), SERVE),
        (REQUESTS, polls),
        "{profile}"
    );
    assert_eq!(
        summed(&profile, "futures", (0, 1), CLIENT),
        (SLOTS, client_polls),
        "{profile}"
    );
    assert_eq!(frames.matches("fntrace top ").count(), 8, "{frames}");
    assert_eq!(
        summed(&frames, "futures/s", (1, 2), SERVE),
        (REQUESTS, polls),
        "{frames}"
    );
    // Set back: no flight recorder, every function, no future followed.
    assert!(status.contains("recording: none"), "{status}");
    assert!(
        status.contains("filter: none") || status.contains("filter: *"),
        "{status}"
    );
    let said = String::from_utf8_lossy(&after.stderr);
    assert!(
        !after.status.success() && said.contains("no async function's polls are recorded"),
        "{after:?}"
    );
}
