//! A bpftrace process counting the hits of one uprobe, for the tests
//! that check other tools keep working beside fntrace.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A bpftrace process counting one uprobe's hits in the kernel (a
/// per-CPU `count()`), printed every 100 ms; killed when dropped.
pub struct Bpftrace {
    child: Child,
    count: Arc<AtomicU64>,
    ended: Arc<AtomicBool>,
    stderr: PathBuf,
}

impl Bpftrace {
    /// Counts calls of `symbol` (its ELF name) in `program`; returns once
    /// the probe is attached (bpftrace runs `BEGIN` after attaching).
    pub fn start(program: &Path, symbol: &str, dir: &Path) -> Bpftrace {
        let script = format!(
            "BEGIN {{ printf(\"ready\\n\"); }} uprobe:{}:{symbol} {{ @n = count(); }} \
             interval:ms:100 {{ print(@n); }}",
            program.display()
        );
        let stderr = dir.join("bpftrace.stderr");
        let mut child = Command::new("bpftrace")
            .arg("-e")
            .arg(&script)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("cannot run bpftrace: `apt-get install bpftrace` (this test needs it)");
        let stdout = child.stdout.take().unwrap();
        let count = Arc::new(AtomicU64::new(u64::MAX));
        let ended = Arc::new(AtomicBool::new(false));
        let (ready, is_ready) = std::sync::mpsc::channel();
        {
            let (count, ended) = (count.clone(), ended.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if line == "ready" {
                        let _ = ready.send(());
                    } else if let Some(n) = line.strip_prefix("@n: ") {
                        count.store(n.trim().parse().unwrap(), Ordering::Relaxed);
                    }
                }
                ended.store(true, Ordering::Relaxed);
            });
        }
        let mut bpftrace = Bpftrace {
            child,
            count,
            ended,
            stderr,
        };
        if is_ready.recv_timeout(Duration::from_secs(120)).is_err() {
            panic!(
                "bpftrace could not set a uprobe on {symbol} in {}: {}",
                program.display(),
                bpftrace.errors()
            );
        }
        assert!(bpftrace.child.try_wait().unwrap().is_none());
        bpftrace
    }

    pub fn errors(&mut self) -> String {
        let _ = self.child.try_wait();
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits (at most 30 s) for the count to reach `expected`, then checks
    /// it stays there for 300 ms.
    pub fn assert_count(&mut self, expected: u64, when: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let n = self.count.load(Ordering::Relaxed);
            if n == expected {
                break;
            }
            assert!(
                !self.ended.load(Ordering::Relaxed),
                "{when}: bpftrace ended: {}",
                self.errors()
            );
            assert!(
                Instant::now() < deadline && (n < expected || n == u64::MAX),
                "{when}: the uprobe fired {n} times, {expected} calls made"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        let n = self.count.load(Ordering::Relaxed);
        assert_eq!(n, expected, "{when}: the uprobe's count, then");
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; SIGINT makes bpftrace
        // remove its probes and exit.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
