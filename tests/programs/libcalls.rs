//! Library calls (recorded by `fntrace record` by default, as by
//! uftrace): calls from the executable into shared libraries through its
//! PLT are traced, named after the library functions, by swapping GOT
//! slots (`src/patch/libcall.rs`).
//!
//! - `tests/c/libcall.c` (l_main -> l_ppid -> 300 x getppid, 50 x l_text
//!   -> snprintf/strtol/strtoul, 20 x l_mem -> malloc/free) built with
//!   `gcc -pg`, PIE and `-no-pie`, lazy binding and `-Wl,-z,now` (the GOT
//!   read-only after relocation: RELRO): `fntrace record` and `uftrace
//!   record` (library calls by default in both) of the same binary, both
//!   directories read by `uftrace report` and `uftrace replay`, give the
//!   same calls per function and the same call tree, library calls nested
//!   under their callers at the same depth.
//! - The same program built plainly at `-O2`, its `l_*` functions patched
//!   with `-P` (uftrace: `-P 'l_.*'`).
//! - `-F`/`-N` select library calls by name; `--no-libcall` leaves them
//!   out; a program with no instrumentation at all is recorded with
//!   `--libcall` alone; a program linked with `libfntrace.a` is refused
//!   with a message and runs untraced.
//! - `--nest-libcall`: a plainly built library's calls into the C library
//!   (`tests/c/nest_lib.c`) are recorded too, as uftrace's
//!   `--nest-libcall` records them.
//! - Library calls are on by default under the environment too: the
//!   flight recorder's snapshot (`FNTRACE_FLIGHT`, `FNTRACE_OUTPUT`, no
//!   other variable) of the `-pg` build holds them, with the calls
//!   `uftrace record` counts, and nothing said on stderr;
//!   `FNTRACE_LIBCALL=0` leaves them out; a program linked with
//!   `libfntrace.a` is traced without them, silently.

use crate::common;

use common::native;

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The program's output: l_main's result.
const RESULT: &str = "2940\n";

/// `fntrace record -o DIR ARGS PROGRAM` in `base`, bounded; the program
/// printed its result.
fn record(base: &Path, dir: &Path, program: &Path, args: &[&str]) -> Output {
    let output = common::record_bounded(base, dir, program, args);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        RESULT,
        "fntrace record {args:?} {}",
        program.display()
    );
    output
}

/// `uftrace record ARGS PROGRAM` (library calls by default) in `base`;
/// the program printed `result`.
fn uftrace_record(base: &Path, dir: &Path, program: &Path, args: &[&str], result: &str) {
    let child = Command::new("uftrace")
        .args(["record", "--no-event", "--no-sched"])
        .args(args)
        .arg("-d")
        .arg(dir)
        .arg(program)
        .current_dir(base)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    let what = format!("uftrace record {args:?} {}", program.display());
    let output = common::bounded(child, dir, &what);
    assert!(
        output.status.success(),
        "{what}: {}",
        native::stderr_of(&output)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout), result, "{what}");
}

/// The calls per function `uftrace report` reads in uftrace's directory
/// `theirs`, which it must read in fntrace's `ours` too, and fntrace's
/// reader in `ours` (`label` names the case).
fn same_calls(ours: &Path, theirs: &Path, label: &str) -> HashMap<String, u64> {
    let calls = common::uftrace_calls(theirs);
    assert_eq!(
        common::uftrace_calls(ours),
        calls,
        "uftrace report: fntrace's directory and uftrace's, {label}"
    );
    assert_eq!(
        common::completed_calls(ours),
        calls,
        "fntrace reading its own, {label}"
    );
    calls
}

/// The calls of the program's own functions and of its library calls,
/// whatever the build (what both recorders must find).
fn program_calls() -> HashMap<String, u64> {
    common::call_table(&[
        ("l_main", 1),
        ("l_ppid", 1),
        ("getppid", 300),
        ("l_text", 50),
        ("snprintf", 50),
        ("strtol", 50),
        ("strtoul", 50),
        ("l_mem", 20),
        ("malloc", 20),
        ("free", 20),
        ("printf", 1),
    ])
}

