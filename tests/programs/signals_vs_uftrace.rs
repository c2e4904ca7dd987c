//! Signal handlers running traced code (gcc `-O0` and `-O2`, `-pg` and
//! `-pg -mfentry`; `tests/fixtures/c/signals.c`): a handler entered
//! synchronously (`raise`) and asynchronously (another thread's
//! `pthread_kill` while this thread spins in a traced function) nests in
//! the traced function it interrupted, also on an alternate signal stack
//! (`sigaltstack`). fntrace's trace, dumped and read by
//! the real `uftrace replay`, equals what the real `uftrace record` shows,
//! thread by thread, exactly, on the graph tracer's fast path and on the
//! generic paths. A handler that leaves with `siglongjmp` is the one
//! difference (README, "Differences from uftrace"): fntrace ends the frames
//! it left where the jump lands; uftrace 0.13 keeps them open, nests what
//! follows in the handler and records no exit after the jump.

use crate::common;

use std::sync::Mutex;

use common::{trace_and_dump, uftrace_record, uftrace_replays_by_thread, without_main};
use fntrace_fixtures::faithful::{Build, SIGNALS};

/// Both tests install handlers for the same signals: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The real uftrace's per-thread replays of the program run with `args`.
fn theirs(build: &Build, args: &[&str]) -> Vec<String> {
    let dir = common::temp_dir(&format!("sig-uftrace-{}{}", build.prefix, args.join("-")));
    assert!(
        uftrace_record(&dir, &build.program(), args),
        "{} {args:?} under uftrace record",
        build.flags
    );
    let replays = uftrace_replays_by_thread(&dir, build.prefix);
    let _ = std::fs::remove_dir_all(&dir);
    replays
}

/// fntrace's per-thread replays of `entry(x)`, and its result.
fn ours(build: &Build, entry: &str, x: i64, generic: bool) -> (Vec<String>, i64) {
    let name = format!("sig-{}{entry}{generic}", build.prefix);
    let (dir, result) = trace_and_dump(&name, build.prefix, generic, || build.call(entry, x));
    let replays = uftrace_replays_by_thread(&dir, build.prefix);
    let _ = std::fs::remove_dir_all(&dir);
    (replays, result)
}

const UFTRACE_HANDLERS: &str = "\
sig_main() {
  sig_raiser() {
    sig_leaf();
    sig_handler() {
      sig_in_handler() {
        sig_leaf();
      } /* sig_in_handler */
    } /* sig_handler */
    sig_leaf();
  } /* sig_raiser */
  sig_spinner() {
    sig_handler() {
      sig_in_handler() {
        sig_leaf();
      } /* sig_in_handler */
    } /* sig_handler */
    sig_leaf();
  } /* sig_spinner */
} /* sig_main */
";

#[test]
fn handlers_nest_in_the_interrupted_function_as_in_uftrace() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for build in &SIGNALS {
        let theirs = theirs(build, &[]);
        assert_eq!(theirs.len(), 2, "{}: {theirs:?}", build.flags);
        let theirs = [without_main(&theirs[0]), theirs[1].clone()];
        assert_eq!(theirs[0], UFTRACE_HANDLERS, "{}", build.flags);
        assert_eq!(theirs[1], "sig_kicker();\n", "{}", build.flags);
        for generic in [false, true] {
            let (ours, result) = ours(build, "sig_main", 1, generic);
            assert_eq!(result, 6, "{}", build.flags);
            assert_eq!(ours, theirs, "{} (generic paths: {generic})", build.flags);
        }
    }
}

/// uftrace 0.13 after a `siglongjmp` out of a handler: the frames left stay
/// open, the calls after the landing nest in the handler, and no exit is
/// recorded after the jump.
const UFTRACE_JUMP: &str = "\
main() {
  sig_jump_main() {
    sig_land() {
      sig_jumper() {
        sig_deep_raise() {
          sig_leaf();
          sig_jumping_handler() {
            sig_in_handler() {
              sig_leaf();
            } /* sig_in_handler */
            sig_leaf();
            sig_leaf();

uftrace stopped tracing with remaining functions
================================================
task: TID
[5] sig_jumping_handler
[4] sig_deep_raise
[3] sig_jumper
[2] sig_land
[1] sig_jump_main
[0] main

";

/// fntrace: the frames the jump left end where it lands (found dead at the
/// next call), and the trace goes on.
const FNTRACE_JUMP: &str = "\
sig_jump_main() {
  sig_land() {
    sig_jumper() {
      sig_deep_raise() {
        sig_leaf();
        sig_jumping_handler() {
          sig_in_handler() {
            sig_leaf();
          } /* sig_in_handler */
        } /* sig_jumping_handler */
      } /* sig_deep_raise */
    } /* sig_jumper */
    sig_leaf();
  } /* sig_land */
  sig_leaf();
} /* sig_jump_main */
";

#[test]
fn a_handler_leaving_with_siglongjmp() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for build in &SIGNALS {
        let theirs = theirs(build, &["jump"]);
        assert_eq!(theirs, [UFTRACE_JUMP], "{}", build.flags);
        for generic in [false, true] {
            let (ours, result) = ours(build, "sig_jump_main", 3, generic);
            assert_eq!(result, 104, "{}", build.flags);
            assert_eq!(
                ours,
                [FNTRACE_JUMP],
                "{} (generic paths: {generic})",
                build.flags
            );
        }
    }
}

const UFTRACE_ALTERNATE_STACK: &str = "\
sig_alt_main() {
  sig_outer() {
    sig_raiser() {
      sig_leaf();
      sig_handler() {
        sig_in_handler() {
          sig_leaf();
        } /* sig_in_handler */
      } /* sig_handler */
      sig_leaf();
    } /* sig_raiser */
  } /* sig_outer */
  sig_outer() {
    sig_raiser() {
      sig_leaf();
      sig_handler() {
        sig_in_handler() {
          sig_leaf();
        } /* sig_in_handler */
      } /* sig_handler */
      sig_leaf();
    } /* sig_raiser */
  } /* sig_outer */
} /* sig_alt_main */
";

/// The handler's frames lie on another stack (far from the thread's):
/// they nest under the frame the signal interrupted, as uftrace shows.
#[test]
fn a_handler_on_an_alternate_signal_stack_as_in_uftrace() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for build in &SIGNALS {
        let theirs = theirs(build, &["alt"]);
        assert_eq!(theirs.len(), 1, "{}: {theirs:?}", build.flags);
        let theirs = [without_main(&theirs[0])];
        assert_eq!(theirs[0], UFTRACE_ALTERNATE_STACK, "{}", build.flags);
        for generic in [false, true] {
            let (ours, result) = ours(build, "sig_alt_main", 1, generic);
            assert_eq!(result, 9, "{}", build.flags);
            assert_eq!(ours, theirs, "{} (generic paths: {generic})", build.flags);
        }
    }
}
