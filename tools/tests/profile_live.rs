//! The live profile end to end: a `gcc -pg` C program preloaded with
//! `libfntrace.so` (no code change), serving its control socket, driven
//! with `fntrace ctl`: `enable profile`, `fntrace top --once` lists its
//! functions while it works, `ctl metrics` gives exact counts that
//! `promtool check metrics` accepts, `ctl profile` prints them in
//! report's table, `profile --save` feeds `fntrace flame`, `profile reset`
//! and `disable profile` do what they say.
//!
//! The program works only when told to (a line on its stdin) and says when
//! it is done, so each count is known exactly: the tracer is switched and
//! read while the program is quiet.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::TempDir;

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

/// The traced program: `run N` makes N rounds of handle → parse, leaf,
/// leaf; `spin MS` makes rounds for MS milliseconds. Each answers `done
/// ROUNDS`.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile long sink;

__attribute__((noinline)) void leaf(long i) { sink += i; }

__attribute__((noinline)) long parse(long i) {
    for (int k = 0; k < 20; k++)
        sink += k * i;
    return sink;
}

__attribute__((noinline)) void handle(long i) {
    parse(i);
    leaf(i);
    leaf(i + 1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(void) {
    char line[64];
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        long rounds = 0;
        if (strncmp(line, "run ", 4) == 0) {
            long n = atol(line + 4);
            for (; rounds < n; rounds++)
                handle(rounds);
        } else if (strncmp(line, "spin ", 5) == 0) {
            double until = now() + atol(line + 5) / 1000.0;
            while (now() < until) {
                handle(rounds);
                rounds++;
            }
        }
        printf("done %ld\n", rounds);
        fflush(stdout);
    }
    return 0;
}
"#;

/// `target/<profile>`, where this test's binary and the library are.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// `libfntrace.so`, built with this test's profile and target directory
/// (`cargo test -p fntrace-tools` does not build the runtime's cdylib).
fn library() -> PathBuf {
    let dir = profile_dir();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--lib", "--manifest-path"])
        .arg(workspace.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", dir.parent().unwrap());
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cargo.arg("--release");
        }
        Some(profile) => {
            cargo.args(["--profile", profile]);
        }
        None => panic!("no profile directory above {}", dir.display()),
    }
    let output = cargo.output().expect("running cargo build --lib");
    assert!(
        output.status.success(),
        "cargo build --lib: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let library = dir.join("libfntrace.so");
    assert!(library.is_file(), "{} is missing", library.display());
    library
}

/// The program, running with the library preloaded and its control
/// socket at `socket`; killed when dropped.
struct Program {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Program {
    fn start(dir: &Path, socket: &Path, extra_env: &[(&str, &str)]) -> Program {
        let source = dir.join("service.c");
        std::fs::write(&source, PROGRAM).unwrap();
        let exe = dir.join("service");
        let built = Command::new("gcc")
            .args(["-pg", "-O1", "-fPIE", "-pie"])
            .arg(&source)
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("running gcc");
        assert!(
            built.status.success(),
            "gcc: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let mut command = Command::new(&exe);
        for (name, _) in std::env::vars() {
            if name.starts_with("FNTRACE") {
                command.env_remove(name);
            }
        }
        command
            .env("LD_PRELOAD", library())
            .env("FNTRACE_CONTROL", socket)
            .envs(extra_env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut program = Program {
            child,
            stdin,
            stdout,
        };
        assert_eq!(program.line(), "ready");
        let start = Instant::now();
        while !socket.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no control socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        program
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }

    /// Sends `command`; the rounds it made, once done.
    fn ask(&mut self, command: &str) -> u64 {
        self.send(command);
        self.done()
    }

    fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn done(&mut self) -> u64 {
        let line = self.line();
        line.strip_prefix("done ")
            .unwrap_or_else(|| panic!("the program said {line:?}"))
            .parse()
            .unwrap()
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fntrace ARGS`, which must succeed; its stdout.
fn fntrace(args: &[&str]) -> String {
    let output = Command::new(CLI)
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "fntrace {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The `_count` of each function in an OpenMetrics text.
fn counts(metrics: &str) -> Vec<(String, u64)> {
    let mut counts: Vec<(String, u64)> = metrics
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("fntrace_function_duration_seconds_count{function=\"")?;
            let (name, value) = rest.split_once("\"} ")?;
            Some((name.to_string(), value.parse().unwrap()))
        })
        .collect();
    counts.sort();
    counts
}

fn promtool_accepts(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus) must be installed for this test");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success() && output.stdout.is_empty() && output.stderr.is_empty(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn expected(handle: u64, leaf: u64) -> Vec<(String, u64)> {
    vec![
        ("handle".to_string(), handle),
        ("leaf".to_string(), leaf),
        ("parse".to_string(), handle),
    ]
}

#[test]
fn a_preloaded_c_program_profiled_live() {
    let dir = TempDir::new("live");
    let socket = dir.0.join("control.sock");
    let target = socket.to_str().unwrap();
    let mut program = Program::start(&dir.0, &socket, &[]);

    // Calls before the profile is enabled are not counted.
    assert_eq!(program.ask("run 50"), 50);
    fntrace(&["ctl", target, "enable", "profile"]);
    assert_eq!(program.ask("run 1000"), 1000);

    // Quiet: exact. (`main` was entered before the tracer was enabled: a
    // call in progress then is not counted, so it has no row.)
    let metrics = fntrace(&["ctl", target, "metrics"]);
    promtool_accepts(&metrics);
    assert_eq!(counts(&metrics), expected(1000, 2000), "{metrics}");
    assert!(
        metrics.contains(
            "fntrace_function_duration_seconds_bucket{function=\"leaf\",le=\"+Inf\"} 2000\n"
        ),
        "{metrics}"
    );

    // The table, as report's.
    let table = fntrace(&["ctl", target, "profile", "-s", "calls", "-N", "pars?"]);
    let rows: Vec<(String, String)> = table
        .lines()
        .skip_while(|line| !line.starts_with("calls"))
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            (cells[0].to_string(), cells.last().unwrap().to_string())
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("2000".to_string(), "leaf".to_string()),
            ("1000".to_string(), "handle".to_string()),
        ],
        "{table}"
    );

    // top: one interval while the program works.
    program.send("spin 3000");
    let frame = fntrace(&["top", target, "--once", "--interval", "1s"]);
    let spun = program.done();
    assert!(spun > 0);
    let header = frame.lines().next().unwrap();
    assert!(
        header.starts_with(&format!("fntrace top {target}: ")),
        "{frame}"
    );
    let listed: Vec<&str> = frame
        .lines()
        .skip(2)
        .map(|line| line.split_whitespace().last().unwrap())
        .collect();
    for name in ["handle", "parse", "leaf"] {
        assert!(listed.contains(&name), "top lacks {name}:\n{frame}");
    }
    // Each listed function made calls in the interval (calls/s > 0),
    // sorted by total: handle (callees included) first.
    assert_eq!(listed[0], "handle", "{frame}");
    let handle_rate: u64 = frame
        .lines()
        .nth(2)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(handle_rate > 0, "{frame}");

    // The snapshot saved and drawn: handle → parse, leaf.
    let saved = dir.0.join("now.profile");
    fntrace(&["ctl", target, "profile", "--save", saved.to_str().unwrap()]);
    let folded = dir.0.join("stacks.txt");
    fntrace(&[
        "flame",
        saved.to_str().unwrap(),
        "--folded",
        "-o",
        folded.to_str().unwrap(),
    ]);
    let stacks: Vec<String> = std::fs::read_to_string(&folded)
        .unwrap()
        .lines()
        .map(|line| line.rsplit_once(' ').unwrap().0.to_string())
        .collect();
    for chain in ["handle", "handle;parse", "handle;leaf"] {
        assert!(stacks.iter().any(|s| s == chain), "no {chain}: {stacks:?}");
    }

    // Disabled: the counts stay, exact, and nothing more is counted.
    fntrace(&["ctl", target, "disable", "profile"]);
    assert_eq!(program.ask("run 7"), 7);
    let metrics = fntrace(&["ctl", target, "metrics"]);
    promtool_accepts(&metrics);
    // `spin` read the clock once for its deadline, then once per round
    // and once more to stop.
    let mut spun_counts = expected(1000 + spun, 2000 + 2 * spun);
    spun_counts.insert(2, ("now".to_string(), spun + 2));
    assert_eq!(counts(&metrics), spun_counts, "{metrics}");

    // Reset: from zero.
    fntrace(&["ctl", target, "profile", "reset"]);
    fntrace(&["ctl", target, "enable", "profile"]);
    assert_eq!(program.ask("run 10"), 10);
    fntrace(&["ctl", target, "disable", "profile"]);
    let metrics = fntrace(&["ctl", target, "metrics"]);
    promtool_accepts(&metrics);
    assert_eq!(counts(&metrics), expected(10, 20), "{metrics}");
}
