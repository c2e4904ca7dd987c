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
        (
            "FNTRACE_FLIGHT",
            "5G",
            "over the flight window's limit, 4G (4294967296 bytes)",
            untraced,
        ),
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
            "FNTRACE_METRICS",
            "localhost:abc",
            "port \"abc\" of host localhost is not a number from 0 to 65535; expected \
             HOST:PORT on a loopback address",
            "the program runs on without a metrics endpoint",
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

/// A flight window over its limit (4 GiB) is refused in one line that
/// names the value and the limit, and the program runs on, untraced: its
/// output directory is not even made. (Any size was taken, and the window
/// grew with the program's events until memory ran out.)
#[test]
fn a_flight_window_over_the_limit_is_one_line_and_the_program_runs() {
    let base = common::temp_dir("env-flight-limit");
    let program = build_service(&base);
    for (value, bytes) in [
        ("5G", "5368709120"),
        ("4097M", "4296015872"),
        ("1048576M", "1099511627776"),
    ] {
        let out = base.join(format!("snap-{value}"));
        let output = run(
            &program,
            &["2", "300"],
            &[
                ("FNTRACE_FLIGHT", value),
                ("FNTRACE_OUTPUT", out.to_str().unwrap()),
            ],
            &base.join(format!("run-{value}")),
        );
        assert_eq!(
            stderr(&output),
            format!(
                "fntrace: FNTRACE_FLIGHT={value}: {bytes} bytes is over the flight window's \
                 limit, 4G (4294967296 bytes); the program runs untraced\n"
            )
        );
        assert!(!out.exists(), "{value}");
    }
    // At the limit: taken (the window grows only as events come).
    let out = base.join("snap-4G");
    let output = run(
        &program,
        &["2", "300"],
        &[
            ("FNTRACE_FLIGHT", "4G"),
            ("FNTRACE_OUTPUT", out.to_str().unwrap()),
            ("FNTRACE_FILTER", "handle_request"),
        ],
        &base.join("run-4G"),
    );
    assert!(
        stderr(&output).contains("flight recorder:"),
        "{}",
        stderr(&output)
    );
    let counts = common::call_counts(&common::read_trace_dir(&out));
    assert_eq!(counts.get("handle_request"), Some(&(600, 600)));
    std::fs::remove_dir_all(&base).unwrap();
}

/// The directories under `dir`, sorted.
fn snapshots(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    dirs
}

