//! The runtime future linker under the graph tracer's minimum duration:
//! a poll shorter than the limit is not recorded (its entry is written
//! only at a long call's exit, and never with its values), yet its values
//! are read and linked all the same, so the futures are counted exactly.
//! The state machines are the Rust fixture's `Machine`s, laid out as
//! rustc's coroutines are read (state byte at offset 0).

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use fntrace::{Filter, GRAPH_TRACER};
use fntrace_fixtures::rust;

const POLL: &str = "fixture_rust_workload::machine_poll";

/// The reply to `request` on the control socket at `socket`.
fn ask(socket: &std::path::Path, request: &str) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

#[test]
fn polls_shorter_than_min_duration_are_linked_unrecorded() {
    const FUTURES: usize = 40;
    const POLLS: u8 = 4;
    fntrace::init().unwrap();
    let dir = common::temp_dir("futures-min-duration");
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("c.sock");
    let server = fntrace::serve_control(&socket).unwrap();
    // Every poll is far shorter than 10 s: none is recorded.
    let filter = Filter::new()
        .include(POLL)
        .args(&format!("{POLL}@arg1/x,arg1[0x0]/u8"))
        .retval(&format!("{POLL}@arg1[0x0]/u8"))
        .min_duration(Duration::from_secs(10));
    fntrace::enable_with("graph", &filter).unwrap();
    let made = rust::machines_run(FUTURES, POLLS, &[]);
    fntrace::disable("graph").unwrap();
    assert_eq!(made, FUTURES as u64 * u64::from(POLLS));
    let trace = GRAPH_TRACER.take_trace();
    let events: usize = trace.threads.iter().map(|t| t.events.len()).sum();
    assert_eq!(events, 0, "no poll lasted 10 s");

    let reply = ask(&socket, "futures\n");
    server.stop();
    let row = reply
        .lines()
        .find(|line| line.ends_with(&format!("  {POLL}")))
        .unwrap_or_else(|| panic!("no row of {POLL} in:\n{reply}"));
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        words[..2],
        [
            FUTURES.to_string(),
            (FUTURES * usize::from(POLLS)).to_string()
        ],
        "{reply}"
    );
    assert!(reply.contains("; 0 pending now; 0 untracked"), "{reply}");
    std::fs::remove_dir_all(&dir).unwrap();
}
