//! A `-pg` library loaded with `dlopen` after `init`: its calls while no
//! tracer is enabled return from fntrace's entry at once (nothing found,
//! nothing recorded), the next `enable` rescans the loaded objects (the
//! symbol cache's generation changed), and its functions are traced with
//! their names.

#[macro_use]
mod common;

use std::ffi::CString;

use common::{check_nesting, shape, thread_events};
use fntrace::{Filter, SiteForm, GRAPH_TRACER};

#[test]
fn a_library_opened_after_init_is_traced_with_names() {
    fntrace::init().unwrap();
    let scanned_before = fntrace::stats().scan.sites_found;
    let path = CString::new(fntrace_fixtures::DLOPEN_LIBRARY).unwrap();
    // SAFETY: dlopen/dlsym of a plain C library built by the fixtures.
    let (run, mid, leaf) = unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(
            !handle.is_null(),
            "dlopen {}",
            fntrace_fixtures::DLOPEN_LIBRARY
        );
        let symbol = |name: &str| {
            let name = CString::new(name).unwrap();
            let address = libc::dlsym(handle, name.as_ptr());
            assert!(!address.is_null());
            address as usize
        };
        (symbol("dl_run"), symbol("dl_mid"), symbol("dl_leaf"))
    };
    // SAFETY: dl_run has the C signature long(long).
    let call_run: extern "C" fn(i64) -> i64 = unsafe { std::mem::transmute(run) };

    // Before any enable: the calls return at once.
    let expected: i64 = (0..2)
        .map(|i| (0..4).map(|j| (i + j) * 3 + 1).sum::<i64>())
        .sum();
    let (found_before, generic_before) = (
        fntrace::stats().lazily_found,
        fntrace::generic_entries_on_this_thread(),
    );
    assert_eq!(call_run(2), expected);
    assert_eq!(fntrace::stats().lazily_found, found_before);
    assert_eq!(fntrace::generic_entries_on_this_thread(), generic_before);
    fntrace::enable_with("graph", &Filter::new().include("dl_*")).unwrap();
    let stats = fntrace::stats();
    assert!(
        stats.scan.sites_found > scanned_before,
        "the new library was scanned"
    );
    for function in [run, mid, leaf] {
        let site = fntrace::site_of(function).expect("site of a dlopen'ed function");
        // In a shared object the GOT call stays `ff 15`.
        assert_eq!(site.form, Some(SiteForm::CallGotRip));
        assert!(site.patched);
    }
    call_run(3);
    fntrace::disable("graph").unwrap();

    let trace = GRAPH_TRACER.take_trace();
    let events = thread_events(&trace, fntrace::current_tid());
    let (calls, open) = check_nesting(&events);
    assert_eq!(open, 0);
    assert_eq!(calls.len(), 1 + 3 + 12);
    assert_eq!(shape(&events[..2]), vec![('E', run, 0), ('E', mid, 1)]);
    assert_eq!(trace.name_of(run), "dl_run");
    assert_eq!(trace.name_of(leaf), "dl_leaf");
    assert_eq!(fntrace::function_name(mid).as_deref(), Some("dl_mid"));
}
