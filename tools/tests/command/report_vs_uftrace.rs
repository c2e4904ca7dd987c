//! The numbers `fntrace` prints, against what uftrace 0.13 prints on the
//! same directory: a `gcc -pg` C program with recursion (`fib`) and two
//! `static` functions both called `helper` (one per file), recorded by
//! `uftrace record` in the test and read by both tools. Counts are compared
//! exactly, times to the digits uftrace prints. gcc and uftrace are required
//! (CI installs them): a missing one fails the test.

use crate::common;

use common::{fntrace, fntrace_ok, TempDir};
use fntrace_tools::analysis::{self, FunctionStats, Rows};
use fntrace_tools::export::UftraceReader;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The first file: `fib` (recursive), `call_a` calling this file's
/// `helper`; `main` calls `call_a` and `call_b` 200 times each, then
/// `fib(N)` (N the first argument, 12 by default).
const FIRST: &str = r#"
#include <stdlib.h>
int call_b(int);
static int helper(int x) { return x * 3; }
int call_a(int x) { return helper(x); }
int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 12, s = 0;
    for (int i = 0; i < 200; i++) s += call_a(i) + call_b(i);
    s += fib(n);
    return s & 1;
}
"#;

/// The second file: its own `static helper`, called by `call_b`.
const SECOND: &str = r#"
static int helper(int x) { return x + 7; }
int call_b(int x) { return helper(x); }
"#;

/// Builds the program in `work` and records it with `uftrace record`
/// into `<work>/trace`.
fn record(work: &TempDir) -> PathBuf {
    let first = work.0.join("a.c");
    let second = work.0.join("b.c");
    let exe = work.0.join("prog");
    std::fs::write(&first, FIRST).unwrap();
    std::fs::write(&second, SECOND).unwrap();
    let gcc = Command::new("gcc")
        .args(["-pg", "-O0", "-fno-inline", "-o"])
        .arg(&exe)
        .arg(&first)
        .arg(&second)
        .status()
        .expect("cannot run gcc; CI installs it (.ci/run)");
    assert!(gcc.success());
    let dir = work.0.join("trace");
    // --no-sched: uftrace would add `linux:schedule` rows for the times the
    // process was scheduled out (perf events fntrace does not read).
    let status = Command::new("uftrace")
        .args(["record", "--no-pager", "--no-sched", "-d"])
        .arg(&dir)
        .arg(&exe)
        .status()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(status.code().is_some(), "uftrace record: {status}");
    dir
}

/// stdout of a successful `uftrace COMMAND --no-pager -d DIR ARGS…`.
fn uftrace(command: &str, dir: &Path, args: &[&str]) -> String {
    let output = Command::new("uftrace")
        .args([command, "--no-pager", "-d"])
        .arg(dir)
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "uftrace {command}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A row of `uftrace report`: total and self time as printed, calls.
#[derive(Debug, PartialEq, Eq)]
struct UftraceRow {
    total: String,
    self_time: String,
    calls: u64,
}

/// The rows of `uftrace report`'s table (`Total time   Self time  Calls
/// Function`), by function.
fn uftrace_report_rows(text: &str) -> BTreeMap<String, UftraceRow> {
    let mut rows = BTreeMap::new();
    for line in text.lines().skip_while(|l| !l.contains("====")).skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // `165.759 us   24.249 us   1  main`.
        assert!(fields.len() >= 6, "unexpected uftrace line {line:?}");
        let row = UftraceRow {
            total: format!("{} {}", fields[0], fields[1]),
            self_time: format!("{} {}", fields[2], fields[3]),
            calls: fields[4].parse().unwrap(),
        };
        let previous = rows.insert(fields[5..].join(" "), row);
        assert!(previous.is_none(), "two uftrace rows of one name: {text}");
    }
    rows
}

/// `ns` as uftrace prints a time: microseconds and up, three decimals,
/// truncated (uftrace's `print_time_unit`).
fn uftrace_time(ns: u64) -> String {
    let units = ["us", "ms", "s", "m", "h"];
    let limits = [1000, 1000, 1000, 60, 24, u64::MAX];
    let (mut value, mut small) = (ns, 0);
    let mut unit = 0;
    for index in 0..units.len() {
        small = value % limits[index];
        value /= limits[index];
        unit = index;
        if value < limits[index + 1] {
            break;
        }
    }
    format!("{value}.{small:03} {}", units[unit])
}

