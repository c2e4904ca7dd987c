//! `fntrace chrome`'s selection of a time window, threads and a minimum
//! duration gives exactly the calls it says, and the size warning comes
//! before the file is written, with the file's exact size.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use common::{outer_inner_calls, TempDir};
use fntrace_tools::export::{read_uftrace_dir, write_uftrace_dir};
use fntrace_tools::{EventKind, GraphEvent, Trace};

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

fn fntrace(args: &[&str]) -> Output {
    Command::new(CLI)
        .args(args)
        .output()
        .expect("running the fntrace CLI")
}

/// A call as the JSON shows it: thread, name, start and duration in ns.
type Call = (u64, String, u64, u64);

/// The complete events of a Chrome JSON file.
fn json_calls(path: &Path) -> BTreeSet<Call> {
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("the JSON")).expect("valid JSON");
    let ns = |value: &serde_json::Value| (value.as_f64().unwrap() * 1000.0).round() as u64;
    json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["ph"] == "X")
        .map(|event| {
            (
                event["tid"].as_u64().unwrap(),
                event["name"].as_str().unwrap().to_string(),
                ns(&event["ts"]),
                ns(&event["dur"]),
            )
        })
        .collect()
}

/// Every call of `trace`, whose threads' calls all have both their entry
/// and exit, paired with a plain stack.
fn all_calls(trace: &Trace) -> Vec<Call> {
    let mut calls = Vec::new();
    for thread in &trace.threads {
        let mut open: Vec<&GraphEvent> = Vec::new();
        for event in &thread.events {
            match event.kind {
                EventKind::Entry => open.push(event),
                EventKind::Exit => {
                    let entry = open.pop().expect("a well-formed trace");
                    assert_eq!(entry.function, event.function);
                    calls.push((
                        u64::from(thread.tid),
                        trace.name_of(entry.function),
                        entry.time_ns,
                        event.time_ns - entry.time_ns,
                    ));
                }
            }
        }
        assert!(open.is_empty(), "a well-formed trace");
    }
    calls
}

#[test]
fn window_threads_and_minimum_duration_select_exactly() {
    let work = TempDir::new("window");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/random");
    let trace = read_uftrace_dir(&dir).unwrap();
    let start = trace
        .threads
        .iter()
        .map(|thread| thread.events[0].time_ns)
        .min()
        .unwrap();
    let everything = all_calls(&trace);
    assert_eq!(everything.len(), 4_500);
    let out = work.0.join("t.json");
    let out_arg = out.to_str().unwrap();

    // --from/--to: calls entered in [start + 1ms, start + 2.5ms], on two
    // of the three threads, of at least 20 µs.
    let output = fntrace(&[
        "chrome",
        dir.to_str().unwrap(),
        "-o",
        out_arg,
        "--from",
        "1ms",
        "--to",
        "2.5ms",
        "--tid",
        "2000",
        "--tid",
        "2002",
        "--min-duration",
        "20us",
    ]);
    assert!(output.status.success(), "{output:?}");
    let expected: BTreeSet<Call> = everything
        .iter()
        .filter(|(tid, _, ts, dur)| {
            (*tid == 2000 || *tid == 2002)
                && (start + 1_000_000..=start + 2_500_000).contains(ts)
                && *dur >= 20_000
        })
        .cloned()
        .collect();
    assert_eq!(expected.len(), 169);
    assert_eq!(json_calls(&out), expected);

    // Each option alone.
    let cases: [(&[&str], usize); 4] = [
        (&["--from", "3ms"], 23),
        (&["--to", "0.5ms"], 751),
        (&["--tid", "2001"], 1_500),
        (&["--min-duration", "100us"], 81),
    ];
    for (args, count) in cases {
        let mut command = vec!["chrome", dir.to_str().unwrap(), "-o", out_arg];
        command.extend_from_slice(args);
        let output = fntrace(&command);
        assert!(output.status.success(), "{args:?}: {output:?}");
        let expected: BTreeSet<Call> = everything
            .iter()
            .filter(|(tid, _, ts, dur)| match args[0] {
                "--from" => *ts >= start + 3_000_000,
                "--to" => *ts <= start + 500_000,
                "--tid" => *tid == 2001,
                _ => *dur >= 100_000,
            })
            .cloned()
            .collect();
        assert_eq!(expected.len(), count, "{args:?}");
        assert_eq!(json_calls(&out), expected, "{args:?}");
    }

    // The same selection in perfetto is accepted; bad values are named.
    let output = fntrace(&[
        "perfetto",
        dir.to_str().unwrap(),
        "-o",
        out_arg,
        "--min-duration",
        "1ms",
    ]);
    assert!(output.status.success(), "{output:?}");
    let output = fntrace(&[
        "chrome",
        dir.to_str().unwrap(),
        "-o",
        out_arg,
        "--min-duration",
        "10",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--min-duration \"10\": not a duration"),
        "{stderr}"
    );
    let output = fntrace(&[
        "chrome",
        dir.to_str().unwrap(),
        "-o",
        out_arg,
        "--from",
        "1ms",
        "--time-range",
        "1ms~2ms",
    ]);
    assert!(!output.status.success(), "--from with --time-range");
}

#[test]
fn big_json_is_announced_with_its_size_before_it_is_written() {
    let work = TempDir::new("big");
    let dir = work.0.join("trace");
    // 450,000 × 2 calls of about 125 bytes of JSON: over 100 MB.
    write_uftrace_dir(&outer_inner_calls(450_000), &dir, None).unwrap();
    let out = work.0.join("t.json");
    let output = fntrace(&["chrome", dir.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let size = std::fs::metadata(&out).unwrap().len();
    assert!(size > 100 << 20, "{size} bytes");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert_eq!(
        lines[0],
        format!(
            "fntrace: warning: {} will be {} MB (900000 calls); the Chrome and Perfetto UIs do \
             not open files over ~100 MB: narrow it with --from/--to, --tid, --min-duration, -F \
             or -N (or write `fntrace perfetto`, far smaller)",
            out.display(),
            size >> 20
        )
    );
    assert_eq!(lines[1], format!("fntrace: wrote {}", out.display()));

    // Without the 40 ns calls it is small enough: no warning.
    let output = fntrace(&[
        "chrome",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--min-duration",
        "50ns",
    ]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        format!("fntrace: wrote {}\n", out.display())
    );
    let calls = json_calls(&out);
    assert_eq!(calls.len(), 450_000);
    assert!(calls
        .iter()
        .all(|(_, name, _, dur)| name == "outer_function" && *dur == 90));
    // The scratch file went with the command.
    let left: Vec<_> = std::fs::read_dir(&work.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}
