//! fntrace's own formats read memory the program hands them without ever
//! faulting (`tests/c/args.c`, gcc `-pg`): a string of a pointer and a
//! length (`/s:argN`) given a null pointer, a length past its text, a
//! length of 0, and a `std::string` (`/S`) at an unmapped address (16);
//! the program runs to its end, and `uftrace replay` shows the values
//! (`info` spells them as uftrace's `/s` and `/S`), `fntrace replay` the
//! same lines. gcc and uftrace are required: a missing one fails the test.

use crate::common;

use common::native;

#[test]
fn bad_pointers_and_lengths_are_shown_not_followed() {
    let base = common::temp_dir("args-formats");
    let program = native::build_c(&base, "args", "O0", &["-pg", "-O0"], &[]);
    let dir = base.join("fntrace.data");
    let output = native::fntrace_record(
        &base,
        &[
            "-A",
            "lookup@arg1/s:arg2;ignore@arg1/S",
            "-o",
            dir.to_str().unwrap(),
            "--",
            program.to_str().unwrap(),
        ],
    );
    // The program's own status (its sum), not a signal's.
    assert!(
        output.status.code().is_some(),
        "{}",
        native::stderr_of(&output)
    );
    // After its binary header, `info` is text.
    let info = String::from_utf8_lossy(&std::fs::read(dir.join("info")).unwrap()).into_owned();
    assert!(
        info.contains("argspec:lookup@arg1/s;ignore@arg1/S\n"),
        "{info}"
    );
    let text = common::uftrace(&["replay", "--no-pager", "-f", "none"], &dir);
    let shown: Vec<&str> = text
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("lookup(") || l.starts_with("ignore("))
        .collect();
    // "key" with a length of 100: 99 bytes read (the limit), shown to the
    // NUL; NULL; a length of 0 reads nothing; 16 is no std::string.
    assert_eq!(
        shown,
        [
            "lookup(\"key\");",
            "lookup(\"NULL\");",
            "lookup(\"\");",
            "ignore(\"<0x10>\"s);"
        ],
        "{text}"
    );
    native::assert_same_lines(&native::fntrace_replay_lines(&dir), &text, "fntrace replay");
    let _ = std::fs::remove_dir_all(&base);
}
