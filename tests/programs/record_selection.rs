//! `fntrace record`'s selection globs are checked before the program
//! runs, as the readers check theirs: `-F`, `-N` or `-P` matching no
//! function of the program (`tests/c/forker.c`: `main`, `work`, `leaf`,
//! and its imports `fork`, `wait`… while library calls are recorded) is
//! refused, naming the closest names, with nothing run and no directory
//! made (it recorded 0 events without a word); `--force` runs it anyway,
//! for a function of a library opened later. A `--flight` window over its
//! limit is refused the same way.

use crate::common;

use common::native::{self, build_c, Scratch};

/// `fntrace record -o DIR ARGS forker 0 _exit` in `base`: its exit code
/// and stderr, and whether DIR was made.
fn record(
    base: &std::path::Path,
    program: &std::path::Path,
    args: &[&str],
) -> (Option<i32>, String, bool) {
    let dir = base.join("out.data");
    let _ = std::fs::remove_dir_all(&dir);
    let mut all = vec!["-o", dir.to_str().unwrap()];
    all.extend(args);
    all.extend([program.to_str().unwrap(), "0", "_exit"]);
    let output = native::fntrace_record(base, &all);
    (
        output.status.code(),
        native::stderr_of(&output),
        dir.exists(),
    )
}

#[test]
fn a_glob_that_matches_no_function_is_refused_before_the_program_runs() {
    let scratch = Scratch::new("record-selection");
    let program = build_c(scratch.path(), "forker", "o2", &["-O2", "-pg"], &[]);
    let shown = program.display();
    let nothing_run = "fntrace record: nothing was run: a function of a library the program \
                       opens later (dlopen) is not known before it runs; --force records anyway\n";
    for (args, option, glob) in [
        (&["-F", "wrk"][..], "-F", "wrk"),
        (&["-N", "lef"], "-N", "lef"),
        (&["--no-libcall", "-P", "wrk"], "-P", "wrk"),
        // A glob that matches is not named beside one that does not.
        (&["-F", "work", "-F", "wrk"], "-F", "wrk"),
        // Library calls left out: their names select nothing.
        (&["--no-libcall", "-F", "fork"], "-F", "fork"),
    ] {
        let (code, stderr, made) = record(scratch.path(), &program, args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(!made, "{args:?}: the directory was made");
        let first = format!(
            "fntrace record: {option} {glob}: no function of {shown} matches it (closest: "
        );
        assert!(stderr.starts_with(&first), "{args:?}: {stderr}");
        assert!(stderr.ends_with(nothing_run), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 2, "{args:?}: {stderr}");
    }
    // The closest names, first those containing the glob's text.
    let (_, stderr, _) = record(scratch.path(), &program, &["-N", "lef"]);
    assert!(stderr.contains("(closest: leaf, "), "{stderr}");
    let (_, stderr, _) = record(scratch.path(), &program, &["-F", "wrk"]);
    assert!(stderr.contains("(closest: work, "), "{stderr}");

    // What does match runs: a function, an import recorded as a library
    // call, a function patched.
    for args in [
        &["-F", "work"][..],
        &["-F", "fork"],
        &["-N", "leaf"],
        &["--no-libcall", "-P", "work"],
    ] {
        let (code, stderr, made) = record(scratch.path(), &program, args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(made, "{args:?}");
    }
    // --force runs it anyway: nothing of it matched, nothing recorded.
    let (code, stderr, _) = record(scratch.path(), &program, &["--force", "-F", "wrk"]);
    assert_eq!(code, Some(0), "{stderr}");
    let calls = common::call_counts(&common::read_trace_dir(&scratch.path().join("out.data")));
    assert_eq!(calls.get("leaf"), None, "{stderr}");
}

#[test]
fn a_flight_window_over_the_limit_is_refused() {
    let scratch = Scratch::new("record-flight-limit");
    let program = build_c(scratch.path(), "forker", "o2", &["-O2", "-pg"], &[]);
    let (code, stderr, made) = record(scratch.path(), &program, &["--flight", "5G"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(!made);
    assert!(
        stderr.contains(
            "invalid value '5G' for '--flight <BYTES>': 5368709120 bytes is over the flight \
             window's limit, 4G (4294967296 bytes)"
        ),
        "{stderr}"
    );
    let (code, stderr, made) = record(scratch.path(), &program, &["--flight", "4G"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(made);
}