/// A service traced with no code change: a `-pg` program preloaded with
/// `libfntrace.so`, one request of 40,000 sleeping 20 ms, the flight
/// recorder and a slow-call trigger set only from the environment: one
/// snapshot, read by uftrace, holding that call and the other threads'
/// calls around it, and `fntrace report` names the call first.
#[test]
fn one_slow_request_among_thousands_leaves_one_snapshot_from_the_environment() {
    let base = common::temp_dir("env-flight-slow");
    let program = build_service(&base);
    let out = base.join("snaps");
    let output = run(
        &program,
        &["2", "20000", "10000"],
        &[
            ("FNTRACE_FLIGHT", "64M"),
            ("FNTRACE_OUTPUT", out.to_str().unwrap()),
            ("FNTRACE_FLIGHT_TRIGGER", "handle_request>15ms"),
        ],
        &base.join("run"),
    );
    let stderr = stderr(&output);
    assert!(
        stderr.contains(&format!(
            "flight recorder: 1 trigger snapshot(s) in {}, 0 trigger(s) skipped",
            out.display()
        )),
        "{stderr}"
    );
    let dirs = snapshots(&out);
    assert_eq!(dirs.len(), 1, "exactly one snapshot: {dirs:?}\n{stderr}");
    let snap = &dirs[0];
    let name = snap.file_name().unwrap().to_str().unwrap();
    assert!(
        name.ends_with("-handle_request") && name.len() == 19 + 15,
        "{name}"
    );

    // What fired it: the call, its thread, start and duration.
    let fired = std::fs::read_to_string(snap.join("trigger.txt")).unwrap();
    let line = fired.lines().nth(1).unwrap();
    let fields: Vec<&str> = line.split([' ', ',']).filter(|s| !s.is_empty()).collect();
    // "slow call handle_request: thread T, start S, duration D ms"
    assert_eq!(
        fields[..4],
        ["slow", "call", "handle_request:", "thread"],
        "{fired}"
    );
    let tid: u32 = fields[4].parse().unwrap();
    let start_ns = {
        let (s, ns) = fields[6].split_once('.').unwrap();
        s.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap()
    };
    assert_eq!(fields[7], "duration");
    assert_eq!(fields[9], "ms", "{fired}");
    let ms: f64 = fields[8].parse().unwrap();
    assert!((20.0..1000.0).contains(&ms), "{fired}");
    assert_eq!(fired.lines().filter(|l| l.contains("slow call")).count(), 1);

    // fntrace's reader: the slow call on that thread, and every worker.
    let trace = common::read_trace_dir(snap);
    let slow: Vec<u32> = trace
        .threads
        .iter()
        .filter(|t| {
            t.events
                .iter()
                .any(|e| trace.name_of(e.function) == "slow_path")
        })
        .map(|t| t.tid)
        .collect();
    assert_eq!(slow, [tid]);
    let thread = trace.threads.iter().find(|t| t.tid == tid).unwrap();
    assert!(thread
        .events
        .iter()
        .any(|e| e.time_ns == start_ns && trace.name_of(e.function) == "handle_request"));
    let workers: Vec<&fntrace::ThreadTrace> = trace
        .threads
        .iter()
        .filter(|t| {
            t.events
                .iter()
                .any(|e| trace.name_of(e.function) == "handle_request")
        })
        .collect();
    assert_eq!(workers.len(), 2, "both workers' calls are in it");
    // The other worker ran around the slow call: calls before and after
    // its start are in the window (the snapshot is written a drain or two
    // after the call ends; the requests after that are not in it).
    let other = workers.iter().find(|t| t.tid != tid).unwrap();
    let calls = |before: bool| {
        other
            .events
            .iter()
            .filter(|e| (e.time_ns < start_ns) == before)
            .filter(|e| trace.name_of(e.function) == "handle_request")
            .count()
    };
    assert!(
        calls(true) > 0 && calls(false) > 0,
        "{} {}",
        calls(true),
        calls(false)
    );
    let counts = common::call_counts(&trace);
    let (entered, _) = counts["handle_request"];
    assert!(entered > 20_000, "{counts:?}");

    // uftrace reads it, the slow call included, with the same counts:
    // `uftrace report` counts every entry, a call the window ends inside
    // (a worker in the middle of a request) included.
    let replay = common::uftrace(&["replay", "--no-pager", "-F", "slow_path"], snap);
    assert!(replay.contains("slow_path()"), "{replay}");
    let uftrace = common::uftrace_calls(snap);
    assert_eq!(uftrace.get("handle_request"), Some(&entered), "{counts:?}");
    assert_eq!(uftrace.get("slow_path"), Some(&1));

    // fntrace report: the trigger first.
    let report = Command::new(common::native::cli())
        .args(["report", "--no-pager"])
        .arg(snap)
        .output()
        .unwrap();
    assert!(report.status.success());
    let report = String::from_utf8(report.stdout).unwrap();
    let mut lines = report.lines();
    assert_eq!(lines.next(), Some("# fired by:"), "{report}");
    assert!(
        lines.next().unwrap().starts_with(&format!(
            "#   slow call handle_request: thread {tid}, start "
        )),
        "{report}"
    );
    std::fs::remove_dir_all(&base).unwrap();
}

