//! fork() while another thread toggles tracing and others run traced code:
//! every child can still use fntrace (no lock inherited from a thread it
//! does not have) and exits normally; 30 forks against 200 toggles. A
//! child's trace holds its own calls only, under its own tid.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fntrace::Filter;
use fntrace_fixtures::rust;

/// In the child: only async-signal-safe-ish work until _exit.
fn child_work() -> i32 {
    let toggled = fntrace::enable_with("graph", &Filter::new().include("fixture_rust_workload::*"))
        .and_then(|()| fntrace::disable("graph"));
    let result = rust::run(2);
    if toggled.is_ok() && result == 56 && fntrace::stats().initialized {
        0
    } else {
        1
    }
}

/// The tests of this file toggle the same tracer: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn children_forked_during_toggles_can_use_fntrace() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::hint::black_box(rust::run(3));
            }
        })
    };
    let toggler = std::thread::spawn(|| {
        for _ in 0..200 {
            fntrace::enable("graph").unwrap();
            fntrace::disable("graph").unwrap();
        }
    });
    let mut forks = 0;
    while forks < 30 {
        let code = common::exit_code_of_forked(&format!("fork #{forks}"), child_work);
        assert_eq!(code, 0, "the child of fork #{forks} could not use fntrace");
        forks += 1;
    }
    toggler.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    fntrace::GRAPH_TRACER.take_trace();
}

/// In the child: its trace must be exactly one `mid` (5 calls, 10 events)
/// on its own thread, none of the parent's events. Exit code 0 when it is.
fn child_trace_is_its_own() -> i32 {
    let result = fntrace_fixtures::c_pie::mid(3);
    let trace = fntrace::GRAPH_TRACER.take_trace();
    let me = fntrace::current_tid();
    let events: usize = trace.threads.iter().map(|t| t.events.len()).sum();
    let mine = trace.threads.iter().all(|t| t.tid == me);
    if result == common::expected_c_mid(3) && events == 10 && mine && trace.lost() == 0 {
        0
    } else {
        let line = format!("child: {events} events, all mine: {mine}\n");
        // SAFETY: write(2) of a buffer we own, to stderr.
        unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
        1
    }
}

#[test]
fn a_forked_child_starts_with_none_of_the_parents_events() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    fntrace::GRAPH_TRACER.take_trace();
    fntrace::enable_with("graph", &Filter::new().include("pie_*")).unwrap();
    // Events in this thread's buffer and in another thread's, not drained.
    fntrace_fixtures::c_pie::run(10);
    std::thread::spawn(|| fntrace_fixtures::c_pie::run(10))
        .join()
        .unwrap();
    // SAFETY: the child checks its trace and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = child_trace_is_its_own();
        // SAFETY: _exit ends the child without running atexit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waitpid on our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    fntrace::disable("graph").unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{status:#x}"
    );
    // The parent keeps its own: 2 × 51 calls.
    let trace = fntrace::GRAPH_TRACER.take_trace();
    let events: usize = trace.threads.iter().map(|t| t.events.len()).sum();
    assert_eq!(events, 2 * 2 * 51);
}
