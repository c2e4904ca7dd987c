//! Run-time entry patching (`fntrace record -P`, uftrace's `-P`) of
//! programs built with no instrumentation at all.
//!
//! - `tests/c/runtime_patch.c` (w_top -> w_mid -> 2 x w_leaf, 1000 times)
//!   built with plain gcc at `-O0` and `-O2`, PIE and `-no-pie`: `fntrace
//!   record -P 'w_*'` and `uftrace record -P 'w_.*'` (a regex for uftrace)
//!   of the same binary, both directories read by `uftrace report`, give
//!   the same calls per function, exactly; fntrace's reader agrees.
//!   (At `-O2`, gcc's `-fipa-ra` keeps main's loop counter in `%rcx`
//!   across `call w_top`: the return trampoline must preserve it.)
//! - `tests/c/tail_entries.c` at `-O2`, PIE and not: functions made of a
//!   tail call (`movslq %edx,%rdx; jmp f`, `jmp *hook(%rip)` through a
//!   pointer set at run time), as SQLite's `sqlite3_bind_int` and
//!   `sqlite3_free`, patched: exact counts in fntrace's and uftrace's
//!   readings (uftrace 0.13's own `-P` leaves all but one unpatched).
//! - `tests/c/rotated_loops.c` at `-O2`, PIE and not: a function whose
//!   first instruction jumps over padding into its loop's test (SQLite's
//!   `sqlite3ExprCanBeNull`), patched: exact counts, as uftrace's own.
//! - Refusals: `r_short` (3 bytes) and `r_spin` (its loop jumps back to its
//!   first instruction) are reported with their reasons, not patched, and
//!   the program still computes its result.
//! - `tests/c/patchable_stress.c` with `-DPATCH_AT_RUN_TIME`, `-O2`, linked with `libfntrace.a`:
//!   16 busy threads call the w_* functions while main patches their
//!   entries (`fntrace_patch_functions`) and toggles tracers (graph alone:
//!   the fast entry; graph and function: the generic trampoline); exact
//!   counts when quiescent, under both protocols.
//! - `tests/c/runtime_patch_late.c`: functions patched while the graph
//!   tracer is enabled are selected at once.
//! - `-P '*'` patches the C library too: the recording holds the
//!   program's one thread from `__libc_start_main` on, and nothing
//!   fntrace's own threads ran or its constructors and exit handler
//!   called; `_start` is refused (its "return address" is `argc`).

use crate::common;

use common::native::{self, repo};

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// A program patched with `-P` in the comparisons with uftrace.
struct Patched {
    /// Its source, `tests/c/NAME.c`.
    name: &'static str,
    /// fntrace's glob and uftrace's regex for the same functions.
    glob: &'static str,
    regex: &'static str,
    /// What it prints, and the calls of each patched function.
    stdout: &'static str,
    calls: &'static [(&'static str, u64)],
    /// Whether uftrace 0.13's own `-P` recording has every one of them.
    uftrace_patches_all: bool,
}

/// w_top -> w_mid -> 2 x w_leaf, 1000 times.
const WORK: Patched = Patched {
    name: "runtime_patch",
    glob: "w_*",
    regex: "w_.*",
    stdout: "2004000\n",
    calls: &[("w_top", 1000), ("w_mid", 1000), ("w_leaf", 2000)],
    uftrace_patches_all: true,
};

fn equals_uftrace(label: &str, flags: &[&str]) {
    patched_equals_uftrace(&WORK, label, flags);
}

fn patched_equals_uftrace(case: &Patched, label: &str, flags: &[&str]) {
    let base = common::temp_dir(&format!("runtime-patch-{}-{label}", case.name));
    let program = native::build_c(&base, case.name, label, flags, &["-pthread"]);
    let ours = base.join("fntrace.data");
    let output = common::record_patched(&base, &ours, &program, case.glob);
    assert_eq!(String::from_utf8_lossy(&output.stdout), case.stdout);
    let stderr = native::stderr_of(&output);
    let patched = format!(
        "-P {}: {} functions patched, 0 refused",
        case.glob,
        case.calls.len()
    );
    assert!(stderr.contains(&patched), "{stderr}");

    let theirs = base.join("uftrace.data");
    let status = Command::new("uftrace")
        .args(["record", "--no-libcall", "--no-event", "--no-sched"])
        .args(["-P", case.regex, "-d"])
        .arg(&theirs)
        .arg(&program)
        .current_dir(&base)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(status.success(), "uftrace record -P '{}'", case.regex);

    let expected = common::call_table(case.calls);
    let uftrace_theirs = common::uftrace_calls(&theirs);
    if case.uftrace_patches_all {
        assert_eq!(uftrace_theirs, expected, "uftrace's own recording");
    } else {
        assert!(
            uftrace_theirs
                .iter()
                .all(|(f, n)| expected.get(f) == Some(n)),
            "uftrace's own recording: {uftrace_theirs:?}"
        );
    }
    assert_eq!(
        common::uftrace_calls(&ours),
        expected,
        "uftrace report of fntrace's directory"
    );
    assert_eq!(
        common::completed_calls(&ours),
        expected,
        "fntrace reading its own"
    );
    std::fs::remove_dir_all(&base).unwrap();
}

