//! The stop protocol's ack timeout under load: with 16 threads busy in
//! traced code and one thread blocking the stop signal, `enable` with a
//! 1 ms ack timeout fails (typically within 2 ms on a quiet machine: the
//! times are printed, not judged), names the blocking thread, and writes
//! nothing. It used to take
//! 28 ms (median), because the 16 threads released at the end preempted
//! the patcher (see `sys::sched`).
//!
//! With a 20 ms timeout the operation releases the world and retries
//! after a short sleep; waking from that sleep with 16 busy threads on 2
//! CPUs costs the patcher a round of time slices (≈ 20–30 ms here), which
//! fntrace cannot shorten: that case is printed, and only its error is
//! checked.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{text, Counter, NOP5};
use fntrace::PatchProtocol;
use fntrace_fixtures::rust;

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("ack", &COUNTER);

const BUSY: usize = 16;
const ATTEMPTS: usize = 20;

#[test]
fn the_ack_timeout_holds_with_sixteen_busy_threads() {
    fntrace::set_patch_protocol(PatchProtocol::StopTheWorld).unwrap();
    fntrace::init().unwrap();
    let site = fntrace::site_of(addr!(rust::leaf)).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..BUSY)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::black_box(rust::run(2));
                }
            })
        })
        .collect();
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let blocker = std::thread::spawn(move || {
        // SAFETY: changes the calling thread's signal mask only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR2);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        ready_tx.send(fntrace::current_tid()).unwrap();
        done_rx.recv().unwrap();
    });
    let blocker_tid = ready_rx.recv().unwrap();

    for timeout_ms in [1u64, 20] {
        fntrace::set_ack_timeout(Duration::from_millis(timeout_ms));
        let mut worst = Duration::ZERO;
        let mut times = Vec::new();
        for _ in 0..ATTEMPTS {
            let started = Instant::now();
            let error = fntrace::enable("ack").expect_err("a thread blocks the stop signal");
            let took = started.elapsed();
            times.push(took.as_secs_f64() * 1e3);
            worst = worst.max(took);
            match error {
                fntrace::Error::ThreadDidNotAcknowledge { tid, .. } => {
                    assert_eq!(tid as u32, blocker_tid)
                }
                other => panic!("unexpected error: {other}"),
            }
            assert_eq!(text(site.address, 5), NOP5, "nothing written");
        }
        times.sort_by(f64::total_cmp);
        println!(
            "ack timeout {timeout_ms} ms: enable failed after {:.1} ms (median), {:.1} ms (worst) \
             of {ATTEMPTS}",
            times[ATTEMPTS / 2],
            worst.as_secs_f64() * 1e3
        );
        // How close to the timeout the failures come is a timing figure:
        // printed here (typically all under 2 ms for 1 ms on a quiet
        // machine), not judged, since other processes on the same 2 CPUs
        // stretch it (seen: a 52 ms median while a build ran). What is
        // checked is that the timeout is obeyed at all: an operation that
        // waited for the blocking thread would never return.
        assert!(
            worst < Duration::from_secs(2),
            "asked {timeout_ms} ms, took {times:?} ms"
        );
    }
    stop.store(true, Ordering::Relaxed);
    done_tx.send(()).unwrap();
    blocker.join().unwrap();
    for thread in busy {
        thread.join().unwrap();
    }
}
