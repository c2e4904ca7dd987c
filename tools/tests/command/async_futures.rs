//! `fntrace record --async` and `fntrace report`'s async rows, checked
//! against an anchor: `examples/async-anchor`, built as a user would
//! (`fntrace cargo build --release`, with full debug info), serves requests
//! that are each their own tokio task (`serve`: STEPS sleeps with CPU work
//! after each), and its client times every request from spawn to answer.
//! fntrace's per-future latency p50/p99 must be within 10 % of the
//! client's, the futures completed and their polls exact (STEPS + 1 a
//! request: one Pending per sleep), busy below latency; and on the
//! multi-thread runtime some future's polls ran on two threads and it is
//! still one future. `fntrace chrome` shows each future as one async slice
//! from its first poll's entry to its Ready poll's exit, as many per
//! function as the report counts.

use crate::common;
use crate::perfetto_trace;
use crate::profile_program;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;

use common::TempDir;
use fntrace_tools::export::UftraceReader;
use fntrace_tools::{EventKind, EventSource};

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

/// What one recorded run gave: the client's latencies (ns) and the
/// report's text.
struct Run {
    client: Vec<u64>,
    report: String,
    /// serve's polls: (entry time, thread, future address, state at entry).
    polls: Vec<(u64, u32, String, u64)>,
    /// serve's futures from the trace's own polls: (first poll's entry,
    /// Ready poll's exit, threads polled on).
    serve_futures: Vec<(u64, u64, HashSet<u32>)>,
    /// `fntrace chrome`'s async slices.
    slices: Vec<Slice>,
    /// `fntrace perfetto`'s slices on the futures' tracks, with their
    /// args.
    perfetto: Vec<Slice>,
    /// `fntrace graph DIR SERVE`'s text.
    graph: String,
    /// `fntrace replay DIR`'s text.
    replay: String,
}

/// An async slice of the Chrome JSON (a `b` and an `e` of one id).
#[derive(Debug)]
struct Slice {
    name: String,
    begin_ns: u64,
    end_ns: u64,
    polls: u64,
    tids: HashSet<u32>,
}

/// Runs the anchor with `args` under `fntrace record --async`.
fn record(tag: &str, args: &[&str]) -> Run {
    let dir = TempDir::new(tag);
    let data = dir.0.join("data");
    let output = Command::new(CLI)
        .arg("record")
        .arg("--lib")
        .arg(profile_program::library())
        .arg("-o")
        .arg(&data)
        .arg("--async")
        .arg("--")
        .arg(common::async_anchor())
        .args(args)
        .output()
        .expect("running fntrace record");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "fntrace record --async failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let client: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("latency_ns "))
        .map(|v| v.parse().unwrap())
        .collect();
    let show = |command: &str, more: &[&str]| {
        let out = Command::new(CLI)
            .args([command, "--no-pager"])
            .arg(&data)
            .args(more)
            .output()
            .expect("running fntrace");
        assert!(out.status.success(), "fntrace {command}: {:?}", out);
        String::from_utf8(out.stdout).unwrap()
    };
    let json = dir.0.join("trace.json");
    let protobuf = dir.0.join("trace.perfetto-trace");
    for (command, path) in [("chrome", &json), ("perfetto", &protobuf)] {
        let out = Command::new(CLI)
            .arg(command)
            .arg(&data)
            .arg("-o")
            .arg(path)
            .output()
            .expect("running fntrace");
        assert!(out.status.success(), "fntrace {command}: {out:?}");
    }
    let (polls, serve_futures) = serve_polls(&data);
    Run {
        client,
        report: show("report", &[]),
        graph: show("graph", &[SERVE]),
        replay: show("replay", &[]),
        polls,
        serve_futures,
        slices: async_slices(&json),
        perfetto: perfetto_slices(&std::fs::read(&protobuf).unwrap()),
    }
}

