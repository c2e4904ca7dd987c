//! Many threads calling instrumented code while another toggles tracing:
//! 8 busy workers, 1,000 toggles, plus threads blocked in `read` and in a
//! futex wait during the toggles.

#[macro_use]
mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::Duration;

use common::Counter;
use fntrace_fixtures::{c_pie, rust};

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("stress", &COUNTER);

const WORKERS: usize = 8;
const TOGGLES: usize = 1_000;

#[test]
fn eight_busy_threads_survive_a_thousand_toggles_with_exact_quiescent_counts() {
    fntrace::init().unwrap();
    let rust_leaf = addr!(rust::leaf);
    let c_leaf = c_pie::leaf_address();
    COUNTER.watch(rust_leaf);
    COUNTER.watch(c_leaf);

    let stop = Arc::new(AtomicBool::new(false));
    let calls_made = Arc::new(AtomicU64::new(0));
    // Phase barriers: toggling ends (workers idle), the quiescent phase with
    // tracing on starts, it ends.
    let paused = Arc::new(Barrier::new(WORKERS + 1));
    let toggled = Arc::new(Barrier::new(WORKERS + 1));
    let measured = Arc::new(Barrier::new(WORKERS + 1));

    // A thread blocked in read(2) on a socket for the whole toggling phase.
    let (mut reader_end, mut writer_end) = UnixStream::pair().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 5];
        reader_end.read_exact(&mut buf).unwrap();
        buf
    });
    // A thread blocked in a futex wait (Condvar) for the whole phase.
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let waiter = {
        let gate = Arc::clone(&gate);
        std::thread::spawn(move || {
            let (lock, cvar) = &*gate;
            let mut open = lock.lock().unwrap();
            while !*open {
                open = cvar.wait(open).unwrap();
            }
            rust::leaf(1)
        })
    };

    let workers: Vec<_> = (0..WORKERS)
        .map(|i| {
            let (stop, calls_made, paused, toggled, measured) = (
                Arc::clone(&stop),
                Arc::clone(&calls_made),
                Arc::clone(&paused),
                Arc::clone(&toggled),
                Arc::clone(&measured),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if i % 2 == 0 {
                        rust::mid(i as u64);
                    } else {
                        c_pie::mid(i as i64);
                    }
                    calls_made.fetch_add(4, Ordering::Relaxed);
                }
                paused.wait();
                toggled.wait();
                // Quiescent: tracing stays on, exactly 1,000 mids each.
                for _ in 0..1_000 {
                    if i % 2 == 0 {
                        rust::mid(i as u64);
                    } else {
                        c_pie::mid(i as i64);
                    }
                }
                measured.wait();
            })
        })
        .collect();

    for i in 0..TOGGLES {
        fntrace::enable("stress").unwrap_or_else(|e| panic!("enable #{i}: {e}"));
        std::thread::yield_now();
        fntrace::disable("stress").unwrap_or_else(|e| panic!("disable #{i}: {e}"));
    }
    stop.store(true, Ordering::Relaxed);
    paused.wait(); // no worker is inside a traced call now
                   // Every call counted was made (each worker adds its 4 leaves to
                   // calls_made right after the mid returns, before pausing).
    let seen_while_toggling = COUNTER.count(rust_leaf) + COUNTER.count(c_leaf);
    assert!(
        seen_while_toggling <= calls_made.load(Ordering::Relaxed),
        "the tracer saw {seen_while_toggling} leaf calls, more than the {} made",
        calls_made.load(Ordering::Relaxed)
    );

    fntrace::enable("stress").unwrap();
    COUNTER.reset();
    toggled.wait();
    measured.wait();
    fntrace::disable("stress").unwrap();
    let half = (WORKERS / 2) as u64;
    assert_eq!(COUNTER.count(rust_leaf), half * 1_000 * 4);
    assert_eq!(COUNTER.count(c_leaf), half * 1_000 * 4);
    for worker in workers {
        worker.join().unwrap();
    }

    // The blocked threads were stopped and resumed 2,000+ times; they finish
    // normally once their wait is satisfied.
    writer_end.write_all(b"hello").unwrap();
    assert_eq!(&reader.join().unwrap(), b"hello");
    {
        let (lock, cvar) = &*gate;
        *lock.lock().unwrap() = true;
        cvar.notify_all();
    }
    assert_eq!(waiter.join().unwrap(), rust::leaf(1));
    std::thread::sleep(Duration::from_millis(1));
}
