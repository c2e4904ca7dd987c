//! fork() while another thread toggles tracing and others run traced code:
//! every child can still use fntrace (no lock inherited from a thread it
//! does not have) and exits normally; 30 forks against 200 toggles.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

#[test]
fn children_forked_during_toggles_can_use_fntrace() {
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
        // SAFETY: the child runs child_work and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = child_work();
            // SAFETY: _exit ends the child without running atexit handlers.
            unsafe { libc::_exit(code) };
        }
        let started = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: waitpid on our own child.
            let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if done == pid {
                break;
            }
            if started.elapsed() > Duration::from_secs(20) {
                // SAFETY: killing our own hung child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("child {pid} hung after fork #{forks}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            libc::WIFEXITED(status),
            "child {pid} died: status {status:#x}"
        );
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "child {pid} could not use fntrace"
        );
        forks += 1;
    }
    toggler.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    fntrace::GRAPH_TRACER.take_trace();
}