/// The slices on the futures' tracks of a Perfetto protobuf trace (tracks
/// that are neither a thread's nor the process's), each track's begin and
/// end paired, with the begin's args (`polls`, `tids`).
fn perfetto_slices(bytes: &[u8]) -> Vec<Slice> {
    use perfetto_trace::{field, uint};
    use prost_reflect::Value;
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut begun: HashMap<u64, Slice> = HashMap::new();
    let mut slices = Vec::new();
    for packet in perfetto_trace::packets(bytes) {
        if let Value::Message(track) = field(&packet, "track_descriptor") {
            if !track.has_field_by_name("thread") && track.has_field_by_name("parent_uuid") {
                let Value::String(name) = field(&track, "name") else {
                    unreachable!()
                };
                names.insert(uint(&track, "uuid"), name);
            }
        }
        let Value::Message(event) = field(&packet, "track_event") else {
            continue;
        };
        if !event.has_field_by_name("track_uuid") {
            continue;
        }
        let track = uint(&event, "track_uuid");
        let name = names
            .get(&track)
            .expect("a future's track before its events");
        let time = uint(&packet, "timestamp");
        match uint(&event, "type") {
            1 => {
                assert_eq!(field(&event, "name"), Value::String(name.clone()));
                let Value::List(args) = field(&event, "debug_annotations") else {
                    unreachable!()
                };
                let mut slice = Slice {
                    name: name.clone(),
                    begin_ns: time,
                    end_ns: 0,
                    polls: 0,
                    tids: HashSet::new(),
                };
                let mut named = Vec::new();
                for arg in &args {
                    let Value::Message(arg) = arg else {
                        unreachable!()
                    };
                    let Value::String(arg_name) = field(arg, "name") else {
                        panic!("an arg without a name: {arg:?}")
                    };
                    match arg_name.as_str() {
                        "polls" => slice.polls = uint(arg, "uint_value"),
                        "tids" => {
                            let Value::String(tids) = field(arg, "string_value") else {
                                unreachable!()
                            };
                            slice.tids = tids.split(',').map(|t| t.parse().unwrap()).collect();
                        }
                        _ => {}
                    }
                    named.push(arg_name);
                }
                assert_eq!(named, ["polls", "busy_ns", "tids", "address"], "{event:?}");
                assert!(begun.insert(track, slice).is_none());
            }
            2 => {
                let mut slice = begun.remove(&track).expect("an end after its begin");
                slice.end_ns = time;
                slices.push(slice);
            }
            other => panic!("event type {other}"),
        }
    }
    assert!(begun.is_empty(), "slices without an end");
    slices
}

/// The async slices of the Chrome JSON at `path`, each id's begin and end
/// paired (every id once).
fn async_slices(path: &Path) -> Vec<Slice> {
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).expect("the Chrome JSON parses");
    // Timestamps are µs with three decimals: exact ns below 2^53 ns.
    let ns = |v: &serde_json::Value| (v.as_f64().unwrap() * 1000.0).round() as u64;
    let mut begun: HashMap<u64, Slice> = HashMap::new();
    let mut slices = Vec::new();
    for event in json["traceEvents"].as_array().unwrap() {
        let id = || event["id"].as_u64().expect("an id");
        match event["ph"].as_str() {
            Some("b") => {
                assert_eq!(event["cat"], "future");
                assert_eq!(event["args"].get("unfinished"), None, "{event}");
                let slice = Slice {
                    name: event["name"].as_str().unwrap().to_string(),
                    begin_ns: ns(&event["ts"]),
                    end_ns: 0,
                    polls: event["args"]["polls"].as_u64().unwrap(),
                    tids: event["args"]["tids"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t.as_u64().unwrap() as u32)
                        .collect(),
                };
                assert!(begun.insert(id(), slice).is_none(), "id {} twice", id());
            }
            Some("e") => {
                let mut slice = begun.remove(&id()).expect("an end after its begin");
                assert_eq!(event["name"].as_str(), Some(slice.name.as_str()));
                slice.end_ns = ns(&event["ts"]);
                slices.push(slice);
            }
            _ => {}
        }
    }
    assert!(begun.is_empty(), "slices without an end");
    slices
}

