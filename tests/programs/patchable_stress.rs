//! Patchable entries toggled under load: `tests/c/patchable_stress.c`,
//! built with gcc `-O2 -fpatchable-function-entry=5` (gcc's five one-byte
//! NOPs, no `-pg`) and linked with `libfntrace.a`. 16 threads call the
//! patchable functions from before the first enable, so the first write
//! over the one-byte NOPs happens while they run (a thread is often
//! stopped between two of them: before the stop-the-world protocol moved
//! such threads past the NOPs and checked every stopped thread's program
//! counter, 5 of 12 such runs crashed with SIGSEGV or SIGILL); main switches tracers on and off (graph alone: the fast fentry
//! entry; graph and function: the generic `__fentry__` trampoline;
//! function alone). Then, quiescent, every thread makes exactly K calls
//! with each path, and the dumps hold exactly 16 K calls of `w_top` and
//! `w_mid` and 32 K of `w_leaf`, read by fntrace and by `uftrace report`.
//! Under both protocols (`FNTRACE_PATCH=stop|breakpoint`): 6 runs of 3
//! toggles each (the first-write hazard, once per process) and one of 90.

use crate::common;

use common::native::{self, repo};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const THREADS: u64 = 16;
const K: u64 = 1000;

/// The stress program, built once per test into `dir`.
fn build(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let program = dir.join("patchable_stress");
    let output = Command::new("gcc")
        .args(["-O2", "-fPIE", "-pie", "-fpatchable-function-entry=5"])
        .arg(repo().join("tests/c/patchable_stress.c"))
        .arg("-I")
        .arg(repo().join("include"))
        .arg("-o")
        .arg(&program)
        .arg(native::static_lib())
        .args(native::LINK_LIBS)
        .output()
        .expect("cannot run gcc; CI installs it (.ci/run)");
    assert!(output.status.success(), "{}", native::stderr_of(&output));
    program
}

/// The `w_*` rows of `counts`.
fn w_calls(counts: HashMap<String, u64>) -> HashMap<String, u64> {
    counts
        .into_iter()
        .filter(|(name, _)| name.starts_with("w_"))
        .collect()
}

fn expected() -> HashMap<String, u64> {
    [
        ("w_top", THREADS * K),
        ("w_mid", THREADS * K),
        ("w_leaf", 2 * THREADS * K),
    ]
    .into_iter()
    .map(|(name, calls)| (name.to_string(), calls))
    .collect()
}

/// One run with `toggles` toggles under `protocol`; checks both dumps.
fn run(base: &Path, program: &Path, protocol: &str, toggles: u32, index: usize) {
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
    let busy_calls: u64 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("calls "))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(busy_calls > 0, "the busy threads ran");
    for dir in [&fast, &generic] {
        let ours = common::call_counts(&common::read_trace_dir(dir))
            .into_iter()
            .map(|(name, (entries, exits))| {
                assert_eq!(entries, exits, "{name} in {}", dir.display());
                (name, entries)
            })
            .collect();
        assert_eq!(
            w_calls(ours),
            expected(),
            "fntrace reading {}",
            dir.display()
        );
        assert_eq!(
            w_calls(common::uftrace_calls(dir)),
            expected(),
            "uftrace report -d {}",
            dir.display()
        );
    }
}

fn stress(protocol: &str) {
    let base = common::temp_dir(&format!("patchable-stress-{protocol}"));
    let program = build(&base);
    for index in 0..6 {
        run(&base, &program, protocol, 3, index);
    }
    run(&base, &program, protocol, 90, 6);
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
