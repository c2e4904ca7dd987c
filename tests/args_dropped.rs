//! Events written without their values are counted: with a memory budget
//! (`--memory`) an entry or exit whose values find no room in its
//! thread's buffer goes alone (nothing is lost), and `fntrace record`
//! says how many; the real `uftrace replay` shows exactly that many calls
//! or returns without their values (`tests/c/args_loop.c`, 300,000 calls,
//! gcc `-pg -O2`). gcc and uftrace are required: a missing one fails the
//! test.

mod common;

use common::native;

#[test]
fn events_written_without_their_values_are_counted() {
    let base = common::temp_dir("args-dropped");
    let program = native::build_c(&base, "args_loop", "O2", &["-pg", "-O2"], &[]);
    let dir = base.join("fntrace.data");
    let output = native::fntrace_record(
        &base,
        &[
            "--memory",
            "16M",
            "--buffer",
            "4K",
            "-A",
            "lookup@arg1/s,arg2",
            "-R",
            "lookup@retval",
            "-o",
            dir.to_str().unwrap(),
            "--",
            program.to_str().unwrap(),
            "300000",
        ],
    );
    let stderr = native::stderr_of(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains(" 0 lost,"), "{stderr}");
    // A 4K buffer (256 events) fills many times over 300,000 calls of 4
    // to 6 slots each: some must go without their values.
    let said = stderr
        .lines()
        .find_map(|l| {
            l.strip_suffix(
                " events written WITHOUT their values (-A/-R/-a): the buffers had room for \
             the event alone (drop mode or --memory)",
            )
        })
        .and_then(|l| l.strip_prefix("fntrace record: "))
        .unwrap_or_else(|| panic!("no count of events without values:\n{stderr}"));
    let dropped: u64 = said.parse().unwrap();
    let note = std::fs::read_to_string(dir.join("fntrace.txt")).unwrap();
    assert!(
        note.contains(&format!(" values_dropped={dropped}\n")),
        "{note}"
    );

    let replay = common::uftrace(&["replay", "--no-pager", "-f", "none"], &dir);
    let (mut calls, mut without_args, mut without_retval) = (0u64, 0u64, 0u64);
    for line in replay
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("lookup("))
    {
        calls += 1;
        without_args += u64::from(line.starts_with("lookup()"));
        without_retval += u64::from(!line.contains(" = "));
    }
    assert_eq!(calls, 300_000, "every call is there (lossless)");
    assert!(dropped > 0, "{stderr}");
    assert_eq!(without_args + without_retval, dropped, "{stderr}");
    let _ = std::fs::remove_dir_all(&base);
}
