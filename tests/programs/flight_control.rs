//! The flight recorder driven from outside the process, no code change:
//! `tests/c/ctl_prog.c` (a `gcc -pg` C program that never calls fntrace,
//! linked with `libfntrace.a`, run with `FNTRACE_CONTROL=1`) is given a
//! flight recorder, triggers and a budget by `fntrace ctl PID flight ...`
//! while it runs (paced by its standard input). The snapshots the triggers
//! write are counted, named and read back.

use crate::common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::ctl_prog::Program;
use common::native::{build_c_program, cli, repo};

/// `tests/c/ctl_prog.c`, run with `FNTRACE_CONTROL=1` in `cwd`.
fn start(program: &Path, cwd: &Path) -> Program {
    Program::start(program, &[("FNTRACE_CONTROL", OsStr::new("1"))], cwd)
}

/// `fntrace ctl PID ARGS`: exit code, stdout, stderr.
fn ctl(pid: u32, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(cli())
        .arg("ctl")
        .arg(pid.to_string())
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn ctl_ok(pid: u32, args: &[&str]) -> String {
    let (code, stdout, stderr) = ctl(pid, args);
    assert_eq!((code, stderr.as_str()), (0, ""), "{args:?}: {stdout}");
    stdout
}

fn snapshots(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs
}

#[test]
fn ctl_starts_the_flight_recorder_sets_triggers_and_stops_it() {
    let base = common::temp_dir("flight-ctl");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("ctl_prog");
    build_c_program(&repo().join("tests/c/ctl_prog.c"), &["-pg"], &program);
    let mut p = start(&program, &base);
    let pid = p.child.id();
    let snaps = base.join("snaps");
    let snaps_arg = snaps.to_str().unwrap();

    // No recorder yet: the error says how to start one.
    let (code, _, stderr) = ctl(pid, &["snapshot", "/tmp/never"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("flight start DIR") && stderr.contains("FNTRACE_FLIGHT=64M"),
        "{stderr}"
    );
    let (code, _, stderr) = ctl(pid, &["flight", "trigger", "handle_put", "1ms"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("no flight recorder is running"), "{stderr}");
    // A bad size: refused by the client in one line, nothing sent.
    let (code, _, stderr) = ctl(pid, &["flight", "start", snaps_arg, "--budget", "8Q"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("\"8Q\" is not a size"), "{stderr}");
    assert!(!snaps.exists());

    let started = ctl_ok(pid, &["flight", "start", snaps_arg, "--budget", "8M"]);
    assert!(
        started.starts_with("flight recorder started: the last 8M of events"),
        "{started}"
    );
    let (code, _, stderr) = ctl(pid, &["flight", "start", snaps_arg]);
    assert_eq!(code, 1);
    assert!(stderr.contains("runs already"), "{stderr}");
    ctl_ok(pid, &["filter", "handle_*"]);
    ctl_ok(pid, &["flight", "trigger", "handle_put", "0ns"]);
    ctl_ok(pid, &["flight", "trigger", "handle_get", "5s"]);
    ctl_ok(pid, &["flight", "trigger", "SIGUSR1"]);
    let (code, _, stderr) = ctl(pid, &["flight", "trigger", "handle_put"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("is not a trigger"), "{stderr}");
    assert_eq!(
        ctl_ok(pid, &["flight", "triggers"]),
        "3 trigger(s)\nhandle_put>0ns\nhandle_get>5s\nSIGUSR1\n"
    );
    assert_eq!(
        ctl_ok(pid, &["flight", "untrigger", "handle_get"]),
        "1 trigger(s) removed\n"
    );
    let (code, _, stderr) = ctl(pid, &["flight", "untrigger", "handle_get"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no trigger \"handle_get\""), "{stderr}");

    // Every handle_put fires; the default rate, 6 a minute, caps them.
    p.work(1000);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let status = ctl_ok(pid, &["status"]);
    assert_eq!(
        status.matches(&pid.to_string()).count(),
        1,
        "the pid once: {status}"
    );
    assert!(status.starts_with(&format!("pid {pid}\n")), "{status}");
    assert!(!status.contains("\npid: "), "{status}");
    assert!(
        status.contains("flight: snapshots to ")
            && status.contains("triggers: handle_put>0ns, SIGUSR1"),
        "{status}"
    );
    let stopped = ctl_ok(pid, &["flight", "stop"]);
    let field = |key: &str| -> u64 {
        stopped
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}: ")))
            .unwrap_or_else(|| panic!("{key} in {stopped}"))
            .parse()
            .unwrap()
    };
    let written = field("trigger snapshots");
    let skipped = field("skipped triggers");
    let dirs = snapshots(&snaps);
    assert_eq!(dirs.len() as u64, written, "{stopped}");
    assert!((1..=6).contains(&written), "{stopped}");
    let mut listed = 0;
    for dir in &dirs {
        assert!(dir
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .ends_with("-handle_put"));
        let fired = std::fs::read_to_string(dir.join("trigger.txt")).unwrap();
        listed += fired.matches("slow call handle_put: thread ").count() as u64;
    }
    // 4 threads × 250 handle_put: each fired, listed or skipped.
    assert_eq!(listed + skipped, 1000, "{stopped}");
    let (code, _, stderr) = ctl(pid, &["flight", "stop"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no flight recorder is running"), "{stderr}");
    assert_eq!(p.finish(), "");
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn ctl_sets_a_trigger_whose_snapshots_hold_only_the_slow_calls_threads() {
    let base = common::temp_dir("flight-ctl-threads");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("ctl_prog");
    build_c_program(&repo().join("tests/c/ctl_prog.c"), &["-pg"], &program);
    let mut p = start(&program, &base);
    let pid = p.child.id();
    let snaps = base.join("snaps");
    ctl_ok(pid, &["flight", "start", snaps.to_str().unwrap()]);
    ctl_ok(pid, &["filter", "handle_*"]);
    let args = [
        "flight",
        "trigger",
        "handle_put",
        "0ns",
        "--threads",
        "trigger",
    ];
    ctl_ok(pid, &args);
    // Only a slow-call trigger keeps some threads: refused by the client.
    let (code, _, stderr) = ctl(
        pid,
        &["flight", "trigger", "SIGUSR1", "--threads", "trigger"],
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("only a slow-call trigger (GLOB DURATION) keeps some threads"),
        "{stderr}"
    );
    assert_eq!(
        ctl_ok(pid, &["flight", "triggers"]),
        "1 trigger(s)\nhandle_put>0ns@trigger-thread\n"
    );
    p.work(1000);
    ctl_ok(pid, &["flight", "stop"]);
    let dirs = snapshots(&snaps);
    assert!(!dirs.is_empty());
    for dir in &dirs {
        let fired = std::fs::read_to_string(dir.join("trigger.txt")).unwrap();
        // The threads of the calls it lists, each once, sorted.
        let mut listed: Vec<u32> = fired
            .lines()
            .filter_map(|l| l.strip_prefix("  slow call handle_put: thread "))
            .map(|l| l.split(',').next().unwrap().parse().unwrap())
            .collect();
        listed.sort_unstable();
        listed.dedup();
        let names: Vec<String> = listed.iter().map(u32::to_string).collect();
        let said = format!(
            "\nthreads: only {}, the slow calls' (@trigger-thread); the others are left out\n",
            names.join(", ")
        );
        assert!(fired.contains(&said), "{fired}");
        let mut dat: Vec<u32> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".dat").map(|tid| tid.parse().unwrap())
            })
            .collect();
        dat.sort_unstable();
        assert_eq!(dat, listed, "{fired}");
    }
    assert_eq!(p.finish(), "");
    std::fs::remove_dir_all(&base).unwrap();
}
