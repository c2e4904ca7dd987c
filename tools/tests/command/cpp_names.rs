//! C++ names as uftrace shows them: `tools/tests/cpp_names/names.cpp`
//! built with `g++ -pg` at `-O0` (about 190 functions called: members,
//! operators, lambdas, an anonymous namespace, overloads, templates, the
//! standard containers' functions) and `-O2`, recorded by the real
//! `uftrace record`. `fntrace report` of that directory names every
//! function as `uftrace report` does (uftrace's default "simple"
//! demangling), with the same calls; `--demangle full` keeps overloads
//! apart. g++ and uftrace are required (CI installs them): a missing one
//! fails the test.

use crate::common;

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
        let ours = fntrace_calls(&dir, &[]);
        assert_eq!(ours, theirs, "{level}");

        // --demangle full: overloads apart, the same calls in all.
        let full = fntrace_calls(&dir, &["--demangle", "full"]);
        assert_eq!(
            full.values().sum::<u64>(),
            ours.values().sum::<u64>(),
            "{level}"
        );
        if level == "-O0" {
            assert_eq!(ours["shapes::overloaded"], 3);
            for overload in [
                "shapes::overloaded(int)",
                "shapes::overloaded(double)",
                "shapes::overloaded(std::__cxx11::basic_string<char, std::char_traits<char>, \
                 std::allocator<char> > const&)",
            ] {
                assert_eq!(full.get(overload), Some(&1), "{overload} in {full:?}");
            }
            // -F takes the full name then.
            let selected = fntrace_calls(
                &dir,
                &["--demangle", "full", "-F", "shapes::overloaded(double)"],
            );
            assert_eq!(
                selected,
                BTreeMap::from([("shapes::overloaded(double)".to_string(), 1)])
            );
        }
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

/// Calls per function name, as `fntrace report DIR OPTIONS` shows them:
/// the names start where the header's `function` does (columns are
/// padded by characters).
fn fntrace_calls(dir: &Path, options: &[&str]) -> BTreeMap<String, u64> {
    let mut args = vec!["report", "--no-pager"];
    args.extend(options);
    let report = fntrace_ok(&args, dir);
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
