//! Patchable function entries under `fntrace record`: `tests/c/patchable.c`
//! (w_top -> w_mid -> 2 x w_leaf, 1000 times) built with gcc
//! `-fpatchable-function-entry=5` and no `-pg`, at `-O0` and `-O2`, PIE and
//! `-no-pie`, is traced by `fntrace record` and by `uftrace record -P .`;
//! both directories read by `uftrace report` give the same calls per
//! function, exactly, and fntrace's reader agrees. The forms uftrace 0.13
//! does not trace (its run fails or records nothing) are compared with the
//! program's own counts: the NOPs after `endbr64` (`-fcf-protection`), NOPs
//! before the symbol (`=7,2`), LLVM's single NOP (rustc
//! `-Zpatchable-function-entry=5,0`); functions built with `-pg` (or
//! `-pg -mfentry`) as well are counted once; and a form fntrace refuses
//! (`=5,2`: three NOPs at the entry) runs untouched, with no record.

use crate::common;

use common::native::{self, repo};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `tests/c/patchable.c` built with `flags` into `dir/NAME`.
fn build_c(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let program = dir.join(name);
    let output = Command::new("gcc")
        .args(flags)
        .arg(repo().join("tests/c/patchable.c"))
        .arg("-o")
        .arg(&program)
        .output()
        .expect("cannot run gcc; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "gcc {flags:?}: {}",
        native::stderr_of(&output)
    );
    program
}

