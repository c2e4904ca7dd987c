//! Arguments and return values of a Rust program (`-A`, `-R`;
//! `tests/rust/args.rs`, `-Zinstrument-mcount` at opt-level 0 and 2): the
//! program recorded by `fntrace record` and by the real `uftrace record`
//! with the same specs, both read by the real `uftrace replay`, show the
//! same lines — i32, u64, i64 (negative, beyond 100000), a bool (`/u8`), a
//! char (`/c`), a `&str` as its pointer (`/x`) and its length, or as a C
//! string (`/s`), an f64 (`fparg1`), and the integer return values.
//!
//! What uftrace 0.13 can and cannot do here, found with this program:
//! - it cannot demangle rustc's v0 names (rustc 1.95's default): its `.sym`
//!   and its replay hold `_RNvCs…_4args3add`, and its globs match those; a
//!   glob such as `*args*add` selects `args::add` in both tools (fntrace
//!   matches demangled names);
//! - `/s` on a `&str` reads to the first NUL, not to the length (Rust
//!   strings have none): `key_len` is given the 7 bytes `user:42` of a
//!   longer literal and both tools show the whole literal; there is no
//!   format for a pointer and a length;
//! - `/c` reads 8 bits: a `char` beyond ASCII is cut; `/u32` shows it whole;
//! - `-a` shows no value of a Rust function (its DWARF is not used).
//!
//! rustc, uftrace and `fntrace` are required: a missing one fails the test.

use crate::common;

use common::native;
use std::path::Path;
use std::process::Command;

const ARGS: &str = "*args*add@arg1/i32,arg2/i32;*args*wide@arg1/u,arg2;*args*flag@arg1/u8;\
                    *args*letter@arg1/c;*args*text_len@arg1/x,arg2/d;*args*key_len@arg1/s,arg2/d;\
                    *args*scale@fparg1,arg1/i32;*args*twice@arg1/i32";
const RETVAL: &str = "*args*add@retval/i32;*args*wide@retval;*args*flag@retval/u8;\
                      *args*letter@retval/u32;*args*text_len@retval;*args*key_len@retval/u;\
                      *args*scale@retval;*args*twice@retval/i32";

/// The lines of the calls with specs (see [`valued_lines`]), checked by
/// hand against the program; at opt-level 2 the iterators are inlined
/// into `text_len` and `key_len`, at 0 they are calls of their own.
const EXPECTED_O2: &str = r#"args::add(40, 2) = 42;
args::add(-7, 3) = -4;
args::wide(0x10000000000, -5) = 0x10000000005;
args::flag(1) = 7;
args::flag(0) = 3;
args::letter('a') = 98;
args::text_len(ADDRESS, 7) = 614;
args::text_len(0x1, 0) = 0;
args::key_len("user:42, then more text", 7) = 8;
args::scale(2.500000, 4) = 10;
args::scale(-0.125000, 8) = -1;
args::twice(3) {
args::add(3, 3) = 6;
} = 6; /* args::twice */
"#;
const EXPECTED_O0: &str = r#"args::add(40, 2) = 42;
args::add(-7, 3) = -4;
args::wide(0x10000000000, -5) = 0x10000000005;
args::flag(1) = 7;
args::flag(0) = 3;
args::letter('a') = 98;
args::text_len(ADDRESS, 7) {
} = 614; /* args::text_len */
args::text_len(0x1, 0) {
} = 0; /* args::text_len */
args::key_len("user:42, then more text", 7) {
} = 8; /* args::key_len */
args::scale(2.500000, 4) = 10;
args::scale(-0.125000, 8) = -1;
args::twice(3) {
args::add(3, 3) = 6;
} = 6; /* args::twice */
"#;

/// `uftrace replay` of `dir` without times (`-f none`), every v0 mangled
/// name demangled as fntrace names it: the one difference between the two
/// recordings (fntrace's `.sym` holds demangled names, uftrace's the ELF
/// ones, which its replay cannot demangle).
fn replay(dir: &Path) -> String {
    let text = common::uftrace(&["replay", "--no-pager", "-f", "none"], dir);
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find("_R") {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let end = from
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(from.len());
        out.push_str(&fntrace_format::demangle(&from[..end]));
        rest = &from[end..];
    }
    out.push_str(rest);
    out
}

/// The lines of `replay` that carry values, without their indentation:
/// the calls of `args::` functions (closures and `main` left out) and the
/// return lines; `text_len`'s first argument, the address of a literal,
/// is `ADDRESS` (the address differs between the two builds, not between
/// the two tools: the full comparison keeps it).
fn valued_lines(replay: &str) -> String {
    replay
        .lines()
        .map(str::trim_start)
        .filter(|l| {
            (l.starts_with("args::") && !l.starts_with("args::main") && !l.contains("closure"))
                || l.starts_with("} = ")
        })
        .map(|l| match l.strip_prefix("args::text_len(0x") {
            Some(rest) if !rest.starts_with("1,") => {
                format!(
                    "args::text_len(ADDRESS{}\n",
                    &rest[rest.find(',').unwrap()..]
                )
            }
            _ => format!("{l}\n"),
        })
        .collect()
}

#[test]
fn rust_arguments_and_return_values_as_uftrace_records_them() {
    for (level, expected) in [(0, EXPECTED_O0), (2, EXPECTED_O2)] {
        let base = common::temp_dir(&format!("args-rust-O{level}"));
        // Not position-independent: `text_len`'s pointer is the same in
        // both runs.
        let program = native::build_rust(&base, "args", level, &["-Crelocation-model=static"]);

        let theirs = base.join("uftrace.data");
        let status = Command::new("uftrace")
            .args(["record", "--no-pager", "--no-sched", "--match", "glob"])
            .args(["-A", ARGS, "-R", RETVAL, "-d"])
            .arg(&theirs)
            .arg(&program)
            .current_dir(&base)
            .status()
            .expect("cannot run uftrace; CI installs it (.ci/run)");
        assert!(status.success(), "uftrace record: {status}");

        let ours = base.join("fntrace.data");
        let output = native::fntrace_record(
            &base,
            &[
                "-o",
                ours.to_str().unwrap(),
                "-A",
                ARGS,
                "-R",
                RETVAL,
                "--",
                program.to_str().unwrap(),
            ],
        );
        assert!(
            output.status.success(),
            "fntrace record: {}",
            native::stderr_of(&output)
        );

        let theirs_text = replay(&theirs);
        assert_eq!(
            valued_lines(&theirs_text),
            expected,
            "uftrace's own recording, opt-level {level}"
        );
        let ours_text = replay(&ours);
        let what = format!("opt-level {level}");
        native::assert_same_lines(&ours_text, &theirs_text, &what);

        // fntrace replay of both: the same lines.
        for dir in [&ours, &theirs] {
            let lines = native::fntrace_replay_lines(dir);
            assert_eq!(
                lines,
                theirs_text,
                "fntrace replay {}, {what}",
                dir.display()
            );
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
