//! Generated C libraries with 10,000 and 100,000 `-pg -O0` functions and
//! a Rust one with 10,000 `-Zinstrument-mcount` functions
//! (`fntrace_fixtures::scale`), loaded before `init`: the eager scan finds
//! every site, and with 4 threads busy in them (C and Rust), each protocol
//! enables and disables all of them with exact call counts in between and
//! every site's bytes right after each operation. Prints the times.

#[macro_use]
mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{text, Counter, NOP5, NOP6};
use fntrace::{Filter, PatchProtocol};
use fntrace_fixtures::scale;

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("scale", &COUNTER);

const BUSY: usize = 4;

#[test]
fn every_site_of_a_hundred_thousand_functions_is_found_and_toggled() {
    let libraries = [
        scale::load(10_000),
        scale::load(100_000),
        scale::load_rust(10_000),
    ];
    let started = Instant::now();
    fntrace::init().unwrap();
    let init = started.elapsed();
    let sites = fntrace::sites();
    let functions: HashSet<usize> = sites.iter().map(|site| site.function).collect();
    for library in &libraries {
        let missing = library
            .entries
            .iter()
            .filter(|entry| !functions.contains(entry))
            .count();
        assert_eq!(missing, 0, "sites not found in scale{}", library.functions);
    }
    println!("init with {} sites: {init:.1?}", sites.len());

    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..BUSY)
        .map(|i| {
            let stop = Arc::clone(&stop);
            // Threads 0 and 3 in C, 1 in the large C library, 2 in Rust.
            let library = &libraries[[0, 1, 2, 0][i % 4]];
            let (drive, n) = (library.drive, library.functions as i64);
            // In Rust, windows of 64 from below 9,000: the last function
            // stays for this thread's exact count.
            let starts = if i % 4 == 2 { 9_000 } else { n };
            std::thread::spawn(move || {
                let mut start = i as i64 * 7919 % starts;
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(
                        drive(start, 64),
                        scale::expected_drive(n as usize, start, 64)
                    );
                    start = (start + 64) % starts;
                }
            })
        })
        .collect();

    let filter = Filter::new().include("scale*").include("rscale*");
    for protocol in [PatchProtocol::Breakpoint, PatchProtocol::StopTheWorld] {
        fntrace::set_patch_protocol(protocol).unwrap();
        let started = Instant::now();
        fntrace::enable_with("scale", &filter).unwrap();
        let enable = started.elapsed();
        check_bytes(&libraries, true);
        // Exact counts on this thread (the busy ones count too: compare
        // this thread's calls through a function nobody else calls).
        let lone = libraries[1].entries[99_999];
        COUNTER.watch(lone);
        let before = COUNTER.count(lone);
        (libraries[1].drive)(99_999, 1);
        assert_eq!(COUNTER.count(lone) - before, 1, "{protocol:?}");
        // A Rust function no busy thread calls.
        let lone_rust = libraries[2].entries[9_999];
        COUNTER.watch(lone_rust);
        let before = COUNTER.count(lone_rust);
        (libraries[2].drive)(9_999, 1);
        assert_eq!(COUNTER.count(lone_rust) - before, 1, "{protocol:?}");
        let started = Instant::now();
        fntrace::disable("scale").unwrap();
        let disable = started.elapsed();
        check_bytes(&libraries, false);
        println!(
            "{protocol:?}: enable {enable:.1?}, disable {disable:.1?} for 120,000 sites \
             with {BUSY} busy threads"
        );
        let quiet = COUNTER.all.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            COUNTER.all.load(Ordering::Relaxed),
            quiet,
            "nothing traced after disable"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for thread in busy {
        thread.join().unwrap();
    }
}

/// Every function's site holds its call (`enabled`) or its NOP.
fn check_bytes(libraries: &[scale::Loaded], enabled: bool) {
    let by_function: std::collections::HashMap<usize, fntrace::SiteInfo> = fntrace::sites()
        .into_iter()
        .map(|site| (site.function, site))
        .collect();
    for library in libraries {
        for entry in &library.entries {
            let site = &by_function[entry];
            let bytes = text(site.address, site.original.len());
            if enabled {
                assert_eq!(bytes, site.original, "{:#x}", site.address);
            } else {
                let nop: &[u8] = if bytes.len() == 5 { &NOP5 } else { &NOP6 };
                assert_eq!(bytes, nop, "{:#x}", site.address);
            }
        }
    }
}
