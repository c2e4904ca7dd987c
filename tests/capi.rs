//! The C ABI (`include/fntrace.h`) from a real C program: `tests/c/capi_prog.c`
//! built with `gcc -pg` (PIE) and `gcc -pg -mfentry` and linked with
//! `libfntrace.a` by the README's command line. Four threads make known
//! numbers of calls; the directory the program writes (`fntrace_dump`, or
//! the streaming recorder) is read back by fntrace's reader and by the real
//! `uftrace report`, with exact counts. Bad values return negative codes
//! that `fntrace_last_error` explains. No `gmon.out` is written.
//!
//! `cargo test` builds only the rlib of the root crate, so the test builds
//! its `staticlib` and `cdylib` outputs (`common::native`) before using
//! them.

mod common;

use std::path::Path;
use std::process::Command;

use common::native::{build_c_program, build_libraries, profile_dir, repo, LINK_LIBS};

const THREADS: u64 = 4;
const ITERATIONS: u64 = 1000;

/// Builds `tests/c/capi_prog.c` with `flags` into `out`, linked as the
/// README says.
fn build(flags: &[&str], out: &Path) {
    build_c_program(&repo().join("tests/c/capi_prog.c"), flags, out);
}

/// Runs `program args` in the fresh directory `cwd`; its standard output.
/// It must succeed and leave no `gmon.out`.
fn run(program: &Path, args: &[&str], cwd: &Path) -> String {
    std::fs::create_dir_all(cwd).unwrap();
    let output = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{} {args:?}: {}\n{}",
        program.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !cwd.join("gmon.out").exists(),
        "{} {args:?} wrote gmon.out: gprof ran",
        program.display()
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The exact counts the program makes, checked in `dir` by fntrace's reader
/// and by `uftrace report`.
fn check_counts(dir: &Path) {
    let expected = [
        ("handle_get", THREADS * ITERATIONS),
        ("handle_put", THREADS * ITERATIONS / 4),
        (
            "parse_key",
            THREADS * ITERATIONS + 2 * THREADS * ITERATIONS / 4,
        ),
    ];
    let counts = common::call_counts(&common::read_trace_dir(dir));
    for (name, n) in expected {
        assert_eq!(counts.get(name), Some(&(n, n)), "{name} in {counts:?}");
    }
    assert_eq!(counts.len(), expected.len(), "only selected: {counts:?}");
    let uftrace = common::uftrace_calls(dir);
    for (name, n) in expected {
        assert_eq!(uftrace.get(name), Some(&n), "{name} in uftrace {uftrace:?}");
    }
    for name in ["handle_log_rotate", "log_line", "worker", "main"] {
        assert!(!uftrace.contains_key(name), "{name} in uftrace {uftrace:?}");
    }
}

fn traces_through_the_c_abi(variant: &str, flags: &[&str]) {
    let base = common::temp_dir(&format!("capi-{variant}"));
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("capi_prog");
    build(flags, &program);

    // gprof is neutralised even when fntrace is never called.
    run(&program, &["plain"], &base.join("plain"));

    let dump = base.join("dump.data");
    run(
        &program,
        &["dump", dump.to_str().unwrap()],
        &base.join("run-dump"),
    );
    check_counts(&dump);

    let record = base.join("record.data");
    run(
        &program,
        &["record", record.to_str().unwrap()],
        &base.join("run-record"),
    );
    check_counts(&record);

    // The same in drop mode (a bad mode first: refused, named).
    let dropping = base.join("record-drop.data");
    let out = run(
        &program,
        &["record_drop", dropping.to_str().unwrap()],
        &base.join("run-record-drop"),
    );
    assert!(
        out.contains("record_bad_mode -22 ")
            && out.contains("\"sometimes\" is not a recording mode"),
        "{out}"
    );
    check_counts(&dropping);
    let notes = fntrace::export::recorder_notes(&dropping).unwrap();
    assert!(
        notes.len() == 1 && notes[0].contains(&("mode".to_string(), "drop".to_string())),
        "{notes:?}"
    );
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn gcc_pg_pie_program_gives_exact_counts() {
    traces_through_the_c_abi("mcount", &["-pg"]);
}

#[test]
fn gcc_pg_mfentry_program_gives_exact_counts() {
    traces_through_the_c_abi("fentry", &["-pg", "-mfentry"]);
}

#[test]
fn bad_values_return_negative_codes_named_by_last_error() {
    let base = common::temp_dir("capi-errors");
    let full = base.join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("keep"), "not a trace").unwrap();
    let program = base.join("capi_prog");
    build(&["-pg"], &program);
    let out = run(
        &program,
        &["errors", full.to_str().unwrap()],
        &base.join("run"),
    );
    let lines: Vec<(String, i32, String)> = out
        .lines()
        .filter(|l| !l.starts_with("other_thread"))
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            let name = parts.next().unwrap().to_string();
            let code = parts.next().unwrap().parse().unwrap();
            (name, code, parts.next().unwrap_or("").to_string())
        })
        .collect();
    let expect = [
        ("last_error_before", 0, ""),
        ("enable_function", 0, ""),
        ("disable_function", 0, ""),
        ("enable_unknown", -libc::ENOENT, "no_such_tracer"),
        ("disable_unknown", -libc::ENOENT, "fntrace_disable"),
        ("enable_null", -libc::EINVAL, "tracer is NULL"),
        ("filter_empty_item", -libc::EINVAL, "empty glob"),
        ("filter_bare_bang", -libc::EINVAL, "empty glob"),
        ("filter_control", -libc::EINVAL, "'\\t'"),
        ("dump_not_empty", -libc::ENOTEMPTY, "not an empty directory"),
        ("record_stop_none", -libc::ESRCH, "no recording"),
        (
            "record_not_empty",
            -libc::ENOTEMPTY,
            "not an empty directory",
        ),
    ];
    assert_eq!(lines.len(), expect.len(), "{out}");
    for ((name, code, message), (want_name, want_code, want_text)) in lines.iter().zip(expect) {
        assert_eq!(name, want_name, "{out}");
        assert_eq!(*code, want_code, "{name}: {message}");
        assert!(message.contains(want_text), "{name}: {message:?}");
    }
    assert!(
        out.contains("other_thread []"),
        "the last error is per thread: {out}"
    );
    assert_eq!(
        std::fs::read_dir(&full).unwrap().count(),
        1,
        "nothing written into the non-empty directory"
    );
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn shared_library_exports_the_c_abi_and_the_trampolines() {
    build_libraries();
    let so = profile_dir().join("libfntrace.so");
    let output = Command::new("nm")
        .arg("-D")
        .arg("--defined-only")
        .arg(&so)
        .output()
        .expect("cannot run nm (binutils, installed with gcc)");
    assert!(output.status.success(), "nm -D {}", so.display());
    let symbols = String::from_utf8(output.stdout).unwrap();
    let exported: Vec<&str> = symbols
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    for name in [
        "mcount",
        "_mcount",
        "__fentry__",
        "__monstartup",
        "_mcleanup",
        "fntrace_init",
        "fntrace_enable",
        "fntrace_disable",
        "fntrace_set_filter",
        "fntrace_dump",
        "fntrace_record_start",
        "fntrace_record_start_mode",
        "fntrace_record_stop",
        "fntrace_last_error",
    ] {
        assert!(
            exported.contains(&name),
            "{name} not exported by {}",
            so.display()
        );
    }
}

