//! A flight trigger on an async function applies to the whole future:
//! `FNTRACE_FLIGHT_TRIGGER='async_anchor::serve>200ms' fntrace record
//! --async --flight 64M` on the anchor (`examples/async-anchor`, each
//! request a tokio task that sleeps STEPS times with CPU work after each
//! sleep, polled STEPS + 1 times), with one request made slow
//! (`ASYNC_ANCHOR_SLOW=ID:MS`: longer sleeps, the same polls, each short),
//! writes exactly one snapshot, for that request's future: its
//! `trigger.txt` names the future (address, latency, busy, polls), and
//! the snapshot, linked offline, holds that future whole, first poll to
//! Ready, on whichever worker threads it ran; with `@trigger-thread`,
//! on those threads only.

use crate::common;
use crate::profile_program;

use std::path::PathBuf;
use std::process::Command;

use common::TempDir;
use fntrace_tools::analysis::{self, FutureEnd};
use fntrace_tools::export::UftraceReader;
use fntrace_tools::EventSource;

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

const SERVE: &str = "async_anchor::serve::{closure#0}";

/// `51234.000100200` (uftrace's timestamps) in ns.
fn timestamp_ns(text: &str) -> u64 {
    let (s, frac) = text.split_once('.').expect("seconds.nanoseconds");
    s.parse::<u64>().unwrap() * 1_000_000_000 + frac.parse::<u64>().unwrap()
}

/// The fields of the trigger file's `slow future` line: (address,
/// latency ns, busy ns, polls, first poll ns, covered).
fn slow_future_line(text: &str) -> (u64, f64, f64, u64, u64, bool) {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("  slow future {SERVE} at ")))
        .unwrap_or_else(|| panic!("no slow future line in:\n{text}"));
    let field = |name: &str| -> &str {
        let from = line
            .find(name)
            .unwrap_or_else(|| panic!("{name} in {line}"))
            + name.len();
        let rest = &line[from..];
        &rest[..rest.find([',', ';']).unwrap_or(rest.len())]
    };
    let address = u64::from_str_radix(line.split(':').next().unwrap().trim_start_matches("0x"), 16)
        .expect("the future's address");
    let polls = line
        .split(", ")
        .find_map(|p| p.strip_suffix(" polls"))
        .expect("polls")
        .parse()
        .unwrap();
    (
        address,
        common::shown_ns(field("latency ")),
        common::shown_ns(field("busy ")),
        polls,
        timestamp_ns(field("first poll ")),
        line.ends_with("; all its polls are in the window"),
    )
}

const STEPS: u64 = 3;

/// Runs the anchor under `fntrace record --async --flight 64M` with
/// `trigger`: 24 requests, 4 at a time, on 2 workers, 3 sleeps of 10 ms
/// each (about 30 ms a request, far below 200 ms even beside a CPU hog),
/// request 13's of 150 ms (450 ms). Returns the one snapshot's directory
/// (in `dir`) and fntrace record's stderr.
fn run(dir: &TempDir, trigger: &str) -> (PathBuf, String) {
    let out = dir.0.join("snaps");
    let output = Command::new(CLI)
        .arg("record")
        .arg("--lib")
        .arg(profile_program::library())
        .args(["--async", "--flight", "64M", "-o"])
        .arg(&out)
        .arg("--")
        .arg(common::async_anchor())
        .args(["2", "24", "4", &STEPS.to_string(), "10"])
        .env("FNTRACE_FLIGHT_TRIGGER", trigger)
        .env("ASYNC_ANCHOR_SLOW", "13:150")
        .output()
        .expect("running fntrace record");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "fntrace record failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("requests 24"), "{stdout}");
    assert!(
        !stderr.contains("matches no function"),
        "the trigger names an async fn:\n{stderr}"
    );
    let snapshots: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    let [snapshot] = &snapshots[..] else {
        panic!("one snapshot, not {snapshots:?}:\n{stderr}");
    };
    let name = snapshot.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.ends_with("-async_anchor__serve___closure_0_"),
        "named by the function: {name}"
    );
    (snapshot.clone(), stderr)
}

