//! The `fntrace` command-line tool as a program: it stops quietly when its
//! reader goes away, and it links none of the tracing runtime.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{outer_inner_calls, TempDir};
use fntrace_tools::export::write_uftrace_dir;
use fntrace_tools::{EventKind, GraphEvent};
use object::{Object, ObjectSymbol};

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

#[test]
fn replay_into_a_closed_pipe_exits_quietly() {
    let dir = TempDir::unmade("pipe");
    // 200,000 events: megabytes of graph, far beyond a pipe's buffer.
    write_uftrace_dir(&outer_inner_calls(50_000), &dir.0, None).expect("writing the trace");

    let mut child = Command::new(CLI)
        .arg("replay")
        .arg(&dir.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running the fntrace CLI");
    let mut reader = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut first = String::new();
    reader
        .read_line(&mut first)
        .expect("reading the first line");
    assert!(!first.is_empty(), "no output at all");
    // Like `head -1`: close the pipe with the rest unread.
    drop(reader);

    let output = child.wait_with_output().expect("waiting for the CLI");
    assert!(
        output.status.success(),
        "{} (stderr: {})",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_cli_defines_no_runtime_symbols() {
    let data = std::fs::read(CLI).expect("reading the CLI binary");
    let file = object::File::parse(&*data).expect("parsing the CLI binary");
    let defined: Vec<String> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|symbol| symbol.is_definition())
        .filter_map(|symbol| symbol.name().ok().map(str::to_owned))
        .collect();
    // The symbol table is there to look at (the binary is not stripped).
    assert!(
        defined.iter().any(|name| name == "main"),
        "no `main` among {} defined symbols",
        defined.len()
    );
    for runtime in [
        "mcount",
        "_mcount",
        "__fentry__",
        "_Unwind_RaiseException",
        "_Unwind_SetIP",
    ] {
        assert!(
            !defined.iter().any(|name| name == runtime),
            "the CLI defines {runtime}: it links the tracing runtime"
        );
    }
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(CLI)
        .args(args)
        .output()
        .expect("running the fntrace CLI")
}

#[test]
fn help_version_errors_and_completions() {
    let version = cli(&["--version"]);
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("fntrace {}", env!("CARGO_PKG_VERSION"))
    );
    for command in [
        "report",
        "graph",
        "replay",
        "diff",
        "chrome",
        "flame",
        "pprof",
        "completions",
    ] {
        let help = cli(&[command, "--help"]);
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(help.status.success(), "{command} --help");
        assert!(text.contains("Examples:"), "{command} --help:\n{text}");
        assert!(
            text.contains(&format!("fntrace {command}")),
            "{command} --help:\n{text}"
        );
    }
    assert!(String::from_utf8_lossy(&cli(&["--help"]).stdout).contains("serde_json::*"));

    // A bad argument is named, with exit status 2.
    let bad = cli(&["report", "somewhere", "--sort", "bogus"]);
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("'bogus'") && stderr.contains("--sort"),
        "{stderr}"
    );
    let bad = cli(&["report", "somewhere", "--top", "many"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--top"));

    // A directory that is not a trace says so.
    let dir = TempDir::unmade("not-a-trace");
    std::fs::create_dir_all(&dir.0).unwrap();
    let not_trace = cli(&["report", dir.0.to_str().unwrap()]);
    assert_eq!(not_trace.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&not_trace.stderr);
    assert!(
        stderr.contains(&format!(
            "{} is not a trace directory (no info file)",
            dir.0.display()
        )),
        "{stderr}"
    );
    let missing = cli(&["graph", "/nonexistent/fntrace-trace"]);
    assert!(String::from_utf8_lossy(&missing.stderr)
        .contains("/nonexistent/fntrace-trace does not exist"));

    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef fntrace"),
        ("fish", "complete -c fntrace"),
    ] {
        let script = cli(&["completions", shell]);
        assert!(script.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&script.stdout);
        assert!(text.contains(marker), "{shell}: {text}");
        assert!(text.contains("time-range"), "{shell}");
    }
}

#[test]
fn lost_events_and_unfinished_calls_are_stated_before_the_table() {
    let dir = TempDir::unmade("lost");
    let mut trace = outer_inner_calls(10);
    trace.threads[0].lost = 1234;
    // A last call of outer still running when the trace ended.
    let last = trace.threads[0].events.last().unwrap().time_ns;
    trace.threads[0].events.push(GraphEvent {
        time_ns: last + 10,
        function: 0x40_1000,
        depth: 0,
        kind: EventKind::Entry,
    });
    write_uftrace_dir(&trace, &dir.0, None).expect("writing the trace");

    let output = Command::new(CLI)
        .args(["report", "--threads"])
        .arg(&dir.0)
        .output()
        .unwrap();
    assert!(output.status.success());
    let report = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = report.lines().collect();
    assert!(
        lines[1].starts_with("# 1234 events were lost while recording")
            && lines[1].contains("thread 4242 lost 1234"),
        "{report}"
    );
    assert!(
        lines[2].starts_with("# 1 call has no exit") && lines[2].contains("outer_function ×1"),
        "{report}"
    );
    // One table per thread, the still-running call in its row.
    assert_eq!(report.matches("thread 4242 big").count(), 1, "{report}");
    let outer = lines
        .iter()
        .find(|line| line.ends_with("  outer_function"))
        .unwrap();
    let fields: Vec<&str> = outer.split_whitespace().collect();
    assert_eq!(fields[..2], ["10", "1"], "{report}");

    // Every export says what it lacks too, in one line, before writing.
    let outputs = TempDir::new("lost-outputs");
    for (command, file) in [
        ("flame", "f.svg"),
        ("chrome", "t.json"),
        ("perfetto", "t.perfetto-trace"),
    ] {
        let path = outputs.0.join(file);
        let output = Command::new(CLI)
            .args([command, "-o"])
            .arg(&path)
            .arg(&dir.0)
            .output()
            .unwrap();
        assert!(output.status.success(), "{command}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(
            lines.first().copied(),
            Some(
                format!(
                    "fntrace: warning: {}: 1234 events lost while recording (buffers full); \
                     1 calls without an exit: 1 still running when the trace ended (drawn to \
                     its end)",
                    path.display()
                )
                .as_str()
            ),
            "{command}: {stderr}"
        );
        assert_eq!(
            lines.last().copied(),
            Some(format!("fntrace: wrote {}", path.display()).as_str()),
            "{command}: {stderr}"
        );
    }
}

#[test]
fn diff_tells_lost_events_from_calls_still_running_and_unwound() {
    let before = TempDir::unmade("diff-before");
    let after = TempDir::unmade("diff-after");
    write_uftrace_dir(&outer_inner_calls(3), &before.0, None).unwrap();
    // After: events lost, and outer's one call never returned (inner did).
    let mut trace = outer_inner_calls(1);
    trace.threads[0].events.pop();
    trace.threads[0].lost = 5;
    write_uftrace_dir(&trace, &after.0, None).unwrap();
    let output = Command::new(CLI)
        .arg("diff")
        .args([&before.0, &after.0])
        .output()
        .unwrap();
    assert!(output.status.success());
    let diff = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = diff.lines().collect();
    assert_eq!(
        lines[2..4],
        [
            "# after: 5 events were lost while recording (buffers full)",
            "# after: 1 call has no exit (1 still running when the trace ended; or their \
             exits were among the lost events)"
        ],
        "{diff}"
    );
    // outer was called in both: its calls lack their exit, it is not gone.
    let outer = lines
        .iter()
        .find(|line| line.ends_with("  outer_function"))
        .unwrap();
    assert!(outer.contains("no exit"), "{diff}");
    assert!(!outer.contains("gone"), "{diff}");
}

#[test]
fn pager_and_colour_only_on_a_terminal() {
    let dir = TempDir::unmade("tty");
    write_uftrace_dir(&outer_inner_calls(10), &dir.0, None).expect("writing the trace");
    // `script` runs the command with a pseudo-terminal as its stdout; the
    // "pager" marks each line it is given.
    let on_terminal = |no_color: bool, extra: &str| -> String {
        let command = format!("{CLI} report {} {extra}", dir.0.display());
        let mut script = Command::new("script");
        script
            .args(["-qec", &command, "/dev/null"])
            .env("PAGER", "sed s/^/PAGED:/")
            .env_remove("NO_COLOR");
        if no_color {
            script.env("NO_COLOR", "1");
        }
        let output = script
            .output()
            .expect("cannot run script (util-linux; CI has it)");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let paged = on_terminal(false, "");
    assert!(paged.contains("PAGED:\x1b[1mcalls"), "{paged:?}");
    let plain = on_terminal(true, "");
    assert!(plain.contains("PAGED:calls"), "{plain:?}");
    assert!(!plain.contains('\x1b'), "{plain:?}");
    let unpaged = on_terminal(false, "--no-pager");
    assert!(!unpaged.contains("PAGED:"), "{unpaged:?}");
    assert!(unpaged.contains("\x1b[1mcalls"), "{unpaged:?}");

    // Into a pipe: neither.
    let piped = Command::new(CLI)
        .arg("report")
        .arg(&dir.0)
        .env("PAGER", "sed s/^/PAGED:/")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let piped = String::from_utf8_lossy(&piped.stdout);
    assert!(
        piped.contains("\ncalls") && !piped.contains("PAGED:"),
        "{piped}"
    );
    assert!(!piped.contains('\x1b'), "{piped}");
}

#[test]
fn exports_without_o_go_to_standard_output_but_not_to_a_terminal() {
    let dir = TempDir::unmade("stdout-exports");
    // 100,000 calls: the JSON and the protobuf are far beyond a pipe's buffer.
    write_uftrace_dir(&outer_inner_calls(50_000), &dir.0, None).expect("writing the trace");
    let files = TempDir::new("stdout-exports-files");
    let exports: [(&[&str], &str); 4] = [
        (&["flame"], "f.svg"),
        (&["flame", "--folded"], "f.txt"),
        (&["chrome"], "t.json"),
        (&["perfetto"], "t.perfetto-trace"),
    ];
    for (args, file) in exports {
        let path = files.0.join(file);
        let to_file = Command::new(CLI)
            .args(args)
            .arg("-o")
            .arg(&path)
            .arg(&dir.0)
            .output()
            .unwrap();
        assert!(to_file.status.success(), "{args:?} -o: {to_file:?}");
        let in_file = std::fs::read(&path).expect("reading the export");
        assert!(in_file.len() >= 64, "{args:?}: {} bytes", in_file.len());

        // No -o, and -o -: the same bytes on stdout, nothing on stderr.
        for dash in [false, true] {
            let mut command = Command::new(CLI);
            command.args(args);
            if dash {
                command.args(["-o", "-"]);
            }
            let output = command.arg(&dir.0).output().unwrap();
            assert!(output.status.success(), "{args:?} dash {dash}: {output:?}");
            assert!(
                output.stdout == in_file,
                "{args:?} dash {dash}: {} bytes on stdout, {} in the file",
                output.stdout.len(),
                in_file.len()
            );
            assert_eq!(
                String::from_utf8_lossy(&output.stderr),
                "",
                "{args:?} dash {dash}"
            );
        }

        // A reader that stops early: a quiet end, as `| head -c 16`.
        let mut child = Command::new(CLI)
            .args(args)
            .arg(&dir.0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 16];
        std::io::Read::read_exact(&mut child.stdout.take().unwrap(), &mut first)
            .expect("reading the first bytes");
        assert_eq!(first[..], in_file[..16], "{args:?}");
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{args:?} closed early: {output:?}");
        assert_eq!(String::from_utf8_lossy(&output.stderr), "", "{args:?}");

        // On a terminal: refused, with what to do instead.
        let command = format!("{CLI} {} {}", args.join(" "), dir.0.display());
        let output = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .output()
            .expect("cannot run script (util-linux; CI has it)");
        let text = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {text}");
        assert!(
            text.contains(
                "is not for a terminal: name a file with -o FILE, or redirect the output"
            ),
            "{args:?}: {text}"
        );
        assert!(text.len() < 200, "{args:?} wrote to the terminal: {text}");
    }
}