/// `@trigger-thread`: the one slow request's snapshot holds its worker
/// alone (one `.dat` file), which uftrace reads.
#[test]
fn a_trigger_thread_snapshot_from_the_environment_holds_one_thread() {
    let base = common::temp_dir("env-flight-trigger-thread");
    let program = build_service(&base);
    let out = base.join("snaps");
    let output = run(
        &program,
        &["2", "20000", "10000"],
        &[
            ("FNTRACE_FLIGHT", "64M"),
            ("FNTRACE_OUTPUT", out.to_str().unwrap()),
            (
                "FNTRACE_FLIGHT_TRIGGER",
                "handle_request>15ms@trigger-thread",
            ),
        ],
        &base.join("run"),
    );
    let stderr = stderr(&output);
    let dirs = snapshots(&out);
    assert_eq!(dirs.len(), 1, "exactly one snapshot: {dirs:?}\n{stderr}");
    let snap = &dirs[0];
    let fired = std::fs::read_to_string(snap.join("trigger.txt")).unwrap();
    let tid: u32 = fired
        .lines()
        .nth(1)
        .and_then(|l| l.strip_prefix("  slow call handle_request: thread "))
        .and_then(|l| l.split(',').next())
        .and_then(|tid| tid.parse().ok())
        .unwrap_or_else(|| panic!("{fired}"));
    assert!(
        fired.contains(&format!(
            "\nthreads: only {tid}, the slow calls' (@trigger-thread); the others are left out\n"
        )),
        "{fired}"
    );
    let dat: Vec<String> = std::fs::read_dir(snap)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".dat"))
        .collect();
    assert_eq!(dat, [format!("{tid}.dat")]);
    let trace = common::read_trace_dir(snap);
    let tids: Vec<u32> = trace.threads.iter().map(|t| t.tid).collect();
    assert_eq!(tids, [tid]);
    let uftrace = common::uftrace_calls(snap);
    assert_eq!(uftrace.get("slow_path"), Some(&1));
    let (entered, _) = common::call_counts(&trace)["handle_request"];
    assert_eq!(uftrace.get("handle_request"), Some(&entered));
    std::fs::remove_dir_all(&base).unwrap();
}

/// Calls that fire before a snapshot is written share it (listed each);
/// beyond the rate, triggers are counted, skipped.
#[test]
fn overlapping_triggers_share_a_snapshot_and_the_rate_caps_them() {
    let base = common::temp_dir("env-flight-rate");
    let program = build_service(&base);
    let out = base.join("snaps");
    let output = run(
        &program,
        &["2", "20000"],
        &[
            ("FNTRACE_FLIGHT", "16M"),
            ("FNTRACE_OUTPUT", out.to_str().unwrap()),
            ("FNTRACE_FILTER", "handle_request"),
            ("FNTRACE_FLIGHT_TRIGGER", "handle_request>0ns"),
            ("FNTRACE_FLIGHT_RATE", "2"),
        ],
        &base.join("run"),
    );
    let stderr = stderr(&output);
    let dirs = snapshots(&out);
    assert_eq!(dirs.len(), 2, "the rate: {dirs:?}\n{stderr}");
    let mut listed = 0;
    for dir in &dirs {
        let fired = std::fs::read_to_string(dir.join("trigger.txt")).unwrap();
        let calls = fired
            .lines()
            .filter(|l| l.contains("slow call handle_request"))
            .count();
        assert!(calls >= 1, "{fired}");
        listed += calls;
    }
    assert!(
        listed > 2,
        "calls seen in one drain share a snapshot: {listed}"
    );
    let skipped: u64 = stderr
        .split("trigger snapshot(s) in ")
        .nth(1)
        .and_then(|rest| rest.split(", ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    // Each call fired; those not in the two snapshots were skipped.
    assert_eq!(listed as u64 + skipped, 40_000, "{stderr}");
    std::fs::remove_dir_all(&base).unwrap();
}

/// The output directory is checked when the recorder starts: a window that
/// could not be written at exit is said at start, and nothing runs.
#[test]
fn a_flight_output_that_cannot_hold_the_snapshot_is_refused_at_start() {
    let base = common::temp_dir("env-flight-full");
    let program = build_service(&base);
    let full = base.join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("keep"), "not a trace").unwrap();
    let output = run(
        &program,
        &["2", "100"],
        &[
            ("FNTRACE_FLIGHT", "64M"),
            ("FNTRACE_OUTPUT", full.to_str().unwrap()),
        ],
        &base.join("run"),
    );
    let stderr = stderr(&output);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "fntrace: FNTRACE_FLIGHT with FNTRACE_OUTPUT={}",
            full.display()
        )) && stderr.contains("exists and is not an empty directory")
            && stderr.trim_end().ends_with("the program runs untraced"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&full).unwrap().count(), 1);
    std::fs::remove_dir_all(&base).unwrap();
}

