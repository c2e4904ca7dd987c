//! The runtime future linker's live rows in `/metrics`, against the
//! anchor (`examples/async-anchor`) recorded with `fntrace record
//! --async`: once the anchor has answered every request (and lingers,
//! `ASYNC_ANCHOR_LINGER_MS`), its scrape counts exactly the futures it
//! completed (REQUESTS of `serve`, one per client), their latency
//! histogram puts the one slow request (`ASYNC_ANCHOR_SLOW`) alone above
//! 268 ms, and the latency summed is the offline linker's, to the
//! nanosecond, over the recording of the same run. With a table too
//! small for the futures pending at once (`FNTRACE_FUTURES_SLOTS`), the
//! futures it could not follow are counted: tracked plus untracked is
//! every future, exactly, and `fntrace record` says how many. `fntrace ctl
//! PID futures` shows the same rows, with p50 and p99 within 1/16 of the
//! offline linker's.

use crate::common;
use crate::profile_program;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::TempDir;
use fntrace_tools::analysis::{self, FutureEnd};
use fntrace_tools::export::UftraceReader;
use fntrace_tools::EventSource;

/// `GET /metrics` on `127.0.0.1:port`: the body.
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
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

/// The value of the sample `name` (labels included) in `text`.
fn sample(text: &str, name: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        .to_string()
}

/// Seconds as the exposition writes them (`0.060000228`) in ns.
fn ns(seconds: &str) -> u64 {
    let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, "0"));
    let fraction = format!("{fraction:0<9}");
    whole.parse::<u64>().unwrap() * 1_000_000_000 + fraction.parse::<u64>().unwrap()
}

#[test]
fn metrics_count_the_futures_the_anchor_completed() {
    const REQUESTS: u64 = 24;
    const SLOTS: u64 = 4;
    const STEPS: u64 = 3;
    let dir = TempDir::new("async-metrics");
    let data = dir.0.join("data");
    let socket = dir.0.join("control.sock");
    let port = TcpListener::bind("127.0.0.1:0")
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
    .env("FNTRACE_METRICS", format!("127.0.0.1:{port}"))
    .env("FNTRACE_CONTROL", &socket)
    .env("ASYNC_ANCHOR_SLOW", "5:150")
    .env("ASYNC_ANCHOR_LINGER_MS", "5000")
    .stdout(Stdio::piped())
    .spawn()
    .expect("running fntrace record");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let start = Instant::now();
    loop {
        let line = lines.next().expect("the anchor's answers").unwrap();
        if line == format!("requests {REQUESTS}") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "no answers");
    }
    // Every future completed before the line was printed.
    let text = scrape(port);
    let rows = common::ctl_futures(&socket);
    let status = child.wait().unwrap();
    assert!(status.success(), "fntrace record: {status:?}");

    let serve = "{function=\"async_anchor::serve::{closure#0}\"";
    let latency = "fntrace_future_latency_seconds";
    let count = |name: &str| sample(&text, &format!("{name}_count{serve}}}"));
    assert_eq!(count(latency), REQUESTS.to_string(), "{text}");
    assert_eq!(count("fntrace_future_busy_seconds"), REQUESTS.to_string());
    let bucket = |le: &str| sample(&text, &format!("{latency}_bucket{serve},le=\"{le}\"}}"));
    assert_eq!(bucket("+Inf"), REQUESTS.to_string());
    // The slow request sleeps 3 × 150 ms, the others 3 × 10 ms: none
    // below 2^24 ns (16.8 ms), one above 2^28 (268 ms).
    assert_eq!(bucket("0.268435456"), (REQUESTS - 1).to_string());
    assert_eq!(bucket("0.016777216"), "0");
    let clients = "{function=\"async_anchor::client::{closure#0}\"";
    assert_eq!(
        sample(&text, &format!("{latency}_count{clients}}}")),
        SLOTS.to_string()
    );
    assert_eq!(sample(&text, "fntrace_futures_untracked_total"), "0");

    // The same futures, linked offline from the recording.
    let reader = UftraceReader::open(&data).expect("reading the recording");
    let linked = analysis::futures_of(&reader, reader.arg_specs())
        .unwrap()
        .expect("recorded with --async");
    let ready: Vec<_> = linked
        .futures
        .iter()
        .filter(|f| {
            f.end == FutureEnd::Ready
                && reader.name_of(f.function) == "async_anchor::serve::{closure#0}"
        })
        .collect();
    assert_eq!(ready.len() as u64, REQUESTS);
    assert!(ready.iter().all(|f| f.polls == STEPS + 1));
    let offline: u64 = ready.iter().map(|f| f.end_ns - f.start_ns).sum();
    let live = ns(&sample(&text, &format!("{latency}_sum{serve}}}")));
    assert_eq!(
        live, offline,
        "latency summed: live {live} ns, offline {offline} ns"
    );
    // ctl futures: the same counts, and p50/p99 within 1/16 of the
    // offline linker's (and the 3 digits shown).
    let row = rows
        .lines()
        .find(|l| l.ends_with("  async_anchor::serve::{closure#0}"))
        .unwrap_or_else(|| panic!("no serve row in:\n{rows}"));
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        words[..2],
        [REQUESTS.to_string(), (REQUESTS * (STEPS + 1)).to_string()]
    );
    let shown = |i: usize| common::shown_ns(&format!("{} {}", words[i], words[i + 1]));
    let mut latencies: Vec<u64> = ready.iter().map(|f| f.end_ns - f.start_ns).collect();
    latencies.sort_unstable();
    for (q, at) in [(0.5, 4), (0.99, 6)] {
        let rank = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
        let offline = latencies[rank - 1] as f64;
        let live = shown(at);
        assert!(
            (live - offline).abs() <= offline / 16.0 + offline * 0.005,
            "p{}: live {live} ns, offline {offline} ns:\n{rows}",
            q * 100.0
        );
    }
    assert!(rows.contains("0 untracked"), "{rows}");
    let busy_offline: u64 = ready.iter().map(|f| f.busy_ns).sum();
    let busy_live = ns(&sample(
        &text,
        &format!("fntrace_future_busy_seconds_sum{serve}}}"),
    ));
    // Converted per poll offline, per future live: a few ns each apart.
    let polls = REQUESTS * (STEPS + 1);
    assert!(
        busy_live.abs_diff(busy_offline) <= polls * 2,
        "busy: live {busy_live} ns, offline {busy_offline} ns"
    );
}

