//! A forked child continues in its parent's frames, as in uftrace's own
//! recordings, however the program is traced: `tests/c/forked_child.c`
//! forks inside `main`; the child runs `child_work` and returns from
//! `main` or leaves with `_exit`. Traced by `fntrace record`, or by the
//! program itself through the C API from before `main` (a recording, or
//! the graph tracer and a dump of each process; linked with
//! `libfntrace.a`, or with `libfntrace.so` preloaded to trace library
//! calls too), and by `uftrace record`:
//! - `uftrace replay` shows each task as it shows uftrace's own recording
//!   (tids aside): the child's trace does not begin with its parent's
//!   `main() {` again (a dump used to make one up, as for a call running
//!   when tracing started), and a child that returns ends with
//!   `} /* main */`;
//! - `uftrace report` has no `<0>` row for a child that leaves with
//!   `_exit` (uftrace took the parent's frames above the child's first
//!   record for a call of no function) and gives the calls of uftrace's
//!   own recording (made with its scheduler events, which spare it that
//!   row; their `linux:` rows left out).
//!
//! `cargo test` builds only the rlib of the root crate, so the test builds
//! `libfntrace.a`, `libfntrace.so` and the `fntrace` binary
//! (`common::native`) first.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::native::{self, repo};

const SOURCE: &str = "tests/c/forked_child.c";

/// The program without fntrace (for `fntrace record` and `uftrace record`)
/// and linked with `libfntrace.a` (tracing itself), built into `base`.
fn build(base: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(base).unwrap();
    let plain = base.join("forked_child");
    native::gcc(&[
        "-pg".as_ref(),
        "-O0".as_ref(),
        repo().join(SOURCE).as_os_str(),
        "-o".as_ref(),
        plain.as_os_str(),
    ]);
    let linked = base.join("forked_child_linked");
    native::build_c_program(&repo().join(SOURCE), &["-pg", "-DWITH_FNTRACE"], &linked);
    (plain, linked)
}

/// Runs the linked program tracing itself in `mode` (`record`, `dump`)
/// into `dir`, the child leaving by `how`.
fn trace_itself(linked: &Path, mode: &str, how: &str, dir: &Path) {
    let output = Command::new(linked)
        .arg(how)
        .env("FORKED_CHILD_MODE", mode)
        .env("FORKED_CHILD_DIR", dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{mode} {how}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `uftrace record --no-libcall` of the plain program, the child leaving
/// by `how`, into `dir`: without scheduler events (for replays), or with
/// them (`events`: for reports, as uftrace records by default).
fn uftrace_recording(plain: &Path, how: &str, dir: &Path, events: bool) {
    if !events {
        assert!(common::uftrace_record(dir, plain, &[how]));
        return;
    }
    uftrace_recording_with(plain, how, dir, &["--no-libcall"]);
}

/// `uftrace record ARGS` of the plain program (scheduler events
/// recorded), the child leaving by `how`, into `dir`.
fn uftrace_recording_with(plain: &Path, how: &str, dir: &Path, args: &[&str]) {
    let _ = std::fs::remove_dir_all(dir);
    let status = Command::new("uftrace")
        .arg("record")
        .args(args)
        .arg("-d")
        .arg(dir)
        .arg(plain)
        .arg(how)
        .status()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(status.success());
}

/// Calls per row of `uftrace report` of `dir` (`args` added), without the
/// rows of scheduler events. The calls and the name are a row's last two
/// fields (a row without self time, such as `<0>`'s, has fewer).
fn report_rows(dir: &Path, args: &[&str]) -> HashMap<String, u64> {
    let mut all = vec!["report", "--no-pager"];
    all.extend(args);
    let out = common::uftrace(&all, dir);
    out.lines()
        .skip(2)
        // Scheduler rows, some named in two words ("linux:schedule
        // (pre-empted)").
        .filter(|line| !line.contains(" linux:"))
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [.., calls, name] = fields[..] else {
                panic!("row {line:?} of\n{out}");
            };
            let calls = calls
                .parse()
                .unwrap_or_else(|_| panic!("row {line:?} of\n{out}"));
            (name.to_string(), calls)
        })
        .collect()
}