/// Functions made of a tail call, as SQLite's `sqlite3_bind_int` (`movslq;
/// jmp`) and `sqlite3_free` (`jmp *hook(%rip)`) at -O2.
const TAIL_CALLS: Patched = Patched {
    name: "tail_entries",
    glob: "tc_*",
    regex: "tc_.*",
    stdout: "21052500 0\n",
    calls: &[
        ("tc_bind_int", 1000),
        ("tc_bind_int64", 1000),
        ("tc_free", 1000),
        ("tc_release", 1000),
    ],
    // uftrace 0.13 patches only tc_bind_int64 here (the others leave
    // through a jump within their first bytes): its reading of fntrace's
    // directory is the comparison then.
    uftrace_patches_all: false,
};

#[test]
fn functions_made_of_a_tail_call_equal_uftrace_pie_o2() {
    patched_equals_uftrace(&TAIL_CALLS, "pie-o2", &["-O2", "-fPIE", "-pie"]);
}

#[test]
fn functions_made_of_a_tail_call_equal_uftrace_no_pie_o2() {
    patched_equals_uftrace(&TAIL_CALLS, "no-pie-o2", &["-O2", "-fno-pie", "-no-pie"]);
}

/// Functions whose first instruction jumps over the padding before a
/// loop that starts with its test (`jmp TEST; nopw`: `rl_kind`, as
/// SQLite's `sqlite3ExprCanBeNull` at -O2), and one whose jump ends its
/// first five bytes (`rl_back`: `mov %rdi,%rax; jmp TEST`).
const ROTATED_LOOPS: Patched = Patched {
    name: "rotated_loops",
    glob: "rl_*",
    regex: "rl_.*",
    stdout: "9000\n",
    calls: &[("rl_kind", 1000), ("rl_back", 1000)],
    uftrace_patches_all: true,
};

#[test]
fn loops_entered_by_a_jump_equal_uftrace_pie_o2() {
    patched_equals_uftrace(&ROTATED_LOOPS, "pie-o2", &["-O2", "-fPIE", "-pie"]);
}

#[test]
fn loops_entered_by_a_jump_equal_uftrace_no_pie_o2() {
    patched_equals_uftrace(&ROTATED_LOOPS, "no-pie-o2", &["-O2", "-fno-pie", "-no-pie"]);
}

#[test]
fn gcc_pie_o0_equals_uftrace() {
    equals_uftrace("pie-o0", &["-O0", "-fPIE", "-pie"]);
}

#[test]
fn gcc_pie_o2_equals_uftrace() {
    equals_uftrace("pie-o2", &["-O2", "-fPIE", "-pie"]);
}

#[test]
fn gcc_no_pie_o0_equals_uftrace() {
    equals_uftrace("nopie-o0", &["-O0", "-fno-pie", "-no-pie"]);
}

#[test]
fn gcc_no_pie_o2_equals_uftrace() {
    equals_uftrace("nopie-o2", &["-O2", "-fno-pie", "-no-pie"]);
}