/// Samples `name` of `text`, 0 if absent.
fn count_or_zero(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0, |v| v.parse().unwrap())
}

#[test]
fn futures_beyond_the_table_are_counted_untracked() {
    // 128 clients each with 2 requests in turn: 128 client futures and up
    // to 128 serve futures pending at once, in 64 slots.
    const REQUESTS: u64 = 256;
    const SLOTS: u64 = 128;
    let dir = TempDir::new("async-untracked");
    let data = dir.0.join("data");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = common::record_anchor_async(
        &profile_program::library(),
        &data,
        &["2", &REQUESTS.to_string(), &SLOTS.to_string(), "2", "10"],
    )
    .env("FNTRACE_METRICS", format!("127.0.0.1:{port}"))
    .env("FNTRACE_FUTURES_SLOTS", "64")
    .env("ASYNC_ANCHOR_LINGER_MS", "5000")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("running fntrace record");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("the anchor's answers").unwrap();
        if line == format!("requests {REQUESTS}") {
            break;
        }
    }
    let text = scrape(port);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "fntrace record:\n{stderr}");
    let completed = |function: &str| {
        count_or_zero(
            &text,
            &format!("fntrace_future_latency_seconds_count{{function=\"{function}\"}}"),
        )
    };
    // Every async function's futures: the anchor's `main` may have one of
    // its own too, depending on what the compiler inlined.
    let tracked: u64 = text
        .lines()
        .filter(|l| l.starts_with("fntrace_future_latency_seconds_count{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    let untracked = count_or_zero(&text, "fntrace_futures_untracked_total");
    assert!(untracked > 0, "64 slots for up to 256 futures:\n{text}");
    assert!(
        completed("async_anchor::serve::{closure#0}")
            + completed("async_anchor::client::{closure#0}")
            <= REQUESTS + SLOTS,
        "{text}"
    );
    assert!(
        stderr.contains(&format!("{untracked} futures UNTRACKED")),
        "{stderr}"
    );
    // The recording has every future's polls all the same: what the
    // offline linker finds is each request's and each client's future, and
    // the live table tracked or counted each future that reached Ready.
    let reader = UftraceReader::open(&data).expect("reading the recording");
    let linked = analysis::futures_of(&reader, reader.arg_specs())
        .unwrap()
        .expect("recorded with --async");
    let ready_of = |function: &str| {
        linked
            .futures
            .iter()
            .filter(|f| f.end == FutureEnd::Ready && reader.name_of(f.function) == function)
            .count() as u64
    };
    assert_eq!(ready_of("async_anchor::serve::{closure#0}"), REQUESTS);
    assert_eq!(ready_of("async_anchor::client::{closure#0}"), SLOTS);
    let ready = linked
        .futures
        .iter()
        .filter(|f| f.end == FutureEnd::Ready)
        .count() as u64;
    assert_eq!(tracked + untracked, ready, "{text}");
}
