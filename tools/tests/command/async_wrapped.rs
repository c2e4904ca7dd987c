//! `fntrace record --async` (and `-a`) of a program started through a wrapper
//! (`timeout 60 ANCHOR ...`, `sh -c 'ANCHOR ...'`, a script that `exec`s
//! it): the wrapper's own
//! DWARF has no async function, so `--async` takes those of the program
//! its arguments name, says which, and the recording (the runtime follows
//! the wrapper's `exec`) links exactly the futures the anchor completed.

use crate::common;
use crate::profile_program;

use std::process::Command;

use common::TempDir;

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");
const SERVE: &str = "async_anchor::serve::{closure#0}";
const REQUESTS: u64 = 24;
const STEPS: u64 = 3;

/// `fntrace record --force --async -- WRAPPER...`: what record said, and
/// the report of its recording.
fn record_wrapped(name: &str, wrapper: &[&str]) -> (String, String) {
    let dir = TempDir::new(name);
    let data = dir.0.join("data");
    let out = Command::new(CLI)
        .arg("record")
        .arg("--lib")
        .arg(profile_program::library())
        .args(["--force", "--async", "-o"])
        .arg(&data)
        .arg("--")
        .args(wrapper)
        .output()
        .expect("running fntrace record");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    let report = Command::new(CLI)
        .args(["report", "--no-pager"])
        .arg(&data)
        .output()
        .expect("running fntrace report");
    (said, String::from_utf8_lossy(&report.stdout).into_owned())
}

#[test]
fn async_through_timeout_and_sh_links_the_programs_futures() {
    let anchor = common::async_anchor();
    let anchor = anchor.to_str().unwrap();
    let args = format!("2 {REQUESTS} 4 {STEPS} 10");
    let through_sh = format!("{anchor} {args}");
    let mut timeout = vec!["timeout", "120", anchor];
    timeout.extend(args.split(' '));
    // A script that runs it (its words name the program).
    let scripts = TempDir::new("wrapping-script");
    let script = scripts.0.join("serve.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\n# starts the anchor\nexec \"{anchor}\" \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = script.to_str().unwrap();
    let mut through_script = vec![script];
    through_script.extend(args.split(' '));
    for (name, wrapper, runs) in [
        ("async-timeout", timeout, "timeout"),
        ("async-sh", vec!["sh", "-c", &through_sh], "sh"),
        ("async-script", through_script, script),
    ] {
        let (said, report) = record_wrapped(name, &wrapper);
        assert!(
            said.contains(&format!(
                "--async: the async functions of {anchor} (which {runs} runs)"
            )),
            "{said}"
        );
        assert_eq!(
            common::future_row(&report, SERVE),
            Some((REQUESTS, REQUESTS * (STEPS + 1))),
            "{name}: {said}\n{report}"
        );
    }
}

/// `-a` through `timeout`: the specs of the program it runs, from that
/// program's DWARF (`work(seed: u64) -> u64`: one argument and its
/// value), not six raw registers from the wrapper's lack of DWARF.
#[test]
fn auto_args_through_timeout_describe_the_program() {
    let anchor = common::async_anchor();
    let anchor = anchor.to_str().unwrap();
    let dir = TempDir::new("auto-args-timeout");
    let data = dir.0.join("data");
    let out = Command::new(CLI)
        .arg("record")
        .arg("--lib")
        .arg(profile_program::library())
        .args(["--force", "-a", "-F", "async_anchor::work", "-o"])
        .arg(&data)
        .args(["--", "timeout", "120", anchor, "2", "8", "4", "3", "10"])
        .output()
        .expect("running fntrace record");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "-a: the functions of {anchor} (which timeout runs)"
        )),
        "{said}"
    );
    let replay = Command::new(CLI)
        .args(["replay", "--no-pager"])
        .arg(&data)
        .output()
        .expect("running fntrace replay");
    let replay = String::from_utf8_lossy(&replay.stdout).into_owned();
    let calls: Vec<&str> = (replay.lines())
        .filter_map(|line| line.split_once("async_anchor::work(").map(|(_, rest)| rest))
        .collect();
    assert!(!calls.is_empty(), "{replay}");
    // A number as `/d` shows it: decimal, hexadecimal beyond ±100000.
    let number = |text: &str| match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).is_ok(),
        None => text.parse::<i64>().is_ok(),
    };
    for call in calls {
        let (argument, rest) = call.split_once(") = ").expect(call);
        assert!(number(argument), "one argument: {call}");
        assert!(number(rest.trim_end_matches(';')), "its value: {call}");
    }
}