/// The indentation (uftrace replay's depth, 2 spaces a level) of the
/// first line of `replay` that is `line` once trimmed, and the line of
/// the call it is nested in.
fn nesting<'a>(replay: &'a str, line: &str) -> (usize, &'a str) {
    let lines: Vec<&str> = replay.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim() == line)
        .unwrap_or_else(|| panic!("no {line:?} in\n{replay}"));
    let indent = lines[at].len() - lines[at].trim_start().len();
    let parent = lines[..at]
        .iter()
        .rev()
        .find(|l| l.len() - l.trim_start().len() < indent)
        .map_or("", |l| l.trim());
    (indent, parent)
}

/// Records `program` with fntrace (`ours`) and uftrace (`theirs`) and
/// compares what `uftrace report` and `uftrace replay` read in both.
fn equals_uftrace(label: &str, flags: &[&str], fntrace_args: &[&str], uftrace_args: &[&str]) {
    let base = common::temp_dir(&format!("libcalls-{label}"));
    let program = native::build_c(&base, "libcall", label, flags, &[]);
    let ours = base.join("fntrace.data");
    let output = record(&base, &ours, &program, fntrace_args);
    let stderr = native::stderr_of(&output);
    assert!(
        stderr.contains("library functions hooked"),
        "the hook's report: {stderr}"
    );
    let theirs = base.join("uftrace.data");
    uftrace_record(&base, &theirs, &program, uftrace_args, RESULT);

    let uftrace_theirs = same_calls(&ours, &theirs, label);
    let expected = program_calls();
    for (name, calls) in &expected {
        assert_eq!(
            uftrace_theirs.get(name),
            Some(calls),
            "{name} in uftrace's own recording: {uftrace_theirs:?}"
        );
    }
    let replay_ours = common::uftrace_replay(&ours, None);
    let replay_theirs = common::uftrace_replay(&theirs, None);
    for line in ["getppid();", "snprintf();", "malloc();"] {
        let (indent, parent) = nesting(&replay_ours, line);
        assert_eq!(
            (indent, parent),
            nesting(&replay_theirs, line),
            "{line} nested the same way in both"
        );
        assert!(parent.starts_with("l_"), "{line} under {parent}");
    }
    assert_eq!(replay_ours, replay_theirs, "uftrace replay of both");
    std::fs::remove_dir_all(&base).unwrap();
}

/// `fntrace record`'s options for the `-pg` builds: none (library calls
/// are recorded by default, as by uftrace).
const LIBCALL: &[&str] = &[];

#[test]
fn pg_pie_lazy_equals_uftrace() {
    equals_uftrace("pg-pie", &["-pg", "-O0", "-fPIE", "-pie"], LIBCALL, &[]);
}

#[test]
fn pg_pie_bind_now_equals_uftrace() {
    let flags = ["-pg", "-O0", "-fPIE", "-pie", "-Wl,-z,now"];
    equals_uftrace("pg-pie-now", &flags, LIBCALL, &[]);
}

#[test]
fn pg_no_pie_lazy_equals_uftrace() {
    equals_uftrace(
        "pg-nopie",
        &["-pg", "-O0", "-fno-pie", "-no-pie"],
        LIBCALL,
        &[],
    );
}

#[test]
fn pg_no_pie_bind_now_equals_uftrace() {
    let flags = ["-pg", "-O0", "-fno-pie", "-no-pie", "-Wl,-z,now"];
    equals_uftrace("pg-nopie-now", &flags, LIBCALL, &[]);
}

#[test]
fn o2_patched_at_run_time_equals_uftrace() {
    let fntrace_args = ["--libcall", "-P", "l_*"];
    equals_uftrace("o2-pie", &["-O2"], &fntrace_args, &["-P", "l_.*"]);
    let flags = ["-O2", "-fno-pie", "-no-pie", "-Wl,-z,now"];
    equals_uftrace("o2-nopie-now", &flags, &fntrace_args, &["-P", "l_.*"]);
}

