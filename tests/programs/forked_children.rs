//! Children of a pre-fork program lose nothing: `fntrace record -- forker
//! 200 MODE` (`tests/c/forker.c`, `gcc -O2 -pg`: 200 children forked at
//! once, each calls `leaf` 1,000 times and ends by `_exit`, `exit`,
//! `exec`, `return` or SIGTERM; then the parent calls it 1,000 times)
//! keeps every call of every process, exactly, and says nothing of lost
//! events or late drains. Once a child that `_exit`ed while 199 others
//! finished beside it kept 8-16 % of its calls, beside "0 lost".
//!
//! A child killed by SIGKILL runs no code of fntrace's: what it held
//! after its last drain is lost, and no one can count it. Killed after
//! its last drain, its calls are all there; either way the recording says
//! that it did not finish, never "0 lost" beside it, and `fntrace record`
//! exits 3 (incomplete) for a program that succeeded.

use crate::common;

use common::native::{self, build_c, stderr_of, Scratch};

const CHILDREN: u64 = 200;
const CALLS_EACH: u64 = 1000;

/// Runs of each repeated case: 3 by default (each run checks 201
/// processes' calls exactly; the loss these cases guard against showed in
/// every run), more with `FNTRACE_FORK_RUNS=N` when hunting a rare race.
fn runs() -> usize {
    std::env::var("FNTRACE_FORK_RUNS")
        .ok()
        .and_then(|runs| runs.parse().ok())
        .unwrap_or(3)
}

/// Held by each test: one run of 200 children at a time (the suite runs
/// on 2 loaded cores).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `fntrace record --no-libcall -o DIR forker CHILDREN MODE`: DIR and
/// the output.
fn run_forker(
    scratch: &Scratch,
    program: &std::path::Path,
    mode: &str,
    run: usize,
) -> (std::path::PathBuf, std::process::Output) {
    let dir = scratch
        .path()
        .join(format!("{}-{run}", mode.replace('_', "u")));
    let children = CHILDREN.to_string();
    let output = native::fntrace_record(
        scratch.path(),
        &[
            "--no-libcall",
            "-o",
            dir.to_str().unwrap(),
            "--",
            program.to_str().unwrap(),
            &children,
            mode,
        ],
    );
    (dir, output)
}

/// Records `forker CHILDREN mode` and checks its counts, as fntrace and
/// uftrace read the directory.
fn record_forker(scratch: &Scratch, program: &std::path::Path, mode: &str, run: usize) {
    let (dir, output) = run_forker(scratch, program, mode, run);
    let stderr = stderr_of(&output);
    assert!(output.status.success(), "{mode} run {run}: {stderr}");
    assert!(
        !stderr.contains("did not finish") && !stderr.contains("not written"),
        "{mode} run {run}: {stderr}"
    );
    // Entries and exits: `main`'s are not the children's to close (a child
    // that returns from it ends a call its parent entered).
    let calls = common::call_counts(&common::read_trace_dir(&dir));
    let processes = CHILDREN + 1;
    assert_eq!(
        (calls.get("leaf").copied(), calls.get("work").copied()),
        (
            Some((processes * CALLS_EACH, processes * CALLS_EACH)),
            Some((processes, processes))
        ),
        "{mode} run {run}: fntrace's reading; stderr: {stderr}"
    );
    let uftrace = common::uftrace_calls(&dir);
    assert_eq!(
        (uftrace.get("leaf").copied(), uftrace.get("work").copied()),
        (Some(processes * CALLS_EACH), Some(processes)),
        "{mode} run {run}: uftrace's reading"
    );
}

#[test]
fn every_call_of_200_children_that_exit_is_kept() {
    let _alone = one_at_a_time();
    let scratch = Scratch::new("forked-children");
    let program = build_c(scratch.path(), "forker", "o2", &["-O2", "-pg"], &[]);
    for run in 0..runs() {
        record_forker(&scratch, &program, "_exit", run);
    }
    for mode in ["exit", "exec", "return"] {
        record_forker(&scratch, &program, mode, 0);
    }
}

/// SIGTERM's default action: the handler fntrace stands in for drains
/// and finishes the child's part first, as `_exit` does.
#[test]
fn every_call_of_200_children_ended_by_sigterm_is_kept() {
    let _alone = one_at_a_time();
    let scratch = Scratch::new("forked-children-term");
    let program = build_c(scratch.path(), "forker", "o2", &["-O2", "-pg"], &[]);
    for run in 0..runs() {
        record_forker(&scratch, &program, "term", run);
    }
}

/// The line `fntrace record` ends its summary of `dir` with, for 200
/// unfinished children.
fn unfinished_said(stderr: &str) {
    assert!(
        stderr.contains(&format!(
            "fntrace record: INCOMPLETE: {CHILDREN} of {} process(es) did not finish their \
             part (killed by SIGKILL?): their records up to their last drain are kept; what \
             they held after it is lost, and cannot be counted\n",
            CHILDREN + 1
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            " lost and an unknown number in {CHILDREN} unfinished process(es), in "
        )),
        "{stderr}"
    );
    assert!(!stderr.contains(", 0 lost, "), "{stderr}");
}

/// Killed by SIGKILL after their last drain: every call is there, exact;
/// the children are said unfinished (no one can tell that they lost
/// nothing), and the run incomplete.
#[test]
fn every_call_of_200_children_killed_after_their_last_drain_is_kept() {
    let _alone = one_at_a_time();
    let scratch = Scratch::new("forked-children-kill");
    let program = build_c(scratch.path(), "forker", "o2", &["-O2", "-pg"], &[]);
    let processes = CHILDREN + 1;
    for run in 0..runs() {
        let (dir, output) = run_forker(&scratch, &program, "kill", run);
        let stderr = stderr_of(&output);
        assert_eq!(output.status.code(), Some(3), "run {run}: {stderr}");
        unfinished_said(&stderr);
        let calls = common::call_counts(&common::read_trace_dir(&dir));
        assert_eq!(
            (calls.get("leaf").copied(), calls.get("work").copied()),
            (
                Some((processes * CALLS_EACH, processes * CALLS_EACH)),
                Some((processes, processes))
            ),
            "run {run}: {stderr}"
        );
    }
}

/// Killed by SIGKILL at once: what they held is lost, and said so.
#[test]
fn children_killed_before_their_last_drain_are_said_unfinished() {
    let _alone = one_at_a_time();
    let scratch = Scratch::new("forked-children-kill-at-once");
    let program = build_c(scratch.path(), "forker", "o2", &["-O2", "-pg"], &[]);
    let (dir, output) = run_forker(&scratch, &program, "kill-at-once", 0);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    unfinished_said(&stderr);
    // The parent's calls, at least, are all there.
    let calls = common::call_counts(&common::read_trace_dir(&dir));
    let leaf = calls.get("leaf").copied().unwrap_or_default();
    assert!(
        leaf.0 >= CALLS_EACH && leaf.0 <= (CHILDREN + 1) * CALLS_EACH,
        "{leaf:?}"
    );
    // The directory says it to its readers too, before the numbers.
    let report = std::process::Command::new(native::cli())
        .arg("report")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", stderr_of(&report));
    assert_eq!(
        stderr_of(&report),
        format!(
            "fntrace: {}: {CHILDREN} process(es) did not finish their part of the recording \
             (killed by SIGKILL?): what they held after their last drain is missing below, and \
             cannot be counted\n",
            dir.display()
        )
    );
}
