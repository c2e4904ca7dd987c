//! A thread that blocks the stop signal: `enable` fails with an error naming
//! it after the configured wait, and the text is left as it was. With
//! another stop signal configured, the same thread no longer gets in the way.

#[macro_use]
mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{text, Counter, NOP5};
use fntrace_fixtures::rust;

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("blocked", &COUNTER);

fn block_signal(signo: i32) {
    // SAFETY: plain signal-mask manipulation of the calling thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signo);
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()),
            0
        );
    }
}

#[test]
fn a_thread_blocking_the_stop_signal_fails_enable_and_leaves_text_unchanged() {
    // The stop signal is the stop-the-world protocol's.
    fntrace::set_patch_protocol(fntrace::PatchProtocol::StopTheWorld).unwrap();
    fntrace::init().unwrap();
    let site = fntrace::site_of(addr!(rust::leaf)).unwrap();
    assert_eq!(text(site.address, 5), NOP5);

    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let blocker = std::thread::spawn(move || {
        block_signal(libc::SIGUSR2);
        ready_tx.send(fntrace::current_tid()).unwrap();
        done_rx.recv().unwrap();
        rust::leaf(3)
    });
    let blocker_tid = ready_rx.recv().unwrap();

    fntrace::set_ack_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let err = fntrace::enable("blocked").expect_err("enable must fail");
    let waited = started.elapsed();
    match &err {
        fntrace::Error::ThreadDidNotAcknowledge { tid, .. } => assert_eq!(*tid as u32, blocker_tid),
        other => panic!("unexpected error: {other}"),
    }
    assert!(err.to_string().contains(&blocker_tid.to_string()), "{err}");
    assert!(
        waited < Duration::from_secs(5),
        "bounded wait, took {waited:?}"
    );
    assert_eq!(text(site.address, 5), NOP5, "nothing was patched");
    let after = fntrace::site_of(addr!(rust::leaf)).unwrap();
    assert_eq!(after.enabled_tracers, 0);
    rust::leaf(1);
    assert_eq!(COUNTER.all.load(std::sync::atomic::Ordering::Relaxed), 0);

    // Another signal: the blocker does not block it, so enable works.
    fntrace::set_stop_signal(libc::SIGUSR1).unwrap();
    fntrace::enable("blocked").unwrap();
    assert_eq!(text(site.address, 5), site.original);
    COUNTER.watch(addr!(rust::leaf));
    rust::leaf(1);
    assert_eq!(COUNTER.count(addr!(rust::leaf)), 1);
    fntrace::disable("blocked").unwrap();
    assert_eq!(text(site.address, 5), NOP5);

    // The blocker ends normally (its pending SIGUSR2 stays blocked).
    done_tx.send(()).unwrap();
    assert_eq!(blocker.join().unwrap(), rust::leaf(3));

    assert!(matches!(
        fntrace::set_stop_signal(libc::SIGKILL),
        Err(fntrace::Error::Signal { .. })
    ));
}
