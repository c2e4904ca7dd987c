//! `fntrace record -- CMD`: a C program that is not linked with fntrace
//! (`tests/c/family.c`, built `gcc -pg` as PIE and `gcc -pg -mfentry`, at
//! `-O0` and `-O2`) runs under the preloaded `libfntrace.so`. Four threads,
//! a fork, an exec of the child, `_exit`: every process's calls land in one
//! directory, and the counts per function equal those of `uftrace record`
//! on the same program, both directories read by the real `uftrace
//! report`, and fntrace's own reader agrees. The option letters mean what
//! uftrace's do (`-F`, `-N`, `-D`). Bad arguments fail with exit status 2
//! and one line; the program's own exit status comes back.
//!
//! `cargo test` builds only the rlib of the root crate, so the test builds
//! `libfntrace.so` and the `fntrace` binary (`common::native`) first.

use crate::common;

use common::native::{self, repo};

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `fntrace record --no-libcall ARGS` in `cwd`: these tests compare with
/// `uftrace record --no-libcall` (library calls, on by default in both,
/// are compared in `tests/programs/libcalls.rs` and `tests/programs/forked_child_frames.rs`).
fn fntrace_record(cwd: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["--no-libcall"];
    all.extend(args);
    native::fntrace_record(cwd, &all)
}

const N: u64 = 2000;

/// `tests/c/family.c` built with `flags` into `dir/family`.
fn build_family(dir: &Path, flags: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let program = dir.join("family");
    let output = Command::new("gcc")
        .args(flags)
        .arg(repo().join("tests/c/family.c"))
        .args(["-lpthread", "-o"])
        .arg(&program)
        .output()
        .expect("cannot run gcc; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "gcc {flags:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    program
}

/// Per-function calls `uftrace report` shows (C++ names in its default,
/// simple form, as fntrace shows them), without its `<ADDR>` rows (uftrace
/// names an unknown parent frame so; see the README's differences).
fn named_calls(dir: &Path) -> HashMap<String, u64> {
    common::uftrace(&["report", "--no-pager"], dir)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let name = fields.get(5..)?.join(" ");
            let address = name
                .strip_prefix('<')
                .and_then(|rest| rest.strip_suffix('>'))
                .is_some_and(|hex| hex.chars().all(|c| c.is_ascii_hexdigit()));
            (!address).then_some((name, fields[4].parse().ok()?))
        })
        .collect()
}

/// Per-function completed calls in fntrace's reading of `dir`.
fn fntrace_calls(dir: &Path) -> HashMap<String, u64> {
    common::call_counts(&common::read_trace_dir(dir))
        .into_iter()
        .map(|(name, (entries, _))| (name, entries))
        .collect()
}

/// The family's counts, for the given `uftrace record` options, in
/// fntrace's directory and uftrace's, exactly.
fn family_equals_uftrace(
    variant: &str,
    flags: &[&str],
    options: &[&str],
    sessions: usize,
    expected: &[(&str, u64)],
) {
    family_equals_uftrace_options(variant, flags, options, Some(options), sessions, expected);
}

/// [`family_equals_uftrace`] with `fntrace record` options `ours_options`
/// and `uftrace record` options `options` (none: uftrace has no
/// equivalent; its reading of fntrace's directory is still checked).
fn family_equals_uftrace_options(
    variant: &str,
    flags: &[&str],
    ours_options: &[&str],
    options: Option<&[&str]>,
    sessions: usize,
    expected: &[(&str, u64)],
) {
    let base = common::temp_dir(&format!("record-cmd-{variant}"));
    let program = build_family(&base, flags);
    let n = N.to_string();
    let ours = base.join("fntrace.data");
    let mut args: Vec<&str> = ours_options.to_vec();
    args.extend([
        "-o",
        ours.to_str().unwrap(),
        "--",
        program.to_str().unwrap(),
        "family",
        &n,
    ]);
    let output = fntrace_record(&base, &args);
    assert!(
        output.status.success(),
        "fntrace record: {}",
        native::stderr_of(&output)
    );
    // The parent (with its forked child, as in uftrace's recordings) and
    // the exec'd program: a program with no events adds no session.
    assert!(
        native::stderr_of(&output).contains(&format!("in {sessions} session(s)")),
        "{}",
        native::stderr_of(&output)
    );
    assert!(!base.join("gmon.out").exists(), "gprof ran");

    let expected: HashMap<String, u64> =
        expected.iter().map(|(f, n)| (f.to_string(), *n)).collect();
    if let Some(options) = options {
        let theirs = base.join("uftrace.data");
        let status = Command::new("uftrace")
            .args(["record", "--no-libcall", "--no-event", "--no-sched"])
            .args(options)
            .arg("-d")
            .arg(&theirs)
            .arg(&program)
            .args(["family", &n])
            .current_dir(&base)
            .status()
            .expect("cannot run uftrace; CI installs it (.ci/run)");
        assert!(status.success());
        assert_eq!(named_calls(&theirs), expected, "uftrace's own recording");
        assert_eq!(
            fntrace_calls(&theirs),
            expected,
            "fntrace reading uftrace's"
        );
    }
    assert_eq!(named_calls(&ours), expected, "uftrace reading fntrace's");
    assert_eq!(fntrace_calls(&ours), expected, "fntrace reading its own");
    std::fs::remove_dir_all(&base).unwrap();
}

