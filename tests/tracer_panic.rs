//! A tracer whose `entry` panics leaves nothing behind: the panic is
//! caught and counted, the tracer is off for every thread at once, its
//! sites go back to their NOP (or to the tracers that still select them)
//! at the next control operation, and `disable` says what happened.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{text, Counter, NOP5};
use fntrace::{Error, Filter};
use fntrace_fixtures::rust;

/// Panics on entry of the function at this address.
struct Panicky(AtomicUsize);

impl fntrace::Tracer for Panicky {
    fn entry(&self, call: &fntrace::Call<'_>) {
        if call.function() == self.0.load(Ordering::Relaxed) {
            panic!("panicky tracer: deliberate panic");
        }
    }
}

static PANICKY: Panicky = Panicky(AtomicUsize::new(0));
static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("panicky", &PANICKY);
fntrace::register_tracer!("counter", &COUNTER);

fn site(function: usize) -> fntrace::SiteInfo {
    fntrace::site_of(function).expect("fixture function has a site")
}

/// Enables `panicky` on the Rust fixture, then makes it panic once.
fn enable_and_panic() {
    let filter = Filter::new().include("fixture_rust_workload::*");
    fntrace::enable_with("panicky", &filter).unwrap();
    assert_eq!(site(addr!(rust::leaf)).enabled_tracers, 1);
    let panics_before = fntrace::stats().tracer_panics;
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // the expected panic stays quiet
    let result = rust::leaf(1); // panics inside the tracer: caught there
    std::panic::set_hook(previous_hook);
    assert_eq!(result, rust::leaf(1));
    assert_eq!(fntrace::stats().tracer_panics, panics_before + 1);
}

#[test]
fn a_panicking_tracer_is_switched_off_and_its_sites_reverted() {
    fntrace::init().unwrap();
    let (leaf, mid) = (addr!(rust::leaf), addr!(rust::mid));
    PANICKY.0.store(leaf, Ordering::Relaxed);
    COUNTER.watch(mid);
    let counting = Filter::new().include("fixture_rust_workload::mid");
    fntrace::enable_with("counter", &counting).unwrap();
    let patched_with_counter = fntrace::stats().patched_sites;

    enable_and_panic();
    // The traced path cannot patch: the sites keep their calls until the
    // next control operation, but the tracer is not called again.
    assert_eq!(text(site(leaf).address, 5), site(leaf).original);
    rust::leaf(1);
    assert_eq!(fntrace::stats().tracer_panics, 1);

    // disable reverts them and says why the tracer was off already.
    let err = fntrace::disable("panicky").unwrap_err();
    assert!(
        matches!(&err, Error::TracerPanicked(name) if name == "panicky"),
        "{err}"
    );
    assert_eq!(text(site(leaf).address, 5), NOP5);
    assert_eq!(site(leaf).enabled_tracers, 0);
    // mid stays with the tracer that still selects it.
    assert_eq!(site(mid).enabled_tracers, 1);
    assert_eq!(text(site(mid).address, 5), site(mid).original);
    assert_eq!(fntrace::stats().patched_sites, patched_with_counter);
    COUNTER.reset();
    rust::mid(1);
    assert_eq!(COUNTER.count(mid), 1);
    // Reported once.
    fntrace::disable("panicky").unwrap();

    // Any control operation reverts them (here `flush`); `disable` still
    // reports the panic it has not reported yet.
    enable_and_panic();
    fntrace::flush().unwrap();
    assert_eq!(text(site(leaf).address, 5), NOP5);
    assert_eq!(fntrace::stats().patched_sites, patched_with_counter);
    let err = fntrace::disable("panicky").unwrap_err();
    assert!(matches!(err, Error::TracerPanicked(_)), "{err}");

    fntrace::disable("counter").unwrap();
    assert_eq!(text(site(mid).address, 5), NOP5);
}
