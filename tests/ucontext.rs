//! Coroutines on ucontext stacks (makecontext / swapcontext), built with gcc
//! `-pg` and `-pg -mfentry` at `-O0` and `-O2`, traced by the graph tracer:
//! the program runs to its end with its own result (a stack switch never
//! aborts it), and the trace, dumped and read by the real `uftrace replay`,
//! shows each coroutine's calls nested under the `ctx_resume` running it,
//! at the depths they had when entered, exactly. The same program recorded
//! by the real `uftrace record` makes the same calls in the same order;
//! uftrace 0.13 nests them differently (README, "Differences from uftrace").

mod common;

use std::sync::Mutex;

use common::{render, temp_dir, uftrace_record, uftrace_replay};

use fntrace::{Filter, GRAPH_TRACER};
use fntrace_fixtures::c_ucontext::{Build, BUILDS};

static SERIAL: Mutex<()> = Mutex::new(());

/// The events of one `ctx_main`, as the graph tracer records them: kind,
/// depth, function (without the build's prefix). Each coroutine's frames
/// keep the depths they were entered at (under the `ctx_resume` that started
/// it); when a later `ctx_resume` continues it, its `ctx_yield` returns at
/// its old depth.
const EXPECTED_EVENTS: &str = "\
E0 ctx_main E1 ctx_resume E2 ctx_body E3 ctx_work E4 ctx_leaf X4 ctx_leaf E4 ctx_yield \
E2 ctx_leaf X2 ctx_leaf X1 ctx_resume \
E1 ctx_resume E2 ctx_body E3 ctx_work E4 ctx_leaf X4 ctx_leaf E4 ctx_yield \
E2 ctx_leaf X2 ctx_leaf X1 ctx_resume \
E1 ctx_resume X4 ctx_yield E4 ctx_leaf X4 ctx_leaf E4 ctx_yield \
E2 ctx_leaf X2 ctx_leaf X1 ctx_resume \
E1 ctx_resume X4 ctx_yield E4 ctx_leaf X4 ctx_leaf E4 ctx_yield \
E2 ctx_leaf X2 ctx_leaf X1 ctx_resume \
E1 ctx_resume X4 ctx_yield X3 ctx_work E3 ctx_leaf X3 ctx_leaf X2 ctx_body \
E2 ctx_leaf X2 ctx_leaf X1 ctx_resume \
E1 ctx_resume X4 ctx_yield X3 ctx_work E3 ctx_leaf X3 ctx_leaf X2 ctx_body \
E2 ctx_leaf X2 ctx_leaf X1 ctx_resume \
E1 ctx_leaf X1 ctx_leaf X0 ctx_main";

/// `uftrace replay -f none` of the dumped trace. uftrace pairs an exit with
/// the innermost open call, so the dump closes a coroutine's frames where
/// the main flow shows them left and leaves out their exits when it comes
/// back (`fntrace::export`'s rules): each run of a coroutine shows under the
/// `ctx_resume` that ran it.
const EXPECTED_REPLAY: &str = "\
ctx_main() {
  ctx_resume() {
    ctx_body() {
      ctx_work() {
        ctx_leaf();
        ctx_yield();
      } /* ctx_work */
    } /* ctx_body */
    ctx_leaf();
  } /* ctx_resume */
  ctx_resume() {
    ctx_body() {
      ctx_work() {
        ctx_leaf();
        ctx_yield();
      } /* ctx_work */
    } /* ctx_body */
    ctx_leaf();
  } /* ctx_resume */
  ctx_resume() {
    ctx_leaf();
    ctx_yield();
    ctx_leaf();
  } /* ctx_resume */
  ctx_resume() {
    ctx_leaf();
    ctx_yield();
    ctx_leaf();
  } /* ctx_resume */
  ctx_resume() {
    ctx_leaf();
    ctx_leaf();
  } /* ctx_resume */
  ctx_resume() {
    ctx_leaf();
    ctx_leaf();
  } /* ctx_resume */
  ctx_leaf();
} /* ctx_main */
";

/// The entries of `EXPECTED_EVENTS`, in order.
fn expected_entries() -> Vec<String> {
    let words: Vec<&str> = EXPECTED_EVENTS.split(' ').collect();
    words
        .chunks(2)
        .filter(|event| event[0].starts_with('E'))
        .map(|event| event[1].to_owned())
        .collect()
}

