//! Arguments and return values (`-A`, `-R`; `tests/c/args.c`, gcc `-pg`
//! at `-O0` and `-O2`): the program recorded by `fntrace record` and by
//! the real `uftrace record` with the same specs, both read by the real
//! `uftrace replay`, show the same lines — ints, a negative int, a pointer,
//! strings (NULL, unreadable, cut at uftrace's 98 bytes), a char, doubles,
//! and the return values, of a library call too. A function without a
//! spec keeps its plain line.
//! `fntrace replay` shows the same values, from both directories. A spec
//! that does not parse, or whose glob selects no function, is refused
//! before the program runs. `-a` (`tests/c/autoargs.c`, `-g`): the specs
//! built from DWARF show what uftrace's `-a` shows, but for the documented
//! differences. gcc and uftrace are required (CI installs them): a missing
//! one fails the test.

use crate::common;

use common::native;
use std::path::{Path, PathBuf};
use std::process::Command;

const ARGS: &str = "add@arg1/d,arg2/i32;lookup@arg1/s,arg2;pick@arg1/u;shout@arg1/c;\
                    scale@fparg1,arg1/d32;where@arg1/x;ignore@arg1/s;twice@arg1;getenv@arg1/s";
const RETVAL: &str = "add@retval/i32;lookup@retval/d;pick@retval/s;shout@retval/c;\
                      scale@retval/f;where@retval/x;twice@retval;getenv@retval/s";

/// What both recordings show (`uftrace replay -f none`), checked by hand
/// against the program; `&counter` is the same in every run (-no-pie).
const EXPECTED: &str = r#"__monstartup();
__cxa_atexit();
main() {
  add(40, 2) = 42;
  add(-7, 3) = -4;
  lookup("key", 100) = 207;
  lookup("NULL", -1) = -1;
  lookup("01234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234...", 0) = 48;
  pick(1) = "hello, world";
  pick(0) = "NULL";
  shout('a') = 'A';
  scale(2.500000, 4) = 10.000000;
  scale(-0.125000, 8) = -1.000000;
  where(COUNTER) = COUNTER;
  untraced_args();
  ignore("<0x10>");
  twice(3) {
    add(3, 3) = 7;
  } = 7; /* twice */
  getenv("FNTRACE_ARGS_TEST_UNSET") = "NULL";
} /* main */
"#;

/// `uftrace replay` of `dir` without times (`-f none`), the address of
/// `counter` (`where`'s argument and return value) replaced by `COUNTER`.
fn replay(dir: &Path, counter: &str) -> String {
    common::uftrace(&["replay", "--no-pager", "-f", "none"], dir).replace(counter, "COUNTER")
}

/// The address of `counter` in `program` (`nm`), as uftrace prints it.
fn counter_address(program: &Path) -> String {
    let output = Command::new("nm")
        .arg(program)
        .output()
        .expect("cannot run nm");
    let text = String::from_utf8(output.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.ends_with(" counter"))
        .unwrap_or_else(|| panic!("no counter in nm's output:\n{text}"));
    let address = u64::from_str_radix(line.split(' ').next().unwrap(), 16).unwrap();
    format!("{address:#x}")
}