/// The rows of a run whose child leaves with `_exit`.
fn expected_rows() -> HashMap<String, u64> {
    [
        ("main", 1),
        ("parent_work", 1),
        ("child_work", 1),
        ("leaf", 5),
    ]
    .into_iter()
    .map(|(name, calls)| (name.to_string(), calls))
    .collect()
}

/// The two dumps in `dir` (one directory per process): the parent's (the
/// one with `parent_work`) and the child's.
fn dumps(dir: &Path) -> (PathBuf, PathBuf) {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    found.sort_by_key(|d| !common::uftrace_replay(d, None).contains("parent_work"));
    let child = found.pop().unwrap();
    (found.pop().unwrap(), child)
}

#[test]
fn a_child_continues_in_its_parents_frames_when_the_program_records_or_dumps() {
    let base = common::temp_dir("forked-frames");
    let (plain, linked) = build(&base);
    for how in ["return", "_exit"] {
        let theirs = base.join(format!("uftrace-{how}.data"));
        uftrace_recording(&plain, how, &theirs, false);
        // Parent, then child.
        let expected = common::uftrace_replays_by_thread(&theirs, "");
        assert_eq!(expected.len(), 2, "{expected:?}");
        assert!(expected[1].starts_with("child_work() {"), "{}", expected[1]);

        let recorded = base.join(format!("record-{how}.data"));
        trace_itself(&linked, "record", how, &recorded);
        assert_eq!(
            common::uftrace_replays_by_thread(&recorded, ""),
            expected,
            "recorded, the child leaving by {how}"
        );

        let dumped = base.join(format!("dumps-{how}"));
        std::fs::create_dir_all(&dumped).unwrap();
        trace_itself(&linked, "dump", how, &dumped);
        let (parent, child) = dumps(&dumped);
        assert_eq!(common::uftrace_replay(&parent, None), expected[0], "{how}");
        assert_eq!(
            common::uftrace_replay(&child, None),
            expected[1],
            "the child's dump, the child leaving by {how}"
        );
    }
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_child_that_leaves_with_exit_adds_no_phantom_row_to_uftrace_report() {
    let base = common::temp_dir("forked-exit-report");
    let (plain, linked) = build(&base);
    let theirs = base.join("uftrace.data");
    uftrace_recording(&plain, "_exit", &theirs, true);
    let expected = report_rows(&theirs, &[]);
    assert_eq!(expected, expected_rows(), "uftrace's own recording");

    let by_command = base.join("fntrace-record.data");
    let record = |dir: &Path, args: &[&str]| {
        let mut all = vec!["-o", dir.to_str().unwrap()];
        all.extend(args);
        all.extend(["--", plain.to_str().unwrap(), "_exit"]);
        let output = native::fntrace_record(&base, &all);
        assert!(output.status.success(), "{}", native::stderr_of(&output));
    };
    record(&by_command, &["--no-libcall"]);
    let by_api = base.join("api-record.data");
    trace_itself(&linked, "record", "_exit", &by_api);
    for ours in [&by_command, &by_api] {
        assert_eq!(report_rows(ours, &[]), expected, "{}", ours.display());
    }

    // Library calls recorded (both recorders' default): the child's first
    // record is the exit of `fork`, a call it inherited; still no <0> row.
    let theirs_libcalls = base.join("uftrace-libcalls.data");
    uftrace_recording_with(&plain, "_exit", &theirs_libcalls, &[]);
    let expected_libcalls = report_rows(&theirs_libcalls, &[]);
    assert_eq!(
        expected_libcalls.get("fork"),
        Some(&2),
        "{expected_libcalls:?}"
    );
    let ours_libcalls = base.join("fntrace-libcalls.data");
    record(&ours_libcalls, &[]);
    assert_eq!(report_rows(&ours_libcalls, &[]), expected_libcalls);

    // A dump per process: the child's is the child's thread of uftrace's.
    let dumped = base.join("dumps");
    std::fs::create_dir_all(&dumped).unwrap();
    trace_itself(&linked, "dump", "_exit", &dumped);
    let (_, child) = dumps(&dumped);
    let child_tid = common::uftrace_tids(&theirs)[1].to_string();
    assert_eq!(
        report_rows(&child, &[]),
        report_rows(&theirs, &["--tid", &child_tid])
    );
    std::fs::remove_dir_all(&base).unwrap();
}

/// With library calls traced (uftrace's default; fntrace's only through
/// the preloaded `libfntrace.so`, `FNTRACE_LIBCALL=1`), the child's first
/// record is the exit of `fork`, a call it inherited: a child that dumps
/// is written at the depths of the streaming recorder and of uftrace's own
/// recording, whether it returns from `main` or leaves with `_exit` (then
/// lowered so that its shallowest record, `fork`'s exit, is at depth 0,
/// as a recording's is).
#[test]
fn a_child_that_returned_from_fork_dumps_at_the_depths_uftrace_and_record_give() {
    let base = common::temp_dir("forked-libcalls-dump");
    let (plain, _) = build(&base);
    let preloaded = base.join("forked_child_preloaded");
    native::gcc(&[
        "-pg".as_ref(),
        "-O0".as_ref(),
        "-DWITH_FNTRACE".as_ref(),
        "-DFNTRACE_PRELOADED".as_ref(),
        repo().join(SOURCE).as_os_str(),
        "-o".as_ref(),
        preloaded.as_os_str(),
        "-ldl".as_ref(),
    ]);
    native::build_libraries();
    let library = native::profile_dir().join("libfntrace.so");
    for how in ["return", "_exit"] {
        // Replays without scheduler events, reports with them (as for the
        // other tests of this file).
        let theirs = base.join(format!("uftrace-{how}.data"));
        uftrace_recording_with(&plain, how, &theirs, &["--no-event", "--no-sched"]);
        let theirs_tid = common::uftrace_tids(&theirs)[1];
        let theirs_events = base.join(format!("uftrace-events-{how}.data"));
        uftrace_recording_with(&plain, how, &theirs_events, &[]);
        let events_tid = common::uftrace_tids(&theirs_events)[1].to_string();
        let expected_rows = report_rows(&theirs_events, &["--tid", &events_tid]);
        assert_eq!(expected_rows.get("fork"), Some(&1), "{expected_rows:?}");

        let recorded = base.join(format!("fntrace-{how}.data"));
        let output = native::fntrace_record(
            &base,
            &[
                "-o",
                recorded.to_str().unwrap(),
                "--",
                plain.to_str().unwrap(),
                how,
            ],
        );
        assert!(output.status.success(), "{}", native::stderr_of(&output));
        let recorded_tid = common::uftrace_tids(&recorded)[1].to_string();
        assert_eq!(
            report_rows(&recorded, &["--tid", &recorded_tid]),
            expected_rows,
            "fntrace record, {how}"
        );

        let dumped = base.join(format!("dumps-{how}"));
        std::fs::create_dir_all(&dumped).unwrap();
        let output = Command::new(&preloaded)
            .arg(how)
            .env("LD_PRELOAD", &library)
            .env("FNTRACE_LIBCALL", "1")
            .env("FORKED_CHILD_MODE", "dump")
            .env("FORKED_CHILD_DIR", &dumped)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{how}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let (_, child) = dumps(&dumped);
        let expected = common::uftrace_replay(&theirs, Some(theirs_tid));
        assert!(
            expected.starts_with("} /* fork */\nchild_work() {\n"),
            "{expected}"
        );
        assert_eq!(common::uftrace_replay(&child, None), expected, "{how}");
        assert_eq!(
            report_rows(&child, &[]),
            expected_rows,
            "the child's dump, {how}"
        );
        // Depth by depth, as the recording wrote them.
        assert_eq!(
            common::uftrace(&["dump", "--no-pager"], &child)
                .lines()
                .filter_map(|line| line
                    .split_once("depth: ")
                    .map(|(_, depth)| depth.to_string()))
                .collect::<Vec<_>>(),
            common::uftrace(&["dump", "--no-pager", "--tid", &recorded_tid], &recorded)
                .lines()
                .filter_map(|line| line
                    .split_once("depth: ")
                    .map(|(_, depth)| depth.to_string()))
                .collect::<Vec<_>>(),
            "{how}"
        );
    }
    std::fs::remove_dir_all(&base).unwrap();
}
