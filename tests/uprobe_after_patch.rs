//! A uprobe set on a function after `-P` patched its entry (bpftrace,
//! the way perf probe sets it too): `plain_mid` (gcc, no instrumentation,
//! `push %rbp` first) and `plain_cold` (`mov %rdi,%rax` first) keep their
//! first instruction in place and get their jump right after it, so the kernel, which runs the file's first
//! instruction out of line and resumes after it, resumes at the jump.
//! With the graph tracer on, every call is both counted by the uprobe and
//! recorded, with its result right; after bpftrace removes the probe the
//! function is still patched and traced. (Before, the kernel resumed
//! inside the jump and the process crashed.) bpftrace is required, and
//! root (CI runs as root): a missing tool fails the test.

#[macro_use]
mod common;

use common::bpftrace::Bpftrace;
use common::{expected_c_mid, temp_dir, text, thread_events};
use fntrace::{EventKind, Filter, GRAPH_TRACER};
use fntrace_fixtures::c_plain;

/// Calls of `plain_mid` in each phase.
const CALLS: i64 = 500;

/// Calls `plain_mid` [`CALLS`] times, each result checked; returns how
/// many of its entries the graph tracer recorded on this thread.
fn calls_recorded() -> usize {
    GRAPH_TRACER.take_trace();
    for x in 0..CALLS {
        assert_eq!(c_plain::mid(x), expected_c_mid(x));
    }
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    events
        .iter()
        .filter(|e| e.kind == EventKind::Entry && e.function == c_plain::mid_address())
        .count()
}

#[test]
fn a_uprobe_set_after_the_entry_patch_fires_and_tracing_goes_on() {
    fntrace::init().unwrap();
    let mid = c_plain::mid_address();
    let before = text(mid, 8);
    assert_eq!(before[0], 0x55, "push %rbp first: {before:x?}");
    let report = fntrace::patch_functions(&["plain_mid"]).unwrap();
    assert!(
        report.patched.iter().any(|n| n == "plain_mid"),
        "{report:?}"
    );
    // The push stays; the jump follows it.
    let patched = text(mid, 6);
    assert_eq!(patched[0], 0x55, "{patched:x?}");
    assert_eq!(patched[1], 0xe9, "{patched:x?}");
    fntrace::enable_with("graph", &Filter::new().include("plain_mid")).unwrap();
    assert_eq!(calls_recorded(), CALLS as usize, "before the uprobe");

    let dir = temp_dir("uprobe-after-patch");
    std::fs::create_dir_all(&dir).unwrap();
    let program = std::env::current_exe().unwrap();
    let mut uprobe = Bpftrace::start(&program, "plain_mid", &dir);
    assert_eq!(calls_recorded(), CALLS as usize, "with the uprobe");
    uprobe.assert_count(CALLS as u64, "with the uprobe");
    drop(uprobe);

    // The kernel wrote the file's first byte back: the same push.
    assert_eq!(text(mid, 6), patched);
    assert_eq!(calls_recorded(), CALLS as usize, "after the uprobe");
    fntrace::disable("graph").unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `plain_cold` (`mov %rdi,%rax; xor $0x5a5a,%rax; ret`): a load into rax
/// kept, the uprobe counting every call, each result right.
#[test]
fn a_uprobe_after_the_entry_patch_of_a_function_loading_rax_first() {
    fntrace::init().unwrap();
    let cold = c_plain::cold_address();
    assert_eq!(text(cold, 3), [0x48, 0x89, 0xf8], "mov %rdi,%rax first");
    let report = fntrace::patch_functions(&["plain_cold"]).unwrap();
    assert!(
        report.patched.iter().any(|n| n == "plain_cold"),
        "{report:?}"
    );
    assert_eq!(
        text(cold, 4),
        [0x48, 0x89, 0xf8, 0xe9],
        "the jump after the mov"
    );
    let dir = temp_dir("uprobe-after-patch-cold");
    std::fs::create_dir_all(&dir).unwrap();
    let program = std::env::current_exe().unwrap();
    let mut uprobe = Bpftrace::start(&program, "plain_cold", &dir);
    for x in 0..CALLS {
        assert_eq!(c_plain::cold(x), x ^ 0x5a5a);
    }
    uprobe.assert_count(CALLS as u64, "plain_cold with the uprobe");
    drop(uprobe);
    let _ = std::fs::remove_dir_all(&dir);
}