/// `-P '*'` patches glibc's functions as well as the program's, so that
/// whatever fntrace itself calls on the program's thread outside its
/// guard, or the C library runs in a thread fntrace starts before its
/// first line (`__ctype_init`, `_setjmp`, Rust's thread start), would be
/// recorded. Once, the writer's thread was in the directory and its
/// constructors' `dlsym` lookups came before `_start`, `pthread_join` at
/// exit. `_start`, which the loader jumps to with `argc` where a return
/// address would be, is refused: hooking its exit overwrote `argc`, and
/// this program, seeing arguments, started 16 threads that never stop
/// (in 2 of 3 runs).
#[test]
fn every_function_patched_records_nothing_of_fntrace() {
    let base = common::temp_dir("runtime-patch-everything");
    let program = native::build_c(&base, "runtime_patch", "O2", &["-O2"], &["-pthread"]);
    let dir = base.join("fntrace.data");
    let output = common::record_patched(&base, &dir, &program, "*");
    let stderr = native::stderr_of(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "2004000\n");
    // One thread: the program's (single-threaded without arguments).
    let tids = common::uftrace_tids(&dir);
    assert_eq!(tids.len(), 1, "threads recorded: {tids:?}; {stderr}");
    assert!(
        stderr.contains("_start not patched: the program's entry point"),
        "{stderr}"
    );
    // Every call at depth 0 is the program's start.
    let replay = common::uftrace(&["replay", "--no-pager", "-f", "none"], &dir);
    let outermost: Vec<&str> = replay
        .lines()
        .filter(|line| !line.starts_with(' ') && line.contains('('))
        .collect();
    assert!(
        !outermost.is_empty()
            && outermost
                .iter()
                .all(|line| line.starts_with("__libc_start_main(")),
        "calls outside _start: {outermost:?}"
    );
    let calls = common::uftrace_calls(&dir);
    for theirs in [
        "pthread_create",
        "pthread_join",
        "setenv",
        "_dl_find_dso_for_object",
    ] {
        assert_eq!(
            calls.get(theirs),
            None,
            "{theirs} recorded: fntrace's own call"
        );
    }
    for (function, count) in [
        ("w_top", 1000),
        ("w_mid", 1000),
        ("w_leaf", 2000),
        ("main", 1),
    ] {
        assert_eq!(calls.get(function), Some(&count), "{function}: {calls:?}");
    }
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn unsafe_functions_are_refused_with_their_reasons() {
    let base = common::temp_dir("runtime-patch-refused");
    let program = native::build_c(&base, "runtime_patch", "o2", &["-O2"], &["-pthread"]);
    let ours = base.join("fntrace.data");
    let output = common::record_patched(&base, &ours, &program, "r_*");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "2004000\n",
        "the refused functions still run as built"
    );
    let stderr = native::stderr_of(&output);
    for line in [
        "-P r_*: 0 functions patched, 2 refused",
        "-P: r_short not patched: shorter than 5 bytes",
        "-P: r_spin not patched: a branch targets its first bytes",
    ] {
        assert!(stderr.contains(line), "{line:?} in {stderr}");
    }
    assert_eq!(
        common::completed_calls(&ours),
        HashMap::new(),
        "nothing traced"
    );
    std::fs::remove_dir_all(&base).unwrap();
}

/// A glob that selects none of the program's functions is said so, in one
/// line, by the runtime (`fntrace record` refuses it before the program
/// runs: `--force` runs it all the same): fntrace's own functions
/// (`fntrace_*` matches the C API's in the preloaded `libfntrace.so`) are
/// not the program's, and are neither patched nor listed as refused.
#[test]
fn a_glob_that_selects_no_function_of_the_program_is_said_so() {
    let base = common::temp_dir("runtime-patch-no-match");
    let program = native::build_c(&base, "runtime_patch", "o2", &["-O2"], &["-pthread"]);
    for glob in ["fntrace_*", "no_such_function_*"] {
        let ours = base.join(format!("fntrace-{}.data", glob.len()));
        let output = common::record_bounded(
            &base,
            &ours,
            &program,
            &["--force", "--no-libcall", "-P", glob],
        );
        assert_eq!(String::from_utf8_lossy(&output.stdout), "2004000\n");
        let stderr = native::stderr_of(&output);
        let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("-P")).collect();
        assert_eq!(
            lines,
            [format!(
                "fntrace: -P {glob}: no function of the program matches (an inlined \
                 function has no entry of its own)"
            )],
            "{stderr}"
        );
        assert_eq!(common::completed_calls(&ours), HashMap::new(), "{glob}");
    }
    std::fs::remove_dir_all(&base).unwrap();
}

