//! A thread that blocks SIGTRAP would be killed by an `int3` (the kernel
//! forces the default action of a blocked trap), so while one exists the
//! breakpoint protocol patches with the stop-the-world protocol instead.
//! Here 2 threads with every signal but SIGUSR2 blocked call traced code
//! throughout 300 enable/disable toggles: the process survives and every
//! call is counted while enabled.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::Counter;
use fntrace::PatchProtocol;
use fntrace_fixtures::{c_pie, rust};

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("blocked_trap", &COUNTER);

const TOGGLES: usize = 300;

#[test]
fn threads_blocking_sigtrap_survive_breakpoint_toggles() {
    fntrace::set_patch_protocol(PatchProtocol::Breakpoint).unwrap();
    fntrace::init().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..2)
        .map(|i| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                // SAFETY: changes the calling thread's signal mask only.
                unsafe {
                    let mut set: libc::sigset_t = std::mem::zeroed();
                    libc::sigfillset(&mut set);
                    libc::sigdelset(&mut set, libc::SIGUSR2);
                    libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                }
                let mut calls = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if i == 0 {
                        rust::run(2);
                    } else {
                        c_pie::mid(3);
                    }
                    calls += 1;
                }
                calls
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(20));
    COUNTER.watch(addr!(rust::leaf));
    for _ in 0..TOGGLES {
        fntrace::enable("blocked_trap").unwrap();
        rust::leaf(1);
        fntrace::disable("blocked_trap").unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        assert!(thread.join().unwrap() > 0);
    }
    assert!(COUNTER.count(addr!(rust::leaf)) >= TOGGLES as u64);
    assert_eq!(fntrace::patch_protocol(), PatchProtocol::Breakpoint);
}
