//! `fntrace report --by-arg VALUE -F GLOB` on a recording by `fntrace
//! record -A/-R` of `tests/c/keys.c` (gcc `-pg`: key "user:K" asked for
//! K+1 times, returning K): one row per key with exactly its calls, the
//! same counts `uftrace replay` shows for the same directory; `--top`
//! sums the rest in `other`; a value the trace does not record is refused.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::native;

/// `fntrace --no-pager report DIR ARGS`.
fn report(dir: &Path, args: &[&str]) -> Output {
    Command::new(native::cli())
        .args(["--no-pager", "report"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
}

/// The (value, calls) of each row of a `--by-arg` table.
fn rows(output: &Output) -> Vec<(String, u64)> {
    assert!(output.status.success(), "{}", native::stderr_of(output));
    let text = String::from_utf8(output.stdout.clone()).unwrap();
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with("arg1") && !l.starts_with("retval"));
    lines.next().expect("a header line");
    lines
        .map(|line| {
            // The value may hold spaces (`other (5 values)`): the five
            // columns are the last nine fields (calls, then four times,
            // each NUMBER UNIT).
            let fields: Vec<&str> = line.split_whitespace().collect();
            let at = fields.len() - 9;
            (fields[..at].join(" "), fields[at].parse().unwrap())
        })
        .collect()
}

#[test]
fn one_row_per_recorded_value_with_its_exact_calls() {
    let base = common::temp_dir("report-by-arg");
    let program = native::build_c(&base, "keys", "O1", &["-pg", "-O1"], &[]);
    let dir = base.join("rec");
    let output = native::fntrace_record(
        &base,
        &[
            "-o",
            dir.to_str().unwrap(),
            "-A",
            "handle_get@arg1/s",
            "-R",
            "handle_get@retval",
            "--",
            program.to_str().unwrap(),
        ],
    );
    assert!(output.status.success(), "{}", native::stderr_of(&output));

    // The same counts as uftrace's replay of the directory shows.
    let replay = Command::new("uftrace")
        .args(["replay", "--no-pager", "-f", "none", "-d"])
        .arg(&dir)
        .output()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    let replay = String::from_utf8(replay.stdout).unwrap();
    let mut by_key = rows(&report(&dir, &["--by-arg", "arg1", "-F", "handle_get"]));
    by_key.sort();
    let expected: Vec<(String, u64)> = (0..8u64)
        .map(|k| (format!("\"user:{k}\""), k + 1))
        .collect();
    assert_eq!(by_key, expected);
    for (key, calls) in &by_key {
        let line = format!("  handle_get({key}) = ");
        assert_eq!(replay.matches(&line).count() as u64, *calls, "{replay}");
    }

    // The 3 return values with the most total time (which 3 depends on
    // the clock), each with its exact calls, then the other 5 summed:
    // 36 calls in all.
    let by_retval = rows(&report(
        &dir,
        &["--by-arg", "retval", "-F", "handle_get", "--top", "3"],
    ));
    assert_eq!(by_retval.len(), 4, "{by_retval:?}");
    assert_eq!(by_retval[3].0, "other (5 values)");
    assert_eq!(by_retval.iter().map(|r| r.1).sum::<u64>(), 36);
    for (value, calls) in &by_retval[..3] {
        let k: u64 = value.parse().unwrap();
        assert_eq!(*calls, k + 1, "{by_retval:?}");
    }

    // Not recorded: refused, with what is.
    let refused = report(&dir, &["--by-arg", "arg2", "-F", "handle_get"]);
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        native::stderr_of(&refused),
        "fntrace: --by-arg arg2 -F handle_get: the trace records no `arg2` of the functions \
         `-F handle_get` selects (it holds values of handle_get only)\n"
    );
    let _ = std::fs::remove_dir_all(&base);
}
