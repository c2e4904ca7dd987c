//! `fntrace perfetto` on a directory written by the real `uftrace record`:
//! the file decodes with Perfetto's published schema
//! (`tests/perfetto/trace.proto`), holds one slice per call with the right
//! names, nesting and durations, and is a fraction of the JSON's size.

use crate::common;
use crate::perfetto_trace;

use std::collections::HashMap;
use std::process::Command;

use common::TempDir;
use perfetto_trace::{field, uint};
use prost_reflect::Value;

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

/// `outer` calls `inner` N times, twice; `inner` calls `leaf` 4 times.
const PROGRAM: &str = r#"
#include <stdlib.h>
int leaf(int x) { return x * 2; }
int inner(int x) { int s = 0; for (int i = 0; i < 4; i++) s += leaf(x + i); return s; }
int outer(int n) { int s = 0; for (int i = 0; i < n; i++) s += inner(i); return s; }
int main(int argc, char **argv) {
    int s = 0;
    for (int i = 0; i < 2; i++) s += outer(atoi(argv[1]));
    return s & 1;
}
"#;

#[test]
fn perfetto_protobuf_decodes_with_the_schema_and_holds_every_call() {
    let work = TempDir::new("work");
    let source = work.0.join("p.c");
    let exe = work.0.join("p");
    std::fs::write(&source, PROGRAM).unwrap();
    assert!(Command::new("gcc")
        .args(["-pg", "-O0", "-fno-inline", "-o"])
        .arg(&exe)
        .arg(&source)
        .status()
        .expect("cannot run gcc; CI installs it (.ci/run)")
        .success());
    const N: u64 = 20_000;
    let dir = work.0.join("trace");
    let status = Command::new("uftrace")
        .args(["record", "--no-pager", "--no-sched", "-d"])
        .arg(&dir)
        .arg(&exe)
        .arg(N.to_string())
        .status()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(status.code().is_some());

    let proto_path = work.0.join("t.perfetto-trace");
    let json_path = work.0.join("t.json");
    for (command, path) in [("perfetto", &proto_path), ("chrome", &json_path)] {
        let output = Command::new(CLI)
            .arg(command)
            .arg(&dir)
            .arg("-o")
            .arg(path)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let bytes = std::fs::read(&proto_path).unwrap();
    let json_size = std::fs::metadata(&json_path).unwrap().len();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();

    let packets = perfetto_trace::packets(&bytes);

    // Per sequence: names by iid, the incremental clock, open slices.
    let mut names: HashMap<(u64, u64), String> = HashMap::new();
    let mut clocks: HashMap<u64, u64> = HashMap::new();
    let mut open: HashMap<u64, Vec<(String, u64)>> = HashMap::new();
    let mut durations: HashMap<String, Vec<u64>> = HashMap::new();
    let mut threads = Vec::new();
    for packet in &packets {
        let sequence = uint(packet, "trusted_packet_sequence_id");
        if packet.has_field_by_name("clock_snapshot") {
            let Value::Message(snapshot) = field(packet, "clock_snapshot") else {
                unreachable!()
            };
            let Value::List(clock_list) = field(&snapshot, "clocks") else {
                unreachable!()
            };
            // The sequence's incremental clock (64), tied to the trace
            // clock (BOOTTIME, 6) at the same time.
            let mut ids = HashMap::new();
            for clock in clock_list {
                let Value::Message(clock) = clock else {
                    unreachable!()
                };
                ids.insert(uint(&clock, "clock_id"), uint(&clock, "timestamp"));
                if uint(&clock, "clock_id") == 64 {
                    assert_eq!(field(&clock, "is_incremental"), Value::Bool(true));
                    clocks.insert(sequence, uint(&clock, "timestamp"));
                }
            }
            assert_eq!(ids.len(), 2);
            assert_eq!(ids.get(&64), ids.get(&6));
            let Value::Message(defaults) = field(packet, "trace_packet_defaults") else {
                unreachable!()
            };
            assert_eq!(uint(&defaults, "timestamp_clock_id"), 64);
        }
        if packet.has_field_by_name("track_descriptor") {
            let Value::Message(track) = field(packet, "track_descriptor") else {
                unreachable!()
            };
            if track.has_field_by_name("thread") {
                let Value::Message(thread) = field(&track, "thread") else {
                    unreachable!()
                };
                threads.push(uint(&thread, "tid"));
            }
        }
        if packet.has_field_by_name("interned_data") {
            let Value::Message(data) = field(packet, "interned_data") else {
                unreachable!()
            };
            let Value::List(event_names) = field(&data, "event_names") else {
                unreachable!()
            };
            for name in event_names {
                let Value::Message(name) = name else {
                    unreachable!()
                };
                let Value::String(text) = field(&name, "name") else {
                    unreachable!()
                };
                names.insert((sequence, uint(&name, "iid")), text);
            }
        }
        if packet.has_field_by_name("track_event") {
            let now = clocks.get_mut(&sequence).expect("a clock before events");
            *now += uint(packet, "timestamp");
            let Value::Message(event) = field(packet, "track_event") else {
                unreachable!()
            };
            let stack = open.entry(sequence).or_default();
            match uint(&event, "type") {
                1 => {
                    let name = names[&(sequence, uint(&event, "name_iid"))].clone();
                    stack.push((name, *now));
                }
                2 => {
                    let (name, start) = stack.pop().expect("an end matches a begin");
                    durations.entry(name).or_default().push(*now - start);
                }
                other => panic!("event type {other}"),
            }
        }
    }
    assert!(open.values().all(Vec::is_empty), "unbalanced slices");
    assert_eq!(threads.len(), 1);
    let count = |name: &str| durations.get(name).map_or(0, Vec::len) as u64;
    assert_eq!(count("main"), 1);
    assert_eq!(count("outer"), 2);
    assert_eq!(count("inner"), 2 * N);
    assert_eq!(count("leaf"), 8 * N);

    // The same calls as the JSON, with the same total time per function.
    let complete: Vec<&serde_json::Value> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    let slices: usize = durations.values().map(Vec::len).sum();
    assert_eq!(slices, complete.len());
    let json_inner_us: f64 = complete
        .iter()
        .filter(|e| e["name"] == "inner")
        .map(|e| e["dur"].as_f64().unwrap())
        .sum();
    let proto_inner_ns: u64 = durations["inner"].iter().sum();
    assert!(
        (json_inner_us * 1e3 - proto_inner_ns as f64).abs() < 1.0 * (2 * N) as f64,
        "{json_inner_us} us vs {proto_inner_ns} ns"
    );

    // Size: a tenth of the JSON's, or less.
    let size = bytes.len() as u64;
    println!(
        "{} calls: perfetto {size} bytes ({:.1} per call), JSON {json_size} bytes ({:.1}×)",
        slices,
        size as f64 / slices as f64,
        json_size as f64 / size as f64
    );
    assert!(size * 10 <= json_size, "{size} vs JSON {json_size}");
}