/// serve's polls in the recording at `data`, read with fntrace-tools'
/// reader: (entry time, thread, future address, state at entry); and its
/// futures, linked here from the polls' values as docs/async.md says:
/// (first poll's entry, Ready poll's exit, threads).
#[allow(clippy::type_complexity)]
fn serve_polls(data: &Path) -> (Vec<(u64, u32, String, u64)>, Vec<(u64, u64, HashSet<u32>)>) {
    let reader = UftraceReader::open(data).expect("reading the recording");
    let mut polls = Vec::new();
    // (entry, exit, thread, state after)
    let mut spans = Vec::new();
    for (index, thread) in reader.threads().iter().enumerate() {
        let values = reader.values_of(index).unwrap();
        let serve: Vec<(u64, EventKind)> = reader
            .read_thread(index, |events| {
                events
                    .filter(|e| reader.name_of(e.function) == "async_anchor::serve::{closure#0}")
                    .map(|e| (e.time_ns, e.kind))
                    .collect()
            })
            .unwrap()
            .0;
        // serve's polls do not nest: each entry's exit is the next exit.
        for pair in serve.windows(2) {
            if let [(entry, EventKind::Entry), (exit, EventKind::Exit)] = pair {
                let state: u64 = values[&(*exit, true)]
                    .strip_prefix(" = ")
                    .unwrap()
                    .parse()
                    .unwrap();
                spans.push((*entry, *exit, thread.tid, state));
            }
        }
        let entries = serve.iter().filter(|(_, k)| *k == EventKind::Entry);
        for &(time, _) in entries {
            let text = &values[&(time, false)];
            let (address, state) = text
                .strip_prefix('(')
                .and_then(|t| t.strip_suffix(')'))
                .and_then(|t| t.split_once(", "))
                .unwrap_or_else(|| panic!("serve's values: {text}"));
            polls.push((
                time,
                thread.tid,
                address.to_string(),
                state.parse().unwrap(),
            ));
        }
    }
    polls.sort();
    spans.sort();
    let mut live: HashMap<String, (u64, HashSet<u32>)> = HashMap::new();
    let mut futures = Vec::new();
    for (entry, exit, tid, state_out) in spans {
        let (_, _, address, state_in) = polls.iter().find(|p| p.0 == entry && p.1 == tid).unwrap();
        if *state_in == 0 {
            live.insert(address.clone(), (entry, HashSet::new()));
        }
        let future = live.get_mut(address).expect("a future first polled");
        future.1.insert(tid);
        if state_out == 1 {
            let (start, tids) = live.remove(address).unwrap();
            futures.push((start, exit, tids));
        }
    }
    futures.sort_by_key(|f| (f.0, f.1));
    (polls, futures)
}

/// `fntrace replay`'s future lines of serve: (latency shown, in ns as
/// shown, truncated; polls; the line).
fn replayed_futures(replay: &str) -> Vec<(u64, u64, String)> {
    let marker = format!("future {SERVE}(0x");
    replay
        .lines()
        .filter(|line| line.contains(&marker))
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let unit = match fields[2] {
                "us" => 1e3,
                "ms" => 1e6,
                "s" => 1e9,
                other => panic!("a unit {other} in {line}"),
            };
            let latency = (fields[1].parse::<f64>().unwrap() * unit).round() as u64;
            let polls = line
                .split_once("/* Ready: ")
                .and_then(|(_, rest)| rest.split_once(" polls"))
                .map(|(polls, _)| polls.parse().unwrap())
                .unwrap_or_else(|| panic!("no polls in {line}"));
            (latency, polls, line.to_string())
        })
        .collect()
}

