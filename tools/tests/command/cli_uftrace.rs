//! The `fntrace` commands on directories written by the real `uftrace
//! record` of a small C program built with `gcc -pg` in the test: counts
//! are exact, and `fntrace graph` agrees with `uftrace graph` on the same
//! directory. gcc and uftrace are required (CI installs them): a missing one
//! fails the test.

use crate::common;

use common::{fntrace, fntrace_ok, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

/// The traced program. With an argument N, `outer` runs `inner` N times
/// (each calling `leaf` 4 times), twice; then `leaf` and `fact(4)`
/// (recursive, `leaf` at the bottom). With a second argument, `quit` calls
/// `exit`, so that `main`, `quit` and `exit` never return.
const PROGRAM: &str = r#"
#include <stdlib.h>
int leaf(int x) { return x * 2; }
int fact(int n) { return n <= 1 ? leaf(n) : n * fact(n - 1); }
int inner(int x) { int s = 0; for (int i = 0; i < 4; i++) s += leaf(x + i); return s; }
int outer(int n) { int s = 0; for (int i = 0; i < n; i++) s += inner(i); return s; }
void quit(int code) { exit(code); }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3, s = 0;
    for (int i = 0; i < 2; i++) s += outer(n);
    s += leaf(1) + fact(4);
    if (argc > 2) quit(s & 1);
    return s & 1;
}
"#;

/// Builds the program and records `program args` with `uftrace record`
/// into `<work>/<name>`.
fn record(work: &TempDir, name: &str, args: &[&str]) -> PathBuf {
    let source = work.0.join("w.c");
    let exe = work.0.join("w");
    if !exe.exists() {
        std::fs::write(&source, PROGRAM).unwrap();
        let gcc = Command::new("gcc")
            .args(["-pg", "-O0", "-fno-inline", "-o"])
            .arg(&exe)
            .arg(&source)
            .status()
            .expect("cannot run gcc; CI installs it (.ci/run)");
        assert!(gcc.success());
    }
    let dir = work.0.join(name);
    // --no-sched: uftrace would add `linux:schedule` nodes for the times
    // the process was scheduled out (perf events fntrace does not read).
    let status = Command::new("uftrace")
        .args(["record", "--no-pager", "--no-sched", "-d"])
        .arg(&dir)
        .arg(&exe)
        .args(args)
        .status()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    // `quit` exits with s & 1; any exit code is the program's.
    assert!(status.code().is_some(), "uftrace record: {status}");
    dir
}

fn uftrace_graph(dir: &Path, function: Option<&str>) -> String {
    let output = Command::new("uftrace")
        .args(["graph", "--no-pager", "-d"])
        .arg(dir)
        .args(function)
        .env("LC_ALL", "C")
        .output()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

/// The shape of a graph: each node's line from its tree prefix on
/// (`| +-(6) inner`), and the backtraces' frames without addresses.
fn shape(graph: &str) -> Vec<String> {
    graph
        .lines()
        .filter_map(|line| {
            if let Some((_, node)) = line.split_once(" : ") {
                return Some(node.trim_end().to_string());
            }
            let frame = line.trim_start();
            frame
                .starts_with('[')
                .then(|| frame.split(" (0x").next().unwrap().to_string())
        })
        .collect()
}

/// Calls and unfinished calls of `function` in a `fntrace report`.
fn report_row(report: &str, function: &str) -> Option<(u64, u64)> {
    report.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        line.ends_with(&format!("  {function}"))
            .then(|| (fields[0].parse().unwrap(), fields[1].parse().unwrap()))
    })
}

#[test]
fn graph_equals_uftrace_graph_on_the_same_directory() {
    let work = TempDir::new("graph");
    let done = record(&work, "done", &["3"]);
    let quit = record(&work, "quit", &["5", "quit"]);

    // A trace whose calls all returned: the same text, times included,
    // but for the session id uftrace puts in the first line.
    let ours = fntrace_ok(&["graph"], &done);
    let theirs = uftrace_graph(&done, None);
    assert_eq!(
        ours.lines().skip(1).collect::<Vec<_>>(),
        theirs.lines().skip(1).collect::<Vec<_>>(),
        "fntrace:\n{ours}\nuftrace:\n{theirs}"
    );
    assert!(ours.contains("| (6) inner\n"), "{ours}");
    assert!(ours.contains("| (24) leaf\n"), "{ours}");

    // Rooted at a function (a recursive one too), and on a trace whose
    // main never returned: the same nodes and counts in the same tree.
    for (dir, function) in [
        (&done, Some("outer")),
        (&done, Some("fact")),
        (&quit, None),
        (&quit, Some("inner")),
        (&quit, Some("fact")),
    ] {
        let mut args = vec!["graph"];
        args.extend(function);
        let ours = fntrace_ok(&args, dir);
        let theirs = uftrace_graph(dir, function);
        assert_eq!(
            shape(&ours),
            shape(&theirs),
            "{function:?}\nfntrace:\n{ours}\nuftrace:\n{theirs}"
        );
        assert!(!shape(&ours).is_empty());
    }
    let fact = fntrace_ok(&["graph", "fact"], &quit);
    // fact(4) recursing down to fact(1): a chain of four nodes.
    assert_eq!(fact.matches("(1) fact\n").count(), 4, "{fact}");
    assert_eq!(fact.matches("(1) leaf\n").count(), 1, "{fact}");
}

