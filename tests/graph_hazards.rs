//! What return-address hooking must survive, each on real instrumented code
//! with the graph tracer on: recursion deeper than the shadow stack,
//! setjmp/longjmp across traced frames, a Rust panic caught by
//! catch_unwind, C++ exceptions (caught, rethrown, and caught inside a
//! destructor during unwinding), a thread ending in pthread_exit with
//! hooked frames, and signal handlers running traced code.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::{check_nesting, jump_shape, shape, thread_events};
use fntrace::{Filter, GRAPH_TRACER, MAX_HOOKED_DEPTH};
use fntrace_fixtures::{c_hazards, c_pie, rust};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    GRAPH_TRACER.take_trace(); // start from empty buffers
    guard
}

/// Enables `graph` on the functions matching `glob` and checks that each
/// of their sites calls the fast entry: these hazards are met there first,
/// and it hands them to the generic path.
fn enable_graph_on(glob: &str) {
    fntrace::enable_with("graph", &Filter::new().include(glob)).unwrap();
    let selected: Vec<_> = fntrace::sites()
        .into_iter()
        .filter(|site| site.enabled_tracers > 0)
        .collect();
    assert!(!selected.is_empty(), "{glob} selects no site");
    for site in selected {
        assert!(site.graph_fast_path, "{glob}: {site:?}");
    }
}

#[test]
fn recursion_deeper_than_the_shadow_stack() {
    let _serial = serial();
    let depth = 3 * MAX_HOOKED_DEPTH as u64;
    let before = fntrace::stats().frames_too_deep;
    enable_graph_on("fixture_rust_workload::recurse");
    let result = rust::recurse(depth);
    let c_result = c_hazards::recurse(100);
    fntrace::disable("graph").unwrap();
    assert_eq!(result, depth);
    assert_eq!(c_result, 100);
    // depth + 1 calls; the first MAX_HOOKED_DEPTH are hooked.
    let too_deep = fntrace::stats().frames_too_deep - before;
    assert_eq!(too_deep, depth + 1 - MAX_HOOKED_DEPTH as u64);
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    let (calls, open) = check_nesting(&events);
    assert_eq!(open, 0);
    assert_eq!(calls.len(), MAX_HOOKED_DEPTH);
    assert!(calls.iter().all(|c| c.function == addr!(rust::recurse)));
}

#[test]
fn longjmp_across_traced_frames() {
    let _serial = serial();
    enable_graph_on("hz_*");
    let first = c_hazards::jump(1);
    let second = c_hazards::jump(2);
    fntrace::disable("graph").unwrap();
    assert_eq!((first, second), (42, 42));
    let once = jump_shape();
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    assert_eq!(shape(&events), [once.clone(), once].concat());
    assert_eq!(check_nesting(&events).1, 0);
}

#[test]
fn rust_panic_through_traced_frames_is_caught_with_a_correct_backtrace() {
    let _serial = serial();
    let backtrace = Arc::new(Mutex::new(String::new()));
    let seen = Arc::clone(&backtrace);
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |_| {
        *seen.lock().unwrap() = std::backtrace::Backtrace::force_capture().to_string();
    }));
    enable_graph_on("fixture_rust_workload::*");
    let caught = std::panic::catch_unwind(|| rust::panic_outer(1));
    let after = rust::mid(1); // tracing goes on normally
    let not_panicking = rust::panic_outer(0);
    fntrace::disable("graph").unwrap();
    std::panic::set_hook(previous_hook);

    assert!(caught.is_err());
    assert_eq!(after, rust::mid(1));
    assert_eq!(not_panicking, 1);
    let backtrace = backtrace.lock().unwrap().clone();
    // panic_inner, then panic_outer, then the closure given to catch_unwind
    // (in this test function), in that order: no frame lost or replaced.
    // (Closure names differ between symbol manglings, so only the test
    // function's name is looked for after panic_outer; an optimized build
    // inlines the closure into the `FnOnce::call_once` that runs it.)
    let inner = backtrace.find("fixture_rust_workload::panic_inner");
    let outer = backtrace.find("fixture_rust_workload::panic_outer");
    let caller_name = match cfg!(debug_assertions) {
        true => "rust_panic_through_traced_frames_is_caught_with_a_correct_backtrace",
        false => "core::ops::function::FnOnce::call_once",
    };
    let caller = outer.and_then(|outer| backtrace[outer..].find(caller_name).map(|at| outer + at));
    assert!(
        inner.is_some() && outer.is_some() && caller.is_some() && inner < outer,
        "backtrace lost frames:\n{backtrace}"
    );
    assert!(
        !backtrace.contains("fntrace_return_trampoline"),
        "{backtrace}"
    );

    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    // The unwound panic_inner and panic_outer end where the unwinder lands
    // (catch_unwind's handler); then tracing goes on.
    let expected = panic_then_mid_then_no_panic();
    assert_eq!(shape(&events), expected);
    let (calls, open) = check_nesting(&events);
    assert_eq!((calls.len(), open), (9, 0));
}