/// `FNTRACE_PATCH_FUNCTIONS` and `FNTRACE_LIBCALL` with no tracer and no
/// output (a service that patches at start-up and is traced later through
/// `fntrace ctl`): the entries are patched and the imports hooked all the
/// same, their sites NOPs, and the program computes its result. (They
/// were ignored, silently, unless `FNTRACE` or `FNTRACE_OUTPUT` was set.)
#[test]
fn patched_at_start_up_with_no_tracer_asked_for() {
    let base = common::temp_dir("runtime-patch-no-tracer");
    let program = native::build_c(&base, "runtime_patch", "o2", &["-O2"], &["-pthread"]);
    native::build_libraries();
    let output = Command::new(&program)
        .env("LD_PRELOAD", native::profile_dir().join("libfntrace.so"))
        .env("FNTRACE_PATCH_FUNCTIONS", "w_*")
        .env("FNTRACE_LIBCALL", "1")
        .env_remove("FNTRACE")
        .env_remove("FNTRACE_OUTPUT")
        .output()
        .unwrap();
    let stderr = native::stderr_of(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "2004000\n");
    for line in ["-P w_*: 3 functions patched, 0 refused", "library calls: "] {
        assert!(stderr.contains(line), "{line:?} in {stderr}");
    }
    std::fs::remove_dir_all(&base).unwrap();
}

/// The static library and what it needs, for programs linked with it.
fn link_static() -> Vec<String> {
    let mut link = vec![native::static_lib().to_str().unwrap().to_string()];
    link.extend(native::LINK_LIBS.iter().map(|s| s.to_string()));
    link
}

#[test]
fn patched_while_a_tracer_is_enabled_is_selected_at_once() {
    let base = common::temp_dir("runtime-patch-late");
    let link = link_static();
    let link: Vec<&str> = link.iter().map(String::as_str).collect();
    let include = repo().join("include");
    let flags = ["-O2", "-I", include.to_str().unwrap()];
    let program = native::build_c(&base, "runtime_patch_late", "o2", &flags, &link);
    let dir = base.join("late.data");
    let output = Command::new(&program).arg(&dir).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "refused 0\ndump 0\n",
        "{}",
        native::stderr_of(&output)
    );
    let expected = common::call_table(&[("w_leaf", 100)]);
    assert_eq!(common::completed_calls(&dir), expected);
    assert_eq!(common::uftrace_calls(&dir), expected);
    std::fs::remove_dir_all(&base).unwrap();
}

const THREADS: u64 = 16;
const K: u64 = 1000;

/// One stress run with `toggles` toggles under `protocol`.
fn stress_run(base: &Path, program: &Path, protocol: &str, toggles: u32, index: usize) {
    let fast = base.join(format!("{protocol}-{index}-fast"));
    let generic = base.join(format!("{protocol}-{index}-generic"));
    let output = Command::new(program)
        .arg(THREADS.to_string())
        .arg(toggles.to_string())
        .arg(K.to_string())
        .arg(&fast)
        .arg(&generic)
        .env("FNTRACE_PATCH", protocol)
        .current_dir(base)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("done"),
        "{protocol} run {index}: {:?}\n{stdout}\n{}",
        output.status,
        native::stderr_of(&output)
    );
    assert!(
        stdout.contains("refused 1\n"),
        "w_tiny alone refused: {stdout}"
    );
    let busy_calls: u64 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("calls "))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(busy_calls > 0, "the busy threads ran");
    let expected = common::call_table(&[
        ("w_top", THREADS * K),
        ("w_mid", THREADS * K),
        ("w_leaf", 2 * THREADS * K),
    ]);
    for dir in [&fast, &generic] {
        assert_eq!(
            common::completed_calls(dir),
            expected,
            "fntrace reading {}",
            dir.display()
        );
        assert_eq!(
            common::uftrace_calls(dir),
            expected,
            "uftrace report -d {}",
            dir.display()
        );
    }
}

fn stress(protocol: &str) {
    let base = common::temp_dir(&format!("runtime-patch-stress-{protocol}"));
    let link = link_static();
    let link: Vec<&str> = link.iter().map(String::as_str).collect();
    let include = repo().join("include");
    let flags = [
        "-O2",
        "-fPIE",
        "-pie",
        "-DPATCH_AT_RUN_TIME",
        "-I",
        include.to_str().unwrap(),
    ];
    let program = native::build_c(&base, "patchable_stress", "o2-run-time", &flags, &link);
    for index in 0..4 {
        stress_run(&base, &program, protocol, 3, index);
    }
    stress_run(&base, &program, protocol, 60, 4);
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn toggled_under_16_threads_stop_the_world() {
    stress("stop");
}

#[test]
fn toggled_under_16_threads_breakpoint() {
    stress("breakpoint");
}