#[test]
fn filters_select_library_calls_by_name() {
    let base = common::temp_dir("libcalls-filters");
    // Not PIE, lazy binding: `call mcount@plt`, whose slot the loader
    // binds at the first call (the lazy hook must follow the PLT entry).
    let program = native::build_c(
        &base,
        "libcall",
        "pg",
        &["-pg", "-O0", "-fno-pie", "-no-pie"],
        &[],
    );
    let only = base.join("only.data");
    record(&base, &only, &program, &["--libcall", "-F", "getppid"]);
    assert_eq!(
        common::completed_calls(&only),
        common::call_table(&[("getppid", 300)])
    );
    assert_eq!(
        common::uftrace_calls(&only),
        common::call_table(&[("getppid", 300)])
    );

    let without = base.join("without.data");
    record(&base, &without, &program, &["--libcall", "-N", "getppid"]);
    let mut expected = common::completed_calls(&without);
    assert_eq!(expected.remove("getppid"), None, "getppid left out");
    assert_eq!(
        expected.get("malloc"),
        Some(&20),
        "other library calls kept"
    );
    assert_eq!(expected.get("l_ppid"), Some(&1));

    // With --no-libcall: the program's functions only, each found at its
    // first call (`mcount@plt` is bound then). Read by uftrace, which
    // names them from the executable (the recording's header, written
    // before those calls, names none of them).
    let plain = base.join("plain.data");
    record(&base, &plain, &program, &["--no-libcall"]);
    let calls = common::uftrace_calls(&plain);
    assert_eq!(calls.get("getppid"), None, "{calls:?}");
    assert_eq!(calls.get("l_ppid"), Some(&1), "{calls:?}");
    assert_eq!(calls.get("l_text"), Some(&50), "{calls:?}");
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn library_calls_of_a_program_with_no_instrumentation() {
    // Plain gcc -O2: no -pg, no -P. `fntrace record` runs it with
    // --libcall alone (it refuses a program with nothing to trace), and
    // the trace holds the library calls only.
    let base = common::temp_dir("libcalls-uninstrumented");
    let program = native::build_c(&base, "libcall", "o2-plain", &["-O2"], &[]);
    let dir = base.join("fntrace.data");
    record(&base, &dir, &program, &["--libcall"]);
    let expected = common::call_table(&[
        ("getppid", 300),
        ("snprintf", 50),
        ("strtol", 50),
        ("strtoul", 50),
        ("malloc", 20),
        ("free", 20),
        // No __cxa_atexit: that one is gcrt1's (`atexit(_mcleanup)`), -pg only.
        ("printf", 1),
    ]);
    assert_eq!(
        common::completed_calls(&dir),
        expected,
        "fntrace reading its own"
    );
    assert_eq!(common::uftrace_calls(&dir), expected, "uftrace report");
    std::fs::remove_dir_all(&base).unwrap();
}

/// Runs `program` (which prints [`RESULT`]) in `base` with
/// `libfntrace.so` preloaded and only the `FNTRACE_*` variables `vars`.
fn run_preloaded(base: &Path, program: &Path, vars: &[(&str, &str)]) -> Output {
    native::build_libraries();
    let mut command = Command::new(program);
    command.current_dir(base);
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") {
            command.env_remove(name);
        }
    }
    let output = command
        .env("LD_PRELOAD", native::profile_dir().join("libfntrace.so"))
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    let stderr = native::stderr_of(&output);
    assert!(output.status.success(), "{vars:?}: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        RESULT,
        "{vars:?}: {stderr}"
    );
    output
}