/// The shape of both panic tests' traces: panic_outer(1) → panic_inner
/// unwound (their exits where the unwinder lands), then mid and its 4
/// leaves, then panic_outer(0) → panic_inner returning normally.
fn panic_then_mid_then_no_panic() -> Vec<(char, usize, u16)> {
    let (outer, inner) = (addr!(rust::panic_outer), addr!(rust::panic_inner));
    let (mid, leaf) = (addr!(rust::mid), addr!(rust::leaf));
    let panic_calls = [
        ('E', outer, 0),
        ('E', inner, 1),
        ('X', inner, 1),
        ('X', outer, 0),
    ];
    let mut expected = panic_calls.to_vec();
    expected.push(('E', mid, 0));
    for _ in 0..4 {
        expected.extend([('E', leaf, 1), ('X', leaf, 1)]);
    }
    expected.push(('X', mid, 0));
    expected.extend(panic_calls);
    expected
}

/// Runs traced code when dropped: during unwinding, from a cleanup pad.
struct CallsTracedCodeOnDrop;
impl Drop for CallsTracedCodeOnDrop {
    fn drop(&mut self) {
        std::hint::black_box(rust::mid(2));
    }
}

#[test]
fn rust_panic_running_traced_code_in_a_drop_while_unwinding() {
    let _serial = serial();
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    enable_graph_on("fixture_rust_workload::*");
    let caught = std::panic::catch_unwind(|| {
        let _guard = CallsTracedCodeOnDrop;
        rust::panic_outer(1)
    });
    let after = rust::panic_outer(0);
    fntrace::disable("graph").unwrap();
    std::panic::set_hook(previous_hook);
    assert!(caught.is_err());
    assert_eq!(after, 1);
    // The unwinder first lands in the closure's cleanup: panic_inner and
    // panic_outer end there; the drop's calls are traced; unwinding goes on
    // (_Unwind_Resume) to catch_unwind's handler.
    let expected = panic_then_mid_then_no_panic();
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    assert_eq!(shape(&events), expected);
}

#[test]
fn cxx_exception_through_traced_frames() {
    let _serial = serial();
    enable_graph_on("cxx_*");
    let thrown = c_hazards::cxx_throw_and_catch(5);
    let normal = c_hazards::cxx_throw_and_catch(0);
    fntrace::disable("graph").unwrap();
    assert_eq!(thrown, 1005);
    assert_eq!(normal, 1);
    let [catch, middle, thrower] = c_hazards::cxx_addresses();
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    // Where the unwinder lands (the catch), the unwound frames end and the
    // catching frame is hooked again: its exit is seen.
    let once = [
        ('E', catch, 0),
        ('E', middle, 1),
        ('E', thrower, 2),
        ('X', thrower, 2),
        ('X', middle, 1),
        ('X', catch, 0),
    ];
    assert_eq!(shape(&events), [once, once].concat());
    let (calls, open) = check_nesting(&events);
    assert_eq!((calls.len(), open), (6, 0));
}

#[test]
fn cxx_rethrow_from_a_catch_block() {
    let _serial = serial();
    enable_graph_on("cxx_*");
    let result = c_hazards::cxx_rethrow(7);
    fntrace::disable("graph").unwrap();
    assert_eq!(result, 2007);
    let [outer, inner] = c_hazards::cxx_rethrow_addresses();
    let [_, middle, thrower] = c_hazards::cxx_addresses();
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    // Landing in the inner catch hooks inner and outer again; `throw;`
    // unwinds inner (unhooking again first), and the outer catch ends it.
    assert_eq!(
        shape(&events),
        vec![
            ('E', outer, 0),
            ('E', inner, 1),
            ('E', middle, 2),
            ('E', thrower, 3),
            ('X', thrower, 3),
            ('X', middle, 2),
            ('X', inner, 1),
            ('X', outer, 0),
        ]
    );
}

#[test]
fn cxx_catch_inside_a_cleanup_during_unwinding() {
    let _serial = serial();
    enable_graph_on("cxx_*");
    let result = c_hazards::cxx_throw_through_cleanup(4);
    fntrace::disable("graph").unwrap();
    assert_eq!(result, 3004);
    let [outer, with_cleanup, in_cleanup] = c_hazards::cxx_cleanup_addresses();
    let [_, middle, thrower] = c_hazards::cxx_addresses();
    let events = thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    // The unwinder first lands in with_cleanup's cleanup: middle and thrower
    // end there. The guard's destructor runs in_cleanup, whose own throw
    // lands in its catch; _Unwind_Resume unhooks with_cleanup and outer
    // again before unwinding goes on to outer's catch.
    assert_eq!(
        shape(&events),
        vec![
            ('E', outer, 0),
            ('E', with_cleanup, 1),
            ('E', middle, 2),
            ('E', thrower, 3),
            ('X', thrower, 3),
            ('X', middle, 2),
            ('E', in_cleanup, 2),
            ('E', thrower, 3),
            ('X', thrower, 3),
            ('X', in_cleanup, 2),
            ('X', with_cleanup, 1),
            ('X', outer, 0),
        ]
    );
}

