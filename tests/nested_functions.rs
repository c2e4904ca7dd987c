//! GNU C nested functions: with `-pg -mfentry` gcc wraps their `__fentry__`
//! call in `push %r10` / `pop %r10` (the static chain), so the return
//! address into the parent lies one slot above the usual one. The ELF scan
//! finds these sites (before they ever run), the graph tracer hooks the
//! right slot (the saved r10 is left alone: the function still reaches its
//! parent's variables), and the trace read by the real `uftrace replay`
//! equals what the real `uftrace record` shows for the `-pg` (mcount) build
//! of the same source. (uftrace 0.13 itself crashes the `-mfentry` builds:
//! it hooks the saved r10; README, "Differences from uftrace".)

mod common;

use common::{render, temp_dir, thread_events, uftrace_record, uftrace_replay, without_main};
use fntrace::{SiteKind, GRAPH_TRACER};
use fntrace_fixtures::c_nested::BUILDS;

#[test]
fn nested_functions_are_found_by_the_scan_and_traced_like_uftrace_does() {
    fntrace::init().unwrap();
    // The real uftrace on the mcount build.
    let mcount = &BUILDS[0];
    let dir = temp_dir("nested-uftrace");
    assert!(
        uftrace_record(&dir, &mcount.program(), &[]),
        "{}",
        mcount.flags
    );
    let theirs = without_main(&uftrace_replay(&dir, None)).replace(mcount.prefix, "");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        theirs,
        "nested_outer() {\n  inner.0();\n  inner.0();\n  inner.0();\n} /* nested_outer */\n"
    );

    for build in &BUILDS {
        // Found by the scan, not by a first call (none has run yet).
        let outer = build.outer_address();
        let inner = fntrace::sites()
            .into_iter()
            .find(|site| {
                // Its own build's (each build has an `inner.0`): gcc puts
                // it right before or after the outer function.
                site.function.abs_diff(outer) < 256
                    && fntrace::function_name(site.function).as_deref() == Some("inner.0")
            })
            .unwrap_or_else(|| panic!("{}: no site for inner.0", build.flags));
        assert!(!inner.lazily_found, "{}", build.flags);
        if inner.kind == SiteKind::Fentry {
            // `push %r10` (2 bytes) comes first.
            assert_eq!(inner.address - inner.function, 2, "{}", build.flags);
        }

        GRAPH_TRACER.take_trace();
        fntrace::enable("graph").unwrap();
        let result = build.outer(2);
        fntrace::disable("graph").unwrap();
        assert_eq!(result, 6, "{}: the static chain survived", build.flags);
        let tid = fntrace::current_tid();
        let events = thread_events(&GRAPH_TRACER.snapshot(), tid);
        assert_eq!(
            render(&events, build.prefix),
            "E0 nested_outer E1 inner.0 X1 inner.0 E1 inner.0 X1 inner.0 \
             E1 inner.0 X1 inner.0 X0 nested_outer",
            "{}",
            build.flags
        );
        let dir = temp_dir(&format!("nested-{}", build.prefix));
        fntrace::dump(&dir).unwrap();
        let ours = uftrace_replay(&dir, Some(tid)).replace(build.prefix, "");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(ours, theirs, "{}", build.flags);
    }
}
