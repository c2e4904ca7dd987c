//! The CLI on live profiles' snapshots (text form), as `fntrace ctl PID
//! profile --save` or the C API writes them: `fntrace flame SNAPSHOT`.

use crate::common;

use common::{fntrace, TempDir};
use fntrace_tools::analysis::{FunctionProfile, Histogram, NotKept, PathProfile, ProfileSnapshot};

/// main → parse (×2) → lex; main → emit. Self times: main 500, parse 300,
/// lex 200, emit 100.
fn snapshot() -> ProfileSnapshot {
    let function = |name: &str, values: &[u64], self_ns| {
        let mut durations = Histogram::new();
        for &v in values {
            durations.record(v);
        }
        FunctionProfile {
            function: 0x1000 + name.len(),
            name: name.into(),
            total_ns: durations.sum(),
            self_ns,
            durations,
            running: 0,
        }
    };
    let path = |parent, function, calls, total_ns, self_ns| PathProfile {
        parent,
        function,
        calls,
        total_ns,
        self_ns,
    };
    ProfileSnapshot {
        taken_ns: 1,
        threads: 1,
        functions: vec![
            function("main", &[1_100], 500),
            function("parse", &[250, 250], 300),
            function("lex", &[100, 100], 200),
            function("emit", &[100], 100),
        ],
        paths: vec![
            path(None, 0, 1, 1_100, 500),
            path(Some(0), 1, 2, 500, 300),
            path(Some(1), 2, 2, 200, 200),
            path(Some(0), 3, 1, 100, 100),
        ],
        not_kept: NotKept {
            paths: 6,
            functions: 0,
        },
    }
}

#[test]
fn flame_draws_a_snapshot_file() {
    let dir = TempDir::new("flame");
    let file = dir.0.join("now.profile");
    std::fs::write(&file, snapshot().to_text()).unwrap();
    let folded = dir.0.join("stacks.txt");
    let run = |args: &[&str]| {
        let mut all = vec!["flame"];
        all.extend(args);
        fntrace(&all, &file)
    };
    let output = run(&["--folded", "-o", folded.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        std::fs::read_to_string(&folded).unwrap(),
        "main 500\nmain;emit 100\nmain;parse 300\nmain;parse;lex 200\n"
    );
    // What did not fit is said.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("6 calls found no room in the call tree"),
        "{stderr}"
    );

    let output = run(&[
        "--folded",
        "-o",
        folded.to_str().unwrap(),
        "-F",
        "parse",
        "-N",
        "lex",
    ]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(std::fs::read_to_string(&folded).unwrap(), "parse 300\n");

    let svg = dir.0.join("flame.svg");
    let output = run(&["-o", svg.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    for name in ["main", "parse", "lex", "emit", "live profile"] {
        assert!(svg.contains(name), "the SVG lacks {name}");
    }

    let unwritten = dir.0.join("x.svg");
    let unwritten = unwritten.to_str().unwrap();
    let output = run(&["-o", unwritten, "-F", "pars"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("-F pars: no function of") && stderr.contains("closest: parse"),
        "{stderr}"
    );
    let output = run(&["-o", unwritten, "--tid", "1"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("keeps no threads apart"));
    assert!(!dir.0.join("x.svg").exists());
}

#[test]
fn flame_refuses_a_snapshot_cut_short() {
    let dir = TempDir::new("cut");
    let file = dir.0.join("cut.profile");
    let text = snapshot().to_text();
    std::fs::write(&file, &text[..text.len() - 4]).unwrap();
    let svg = dir.0.join("x.svg");
    let output = fntrace(&["flame", "-o", svg.to_str().unwrap()], &file);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cut short"), "{stderr}");
    assert!(!svg.exists());
}

#[test]
fn report_prints_a_snapshot_file_as_a_table() {
    let dir = TempDir::new("report");
    let file = dir.0.join("now.profile");
    std::fs::write(&file, snapshot().to_text()).unwrap();
    let output = fntrace(&["report", "-s", "calls", "-N", "emit"], &file);
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(
            format!(
                "# profile {}: 1 threads, 6 calls returned, 0 running; rows selected by -N emit; \
                 durations: wall-clock time, blocked time included",
                file.display()
            )
            .as_str()
        )
    );
    assert_eq!(
        lines.next(),
        Some("# 6 calls found no room in the call tree: counted in their rows, missing from the flame graph")
    );
    let rows: Vec<Vec<&str>> = lines
        .skip(1)
        .map(|line| line.split_whitespace().collect())
        .collect();
    fn row(cells: &str) -> Vec<&str> {
        cells.split(' ').collect()
    }
    assert_eq!(
        rows,
        [
            row("calls running total self avg min p50 p90 p99 max function"),
            row("2 0 200 ns 200 ns 100 ns 100 ns 100 ns 100 ns 100 ns 100 ns lex"),
            row("2 0 500 ns 300 ns 250 ns 250 ns 250 ns 250 ns 250 ns 250 ns parse"),
            row("1 0 1.10 µs 500 ns 1.10 µs 1.10 µs 1.10 µs 1.10 µs 1.10 µs 1.10 µs main"),
        ],
        "{text}"
    );
    let output = fntrace(&["report", "--threads"], &file);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("keeps no threads apart"));
    // The snapshot holds the names the program gave: no full C++ names.
    let full: [&[&str]; 2] = [
        &["report", "--demangle", "full"],
        &["flame", "--demangle", "full", "-o", "-"],
    ];
    for args in full {
        let output = fntrace(args, &file);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("--demangle full applies to trace directories"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn commands_that_read_trace_directories_name_the_ones_that_read_snapshots() {
    let dir = TempDir::new("not-a-trace");
    let file = dir.0.join("now.profile");
    std::fs::write(&file, snapshot().to_text()).unwrap();
    let out = dir.0.join("out");
    let out = out.to_str().unwrap();
    let shown = file.display();
    let expected = format!(
        "fntrace: {shown} is a live profile's snapshot, not a trace directory: only \
         `fntrace report {shown}`, `fntrace flame {shown}` and `fntrace pprof {shown}` \
         read snapshots\n"
    );
    let other = file.to_str().unwrap();
    let commands: [&[&str]; 5] = [
        &["graph"],
        &["replay"],
        &["chrome", "-o", out],
        &["perfetto", "-o", out],
        &["diff", other],
    ];
    for args in commands {
        let output = fntrace(args, &file);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            expected,
            "{args:?}"
        );
        assert!(output.stdout.is_empty(), "{args:?}");
        assert!(!dir.0.join("out").exists(), "{args:?}");
    }
}
