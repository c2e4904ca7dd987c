//! Driving the `fntrace` command at a process it attaches to: each run
//! bounded in time (a hang fails the test instead of stalling the suite),
//! and the threads fntrace leaves in the target.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::native::cli_with_library;

/// Runs `fntrace ARGS`, killed after `timeout` (then the test fails).
pub fn fntrace(args: &[&str], timeout: Duration) -> Output {
    let mut child = Command::new(cli_with_library())
        .args(args)
        .env_remove("FNTRACE_LIB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "fntrace {args:?} did not end within {timeout:?} (a hang); stderr: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `fntrace ARGS`, which must succeed: its standard output.
pub fn fntrace_ok(args: &[&str]) -> String {
    let output = fntrace(args, Duration::from_secs(60));
    assert!(
        output.status.success(),
        "fntrace {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The names of process `pid`'s threads that are fntrace's.
pub fn fntrace_threads(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|entry| {
            let tid = entry.ok()?.file_name();
            let comm =
                std::fs::read_to_string(format!("/proc/{pid}/task/{}/comm", tid.to_string_lossy()))
                    .ok()?;
            comm.starts_with("fntrace").then(|| comm.trim().to_string())
        })
        .collect()
}
