//! The live profile of the example service (`examples/kv-service`, built as
//! the README says, in the target directory `tools/tests/kv_service.rs`
//! builds it in, so that the two tests build it once): `fntrace ctl PID
//! enable profile` on the running service, `fntrace top --once` lists its
//! request handlers while kv-load drives it, and `fntrace ctl PID metrics`
//! counts exactly the requests answered while the profile was on, in a text
//! promtool accepts.
//!
//! Each load phase ends when every response has arrived, so the counts are
//! read while the service is quiet: exact.

mod common;
mod profile_program;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::OnceLock;

use profile_program::{fntrace, promtool_accepts};

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

/// The release directory of the instrumented build.
fn release_dir() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let target = workspace.join("target/kv-service");
        let status = Command::new(CLI)
            .args(["cargo", "build", "--release", "-p", "kv-service"])
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
        assert!(status.success(), "fntrace cargo build -p kv-service failed");
        target.join("release")
    })
}

/// The running service, killed when dropped.
struct Service {
    child: Child,
    address: String,
    pid: String,
    _stdout: BufReader<ChildStdout>,
}

impl Service {
    fn start() -> Service {
        let mut command = Command::new(release_dir().join("kv-service"));
        for (name, _) in std::env::vars() {
            if name.starts_with("FNTRACE") {
                command.env_remove(name);
            }
        }
        let mut child = command
            .args(["--listen", "127.0.0.1:0", "--workers", "4"])
            .env("FNTRACE_CONTROL", "1")
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting kv-service");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        // kv-service: listening on 127.0.0.1:PORT (pid PID)
        let rest = line
            .strip_prefix("kv-service: listening on ")
            .unwrap_or_else(|| panic!("kv-service printed {line:?}"));
        let (address, pid) = rest.trim_end().split_once(" (pid ").unwrap();
        Service {
            child,
            address: address.to_string(),
            pid: pid.trim_end_matches(')').to_string(),
            _stdout: stdout,
        }
    }

    /// kv-load with `connections` × `requests`, every response awaited.
    fn load(address: &str, connections: u64, requests: u64) {
        let output = Command::new(release_dir().join("kv-load"))
            .arg(address)
            .args(["--connections", &connections.to_string()])
            .args(["--requests", &requests.to_string()])
            .output()
            .expect("running kv-load");
        assert!(
            output.status.success(),
            "kv-load: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The calls of each request handler in `metrics`: (handle_request,
/// handle_get, handle_put, handle_delete).
fn handler_calls(metrics: &str) -> [u64; 4] {
    ["request", "get", "put", "delete"].map(|handler| {
        let prefix = format!(
            "fntrace_function_duration_seconds_count{{function=\"kv_service::handle_{handler}\"}} "
        );
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map_or(0, |count| count.parse().unwrap())
    })
}

#[test]
fn kv_service_live_profile_under_kv_load() {
    let service = Service::start();
    let pid = service.pid.as_str();
    // Not profiled: before `enable`.
    Service::load(&service.address, 4, 100);
    fntrace(&["ctl", pid, "enable", "profile"]);
    // 8 × 500 requests: a quarter PUT, half GET, a quarter DEL.
    Service::load(&service.address, 8, 500);
    let metrics = fntrace(&["ctl", pid, "metrics"]);
    promtool_accepts(&metrics);
    assert_eq!(handler_calls(&metrics), [4000, 2000, 1000, 1000]);

    // top while kv-load runs: the handlers are listed.
    let address = service.address.clone();
    let load = std::thread::spawn(move || Service::load(&address, 8, 20_000));
    let frame = fntrace(&["top", pid, "--once", "--interval", "1s"]);
    load.join().unwrap();
    let listed: Vec<&str> = frame
        .lines()
        .skip(2)
        .filter_map(|line| line.split_whitespace().last())
        .collect();
    for handler in ["kv_service::handle_request", "kv_service::handle_get"] {
        assert!(listed.contains(&handler), "top lacks {handler}:\n{frame}");
    }

    fntrace(&["ctl", pid, "disable", "profile"]);
    Service::load(&service.address, 2, 100);
    let metrics = fntrace(&["ctl", pid, "metrics"]);
    promtool_accepts(&metrics);
    assert_eq!(handler_calls(&metrics), [164_000, 82_000, 41_000, 41_000]);
}
