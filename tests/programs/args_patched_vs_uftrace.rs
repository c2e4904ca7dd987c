//! Arguments and return values of functions built without instrumentation
//! and patched at start-up (`-P`; `tests/c/args.c`, gcc with no `-pg`, at
//! `-O0` and `-O2`): `fntrace record` and the real `uftrace record` with
//! the same `-P`, `-A` and `-R`, both read by the real `uftrace replay`,
//! show the same lines. The functions are those uftrace 0.13 can patch in
//! both builds (it refuses `add`, `shout` and `where` at `-O2`: too short,
//! or a RIP-relative instruction in their first bytes); `twice` is a tail
//! call at `-O2`, its return value `add`'s. gcc and uftrace are required
//! (CI installs them): a missing one fails the test.

use crate::common;

use common::native;
use std::process::Command;

const PATCHED: [&str; 6] = ["main", "lookup", "pick", "scale", "ignore", "twice"];
const ARGS: &str = "lookup@arg1/s,arg2;pick@arg1/u;scale@fparg1,arg1/d32;ignore@arg1/s;twice@arg1";
const RETVAL: &str = "lookup@retval/d;pick@retval/s;scale@retval/f;twice@retval";

/// What both recordings show (`uftrace replay -f none`), checked by hand
/// against the program (`getenv` is a library call, recorded by both).
const EXPECTED: &str = r#"main() {
  lookup("key", 100) = 207;
  lookup("NULL", -1) = -1;
  lookup("01234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234...", 0) = 48;
  pick(1) = "hello, world";
  pick(0) = "NULL";
  scale(2.500000, 4) = 10.000000;
  scale(-0.125000, 8) = -1.000000;
  ignore("<0x10>");
  twice(3) = 7;
  getenv();
} /* main */
"#;

#[test]
fn patched_functions_record_values_as_uftrace_does() {
    for level in ["-O0", "-O2"] {
        let label = level.trim_start_matches('-');
        let base = common::temp_dir(&format!("args-patched-{label}"));
        let program = native::build_c(&base, "args", label, &[level, "-no-pie", "-fno-pie"], &[]);
        let patch: Vec<&str> = PATCHED.iter().flat_map(|f| ["-P", f]).collect();

        let theirs = base.join("uftrace.data");
        let status = Command::new("uftrace")
            .args(["record", "--no-pager", "--no-sched"])
            .args(&patch)
            .args(["-A", ARGS, "-R", RETVAL, "-d"])
            .arg(&theirs)
            .arg(&program)
            .current_dir(&base)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("cannot run uftrace; CI installs it (.ci/run)");
        assert!(status.code().is_some(), "uftrace record: {status}");

        let ours = base.join("fntrace.data");
        let mut args = vec!["-o", ours.to_str().unwrap()];
        args.extend(&patch);
        args.extend(["-A", ARGS, "-R", RETVAL, "--", program.to_str().unwrap()]);
        let output = native::fntrace_record(&base, &args);
        // (The program's exit status is its own: `main` returns a sum.)
        let stderr = native::stderr_of(&output);
        assert!(output.status.code().is_some(), "fntrace record: {stderr}");
        assert!(
            stderr.contains("6 functions patched, 0 refused"),
            "{level}: {stderr}"
        );

        let replay = |dir| common::uftrace(&["replay", "--no-pager", "-f", "none"], dir);
        let theirs_text = replay(&theirs);
        assert_eq!(theirs_text, EXPECTED, "uftrace's own recording, {level}");
        let ours_text = replay(&ours);
        native::assert_same_lines(&ours_text, &theirs_text, level);
        let _ = std::fs::remove_dir_all(&base);
    }
}
