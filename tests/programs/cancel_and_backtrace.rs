//! Unwinding that glibc starts itself, calling libgcc's unwinder past
//! fntrace's unwinder wrappers (`tests/fixtures/cpp/cancel.cpp`, four g++
//! builds): a thread cancelled while it waits two traced frames down, with
//! a destructor to run in each, and `backtrace()` from traced frames. The
//! program behaves as untraced (the destructors run, the thread is
//! cancelled, the backtraces see every frame), and the trace ends the
//! cancelled frames where the unwinder lands in their callers, exactly, on
//! the graph tracer's fast path and on the generic paths. The real
//! `uftrace record` 0.13 crashes these programs or changes their result
//! (README, "Differences from uftrace").

use crate::common;

use common::{trace_and_dump, uftrace_record_output, uftrace_replays_by_thread};
use fntrace_fixtures::faithful::CANCEL;

/// The thread that cancels and takes the backtraces (`.localalias`: gcc's
/// name for the target of a `-fPIC` function's call to itself).
const MAIN_THREAD: &str = "\
cn_main() {
  cn_backtrace.localalias() {
    cn_backtrace.localalias() {
      cn_backtrace.localalias() {
        cn_backtrace.localalias();
      } /* cn_backtrace.localalias */
    } /* cn_backtrace.localalias */
  } /* cn_backtrace.localalias */
  cn_backtrace.localalias();
} /* cn_main */
";

/// The cancelled thread at `-O0` and at `-O2` (destructors inlined): each
/// frame ends where the unwinder lands in its caller's cleanup; the thread
/// function's own cleanup hands the unwinding to glibc, which ends the
/// thread without returning from it.
const CANCELLED_THREAD: [&str; 2] = [
    "\
cn_thread() {
  cn_guarded() {
    cn_waiter() {
      cn_leaf();
    } /* cn_waiter */
    Guard::~Guard();
  } /* cn_guarded */
  Guard::~Guard();

uftrace stopped tracing with remaining functions
================================================
task: TID
[0] cn_thread

",
    "\
cn_thread() {
  cn_guarded() {
    cn_waiter() {
      cn_leaf();
    } /* cn_waiter */
  } /* cn_guarded */

uftrace stopped tracing with remaining functions
================================================
task: TID
[0] cn_thread

",
];

#[test]
fn cancellation_and_backtrace_from_traced_frames() {
    for (index, build) in CANCEL.iter().enumerate() {
        let dir = common::temp_dir(&format!("cancel-uftrace-{}", build.prefix));
        // (Its output captured: uftrace reports the crash at length.)
        let (succeeded, _) = uftrace_record_output(&dir, &build.program(), &[]);
        assert!(
            !succeeded,
            "{}: the program ran correctly under uftrace record",
            build.flags
        );
        let _ = std::fs::remove_dir_all(&dir);
        for generic in [false, true] {
            let name = format!("cancel-{}{generic}", build.prefix);
            let (dir, result) =
                trace_and_dump(&name, build.prefix, generic, || build.call("cn_main", 5));
            let ours = uftrace_replays_by_thread(&dir, build.prefix);
            let _ = std::fs::remove_dir_all(&dir);
            assert_eq!(result, 213, "{}", build.flags);
            assert_eq!(
                ours,
                [MAIN_THREAD, CANCELLED_THREAD[index % 2]],
                "{} (generic paths: {generic})",
                build.flags
            );
        }
    }
}
