//! The `FNTRACE_*` variables, read by a real `gcc -pg` program
//! (`tests/c/flight_service.c`, not linked with fntrace) run with
//! `libfntrace.so` preloaded, as `fntrace record` runs programs: every
//! variable is checked whenever it is set (a bad value is one line on
//! stderr, and the program runs on), sizes take `64M`, and the flight
//! recorder with a slow-call trigger set only from the environment leaves
//! one snapshot naming its call.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::native::{build_libraries, profile_dir, repo};

/// `libfntrace.so`, built.
fn library() -> PathBuf {
    build_libraries();
    let lib = profile_dir().join("libfntrace.so");
    assert!(lib.is_file(), "{} is missing", lib.display());
    lib
}

/// `tests/c/flight_service.c` built with `gcc -pg` into `dir`.
fn build_service(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let out = dir.join("flight_service");
    let output = Command::new("gcc")
        .args(["-pg", "-O1", "-fPIE", "-pie", "-pthread"])
        .arg(repo().join("tests/c/flight_service.c"))
        .arg("-o")
        .arg(&out)
        .output()
        .expect("cannot run gcc");
    assert!(
        output.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

/// Runs the service (`args`) in `cwd` with `libfntrace.so` preloaded and
/// only the `FNTRACE_*` variables `vars`; it must succeed.
fn run(program: &Path, args: &[&str], vars: &[(&str, &str)], cwd: &Path) -> Output {
    std::fs::create_dir_all(cwd).unwrap();
    let mut command = Command::new(program);
    command.args(args).current_dir(cwd);
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") {
            command.env_remove(name);
        }
    }
    command.env("LD_PRELOAD", library());
    let output = command.envs(vars.iter().copied()).output().unwrap();
    assert!(
        output.status.success(),
        "{vars:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!(
            "handled {}\n",
            args[0].parse::<u64>().unwrap() * args[1].parse::<u64>().unwrap()
        ),
        "{vars:?}: the program ran on"
    );
    output
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

#[test]
fn every_bad_value_is_one_line_whatever_else_is_set() {
    let base = common::temp_dir("env-bad");
    let program = build_service(&base);
    // Each alone: none of FNTRACE, FNTRACE_OUTPUT set (they were ignored
    // silently before); the line names the variable and what happens.
    let untraced = "the program runs untraced";
    let cases: &[(&str, &str, &str, &str)] = &[
        ("FNTRACE_REPORT", "1", "needs the graph tracer", untraced),
        ("FNTRACE_REPORT", "yes", "use 1 (or 0)", untraced),
        ("FNTRACE_FLIGHT", "64M", "needs FNTRACE_OUTPUT", untraced),
        ("FNTRACE_FLIGHT", "64Q", "is not a size", untraced),
        ("FNTRACE_DEPTH", "deep", "not a depth", untraced),
        ("FNTRACE_FILTER", ",,", "empty glob", untraced),
        ("FNTRACE_APPEND", "2", "use 1 (or 0)", untraced),
        (
            "FNTRACE_FLIGHT_TRIGGER",
            "handle_*>5",
            "not a duration",
            untraced,
        ),
        (
            "FNTRACE_FLIGHT_TRIGGER",
            "handle_*>5ms",
            "needs FNTRACE_FLIGHT",
            untraced,
        ),
        ("FNTRACE_FLIGHT_RATE", "0", "snapshots per minute", untraced),
        (
            "FNTRACE_CONTROL",
            "yes",
            "an absolute path",
            "the program runs on without live control",
        ),
        (
            "FNTRACE_PATCH",
            "fast",
            "\"breakpoint\" or \"stop\"",
            "the default is kept",
        ),
        (
            "FNTRACE_TEXT_WRITES",
            "poke",
            "\"alias\" or \"proc-mem\"",
            "the default is kept",
        ),
        (
            "FNTRACE_PATCH_PRIORITY",
            "high",
            "\"realtime\" or \"normal\"",
            "the default is kept",
        ),
    ];
    for (i, (name, value, why, then)) in cases.iter().enumerate() {
        let cwd = base.join(format!("run{i}"));
        let output = run(&program, &["2", "200"], &[(name, value)], &cwd);
        let stderr = stderr(&output);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{name}={value}: {stderr}");
        assert!(
            lines[0].starts_with(&format!("fntrace: {name}={value}"))
                && lines[0].contains(why)
                && lines[0].ends_with(then),
            "{name}={value}: {stderr}"
        );
        // Nothing written where the program ran (FNTRACE_CONTROL=yes
        // served a socket named `yes` there).
        assert_eq!(
            std::fs::read_dir(&cwd).unwrap().count(),
            0,
            "{name}={value} wrote into the working directory"
        );
    }
    // With tracing asked for, a bad value still stops it, in one line.
    let out = base.join("out");
    let output = run(
        &program,
        &["2", "200"],
        &[
            ("FNTRACE_OUTPUT", out.to_str().unwrap()),
            ("FNTRACE_APPEND", "2"),
        ],
        &base.join("run-output"),
    );
    let stderr = stderr(&output);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("fntrace: FNTRACE_APPEND=2: use 1 (or 0); the program runs untraced")
    );
    assert!(!out.exists());
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn flight_sizes_take_the_one_size_syntax() {
    let base = common::temp_dir("env-flight-size");
    let program = build_service(&base);
    for (i, size) in ["64M", "1m", "65536", "512K"].iter().enumerate() {
        let out = base.join(format!("snap{i}"));
        let output = run(
            &program,
            &["2", "300"],
            &[
                ("FNTRACE_FLIGHT", size),
                ("FNTRACE_OUTPUT", out.to_str().unwrap()),
                ("FNTRACE_FILTER", "handle_request"),
            ],
            &base.join(format!("run{i}")),
        );
        let stderr = stderr(&output);
        assert!(stderr.contains("flight recorder:"), "{size}: {stderr}");
        let trace = common::read_trace_dir(&out);
        let counts = common::call_counts(&trace);
        // 600 calls, 2 events each, 16 bytes an event: all fit in 64K.
        assert_eq!(
            counts.get("handle_request"),
            Some(&(600, 600)),
            "{size}: {counts:?}"
        );
    }
    std::fs::remove_dir_all(&base).unwrap();
}