/// All of the family: main twice (parent, exec'd program), run 4 + 1 + 1 +
/// 1 times, worker 4 times.
fn whole_family() -> Vec<(&'static str, u64)> {
    vec![
        ("main", 2),
        ("worker", 4),
        ("run", 7),
        ("leaf", 5 * N),
        ("child_leaf", N),
        ("exec_leaf", N),
    ]
}

#[test]
fn records_a_process_family_as_uftrace_does_pie_o0() {
    family_equals_uftrace(
        "pie-o0",
        &["-pg", "-O0", "-fPIE", "-pie"],
        &[],
        2,
        &whole_family(),
    );
}

/// The builds the replay comparisons run in: PIE, `-O2`, and both with
/// `-mfentry`.
const BUILDS: [(&str, &[&str]); 4] = [
    ("pie-o0", &["-pg", "-O0", "-fPIE", "-pie"]),
    ("o2", &["-pg", "-O2"]),
    ("fentry-o0", &["-pg", "-mfentry", "-O0"]),
    ("fentry-o2", &["-pg", "-mfentry", "-O2"]),
];

/// One program run by `fntrace record` and by `uftrace record`.
struct BothRecorded {
    /// `fntrace record`'s run.
    ours_run: Output,
    /// `uftrace record`'s run.
    theirs_run: Output,
    /// `uftrace replay -f none` of fntrace's directory, task by task.
    ours: Vec<String>,
    /// The same of uftrace's directory.
    theirs: Vec<String>,
}

/// `program args` recorded by `fntrace record` and by `uftrace record`
/// (`--no-libcall`), into directories under `base` named after `label`.
fn record_both(base: &Path, program: &Path, args: &[&str], label: &str) -> BothRecorded {
    let ours = base.join(format!("fntrace-{label}.data"));
    let mut record_args = vec!["-o", ours.to_str().unwrap(), program.to_str().unwrap()];
    record_args.extend(args);
    let ours_run = fntrace_record(base, &record_args);
    let theirs = base.join(format!("uftrace-{label}.data"));
    let theirs_run = Command::new("uftrace")
        .args(["record", "--no-libcall", "--no-event", "--no-sched", "-d"])
        .arg(&theirs)
        .arg(program)
        .args(args)
        .current_dir(base)
        .output()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    BothRecorded {
        ours: common::uftrace_replays_by_thread(&ours, ""),
        theirs: common::uftrace_replays_by_thread(&theirs, ""),
        ours_run,
        theirs_run,
    }
}

/// `n` calls of `name` at `indent`, as `uftrace replay -f none` shows them.
fn leaves(name: &str, n: usize, indent: &str) -> String {
    format!("{indent}{name}();\n").repeat(n)
}

/// The replay of a program that ran `run(leaf, n)` in `main` and ended
/// there without returning (`_exit`, or an exec that uftrace does not
/// follow), then `more` (the exec'd program, indented).
fn main_ran_leaves(n: usize, more: &str, open: &[&str]) -> String {
    let mut replay = format!(
        "main() {{\n  run() {{\n{}  }} /* run */\n{more}",
        leaves("leaf", n, "    ")
    );
    replay.push_str(
        "\nuftrace stopped tracing with remaining functions\n\
         ================================================\n\
         task: TID\n",
    );
    for (depth, name) in open.iter().enumerate().rev() {
        replay.push_str(&format!("[{depth}] {name}\n"));
    }
    replay.push('\n');
    replay
}

