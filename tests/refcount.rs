//! Two tracers enabled and disabled in every order, also concurrently: a
//! site holds its call exactly while at least one of them is enabled, and
//! its reference count never drifts.

#[macro_use]
mod common;

use common::{text, Counter, NOP5};
use fntrace_fixtures::rust;

static FIRST: Counter = Counter::new();
static SECOND: Counter = Counter::new();
fntrace::register_tracer!("first", &FIRST);
fntrace::register_tracer!("second", &SECOND);

fn leaf_site() -> fntrace::SiteInfo {
    fntrace::site_of(addr!(rust::leaf)).expect("rust::leaf has a site")
}

fn check(first_on: bool, second_on: bool) {
    let site = leaf_site();
    let expected_count = first_on as u32 + second_on as u32;
    assert_eq!(site.enabled_tracers, expected_count);
    let bytes = text(site.address, 5);
    if expected_count > 0 {
        assert_eq!(bytes, site.original);
    } else {
        assert_eq!(bytes, NOP5);
    }
    FIRST.reset();
    SECOND.reset();
    rust::leaf(1);
    assert_eq!(FIRST.count(addr!(rust::leaf)), first_on as u64);
    assert_eq!(SECOND.count(addr!(rust::leaf)), second_on as u64);
}

#[test]
fn overlapping_enables_keep_an_exact_reference_count() {
    fntrace::init().unwrap();
    FIRST.watch(addr!(rust::leaf));
    SECOND.watch(addr!(rust::leaf));
    check(false, false);

    // Every order of two overlapping enable/disable pairs, with repeats.
    let (mut first_on, mut second_on) = (false, false);
    let script: &[(&str, bool)] = &[
        ("first", true),
        ("second", true),
        ("first", false),
        ("second", false),
        ("second", true),
        ("first", true),
        ("second", false),
        ("first", true), // already on: no change
        ("first", false),
        ("first", false), // already off: no change
        ("second", true),
        ("first", true),
        ("first", false),
        ("second", false),
    ];
    for &(name, on) in script {
        if on {
            fntrace::enable(name).unwrap();
        } else {
            fntrace::disable(name).unwrap();
        }
        match name {
            "first" => first_on = on,
            _ => second_on = on,
        }
        check(first_on, second_on);
    }

    // Two threads toggling their own tracer 200 times each, concurrently.
    std::thread::scope(|scope| {
        for name in ["first", "second"] {
            scope.spawn(move || {
                for _ in 0..200 {
                    fntrace::enable(name).unwrap();
                    rust::leaf(2);
                    fntrace::disable(name).unwrap();
                }
            });
        }
    });
    check(false, false);
    let stats = fntrace::stats();
    assert_eq!(stats.patched_sites, 0, "{stats:?}");
}