#[test]
fn library_calls_appear_in_a_flight_snapshot_with_no_extra_variable() {
    // One thread; the whole run fits the 1 MiB window (about 2,000
    // events), written at exit (no trigger).
    let base = common::temp_dir("libcalls-flight");
    let program = native::build_c(
        &base,
        "libcall",
        "flight",
        &["-pg", "-O0", "-fPIE", "-pie"],
        &[],
    );
    let ours = base.join("snapshot");
    let output = run_preloaded(
        &base,
        &program,
        &[
            ("FNTRACE_FLIGHT", "1M"),
            ("FNTRACE_OUTPUT", ours.to_str().unwrap()),
        ],
    );
    // The default is quiet: the flight recorder's line at exit alone.
    let stderr = native::stderr_of(&output);
    assert!(
        stderr.lines().count() == 1 && stderr.starts_with("fntrace: flight recorder: "),
        "{stderr}"
    );
    let theirs = base.join("uftrace.data");
    uftrace_record(&base, &theirs, &program, &[], RESULT);
    let calls = same_calls(&ours, &theirs, "flight snapshot");
    for (name, count) in program_calls() {
        assert_eq!(calls.get(&name), Some(&count), "{name}: {calls:?}");
    }

    // FNTRACE_LIBCALL=0: the program's own functions alone.
    let plain = base.join("snapshot-no-libcall");
    let output = run_preloaded(
        &base,
        &program,
        &[
            ("FNTRACE_FLIGHT", "1M"),
            ("FNTRACE_OUTPUT", plain.to_str().unwrap()),
            ("FNTRACE_LIBCALL", "0"),
        ],
    );
    assert!(!native::stderr_of(&output).contains("library"));
    let own = common::call_table(&[
        ("main", 1),
        ("l_main", 1),
        ("l_ppid", 1),
        ("l_text", 50),
        ("l_mem", 20),
    ]);
    assert_eq!(common::completed_calls(&plain), own, "FNTRACE_LIBCALL=0");
    assert_eq!(
        common::uftrace_calls(&plain),
        own,
        "FNTRACE_LIBCALL=0, uftrace report"
    );
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn refused_in_a_program_linked_with_the_static_library() {
    let base = common::temp_dir("libcalls-static");
    let mut link = vec![native::static_lib().to_str().unwrap().to_string()];
    link.extend(native::LINK_LIBS.iter().map(|s| s.to_string()));
    let link: Vec<&str> = link.iter().map(String::as_str).collect();
    let program = native::build_c(&base, "libcall", "static", &["-pg", "-O0"], &link);
    let output = Command::new(&program)
        .env("FNTRACE", "graph")
        .env("FNTRACE_LIBCALL", "1")
        .current_dir(&base)
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout), RESULT);
    let stderr = native::stderr_of(&output);
    assert!(
        stderr.contains("FNTRACE_LIBCALL=1:")
            && stderr.contains("is linked with libfntrace.a")
            && stderr.contains("the program runs untraced"),
        "{stderr}"
    );
    // Not asked for by name: the default, not possible here, is left out
    // without a word, and the program is traced.
    let output = Command::new(&program)
        .env("FNTRACE", "graph")
        .env("FNTRACE_REPORT", "1")
        .env_remove("FNTRACE_LIBCALL")
        .current_dir(&base)
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout), RESULT);
    let stderr = native::stderr_of(&output);
    assert!(
        !stderr.contains("library calls") && !stderr.contains("untraced"),
        "{stderr}"
    );
    assert!(stderr.contains("l_text"), "the latency table: {stderr}");
    assert!(!stderr.contains("getppid"), "no library call: {stderr}");
    std::fs::remove_dir_all(&base).unwrap();
}

/// `tests/c/nest_libcall.c` built with `gcc -pg` (PIE, lazy binding) and
/// linked with `tests/c/nest_lib.c` built plainly as `libnest.so`.
fn nest_program(base: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(base).unwrap();
    let library = base.join("libnest.so");
    let source = native::repo().join("tests/c/nest_lib.c");
    native::gcc(&[
        "-O2",
        "-fPIC",
        "-shared",
        "-o",
        library.to_str().unwrap(),
        source.to_str().unwrap(),
    ]);
    let dir = base.to_str().unwrap();
    let rpath = format!("-Wl,-rpath,{dir}");
    let link = ["-L", dir, "-lnest", rpath.as_str()];
    native::build_c(base, "nest_libcall", "pg", &["-pg", "-O0"], &link)
}

