//! The traced path never patches text: a site found by its first call (a
//! `-pg` library opened with `dlopen` after `init`, called while a tracer
//! is enabled) is only recorded there and keeps its call; the next control
//! operation (`flush`) writes its NOP. (Until this was so, the discovering
//! thread wrote the NOP itself, inside the traced function's prologue: it
//! could block there for the whole stop protocol, and deadlock when the
//! first call came from a signal handler that had interrupted `malloc`.)
//! While no tracer is enabled, such a call returns at once and finds
//! nothing: the next operation's scan finds the library.

mod common;

use std::ffi::CString;

use common::{text, Counter};
use fntrace::Filter;

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("lazy-sites", &COUNTER);

#[test]
fn a_site_found_by_its_first_call_keeps_its_call_until_the_next_operation() {
    fntrace::init().unwrap();
    // Enabled for none of the library's functions (a filter selects sites
    // at control operations only): its calls reach the runtime, which
    // records their sites, and no tracer takes them.
    fntrace::enable_with("lazy-sites", &Filter::new().include("no_such_function")).unwrap();
    let path = CString::new(fntrace_fixtures::DLOPEN_LIBRARY).unwrap();
    // SAFETY: dlopen/dlsym of a plain C library built by the fixtures; dl_run
    // has the C signature long(long).
    let (run, call_run) = unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(
            !handle.is_null(),
            "dlopen {}",
            fntrace_fixtures::DLOPEN_LIBRARY
        );
        let address = libc::dlsym(handle, c"dl_run".as_ptr());
        assert!(!address.is_null());
        let call: extern "C" fn(i64) -> i64 = std::mem::transmute(address);
        (address as usize, call)
    };
    call_run(1);

    // dl_run, dl_mid and dl_leaf: found by their first calls, all `ff 15`
    // (a shared object's GOT call), all still holding that call.
    let library_sites = || {
        let mut sites: Vec<_> = fntrace::sites()
            .into_iter()
            .filter(|s| s.lazily_found && s.address.abs_diff(run) < 4096)
            .collect();
        sites.sort_by_key(|s| s.address);
        sites
    };
    let found = library_sites();
    assert_eq!(found.len(), 3, "{found:?}");
    for site in &found {
        assert_eq!(site.original[..2], [0xff, 0x15], "{site:?}");
        assert!(site.patched, "{site:?}");
        assert_eq!(text(site.address, 6), site.original, "{site:?}");
    }
    // More calls change nothing: no call through the site patches it.
    for n in 0..100 {
        call_run(n);
    }
    for site in &found {
        assert_eq!(text(site.address, 6), site.original, "{site:?}");
    }

    // The next control operation writes the NOPs.
    fntrace::flush().unwrap();
    for site in library_sites() {
        assert!(!site.patched, "{site:?}");
        assert_eq!(text(site.address, 6), [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00]);
    }
    fntrace::disable("lazy-sites").unwrap();
    assert_eq!(COUNTER.all.load(std::sync::atomic::Ordering::Relaxed), 0);
}