#[test]
fn thread_ending_in_pthread_exit_with_hooked_frames() {
    let _serial = serial();
    enable_graph_on("hz_*");
    let results: Vec<i64> = (1..=20).map(c_hazards::thread_exit).collect();
    fntrace::disable("graph").unwrap();
    assert_eq!(results, (1..=20).map(|x| 3 * x).collect::<Vec<_>>());
    let [main, inner] = c_hazards::thread_exit_addresses();
    let trace = GRAPH_TRACER.take_trace();
    let exiting: Vec<_> = trace
        .threads
        .iter()
        .filter(|t| t.events.first().is_some_and(|e| e.function == main))
        .collect();
    assert_eq!(exiting.len(), 20);
    for thread in exiting {
        assert_eq!(shape(&thread.events), vec![('E', main, 0), ('E', inner, 1)]);
    }
}

static HANDLER_CALLS: AtomicU64 = AtomicU64::new(0);

extern "C" fn traced_work_in_handler(_signal: libc::c_int) {
    c_pie::mid(3);
    HANDLER_CALLS.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn signal_handlers_running_traced_code() {
    let _serial = serial();
    // SAFETY: installs a handler for SIGURG (not fntrace's stop signal) that
    // only runs traced C code and bumps an atomic.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = traced_work_in_handler as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        assert_eq!(
            libc::sigaction(libc::SIGURG, &action, std::ptr::null_mut()),
            0
        );
    }
    fntrace::enable_with(
        "graph",
        &Filter::new()
            .include("pie_*")
            .include("fixture_rust_workload::*"),
    )
    .unwrap();
    // Signals land inside the fast entry and exit too.
    assert!(fntrace::site_of(addr!(rust::run)).unwrap().graph_fast_path);
    assert!(
        fntrace::site_of(c_pie::mid_address())
            .unwrap()
            .graph_fast_path
    );
    // A bounded amount of work (3,000 to 4,500 × 26 calls), so the buffers
    // never fill; signals keep coming until it is done. Most of a round is
    // spent in the tracer's fast paths, where a handler's calls are not
    // traced: on a loaded machine few signals get through in 3,000 rounds,
    // so the worker goes on until 100 were handled (or 4,500 rounds).
    const ROUNDS: u64 = 3_000;
    const MAX_ROUNDS: u64 = 4_500;
    let done = Arc::new(AtomicBool::new(false));
    let worker = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let tid = fntrace::current_tid();
            let mut rounds = 0;
            while rounds < MAX_ROUNDS
                && (rounds < ROUNDS || HANDLER_CALLS.load(Ordering::Relaxed) < 100)
            {
                rust::run(5);
                // Untraced work between rounds: without it nearly all of a
                // round is tracer code, and 2 of about 60 handlers were
                // traced (CI once saw 0 of 47); with it, 36 to 63 of 100.
                for i in 0..5_000u32 {
                    std::hint::black_box(i);
                }
                rounds += 1;
            }
            done.store(true, Ordering::Relaxed);
            (tid, rounds)
        })
    };
    let pthread = {
        use std::os::unix::thread::JoinHandleExt;
        worker.as_pthread_t()
    };
    let mut sent = 0u64;
    while !done.load(Ordering::Relaxed) {
        // SAFETY: the worker thread is alive until joined below (a signal
        // sent after its last traced call is handled before it exits).
        unsafe { libc::pthread_kill(pthread, libc::SIGURG) };
        sent += 1;
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
    let (tid, rounds) = worker.join().unwrap();
    fntrace::disable("graph").unwrap();
    let handled = HANDLER_CALLS.load(Ordering::Relaxed);
    assert!(
        sent > 0 && handled > 0,
        "{sent} signals sent, {handled} handled"
    );

    let events = thread_events(&GRAPH_TRACER.take_trace(), tid);
    let (calls, open) = check_nesting(&events);
    assert_eq!(open, 0, "every call the thread made returned");
    let count = |f: usize| calls.iter().filter(|c| c.function == f).count() as u64;
    assert_eq!(count(addr!(rust::run)), rounds);
    assert_eq!(count(addr!(rust::leaf)), rounds * 20);
    // A handler's calls are traced unless the signal landed while the thread
    // was inside tracer code (then the recursion guard skips them).
    let handler_mids = count(c_pie::mid_address());
    assert!(
        handler_mids <= handled && handler_mids > 0,
        "{handler_mids} of {handled}"
    );
    assert_eq!(count(c_pie::leaf_address()), handler_mids * 4);
}
