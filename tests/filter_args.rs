//! Argument specs given in a [`Filter`] (`Filter::args`, `Filter::retval`):
//! a recording of `gcc -pg` code (`c/workload.c`) made with
//! `fntrace::record` carries the values, and the real `uftrace replay`
//! shows them; a filter without specs keeps the specs in force; a spec
//! whose glob selects no function is refused with nothing changed.

#[macro_use]
mod common;

use std::sync::Mutex;

use common::{temp_dir, uftrace_replay};
use fntrace::{Error, Filter};
use fntrace_fixtures::c_pie;

/// The specs are the process's: the tests of this file take turns.
static SERIAL: Mutex<()> = Mutex::new(());

/// `pie_run(2)` with `mid`'s argument and `leaf`'s argument and return
/// value (leaf(x) = 3x + 1), as `uftrace replay -f none` shows it.
const EXPECTED: &str = "pie_run() {
  pie_mid(0) {
    pie_leaf(0) = 1;
    pie_leaf(1) = 4;
    pie_leaf(2) = 7;
    pie_leaf(3) = 10;
  } /* pie_mid */
  pie_mid(1) {
    pie_leaf(1) = 4;
    pie_leaf(2) = 7;
    pie_leaf(3) = 10;
    pie_leaf(4) = 13;
  } /* pie_mid */
} /* pie_run */
";

/// Records `pie_run(2)` with `filter`; the replay of the recording.
fn recorded_run(filter: &Filter, name: &str) -> String {
    let dir = temp_dir(name);
    let recording = fntrace::record("graph", filter, &dir).unwrap();
    c_pie::run(2);
    let report = recording.stop().unwrap();
    assert_eq!((report.lost, report.values_lost), (0, 0), "{report:?}");
    let replay = uftrace_replay(&dir, Some(fntrace::current_tid()));
    let _ = std::fs::remove_dir_all(&dir);
    replay
}

#[test]
fn a_filters_specs_are_recorded_and_kept_until_replaced() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let with_specs = Filter::new()
        .include("pie_*")
        .args("pie_mid@arg1")
        .args("pie_leaf@arg1/d")
        .retval("pie_leaf@retval/d");
    assert_eq!(recorded_run(&with_specs, "filter-args"), EXPECTED);
    // No specs in this filter: those in force stay.
    let plain = Filter::new().include("pie_*");
    assert_eq!(recorded_run(&plain, "filter-args-kept"), EXPECTED);
    // Other specs replace them: `leaf` without values now.
    let mid_only = Filter::new().include("pie_*").args("pie_mid@arg1");
    let leaf_plain: String = EXPECTED
        .lines()
        .map(|line| match line.split_once("pie_leaf(") {
            Some((indent, _)) => format!("{indent}pie_leaf();\n"),
            None => format!("{line}\n"),
        })
        .collect();
    assert_eq!(recorded_run(&mid_only, "filter-args-replaced"), leaf_plain);
}

#[test]
fn a_spec_selecting_no_function_is_refused_with_nothing_changed() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let filter = Filter::new()
        .include("pie_*")
        .args("pie_leaf@arg1/d")
        .args("no_such_function_anywhere@arg1");
    let refused = fntrace::enable_with("graph", &filter).unwrap_err();
    assert!(
        matches!(&refused, Error::BadArgSpec(why) if why.contains("no_such_function_anywhere")),
        "{refused}"
    );
    let leaf = fntrace::site_of(c_pie::leaf_address()).unwrap();
    assert!(
        !leaf.patched,
        "refused, yet the graph tracer patched {leaf:?}"
    );
    let dir = temp_dir("filter-args-refused");
    let refused = fntrace::record("graph", &filter, &dir).err();
    assert!(matches!(refused, Some(Error::BadArgSpec(_))), "{refused:?}");
    // Nor were the specs taken: a filter without specs records none.
    let _ = std::fs::remove_dir_all(&dir);
    let replay = recorded_run(&Filter::new().include("pie_leaf"), "filter-args-none");
    assert!(!replay.contains('='), "{replay}");
    assert_eq!(replay.matches("pie_leaf();").count(), 8, "{replay}");
    // A spec that does not parse.
    let bad = Filter::new().include("pie_*").args("pie_leaf@arg9");
    let refused = fntrace::enable_with("graph", &bad).unwrap_err();
    assert!(matches!(refused, Error::BadArgSpec(_)), "{refused}");
}