#[test]
fn a_slow_future_fires_one_snapshot_holding_its_polls() {
    let dir = TempDir::new("async-flight");
    let (snapshot, stderr) = run(&dir, "async_anchor::serve>200ms");
    let snapshot = &snapshot;
    let text = std::fs::read_to_string(snapshot.join("trigger.txt")).unwrap();
    let (address, latency, busy, polls, first_ns, covered) = slow_future_line(&text);
    assert_eq!(polls, STEPS + 1, "{text}");
    // Three sleeps of 150 ms: over the 200 ms threshold.
    assert!(latency >= 3.0 * 150e6, "{text}");
    assert!(busy > 0.0 && busy < latency / 10.0, "{text}");
    assert!(covered, "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("  ")).count(),
        1,
        "one trigger:\n{text}"
    );
    // The snapshot, linked offline: that future whole, Ready, the same
    // first poll and latency; no other serve future took 200 ms.
    let reader = UftraceReader::open(snapshot).expect("reading the snapshot");
    let linked = analysis::futures_of(&reader, reader.arg_specs())
        .unwrap()
        .expect("the snapshot has the polls' values");
    let serve: Vec<_> = linked
        .futures
        .iter()
        .filter(|f| reader.name_of(f.function) == SERVE)
        .collect();
    let slow: Vec<_> = serve.iter().filter(|f| f.address == address).collect();
    let Some(future) = slow.iter().find(|f| f.start_ns == first_ns) else {
        panic!("no future at {address:#x} first polled at {first_ns} in {slow:?}");
    };
    assert_eq!(future.end, FutureEnd::Ready);
    assert_eq!(future.polls, STEPS + 1, "its polls in the snapshot");
    let offline = (future.end_ns - future.start_ns) as f64;
    assert!(
        (offline - latency).abs() <= latency * 0.005,
        "latency {offline} ns offline, {latency} ns in trigger.txt"
    );
    let long = serve
        .iter()
        .filter(|f| f.end == FutureEnd::Ready && f.end_ns - f.start_ns >= 200_000_000)
        .count();
    assert_eq!(long, 1, "one serve future over 200 ms: {serve:?}");
    assert!(
        stderr.contains("1 trigger snapshot(s)"),
        "the run's summary:\n{stderr}"
    );
}

/// With `@trigger-thread`, the snapshot holds the threads the future's
/// polls ran on, and only those.
#[test]
fn a_slow_future_at_its_threads_only() {
    let dir = TempDir::new("async-flight-threads");
    let (snapshot, _) = run(&dir, "async_anchor::serve>200ms@trigger-thread");
    let text = std::fs::read_to_string(snapshot.join("trigger.txt")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("  slow future {SERVE} at ")))
        .unwrap_or_else(|| panic!("no slow future line in:\n{text}"));
    let listed = line
        .split_once(", threads ")
        .and_then(|(_, rest)| rest.split_once(", first poll "))
        .expect("the threads")
        .0;
    let mut named: Vec<u32> = listed.split(", ").map(|t| t.parse().unwrap()).collect();
    named.sort_unstable();
    let reader = UftraceReader::open(&snapshot).expect("reading the snapshot");
    let mut kept: Vec<u32> = reader.threads().iter().map(|t| t.tid).collect();
    kept.sort_unstable();
    assert_eq!(kept, named, "{text}");
    let only: Vec<String> = named.iter().map(u32::to_string).collect();
    assert!(
        text.contains(&format!("threads: only {},", only.join(", "))),
        "{text}"
    );
    let linked = analysis::futures_of(&reader, reader.arg_specs())
        .unwrap()
        .expect("the snapshot has the polls' values");
    // The slow serve future, whole (the clients' futures last the run).
    let slow: Vec<_> = linked
        .futures
        .iter()
        .filter(|f| reader.name_of(f.function) == SERVE)
        .filter(|f| f.end == FutureEnd::Ready && f.end_ns - f.start_ns >= 200_000_000)
        .collect();
    let [future] = &slow[..] else {
        panic!("one slow serve future, not {slow:?}:\n{text}");
    };
    assert_eq!(future.polls, STEPS + 1, "{text}");
}