/// fntrace's report of `dir`, by function name, through the library.
fn fntrace_stats(dir: &Path, rows: Rows) -> Vec<FunctionStats> {
    let reader = UftraceReader::open(dir).unwrap();
    analysis::latency_of_with(&reader, rows).unwrap().functions
}

/// The cells of the row of `function` in a `fntrace report` table.
fn cli_row(report: &str, function: &str) -> Vec<Vec<String>> {
    report
        .lines()
        .filter(|line| line.ends_with(&format!("  {function}")))
        .map(|line| {
            // calls unfinished total(2) self(2) ...: times are `N unit`.
            let fields: Vec<&str> = line.split_whitespace().collect();
            vec![
                fields[0].to_string(),
                fields[1].to_string(),
                format!("{} {}", fields[2], fields[3]),
                format!("{} {}", fields[4], fields[5]),
            ]
        })
        .collect()
}

#[test]
fn report_equals_uftrace_report_with_recursion_and_one_row_per_name() {
    let work = TempDir::new("report");
    let dir = record(&work);
    let theirs = uftrace_report_rows(&uftrace("report", &dir, &[]));
    assert_eq!(theirs["helper"].calls, 400, "{theirs:?}");
    assert_eq!(theirs["fib"].calls, 465, "{theirs:?}");

    // Every row: the same functions, calls exact, times to the digits
    // uftrace prints.
    let ours = fntrace_stats(&dir, Rows::ByName);
    let ours_as_uftrace: BTreeMap<String, UftraceRow> = ours
        .iter()
        .map(|stats| {
            assert_eq!(stats.unfinished, 0, "{stats:?}");
            let row = UftraceRow {
                total: uftrace_time(stats.total_ns),
                self_time: uftrace_time(stats.self_ns),
                calls: stats.calls,
            };
            (stats.name.clone(), row)
        })
        .collect();
    assert_eq!(ours_as_uftrace, theirs);

    // Recursion counted once: fib's total is within main's.
    let stats = |name: &str| ours.iter().find(|s| s.name == name).unwrap();
    assert!(stats("fib").total_ns < stats("main").total_ns);
    assert!(stats("fib").max_ns == stats("fib").total_ns);

    // The command prints the same numbers, one row per name.
    let report = fntrace_ok(&["report"], &dir);
    for stats in &ours {
        let human = analysis::human_duration;
        assert_eq!(
            cli_row(&report, &stats.name),
            [[
                stats.calls.to_string(),
                "0".to_string(),
                human(stats.total_ns),
                human(stats.self_ns)
            ]],
            "{report}"
        );
    }
    assert_eq!(cli_row(&report, "helper")[0][0], "400", "{report}");

    // --by-address: the two helpers apart, 200 calls each, as the library
    // says.
    let split = fntrace_ok(&["report", "--by-address"], &dir);
    let helpers = cli_row(&split, "helper");
    assert_eq!(helpers.len(), 2, "{split}");
    assert!(helpers.iter().all(|row| row[0] == "200"), "{split}");
    let by_address = fntrace_stats(&dir, Rows::ByAddress);
    let helpers: Vec<&FunctionStats> = by_address.iter().filter(|s| s.name == "helper").collect();
    assert_eq!(helpers.len(), 2);
    assert_ne!(helpers[0].function, helpers[1].function);
    assert_eq!(
        helpers.iter().map(|s| s.calls).sum::<u64>(),
        theirs["helper"].calls
    );
}

/// The lines of a replay, from either tool: duration as printed (empty for
/// none), indentation (two spaces a level) and the text with its runs of
/// spaces made one (`} /* main */`).
fn replay_lines(text: &str, fntrace: bool) -> Vec<(String, usize, String)> {
    text.lines()
        .filter_map(|line| {
            let (duration, function) = if fntrace {
                // `    TID     DURATION   FUNCTION`: 7, 1 + 12, 3 columns.
                let tid = line.get(..7)?.trim();
                if tid.is_empty() || !tid.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                (line.get(7..20)?, line.get(23..)?)
            } else {
                // ` 0.932 us [ 13088] | main() {`.
                let (left, function) = line.split_once("] | ")?;
                (left.split('[').next()?, function)
            };
            let indent = function.len() - function.trim_start().len();
            let text = function.split_whitespace().collect::<Vec<_>>().join(" ");
            Some((duration.trim().to_string(), indent, text))
        })
        .collect()
}

