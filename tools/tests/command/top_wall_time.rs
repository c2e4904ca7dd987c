//! `fntrace top` counts each call's time in the intervals it spans: a
//! `gcc -pg` C program preloaded with `libfntrace.so` (one thread), told
//! on its stdin to make one call of `long_call` lasting 2.5 s (asleep most
//! of it, waking every 5 ms to call `step`), while `fntrace top --frames
//! 16 --interval 500ms` prints a frame per interval. Every frame shows
//! `long_call` at no more than 100 % of the interval (wall time, one
//! thread), self time no more than that, and the frames' parts add up to
//! the call's duration as the program measured it, within 1 ms per frame
//! (the frames' rounding: 0.1 % of 0.5 s, 1 ms of the interval) plus
//! 0.5 %. Before, the whole 2.5 s counted in the frame the call returned
//! in: 500 %.
use crate::common;
use crate::profile_program;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::TempDir;
use profile_program::{build_pg, fntrace, spawn_controlled, wait_for_socket, CLI};

/// The traced program: `long MS` makes one call of `long_call` lasting MS
/// milliseconds and answers `done NS`, its duration as it measured it.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile long sink;

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

__attribute__((noinline)) void step(void) { sink++; }

__attribute__((noinline)) long long_call(long ms) {
    long start = now_ns(), until = start + ms * 1000000L;
    while (now_ns() < until) {
        struct timespec pause = {0, 5000000};
        nanosleep(&pause, NULL);
        step();
    }
    return now_ns() - start;
}

int main(void) {
    char line[64];
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        long ns = 0;
        if (strncmp(line, "long ", 5) == 0)
            ns = long_call(atol(line + 5));
        printf("done %ld\n", ns);
        fflush(stdout);
    }
    return 0;
}
"#;

/// `long_call`'s row in one frame: the interval (s), wall% and self-wall%.
#[derive(Debug)]
struct Frame {
    seconds: f64,
    row: Option<(f64, f64)>,
}

/// The frames of `top --frames` output.
fn frames(text: &str) -> Vec<Frame> {
    let mut frames: Vec<Frame> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("fntrace top ") {
            let (_, rest) = rest.split_once(": ").unwrap();
            let seconds = rest.split_once(" s, ").unwrap().0.parse().unwrap();
            frames.push(Frame { seconds, row: None });
        } else if line.ends_with(" long_call") {
            let cells: Vec<&str> = line.split_whitespace().collect();
            let percent = |cell: &str| cell.strip_suffix('%').unwrap().parse::<f64>().unwrap();
            frames.last_mut().unwrap().row = Some((percent(cells[1]), percent(cells[2])));
        }
    }
    frames
}

#[test]
fn a_long_call_counts_in_each_interval_for_its_part() {
    let dir = TempDir::new("top-wall");
    let source = dir.0.join("long.c");
    std::fs::write(&source, PROGRAM).unwrap();
    let exe = dir.0.join("long");
    build_pg(&source, &exe, &[]);
    let socket = dir.0.join("control.sock");
    let target = socket.to_str().unwrap();
    let mut program = spawn_controlled(&exe, &socket);
    let mut to_program = program.stdin.take().unwrap();
    let mut from_program = BufReader::new(program.stdout.take().unwrap());
    let mut line = String::new();
    from_program.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    wait_for_socket(&socket);
    fntrace(&["ctl", target, "enable", "profile"]);

    let mut top = Command::new(CLI)
        .args([
            "top",
            target,
            "--frames",
            "16",
            "--interval",
            "500ms",
            "-F",
            "long_call",
        ])
        .env("LC_ALL", "C")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut from_top = BufReader::new(top.stdout.take().unwrap());
    // The first frame's header and columns: top has its first interval;
    // the call starts in its second.
    let mut first = String::new();
    for _ in 0..2 {
        from_top.read_line(&mut first).unwrap();
    }
    assert!(first.starts_with("fntrace top "), "{first}");
    writeln!(to_program, "long 2500").unwrap();
    to_program.flush().unwrap();
    let mut done = String::new();
    from_program.read_line(&mut done).unwrap();
    let measured_ns: u64 = done
        .trim_end()
        .strip_prefix("done ")
        .unwrap()
        .parse()
        .unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut from_top, &mut rest).unwrap();
    let output = top.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "top: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let _ = program.kill();
    let _ = program.wait();

    let text = first + &rest;
    let frames = frames(&text);
    assert_eq!(frames.len(), 16, "{text}");
    assert!(
        frames[0].row.is_none(),
        "long_call before it was called:\n{text}"
    );
    // Frames where the call ran, each at most the one thread's whole
    // interval, self time within it.
    let mut seconds = 0.0;
    for frame in &frames {
        if let Some((wall, self_wall)) = frame.row {
            assert!(wall <= 100.0 && self_wall <= wall, "{frame:?}:\n{text}");
            seconds += wall / 100.0 * frame.seconds;
        }
    }
    assert!(
        frames.last().unwrap().row.is_none(),
        "the call did not return within top's 16 frames (a machine this slow?):\n{text}"
    );
    let called = frames.iter().filter(|f| f.row.is_some()).count();
    let tolerance = 0.001 * called as f64 + 0.005 * measured_ns as f64 / 1e9;
    let measured = measured_ns as f64 / 1e9;
    assert!(
        (seconds - measured).abs() <= tolerance,
        "the frames add up to {seconds:.4} s, the call took {measured:.4} s (± {tolerance:.4}):\n{text}"
    );
}
