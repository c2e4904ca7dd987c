//! `fntrace ctl PID args SPECS` and `ctl PID retval SPECS` on a running
//! program (`tests/c/ctl_prog.c`, gcc `-pg`, linked with `libfntrace.a`,
//! run with `FNTRACE_CONTROL`): the values set live are recorded by the
//! next recording, as the real `uftrace replay` shows them; `args` again
//! replaces the arguments and keeps the return values; both are refused
//! while a recording runs.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::ctl_prog::Program;
use common::native::{build_c_program, cli, repo};

/// `fntrace ctl SOCKET ARGS` in `cwd`: exit status, stdout, stderr.
fn ctl(cwd: &Path, socket: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(cli())
        .current_dir(cwd)
        .arg("ctl")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().expect("fntrace ctl was killed"),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// The lines of `uftrace replay -f none` of `dir` naming `function`,
/// trimmed and sorted (threads interleave).
fn replayed(dir: &Path, function: &str) -> Vec<String> {
    // Thread by thread: replay merges threads in time order, and a call
    // of one thread between another's entry and exit would keep that call
    // from being shown on one line.
    let mut tids: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".dat").map(str::to_string)
        })
        .collect();
    tids.sort();
    let mut lines = Vec::new();
    for tid in tids {
        let output = Command::new("uftrace")
            .args(["replay", "--no-pager", "-f", "none", "--tid", &tid, "-d"])
            .arg(dir)
            .output()
            .expect("cannot run uftrace; CI installs it (.ci/run)");
        assert!(output.status.success(), "{output:?}");
        lines.extend(
            String::from_utf8(output.stdout)
                .unwrap()
                .lines()
                .filter(|l| l.contains(function))
                .map(|l| l.trim().to_string()),
        );
    }
    lines.sort();
    lines
}

#[test]
fn values_set_live_are_recorded_by_the_next_recording() {
    let base = common::temp_dir("ctl-args");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("ctl_prog");
    build_c_program(&repo().join("tests/c/ctl_prog.c"), &["-pg"], &program);
    let socket = base.join("ctl.sock");
    let mut p = Program::start(&program, &[("FNTRACE_CONTROL", socket.as_os_str())], &base);
    let ok = |args: &[&str]| {
        let (code, stdout, stderr) = ctl(&base, &socket, args);
        assert_eq!((code, stderr.as_str()), (0, ""), "{args:?}: {stdout}");
        stdout
    };

    assert_eq!(
        ok(&["args", "handle_get@arg1/i"]),
        "args handle_get@arg1/i: recorded from now on (arguments: handle_get@arg1/i; \
         return values: none)\n"
    );
    assert_eq!(
        ok(&["retval", "handle_get@retval/i"]),
        "retval handle_get@retval/i: recorded from now on (arguments: handle_get@arg1/i; \
         return values: handle_get@retval/i)\n"
    );
    // A spec that does not parse changes nothing.
    let (code, _, stderr) = ctl(&base, &socket, &["args", "handle_get@arg1/o"]);
    assert_eq!(
        (code, stderr.as_str()),
        (
            1,
            "fntrace: args handle_get@arg1/o: bad argument spec: `handle_get@arg1/o`: \
             `arg1/o`: unknown format `/o` (supported: d i u x s c f p e t S C)\n"
        )
    );
    ok(&["filter", "handle_get"]);
    ok(&["record", "one.data"]);
    let (code, _, stderr) = ctl(&base, &socket, &["retval", "handle_get@retval/x"]);
    assert_eq!(
        (code, stderr.as_str()),
        (
            1,
            "fntrace: retval handle_get@retval/x: a recorder runs (a recording or the flight \
             recorder): stop it first\n"
        )
    );
    p.work(10);
    ok(&["stop"]);
    // Thread t's iteration i: handle_get(t * 100000 + i) = 3 * that + 1.
    let mut expected: Vec<String> = (0..4u64)
        .flat_map(|t| (0..10).map(move |i| t * 100_000 + i))
        .map(|k| format!("handle_get({k}) = {};", 3 * k + 1))
        .collect();
    expected.sort();
    assert_eq!(replayed(&base.join("one.data"), "handle_get"), expected);

    // The arguments replaced, the return values kept.
    assert_eq!(
        ok(&["args", "parse_key@arg1/i"]),
        "args parse_key@arg1/i: recorded from now on (arguments: parse_key@arg1/i; \
         return values: handle_get@retval/i)\n"
    );
    ok(&["filter", "parse_key"]);
    ok(&["record", "two.data"]);
    p.work(1);
    ok(&["stop"]);
    // Each thread: handle_get(t * 100000) parses its key, handle_put(0)
    // keys 0 and 1.
    let mut expected: Vec<String> = (0..4u64)
        .flat_map(|t| [t * 100_000, 0, 1])
        .map(|k| format!("parse_key({k});"))
        .collect();
    expected.sort();
    assert_eq!(replayed(&base.join("two.data"), "parse_key"), expected);
    p.finish();
    let _ = std::fs::remove_dir_all(&base);
}