/// The async row of `function`: futures, polls, total, p50, p99, busy,
/// waiting (durations in ns).
fn row(report: &str, function: &str) -> (u64, u64, [f64; 5]) {
    let after = report
        .split("# async: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no async rows in:\n{report}"));
    let line = after
        .lines()
        .find(|l| l.ends_with(&format!("  {function}")))
        .unwrap_or_else(|| panic!("no row of {function} in:\n{after}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let d = |i: usize| common::shown_ns(&format!("{} {}", words[i], words[i + 1]));
    (
        words[0].parse().unwrap(),
        words[1].parse().unwrap(),
        [d(2), d(4), d(6), d(8), d(10)],
    )
}

/// Nearest-rank percentile of `values`, as the report computes it.
fn rank(values: &[u64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let at = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at] as f64
}

fn within_10_percent(what: &str, fntrace: f64, client: f64) {
    let off = (fntrace - client).abs() / client;
    assert!(
        off <= 0.10,
        "{what}: fntrace {fntrace} ns, client {client} ns ({:.1} % apart)",
        off * 100.0
    );
}

/// serve's resume function.
const SERVE: &str = "async_anchor::serve::{closure#0}";

/// `fntrace graph`'s futures section of `graph`: the lines below its
/// header, each as (time in ns, calls, name), `(N)` lines only.
fn as_futures(graph: &str) -> Vec<(f64, u64, String)> {
    let section = graph
        .split_once("========== AS FUTURES (fntrace record --async) ==========\n")
        .unwrap_or_else(|| panic!("no futures section:\n{graph}"))
        .1;
    section
        .lines()
        .filter_map(|line| {
            let (time, node) = line.split_once(" : ")?;
            let (calls, name) = node
                .trim_start_matches([' ', '|', '+', '-'])
                .split_once(") ")?;
            let calls = calls.strip_prefix('(')?.parse().ok()?;
            let time = time.trim();
            let (value, unit) = time.split_once(' ')?;
            let scale = match unit.trim() {
                "us" => 1e3,
                "ms" => 1e6,
                "s" => 1e9,
                other => panic!("unit {other} in {line}"),
            };
            Some((value.parse::<f64>().ok()? * scale, calls, name.to_string()))
        })
        .collect()
}

/// Checks one run's `serve` and `client` rows: `requests` futures of
/// `steps + 1` polls each, `slots` clients of `requests / slots + 1`.
fn check(run: &Run, requests: u64, slots: u64, steps: u64) {
    assert_eq!(run.client.len() as u64, requests, "the client's answers");
    let (futures, polls, [total, p50, p99, busy, waiting]) =
        row(&run.report, "async_anchor::serve::{closure#0}");
    assert_eq!(
        futures, requests,
        "serve futures completed:\n{}",
        run.report
    );
    assert_eq!(
        polls,
        requests * (steps + 1),
        "serve polls:\n{}",
        run.report
    );
    within_10_percent("serve p50", p50, rank(&run.client, 0.5));
    within_10_percent("serve p99", p99, rank(&run.client, 0.99));
    assert!(busy > 0.0 && busy < total, "busy {busy} of {total}");
    // Rounded as shown (3 significant digits).
    assert!(
        (total - busy - waiting).abs() <= total * 0.01,
        "waiting {waiting}"
    );
    // A client awaits its requests one at a time: one poll to start, one
    // per answer.
    let (clients, client_polls, _) = row(&run.report, "async_anchor::client::{closure#0}");
    assert_eq!(clients, slots, "client futures:\n{}", run.report);
    assert_eq!(client_polls, slots * (requests / slots + 1));
    assert!(
        !run.report.contains("pending at the end") && !run.report.contains("dropped"),
        "{}",
        run.report
    );
    // The Chrome JSON: one async slice per future the report counts, each
    // from the first poll's entry to the Ready poll's exit.
    let of = |name: &str| -> Vec<&Slice> { run.slices.iter().filter(|s| s.name == name).collect() };
    let serve = of("async_anchor::serve::{closure#0}");
    assert_eq!(serve.len() as u64, futures, "serve's async slices");
    assert_eq!(
        of("async_anchor::client::{closure#0}").len() as u64,
        clients
    );
    let mut spans: Vec<(u64, u64, HashSet<u32>)> = serve
        .iter()
        .map(|s| (s.begin_ns, s.end_ns, s.tids.clone()))
        .collect();
    spans.sort_by_key(|s| (s.0, s.1));
    assert_eq!(spans, run.serve_futures, "serve's slices against its polls");
    // The Perfetto protobuf: the same slices, each on a track of its own,
    // with the same polls and threads.
    let key = |s: &Slice| {
        let mut tids: Vec<u32> = s.tids.iter().copied().collect();
        tids.sort_unstable();
        (s.name.clone(), s.begin_ns, s.end_ns, s.polls, tids)
    };
    let mut perfetto: Vec<_> = run.perfetto.iter().map(key).collect();
    let mut chrome: Vec<_> = run.slices.iter().map(key).collect();
    perfetto.sort_unstable();
    chrome.sort_unstable();
    assert_eq!(
        perfetto, chrome,
        "the Perfetto slices against the Chrome ones"
    );
    assert!(serve.iter().all(|s| s.polls == steps + 1));
    // `fntrace replay`: each future one line after the poll that was
    // Ready, its whole latency shown (truncated to three decimals).
    let replayed = replayed_futures(&run.replay);
    assert_eq!(replayed.len() as u64, futures, "serve's futures in replay");
    let mut shown: Vec<u64> = replayed.iter().map(|f| f.0).collect();
    let mut real: Vec<u64> = spans.iter().map(|s| s.1 - s.0).collect();
    shown.sort_unstable();
    real.sort_unstable();
    for (shown, real) in shown.iter().zip(&real) {
        assert!(
            *shown <= *real && real - shown < 1_000,
            "replay shows {shown} ns for a future of {real} ns"
        );
    }
    assert!(replayed.iter().all(|f| f.1 == steps + 1), "{replayed:?}");
    // `fntrace graph SERVE`: the futures, their polls nested below, and
    // below those what the polls called.
    let nodes = as_futures(&run.graph);
    let latency: u64 = spans.iter().map(|s| s.1 - s.0).sum();
    let (time, calls, name) = &nodes[0];
    assert_eq!(
        (*calls, name.as_str()),
        (futures, &*format!("future {SERVE}"))
    );
    // Shown truncated to three decimals.
    assert!(
        (latency as f64 - time).abs() <= latency as f64 * 0.001,
        "{latency} ns:\n{}",
        run.graph
    );
    assert_eq!(
        (nodes[1].1, nodes[1].2.as_str()),
        (requests * (steps + 1), SERVE)
    );
    assert!(
        nodes[2..]
            .iter()
            .any(|n| n.1 == requests * steps && n.2 == "async_anchor::work"),
        "serve's calls of work under its futures:\n{}",
        run.graph
    );
}

#[test]
fn futures_on_the_current_thread_runtime_match_the_client() {
    let run = record("async-current", &["0", "24", "4", "3", "10"]);
    check(&run, 24, 4, 3);
}

#[test]
fn a_future_polled_on_two_threads_is_one_future() {
    let run = record("async-multi", &["2", "40", "8", "4", "10"]);
    check(&run, 40, 8, 4);
    // Group the polls by future: a new one starts where the state at the
    // entry is Unresumed (0).
    assert_eq!(run.polls.len(), 40 * 5, "serve polls recorded");
    let mut threads_of: HashMap<&str, HashSet<u32>> = HashMap::new();
    let mut migrated = 0;
    for (_, tid, address, state) in &run.polls {
        if *state == 0 {
            if threads_of
                .get(address.as_str())
                .is_some_and(|t| t.len() > 1)
            {
                migrated += 1;
            }
            threads_of.insert(address, HashSet::new());
        }
        threads_of.get_mut(address.as_str()).unwrap().insert(*tid);
    }
    migrated += threads_of.values().filter(|t| t.len() > 1).count();
    assert!(
        migrated > 0,
        "no future's polls ran on two threads (40 futures on 2 workers)"
    );
    // Such a future is one slice in the Chrome JSON (the slices were
    // checked one for one against the futures of the polls above).
    let across = run
        .slices
        .iter()
        .filter(|s| s.name == "async_anchor::serve::{closure#0}" && s.tids.len() > 1);
    assert!(across.count() > 0, "no slice across two threads");
    // And one line in replay, which names its threads.
    let replayed = replayed_futures(&run.replay);
    assert!(
        replayed.iter().any(|f| f.2.contains(" on threads ")),
        "no future across two threads in replay"
    );
}