#[test]
fn report_states_unfinished_calls_first_and_sorts_by_self_time() {
    let work = TempDir::new("report");
    let quit = record(&work, "quit", &["5", "quit"]);
    let report = fntrace_ok(&["report", "-s", "self"], &quit);
    let lines: Vec<&str> = report.lines().collect();
    let header = lines
        .iter()
        .position(|line| line.starts_with("calls"))
        .expect("a table header");
    let note = lines
        .iter()
        .position(|line| line.contains("3 calls have no exit"))
        .unwrap_or_else(|| panic!("no note of the unfinished calls:\n{report}"));
    assert!(note < header, "{report}");
    // Exact counts; the calls that never returned are rows too.
    assert_eq!(report_row(&report, "leaf"), Some((8 * 5 + 2, 0)));
    assert_eq!(report_row(&report, "inner"), Some((10, 0)));
    assert_eq!(report_row(&report, "fact"), Some((4, 0)));
    assert_eq!(report_row(&report, "main"), Some((0, 1)));
    assert_eq!(report_row(&report, "quit"), Some((0, 1)));
    // Sorted by self time: inner (4 loop turns and 4 calls each) outweighs
    // outer (2 calls) and main has none to show.
    let position = |name: &str| {
        lines
            .iter()
            .position(|line| line.ends_with(&format!("  {name}")))
            .unwrap()
    };
    assert!(position("inner") < position("outer"), "{report}");
    assert!(position("outer") < position("main"), "{report}");
}

#[test]
fn selections_narrow_every_command() {
    let work = TempDir::new("select");
    let done = record(&work, "done", &["3"]);

    // -F: outer and everything below it; -N: drop inner's subtree.
    let report = fntrace_ok(&["report", "-F", "outer"], &done);
    assert_eq!(report_row(&report, "outer"), Some((2, 0)));
    assert_eq!(report_row(&report, "inner"), Some((6, 0)));
    assert_eq!(report_row(&report, "leaf"), Some((24, 0)));
    assert_eq!(report_row(&report, "main"), None);
    let report = fntrace_ok(&["report", "-F", "outer", "-N", "inner"], &done);
    assert_eq!(report_row(&report, "outer"), Some((2, 0)));
    assert_eq!(report_row(&report, "leaf"), None);
    let top = fntrace_ok(&["report", "--top", "2", "-s", "calls"], &done);
    assert_eq!(report_row(&top, "leaf"), Some((26, 0)));
    assert!(top.contains("... 6 more (--top)"), "{top}");

    // A time range that ends before anything: no rows.
    let none = fntrace_ok(&["report", "--time-range", "~0ns"], &done);
    assert_eq!(report_row(&none, "main"), None, "{none}");

    // replay: the timeline, two levels from outer (uftrace's -D 2).
    let replay = fntrace_ok(&["replay", "-F", "outer", "-D", "2"], &done);
    assert_eq!(replay.matches("outer() {").count(), 2, "{replay}");
    assert_eq!(replay.matches("inner();").count(), 6, "{replay}");
    assert_eq!(replay.matches("leaf").count(), 0, "{replay}");

    // chrome and flame take the same selection.
    let json = work.0.join("t.json");
    fntrace_ok(
        &["chrome", "-o", json.to_str().unwrap(), "-F", "outer"],
        &done,
    );
    let chrome: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let calls = chrome["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["ph"] == "X")
        .count();
    assert_eq!(calls, 2 + 6 + 24);
    let folded = work.0.join("t.folded");
    fntrace_ok(
        &[
            "flame",
            "--folded",
            "-o",
            folded.to_str().unwrap(),
            "-F",
            "inner",
        ],
        &done,
    );
    let folded = std::fs::read_to_string(&folded).unwrap();
    assert!(!folded.is_empty());
    for line in folded.lines() {
        assert!(line.starts_with("thread "), "{line}");
        assert!(line.contains(";inner"), "{line}");
    }

    // A thread that is not there is named in the error.
    let output = fntrace(&["report", "--tid", "1"], &done);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--tid 1: no such thread"), "{stderr}");
}

#[test]
fn diff_compares_two_recordings() {
    let work = TempDir::new("diff");
    let three = record(&work, "three", &["3"]);
    let five = record(&work, "five", &["5"]);
    let diff = fntrace_ok(&["diff", five.to_str().unwrap(), "-s", "calls"], &three);
    let row = |name: &str| -> Vec<String> {
        let line = diff
            .lines()
            .find(|line| line.ends_with(&format!("  {name}")))
            .unwrap_or_else(|| panic!("no {name}:\n{diff}"));
        line.split_whitespace().map(str::to_string).collect()
    };
    // calls before, after, change, percent.
    assert_eq!(row("leaf")[..4], ["26", "42", "+16", "+61.5%"]);
    assert_eq!(row("inner")[..4], ["6", "10", "+4", "+66.7%"]);
    assert_eq!(row("fact")[..4], ["4", "4", "+0", "+0.0%"]);
    // Sorted by the change in calls.
    let first = diff.lines().position(|l| l.ends_with("  leaf")).unwrap();
    let second = diff.lines().position(|l| l.ends_with("  inner")).unwrap();
    assert!(first < second, "{diff}");
}

/// A Rust program for `uftrace record`: `leaf` called 3 times through a
/// `Display` impl, strings grown through `<String as fmt::Write>`.
const RUST_PROGRAM: &str = r#"
struct Token(u32);
#[inline(never)]
fn leaf(x: u32) -> u32 { x * 2 }
impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", leaf(self.0))
    }
}
fn main() {
    let mut s = String::new();
    for i in 0..3 { s.push_str(&Token(i).to_string()); }
    std::process::exit((s.len() == 0) as i32);
}
"#;

