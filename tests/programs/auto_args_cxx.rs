//! `fntrace record -a` on a C++ program (`tests/c/auto_args.cpp`, g++ `-g
//! -pg`, `-O0` and `-O2`): a `std::string` by value and by `const&`, one
//! returned (through the hidden first argument: the others shift by
//! one), enums of 1 and 4 bytes, `double`, `float`, `int`, a `const char
//! *`, a member function's `this`; shown exactly in `uftrace replay`, and
//! the same lines, line for line, in `fntrace replay`.
//!
//! `uftrace record -a` of the same program shows the same values for the
//! fixture's functions but for these, each checked below:
//! - `measure`'s `const std::string &` and `label`'s: uftrace's `-a` gives
//!   a reference `/p` (an address); fntrace's `/S`, the string, as for a
//!   `std::string` by value;
//! - `mix(…) = 1.500000` in uftrace's: its `-a` gives a `double` result
//!   `retval/f64`, for which uftrace 0.13 records the first argument
//!   (docs/arguments.md); fntrace's `/f` records xmm0: `6.000000`;
//! - at `-O2`, `label` and `main` are split by g++ (a `.cold` part: DWARF
//!   gives ranges, no low address): uftrace's `-a` types neither
//!   (`label() {`, `} /* main */`), fntrace's finds them by their ranges;
//! - `this` (and, in uftrace's, the references) are stack addresses,
//!   different in every run: `THIS` below.
//!
//! Left out of the comparison, the library calls and the libstdc++ code
//! g++ compiled into the program, which differ so (found with this
//! program, `-O0`):
//! - `strlen("short") = 5` in uftrace's, `strlen()` in fntrace's: uftrace
//!   types library calls by its own libc prototypes (docs/arguments.md);
//! - `std::__cxx11::basic_string::basic_string(…)`, `_M_construct(…)`:
//!   overloads sharing their short name, one of them (the copy
//!   constructor) called in libstdc++: uftrace's `-a` gives every one the
//!   first one's specs, fntrace's none (on the copy constructor the first
//!   one's `/s` read a `std::string` as a C string);
//! - `std::operator+`, `std::move`: their `std::string &` parameters and
//!   results, addresses in uftrace's, strings in fntrace's;
//! - `std::__iterator_category(…) = random_access_iterator_tag{}`,
//!   `std::__distance(…, random_access_iterator_tag{})`: an empty class
//!   by value, which fntrace's `-a` does not type in C++ (the parameter
//!   and those after it are left out; a result of one is not shown).
//!
//! g++ and uftrace are required: a missing one fails the test.

use crate::common;

use common::native;
use std::path::Path;
use std::process::Command;

const FNTRACE_O0: &str = r#"measure("first string, long enough for the heap"s, "short"s) {
} = 3805; /* measure */
label("short"s, 42) {
} = "short42"s; /* label */
toggle(Off) = On;
toggle(On) = Auto;
flip(Dark) = Light;
mix(1.500000, 2.000000, 3) = 6.000000;
pick(1) = "yes";
Counter::bump(THIS, 4) = 9;
} = 0; /* main */
"#;

const FNTRACE_O2: &str = r#"measure("first string, long enough for the heap"s, "short"s) = 3805;
label("short"s, 42) {
} = "short42"s; /* label */
toggle(Off) = On;
toggle(On) = Auto;
flip(Dark) = Light;
mix(1.500000, 2.000000, 3) = 6.000000;
pick(1) = "yes";
Counter::bump(THIS, 4) = 9;
} = 0; /* main */
"#;

const UFTRACE_O0: &str = r#"measure("first string, long enough for the heap"s, THIS) {
} = 3805; /* measure */
label(THIS, 42) {
} = "short42"s; /* label */
toggle(Off) = On;
toggle(On) = Auto;
flip(Dark) = Light;
mix(1.500000, 2.000000, 3) = 1.500000;
pick(1) = "yes";
Counter::bump(THIS, 4) = 9;
} = 0; /* main */
"#;

const UFTRACE_O2: &str = r#"measure("first string, long enough for the heap"s, THIS) = 3805;
label() {
} /* label */
toggle(Off) = On;
toggle(On) = Auto;
flip(Dark) = Light;
mix(1.500000, 2.000000, 3) = 1.500000;
pick(1) = "yes";
Counter::bump(THIS, 4) = 9;
} /* main */
"#;

/// The lines of `replay` of the fixture's functions and of `main`'s end,
/// without indentation, stack addresses (`0x7ff…`) made `THIS`.
fn own_lines(replay: &str) -> String {
    let own = [
        "measure(",
        "label(",
        "toggle(",
        "flip(",
        "mix(",
        "pick(",
        "Counter::bump(",
    ];
    replay
        .lines()
        .map(str::trim_start)
        .filter(|l| {
            own.iter().any(|f| l.starts_with(f))
                || (l.starts_with('}')
                    && own
                        .iter()
                        .any(|f| l.ends_with(&format!("/* {} */", f.trim_end_matches('(')))))
                || l.ends_with("/* main */")
        })
        .map(|l| {
            let mut line = l.to_string();
            while let Some(at) = line.find("0x7ff") {
                let end = line[at..]
                    .find(|c: char| !c.is_ascii_hexdigit() && c != 'x')
                    .map_or(line.len(), |n| at + n);
                line.replace_range(at..end, "THIS");
            }
            line + "\n"
        })
        .collect()
}

fn build(base: &Path, level: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(base).unwrap();
    let program = base.join(format!("auto_args{level}"));
    let output = Command::new("g++")
        .args(["-g", "-pg", level, "-no-pie", "-fno-pie"])
        .arg(native::repo().join("tests/c/auto_args.cpp"))
        .arg("-o")
        .arg(&program)
        .output()
        .expect("cannot run g++; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "g++ {level}: {}",
        native::stderr_of(&output)
    );
    program
}

#[test]
fn cxx_values_from_dwarf_as_uftrace_replay_shows_them() {
    for (level, ours_expected, theirs_expected) in [
        ("-O0", FNTRACE_O0, UFTRACE_O0),
        ("-O2", FNTRACE_O2, UFTRACE_O2),
    ] {
        let base = common::temp_dir(&format!("auto-args-cxx{level}"));
        let program = build(&base, level);
        let ours = base.join("fntrace.data");
        let output = native::fntrace_record(
            &base,
            &[
                "-a",
                "-o",
                ours.to_str().unwrap(),
                "--",
                program.to_str().unwrap(),
            ],
        );
        assert!(
            output.status.success(),
            "fntrace record: {}",
            native::stderr_of(&output)
        );
        let text = common::uftrace(&["replay", "--no-pager", "-f", "none"], &ours);
        assert_eq!(
            own_lines(&text),
            ours_expected,
            "fntrace's recording, {level}"
        );
        let lines = native::fntrace_replay_lines(&ours);
        native::assert_same_lines(&lines, &text, &format!("fntrace replay, {level}"));

        let theirs = base.join("uftrace.data");
        let status = Command::new("uftrace")
            .args(["record", "--no-pager", "--no-sched", "-a", "-d"])
            .arg(&theirs)
            .arg(&program)
            .current_dir(&base)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("cannot run uftrace; CI installs it (.ci/run)");
        assert!(status.success(), "uftrace record -a: {status}");
        let text = common::uftrace(&["replay", "--no-pager", "-f", "none"], &theirs);
        assert_eq!(
            own_lines(&text),
            theirs_expected,
            "uftrace's recording, {level}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}