#[test]
fn arguments_and_return_values_as_uftrace_records_them() {
    for level in ["-O0", "-O2"] {
        let label = level.trim_start_matches('-');
        let base = common::temp_dir(&format!("args-{label}"));
        let flags = ["-pg", level, "-no-pie", "-fno-pie"];
        let program = native::build_c(&base, "args", label, &flags, &[]);
        let counter = counter_address(&program);

        let theirs = base.join("uftrace.data");
        let status = Command::new("uftrace")
            .args([
                "record",
                "--no-pager",
                "--no-sched",
                "-A",
                ARGS,
                "-R",
                RETVAL,
                "-d",
            ])
            .arg(&theirs)
            .arg(&program)
            .current_dir(&base)
            .status()
            .expect("cannot run uftrace; CI installs it (.ci/run)");
        assert!(status.code().is_some(), "uftrace record: {status}");

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
            output.status.code().is_some(),
            "fntrace record: {}",
            native::stderr_of(&output)
        );

        // The closing line counts events, not the files' 16-byte words
        // (values follow their records): one entry and one exit for each
        // line of a leaf call, one for each `{` or `}` line.
        let events: usize = EXPECTED
            .lines()
            .map(|line| match line.trim_start() {
                l if l.starts_with('}') || l.ends_with('{') => 1,
                _ => 2,
            })
            .sum();
        let said =
            format!("fntrace record: {events} events of 1 thread(s) in 1 session(s), 0 lost");
        let stderr = native::stderr_of(&output);
        assert!(
            stderr.contains(&said),
            "{level}: `{said}` not in:\n{stderr}"
        );

        let theirs_text = replay(&theirs, &counter);
        assert_eq!(theirs_text, EXPECTED, "uftrace's own recording, {level}");
        let ours_text = replay(&ours, &counter);
        native::assert_same_lines(&ours_text, &theirs_text, level);

        // fntrace replay, from both directories: the same lines.
        for dir in [&ours, &theirs] {
            let lines = native::fntrace_replay_lines(dir);
            let shown = format!("fntrace replay {}", dir.display());
            assert_eq!(lines.replace(&counter, "COUNTER"), EXPECTED, "{shown}");
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}

/// `-A where@arg1/p -R where@retval/p,shout@retval/e:letter` given by
/// hand: the pointer named after the data object it points to in both
/// recordings (fntrace adds the program's data objects to its `.sym` file
/// after the run), an enum without a definition shown as its number.
#[test]
fn a_pointer_given_with_p_is_named_as_uftrace_names_it() {
    let base = common::temp_dir("args-pointer");
    let flags = ["-pg", "-O0", "-no-pie", "-fno-pie"];
    let program = native::build_c(&base, "args", "O0", &flags, &[]);
    let specs = [
        "-A",
        "where@arg1/p",
        "-R",
        "where@retval/p;shout@retval/e:letter",
    ];
    let theirs = base.join("uftrace.data");
    let status = Command::new("uftrace")
        .args(["record", "--no-pager", "--no-sched"])
        .args(specs)
        .arg("-d")
        .arg(&theirs)
        .arg(&program)
        .current_dir(&base)
        .status()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(status.code().is_some(), "uftrace record: {status}");
    let ours = base.join("fntrace.data");
    let mut all = vec!["-o", ours.to_str().unwrap()];
    all.extend(specs);
    all.extend(["--", program.to_str().unwrap()]);
    let output = native::fntrace_record(&base, &all);
    assert!(
        output.status.code().is_some(),
        "{}",
        native::stderr_of(&output)
    );
    let theirs_text = replay(&theirs, "-");
    let ours_text = replay(&ours, "-");
    for line in ["  where(&counter) = &counter;\n", "  shout() = 65;\n"] {
        assert!(
            theirs_text.contains(line),
            "{line}: uftrace's:\n{theirs_text}"
        );
    }
    native::assert_same_lines(&ours_text, &theirs_text, "-O0");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn bad_specs_are_refused_before_the_program_runs() {
    let base = common::temp_dir("args-refused");
    let program = native::build_c(&base, "args", "O0", &["-pg", "-O0"], &[]);
    let program = program.to_str().unwrap();
    for (args, said) in [
        (
            ["-A", "add@arg1/o"],
            "-A `add@arg1/o`: `arg1/o`: unknown format `/o` (supported: d i u x s c f p e t S C)",
        ),
        (
            ["-A", "add@arg7"],
            "-A `add@arg7`: `arg7`: only the first 6 integer arguments (those in registers) \
             can be recorded",
        ),
        (
            ["-R", "add@arg1"],
            "-R `add@arg1`: `arg1`: -R takes `retval` (or `argN[OFFSET]`) only",
        ),
        (
            ["-A", "nothing_like_it@arg1"],
            "-A/-R nothing_like_it: no function of",
        ),
    ] {
        let out = base.join("refused.data");
        let mut all = vec!["-o", out.to_str().unwrap()];
        all.extend(args);
        all.extend(["--", program]);
        let output = native::fntrace_record(&base, &all);
        let stderr = native::stderr_of(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
        assert!(!out.exists(), "{args:?}: nothing is recorded");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// The lines where `-a` shows what uftrace's `-a` does not, each pair
/// (uftrace's, fntrace's); every other line is the same, pointers named
/// after the data object they point to (`&counter`), enums' values by
/// name, structures passed by value as `pair{...}` (docs/arguments.md,
/// "-a"): uftrace 0.13 records a wrong value for a `double` return value
/// typed `retval/f64` (its `-a` types it so; the first argument, or 0
/// after a structure), fntrace the value returned.
const AUTO_DIFFERENCES: &[(&str, &str)] = &[
    (
        "  scale(2.500000, 4) = 2.500000;",
        "  scale(2.500000, 4) = 10.000000;",
    ),
    (
        "  fps(fp{...}, 1) = 0.000000;",
        "  fps(fp{...}, 1) = 1.750000;",
    ),
];

/// `-a` (`tests/c/autoargs.c`, gcc `-g -pg` at `-O0` and `-O2`): the
/// specs fntrace builds from DWARF give, read by the real `uftrace
/// replay`, the lines uftrace's own `-a` recording gives, but for the
/// documented [`AUTO_DIFFERENCES`]; a pointer to the stack is `STACK` in
/// both (where the stack is differs from run to run). `fntrace replay`
/// shows the same lines as `uftrace replay`, of both recordings.
#[test]
fn auto_args_from_dwarf_as_uftrace_shows_them() {
    let shown = [
        "  lookup(\"key\", 100) = 207;\n",
        "  sump(STACK) = 3;\n",
        "  where(&counter) = &counter;\n",
        "  next(GREEN) = BLUE;\n",
        "  next(BLUE) = RED;\n",
        "  sum(pair{...}) = 3;\n",
        "  two(big{...}, 3) = 6;\n",
        "  ret2(4) = big{...};\n",
        "  retmix(5) = mix{...};\n",
        "  third(7, big{...}, 8) = 16;\n",
    ];
    for level in ["-O0", "-O2"] {
        auto_args_compared("autoargs", level, &shown, AUTO_DIFFERENCES);
    }
}

/// `-a` on `tests/c/args.c`: its call of `getenv` typed from the
/// prototype the program's DWARF declares, as uftrace types it from its
/// table of libc's; the same lines but for `scale`'s return values.
#[test]
fn auto_args_on_a_library_call_as_uftrace_shows_them() {
    let differences = [
        (
            "  scale(2.500000, 4) = 2.500000;",
            "  scale(2.500000, 4) = 10.000000;",
        ),
        (
            "  scale(-0.125000, 8) = -0.125000;",
            "  scale(-0.125000, 8) = -1.000000;",
        ),
    ];
    let shown = [
        "  getenv(\"FNTRACE_ARGS_TEST_UNSET\") = \"NULL\";\n",
        "  where(&counter) = &counter;\n",
    ];
    for level in ["-O0", "-O2"] {
        auto_args_compared("args", level, &shown, &differences);
    }
}

/// Records `tests/c/NAME.c` built at `level` with uftrace's `-a` and
/// fntrace's, and compares what `uftrace replay` shows of both: the lines
/// of `shown` in uftrace's, every line the same but for `differences`
/// (uftrace's, fntrace's); `fntrace replay` of each the same as `uftrace
/// replay` of it.
fn auto_args_compared(name: &str, level: &str, shown: &[&str], differences: &[(&str, &str)]) {
    let label = level.trim_start_matches('-');
    let base = common::temp_dir(&format!("auto{name}-{label}"));
    let flags = ["-g", "-pg", level, "-no-pie", "-fno-pie"];
    let program = native::build_c(&base, name, label, &flags, &[]);
    let counter = counter_address(&program);
    let stack = |text: String| -> String {
        text.lines()
            .map(|line| match line.find("0x7ff") {
                Some(at) => {
                    let end = line[at + 2..]
                        .find(|c: char| !c.is_ascii_hexdigit())
                        .map_or(line.len(), |n| at + 2 + n);
                    format!("{}STACK{}\n", &line[..at], &line[end..])
                }
                None => format!("{line}\n"),
            })
            .collect()
    };

    let theirs = base.join("uftrace.data");
    let status = Command::new("uftrace")
        .args(["record", "--no-pager", "--no-sched", "-a", "-d"])
        .arg(&theirs)
        .arg(&program)
        .current_dir(&base)
        .status()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(status.code().is_some(), "uftrace record: {status}");
    let (ours, stderr) = record_auto_args(&base, &program, &[]);
    // gcc's start-up code has no DWARF: said once.
    assert_eq!(
        stderr.matches("have no DWARF description").count(),
        1,
        "{stderr}"
    );

    let theirs_text = stack(replay(&theirs, &counter));
    let ours_text = stack(replay(&ours, &counter));
    assert!(
        shown.iter().all(|line| theirs_text.contains(line)),
        "uftrace's own recording, {name} {level}:\n{theirs_text}"
    );
    assert_eq!(
        theirs_text.lines().count(),
        ours_text.lines().count(),
        "{name} {level}:\n{theirs_text}\n{ours_text}"
    );
    let mut found = Vec::new();
    for (n, (a, b)) in theirs_text.lines().zip(ours_text.lines()).enumerate() {
        if a != b {
            found.push((a, b));
            assert!(
                differences.contains(&(a, b)),
                "{name} {level}: line {} of uftrace replay: uftrace `{a}`, fntrace `{b}`",
                n + 1
            );
        }
    }
    assert_eq!(found, differences, "{name} {level}");
    // fntrace replay: the same lines from both directories (uftrace's
    // specs are in its `.dbg` files and its `info`'s libc prototypes).
    for (dir, text) in [(&ours, &ours_text), (&theirs, &theirs_text)] {
        let lines = stack(native::fntrace_replay_lines(dir));
        assert_eq!(&lines, text, "fntrace replay {}, {level}", dir.display());
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// `fntrace record -a EXTRA... -o BASE/fntrace.data -- PROGRAM`: the
/// directory and fntrace's standard error (the run must have ended).
fn record_auto_args(base: &Path, program: &Path, extra: &[&str]) -> (PathBuf, String) {
    let ours = base.join("fntrace.data");
    let mut args = vec!["-a"];
    args.extend_from_slice(extra);
    args.extend([
        "-o",
        ours.to_str().unwrap(),
        "--",
        program.to_str().unwrap(),
    ]);
    let output = native::fntrace_record(base, &args);
    let stderr = native::stderr_of(&output);
    assert!(output.status.code().is_some(), "fntrace record: {stderr}");
    (ours, stderr)
}

/// `-a` on a program built without `-g`: said once, and every function's
/// six argument registers and return register recorded raw, in
/// hexadecimal (the first ones are the real arguments; the rest are
/// whatever the registers held), as uftrace 0.13's `replay` shows them.
#[test]
fn auto_args_without_dwarf_records_raw_registers() {
    let base = common::temp_dir("autoargs-nodwarf");
    let program = native::build_c(&base, "autoargs", "nog", &["-pg", "-O0"], &[]);
    let (ours, stderr) = record_auto_args(&base, &program, &[]);
    assert_eq!(
        stderr
            .matches(
                "has no DWARF description of its functions (build it with -g): \
                 the six argument registers and the return register recorded raw"
            )
            .count(),
        1,
        "{stderr}"
    );
    let text = common::uftrace(&["replay", "--no-pager", "-f", "none"], &ours);
    // add(40, 2) = 42 and uadd(1 << 40, 7) at -O0: the values gcc put in
    // rdi, rsi and rax (32-bit moves clear the upper halves).
    let line_of = |function: &str| {
        text.lines()
            .find(|line| line.trim_start().starts_with(&format!("{function}(")))
            .unwrap_or_else(|| panic!("no {function} line:\n{text}"))
            .trim()
            .to_string()
    };
    let add = line_of("add");
    assert!(
        add.starts_with("add(0x28, 0x2, 0x") && add.ends_with(") = 0x2a;"),
        "{add}\n{text}"
    );
    assert_eq!(add.matches(", ").count(), 5, "six registers: {add}");
    let uadd = line_of("uadd");
    assert!(
        uadd.starts_with("uadd(0x10000000000, 0x7, 0x") && uadd.ends_with(") = 0x10000000007;"),
        "{uadd}\n{text}"
    );
    // fntrace's replay shows the same lines.
    let ours_text = native::fntrace_replay_lines(&ours);
    for line in [&add, &uadd] {
        assert!(ours_text.contains(line.as_str()), "{line}\n{ours_text}");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// `-A`/`-R` given with `-a` replace `-a`'s values value by value, as
/// uftrace merges specs: `add`'s return value in hexadecimal, its
/// arguments still `-a`'s.
#[test]
fn auto_args_merged_with_given_specs() {
    let base = common::temp_dir("autoargs-merged");
    let program = native::build_c(&base, "autoargs", "O0", &["-g", "-pg", "-O0"], &[]);
    let extra = ["-R", "add@retval/x", "-A", "shout@arg1/d"];
    let (ours, _) = record_auto_args(&base, &program, &extra);
    let text = common::uftrace(&["replay", "--no-pager", "-f", "none"], &ours);
    for line in [
        "  add(40, 2) = 0x2a;\n",
        "  shout(97) = 'A';\n",
        "  lookup(\"key\", 100) = 207;\n",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    let _ = std::fs::remove_dir_all(&base);
}