/// The same through the C ABI: the program starts its recorder and sets
/// its trigger (`fntrace_flight_*`), no variable set.
#[test]
fn the_c_abi_starts_the_flight_recorder_and_sets_its_triggers() {
    let base = common::temp_dir("env-flight-capi");
    let program = build_service(&base);
    let out = base.join("snaps");
    let mut command = Command::new(&program);
    command
        .args(["2", "20000", "10000"])
        .arg(&out)
        .current_dir(&base)
        .env("LD_PRELOAD", library());
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") {
            command.env_remove(name);
        }
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with(
            "bad trigger: -22 fntrace_flight_trigger: \"handle_request>15\": \"15\" is not a duration"
        ),
        "{stdout}"
    );
    assert_eq!(
        lines[1], "untrigger again: -2 fntrace_flight_untrigger: no trigger \"lookup\"",
        "{stdout}"
    );
    assert_eq!(lines[2], "handled 40000");
    let dirs = snapshots(&out);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let fired = std::fs::read_to_string(dirs[0].join("trigger.txt")).unwrap();
    assert!(
        fired.contains("slow call handle_request: thread "),
        "{fired}"
    );
    assert_eq!(common::uftrace_calls(&dirs[0]).get("slow_path"), Some(&1));
    std::fs::remove_dir_all(&base).unwrap();
}

/// A program started through a wrapper (`timeout`, `env`, `nice`, `setsid`,
/// `sh -c`, as scripts, units and container entrypoints start services)
/// records as if started directly: the wrapper, with no call site, loads
/// the library too but stays silent and leaves the environment to the
/// program. Once the wrapper took the flight recorder's start-up (and its
/// variables) and the program wrote no snapshot.
#[test]
fn a_wrapper_leaves_the_start_up_to_the_program_it_starts() {
    let base = common::temp_dir("env-wrapper");
    let program = build_service(&base);
    let program_str = program.to_str().unwrap().to_string();
    let wrappers: Vec<Vec<String>> = vec![
        vec!["timeout".into(), "60".into(), program_str.clone()],
        vec!["env".into(), program_str.clone()],
        vec!["nice".into(), program_str.clone()],
        vec!["setsid".into(), "-w".into(), program_str.clone()],
        vec![
            "sh".into(),
            "-c".into(),
            format!("{program_str} \"$@\"; exit $?"),
            "sh".into(),
        ],
        vec![
            "sh".into(),
            "-c".into(),
            format!("exec {program_str} \"$@\""),
            "sh".into(),
        ],
    ];
    for (i, wrapper) in wrappers.iter().enumerate() {
        let out = base.join(format!("snap{i}"));
        let mut command = Command::new(&wrapper[0]);
        command
            .args(&wrapper[1..])
            .args(["2", "300"])
            .current_dir(&base);
        for (name, _) in std::env::vars() {
            if name.starts_with("FNTRACE") {
                command.env_remove(name);
            }
        }
        let output = command
            .env("LD_PRELOAD", library())
            .env("FNTRACE_FLIGHT", "1M")
            .env("FNTRACE_OUTPUT", &out)
            .env("FNTRACE_FILTER", "handle_request")
            .output()
            .unwrap();
        let stderr = stderr(&output);
        assert!(output.status.success(), "{wrapper:?}: {stderr}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "handled 600\n",
            "{wrapper:?}: {stderr}"
        );
        assert!(
            !stderr.contains("no instrumented function"),
            "{wrapper:?}: the wrapper spoke: {stderr}"
        );
        assert_eq!(
            stderr.matches("flight recorder:").count(),
            1,
            "{wrapper:?}: one recorder, the program's: {stderr}"
        );
        let trace = common::read_trace_dir(&out);
        let counts = common::call_counts(&trace);
        assert_eq!(
            counts.get("handle_request"),
            Some(&(600, 600)),
            "{wrapper:?}: {stderr}"
        );
    }
    std::fs::remove_dir_all(&base).unwrap();
}
