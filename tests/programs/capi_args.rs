//! `fntrace_set_arg_specs` (`include/fntrace.h`) from a real C program,
//! `tests/c/capi_args.c` built with `gcc -pg` and linked with
//! `libfntrace.a`: the specs set before a recording are in its directory
//! as uftrace writes them (the real `uftrace replay` shows the values), a
//! function without a spec keeps its plain line; a spec that does not
//! parse is `-EINVAL`, a glob that selects no function is counted, and a
//! change while the recording runs is `-EBUSY`, each explained by
//! `fntrace_last_error`. gcc and uftrace are required: a missing one fails
//! the test.

use crate::common;

use std::process::Command;

use common::native::{build_c_program, repo};

#[test]
fn arguments_set_through_the_c_abi_are_recorded() {
    let base = common::temp_dir("capi-args");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("capi_args");
    build_c_program(&repo().join("tests/c/capi_args.c"), &["-pg"], &program);
    let dir = base.join("args.data");
    let output = Command::new(&program)
        .arg(&dir)
        .current_dir(&base)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        stdout,
        "bad -22 fntrace_set_arg_specs: bad argument spec: `handle_get@arg9`: `arg9`: only the \
         first 6 integer arguments (those in registers) can be recorded\n\
         unmatched 1\n\
         set 0\n\
         start 0\n\
         busy -16 fntrace_set_arg_specs: a recorder runs (a recording or the flight \
         recorder): stop it first\n\
         stop 0\n"
    );
    let replay = common::uftrace(&["replay", "--no-pager", "-f", "none"], &dir);
    let calls: Vec<&str> = replay
        .lines()
        .map(str::trim)
        .filter(|l| {
            ["handle_get", "half", "plain"]
                .iter()
                .any(|f| l.starts_with(f))
        })
        .collect();
    assert_eq!(
        calls,
        [
            "handle_get(\"user:42\", 1) = 118;",
            "handle_get(\"user:7\", 2) = 119;",
            "half(5.000000) = 2.500000;",
            "plain();",
        ],
        "{replay}"
    );
    let _ = std::fs::remove_dir_all(&base);
}