#[test]
fn readme_gives_the_link_line_of_these_tests() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let line = format!("target/release/libfntrace.a {}", LINK_LIBS.join(" "));
    assert!(
        readme.contains(&line),
        "README's `## From C` gives {line:?}"
    );
}

/// Runs `program plain` in the fresh directory `cwd` with the environment
/// `vars` (and no other FNTRACE variable); must succeed and leave no
/// `gmon.out`. Its standard error.
fn run_with_env(program: &Path, vars: &[(&str, &str)], cwd: &Path) -> String {
    std::fs::create_dir_all(cwd).unwrap();
    let mut command = Command::new(program);
    command.arg("plain").current_dir(cwd);
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") {
            command.env_remove(name);
        }
    }
    let output = command.envs(vars.iter().copied()).output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        output.status.success(),
        "{vars:?}: {}\n{stderr}",
        output.status
    );
    assert!(!cwd.join("gmon.out").exists(), "{vars:?} wrote gmon.out");
    stderr
}

/// Calls per function in the latency table on `stderr` (rows: calls first,
/// function last).
fn report_calls(stderr: &str) -> std::collections::HashMap<String, u64> {
    let table = stderr
        .split_once("fntrace: latency (FNTRACE_REPORT=1)\n")
        .unwrap_or_else(|| panic!("no latency table on stderr: {stderr}"))
        .1;
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            Some((fields.last()?.to_string(), fields.first()?.parse().ok()?))
        })
        .collect()
}

const FILTER: &str = "handle_*,parse_*,!handle_log*";

