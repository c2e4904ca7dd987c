//! The program the live-profile tests trace and the commands they run on
//! it: a `gcc -pg` C program preloaded with `libfntrace.so`, working only
//! when told to, so that each count is known exactly.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

pub const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

/// The traced program: `run N` makes N rounds of handle → parse, leaf,
/// leaf; `spin MS` makes rounds for MS milliseconds; `nap N` makes N calls
/// of nap, the i-th asleep for (1 + i mod 10) × 100 µs. Each answers
/// `done ROUNDS`.
pub const PROGRAM: &str = r#"
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

__attribute__((noinline)) void nap(long i) {
    struct timespec t = {0, (1 + i % 10) * 100000};
    nanosleep(&t, 0);
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
        } else if (strncmp(line, "nap ", 4) == 0) {
            long n = atol(line + 4);
            for (; rounds < n; rounds++)
                nap(rounds);
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
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// `libfntrace.so`, built with this test's profile and target directory
/// (`cargo test -p fntrace-tools` does not build the runtime's cdylib).
pub fn library() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_library).clone()
}

fn build_library() -> PathBuf {
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
pub struct Program {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Program {
    pub fn start(dir: &Path, socket: &Path, extra_env: &[(&str, &str)]) -> Program {
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

    pub fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }

    /// Sends `command`; the rounds it made, once done.
    pub fn ask(&mut self, command: &str) -> u64 {
        self.send(command);
        self.done()
    }

    pub fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub fn done(&mut self) -> u64 {
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
pub fn fntrace(args: &[&str]) -> String {
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
pub fn counts(metrics: &str) -> Vec<(String, u64)> {
    let mut counts: Vec<(String, u64)> = metrics
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("fntrace_function_self_seconds_count{function=\"")?;
            let (name, value) = rest.split_once("\"} ")?;
            Some((name.to_string(), value.parse().unwrap()))
        })
        .collect();
    counts.sort();
    counts
}

/// What `promtool check metrics` says of `text`: its exit status and
/// output. Fails, never skips, when promtool is missing.
pub fn promtool_check(text: &str) -> (bool, String) {
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
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

/// promtool accepts `text` without a word.
pub fn promtool_accepts(text: &str) {
    let (ok, said) = promtool_check(text);
    assert!(ok && said.is_empty(), "promtool: {said}\n{text}");
}

pub fn expected(handle: u64, leaf: u64) -> Vec<(String, u64)> {
    vec![
        ("handle".to_string(), handle),
        ("leaf".to_string(), leaf),
        ("parse".to_string(), handle),
    ]
}

/// Builds the C program at `source` into `exe` with `gcc -pg -O1 -fPIE
/// -pie` and `extra` flags.
pub fn build_pg(source: &Path, exe: &Path, extra: &[&str]) {
    let built = Command::new("gcc")
        .args(["-pg", "-O1", "-fPIE", "-pie"])
        .args(extra)
        .arg(source)
        .arg("-o")
        .arg(exe)
        .output()
        .expect("running gcc");
    assert!(
        built.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// Starts `exe` with the runtime preloaded and live control at `socket`
/// (no other `FNTRACE*` variable of the test's environment), its stdin and
/// stdout piped.
pub fn spawn_controlled(exe: &Path, socket: &Path) -> Child {
    let mut command = Command::new(exe);
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") {
            command.env_remove(name);
        }
    }
    command
        .env("LD_PRELOAD", library())
        .env("FNTRACE_CONTROL", socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (20 s at most) for the control socket at `socket` to appear.
pub fn wait_for_socket(socket: &Path) {
    let start = Instant::now();
    while !socket.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no control socket"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
