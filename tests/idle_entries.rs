//! A program that loaded fntrace and traces nothing: while no tracer is
//! enabled, an instrumented call that reaches fntrace's entry (a site not
//! yet a NOP: before the first control operation, or in a library opened
//! since) returns at once: no call into Rust, no site recorded (before
//! this, each such call saved every register and probed the site table,
//! 10-14 ns a call). From `init` on, every call site found is a NOP, and
//! the calls a tracer is enabled for reach it, exactly.

#[macro_use]
mod common;

use common::{text, Counter, NOP6};
use fntrace_fixtures::c_pie;

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("idle-entries", &COUNTER);

/// The gcc `-pg` PIE fixture's site in `leaf`: `67 e8 rel32` after
/// `push %rbp; mov %rsp,%rbp` (tests/sites.rs).
const LEAF_SITE_OFFSET: usize = 4;

#[test]
fn untraced_calls_return_at_once_and_from_init_on_the_sites_are_nops() {
    let site = c_pie::leaf_address() + LEAF_SITE_OFFSET;
    let built = text(site, 6);
    assert_eq!(
        built[..2],
        [0x67, 0xe8],
        "the compiler's call: {built:02x?}"
    );

    // run(n) makes 1 + 5n calls of instrumented functions.
    let generic_before = fntrace::generic_entries_on_this_thread();
    assert_eq!(c_pie::run(1000), expected_run(1000));
    assert_eq!(
        fntrace::generic_entries_on_this_thread() - generic_before,
        0,
        "5,001 calls before init reached the runtime"
    );
    assert!(!fntrace::stats().initialized);
    assert_eq!(text(site, 6), built, "nothing written before init");

    fntrace::init().unwrap();
    assert_eq!(text(site, 6), NOP6);
    let generic_before = fntrace::generic_entries_on_this_thread();
    assert_eq!(c_pie::run(1000), expected_run(1000));
    assert_eq!(fntrace::generic_entries_on_this_thread(), generic_before);

    // A tracer enabled now sees every call, through the runtime.
    COUNTER.watch(c_pie::leaf_address());
    COUNTER.watch(c_pie::mid_address());
    fntrace::enable("idle-entries").unwrap();
    assert_eq!(c_pie::run(1000), expected_run(1000));
    fntrace::disable("idle-entries").unwrap();
    // run(n): n calls of mid, each making 4 calls of leaf.
    assert_eq!(COUNTER.count(c_pie::mid_address()), 1000);
    assert_eq!(COUNTER.count(c_pie::leaf_address()), 4000);
    assert_eq!(text(site, 6), NOP6);

    // A library opened now keeps its calls until the next operation: they
    // return at once too.
    let dl_run = common::dlopen_dl_run();
    let generic_before = fntrace::generic_entries_on_this_thread();
    assert_eq!(dl_run(1000), expected_run(1000));
    assert_eq!(fntrace::generic_entries_on_this_thread(), generic_before);
    assert_eq!(fntrace::stats().lazily_found, 0);
}

/// `run(n)` of `tests/fixtures/c/workload.c`: the sum of `mid(i)`.
fn expected_run(n: i64) -> i64 {
    (0..n).map(common::expected_c_mid).sum()
}
