//! A `-pg` library loaded with `dlopen`, called and unloaded with
//! `dlclose` while a recording runs (`tests/c/dlclosed_main.c` with
//! `tests/c/dlclosed_plugin.c`): fntrace's directory names every one of
//! its functions, for uftrace 0.13 and for fntrace's reader, as uftrace's
//! own recording does — a `DLOP` line in `task.txt` and the library's
//! `.sym` file, kept: the library file is deleted before the directories
//! are read. A library loaded where an unloaded one was
//! (`tests/c/dlclose_reopen.c`) does not rename the first one's functions
//! in a dump or a flight snapshot: each is named by time, as in the
//! recordings. Through `fntrace record` (the program not linked with
//! fntrace), and through the C API's recording and dump (the program
//! linked with `libfntrace.a`). The replays equal uftrace's exactly, and
//! the calls per function are those the program makes.
//!
//! `cargo test` builds only the rlib of the root crate, so the test builds
//! `libfntrace.a`, `libfntrace.so` and the `fntrace` binary
//! (`common::native`) first.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::native::{self, repo};

/// `plug_run(N)`: N `plug_mid`s of two `plug_leaf`s each.
const N: u64 = 3;

/// The library's functions and their calls.
fn library_calls() -> HashMap<String, u64> {
    [("plug_run", 1), ("plug_mid", N), ("plug_leaf", 2 * N)]
        .into_iter()
        .map(|(name, calls)| (name.to_string(), calls))
        .collect()
}

