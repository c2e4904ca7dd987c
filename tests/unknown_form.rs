//! A call into the mcount trampoline whose bytes are no known site form
//! (`call *%rax`), made while a tracer is enabled (else it returns at
//! once), is counted as unrecognised, recorded once, and its bytes are
//! never written, also across enable/disable.

#[macro_use]
mod common;

use common::Counter;
use fntrace::Filter;
use fntrace_fixtures::c_hazards;

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("unknown-form", &COUNTER);

#[test]
fn unknown_call_forms_are_counted_and_never_written() {
    fntrace::init().unwrap();
    assert_eq!(fntrace::stats().unrecognized_sites, 0);
    // Nothing enabled: the call returns from the trampoline at once.
    c_hazards::register_call_to_mcount();
    assert_eq!(fntrace::stats().unrecognized_sites, 0);
    // Enabled for no function: the call reaches the runtime.
    let none = Filter::new().include("no_such_function");
    fntrace::enable_with("unknown-form", &none).unwrap();
    c_hazards::register_call_to_mcount();
    assert_eq!(fntrace::stats().unrecognized_sites, 1);
    let unknown: Vec<_> = fntrace::sites()
        .into_iter()
        .filter(|s| s.form.is_none())
        .collect();
    assert_eq!(unknown.len(), 1);
    let site = &unknown[0];
    assert!(site.lazily_found && !site.patched && site.original.is_empty());
    // `site.address` is the call's return address: the `ff d0` before it
    // is what the CPU executed.
    let before = common::text(site.address - 2, 2);
    assert_eq!(before, [0xff, 0xd0]);

    // Recorded once: the second call finds it in the table.
    c_hazards::register_call_to_mcount();
    assert_eq!(fntrace::stats().unrecognized_sites, 1);
    fntrace::disable("unknown-form").unwrap();
    fntrace::enable("unknown-form").unwrap();
    c_hazards::register_call_to_mcount();
    fntrace::disable("unknown-form").unwrap();
    assert_eq!(common::text(site.address - 2, 2), [0xff, 0xd0]);
    // The function's own (recognised) mcount site was traced; the register
    // call was not dispatched to the tracer.
    let own = fntrace::function_name(site.address).unwrap();
    assert_eq!(own, "hz_register_call_to_mcount");
}
