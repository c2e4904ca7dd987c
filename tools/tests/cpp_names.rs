//! C++ names as uftrace shows them: `tools/tests/cpp_names/names.cpp`
//! built with `g++ -pg` at `-O0` (about 190 functions called: members,
//! operators, lambdas, an anonymous namespace, overloads, templates, the
//! standard containers' functions) and `-O2`, recorded by the real
//! `uftrace record`. `fntrace report` of that directory names every
//! function as `uftrace report` does (uftrace's default "simple"
//! demangling), with the same calls. g++ and uftrace are required (CI
//! installs them): a missing one fails the test.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::{fntrace_ok, TempDir};

#[test]
fn cpp_names_and_calls_equal_uftraces_at_o0_and_o2() {
    let work = TempDir::new("cpp-names");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cpp_names/names.cpp");
    for (level, at_least) in [("-O0", 150), ("-O2", 5)] {
        let exe = work.0.join(format!("names{level}"));
        let built = Command::new("g++")
            .args(["-pg", level, "-o"])
            .arg(&exe)
            .arg(&source)
            .output()
            .expect("cannot run g++ (CI installs it)");
        assert!(built.status.success(), "g++: {built:?}");
        let dir = work.0.join(format!("uftrace{level}"));
        let recorded = Command::new("uftrace")
            .args(["record", "--no-libcall", "--no-event", "-d"])
            .arg(&dir)
            .arg(&exe)
            .output()
            .expect("cannot run uftrace (CI installs it)");
        assert!(recorded.status.success(), "uftrace record: {recorded:?}");

        let theirs = uftrace_calls(&dir);
        assert!(
            theirs.len() >= at_least,
            "{level}: uftrace shows {} functions: {theirs:?}",
            theirs.len()
        );
        assert_eq!(fntrace_calls(&dir), theirs, "{level}");
    }
}

/// Calls per function name, as `uftrace report -f call` shows them.
fn uftrace_calls(dir: &Path) -> BTreeMap<String, u64> {
    let output = Command::new("uftrace")
        .args(["report", "--no-pager", "-f", "call", "-d"])
        .arg(dir)
        .output()
        .expect("cannot run uftrace");
    assert!(output.status.success(), "uftrace report: {output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .skip(2)
        .filter_map(|line| {
            let (calls, name) = line.trim_start().split_once(char::is_whitespace)?;
            let name = name.trim();
            // uftrace's own scheduler rows, which fntrace does not know.
            (!name.starts_with("linux:")).then(|| (name.to_string(), calls.parse().unwrap()))
        })
        .collect()
}

/// Calls per function name, as `fntrace report` shows them: the names
/// start where the header's `function` does (columns are padded by
/// characters).
fn fntrace_calls(dir: &Path) -> BTreeMap<String, u64> {
    let report = fntrace_ok(&["report", "--no-pager"], dir);
    let mut lines = report.lines().skip_while(|line| !line.starts_with("calls"));
    let header = lines.next().expect("the table's header");
    let column = header.find("function").expect("a function column");
    lines
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let calls = line.split_whitespace().next().unwrap().parse().unwrap();
            let name: String = line.chars().skip(column).collect();
            (name, calls)
        })
        .collect()
}