/// The nested program's result.
const NEST_RESULT: &str = "517\n";

/// `fntrace record ARGS` and `uftrace record ARGS` of the nested program:
/// the calls per function uftrace reads in each directory, and fntrace's
/// reading of its own, must be equal (and are returned), and so must
/// `uftrace replay`'s call trees.
fn nest_equals_uftrace(
    base: &Path,
    program: &Path,
    label: &str,
    args: &[&str],
) -> HashMap<String, u64> {
    let ours = base.join(format!("{label}-fntrace.data"));
    let output = common::record_bounded(base, &ours, program, args);
    assert_eq!(String::from_utf8_lossy(&output.stdout), NEST_RESULT);
    let theirs = base.join(format!("{label}-uftrace.data"));
    uftrace_record(base, &theirs, program, args, NEST_RESULT);
    let calls = same_calls(&ours, &theirs, label);
    assert_eq!(
        common::uftrace_replay(&ours, None),
        common::uftrace_replay(&theirs, None),
        "uftrace replay, {label}"
    );
    calls
}

#[test]
fn library_calls_are_recorded_by_default_and_nested_ones_when_asked() {
    let base = common::temp_dir("libcalls-nested");
    let program = nest_program(&base);
    // Default, as uftrace's: the executable's library calls only.
    let default = nest_equals_uftrace(&base, &program, "default", &[]);
    assert_eq!(
        default,
        common::call_table(&[
            ("main", 1),
            ("n_main", 1),
            ("getppid", 7),
            ("n_lib_ppid", 10),
            ("n_lib_parse", 5),
            ("printf", 1),
        ])
    );
    // --nest-libcall: the library's calls into the C library too, nested
    // under the library functions making them.
    let nested = nest_equals_uftrace(&base, &program, "nested", &["--nest-libcall"]);
    assert_eq!(
        nested,
        common::call_table(&[
            ("main", 1),
            ("n_main", 1),
            ("getppid", 307),
            ("n_lib_ppid", 10),
            ("n_lib_parse", 5),
            ("strtol", 5),
            ("strtoul", 5),
            ("printf", 1),
        ])
    );
    // --no-libcall: the program's own functions alone.
    let plain = nest_equals_uftrace(&base, &program, "none", &["--no-libcall"]);
    assert_eq!(plain, common::call_table(&[("main", 1), ("n_main", 1)]));
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn nested_library_calls_of_a_cpp_program_equal_uftraces() {
    // `tests/c/shapes.cpp` (g++ -pg, 2 threads): libstdc++'s own calls
    // into the C library (operator new's malloc, the threads' creation)
    // are nested library calls.
    let base = common::temp_dir("libcalls-nested-cpp");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("shapes");
    let source = native::repo().join("tests/c/shapes.cpp");
    let status = Command::new("g++")
        .args(["-pg", "-O0", "-pthread", "-o"])
        .arg(&program)
        .arg(&source)
        .status()
        .unwrap();
    assert!(status.success(), "g++ {}", source.display());
    let ours = base.join("fntrace.data");
    let output = common::record_bounded(&base, &ours, &program, &["--nest-libcall"]);
    let theirs = base.join("uftrace.data");
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    uftrace_record(&base, &theirs, &program, &["--nest-libcall"], &printed);
    // Read by uftrace (fntrace's reader names C++ functions with their
    // parameters: tests/programs/record_command.rs compares those).
    let calls = common::uftrace_calls(&theirs);
    assert_eq!(
        common::uftrace_calls(&ours),
        calls,
        "uftrace report of both"
    );
    assert_eq!(calls.get("shapes::Square::area"), Some(&2000), "{calls:?}");
    assert_eq!(calls.get("operator new"), Some(&7), "{calls:?}");
    assert_eq!(calls.get("malloc"), Some(&4), "{calls:?}");
    std::fs::remove_dir_all(&base).unwrap();
}

/// `tests/c/setjmp.c` (gcc -pg) run with `args` under `fntrace record`
/// and `uftrace record` (library calls on in both) in `base`: the
/// program printed `result` each time; both directories.
fn record_setjmp(base: &Path, args: &[&str], result: &str) -> (PathBuf, PathBuf) {
    let program = base.join("setjmp");
    if !program.exists() {
        let source = native::repo().join("tests/c/setjmp.c");
        let status = Command::new("gcc")
            .args(["-pg", "-O1", "-o"])
            .arg(&program)
            .arg(&source)
            .status()
            .unwrap();
        assert!(status.success(), "gcc {}", source.display());
    }
    let ours = base.join(format!("fntrace-{}.data", args.join("-")));
    let theirs = base.join(format!("uftrace-{}.data", args.join("-")));
    let mut fntrace = Command::new(native::cli_with_library());
    fntrace
        .arg("record")
        .arg("-o")
        .arg(&ours)
        .arg(&program)
        .args(args)
        .env_remove("FNTRACE_LIB");
    let mut uftrace = Command::new("uftrace");
    uftrace
        .args(["record", "--no-event", "--no-sched", "-d"])
        .arg(&theirs)
        .arg(&program)
        .args(args);
    for (mut command, dir) in [(fntrace, &ours), (uftrace, &theirs)] {
        let child = command
            .current_dir(base)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let output = common::bounded(child, dir, "recording tests/c/setjmp.c");
        assert!(output.status.success(), "{}", native::stderr_of(&output));
        assert_eq!(String::from_utf8_lossy(&output.stdout), result);
    }
    (ours, theirs)
}

/// What `tests/c/setjmp.c 20 N` calls, each call counted once (its two
/// `atoi`s are `strtol`s).
fn setjmp_program_calls() -> HashMap<String, u64> {
    common::call_table(&[
        ("__monstartup", 1),
        ("__cxa_atexit", 1),
        ("main", 1),
        ("strtol", 2),
        ("sj_protected", 20),
        ("_setjmp", 20),
        ("sj_work", 20),
        ("printf", 1),
    ])
}

/// `setjmp` (glibc's `_setjmp`, through the PLT) is recorded, as uftrace
/// records it: without `longjmp`, every function's calls equal uftrace's,
/// `_setjmp` included (Lua's protected calls are such calls).
#[test]
fn setjmp_is_recorded_as_uftrace_records_it() {
    let base = common::temp_dir("libcalls-setjmp");
    std::fs::create_dir_all(&base).unwrap();
    let (ours, theirs) = record_setjmp(&base, &["20", "0"], "210\n");
    let calls = same_calls(&ours, &theirs, "setjmp without longjmp");
    assert_eq!(calls, setjmp_program_calls());
    std::fs::remove_dir_all(&base).unwrap();
}

/// With `longjmp`, `setjmp` returns a second time, to where it saved its
/// return address: fntrace never hooks that return (the call is reported
/// whole at its entry), so the program runs on as untraced. Each call is
/// counted once; uftrace counts the second returns as calls too, and drops
/// the frames `longjmp` left, which fntrace ends where the next return
/// finds them gone (docs/runtime-patching.md).
#[test]
fn setjmp_that_returns_twice_runs_on() {
    let base = common::temp_dir("libcalls-longjmp");
    std::fs::create_dir_all(&base).unwrap();
    // Rounds 5, 10, 15 and 20 leave through longjmp: 1..20 less twice those.
    let (ours, theirs) = record_setjmp(&base, &["20", "5"], "110\n");
    let ours = common::completed_calls(&ours);
    assert_eq!(ours, setjmp_program_calls());
    let theirs = common::uftrace_calls(&theirs);
    assert_eq!(theirs.get("_setjmp"), Some(&24), "{theirs:?}");
    assert_eq!(theirs.get("sj_protected"), Some(&20), "{theirs:?}");
    std::fs::remove_dir_all(&base).unwrap();
}
