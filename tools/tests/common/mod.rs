//! Helpers shared by the tools' integration tests.
// Each test binary uses some of these.
#![allow(dead_code)]

use std::path::PathBuf;

use fntrace_tools::{EventKind, GraphEvent, ThreadTrace, Trace};

/// A directory under the system's temporary directory, named after the
/// test binary, `tag` and the process id, removed (with its contents) when
/// dropped. Whatever an earlier run left there is removed first.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Makes the directory.
    #[track_caller]
    pub fn new(tag: &str) -> Self {
        let dir = Self::unmade(tag);
        std::fs::create_dir_all(&dir.0).unwrap();
        dir
    }

    /// Only the name: for the program under test to create (an existing
    /// directory is not always an acceptable output).
    ///
    /// The calling file is part of the name: the tests of several files
    /// share one process (tools/tests/command).
    #[track_caller]
    pub fn unmade(tag: &str) -> Self {
        let file = std::panic::Location::caller().file();
        let stem = std::path::Path::new(file).file_stem().unwrap_or_default();
        let dir = std::env::temp_dir().join(format!(
            "fntrace-{}-{}-{tag}-{}",
            env!("CARGO_CRATE_NAME"),
            stem.to_string_lossy(),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One thread (tid 4242) calling `outer_function` (90 ns), which calls
/// `inner_function` (40 ns), `calls` times, 100 ns apart: `4 × calls`
/// events.
pub fn outer_inner_calls(calls: u64) -> Trace {
    const OUTER: usize = 0x40_1000;
    const INNER: usize = 0x40_2000;
    let event = |time_ns, function, depth, kind| GraphEvent {
        time_ns,
        function,
        depth,
        kind,
    };
    let mut events = Vec::with_capacity(4 * calls as usize);
    for call in 0..calls {
        let t = 1_000_000 + call * 100;
        events.push(event(t, OUTER, 0, EventKind::Entry));
        events.push(event(t + 10, INNER, 1, EventKind::Entry));
        events.push(event(t + 50, INNER, 1, EventKind::Exit));
        events.push(event(t + 90, OUTER, 0, EventKind::Exit));
    }
    Trace {
        pid: 4242,
        exe: "/usr/bin/big".into(),
        threads: vec![ThreadTrace {
            tid: 4242,
            name: Some("big".into()),
            events,
            lost: 0,
        }],
        names: [
            (OUTER, "outer_function".to_string()),
            (INNER, "inner_function".to_string()),
        ]
        .into(),
        ..Trace::default()
    }
}

/// `fntrace COMMAND DIR ARGS…` (the CLI built for these tests).
pub fn fntrace(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_fntrace"))
        .args(args.iter().take(1))
        .arg(dir)
        .args(args.iter().skip(1))
        .env("LC_ALL", "C")
        .output()
        .expect("running the fntrace CLI")
}

/// stdout of a successful `fntrace` command.
pub fn fntrace_ok(args: &[&str], dir: &std::path::Path) -> String {
    let output = fntrace(args, dir);
    assert!(
        output.status.success(),
        "fntrace {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The workspace's example programs, `kv-service` and `async-anchor`,
/// built instrumented in release by one `fntrace cargo build --release -p
/// kv-service -p async-anchor` into `target/examples` (a target directory of
/// their own: the instrumented flags must not rebuild the tests' crates, and
/// that build must not wait for the outer build's lock), the outer cargo's
/// flags left out. One build for both compiles tokio and fntrace once.
/// The release directory; built once per test binary.
pub fn instrumented_examples() -> &'static std::path::Path {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap();
        let target = workspace.join("target").join("examples");
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_fntrace"))
            .args(["cargo", "build", "--release"])
            .args(["-p", "kv-service", "-p", "async-anchor"])
            .arg("--target-dir")
            .arg(&target)
            .current_dir(workspace)
            .env_remove("RUSTC_BOOTSTRAP")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("RUSTC_WRAPPER")
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .status()
            .expect("running fntrace cargo build");
        assert!(
            status.success(),
            "fntrace cargo build of the examples failed"
        );
        target.join("release")
    })
}

/// `examples/async-anchor`'s executable, built instrumented in release
/// with full debug info for its own crate (`--async` reads the state
/// machines' layout from DWARF; the workspace's Cargo.toml asks for it).
pub fn async_anchor() -> PathBuf {
    instrumented_examples().join("async-anchor")
}

/// The futures and polls of `function`'s row in a report's async table
/// (`fntrace report` of an `--async` recording).
pub fn future_row(report: &str, function: &str) -> Option<(u64, u64)> {
    let mut in_table = false;
    for line in report.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"futures") {
            in_table = true;
        } else if in_table && words.last() == Some(&function) {
            return Some((words[0].parse().ok()?, words[1].parse().ok()?));
        }
    }
    None
}

/// Reads the anchor's `stdout` until its last answer (`requests
/// REQUESTS`): when its first answer came, after `start`.
pub fn anchor_answered(
    stdout: std::process::ChildStdout,
    requests: u64,
    start: std::time::Instant,
) -> std::time::Duration {
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut first_answer = None;
    loop {
        let line = lines.next().expect("the anchor's answers").unwrap();
        if line.starts_with("latency_ns ") {
            first_answer.get_or_insert_with(|| start.elapsed());
        }
        if line == format!("requests {requests}") {
            return first_answer.expect("an answer before the last line");
        }
    }
}

/// `fntrace record --lib LIBRARY --async -o DATA -- ASYNC-ANCHOR ARGS`:
/// the anchor run with its polls linked into futures (the runtime
/// `library` next to the CLI), for the caller to add its environment and
/// run.
pub fn record_anchor_async(
    library: &std::path::Path,
    data: &std::path::Path,
    args: &[&str],
) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fntrace"));
    command
        .arg("record")
        .arg("--lib")
        .arg(library)
        .args(["--async", "-o"])
        .arg(data)
        .arg("--")
        .arg(async_anchor())
        .args(args);
    command
}

/// A duration as fntrace prints it (`45.5 ms`, `253 µs`, `1.84 s`), in ns.
pub fn shown_ns(text: &str) -> f64 {
    let (value, unit) = text.split_once(' ').expect("a value and a unit");
    let value: f64 = value.parse().unwrap();
    value
        * match unit {
            "ns" => 1.0,
            "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            other => panic!("unit {other}"),
        }
}

/// `fntrace ctl SOCKET futures`: its reply (the runtime future linker's
/// rows), asserted a success.
pub fn ctl_futures(socket: &std::path::Path) -> String {
    let ctl = std::process::Command::new(env!("CARGO_BIN_EXE_fntrace"))
        .arg("ctl")
        .arg(socket)
        .arg("futures")
        .output()
        .expect("running fntrace ctl");
    assert!(ctl.status.success(), "fntrace ctl futures: {ctl:?}");
    String::from_utf8_lossy(&ctl.stdout).into_owned()
}

/// Waits for `socket` (a program's control socket) to appear: at most a
/// minute.
pub fn wait_for_socket(socket: &std::path::Path) {
    let start = std::time::Instant::now();
    while !socket.exists() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no socket {}",
            socket.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