#[test]
fn rust_v0_names_in_uftraces_own_directory_are_demangled_and_globbed() {
    let work = TempDir::new("rust");
    let source = work.0.join("r.rs");
    let exe = work.0.join("r");
    std::fs::write(&source, RUST_PROGRAM).unwrap();
    let rustc = Command::new("rustc")
        .env("RUSTC_BOOTSTRAP", "1")
        .args([
            "-O",
            "-Zinstrument-mcount",
            "-Csymbol-mangling-version=v0",
            "-o",
        ])
        .arg(&exe)
        .arg(&source)
        .status()
        .expect("running rustc");
    assert!(rustc.success());
    let dir = work.0.join("trace");
    let status = Command::new("uftrace")
        .args(["record", "--no-pager", "--no-sched", "-d"])
        .arg(&dir)
        .arg(&exe)
        .status()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert_eq!(status.code(), Some(0));

    // uftrace 0.13 shows the v0 name raw; fntrace demangles it.
    let theirs = Command::new("uftrace")
        .args(["report", "--no-pager", "-d"])
        .arg(&dir)
        .output()
        .unwrap();
    let theirs = String::from_utf8_lossy(&theirs.stdout);
    assert!(
        theirs.contains("_RNv") && theirs.contains("1r4leaf"),
        "{theirs}"
    );
    let report = fntrace_ok(&["report"], &dir);
    assert_eq!(report_row(&report, "r::leaf"), Some((3, 0)), "{report}");
    assert!(!report.contains("_RNv"), "{report}");
    // main never returns (process::exit): an unfinished call, said first.
    assert_eq!(report_row(&report, "r::main"), Some((0, 1)), "{report}");

    // A crate glob selects the trait impls of the crate's types.
    let write_str = "<alloc::string::String as core::fmt::Write>::write_str";
    let alloc_only = Command::new(CLI)
        .args(["report"])
        .arg(&dir)
        .args(["-s", "calls", "--top", "1000"])
        .output()
        .unwrap();
    let all = String::from_utf8_lossy(&alloc_only.stdout);
    let calls = report_row(&all, write_str)
        .unwrap_or_else(|| panic!("no write_str:\n{all}"))
        .0;
    assert!(calls >= 3, "{all}");
    let graph = fntrace_ok(&["graph", "alloc::string::*"], &dir);
    assert!(
        graph.contains(&format!("({calls}) alloc::string::*\n")),
        "{graph}"
    );
    let selected = fntrace_ok(
        &["report", "-F", "alloc::string::*", "-N", "__rustc::*"],
        &dir,
    );
    assert_eq!(
        report_row(&selected, write_str),
        Some((calls, 0)),
        "{selected}"
    );
    assert_eq!(report_row(&selected, "r::leaf"), None, "{selected}");

    // A bare name matches the last segment of a path, as GDB's `break
    // leaf` does: `-F leaf` is r::leaf, `-N leaf` leaves it out.
    let leaf = fntrace_ok(&["report", "-F", "leaf"], &dir);
    assert_eq!(report_row(&leaf, "r::leaf"), Some((3, 0)), "{leaf}");
    let no_leaf = fntrace_ok(&["report", "-N", "leaf"], &dir);
    assert_eq!(report_row(&no_leaf, "r::leaf"), None, "{no_leaf}");
    assert!(report_row(&no_leaf, "r::main").is_some(), "{no_leaf}");
}
