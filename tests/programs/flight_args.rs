//! Recorded arguments and return values in the flight recorder
//! (`tests/c/keys.c`, gcc `-pg`, run with `libfntrace.so` preloaded and
//! only `FNTRACE_*` variables, as a service would be): a slow-call
//! trigger's `trigger.txt` names the slow call's key and return value, and
//! its snapshot, read by the real `uftrace replay`, shows every call of the
//! window with its values, as a recording does (integer values alone too,
//! which the graph tracer's argument entries write). In a small window the
//! values count in the budget and are evicted with their events.

use crate::common;

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

/// Runs `program ARG` in `base` with `libfntrace.so` preloaded, only the
/// `FNTRACE_*` variables `vars` and those recording `handle_get`'s key and
/// return value; it must succeed. Its stderr.
fn run(program: &Path, arg: &str, base: &Path, vars: &[(&str, &Path)]) -> String {
    run_with(program, arg, base, vars, "handle_get@arg1/s")
}

/// [`run`], with `handle_get`'s argument recorded as `arguments` says.
fn run_with(
    program: &Path,
    arg: &str,
    base: &Path,
    vars: &[(&str, &Path)],
    arguments: &str,
) -> String {
    let mut command = Command::new(program);
    command.arg(arg).current_dir(base);
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") {
            command.env_remove(name);
        }
    }
    let output = command
        .env("LD_PRELOAD", library())
        .envs(vars.iter().copied())
        .env("FNTRACE_ARGS", arguments)
        .env("FNTRACE_RETVAL", "handle_get@retval")
        .env("FNTRACE_LIBCALL", "0")
        .output()
        .unwrap();
    let stderr = native::stderr_of(&output);
    assert!(output.status.success(), "{}: {stderr}", output.status);
    stderr
}

#[test]
fn a_slow_calls_snapshot_names_its_key_and_holds_every_calls_values() {
    let base = common::temp_dir("flight-args");
    let program = native::build_c(&base, "keys", "O1", &["-pg", "-O1"], &[]);
    let out = base.join("snaps");
    let vars = [
        ("FNTRACE_FLIGHT", Path::new("16M")),
        ("FNTRACE_OUTPUT", &out),
        ("FNTRACE_FLIGHT_TRIGGER", Path::new("handle_get>15ms")),
    ];
    let stderr = run(&program, "slow", &base, &vars);
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

/// 64K of budget: a window of 3,072 slots of 16 bytes. Each call of
/// `handle_get` takes 4 (its entry and exit, 8 bytes of key and 8 of
/// return value): the window, written at exit, holds at most 768 of the
/// 20,036 calls, the newest, each with its values but perhaps the oldest
/// (its entry evicted with its key: uftrace shows `handle_get() = K;`).
#[test]
fn values_count_in_a_small_window_and_go_with_their_events() {
    let base = common::temp_dir("flight-args-small");
    let program = native::build_c(&base, "keys", "O1", &["-pg", "-O1"], &[]);
    let out = base.join("window");
    let vars = [
        ("FNTRACE_FLIGHT", Path::new("64K")),
        ("FNTRACE_OUTPUT", &out),
    ];
    run(&program, "many", &base, &vars);
    let mut calls = replayed_calls(&out);
    let first = calls.remove(0);
    assert!(
        first.starts_with("  handle_get(") && first.ends_with(";"),
        "{first}"
    );
    assert!((700..=767).contains(&calls.len()), "{} calls", calls.len());
    // The newest, in order, each with its key and return value: the last
    // call is n = 19,999, key 7.
    let n = calls.len();
    for (i, line) in calls.iter().enumerate() {
        let k = (7 + 8 * n - (n - 1 - i)) % 8;
        assert_eq!(
            line,
            &format!(r#"  handle_get("user:{k}") = {k};"#),
            "call {i} of {n}"
        );
    }
    let notes = std::fs::read_to_string(out.join("fntrace.txt")).unwrap();
    assert!(!notes.contains(" flight_evicted=0 "), "{notes}");
    let _ = std::fs::remove_dir_all(&base);
}

/// Integer values alone (the key's address in hex, the return value): the
/// argument entries and the fast exit write them, and the snapshot holds
/// every call of the window with them, the trigger names the slow one.
#[test]
fn integer_values_from_the_argument_entries_are_in_the_snapshot() {
    let base = common::temp_dir("flight-args-int");
    let program = native::build_c(&base, "keys", "O1", &["-pg", "-O1"], &[]);
    let out = base.join("snaps");
    let vars = [
        ("FNTRACE_FLIGHT", Path::new("16M")),
        ("FNTRACE_OUTPUT", &out),
        ("FNTRACE_FLIGHT_TRIGGER", Path::new("handle_get>15ms")),
    ];
    let stderr = run_with(&program, "slow", &base, &vars, "handle_get@arg1/x");
    let dirs: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "one snapshot: {dirs:?}\n{stderr}");
    let snap = &dirs[0];
    let fired = std::fs::read_to_string(snap.join("trigger.txt")).unwrap();
    let slow: Vec<&str> = fired
        .lines()
        .filter(|l| l.starts_with("  slow call"))
        .collect();
    assert_eq!(slow.len(), 1, "{fired}");
    assert!(slow[0].starts_with("  slow call handle_get(0x"), "{fired}");
    assert!(slow[0].contains(") = 0: thread "), "{fired}");

    // Each key is a string literal at its own address: 8 addresses, each
    // call of key k returning k; the slow call's key a ninth.
    let calls = replayed_calls(snap);
    assert_eq!(calls.len(), 36 + 1, "{calls:#?}");
    let mut address_of_key = std::collections::HashMap::new();
    let mut at = 0;
    for k in 0..8 {
        for _ in 0..=k {
            let line = &calls[at];
            at += 1;
            let (address, ret) = line
                .strip_prefix("  handle_get(0x")
                .and_then(|rest| rest.strip_suffix(";"))
                .and_then(|rest| rest.split_once(") = "))
                .unwrap_or_else(|| panic!("{line}"));
            assert_eq!(ret, k.to_string(), "{line}");
            let known = address_of_key
                .entry(k)
                .or_insert_with(|| address.to_string());
            assert_eq!(known, address, "{line}");
        }
    }
    assert!(calls[at].ends_with(") = 0;"), "{}", calls[at]);
    let _ = std::fs::remove_dir_all(&base);
}
