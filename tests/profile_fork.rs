//! The profile in the child of `fork`: the blocks of the parent's other
//! threads (which the child does not have) are folded into its retired
//! total at its first snapshot (the child's profile starts with what the
//! parent's held, as its memory does), the forking thread keeps its block
//! under its new thread id, and the child's calls add to it; the parent's
//! profile is unchanged by the child's.

mod common;

use std::sync::mpsc;

use fntrace::analysis::ProfileSnapshot;
use fntrace::{Filter, PROFILE_TRACER};
use fntrace_fixtures::c_pie;

fn mid_calls(snapshot: &ProfileSnapshot) -> u64 {
    snapshot
        .functions
        .iter()
        .filter(|f| f.function == c_pie::mid_address())
        .map(|f| f.durations.count())
        .sum()
}

/// In the child: 0 if its profile is as expected, else which check failed.
fn child_checks() -> i32 {
    let before = PROFILE_TRACER.snapshot();
    if mid_calls(&before) != 5 {
        return 10 + mid_calls(&before).min(50) as i32;
    }
    if before.threads != 2 {
        return 3;
    }
    c_pie::run(4);
    let after = PROFILE_TRACER.snapshot();
    if mid_calls(&after) != 9 {
        return 4;
    }
    if after.threads != 2 {
        return 5;
    }
    0
}

#[test]
fn a_forked_child_folds_the_parents_other_threads() {
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &Filter::new().include("pie_*")).unwrap();
    let (ran, wait_ran) = mpsc::channel();
    let (release, wait_release) = mpsc::channel::<()>();
    // A thread that keeps its block (alive, parked) across the fork.
    let helper = std::thread::spawn(move || {
        c_pie::run(3);
        ran.send(()).unwrap();
        wait_release.recv().unwrap();
    });
    wait_ran.recv().unwrap();
    c_pie::run(2);
    // The child runs fntrace and the traced C code, then _exit.
    let code = common::exit_code_of_forked("profile fork", child_checks);
    assert_eq!(code, 0, "the child's checks failed (exit code {code})");
    release.send(()).unwrap();
    helper.join().unwrap();
    fntrace::disable("profile").unwrap();
    let parent = PROFILE_TRACER.snapshot();
    assert_eq!(mid_calls(&parent), 5);
    assert_eq!(parent.threads, 2);
}
