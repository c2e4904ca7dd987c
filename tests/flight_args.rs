//! Recorded arguments and return values in the flight recorder
//! (`tests/c/keys.c`, gcc `-pg`, run with `libfntrace.so` preloaded and
//! only `FNTRACE_*` variables, as a service would be): a slow-call
//! trigger's `trigger.txt` names the slow call's key and return value, and
//! its snapshot, read by the real `uftrace replay`, shows every call of the
//! window with its values, as a recording does.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::native::{self, build_libraries, profile_dir};

/// `libfntrace.so`, built.
fn library() -> PathBuf {
    build_libraries();
    profile_dir().join("libfntrace.so")
}

/// The `handle_get` lines of `uftrace replay -f none` of `dir`.
fn replayed_calls(dir: &Path) -> Vec<String> {
    let output = Command::new("uftrace")
        .args(["replay", "--no-pager", "-f", "none", "-d"])
        .arg(dir)
        .env("LC_ALL", "C")
        .output()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(output.status.success(), "{}", native::stderr_of(&output));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter(|line| line.contains("handle_get"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_slow_calls_snapshot_names_its_key_and_holds_every_calls_values() {
    let base = common::temp_dir("flight-args");
    let program = native::build_c(&base, "keys", "O1", &["-pg", "-O1"], &[]);
    let out = base.join("snaps");
    let mut command = Command::new(&program);
    command.arg("slow").current_dir(&base);
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") {
            command.env_remove(name);
        }
    }
    let output = command
        .env("LD_PRELOAD", library())
        .env("FNTRACE_FLIGHT", "16M")
        .env("FNTRACE_OUTPUT", &out)
        .env("FNTRACE_FLIGHT_TRIGGER", "handle_get>15ms")
        .env("FNTRACE_ARGS", "handle_get@arg1/s")
        .env("FNTRACE_RETVAL", "handle_get@retval")
        .env("FNTRACE_LIBCALL", "0")
        .output()
        .unwrap();
    let stderr = native::stderr_of(&output);
    assert!(output.status.success(), "{}: {stderr}", output.status);
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 1, "one snapshot: {dirs:?}\n{stderr}");
    let snap = &dirs[0];

    // The slow call, named with its key and return value; none other.
    let fired = std::fs::read_to_string(snap.join("trigger.txt")).unwrap();
    let calls: Vec<&str> = fired
        .lines()
        .filter(|l| l.starts_with("  slow call"))
        .collect();
    assert_eq!(calls.len(), 1, "{fired}");
    assert!(
        calls[0].starts_with(r#"  slow call handle_get("user:42") = 0: thread "#),
        "{fired}"
    );
    assert!(calls[0].contains(", duration "), "{fired}");

    // Every call of the window, with its values, as uftrace shows them.
    let mut expected = Vec::new();
    for k in 0..8 {
        for _ in 0..=k {
            expected.push(format!(r#"  handle_get("user:{k}") = {k};"#));
        }
    }
    expected.push(r#"  handle_get("user:42") = 0;"#.to_string());
    assert_eq!(replayed_calls(snap), expected);
    let _ = std::fs::remove_dir_all(&base);
}
