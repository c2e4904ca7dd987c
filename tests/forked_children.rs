//! Children of a pre-fork program lose nothing: `fntrace record -- forker
//! 200 MODE` (`tests/c/forker.c`, `gcc -O2 -pg`: 200 children forked at
//! once, each calls `leaf` 1,000 times and ends by `_exit`, `exit` or
//! `exec`; then the parent calls it 1,000 times) keeps every call of every
//! process, exactly, and says nothing of lost events or late drains. Once
//! a child that `_exit`ed while 199 others finished beside it kept 8-16 %
//! of its calls, beside "0 lost".

mod common;

use common::native::{self, build_c, stderr_of, Scratch};

const CHILDREN: u64 = 200;
const CALLS_EACH: u64 = 1000;

/// Records `forker CHILDREN mode` and checks its counts, as fntrace and
/// uftrace read the directory.
fn record_forker(scratch: &Scratch, program: &std::path::Path, mode: &str, run: usize) {
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
    let scratch = Scratch::new("forked-children");
    let program = build_c(scratch.path(), "forker", "o2", &["-O2", "-pg"], &[]);
    for run in 0..10 {
        record_forker(&scratch, &program, "_exit", run);
    }
    for mode in ["exit", "exec", "return"] {
        record_forker(&scratch, &program, mode, 0);
    }
}
