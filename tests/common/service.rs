//! The request/response services the attach tests start with no fntrace
//! variable (`tests/c/attach_server.c`, `tests/rust/attach_service.rs`):
//! started and asked for their counts on standard input, built, and their
//! text read through `/proc/PID/mem` to compare before and after attach.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// The value both servers answer for key `k`.
pub fn value_of(k: u64) -> u64 {
    let mut x = k.wrapping_mul(2_654_435_761);
    x ^= x >> 13;
    x % 1_000_003 + 7
}

/// A running target, killed if still running when dropped.
pub struct Target {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// The port it listens on.
    pub port: u16,
}

impl Target {
    /// Starts `program WORKERS` in `cwd` with no fntrace variable (and no
    /// `LD_PRELOAD`), and waits for its `ready PORT` line.
    pub fn start(program: &Path, workers: usize, cwd: &Path) -> Target {
        let mut command = Command::new(program);
        command
            .arg(workers.to_string())
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("FNTRACE") || name == "LD_PRELOAD" {
                command.env_remove(name);
            }
        }
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let mut target = Target {
            child,
            stdin,
            lines,
            port: 0,
        };
        let ready = target.line();
        target.port = ready
            .strip_prefix("ready ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("not a ready line: {ready:?}"));
        target
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the target printed nothing within 60 s")
    }

    /// Requests served so far, and EINTRs seen so far.
    pub fn stats(&mut self) -> (u64, u64) {
        writeln!(self.stdin, "stats").unwrap();
        let line = self.line();
        let field = |name: &str| -> u64 {
            line.split(' ')
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
        };
        (field("served"), field("eintr"))
    }

    /// Ends it: its EINTR report line; it must exit 0 within 60 s.
    pub fn finish(mut self) -> String {
        writeln!(self.stdin, "exit").unwrap();
        let report = self.line();
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the target did not exit");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "exit status {status:?}; {report}");
        report
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every file-backed executable mapping of process `pid` (but
/// libfntrace.so's), by address: its path and bytes.
pub fn texts(pid: u32) -> HashMap<u64, (String, Vec<u8>)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    maps.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 6 || !fields[1].contains('x') || !fields[5].starts_with('/') {
                return None;
            }
            if fields[5].ends_with("/libfntrace.so") {
                return None;
            }
            let (s, e) = fields[0].split_once('-')?;
            let (start, end) = (
                u64::from_str_radix(s, 16).ok()?,
                u64::from_str_radix(e, 16).ok()?,
            );
            let mut text = vec![0u8; (end - start) as usize];
            std::os::unix::fs::FileExt::read_exact_at(&mem, &mut text, start).unwrap();
            Some((start, (fields[5].to_string(), text)))
        })
        .collect()
}

/// Panics unless every mapping of `before` holds the same bytes now.
pub fn assert_text_as_before(pid: u32, before: &HashMap<u64, (String, Vec<u8>)>, when: &str) {
    let now = texts(pid);
    for (start, (path, text)) in before {
        let Some((_, current)) = now.get(start) else {
            panic!("{when}: {path} at {start:#x} is no longer mapped");
        };
        if current != text {
            let at = text.iter().zip(current).position(|(a, b)| a != b).unwrap();
            panic!(
                "{when}: {path} differs from before attach at {:#x} (offset {at:#x} of the \
                 mapping at {start:#x}): {:02x?} now, {:02x?} before",
                start + at as u64,
                &current[at..(at + 8).min(current.len())],
                &text[at..(at + 8).min(text.len())]
            );
        }
    }
}

/// `tests/rust/attach_service.rs` built by plain rustc (no
/// instrumentation) at `-C opt-level=OPT` into `dir`: `2` is `rustc -O`,
/// `3` what `cargo build --release` passes.
pub fn build_rust_service(dir: &Path, opt: &str) -> PathBuf {
    let program = dir.join("svc");
    let output = Command::new("rustc")
        .args(["--edition", "2021", "--crate-name", "svc", "-C"])
        .arg(format!("opt-level={opt}"))
        .arg(super::native::repo().join("tests/rust/attach_service.rs"))
        .arg("-o")
        .arg(&program)
        .env_remove("RUSTFLAGS")
        .output()
        .expect("cannot run rustc");
    assert!(
        output.status.success(),
        "rustc: {}",
        super::native::stderr_of(&output)
    );
    program
}
