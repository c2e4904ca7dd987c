//! C++ exceptions (g++ `-O0` and `-O2`, `-pg` and `-pg -mfentry`): a throw
//! crossing several traced frames, nested try blocks, `throw;` and a new
//! throw from a handler, a throw and catch inside a handler, catch by
//! value, a cleanup on the way (one that throws and catches while the
//! first exception is on its way), recursion, tail calls
//! (`tests/fixtures/cpp/exceptions.cpp`). fntrace's trace, dumped and read
//! by the real `uftrace replay`, equals what the real `uftrace record`
//! shows for the same program, exactly (the exits of unwound frames where
//! the unwinder lands), on the graph tracer's fast path and on the generic
//! paths. One difference, in `-mfentry` builds (README, "Differences from
//! uftrace"): uftrace nests a call that a landing pad makes before the
//! handler begins (a destructor in a cleanup, the copy of an exception
//! caught by value) in the unwound callee whose return-address slot it
//! reuses.

mod common;

use common::{trace_and_dump, uftrace_record, uftrace_replay, without_main};
use fntrace_fixtures::faithful::{Build, EXCEPTIONS};

/// What `ex_main(0)` returns.
const RESULT: i64 = 10063;

/// The real uftrace's replay of the program, without `main`.
fn theirs(build: &Build) -> String {
    let dir = common::temp_dir(&format!("exc-uftrace-{}", build.prefix));
    assert!(
        uftrace_record(&dir, &build.program(), &[]),
        "{} under uftrace record",
        build.flags
    );
    let replay = without_main(&uftrace_replay(&dir, None)).replace(build.prefix, "");
    let _ = std::fs::remove_dir_all(&dir);
    replay
}

/// fntrace's trace of `ex_main(0)`, dumped and replayed by uftrace.
fn ours(build: &Build, generic: bool) -> String {
    let name = format!("exc-{}{generic}", build.prefix);
    let (dir, result) = trace_and_dump(&name, build.prefix, generic, || build.call("ex_main", 0));
    assert_eq!(result, RESULT, "{}", build.flags);
    let replay = uftrace_replay(&dir, Some(fntrace::current_tid())).replace(build.prefix, "");
    let _ = std::fs::remove_dir_all(&dir);
    replay
}

/// The lines of `replay` from the one opening `function` to its closing
/// line at the same indentation.
fn subtree(replay: &str, function: &str) -> String {
    let lines: Vec<&str> = replay.lines().collect();
    let open = format!("{function}() {{");
    let start = lines
        .iter()
        .position(|l| l.trim_start() == open)
        .unwrap_or_else(|| panic!("no {function} in\n{replay}"));
    let indent = lines[start].len() - open.len();
    let close = format!("{}}} /* {function} */", " ".repeat(indent));
    let end = start + lines[start..].iter().position(|l| *l == close).unwrap();
    lines[start..=end]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `lines` with the first one's indentation removed from each.
fn dedent(lines: &str) -> String {
    let indent = lines.len() - lines.trim_start().len();
    lines
        .lines()
        .map(|l| format!("{}\n", &l[indent..]))
        .collect()
}

/// uftrace's `-mfentry` nesting of the calls a landing pad makes before
/// the handler begins, at `-O0` and `-O2` (the destructor and the copy
/// constructor are inlined at `-O2`).
const UFTRACE_FENTRY_CLEANUP: [&str; 2] = [
    "ex_with_cleanup() {
  ex_middle() {
    ex_thrower() {
      ex_leaf();
    } /* ex_thrower */
    Guard::~Guard() {
      ex_leaf();
    } /* Guard::~Guard */
  } /* ex_middle */
} /* ex_with_cleanup */
",
    "ex_with_cleanup() {
  ex_middle() {
    ex_thrower() {
      ex_leaf();
    } /* ex_thrower */
    ex_leaf();
  } /* ex_middle */
} /* ex_with_cleanup */
",
];
const UFTRACE_FENTRY_BY_VALUE: [&str; 2] = [
    "ex_catch_by_value() {
  ex_obj_thrower() {
    ex_leaf();
    Obj::Obj() {
      ex_leaf();
    } /* Obj::Obj */
    Obj::Obj() {
      ex_leaf();
    } /* Obj::Obj */
  } /* ex_obj_thrower */
  ex_leaf();
  Obj::~Obj() {
    ex_leaf();
  } /* Obj::~Obj */
  Obj::~Obj() {
    ex_leaf();
  } /* Obj::~Obj */
} /* ex_catch_by_value */
",
    "ex_catch_by_value() {
  ex_obj_thrower() {
    ex_leaf();
    ex_leaf();
    ex_leaf();
  } /* ex_obj_thrower */
  ex_leaf();
  ex_leaf();
  Obj::~Obj() {
    ex_leaf();
  } /* Obj::~Obj */
} /* ex_catch_by_value */
",
];

const UFTRACE_FENTRY_THROWING_CLEANUP: [&str; 2] = [
    "ex_cleanup_throws() {
  ex_middle() {
    ex_thrower() {
      ex_leaf();
    } /* ex_thrower */
    ThrowingGuard::~ThrowingGuard() {
      ex_in_cleanup() {
        ex_thrower() {
          ex_leaf();
        } /* ex_thrower */
        ex_leaf();
      } /* ex_in_cleanup */
    } /* ThrowingGuard::~ThrowingGuard */
  } /* ex_middle */
} /* ex_cleanup_throws */
",
    "ex_cleanup_throws() {
  ex_middle() {
    ex_thrower() {
      ex_leaf();
    } /* ex_thrower */
    ex_in_cleanup() {
      ex_thrower() {
        ex_leaf();
      } /* ex_thrower */
      ex_leaf();
    } /* ex_in_cleanup */
  } /* ex_middle */
} /* ex_cleanup_throws */
",
];

#[test]
fn exceptions_trace_as_uftrace_records_them_in_all_four_builds() {
    // [-O0 -pg, -O2 -pg, -O0 -pg -mfentry, -O2 -pg -mfentry]
    let theirs: Vec<String> = EXCEPTIONS.iter().map(theirs).collect();
    for (index, build) in EXCEPTIONS.iter().enumerate() {
        let mcount_build = index % 2;
        for generic in [false, true] {
            let ours = ours(build, generic);
            // Equal to uftrace's `-pg` record of the same code and -O.
            assert_eq!(
                ours, theirs[mcount_build],
                "{} (generic paths: {generic})",
                build.flags
            );
            if index < 2 {
                assert_eq!(ours, theirs[index], "{}", build.flags);
            }
        }
    }
    // uftrace's `-mfentry` records differ from its `-pg` ones only where a
    // landing pad calls before the handler begins.
    let differing = [
        ("ex_with_cleanup", UFTRACE_FENTRY_CLEANUP),
        ("ex_catch_by_value", UFTRACE_FENTRY_BY_VALUE),
        ("ex_cleanup_throws", UFTRACE_FENTRY_THROWING_CLEANUP),
    ];
    for opt in 0..2 {
        let (pg, fentry) = (&theirs[opt], &theirs[opt + 2]);
        let mut corrected = fentry.clone();
        for (function, expected) in differing {
            let theirs_fentry = subtree(fentry, function);
            assert_eq!(dedent(&theirs_fentry), expected[opt], "-O{}", opt * 2);
            corrected = corrected.replace(&theirs_fentry, &subtree(pg, function));
        }
        assert_eq!(&corrected, pg, "-O{}", opt * 2);
    }
}
