//! The example service (`examples/kv-service`), built as the README says
//! (`fntrace cargo build --release -p kv-service`, in a target directory
//! of its own so that it does not wait for the outer build's lock; with
//! async-anchor, common::instrumented_examples), traced
//! while it runs — through its control socket (`fntrace ctl PID record`,
//! `stop`; `enable graph`, `disable graph`, `dump`), and through the
//! environment (the whole run): the service's request handlers show in the
//! latency table with counts equal to the requests answered while it was
//! traced, read by `fntrace report` and by the real `uftrace report`.
//!
//! And its live profile: `fntrace ctl PID enable profile` on the running
//! service, `fntrace top --once` lists its request handlers while kv-load
//! drives it, and `fntrace ctl PID metrics` counts exactly the requests
//! answered while the profile was on, in a text promtool accepts.
//!
//! Load comes from kv-load (many connections at once, every response
//! checked) in phases; each phase ends when every response has arrived, so
//! the moments tracing starts and stops are quiet and the counts are exact.

use crate::common;
use crate::instrumented;
use crate::profile_program;

use common::TempDir;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

/// The service's functions whose rows are checked.
const HANDLERS: [&str; 5] = [
    "kv_service::handle_request",
    "kv_service::parse_request",
    "kv_service::handle_get",
    "kv_service::handle_put",
    "kv_service::handle_delete",
];

/// The release directory of the instrumented build (built once per run of
/// this test binary).
fn release_dir() -> &'static Path {
    common::instrumented_examples()
}

/// A running kv-service, killed on drop if still running.
struct Service {
    child: Child,
    address: String,
    pid: u32,
    // Held so that the service's stdout stays open.
    _stdout: BufReader<ChildStdout>,
}

impl Service {
    /// Starts the service on an ephemeral port of 127.0.0.1 with `env`,
    /// and waits for its `listening on` line.
    fn start(env: &[(&str, &str)]) -> Service {
        Service::start_under(&[], env)
    }

    /// [`Service::start`], the service run by the command `wrapper` (its
    /// arguments before the service's path), if any.
    fn start_under(wrapper: &[&str], env: &[(&str, &str)]) -> Service {
        let service = release_dir().join("kv-service");
        let mut command = match wrapper.split_first() {
            None => Command::new(&service),
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&service);
                command
            }
        };
        // Only the variables asked for: none from the test's environment.
        for (name, _) in std::env::vars() {
            if name.starts_with("FNTRACE") {
                command.env_remove(name);
            }
        }
        let mut child = command
            .args(["--listen", "127.0.0.1:0", "--workers", "4"])
            .envs(env.iter().copied())
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
        let pid: u32 = pid.trim_end_matches(')').parse().unwrap();
        if wrapper.is_empty() {
            assert_eq!(pid, child.id());
        }
        Service {
            address: address.to_string(),
            pid,
            child,
            _stdout: stdout,
        }
    }

    /// Runs kv-load against the service and waits for every response;
    /// checks what it says it sent.
    fn load(&self, connections: u64, requests: u64) {
        let output = Command::new(release_dir().join("kv-load"))
            .arg(&self.address)
            .args(["--connections", &connections.to_string()])
            .args(["--requests", &requests.to_string()])
            .output()
            .expect("running kv-load");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "kv-load: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let total = connections * requests;
        let (sent, rate) = stdout.split_once('\n').expect("two lines");
        assert_eq!(
            sent,
            format!(
                "kv-load: {total} requests on {connections} connections: {} PUT, {} GET, {} DEL",
                total / 4,
                total / 2,
                total / 4
            )
        );
        // `kv-load: N requests/s over T s; latency p50 …, p90 …, p99 …, max …`
        let fields: Vec<&str> = rate.split_whitespace().collect();
        assert!(
            fields.len() == 19
                && fields[1].parse::<f64>().is_ok_and(|r| r > 0.0)
                && fields[2] == "requests/s"
                && [8, 11, 14, 17]
                    .iter()
                    .all(|&i| fields[i].parse::<f64>().is_ok()),
            "{rate:?}"
        );
    }

    /// `fntrace ctl PID args`, which must answer ok; its stdout.
    fn ctl(&self, args: &[&str]) -> String {
        let output = Command::new(CLI)
            .arg("ctl")
            .arg(self.pid.to_string())
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert_eq!(
            output.status.code(),
            Some(0),
            "fntrace ctl {args:?}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }

    /// Stops the service with SIGTERM; it must exit 0.
    fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .expect("running kill");
        assert!(status.success());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "kv-service: {status}");
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (calls, unfinished) of each of `functions` in `fntrace report DIR`.
fn fntrace_report(dir: &Path, functions: &[&str]) -> HashMap<String, (u64, u64)> {
    let output = Command::new(CLI)
        .args(["report", "--no-pager"])
        .arg(dir)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "fntrace report: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    functions
        .iter()
        .filter_map(|&function| {
            let row = report
                .lines()
                .find(|line| line.ends_with(&format!("  {function}")))?;
            let mut fields = row.split_whitespace().map(|f| f.parse().unwrap());
            Some((function.to_string(), (fields.next()?, fields.next()?)))
        })
        .collect()
}

/// Calls of each of `functions` in `uftrace report -d DIR` (rows: total,
/// self, each a value and a unit, then calls and the function).
fn uftrace_report(dir: &Path, functions: &[&str]) -> HashMap<String, u64> {
    let output = Command::new("uftrace")
        .args(["report", "--no-pager", "-d"])
        .arg(dir)
        .env("LC_ALL", "C")
        .output()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "uftrace report: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let name = fields.get(5..)?.join(" ");
            functions
                .contains(&name.as_str())
                .then(|| Some((name, fields[4].parse().ok()?)))?
        })
        .collect()
}

