//! `fntrace record` killed: SIGTERM, SIGINT and SIGHUP sent to it are
//! passed on to the program (`tests/c/waiter.c`, which waits for a
//! signal after 1,000 calls of `leaf`), whose handler drains and finishes
//! its part of the recording before the signal ends it: every call is in
//! the directory, nothing is said missing, and `fntrace record` exits as
//! the program did (128 + the signal). Killed with SIGKILL, `fntrace
//! record` takes the program with it (the kernel's parent-death signal):
//! it does not run on, unsupervised.

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::native::{self, build_c, Scratch};

/// `fntrace record --no-libcall -o DIR waiter`, in its own process
/// group (so that a failing test can kill what it started), and the
/// program's pid once it has made its calls.
fn start(dir: &Path, program: &Path) -> (Child, i32) {
    let mut child = Command::new(native::cli_with_library())
        .arg("record")
        .args(["--no-libcall", "-o", dir.to_str().unwrap()])
        .arg(program)
        .env_remove("FNTRACE_LIB")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid = line
        .strip_prefix("ready ")
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("the program said {line:?}"));
    (child, pid)
}

/// Waits (at most 2 minutes) for `child` to end; its exit code and stderr.
fn wait(mut child: Child, what: &str) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            // SAFETY: a plain kill(2) of the process group the child leads.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            panic!("{what}: fntrace record still running after 2 minutes");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    (output.status.code(), native::stderr_of(&output))
}

/// Whether process `pid` is gone (or a zombie no one reaped yet: in a
/// container, process 1 may not reap).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

#[test]
fn a_signal_to_fntrace_record_ends_the_program_and_the_recording_is_whole() {
    let scratch = Scratch::new("record-signals");
    let program = build_c(scratch.path(), "waiter", "o2", &["-O2", "-pg"], &[]);
    for (name, signal) in [
        ("term", libc::SIGTERM),
        ("int", libc::SIGINT),
        ("hup", libc::SIGHUP),
    ] {
        let dir = scratch.path().join(format!("{name}.data"));
        let (child, pid) = start(&dir, &program);
        // SAFETY: a plain kill(2) of the child this test started.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let (code, stderr) = wait(child, name);
        assert_eq!(code, Some(128 + signal), "{name}: {stderr}");
        assert!(gone(pid), "{name}: the program runs on");
        assert!(
            !stderr.contains("INCOMPLETE") && !stderr.contains("LOST"),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(", 0 lost, in "), "{name}: {stderr}");
        let calls = common::call_counts(&common::read_trace_dir(&dir));
        assert_eq!(
            (calls.get("leaf"), calls.get("work")),
            (Some(&(1000, 1000)), Some(&(1, 1))),
            "{name}: {stderr}"
        );
        // main was running: entered, never returned.
        assert_eq!(calls.get("main"), Some(&(1, 0)), "{name}");
    }
}

#[test]
fn sigkill_of_fntrace_record_kills_the_program() {
    let scratch = Scratch::new("record-sigkill");
    let program = build_c(scratch.path(), "waiter", "o2", &["-O2", "-pg"], &[]);
    let dir = scratch.path().join("kill.data");
    let (mut child, pid) = start(&dir, &program);
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !gone(pid) {
        if Instant::now() > deadline {
            // SAFETY: a plain kill(2) of the program this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the program ran on for 2 minutes after fntrace record was killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
