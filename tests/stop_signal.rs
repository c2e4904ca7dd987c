//! The stop signal never takes over a signal the program relies on:
//! `set_stop_signal` accepts only SIGUSR1, SIGUSR2 and the realtime
//! signals, and a patch operation refuses (writing nothing) when the program
//! has its own handler for the stop signal, at `init` and at every later
//! operation, leaving that handler installed.
//!
//! One test: the steps change process-wide signal state in order.

#[macro_use]
mod common;

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

use common::{text, Counter, NOP5};
use fntrace_fixtures::rust;

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("stop_signal", &COUNTER);

/// Deliveries seen by the program's own handler.
static PROGRAM_HANDLER_RUNS: AtomicU32 = AtomicU32::new(0);

extern "C" fn program_handler(_signo: i32) {
    PROGRAM_HANDLER_RUNS.fetch_add(1, Ordering::Relaxed);
}

/// Installs `program_handler` for `signo`, as a service would.
fn install_program_handler(signo: i32) {
    let handler: extern "C" fn(i32) = program_handler;
    // SAFETY: an all-zero sigaction is valid; the handler only bumps an
    // atomic, which is async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(libc::sigaction(signo, &action, std::ptr::null_mut()), 0);
    }
}

/// The `sa_sigaction` installed for `signo` now.
fn installed_handler(signo: i32) -> libc::sighandler_t {
    // SAFETY: an all-zero sigaction is valid; a null `act` only queries.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(signo, std::ptr::null(), &mut current), 0);
        current.sa_sigaction
    }
}

fn expect_in_use(result: Result<(), fntrace::Error>, signo: i32, name: &str) {
    match result {
        Err(err @ fntrace::Error::StopSignalInUse { .. }) => {
            let fntrace::Error::StopSignalInUse {
                signo: got,
                name: got_name,
            } = err
            else {
                unreachable!()
            };
            assert_eq!((got, got_name), (signo, name));
            let message = err.to_string();
            assert!(message.contains(name), "{message}");
            assert!(message.contains("set_stop_signal"), "{message}");
        }
        other => panic!("expected StopSignalInUse for {name}, got {other:?}"),
    }
}

#[test]
fn the_stop_signal_never_takes_over_a_signal_the_program_uses() {
    // The stop signal is the stop-the-world protocol's.
    fntrace::set_patch_protocol(fntrace::PatchProtocol::StopTheWorld).unwrap();
    let program = program_handler as extern "C" fn(i32) as *const c_void as libc::sighandler_t;
    let leaf = addr!(rust::leaf);
    let original_text = text(leaf, 64);

    // The program uses SIGUSR2 (the default stop signal): init refuses,
    // writes nothing, and the program's handler stays.
    install_program_handler(libc::SIGUSR2);
    expect_in_use(fntrace::init(), libc::SIGUSR2, "SIGUSR2");
    assert_eq!(installed_handler(libc::SIGUSR2), program);
    assert_eq!(text(leaf, 64), original_text, "nothing was patched");
    // SAFETY: raising a signal whose handler only bumps an atomic.
    assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
    assert_eq!(PROGRAM_HANDLER_RUNS.load(Ordering::Relaxed), 1);

    // Signals with a standard meaning are refused, naming the signal.
    for (signo, name) in [
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGCHLD, "SIGCHLD"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGKILL, "SIGKILL"),
    ] {
        match fntrace::set_stop_signal(signo) {
            Err(err @ fntrace::Error::Signal { .. }) => {
                let message = err.to_string();
                assert!(message.contains(name), "{message}");
                assert!(message.contains("SIGUSR1"), "{message}");
            }
            other => panic!("{name} must be refused, got {other:?}"),
        }
    }
    // Realtime signals are accepted.
    fntrace::set_stop_signal(libc::SIGRTMIN() + 3).unwrap();

    // Another stop signal: init and enable work, SIGUSR2 stays the program's.
    fntrace::set_stop_signal(libc::SIGUSR1).unwrap();
    fntrace::init().unwrap();
    let site = fntrace::site_of(leaf).unwrap();
    assert_eq!(text(site.address, 5), NOP5);
    fntrace::enable("stop_signal").unwrap();
    assert_eq!(text(site.address, 5), site.original);
    COUNTER.watch(leaf);
    rust::leaf(1);
    assert_eq!(COUNTER.count(leaf), 1);
    assert_eq!(installed_handler(libc::SIGUSR2), program);

    // The program installs a handler for SIGUSR1 later: the next operation
    // notices, refuses, and leaves both handler and text alone.
    install_program_handler(libc::SIGUSR1);
    expect_in_use(fntrace::disable("stop_signal"), libc::SIGUSR1, "SIGUSR1");
    assert_eq!(installed_handler(libc::SIGUSR1), program);
    assert_eq!(text(site.address, 5), site.original);

    // A free realtime signal gets it going again: the revert the failed
    // disable left pending is written.
    fntrace::set_stop_signal(libc::SIGRTMIN() + 3).unwrap();
    fntrace::flush().unwrap();
    assert_eq!(text(site.address, 5), NOP5);
    assert_eq!(installed_handler(libc::SIGUSR1), program);
    assert_eq!(installed_handler(libc::SIGUSR2), program);
}