/// The rows `fntrace report` and `uftrace report` must show for `requests`
/// answered requests of kv-load (a quarter PUT, half GET, a quarter DEL).
fn check_counts(dir: &Path, requests: u64) {
    let expected = [requests, requests, requests / 2, requests / 4, requests / 4];
    let ours = fntrace_report(dir, &HANDLERS);
    let theirs = uftrace_report(dir, &HANDLERS);
    for (function, calls) in HANDLERS.iter().zip(expected) {
        assert_eq!(
            ours.get(*function),
            Some(&(calls, 0)),
            "fntrace: {function}"
        );
        assert_eq!(theirs.get(*function), Some(&calls), "uftrace: {function}");
    }
}

#[test]
fn only_the_service_is_instrumented() {
    let functions = instrumented::mcount_calls(&release_dir().join("kv-service"));
    let callers = instrumented::callers(&functions);
    for handler in HANDLERS {
        assert!(callers.contains(&handler), "{handler} does not call mcount");
    }
    // Not fntrace, and not tokio, mio or std: only the code rustc compiled
    // in the service's crate, which includes other crates' generic and
    // `#[inline]` functions the service instantiates (tokio's
    // `Harness<kv_service::…>::poll`) — never these, compiled in theirs.
    // (A method's name is `<Type>::method` or `Type::method`, as the
    // crate's symbol mangling has it.)
    for (path, function) in [
        (
            "tokio::runtime::scheduler::multi_thread::worker::Context",
            "run",
        ),
        ("tokio::runtime::io::driver::Driver", "turn"),
        ("mio::poll::Poll", "poll"),
        ("fntrace::rt::entry", "dispatch"),
        ("fntrace::rt::ops", "before_fork"),
    ] {
        let calls = functions
            .get(&format!("{path}::{function}"))
            .or_else(|| functions.get(&format!("<{path}>::{function}")));
        assert_eq!(calls, Some(&false), "{path}::{function}");
    }
    let fntrace_functions = functions
        .keys()
        .filter(|name| name.starts_with("fntrace"))
        .count();
    let fntrace_callers: Vec<_> = callers
        .iter()
        .filter(|name| name.starts_with("fntrace") || name.contains("<fntrace"))
        .collect();
    assert!(fntrace_functions > 100, "{fntrace_functions}");
    assert_eq!(fntrace_callers, Vec::<&&str>::new());
    println!(
        "{} functions, {} call mcount, {fntrace_functions} of fntrace",
        functions.len(),
        callers.len()
    );
}