/// `fntrace record --no-libcall -o DIR PROGRAM` in `base` (uftrace's
/// side is recorded with `--no-libcall` too); the program's output.
fn fntrace_record(base: &Path, dir: &Path, program: &Path) -> String {
    let output = native::fntrace_record(
        base,
        &[
            "--no-libcall",
            "-o",
            dir.to_str().unwrap(),
            program.to_str().unwrap(),
        ],
    );
    assert!(
        output.status.success(),
        "fntrace record {}: {}",
        program.display(),
        native::stderr_of(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The rows of `counts` whose function is one of the program's `w_*`,
/// and `main` (rustc's `main` is `patchable::main`).
fn shape(counts: &HashMap<String, u64>) -> HashMap<String, u64> {
    counts
        .iter()
        .filter(|(name, _)| name.starts_with("w_") || name.ends_with("main"))
        .map(|(name, calls)| (name.trim_start_matches("patchable::").to_string(), *calls))
        .collect()
}

fn expected() -> HashMap<String, u64> {
    [
        ("main", 1),
        ("w_top", 1000),
        ("w_mid", 1000),
        ("w_leaf", 2000),
    ]
    .into_iter()
    .map(|(name, calls)| (name.to_string(), calls))
    .collect()
}

/// Completed calls per function in fntrace's reading of `dir` (entries
/// and exits must pair up).
fn fntrace_calls(dir: &Path) -> HashMap<String, u64> {
    common::call_counts(&common::read_trace_dir(dir))
        .into_iter()
        .map(|(name, (entries, exits))| {
            assert_eq!(entries, exits, "{name}: entries and exits");
            (name, entries)
        })
        .collect()
}

fn equals_uftrace(label: &str, flags: &[&str]) {
    let base = common::temp_dir(&format!("patchable-{label}"));
    let mut all_flags = vec!["-fpatchable-function-entry=5"];
    all_flags.extend(flags);
    let program = build_c(&base, "patchable", &all_flags);
    let ours = base.join("fntrace.data");
    let printed = fntrace_record(&base, &ours, &program);
    assert_eq!(printed, "2004000\n", "the program's own result");

    let theirs = base.join("uftrace.data");
    let status = Command::new("uftrace")
        .args([
            "record",
            "--no-libcall",
            "--no-event",
            "--no-sched",
            "-P",
            ".",
        ])
        .arg("-d")
        .arg(&theirs)
        .arg(&program)
        .current_dir(&base)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(status.success(), "uftrace record -P .");

    let uftrace_theirs = common::uftrace_calls(&theirs);
    let uftrace_ours = common::uftrace_calls(&ours);
    assert_eq!(
        shape(&uftrace_theirs),
        expected(),
        "uftrace's own recording"
    );
    assert_eq!(
        uftrace_ours, uftrace_theirs,
        "uftrace report: fntrace's directory and uftrace's"
    );
    assert_eq!(
        fntrace_calls(&ours),
        uftrace_theirs,
        "fntrace reading its own"
    );
    std::fs::remove_dir_all(&base).unwrap();
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

/// `program` traced by `fntrace record` gives the program's own counts.
fn counts_exactly(base: &Path, program: &Path) {
    let ours = base.join("fntrace.data");
    let printed = fntrace_record(base, &ours, program);
    assert_eq!(printed, "2004000\n", "the program's own result");
    assert_eq!(
        shape(&common::uftrace_calls(&ours)),
        expected(),
        "uftrace report"
    );
    assert_eq!(shape(&fntrace_calls(&ours)), expected(), "fntrace's reader");
}

#[test]
fn entries_after_endbr64_and_nops_before_the_symbol_count_exactly() {
    // uftrace 0.13 records nothing (`-fcf-protection`) or crashes (`=7,2`).
    for (label, flags) in [
        (
            "cet",
            &["-O2", "-fcf-protection", "-fpatchable-function-entry=5"][..],
        ),
        ("m2", &["-O2", "-fpatchable-function-entry=7,2"]),
        (
            "cet-m2",
            &["-O0", "-fcf-protection", "-fpatchable-function-entry=7,2"],
        ),
    ] {
        let base = common::temp_dir(&format!("patchable-{label}"));
        let program = build_c(&base, "patchable", flags);
        counts_exactly(&base, &program);
        std::fs::remove_dir_all(&base).unwrap();
    }
}

#[test]
fn functions_also_built_with_pg_are_counted_once() {
    // `-pg -mfentry` puts the `__fentry__` call after the NOPs: before it
    // was recognised as instrumentation, both were traced (2000 calls of
    // w_top). With `-pg` the mcount call comes after the prologue.
    for (label, flags) in [
        ("pg", &["-O2", "-pg", "-fpatchable-function-entry=5"][..]),
        (
            "fentry",
            &["-O2", "-pg", "-mfentry", "-fpatchable-function-entry=5"],
        ),
    ] {
        let base = common::temp_dir(&format!("patchable-{label}"));
        let program = build_c(&base, "patchable", flags);
        counts_exactly(&base, &program);
        std::fs::remove_dir_all(&base).unwrap();
    }
}

#[test]
fn fewer_than_five_nops_at_the_entry_are_left_alone() {
    // `=5,2`: two NOPs before the symbol, three at the entry: no room for
    // a call. Nothing is written there; the program runs as built.
    let base = common::temp_dir("patchable-short");
    let program = build_c(
        &base,
        "patchable",
        &["-O2", "-fpatchable-function-entry=5,2"],
    );
    let ours = base.join("fntrace.data");
    let output = native::fntrace_record(
        &base,
        &[
            "--no-libcall",
            "-o",
            ours.to_str().unwrap(),
            program.to_str().unwrap(),
        ],
    );
    assert!(output.status.success(), "{}", native::stderr_of(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "2004000\n");
    assert!(
        native::stderr_of(&output).contains("fntrace record: 0 events"),
        "{}",
        native::stderr_of(&output)
    );
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn rust_built_with_patchable_function_entry_counts_exactly() {
    // LLVM's form: one `0f 1f 44 00 08` at each entry of the crate's
    // functions (std's are not rebuilt). uftrace 0.13 records nothing of it.
    let base = common::temp_dir("patchable-rust");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("patchable");
    let output = Command::new("rustc")
        .args(["-Zpatchable-function-entry=5,0", "-C", "opt-level=2"])
        .arg(repo().join("tests/rust/patchable.rs"))
        .arg("-o")
        .arg(&program)
        .env("RUSTC_BOOTSTRAP", "1")
        .output()
        .expect("cannot run rustc");
    assert!(output.status.success(), "{}", native::stderr_of(&output));
    counts_exactly(&base, &program);
    std::fs::remove_dir_all(&base).unwrap();
}
