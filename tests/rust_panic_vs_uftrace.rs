//! A Rust panic through traced frames (`-Zinstrument-mcount`), caught by
//! `catch_unwind`: fntrace ends the unwound frames where the unwinder lands
//! and traces on (the replay of its dump is exact, on the graph tracer's
//! fast path and on the generic paths); the real `uftrace record` 0.13,
//! which fixes up its return hooks for C++'s `__cxa_throw` but not for
//! other unwinders, crashes the same program (README, "Differences from
//! uftrace").

mod common;

use common::{trace_and_dump, uftrace_record_output, uftrace_replay};
use fntrace_fixtures::rust;

const PREFIX: &str = "fixture_rust_workload::";

/// The panic's unwound frames end where `catch_unwind` lands, and the
/// calls after it are traced as usual.
const EXPECTED: &str = "\
panic_outer() {
  panic_inner();
} /* panic_outer */
mid() {
  leaf();
  leaf();
  leaf();
  leaf();
} /* mid */
panic_outer() {
  panic_inner();
} /* panic_outer */
";

#[test]
fn a_rust_panic_through_traced_frames() {
    let dir = common::temp_dir("rust-panic-uftrace");
    let program = fntrace_fixtures::faithful::rust_panic_program();
    // (Its output captured: uftrace reports the crash at length.)
    let (succeeded, _) = uftrace_record_output(&dir, &program, &[]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!succeeded, "the program ran correctly under uftrace record");

    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for generic in [false, true] {
        let (dir, results) =
            trace_and_dump(&format!("rust-panic-{generic}"), PREFIX, generic, || {
                let caught = std::panic::catch_unwind(|| rust::panic_outer(1)).is_err();
                (caught, rust::mid(1), rust::panic_outer(0))
            });
        let ours = uftrace_replay(&dir, Some(fntrace::current_tid())).replace(PREFIX, "");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(results, (true, 34, 1));
        assert_eq!(ours, EXPECTED, "generic paths: {generic}");
    }
    std::panic::set_hook(previous_hook);
}
