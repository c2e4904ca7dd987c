//! `init` while 4 threads run instrumented code: their calls return from
//! fntrace's entry at once until then (no tracer enabled), init's ELF scan
//! finds every site, and every site becomes its NOP through the patcher
//! while the threads keep calling through it. Afterwards tracing is exact.
//! Then 4 threads make the first calls of a library opened while a tracer
//! is enabled: they race to record the same sites, each recorded once.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{text, Counter, NOP5, NOP6};
use fntrace::{Filter, SiteForm};
use fntrace_fixtures::{c_fentry_nopie, c_pie, c_shared, rust};

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("init-under-load", &COUNTER);

#[test]
fn sites_found_and_nopped_while_threads_run_through_them() {
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (stop, rounds) = (Arc::clone(&stop), Arc::clone(&rounds));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // mid(x) = 12x + 22, so run(2) = 22 + 34.
                    assert_eq!(rust::run(2), 56);
                    assert_eq!(c_pie::run(2), 56);
                    assert_eq!(c_fentry_nopie::run(2), 56);
                    assert_eq!(c_shared::run(2), 56);
                    rounds.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // A worker that panics ends the wait (its panic is reported by join).
    let wait_for_rounds = |target: u64| {
        while rounds.load(Ordering::Relaxed) < target && !workers.iter().any(|w| w.is_finished()) {
            std::thread::yield_now();
        }
    };
    wait_for_rounds(100);
    fntrace::init().expect("init under load");
    wait_for_rounds(rounds.load(Ordering::Relaxed) + 100);
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().expect("worker");
    }

    let stats = fntrace::stats();
    assert_eq!(stats.lazily_found, 0, "{stats:?}");
    assert_eq!(stats.unrecognized_sites, 0);
    for function in [
        addr!(rust::leaf),
        addr!(rust::mid),
        addr!(rust::run),
        c_pie::leaf_address(),
        c_fentry_nopie::mid_address(),
        c_shared::run_address(),
    ] {
        let site = fntrace::site_of(function).expect("site");
        let nop: &[u8] = match site.form {
            Some(SiteForm::CallRel32) => &NOP5,
            _ => &NOP6,
        };
        assert_eq!(text(site.address, nop.len()), nop, "{function:#x}");
        assert!(!site.patched);
    }

    fntrace::enable("init-under-load").unwrap();
    COUNTER.watch(addr!(rust::leaf));
    COUNTER.watch(c_shared::leaf_address());
    rust::run(5);
    c_shared::run(5);
    fntrace::disable("init-under-load").unwrap();
    assert_eq!(COUNTER.count(addr!(rust::leaf)), 20);
    assert_eq!(COUNTER.count(c_shared::leaf_address()), 20);

    // A tracer enabled for none of the library's functions: their first
    // calls reach the runtime, from 4 threads at once.
    fntrace::enable_with(
        "init-under-load",
        &Filter::new().include("no_such_function"),
    )
    .unwrap();
    let run = common::dlopen_dl_run();
    let start = Arc::new(std::sync::Barrier::new(4));
    let racers: Vec<_> = (0..4)
        .map(|_| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                run(2)
            })
        })
        .collect();
    let expected: i64 = (0..2).map(common::expected_c_mid).sum();
    for racer in racers {
        assert_eq!(racer.join().expect("racer"), expected);
    }
    fntrace::disable("init-under-load").unwrap();
    // dl_run, dl_mid and dl_leaf, each recorded once.
    assert_eq!(fntrace::stats().lazily_found, 3);
    fntrace::flush().unwrap();
    let site = fntrace::site_of(run as usize).expect("dl_run's site");
    assert!(site.lazily_found && !site.patched, "{site:?}");
    assert_eq!(text(site.address, 6), NOP6);
}
