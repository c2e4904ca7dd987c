//! A coroutine that switches stacks with `swapcontext` itself, so that when
//! resumed it calls a traced function before any traced function of its
//! stack returns (`tests/fixtures/c/coroutines.c`, four gcc builds), its
//! stack below the main flow's or above it: the graph tracer's fast entry
//! hands such calls to the generic path (the top frame lies on another
//! stack), and the trace is exactly the generic path's: the coroutine's
//! calls nest in its own frames, the main flow's in its own.

mod common;

use common::render;
use fntrace::{Filter, GRAPH_TRACER};
use fntrace_fixtures::faithful::{Build, COROUTINES};

/// One `co_main`: the coroutine's frames keep their depths (under the
/// first `co_resume`) and are set aside while the main flow runs.
const EXPECTED: &str = "\
E0 co_main E1 co_resume E2 co_body E3 co_leaf X3 co_leaf \
E2 co_leaf X2 co_leaf X1 co_resume \
E1 co_resume E3 co_leaf X3 co_leaf \
E2 co_leaf X2 co_leaf X1 co_resume \
E1 co_resume E3 co_leaf X3 co_leaf X2 co_body \
E2 co_leaf X2 co_leaf X1 co_resume \
E1 co_leaf X1 co_leaf X0 co_main";

/// The events of `co_main(in_frame)` traced by the graph tracer (with the
/// function tracer too when `generic`: every call on the generic paths).
fn trace(build: &Build, in_frame: bool, generic: bool) -> String {
    fntrace::init().unwrap();
    GRAPH_TRACER.take_trace();
    let filter = Filter::new().include(&format!("{}co_*", build.prefix));
    fntrace::enable_with("graph", &filter).unwrap();
    if generic {
        fntrace::enable_with("function", &filter).unwrap();
    }
    assert_eq!(
        build.call("co_main", in_frame as i64),
        43,
        "{}",
        build.flags
    );
    if generic {
        fntrace::disable("function").unwrap();
    }
    fntrace::disable("graph").unwrap();
    let events = common::thread_events(&GRAPH_TRACER.take_trace(), fntrace::current_tid());
    render(&events, build.prefix)
}

#[test]
fn a_resumed_coroutine_calling_first_nests_in_its_own_frames_on_the_fast_path() {
    for build in &COROUTINES {
        for in_frame in [false, true] {
            let what = format!("{} (stack in the frame: {in_frame})", build.flags);
            let generic = trace(build, in_frame, true);
            assert_eq!(generic, EXPECTED, "{what}, generic paths");
            let fast = trace(build, in_frame, false);
            assert_eq!(fast, EXPECTED, "{what}, fast path");
        }
    }
}
