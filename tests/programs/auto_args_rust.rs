//! `fntrace record -a` on a Rust program (`tests/rust/auto_args.rs`, `-g
//! -Zinstrument-mcount`, opt-level 0 and 2): the specs built from its
//! DWARF show every argument and return value `tests/rust/auto_args.rs`
//! passes — integers of each width, `isize`/`usize`, `bool`, `char` (as
//! its character, `"é"`), `&str`, `String` by value and `&String`, enums
//! by variant (fieldless ones of two sizes, `Option<&u64>` and
//! `Option<NonZeroU32>` by their niches), a reference to a static
//! (`&auto_args::TOTAL`), a null raw pointer, a zero-sized parameter
//! (passed in no register: the next one is the third), `f64`, `f32`, a
//! `String` and a 24-byte structure returned through the hidden first
//! argument (the others shift by one), structures by value (a pair of
//! `u32` in two registers, 3 bytes in one, two `f64` in two vector
//! registers, a `u64` and an `f64` in one of each, 24 bytes by address:
//! `NAME{...}`, the `u8` after them the right value) — in `uftrace replay` (uftrace 0.13
//! reads the directory: fntrace's formats are spelled in `info` as
//! uftrace's `/s` and `/e:NAME`) and the same lines, line for line, in
//! `fntrace replay`. At opt-level 2 rustc gives `text` and `pointers` an
//! ABI of its own (DWARF: `DW_CC_nocall`): `-a` leaves them without
//! values and says so.
//!
//! rustc, uftrace and `fntrace` are required: a missing one fails the test.

use crate::common;

use common::native;

const EXPECTED_O0: &str = r#"auto_args::ints(-5, 200, -300, 60000, -70000, 0xee6b2800) = 1103511617662;
auto_args::sizes(-1, 3) = 2;
auto_args::small(7) = -7;
auto_args::flag(1, 3) = 1;
auto_args::letter("a") {
} = "b"; /* auto_args::letter */
auto_args::letter("é") {
} = "ê"; /* auto_args::letter */
auto_args::text("hello, world", 5) {
} = "hello"; /* auto_args::text */
auto_args::owned("owned text", "borrowed") {
} = 1008; /* auto_args::owned */
auto_args::greet("rust") {
} = "hi rust"; /* auto_args::greet */
auto_args::paint(Red, Low) = Green;
auto_args::paint(Blue, High) = Red;
auto_args::paint(Green, Mid) = Blue;
auto_args::find(Some, None) {
} = Some; /* auto_args::find */
auto_args::find(None, Some) = Some;
auto_args::find(None, None) = None;
auto_args::pointers(&auto_args::TOTAL, 0, STACK) {
} = &auto_args::TOTAL; /* auto_args::pointers */
auto_args::floats(1.500000, 2.000000, 3) = 6.000000;
auto_args::ratio(5.000000) = 2.500000;
auto_args::structs({...}, Rgb{...}, 6) = 21;
auto_args::more_structs(Point{...}, Mixed{...}, Big{...}, 9) = 19.250000;
auto_args::build(1, 2) = Big{...};
"#;

const EXPECTED_O2: &str = r#"auto_args::ints(-5, 200, -300, 60000, -70000, 0xee6b2800) = 1103511617662;
auto_args::sizes(-1, 3) = 2;
auto_args::small(7) = -7;
auto_args::flag(1, 3) = 1;
auto_args::letter("a") = "b";
auto_args::letter("é") = "ê";
auto_args::text();
auto_args::owned("owned text", "borrowed") {
} = 1008; /* auto_args::owned */
auto_args::greet("rust") {
} = "hi rust"; /* auto_args::greet */
auto_args::paint(Red, Low) = Green;
auto_args::paint(Blue, High) = Red;
auto_args::paint(Green, Mid) = Blue;
auto_args::find(Some, None) = Some;
auto_args::find(None, Some) = Some;
auto_args::find(None, None) = None;
auto_args::pointers();
auto_args::floats(1.500000, 2.000000, 3) = 6.000000;
auto_args::ratio(5.000000) = 2.500000;
auto_args::structs({...}, Rgb{...}, 6) = 21;
auto_args::more_structs(Point{...}, Mixed{...}, Big{...}, 9) = 19.250000;
auto_args::build(1, 2) = Big{...};
"#;

/// The lines of `replay` of the fixture's own functions (not `main`, not
/// its closures), without indentation; `pointers`' third argument, a
/// stack address, is `STACK`.
fn own_lines(replay: &str) -> String {
    replay
        .lines()
        .map(str::trim_start)
        .filter(|l| {
            let own = l.starts_with("auto_args::")
                || (l.starts_with("} = ") && l.contains("/* auto_args::"));
            own && !l.contains("closure") && !l.contains("auto_args::main")
        })
        .map(
            |l| match l.strip_prefix("auto_args::pointers(&auto_args::TOTAL, 0, 0x") {
                Some(rest) => format!(
                    "auto_args::pointers(&auto_args::TOTAL, 0, STACK{}\n",
                    &rest[rest.find(')').unwrap()..]
                ),
                None => format!("{l}\n"),
            },
        )
        .collect()
}

#[test]
fn rust_values_from_dwarf_as_uftrace_replay_shows_them() {
    for (level, expected) in [(0, EXPECTED_O0), (2, EXPECTED_O2)] {
        let base = common::temp_dir(&format!("auto-args-rust-O{level}"));
        let program = native::build_rust(
            &base,
            "auto_args",
            level,
            &["-g", "-Crelocation-model=static"],
        );
        let dir = base.join("fntrace.data");
        let output = native::fntrace_record(
            &base,
            &[
                "-a",
                "-o",
                dir.to_str().unwrap(),
                "--",
                program.to_str().unwrap(),
            ],
        );
        let stderr = native::stderr_of(&output);
        assert!(output.status.success(), "fntrace record: {stderr}");
        let nocall = stderr
            .lines()
            .filter(|l| l.contains("have no callable ABI in DWARF (DW_CC_nocall"))
            .count();
        assert_eq!(nocall, 1, "opt-level {level}: {stderr}");

        let theirs = common::uftrace(&["replay", "--no-pager", "-f", "none"], &dir);
        assert_eq!(
            own_lines(&theirs),
            expected,
            "uftrace replay, opt-level {level}"
        );
        let ours = native::fntrace_replay_lines(&dir);
        native::assert_same_lines(&ours, &theirs, &format!("opt-level {level}"));
        let _ = std::fs::remove_dir_all(&base);
    }
}
