//! The C ABI (`include/fntrace.h`) from a real C program: `tests/c/capi_prog.c`
//! built with `gcc -pg` (PIE) and `gcc -pg -mfentry` and linked with
//! `libfntrace.a` by the README's command line. Four threads make known
//! numbers of calls; the directory the program writes (`fntrace_dump`, or
//! the streaming recorder) is read back by fntrace's reader and by the real
//! `uftrace report`, with exact counts. Bad values return negative codes
//! that `fntrace_last_error` explains. No `gmon.out` is written.
//!
//! `cargo test` builds only the rlib of the root crate, so the test builds
//! its `staticlib` and `cdylib` outputs (`cargo build --lib`, same profile
//! and target directory) before using them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The libraries a program linked with `libfntrace.a` needs besides it
/// (what `rustc --print native-static-libs` lists); the README's link line
/// names the same.
const LINK_LIBS: &[&str] = &["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"];

const THREADS: u64 = 4;
const ITERATIONS: u64 = 1000;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/<profile>`: the directory holding this test's `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// Builds the library's `staticlib` and `cdylib` outputs with this test's
/// profile (`cargo test` builds only the rlib the tests link), once.
fn build_libraries() {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let dir = profile_dir();
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "--lib", "--manifest-path"])
            .arg(repo().join("Cargo.toml"));
        match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                cargo.arg("--release");
            }
            Some(profile) => {
                cargo.args(["--profile", profile]);
            }
            None => panic!("no profile directory above {}", dir.display()),
        }
        cargo.env("CARGO_TARGET_DIR", dir.parent().unwrap());
        let output = cargo.output().expect("cannot run cargo");
        assert!(
            output.status.success(),
            "cargo build --lib: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

fn static_lib() -> PathBuf {
    build_libraries();
    let lib = profile_dir().join("libfntrace.a");
    assert!(
        lib.exists(),
        "{} is missing: cargo builds it with the rlib (crate-type staticlib)",
        lib.display()
    );
    lib
}

/// Builds `tests/c/capi_prog.c` with `flags` into `out`, linked as the
/// README says.
fn build(flags: &[&str], out: &Path) {
    let output = Command::new("gcc")
        .args(flags)
        .args(["-O0", "-fPIE", "-pie"])
        .arg(repo().join("tests/c/capi_prog.c"))
        .arg("-I")
        .arg(repo().join("include"))
        .arg("-o")
        .arg(out)
        .arg(static_lib())
        .args(LINK_LIBS)
        .output()
        .expect("cannot run gcc; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "gcc {flags:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
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
        ("enable_unknown", -libc::ENOENT, "no_such_tracer"),
        ("disable_unknown", -libc::ENOENT, "fntrace_disable"),
        ("enable_null", -libc::EINVAL, "tracer is NULL"),
        ("filter_empty_item", -libc::EINVAL, "empty glob"),
        ("filter_bare_bang", -libc::EINVAL, "empty glob"),
        ("filter_space", -libc::EINVAL, "' '"),
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