#[test]
fn depth_means_what_uftraces_means() {
    let work = TempDir::new("depth");
    let dir = record(&work);
    for depth in ["1", "2", "3"] {
        let ours = fntrace_ok(&["replay", "-D", depth], &dir);
        let theirs = uftrace("replay", &dir, &["-D", depth]);
        let (ours, theirs) = (replay_lines(&ours, true), replay_lines(&theirs, false));
        assert!(!ours.is_empty());
        assert_eq!(ours, theirs, "-D {depth}");
    }
    // -D 1: the outermost calls only, `main();` on one line.
    let outermost = replay_lines(&fntrace_ok(&["replay", "-D", "1"], &dir), true);
    assert_eq!(outermost.len(), 3, "{outermost:?}");
    assert_eq!(outermost[2].2, "main();");
    // Inside -F, levels count from the function selected.
    let ours = fntrace_ok(&["replay", "-F", "call_a", "-D", "1"], &dir);
    let theirs = uftrace("replay", &dir, &["-F", "call_a", "-D", "1"]);
    let ours = replay_lines(&ours, true);
    assert_eq!(ours.len(), 200);
    assert_eq!(ours, replay_lines(&theirs, false));
    // -D 0 is refused, as by `fntrace record`.
    assert!(!fntrace(&["replay", "-D", "0"], &dir).status.success());
}

/// `fntrace_stats` of the calls that `selection` keeps.
fn selected_stats(dir: &Path, selection: &analysis::Selection) -> BTreeMap<String, UftraceRow> {
    let reader = UftraceReader::open(dir).unwrap();
    let selected = analysis::Selected::new(&reader, selection);
    let report = analysis::latency_of(&selected).unwrap();
    assert_eq!(selected.unmatched(), Vec::new());
    report
        .functions
        .iter()
        .map(|stats| {
            let row = UftraceRow {
                total: uftrace_time(stats.total_ns),
                self_time: uftrace_time(stats.self_ns),
                calls: stats.calls,
            };
            (stats.name.clone(), row)
        })
        .collect()
}

#[test]
fn filters_select_what_uftraces_select_and_a_typo_is_an_error() {
    let work = TempDir::new("filters");
    let dir = record(&work);

    // -F call_a: call_a and the helper it calls, as uftrace counts them.
    let theirs = uftrace_report_rows(&uftrace("report", &dir, &["-F", "call_a"]));
    assert_eq!(theirs.len(), 2, "{theirs:?}");
    let include = analysis::Selection {
        include: vec!["call_a".into()],
        ..analysis::Selection::default()
    };
    assert_eq!(selected_stats(&dir, &include), theirs);
    let report = fntrace_ok(&["report", "-F", "call_*"], &dir);
    assert_eq!(cli_row(&report, "helper")[0][0], "400", "{report}");

    // A name that matches nothing: uftrace refuses the filter (and then
    // prints everything); fntrace fails, naming the closest names.
    let refused = Command::new("uftrace")
        .args(["report", "--no-pager", "-F", "no_such_function", "-d"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&refused.stdout).contains("failed to set filter"),
        "{refused:?}"
    );
    let json = work.0.join("t.json");
    let json = json.to_str().unwrap();
    for (args, message) in [
        (
            &["graph", "no_such_function"][..],
            "FUNCTION no_such_function: no function called in",
        ),
        (
            &["report", "-F", "no_such_function"][..],
            "-F no_such_function: no function called in",
        ),
        (&["report", "-F", "fob"][..], "(closest: fib, "),
        (&["report", "-N", "helpr"][..], "-N helpr: no function"),
        (&["replay", "-F", "fob"][..], "(closest: fib, "),
        (&["graph", "mian"][..], "(closest: main, "),
        (&["flame", "-o", json, "-F", "fob"][..], "-F fob"),
        (&["chrome", "-o", json, "-F", "fob"][..], "-F fob"),
        (&["perfetto", "-o", json, "-F", "fob"][..], "-F fob"),
        (&["report", "--tid", "1"][..], "--tid 1: no such thread"),
    ] {
        let output = fntrace(args, &dir);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    assert!(!Path::new(json).exists(), "nothing written");
    let same = dir.to_str().unwrap();
    let output = fntrace(&["diff", same, "-F", "fob"], &dir);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("-F fob: no function called in {same} or {same}")),
        "{stderr}"
    );
    // A function of the trace graphs as uftrace graphs it.
    let graph = fntrace_ok(&["graph", "fib"], &dir);
    assert!(graph.contains("(1) fib"), "{graph}");
}