#[test]
fn environment_records_to_fntrace_output_and_reports_at_exit() {
    let base = common::temp_dir("capi-env");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("capi_prog");
    build(&["-pg"], &program);
    let dir = base.join("env.data");
    let stderr = run_with_env(
        &program,
        &[
            ("FNTRACE", "graph"),
            ("FNTRACE_FILTER", FILTER),
            ("FNTRACE_OUTPUT", dir.to_str().unwrap()),
            ("FNTRACE_REPORT", "1"),
        ],
        &base.join("run"),
    );
    check_counts(&dir);
    let calls = report_calls(&stderr);
    assert_eq!(
        calls.get("handle_get"),
        Some(&(THREADS * ITERATIONS)),
        "{stderr}"
    );
    assert_eq!(
        calls.get("parse_key"),
        Some(&(6 * THREADS * ITERATIONS / 4))
    );
    assert_eq!(calls.len(), 3, "{stderr}");
    // The table is read from the directory record by record; it is the
    // one the whole trace read from it gives (50 rows at most).
    let whole = fntrace::export::read_uftrace_dir(&dir).unwrap();
    let table = stderr
        .split_once("fntrace: latency (FNTRACE_REPORT=1)\n")
        .unwrap()
        .1;
    assert_eq!(table, fntrace::analysis::latency(&whole).table(50));
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn environment_depth_limits_the_report_without_output() {
    let base = common::temp_dir("capi-env-depth");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("capi_prog");
    build(&["-pg", "-mfentry"], &program);
    let stderr = run_with_env(
        &program,
        &[
            ("FNTRACE", "graph"),
            ("FNTRACE_FILTER", FILTER),
            ("FNTRACE_DEPTH", "0"),
            ("FNTRACE_REPORT", "1"),
        ],
        &base.join("run"),
    );
    let calls = report_calls(&stderr);
    let expected = [
        ("handle_get".to_string(), THREADS * ITERATIONS),
        ("handle_put".to_string(), THREADS * ITERATIONS / 4),
    ];
    assert_eq!(calls, expected.into_iter().collect(), "{stderr}");
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn invalid_environment_prints_one_line_and_runs_untraced() {
    let base = common::temp_dir("capi-env-bad");
    let full = base.join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("keep"), "not a trace").unwrap();
    let program = base.join("capi_prog");
    build(&["-pg"], &program);
    let full = full.to_str().unwrap();
    // (variables, what the line names, whether FNTRACE_OUTPUT is added: a
    // directory that must not appear).
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, bool);
    let cases: &[Case] = &[
        (&[("FNTRACE", "graph,bogus")], "FNTRACE=graph,bogus", true),
        (
            &[("FNTRACE_FILTER", "handle_*,,x")],
            "FNTRACE_FILTER=",
            true,
        ),
        (&[("FNTRACE_FILTER", "!")], "FNTRACE_FILTER=", true),
        (&[("FNTRACE_DEPTH", "deep")], "FNTRACE_DEPTH=deep", true),
        (&[("FNTRACE_DEPTH", "70000")], "FNTRACE_DEPTH=70000", true),
        (&[("FNTRACE_REPORT", "yes")], "FNTRACE_REPORT=yes", true),
        (
            &[("FNTRACE", "function"), ("FNTRACE_REPORT", "1")],
            "FNTRACE_REPORT=1",
            false,
        ),
    ];
    for (i, (vars, named, with_output)) in cases.iter().enumerate() {
        let out = base.join(format!("out{i}"));
        let mut vars = vars.to_vec();
        if !vars.iter().any(|(name, _)| *name == "FNTRACE") {
            vars.push(("FNTRACE", "graph"));
        }
        if *with_output {
            vars.push(("FNTRACE_OUTPUT", out.to_str().unwrap()));
        }
        let stderr = run_with_env(&program, &vars, &base.join(format!("run{i}")));
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{vars:?}: {stderr}");
        assert!(
            lines[0].starts_with("fntrace: ")
                && lines[0].contains(named)
                && lines[0].ends_with("the program runs untraced"),
            "{vars:?}: {stderr}"
        );
        assert!(!out.exists(), "{vars:?}: untraced, yet {out:?} was written");
    }
    // The output directory itself: not empty, left alone.
    let stderr = run_with_env(
        &program,
        &[("FNTRACE", "graph"), ("FNTRACE_OUTPUT", full)],
        &base.join("run-full"),
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("FNTRACE_OUTPUT={full}")) && stderr.contains("untraced"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(full).unwrap().count(), 1);
    std::fs::remove_dir_all(&base).unwrap();
}
