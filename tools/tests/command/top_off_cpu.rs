//! `fntrace top` shows how much of a call's time its thread spent off the
//! CPU: a `gcc -pg` C program preloaded with `libfntrace.so` runs two
//! threads, one blocked in `blocked_call` (a `read` of a pipe nobody
//! writes yet), one spinning in `spin_call` (no system call), both open
//! through every interval of `fntrace top SOCK --pid PID --frames 2
//! --interval 1s`. In each frame the blocked call is at least 90 % off
//! the CPU, all of it blocked; the spinning thread is off the CPU only
//! while waiting for one (beside a CPU hog, a large share: its off-CPU
//! figure is then its run-queue wait, which the test checks instead of
//! a bound on it), blocked at most 10 % of the interval (a wait for a CPU
//! still going on at a read is not yet counted by the kernel, a slice
//! of a few ms). The frames say their times are wall-clock, blocked time
//! included; without `--pid`, a socket target's frame says off-CPU time
//! is not available, and why.
use crate::common;
use crate::profile_program;

use std::io::{BufRead, BufReader, Write};
use std::process::Command;

use common::TempDir;
use profile_program::{build_pg, fntrace, spawn_controlled, wait_for_socket, CLI};

/// The traced program: `go` starts the two threads and answers `running`
/// once both are in their calls; `stop` ends both calls, joins the
/// threads and answers `done`.
const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int pipe_fds[2];
static volatile int stop, entered;
static volatile long sink;

__attribute__((noinline)) void blocked_call(void) {
    char c;
    __sync_fetch_and_add(&entered, 1);
    if (read(pipe_fds[0], &c, 1) != 1)
        perror("read");
}

__attribute__((noinline)) void spin_call(void) {
    __sync_fetch_and_add(&entered, 1);
    while (!stop)
        sink++;
}

static void *blocker(void *arg) { (void)arg; blocked_call(); return NULL; }
static void *spinner(void *arg) { (void)arg; spin_call(); return NULL; }

int main(void) {
    char line[64];
    pthread_t a, b;
    if (pipe(pipe_fds) != 0)
        return 1;
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "go", 2) == 0) {
            pthread_create(&a, NULL, blocker, NULL);
            pthread_create(&b, NULL, spinner, NULL);
            while (entered < 2)
                usleep(1000);
            printf("running\n");
        } else if (strncmp(line, "stop", 4) == 0) {
            stop = 1;
            if (write(pipe_fds[1], "x", 1) != 1)
                return 1;
            pthread_join(a, NULL);
            pthread_join(b, NULL);
            printf("done\n");
        }
        fflush(stdout);
    }
    return 0;
}
"#;

/// One frame's figures: per call, its row's off-cpu% and its thread's
/// on-cpu%, runq% and blocked%.
#[derive(Debug, Default)]
struct Frame {
    header: String,
    off_cpu: Vec<(String, Option<f64>)>,
    threads: Vec<(String, [f64; 3])>,
}

fn percent(cell: &str) -> f64 {
    cell.strip_suffix('%')
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("not a percentage: {cell:?}"))
}

/// The frames of `top --frames` output.
fn frames(text: &str) -> Vec<Frame> {
    let mut frames: Vec<Frame> = Vec::new();
    let mut in_threads = false;
    for line in text.lines() {
        let cells: Vec<&str> = line.split_whitespace().collect();
        if line.starts_with("fntrace top ") {
            frames.push(Frame {
                header: line.to_string(),
                ..Frame::default()
            });
            in_threads = false;
        } else if cells.first() == Some(&"thread") {
            in_threads = true;
        } else if cells.first() == Some(&"calls/s") {
            assert_eq!(cells[3], "off-cpu%", "{text}");
        } else if in_threads {
            let call = cells[4].to_string();
            let figures = [percent(cells[1]), percent(cells[2]), percent(cells[3])];
            frames.last_mut().unwrap().threads.push((call, figures));
        } else {
            let name = cells.last().unwrap().to_string();
            frames
                .last_mut()
                .unwrap()
                .off_cpu
                .push((name, Some(cells[3]).filter(|c| *c != "-").map(percent)));
        }
    }
    frames
}

#[test]
fn a_blocked_call_is_off_the_cpu_and_a_spinning_one_is_not() {
    let dir = TempDir::new("top-off-cpu");
    let source = dir.0.join("two.c");
    std::fs::write(&source, PROGRAM).unwrap();
    let exe = dir.0.join("two");
    build_pg(&source, &exe, &["-pthread"]);
    let socket = dir.0.join("control.sock");
    let target = socket.to_str().unwrap();
    let mut program = spawn_controlled(&exe, &socket);
    let pid = program.id().to_string();
    let mut to_program = program.stdin.take().unwrap();
    let mut from_program = BufReader::new(program.stdout.take().unwrap());
    let mut line = String::new();
    from_program.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    wait_for_socket(&socket);
    fntrace(&["ctl", target, "enable", "profile"]);
    writeln!(to_program, "go").unwrap();
    to_program.flush().unwrap();
    line.clear();
    from_program.read_line(&mut line).unwrap();
    assert_eq!(line, "running\n");

    let top = |extra: &[&str]| {
        let output = Command::new(CLI)
            .args(["top", target, "-F", "*_call"])
            .args(extra)
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "top: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let text = top(&["--pid", &pid, "--frames", "2", "--interval", "1s"]);
    let without_pid = top(&["--once", "--interval", "100ms"]);

    writeln!(to_program, "stop").unwrap();
    to_program.flush().unwrap();
    line.clear();
    from_program.read_line(&mut line).unwrap();
    assert_eq!(line, "done\n");
    drop(to_program);
    assert!(program.wait().unwrap().success());

    // Shown with --nocapture: the figures of a run.
    println!("{text}{without_pid}");
    let frames = frames(&text);
    assert_eq!(frames.len(), 2, "{text}");
    for frame in &frames {
        assert!(
            frame
                .header
                .contains("; wall-clock time, blocked time included")
                && !frame.header.contains("off-CPU: not available"),
            "{text}"
        );
        let off_cpu = |call: &str| {
            frame
                .off_cpu
                .iter()
                .find(|(name, _)| name == call)
                .unwrap_or_else(|| panic!("no {call} row:\n{text}"))
                .1
                .unwrap_or_else(|| panic!("no off-cpu% for {call}:\n{text}"))
        };
        let thread = |call: &str| {
            let found: Vec<_> = frame.threads.iter().filter(|(c, _)| c == call).collect();
            assert_eq!(found.len(), 1, "one thread in {call}:\n{text}");
            found[0].1
        };
        let [_, _, blocked] = thread("blocked_call");
        assert!(off_cpu("blocked_call") >= 90.0 && blocked >= 90.0, "{text}");
        let [on, runq, blocked] = thread("spin_call");
        assert!(on > 0.0 && blocked <= 10.0, "{text}");
        // Its off-CPU share is its thread's time waiting or blocked (the
        // cells round to 0.1 %).
        assert!(
            (off_cpu("spin_call") - (runq + blocked)).abs() <= 0.2,
            "{text}"
        );
    }
    let frames = self::frames(&without_pid);
    assert!(
        frames.len() == 1
            && frames[0].header.contains(
                "; off-CPU: not available: the target is a socket path (--pid PID names its program)"
            )
            && frames[0].threads.is_empty()
            && frames[0].off_cpu.len() == 2
            && frames[0].off_cpu.iter().all(|(_, off)| off.is_none()),
        "{without_pid}"
    );
}
