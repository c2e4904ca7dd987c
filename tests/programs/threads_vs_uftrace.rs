//! Threads (gcc `-O0` and `-O2`, `-pg` and `-pg -mfentry`;
//! `tests/fixtures/c/threads.c`): one ends in `pthread_exit` from a nested
//! traced frame, another returns. fntrace's trace, dumped and read by the
//! real `uftrace replay`, equals what the real `uftrace record` shows,
//! thread by thread, exactly, on the graph tracer's fast path and on the
//! generic paths: the frames `pthread_exit` leaves never return, so both
//! report them as remaining. (uftrace 0.13 loses the value passed to
//! `pthread_exit` there; fntrace does not: README, "Differences from
//! uftrace".)

use crate::common;

use common::{trace_and_dump, uftrace_record_output, uftrace_replays_by_thread, without_main};
use fntrace_fixtures::faithful::THREADS;

const UFTRACE: [&str; 3] = [
    "\
th_main() {
  th_leaf();
} /* th_main */
",
    "\
th_exiting() {
  th_nest() {
    th_leaf();
    th_quitter() {
      th_leaf();

uftrace stopped tracing with remaining functions
================================================
task: TID
[2] th_quitter
[1] th_nest
[0] th_exiting

",
    "\
th_plain() {
  th_leaf();
  th_leaf();
} /* th_plain */
",
];

#[test]
fn threads_and_pthread_exit_as_in_uftrace_in_all_four_builds() {
    for build in &THREADS {
        let dir = common::temp_dir(&format!("thr-uftrace-{}", build.prefix));
        // uftrace 0.13 loses the value the thread passes to pthread_exit
        // (pthread_join reads 0: 6 instead of 24); fntrace keeps it (below).
        assert_eq!(
            uftrace_record_output(&dir, &build.program(), &[]),
            (true, "6\n".to_owned()),
            "{} under uftrace record",
            build.flags
        );
        let mut theirs = uftrace_replays_by_thread(&dir, build.prefix);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(theirs.len(), 3, "{}: {theirs:?}", build.flags);
        theirs[0] = without_main(&theirs[0]);
        assert_eq!(theirs, UFTRACE, "{}", build.flags);

        for generic in [false, true] {
            let name = format!("thr-{}{generic}", build.prefix);
            let (dir, result) =
                trace_and_dump(&name, build.prefix, generic, || build.call("th_main", 5));
            let ours = uftrace_replays_by_thread(&dir, build.prefix);
            let _ = std::fs::remove_dir_all(&dir);
            assert_eq!(result, 24, "{}", build.flags);
            assert_eq!(ours, theirs, "{} (generic paths: {generic})", build.flags);
        }
    }
}
