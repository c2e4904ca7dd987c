//! A `-pg` library opened with `dlopen` while the graph tracer is on: with
//! a tracer enabled for every function, its functions are traced from their
//! first call (found by the lazy hook, selected at once, never NOPed), and
//! the trace read by the real `uftrace replay` equals the real `uftrace
//! record` of a program doing the same. With a name filter, which only a
//! control operation can apply, the library's sites are selected by it at
//! the next one (`flush`), and only the functions it names are traced.

mod common;

use std::ffi::CString;
use std::sync::Mutex;

use common::{render, temp_dir, thread_events, uftrace_record, uftrace_replay, without_main};
use fntrace::{Filter, GRAPH_TRACER};

static SERIAL: Mutex<()> = Mutex::new(());

/// `dlopen`s `path` and returns `run`, `mid` and `leaf` with `prefix`.
fn open(path: &str, prefix: &str) -> [usize; 3] {
    let path = CString::new(path).unwrap();
    // SAFETY: dlopen/dlsym of a plain C library built by the fixtures.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!handle.is_null(), "dlopen {path:?}");
        ["run", "mid", "leaf"].map(|name| {
            let name = CString::new(format!("{prefix}{name}")).unwrap();
            let address = libc::dlsym(handle, name.as_ptr());
            assert!(!address.is_null());
            address as usize
        })
    }
}

fn call(function: usize, x: i64) -> i64 {
    // SAFETY: the fixture's run/mid/leaf have the C signature long(long).
    let function: extern "C" fn(i64) -> i64 = unsafe { std::mem::transmute(function) };
    function(x)
}

/// The events of `run(2)` (two `mid`s of four `leaf`s each).
const RUN_2: &str = "E0 run E1 mid E2 leaf X2 leaf E2 leaf X2 leaf E2 leaf X2 leaf \
     E2 leaf X2 leaf X1 mid E1 mid E2 leaf X2 leaf E2 leaf X2 leaf E2 leaf X2 leaf \
     E2 leaf X2 leaf X1 mid X0 run";

#[test]
fn a_library_opened_while_tracing_is_traced_from_its_first_call() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    GRAPH_TRACER.take_trace();
    fntrace::enable("graph").unwrap();
    let [run, mid, leaf] = open(fntrace_fixtures::DLOPEN_LIBRARY, "dl_");
    assert_eq!(call(run, 2), 56);
    // The sites were found by their first calls and kept their calls.
    for function in [run, mid, leaf] {
        let site = fntrace::site_of(function).expect("site of a dlopen'ed function");
        assert!(
            site.lazily_found && site.patched && site.enabled_tracers == 1,
            "{site:?}"
        );
    }
    fntrace::disable("graph").unwrap();
    for function in [run, mid, leaf] {
        assert!(!fntrace::site_of(function).unwrap().patched, "NOPed now");
    }
    let tid = fntrace::current_tid();
    let events = thread_events(&GRAPH_TRACER.snapshot(), tid);
    assert_eq!(render(&events, "dl_"), RUN_2);

    let dir = temp_dir("dlopen-ours");
    fntrace::dump(&dir).unwrap();
    let ours = uftrace_replay(&dir, Some(tid));
    let _ = std::fs::remove_dir_all(&dir);
    let theirs_dir = temp_dir("dlopen-uftrace");
    let program = std::path::Path::new(fntrace_fixtures::DLOPEN_PROGRAM);
    assert!(uftrace_record(
        &theirs_dir,
        program,
        &[fntrace_fixtures::DLOPEN_LIBRARY]
    ));
    let theirs = without_main(&uftrace_replay(&theirs_dir, None));
    let _ = std::fs::remove_dir_all(&theirs_dir);
    assert_eq!(ours, theirs);
}

#[test]
fn a_name_filter_selects_a_library_opened_while_tracing_at_the_next_operation() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    GRAPH_TRACER.take_trace();
    fntrace::enable_with("graph", &Filter::new().include("dl2_mid")).unwrap();
    let [run, mid, leaf] = open(fntrace_fixtures::DLOPEN_LIBRARY2, "dl2_");
    // Names are unknown to the lazy hook: not traced yet.
    assert_eq!(call(run, 1), 22);
    fntrace::flush().unwrap();
    for (function, selected) in [(run, false), (mid, true), (leaf, false)] {
        let site = fntrace::site_of(function).unwrap();
        assert_eq!(
            (site.patched, site.enabled_tracers),
            (selected, selected as u32)
        );
    }
    assert_eq!(call(run, 1), 22);
    fntrace::disable("graph").unwrap();
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    assert_eq!(render(&events, "dl2_"), "E0 mid X0 mid");
}
