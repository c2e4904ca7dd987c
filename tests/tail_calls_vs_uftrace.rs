//! A documented difference (README, "Differences from uftrace"): a tail
//! call (`return callee(…)` compiled to `jmp`, gcc `-O2`, `-pg` and
//! `-pg -mfentry`). The real `uftrace record` nests the callee in its
//! caller, as the source reads; fntrace ends the caller at the jump and
//! records the callee as its sibling. Both see the same calls in the same
//! order. When fntrace nests tail calls (issue 10, item 1), the two replays
//! must become equal: this test then says so by failing.

mod common;

use common::{temp_dir, thread_events, uftrace_record, uftrace_replay, without_main};
use fntrace::GRAPH_TRACER;
use fntrace_fixtures::c_tail::BUILDS;

const UFTRACE: &str = "\
tc_main() {
  tc_caller() {
    tc_callee() {
      tc_leaf();
    } /* tc_callee */
  } /* tc_caller */
} /* tc_main */
";

const FNTRACE: &str = "\
tc_main() {
  tc_caller();
  tc_callee() {
    tc_leaf();
  } /* tc_callee */
} /* tc_main */
";

fn entries(replay: &str) -> Vec<&str> {
    replay
        .lines()
        .map(str::trim)
        .filter(|l| l.ends_with("() {") || l.ends_with("();"))
        .map(|l| l.split('(').next().unwrap())
        .collect()
}

#[test]
fn a_tail_called_function_is_its_callers_sibling_in_fntrace_and_nested_in_uftrace() {
    fntrace::init().unwrap();
    for build in &BUILDS {
        let dir = temp_dir(&format!("tail-uftrace-{}", build.prefix));
        assert!(
            uftrace_record(&dir, &build.program(), &[]),
            "{}",
            build.flags
        );
        let theirs = without_main(&uftrace_replay(&dir, None)).replace(build.prefix, "");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(theirs, UFTRACE, "{}", build.flags);

        GRAPH_TRACER.take_trace();
        fntrace::enable("graph").unwrap();
        assert_eq!(build.tc_main(2), 7);
        fntrace::disable("graph").unwrap();
        let tid = fntrace::current_tid();
        assert!(!thread_events(&GRAPH_TRACER.snapshot(), tid).is_empty());
        let dir = temp_dir(&format!("tail-{}", build.prefix));
        fntrace::dump(&dir).unwrap();
        let ours = uftrace_replay(&dir, Some(tid)).replace(build.prefix, "");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(ours, FNTRACE, "{}", build.flags);
        assert_eq!(entries(&ours), entries(&theirs));
    }
}