#[test]
fn the_control_socket_records_a_window_of_the_load() {
    let recorded = TempDir::unmade("ctl-record");
    let dumped = TempDir::unmade("ctl-dump");
    let service = Service::start(&[("FNTRACE_CONTROL", "1")]);
    service.load(8, 100); // before: not recorded
    service.ctl(&["record", recorded.0.to_str().unwrap()]);
    service.load(16, 200); // the window
    let stopped = service.ctl(&["stop"]);
    assert!(stopped.contains("\nlost: 0\n"), "{stopped}");
    service.load(8, 100); // after: not recorded

    // The graph tracer into memory, then written out.
    service.ctl(&["enable", "graph"]);
    service.load(4, 100);
    service.ctl(&["disable", "graph"]);
    service.load(4, 100); // not traced
    service.ctl(&["dump", dumped.0.to_str().unwrap()]);
    service.stop();

    check_counts(&recorded.0, 16 * 200);
    check_counts(&dumped.0, 4 * 100);
}

#[test]
fn the_environment_records_the_whole_run() {
    let data = TempDir::unmade("env");
    let data_path = data.0.to_str().unwrap();
    let service = Service::start(&[("FNTRACE", "graph"), ("FNTRACE_OUTPUT", data_path)]);
    service.load(16, 200);
    service.load(4, 100);
    // FNTRACE_OUTPUT is finished at exit.
    service.stop();
    check_counts(&data.0, 16 * 200 + 4 * 100);
}

/// `fntrace record -- kv-service`: the service links fntrace itself, so
/// its library calls cannot be hooked; record leaves them out (it once
/// asked for them by name, and the runtime then ran the service untraced:
/// 6 events).
#[test]
fn fntrace_record_runs_a_service_that_links_fntrace() {
    let data = TempDir::unmade("record");
    let data_path = data.0.to_str().unwrap();
    let record = [CLI, "record", "--no-pager", "-o", data_path, "--"];
    let service = Service::start_under(&record, &[]);
    service.load(8, 100);
    service.stop();
    check_counts(&data.0, 8 * 100);
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
    use profile_program::promtool_accepts;
    let service = Service::start(&[("FNTRACE_CONTROL", "1")]);
    // Not profiled: before `enable`.
    service.load(4, 100);
    service.ctl(&["enable", "profile"]);
    // 8 × 500 requests: a quarter PUT, half GET, a quarter DEL.
    service.load(8, 500);
    let metrics = service.ctl(&["metrics"]);
    promtool_accepts(&metrics);
    assert_eq!(handler_calls(&metrics), [4000, 2000, 1000, 1000]);

    // top while kv-load runs: the handlers are listed.
    let frame = std::thread::scope(|scope| {
        let load = scope.spawn(|| service.load(8, 20_000));
        let pid = service.pid.to_string();
        let frame = profile_program::fntrace(&["top", &pid, "--once", "--interval", "1s"]);
        load.join().unwrap();
        frame
    });
    let listed: Vec<&str> = frame
        .lines()
        .skip(2)
        .filter_map(|line| line.split_whitespace().last())
        .collect();
    for handler in ["kv_service::handle_request", "kv_service::handle_get"] {
        assert!(listed.contains(&handler), "top lacks {handler}:\n{frame}");
    }

    service.ctl(&["disable", "profile"]);
    service.load(2, 100);
    let metrics = service.ctl(&["metrics"]);
    promtool_accepts(&metrics);
    assert_eq!(handler_calls(&metrics), [164_000, 82_000, 41_000, 41_000]);
    service.stop();
}
