//! A tail call (`return callee(…)` compiled to `jmp`, gcc `-O2`, `-pg` and
//! `-pg -mfentry`): the real `uftrace record` nests the callee in its
//! caller, as the source reads, and so does fntrace — the two replays are
//! equal — on the graph tracer's fast path (no call of the thread took the
//! generic path but its first).

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

#[test]
fn a_tail_called_function_nests_in_its_caller_as_in_uftrace() {
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
        // The thread's first call sets up its buffers on the generic path.
        assert_eq!(build.tc_main(2), 7);
        let generic_before = fntrace::generic_entries_on_this_thread();
        assert_eq!(build.tc_main(2), 7);
        let generic = fntrace::generic_entries_on_this_thread() - generic_before;
        fntrace::disable("graph").unwrap();
        let tid = fntrace::current_tid();
        assert!(!thread_events(&GRAPH_TRACER.snapshot(), tid).is_empty());
        let dir = temp_dir(&format!("tail-{}", build.prefix));
        fntrace::dump(&dir).unwrap();
        let ours = uftrace_replay(&dir, Some(tid)).replace(build.prefix, "");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(ours, theirs.repeat(2), "{}", build.flags);
        assert_eq!(generic, 0, "{}: calls off the fast path", build.flags);
    }
}