/// Traces `ctx_main(in_frame)` of `build` with the graph tracer (and, with
/// `generic`, the function tracer too, which sends every call through the
/// generic entry and exit paths). Returns its result and the stats deltas
/// (stack switches, resyncs).
fn trace(build: &Build, in_frame: bool, generic: bool) -> (i64, u64, u64) {
    fntrace::init().unwrap();
    GRAPH_TRACER.take_trace();
    let glob = format!("{}ctx_*", build.prefix);
    let filter = Filter::new().include(&glob);
    let before = fntrace::stats();
    fntrace::enable_with("graph", &filter).unwrap();
    if generic {
        fntrace::enable_with("function", &filter).unwrap();
    }
    let result = build.ctx_main(in_frame);
    if generic {
        fntrace::disable("function").unwrap();
    }
    fntrace::disable("graph").unwrap();
    let after = fntrace::stats();
    (
        result,
        after.stack_switches - before.stack_switches,
        after.shadow_resyncs - before.shadow_resyncs,
    )
}

/// The function names of the entries in a replay, in order.
fn entries(replay: &str) -> Vec<String> {
    replay
        .lines()
        .map(str::trim)
        .filter(|l| l.ends_with("() {") || l.ends_with("();"))
        .map(|l| l.split('(').next().unwrap().to_owned())
        .collect()
}

fn check_build(build: &Build, in_frame: bool, generic: bool) {
    let (result, switches, _) = trace(build, in_frame, generic);
    assert_eq!(result, 260, "{}", build.flags);
    // Each of the 4 yields to the main flow parks a coroutine's frames, and
    // each of the 4 resumptions that continue one brings them back (a
    // coroutine's end leaves none to park).
    assert_eq!(switches, 8, "{}", build.flags);
    let tid = fntrace::current_tid();
    let events = common::thread_events(&GRAPH_TRACER.snapshot(), tid);
    assert_eq!(
        render(&events, build.prefix),
        EXPECTED_EVENTS,
        "{}",
        build.flags
    );
    let dir = temp_dir(&format!("ucontext-{}{in_frame}{generic}", build.prefix));
    fntrace::dump(&dir).expect("dump");
    let ours = uftrace_replay(&dir, Some(tid)).replace(build.prefix, "");
    assert_eq!(ours, EXPECTED_REPLAY, "{}", build.flags);
    let _ = std::fs::remove_dir_all(&dir);

    // The real uftrace on the same code: the same calls in the same order
    // (`main` aside; library calls not recorded).
    let theirs_dir = temp_dir(&format!("ucontext-uftrace-{}{in_frame}", build.prefix));
    let args: &[&str] = if in_frame { &["in-frame"] } else { &[] };
    assert!(
        uftrace_record(&theirs_dir, &build.program(), args),
        "{} under uftrace record",
        build.flags
    );
    let theirs = uftrace_replay(&theirs_dir, None).replace(build.prefix, "");
    let _ = std::fs::remove_dir_all(&theirs_dir);
    let mut their_entries = entries(&theirs);
    assert_eq!(their_entries.remove(0), "main", "{theirs}");
    assert_eq!(
        their_entries,
        expected_entries(),
        "{}:\n{theirs}",
        build.flags
    );
    assert_eq!(entries(&ours), expected_entries());
    // uftrace 0.13 pairs returns with the newest entry of the thread, so a
    // coroutine's next resume shows nested in its `ctx_yield`, and the
    // frames left open at the end are reported as remaining.
    assert!(theirs.contains(
        "          ctx_yield() {\n            ctx_leaf();\n            ctx_resume() {\n"
    ));
}

#[test]
fn coroutines_nest_under_their_resume_in_all_four_builds() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for build in &BUILDS {
        check_build(build, false, false);
    }
}

#[test]
fn coroutines_on_the_generic_paths_alone() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for build in &BUILDS {
        check_build(build, false, true);
    }
}

/// Coroutine stacks in the frame of the function that switches to them lie
/// on the thread's own stack, above the frames that switch: fntrace knows
/// them from `makecontext` (it notes each context's stack), so on the
/// generic paths the trace is exactly the same as with stacks far away.
#[test]
fn coroutine_stacks_on_the_thread_stack_on_the_generic_paths() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for build in &BUILDS {
        check_build(build, true, true);
    }
}

/// The same with the graph tracer's fast entry, which hands a call to the
/// generic path when its slot and the top frame's may lie on different
/// stacks (a range of slots on one stack that the generic path keeps per
/// thread does not hold both): exactly the same trace.
#[test]
fn coroutine_stacks_on_the_thread_stack_on_the_fast_path() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for build in &BUILDS {
        check_build(build, true, false);
    }
}