/// The exec'd program's calls (`family exec n`) at `indent`.
fn exec_program(n: usize, indent: &str) -> String {
    format!(
        "{indent}main() {{\n{indent}  run() {{\n{}{indent}  }} /* run */\n{indent}}} /* main */\n",
        leaves("exec_leaf", n, &format!("{indent}    "))
    )
}

/// Fork and exec, task by task: every thread of the parent, and the
/// forked child (its calls before the exec, then the exec'd program's),
/// replay exactly as in uftrace's own recording of the same program.
#[test]
fn each_task_of_a_process_family_replays_as_uftrace_does() {
    const N: usize = 200;
    for (variant, flags) in BUILDS {
        let base = common::temp_dir(&format!("record-cmd-replay-{variant}"));
        let program = build_family(&base, flags);
        let both = record_both(&base, &program, &["family", &N.to_string()], "family");
        assert!(
            both.ours_run.status.success(),
            "{}",
            native::stderr_of(&both.ours_run)
        );
        assert!(
            both.theirs_run.status.success(),
            "{}",
            native::stderr_of(&both.theirs_run)
        );
        // The parent, its four threads, the child.
        assert_eq!(both.theirs.len(), 6, "{variant}: {:?}", both.theirs);
        assert_eq!(both.ours, both.theirs, "{variant}");
        // Session by session: the child stays in its parent's session
        // until it execs (uftrace graph shows each session's calls).
        let layout = |dir: &str| -> (Vec<String>, usize) {
            let dir = base.join(dir);
            let task = std::fs::read_to_string(dir.join("task.txt")).unwrap();
            let kinds = task
                .lines()
                .map(|line| line.split(' ').next().unwrap_or_default().to_string())
                .collect();
            let maps = std::fs::read_dir(&dir)
                .unwrap()
                .filter(|entry| {
                    let name = entry.as_ref().unwrap().file_name();
                    let name = name.to_string_lossy();
                    name.starts_with("sid-") && name.ends_with(".map")
                })
                .count();
            (kinds, maps)
        };
        let ours_layout = layout("fntrace-family.data");
        assert_eq!(ours_layout, layout("uftrace-family.data"), "{variant}");
        assert_eq!(
            ours_layout,
            (
                ["SESS", "TASK", "TASK", "TASK", "TASK", "TASK", "FORK", "SESS", "TASK"]
                    .map(String::from)
                    .to_vec(),
                2
            ),
            "{variant}"
        );
        let graph = |dir: &str| -> Vec<String> {
            let text = common::uftrace(&["graph", "--no-pager"], &base.join(dir));
            let mut sessions: Vec<String> = text
                .split("# Function Call Graph for")
                .map(|session| {
                    session
                        .lines()
                        .skip(1) // names the session
                        .map(|line| line.split_once(':').map_or(line, |(_, tree)| tree))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .collect();
            sessions.sort();
            sessions
        };
        assert_eq!(
            graph("fntrace-family.data"),
            graph("uftrace-family.data"),
            "{variant}"
        );
        let child = format!(
            "run() {{\n{}}} /* run */\n{}",
            leaves("child_leaf", N, "  "),
            exec_program(N, "")
        );
        assert_eq!(
            both.ours.iter().filter(|task| **task == child).count(),
            1,
            "{variant}: {:?}",
            both.ours
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}

/// `_exit` and death by SIGSEGV or abort(): the replay is uftrace's, calls
/// running at the end open. uftrace record itself exits with status 2
/// when the program dies of a signal (after a backtrace of its own);
/// `fntrace record` with the signal's 128 + N, as a shell reports it.
#[test]
fn exit_paths_replay_as_uftrace_does() {
    const N: usize = 3;
    for (variant, flags) in BUILDS {
        let base = common::temp_dir(&format!("record-cmd-exits-{variant}"));
        let program = build_family(&base, flags);
        for (mode, signal) in [
            ("_exit", 0),
            ("segv", libc::SIGSEGV),
            ("abort", libc::SIGABRT),
        ] {
            let both = record_both(&base, &program, &[mode, &N.to_string()], mode);
            let (ours_status, theirs_status) = match signal {
                0 => (0, 0),
                signal => (128 + signal, 2),
            };
            assert_eq!(
                both.ours_run.status.code(),
                Some(ours_status),
                "{variant} {mode}"
            );
            assert_eq!(
                both.theirs_run.status.code(),
                Some(theirs_status),
                "{variant} {mode}"
            );
            let expected = match signal {
                0 => main_ran_leaves(N, "", &["main"]),
                _ => main_ran_leaves(N, "  crash() {\n", &["main", "crash"]),
            };
            assert_eq!(
                both.ours,
                std::slice::from_ref(&expected),
                "{variant} {mode}"
            );
            assert_eq!(both.theirs, [expected], "{variant} {mode}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}

/// `execl`, `execlp`, `execle` (variadic: glibc calls its internal
/// `execve`): the session ends before the exec, so the calls just before
/// it are there, then the exec'd program's. uftrace follows `execl` and
/// `execlp`; it does not follow `execle` with an environment that lacks
/// its variables (fntrace adds its own to it), so its recording ends at
/// the exec.
#[test]
fn execl_execlp_execle_keep_the_calls_before_the_exec() {
    const N: usize = 200;
    for (variant, flags) in BUILDS {
        let base = common::temp_dir(&format!("record-cmd-execl-{variant}"));
        let program = build_family(&base, flags);
        for mode in ["execl", "execlp", "execle"] {
            let both = record_both(&base, &program, &[mode, &N.to_string()], mode);
            assert!(
                both.ours_run.status.success(),
                "{}",
                native::stderr_of(&both.ours_run)
            );
            assert!(
                both.theirs_run.status.success(),
                "{}",
                native::stderr_of(&both.theirs_run)
            );
            assert!(
                native::stderr_of(&both.ours_run).contains("in 2 session(s)"),
                "{variant} {mode}: {}",
                native::stderr_of(&both.ours_run)
            );
            let exec_program = exec_program(N, "  ");
            let followed = main_ran_leaves(N, &exec_program, &["main"]);
            assert_eq!(
                both.ours,
                std::slice::from_ref(&followed),
                "{variant} {mode}"
            );
            let theirs = match mode {
                "execle" => main_ran_leaves(N, "", &["main"]),
                _ => followed,
            };
            assert_eq!(both.theirs, [theirs], "{variant} {mode}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}

/// fntrace's fatal-signal handler reads as the default action through
/// `sigaction` and `signal`; uftrace's SIGSEGV and SIGABRT handlers show.
#[test]
fn fatal_signals_read_as_their_default_action() {
    let base = common::temp_dir("record-cmd-dispositions");
    let program = build_family(&base, &["-pg", "-O0"]);
    let both = record_both(&base, &program, &["dispositions", "0"], "dispositions");
    assert!(
        both.ours_run.status.success(),
        "{}",
        native::stderr_of(&both.ours_run)
    );
    assert!(
        both.theirs_run.status.success(),
        "{}",
        native::stderr_of(&both.theirs_run)
    );
    let fatal = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
    ];
    let lines = |handled: &[i32]| -> String {
        fatal
            .iter()
            .map(|signo| match handled.contains(signo) {
                true => format!("{signo} set set\n"),
                false => format!("{signo} DFL DFL\n"),
            })
            .collect()
    };
    assert_eq!(String::from_utf8_lossy(&both.ours_run.stdout), lines(&[]));
    assert_eq!(
        String::from_utf8_lossy(&both.theirs_run.stdout),
        lines(&[libc::SIGSEGV, libc::SIGABRT])
    );
    assert_eq!(both.ours, both.theirs);
    assert_eq!(both.ours, ["main() {\n  leaf();\n} /* main */\n"]);
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn records_a_process_family_as_uftrace_does_fentry_o2() {
    family_equals_uftrace(
        "fentry-o2",
        &["-pg", "-mfentry", "-O2"],
        &[],
        2,
        &whole_family(),
    );
}

/// fntrace's -F and -N select functions (the others keep their NOP), where
/// uftrace's select subtrees: fntrace's `-F run` is uftrace's `-F run -D
/// 1`; its `-N run` has no uftrace equivalent (uftrace's -N drops the
/// callees too); `-D` is the same.
fn family_equals_uftrace_with(
    variant: &str,
    ours: &[&str],
    theirs: Option<&[&str]>,
    sessions: usize,
    expected: &[(&str, u64)],
) {
    family_equals_uftrace_options(variant, &["-pg", "-O0"], ours, theirs, sessions, expected);
}

#[test]
fn filter_notrace_and_depth_as_uftrace_options() {
    family_equals_uftrace_with(
        "filter",
        &["-F", "run"],
        Some(&["-F", "run", "-D", "1"]),
        2,
        &[("run", 7)],
    );
    family_equals_uftrace_with(
        "notrace",
        &["-N", "run"],
        None,
        2,
        &[
            ("main", 2),
            ("worker", 4),
            ("leaf", 5 * N),
            ("child_leaf", N),
            ("exec_leaf", N),
        ],
    );
    // -D 2: two levels (main > run, worker > run); the forked child starts
    // inside main, so its run is the second level too.
    family_equals_uftrace_with(
        "depth",
        &["-D", "2"],
        Some(&["-D", "2"]),
        2,
        &[("main", 2), ("worker", 4), ("run", 7)],
    );
}

/// `fntrace record` of the `-pg` family program in MODE with N, in a new
/// temporary directory named after `tag`: that directory, the trace
/// directory, and the recorder's stderr (the run must succeed).
fn record_family_mode(tag: &str, mode: &str) -> (PathBuf, PathBuf, String) {
    let base = common::temp_dir(tag);
    let program = build_family(&base, &["-pg", "-O0"]);
    let dir = base.join("t.data");
    let n = N.to_string();
    let output = fntrace_record(
        &base,
        &[
            "-o",
            dir.to_str().unwrap(),
            program.to_str().unwrap(),
            mode,
            &n,
        ],
    );
    let stderr = native::stderr_of(&output);
    assert!(output.status.success(), "{stderr}");
    (base, dir, stderr)
}

#[test]
fn underscore_exit_keeps_the_last_events() {
    let (base, dir, _) = record_family_mode("record-cmd-exit", "_exit");
    let expected: HashMap<String, u64> = [("main", 1), ("run", 1), ("leaf", N)]
        .into_iter()
        .map(|(f, n)| (f.to_string(), n))
        .collect();
    assert_eq!(fntrace_calls(&dir), expected);
    // main never returned: its entry is there, open.
    let counts = common::call_counts(&common::read_trace_dir(&dir));
    assert_eq!(counts.get("main"), Some(&(1, 0)));
    std::fs::remove_dir_all(&base).unwrap();
}

/// A child forked while another thread held the loader's lock (inside a
/// `dl_iterate_phdr` callback) inherits the lock held by a thread it does
/// not have: its part of the recording must not wait for the loader (it
/// hung there, and `_exit` gave up on its last drain after 2 s).
#[test]
fn a_child_forked_under_the_loader_lock_records_its_calls() {
    let (base, dir, stderr) = record_family_mode("record-cmd-forklocked", "forklocked");
    assert!(!stderr.contains("did not finish"), "{stderr}");
    let calls = fntrace_calls(&dir);
    assert_eq!(calls.get("child_leaf"), Some(&N), "{calls:?}\n{stderr}");
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_fatal_signal_keeps_the_last_events() {
    let base = common::temp_dir("record-cmd-fatal");
    let program = build_family(&base, &["-pg", "-O0"]);
    let n = N.to_string();
    for (mode, signal) in [("segv", libc::SIGSEGV), ("abort", libc::SIGABRT)] {
        let dir = base.join(format!("{mode}.data"));
        let output = fntrace_record(
            &base,
            &[
                "-o",
                dir.to_str().unwrap(),
                program.to_str().unwrap(),
                mode,
                &n,
            ],
        );
        // The program died of its signal, as without fntrace.
        assert_eq!(
            output.status.code(),
            Some(128 + signal),
            "{}",
            native::stderr_of(&output)
        );
        let counts = common::call_counts(&common::read_trace_dir(&dir));
        assert_eq!(counts.get("leaf"), Some(&(N, N)), "{mode}: {counts:?}");
        assert_eq!(counts.get("run"), Some(&(1, 1)), "{mode}: {counts:?}");
        // Running at the crash: entered, never returned.
        assert_eq!(counts.get("crash"), Some(&(1, 0)), "{mode}: {counts:?}");
        assert_eq!(counts.get("main"), Some(&(1, 0)), "{mode}: {counts:?}");
    }
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn flight_mode_writes_the_last_events_of_the_program_at_exit() {
    let base = common::temp_dir("record-cmd-flight");
    let program = build_family(&base, &["-pg", "-O0"]);
    let dir = base.join("flight.data");
    let n = N.to_string();
    let output = fntrace_record(
        &base,
        &[
            "--flight",
            "64M",
            "-o",
            dir.to_str().unwrap(),
            program.to_str().unwrap(),
            "family",
            &n,
        ],
    );
    assert!(output.status.success(), "{}", native::stderr_of(&output));
    // The window holds everything (64 MiB), of the parent only.
    let expected: HashMap<String, u64> = [("main", 1), ("worker", 4), ("run", 5), ("leaf", 5 * N)]
        .into_iter()
        .map(|(f, n)| (f.to_string(), n))
        .collect();
    assert_eq!(fntrace_calls(&dir), expected);
    assert_eq!(named_calls(&dir), expected);
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn the_programs_exit_status_comes_back() {
    let base = common::temp_dir("record-cmd-status");
    let program = build_family(&base, &["-pg", "-O0"]);
    let output = fntrace_record(&base, &[program.to_str().unwrap(), "status", "3"]);
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        native::stderr_of(&output)
    );
    // The default directory, in the working directory.
    assert_eq!(
        fntrace_calls(&base.join("fntrace.data")).get("leaf"),
        Some(&1)
    );
    // Again: the old trace becomes fntrace.data.old.
    let output = fntrace_record(&base, &[program.to_str().unwrap(), "status", "0"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        native::stderr_of(&output)
    );
    assert!(base.join("fntrace.data.old/info").is_file());
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn bad_arguments_fail_with_one_clear_line() {
    let base = common::temp_dir("record-cmd-bad");
    std::fs::create_dir_all(base.join("not-a-trace")).unwrap();
    std::fs::write(base.join("not-a-trace/notes.txt"), "mine").unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&[], "CMD"),
        (&["-D", "0", "true"], "--depth"),
        (&["--flight", "lots", "true"], "not a size"),
        (
            &["--lib", "/nonexistent/libfntrace.so", "true"],
            "is not a file",
        ),
        (
            &["-o", "not-a-trace", "--force", "true"],
            "is not a trace directory",
        ),
        (&["/nonexistent/program"], "cannot run /nonexistent/program"),
        // As uftrace, a program without call sites is refused before it
        // runs: it could record nothing.
        (
            &["-o", "not-a-trace", "true"],
            "has no instrumented functions",
        ),
    ];
    for (args, says) in cases {
        let output = fntrace_record(&base, args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            native::stderr_of(&output)
        );
        assert!(
            native::stderr_of(&output).contains(says),
            "{args:?}: {}",
            native::stderr_of(&output)
        );
    }
    // Nothing of the user's was touched.
    assert_eq!(
        std::fs::read_to_string(base.join("not-a-trace/notes.txt")).unwrap(),
        "mine"
    );
    std::fs::remove_dir_all(&base).unwrap();
}

/// `program args` under `fntrace record` and `uftrace record`: calls per
/// function equal, uftrace's names demangled as fntrace shows them (uftrace
/// 0.13 cannot demangle Rust's v0 names), functions `compared` selects.
fn program_equals_uftrace(
    base: &Path,
    program: &Path,
    args: &[&str],
    compared: impl Fn(&str) -> bool,
) {
    let ours = base.join("fntrace.data");
    let mut record_args = vec!["-o", ours.to_str().unwrap(), program.to_str().unwrap()];
    record_args.extend(args);
    let output = fntrace_record(base, &record_args);
    assert!(output.status.success(), "{}", native::stderr_of(&output));
    let theirs = base.join("uftrace.data");
    assert!(common::uftrace_record(&theirs, program, args));
    let demangled = |calls: HashMap<String, u64>| -> HashMap<String, u64> {
        calls
            .into_iter()
            .map(|(name, n)| (fntrace_format::demangle(&name), n))
            .filter(|(name, _)| compared(name))
            .collect()
    };
    let expected = demangled(named_calls(&theirs));
    assert!(expected.len() > 3, "uftrace recorded {expected:?}");
    assert_eq!(demangled(named_calls(&ours)), expected);
    let mut ours_read = fntrace_calls(&ours);
    ours_read.retain(|name, _| compared(name));
    assert_eq!(ours_read, expected);
}

#[test]
fn records_cpp_built_with_gxx_pg_as_uftrace_does() {
    let base = common::temp_dir("record-cmd-cpp");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("shapes");
    let output = Command::new("g++")
        .args(["-pg", "-O2", "-pthread"])
        .arg(repo().join("tests/c/shapes.cpp"))
        .arg("-o")
        .arg(&program)
        .output()
        .expect("cannot run g++; CI installs it (.ci/run)");
    assert!(output.status.success(), "{}", native::stderr_of(&output));
    program_equals_uftrace(&base, &program, &["1000"], |_| true);
    std::fs::remove_dir_all(&base).unwrap();
}

/// `tests/rust/NAME.rs` built with `rustc -Zinstrument-mcount` into
/// `dir/NAME`.
fn build_rust(dir: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let program = dir.join(name);
    // rustc calls mcount through the PLT (`call mcount@plt`): a form the
    // scan follows to libfntrace.so's mcount.
    let output = Command::new("rustc")
        .args([
            "-Zinstrument-mcount",
            "-C",
            "opt-level=2",
            "-C",
            "force-frame-pointers=yes",
        ])
        .arg(repo().join(format!("tests/rust/{name}.rs")))
        .arg("-o")
        .arg(&program)
        .env("RUSTC_BOOTSTRAP", "1")
        .output()
        .expect("cannot run rustc");
    assert!(output.status.success(), "{}", native::stderr_of(&output));
    program
}

#[test]
fn records_rust_built_with_instrument_mcount_as_uftrace_does() {
    let base = common::temp_dir("record-cmd-rust");
    let program = build_rust(&base, "two_threads");
    // Every function, std's allocations before `main` included (its
    // stack-overflow handler's: std sets it up because fntrace's
    // fatal-signal handler reads as the default action).
    program_equals_uftrace(&base, &program, &["1000"], |_| true);
    std::fs::remove_dir_all(&base).unwrap();
}

/// A Rust program keeps std's own handling of a crash under `fntrace
/// record`: a stack overflow is reported by std (which aborts), and a fault
/// std's handler gives back to the default action still drains the last
/// calls.
#[test]
fn a_rust_program_crashes_as_without_fntrace_and_keeps_its_last_calls() {
    let base = common::temp_dir("record-cmd-rust-crash");
    let program = build_rust(&base, "crash");
    for (mode, signal) in [("segv", libc::SIGSEGV), ("overflow", libc::SIGABRT)] {
        let plain = Command::new(&program).arg(mode).output().unwrap();
        let dir = base.join(format!("{mode}.data"));
        let output = fntrace_record(
            &base,
            &["-o", dir.to_str().unwrap(), program.to_str().unwrap(), mode],
        );
        // fntrace record exits with 128 + the signal, as a shell reports
        // the program's death.
        assert_eq!(plain.status.signal(), Some(signal), "{mode}");
        assert_eq!(output.status.code(), Some(128 + signal), "{mode}");
        for run in [&plain, &output] {
            assert_eq!(
                native::stderr_of(run).contains("has overflowed its stack"),
                mode == "overflow",
                "{mode}: {}",
                native::stderr_of(run)
            );
        }
        let counts = common::call_counts(&common::read_trace_dir(&dir));
        assert_eq!(counts.get("crash::leaf"), Some(&(100, 100)), "{mode}");
        assert_eq!(counts.get("crash::main"), Some(&(1, 0)), "{mode}");
        let crash = (mode == "segv").then_some(&(1, 0));
        assert_eq!(counts.get("crash::crash"), crash, "{mode}");
    }
    std::fs::remove_dir_all(&base).unwrap();
}