fn gcc(args: &[&str], out: &Path) {
    let output = Command::new("gcc")
        .args(args)
        .arg("-o")
        .arg(out)
        .output()
        .expect("cannot run gcc; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "gcc {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The library, built into `dir` (a copy each test can delete).
fn build_library(dir: &Path) -> PathBuf {
    let library = dir.join("libdlclosed_plugin.so");
    let source = repo().join("tests/c/dlclosed_plugin.c");
    gcc(
        &["-pg", "-O0", "-fPIC", "-shared", source.to_str().unwrap()],
        &library,
    );
    library
}

/// The program without fntrace, for `fntrace record` and `uftrace record`.
fn build_plain_program(dir: &Path) -> PathBuf {
    let program = dir.join("dlclosed_main");
    let source = repo().join("tests/c/dlclosed_main.c");
    gcc(&["-pg", "-O0", source.to_str().unwrap(), "-ldl"], &program);
    program
}

/// Runs `program LIB N` under `uftrace record` into `dir/uftrace.data`.
fn uftrace_recording(dir: &Path, program: &Path, library: &Path) -> PathBuf {
    let theirs = dir.join("uftrace.data");
    assert!(common::uftrace_record(
        &theirs,
        program,
        &[library.to_str().unwrap(), &N.to_string()]
    ));
    theirs
}

/// Calls per function of fntrace's reading of `dir`.
fn fntrace_calls(dir: &Path) -> HashMap<String, u64> {
    common::call_counts(&common::read_trace_dir(dir))
        .into_iter()
        .map(|(name, (entries, _))| (name, entries))
        .collect()
}

/// `calls` restricted to the library's functions.
fn of_library(calls: &HashMap<String, u64>) -> HashMap<String, u64> {
    calls
        .iter()
        .filter(|(name, _)| name.starts_with("plug_"))
        .map(|(name, calls)| (name.clone(), *calls))
        .collect()
}

/// What every test checks of fntrace's directory `ours` once the library
/// is gone: its functions named, with the calls made, by `uftrace report`
/// and by fntrace's reader (no row is an address); a recording's has a
/// `DLOP` line for it, a recording's and a dump's alike.
fn assert_library_named(ours: &Path, library: &Path) {
    let task = std::fs::read_to_string(ours.join("task.txt")).unwrap();
    let lines: Vec<&str> = task
        .lines()
        .filter(|line| line.starts_with("DLOP "))
        .collect();
    assert_eq!(lines.len(), 1, "{task}");
    assert!(
        lines[0].ends_with(&format!(" libname=\"{}\"", library.display())),
        "{task}"
    );
    let theirs_reading = common::uftrace_calls(ours);
    assert_eq!(
        of_library(&theirs_reading),
        library_calls(),
        "uftrace report"
    );
    let names: Vec<&String> = theirs_reading.keys().collect();
    assert!(
        names.iter().all(|name| !name.starts_with('<')),
        "an address among {names:?}"
    );
    let our_reading = fntrace_calls(ours);
    assert_eq!(
        of_library(&our_reading),
        library_calls(),
        "fntrace's reader"
    );
    assert!(
        our_reading.keys().all(|name| !name.starts_with("0x")),
        "{our_reading:?}"
    );
}

#[test]
fn fntrace_record_names_the_functions_of_a_library_unloaded_before_the_end() {
    let base = common::temp_dir("unloaded-record-cmd");
    std::fs::create_dir_all(&base).unwrap();
    let library = build_library(&base);
    let program = build_plain_program(&base);
    let ours = base.join("fntrace.data");
    let output = native::fntrace_record(
        &base,
        &[
            "-o",
            ours.to_str().unwrap(),
            "--",
            program.to_str().unwrap(),
            library.to_str().unwrap(),
            &N.to_string(),
        ],
    );
    assert!(output.status.success(), "{}", native::stderr_of(&output));
    // Library calls recorded by both (their default): dlopen, dlsym and
    // dlclose among them.
    let theirs = base.join("uftrace.data");
    let status = std::process::Command::new("uftrace")
        .args(["record", "--no-event", "--no-sched", "-d"])
        .arg(&theirs)
        .arg(&program)
        .args([library.to_str().unwrap(), &N.to_string()])
        .status()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(status.success());
    std::fs::remove_file(&library).unwrap();

    assert_library_named(&ours, &library);
    assert_eq!(
        common::uftrace_replay(&ours, None),
        common::uftrace_replay(&theirs, None)
    );
    assert_eq!(common::uftrace_calls(&ours), common::uftrace_calls(&theirs));
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn the_c_api_names_the_functions_of_a_library_unloaded_before_it_stops_or_dumps() {
    let base = common::temp_dir("unloaded-capi");
    std::fs::create_dir_all(&base).unwrap();
    let plain = build_plain_program(&base);
    let linked = base.join("dlclosed_main_linked");
    native::build_c_program(
        &repo().join("tests/c/dlclosed_main.c"),
        &["-pg", "-DWITH_FNTRACE"],
        &linked,
    );
    for mode in ["record", "dump"] {
        let library = build_library(&base);
        let ours = base.join(format!("fntrace-{mode}.data"));
        let output = Command::new(&linked)
            .args([library.to_str().unwrap(), &N.to_string(), mode])
            .arg(&ours)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let theirs = uftrace_recording(&base, &plain, &library);
        std::fs::remove_file(&library).unwrap();

        assert_library_named(&ours, &library);
        // The recording starts in main: what main runs.
        assert_eq!(
            common::uftrace_replay(&ours, None),
            common::without_main(&common::uftrace_replay(&theirs, None)),
            "{mode}"
        );
        std::fs::remove_dir_all(&theirs).unwrap();
    }
    std::fs::remove_dir_all(&base).unwrap();
}

/// What the program of `tests/c/dlclose_reopen.c` runs, as `uftrace
/// replay` shows uftrace's own recording: `lib_a` of the first library,
/// then `foo` of the second, loaded where the first was.
const REOPENED: &str = "\
main() {
  load_call_unload() {
    lib_a() {
      lib_b() {
        lib_c();
      } /* lib_b */
    } /* lib_a */
  } /* load_call_unload */
  load_call_unload() {
    foo() {
      bar();
      bar();
    } /* foo */
  } /* load_call_unload */
} /* main */
";

/// The bases of the `DLOP` lines of `dir`'s `task.txt`.
fn dlop_bases(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("task.txt"))
        .unwrap()
        .lines()
        .filter(|line| line.starts_with("DLOP "))
        .filter_map(|line| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix("base="))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn a_dump_names_a_library_unloaded_and_the_one_loaded_where_it_was_by_time() {
    let base = common::temp_dir("unloaded-reopen");
    std::fs::create_dir_all(&base).unwrap();
    let libraries: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|which| {
            let library = base.join(format!("libreopen_{which}.so"));
            let source = repo().join(format!("tests/c/reopen_{which}.c"));
            gcc(
                &["-pg", "-O0", "-fPIC", "-shared", source.to_str().unwrap()],
                &library,
            );
            library
        })
        .collect();
    let args: Vec<&str> = libraries.iter().map(|l| l.to_str().unwrap()).collect();
    let source = repo().join("tests/c/dlclose_reopen.c");
    let plain = base.join("dlclose_reopen");
    gcc(&["-pg", "-O0", source.to_str().unwrap(), "-ldl"], &plain);
    let linked = base.join("dlclose_reopen_linked");
    native::build_c_program(&source, &["-pg", "-DWITH_FNTRACE"], &linked);

    let theirs = base.join("uftrace.data");
    assert!(common::uftrace_record(&theirs, &plain, &args));
    // The second library was loaded where the first had been.
    let bases = dlop_bases(&theirs);
    assert_eq!(bases.len(), 2, "{bases:?}");
    assert_eq!(bases[0], bases[1]);
    let recorded = base.join("fntrace-record.data");
    let mut record_args = vec![
        "--no-libcall",
        "-o",
        recorded.to_str().unwrap(),
        "--",
        plain.to_str().unwrap(),
    ];
    record_args.extend(&args);
    let output = native::fntrace_record(&base, &record_args);
    assert!(output.status.success(), "{}", native::stderr_of(&output));
    // Dumped with the second library unloaded, and still loaded (its
    // file's lines then left out of the dump's map); a flight snapshot.
    let dumps = ["dump", "dump-loaded", "flight"].map(|mode| {
        let dumped = base.join(format!("fntrace-{mode}.data"));
        let output = Command::new(&linked)
            .args(&args)
            .arg(mode)
            .arg(&dumped)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        dumped
    });
    // Named from the directories alone.
    for library in &libraries {
        std::fs::remove_file(library).unwrap();
    }

    assert_eq!(common::uftrace_replay(&theirs, None), REOPENED);
    assert_eq!(common::uftrace_replay(&recorded, None), REOPENED);
    // A dump or snapshot begins in main (the tracer is enabled there).
    let in_main = common::without_main(REOPENED);
    let calls: HashMap<String, u64> = [
        ("load_call_unload", 2),
        ("lib_a", 1),
        ("lib_b", 1),
        ("lib_c", 1),
        ("foo", 1),
        ("bar", 2),
    ]
    .into_iter()
    .map(|(name, calls)| (name.to_string(), calls))
    .collect();
    let mut recorded_calls = calls.clone();
    recorded_calls.insert("main".to_string(), 1);
    assert_eq!(common::uftrace_calls(&recorded), recorded_calls);
    for dumped in &dumps {
        let what = dumped.display();
        assert_eq!(common::uftrace_replay(dumped, None), in_main, "{what}");
        // Both libraries named by time, as a recording names them.
        let dumped_bases = dlop_bases(dumped);
        assert_eq!(dumped_bases.len(), 2, "{what}: {dumped_bases:?}");
        assert_eq!(dumped_bases[0], dumped_bases[1], "{what}");
        assert_eq!(
            common::uftrace_calls(dumped),
            calls,
            "{what}: uftrace report"
        );
        assert_eq!(fntrace_calls(dumped), calls, "{what}: fntrace's reader");
    }
    std::fs::remove_dir_all(&base).unwrap();
}
