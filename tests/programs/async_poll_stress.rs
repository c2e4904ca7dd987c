//! The poll path under toggles: `tests/rust/poll_threads.rs` (`rustc -O
//! -g -Zinstrument-mcount`, fntrace preloaded with a control socket)
//! polls futures on 4 threads while `fntrace top --async --once` runs 40
//! times against it, each run setting the async specs, a filter and the
//! flight recorder up (the polls then take the argument entries: their
//! states loaded, the future kept in the frame, linked at the exit) and
//! undoing them. Polls in flight at each change cross it. Every future's
//! result is checked by the program (a hook that corrupted a register or
//! the state would show); every frame counts exactly STEPS + 1 polls per
//! future it counts; the program ends cleanly.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::native::{build_rust, cli, profile_dir};

/// `top --async` runs (each sets the specs up and undoes them).
const CYCLES: usize = 40;
/// The program's polls per future (tests/rust/poll_threads.rs).
const POLLS: u64 = 10;
/// Its polling threads.
const THREADS: u64 = 4;
const STEPPER: &str = "poll_threads::stepper::{closure#0}";

/// The futures and polls of `STEPPER`'s row in a `top` frame.
fn futures_row(frame: &str) -> Option<(u64, u64)> {
    let mut in_table = false;
    for line in frame.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"futures/s") {
            in_table = true;
        } else if in_table && words.last() == Some(&STEPPER) {
            return Some((words[1].parse().ok()?, words[2].parse().ok()?));
        }
    }
    None
}

#[test]
fn polls_on_four_threads_cross_forty_set_ups_and_tear_downs() {
    let dir = common::temp_dir("async-poll-stress");
    let program = build_rust(&dir, "poll_threads", 2, &["-g", "--edition", "2021"]);
    let socket = dir.join("control.sock");
    let mut child = Command::new(&program)
        .arg(THREADS.to_string())
        .env("LD_PRELOAD", profile_dir().join("libfntrace.so"))
        .env("FNTRACE_CONTROL", &socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running poll_threads");
    let start = Instant::now();
    while !socket.exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "no socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let enabled = Command::new(cli())
        .arg("ctl")
        .arg(&socket)
        .args(["enable", "profile"])
        .output()
        .unwrap();
    assert!(enabled.status.success(), "{enabled:?}");
    let pid = child.id().to_string();
    let mut counted = 0;
    for cycle in 0..CYCLES {
        let top = Command::new(cli())
            .arg("top")
            .arg(&socket)
            .args(["--pid", &pid, "--async", "--once", "--interval", "200ms"])
            .output()
            .unwrap();
        let frame = String::from_utf8_lossy(&top.stdout);
        assert!(top.status.success(), "cycle {cycle}: {top:?}");
        assert!(
            !String::from_utf8_lossy(&top.stderr).contains("setting the program back"),
            "cycle {cycle}: {top:?}"
        );
        // A frame is the difference of two readings of the live counters,
        // each holding whole futures only (they once held the polls of
        // futures ending while they were read: beside a CPU hog a frame was
        // 9.6 % short).
        if let Some((futures, polls)) = futures_row(&frame) {
            assert_eq!(polls, futures * POLLS, "cycle {cycle}:\n{frame}");
            counted += futures;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "cycle {cycle}: the program ended"
        );
    }
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}");
    let futures: u64 = said
        .strip_prefix("ok ")
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    eprintln!("{CYCLES} set-ups: {counted} futures linked, {futures} made in all");
    assert!(counted > 0 && counted < futures, "{counted} of {futures}");
}
