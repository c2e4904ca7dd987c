//! Issue 44's "done when", end to end, on two services started with no
//! fntrace variable and not linked with fntrace: `tests/c/attach_server.c`
//! (`gcc -pg -O2`, PIE) and `tests/rust/attach_service.rs` built as
//! `cargo build --release` builds (`-C opt-level=3`, no instrumentation).
//!
//! For each, with a bpftrace uprobe on one of its functions counting from
//! before the first attach to after the last detach, and every request of
//! this test checked (value and count):
//!
//! 1. before: N requests; the uprobe has fired exactly N times; `perf
//!    record -p PID` under load names the service's functions from its
//!    file (no `memfd:` mapping, no unknown symbol in the program);
//! 2. during `fntrace record -p PID --duration 5s -o DIR` (`-P 'svc::*'`
//!    for the Rust service, whose functions have no call site): N exact
//!    requests, then perf again under a counted load; the recording's
//!    completed calls are exact (fntrace's reader) and `uftrace report`
//!    reads the same counts from DIR; the uprobe has counted every call;
//! 3. `fntrace top PID --once` (`-P 'svc::*'` for the Rust service)
//!    attaches, shows the live profile, and detaches;
//! 4. after: the text of every file-backed executable mapping is what it
//!    was before the first attach, byte for byte (`/proc/PID/mem`); N
//!    requests, perf again, the uprobe's count still exact; 0 EINTR.
//!
//! The uprobe on the Rust service is on `svc::mix`, set before `-P`: the
//! patcher finds its `int3` and refuses the function with that reason
//! (the reply is checked); a uprobe set after `-P` is
//! `tests/uprobe_after_patch.rs`'s (docs/runtime-patching.md). bpftrace
//! and perf are required: a missing
//! tool, or uprobes this kernel cannot attach, fail the test with the
//! reason.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::attach::fntrace;
use common::bpftrace::Bpftrace;
use common::native::{build_c, cli_with_library, Scratch};
use common::service::{assert_text_as_before, build_rust_service, texts, value_of, Target};

/// Requests of each exact phase.
const N: u64 = 400;
/// How long perf samples the service in each phase.
const PERF_WINDOW: &str = "1.5";

/// One connection: a request for each key, sent in batches of 100 (one
/// round trip each: on a busy host every round trip waits for the
/// scheduler), every reply checked, then closed (the server's side ends:
/// its `serve` returns). Panics on any failure.
fn requests(port: u16, keys: impl IntoIterator<Item = u64>) -> u64 {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let keys: Vec<u64> = keys.into_iter().collect();
    for batch in keys.chunks(100) {
        let lines: String = batch.iter().map(|k| format!("{k}\n")).collect();
        writer.write_all(lines.as_bytes()).unwrap();
        for k in batch {
            let mut line = String::new();
            reader.read_line(&mut line).expect("reading a reply");
            assert_eq!(line, format!("{k} {}\n", value_of(*k)), "reply to {k}");
        }
    }
    writer.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "bytes after the last reply");
    keys.len() as u64
}

/// Odd keys (none a multiple of 4: the C server's `store_put` is not
/// called), 256 a connection, until `stop`: the requests and connections
/// made.
fn load(port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, u64)> {
    std::thread::spawn(move || {
        let (mut answered, mut connections, mut next) = (0, 0, 1_000_001u64);
        while !stop.load(Ordering::Relaxed) {
            answered += requests(port, (0..256).map(|i| next + 2 * i));
            next += 512;
            connections += 1;
        }
        (answered, connections)
    })
}

/// `perf record -g -p PID` for [`PERF_WINDOW`] seconds under [`load`],
/// then `perf script`: the frames in `program` (samples and their callers,
/// by frame pointer) are named (not `[unknown]`), at least one, and none
/// is in a `memfd:` mapping. The load's requests and connections.
fn perf_names_functions(pid: u32, program: &Path, port: u16, dir: &Path, when: &str) -> (u64, u64) {
    let data = dir.join(format!("perf-{when}.data"));
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(port, stop.clone());
    let recorded = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", "10000", "-g", "-p"])
        .arg(pid.to_string())
        .arg("-o")
        .arg(&data)
        .args(["--", "sleep", PERF_WINDOW])
        .output()
        .expect("cannot run perf: `apt-get install linux-perf` (this test needs it)");
    stop.store(true, Ordering::Relaxed);
    let made = clients.join().expect("a request failed under perf");
    assert!(
        recorded.status.success(),
        "{when}: perf record: {}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    let script = Command::new("perf")
        .args(["script", "-F", "ip,sym,dso", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        script.status.success(),
        "{when}: perf script: {}",
        String::from_utf8_lossy(&script.stderr)
    );
    let script = String::from_utf8_lossy(&script.stdout);
    let in_program = format!("({})", program.display());
    let mut named: HashMap<String, u64> = HashMap::new();
    for line in script.lines() {
        assert!(!line.contains("memfd"), "{when}: perf saw {line}");
        if let Some(head) = line.trim().strip_suffix(&in_program) {
            let symbol = head
                .split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
                .join(" ");
            assert!(
                !symbol.is_empty() && !symbol.starts_with("[unknown]"),
                "{when}: perf did not name a sample in the program: {line}"
            );
            *named.entry(symbol).or_default() += 1;
        }
    }
    assert!(
        !named.is_empty(),
        "{when}: no perf sample in {} ({} samples)",
        program.display(),
        script.lines().count()
    );
    eprintln!("{when}: perf named in the program: {named:?}");
    made
}

/// Waits until process `pid` records into `dir` (its control socket says so).
fn wait_recording(pid: &str, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = fntrace(&["ctl", pid, "status"], Duration::from_secs(20));
        if String::from_utf8_lossy(&status.stdout).contains(dir.to_str().unwrap()) {
            return;
        }
        assert!(Instant::now() < deadline, "the recording did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Calls per function in `uftrace report` of `dir`, names without
/// rustc's `::h<hash>` suffix.
fn uftrace_counts(dir: &Path) -> HashMap<String, u64> {
    common::uftrace_calls(dir)
        .into_iter()
        .map(|(name, calls)| {
            let name = match name.rsplit_once("::h") {
                Some((head, hash))
                    if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
                {
                    head.to_string()
                }
                _ => name,
            };
            (name, calls)
        })
        .collect()
}

/// One service through the four phases. `uprobed` is the ELF symbol the
/// uprobe is set on; `record_args` what `fntrace record -p` gets besides;
/// `expected(requests, connections)` the recording's completed calls.
struct Service<'a> {
    program: PathBuf,
    uprobed: String,
    record_args: &'a [&'a str],
    expected: &'a dyn Fn(u64, u64) -> HashMap<String, u64>,
    /// `fntrace top -P GLOB`: the Rust service.
    patch_for_top: Option<&'a str>,
    top_shows: &'a str,
    /// Lines `fntrace record -p` must print (`-P`'s refusals; a function
    /// is looked at once per process, so `top -P` does not list them
    /// again).
    refused: &'a [&'a str],
}

fn done_when(service: Service, dir: &Path, eintr_report: &str) {
    cli_with_library();
    let program = &service.program;
    let mut target = Target::start(program, 4, dir);
    let pid = target.pid();
    let pid_text = pid.to_string();
    let port = target.port;
    let mut uprobe = Bpftrace::start(program, &service.uprobed, dir);
    uprobe.assert_count(0, "set");
    // With the uprobe's `int3` in it.
    let before = texts(pid);

    // 1. Before.
    let mut calls = requests(port, 1..=N);
    uprobe.assert_count(calls, "before");
    calls += perf_names_functions(pid, program, port, dir, "before").0;
    uprobe.assert_count(calls, "before, perf");

    // 2. During `fntrace record -p`.
    let trace = dir.join("recorded");
    let mut record = Command::new(cli_with_library())
        .args(["record", "-p", &pid_text, "--duration", "5s", "-o"])
        .arg(&trace)
        .args(service.record_args)
        .env_remove("FNTRACE_LIB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_recording(&pid_text, &trace);
    let exact = requests(port, N + 1..=2 * N);
    let (loaded, connections) = perf_names_functions(pid, program, port, dir, "during");
    let ended_before_us = record.try_wait().unwrap().is_some();
    let deadline = Instant::now() + Duration::from_secs(60);
    while record.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "fntrace record -p did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = record.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        !ended_before_us,
        "the 5 s recording ended before this test's requests did (a host too busy?): {stderr}"
    );
    assert!(stderr.contains("attached to it"), "{stderr}");
    assert!(stderr.contains(", 0 lost"), "{stderr}");
    for refusal in service.refused {
        assert!(stderr.contains(refusal), "{stderr}");
    }
    eprintln!("{stderr}");
    calls += exact + loaded;
    uprobe.assert_count(calls, "during");
    let expected = (service.expected)(exact + loaded, 1 + connections);
    let recorded = common::completed_calls(&trace);
    eprintln!("recorded: {recorded:?}; the uprobe: {calls} calls");
    assert_eq!(recorded, expected, "fntrace's reading of the recording");
    let by_uftrace = uftrace_counts(&trace);
    assert_eq!(by_uftrace, expected, "uftrace report of the recording");
    assert_text_as_before(pid, &before, "after fntrace record -p");

    // 3. `fntrace top`.
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(port, stop.clone());
    let mut top_args = vec!["top", &pid_text, "--once", "--interval", "1s"];
    if let Some(glob) = service.patch_for_top {
        top_args.extend(["-P", glob]);
    }
    let top = fntrace(&top_args, Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    calls += clients.join().expect("a request failed under top").0;
    let shown = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "{}",
        String::from_utf8_lossy(&top.stderr)
    );
    assert!(
        shown.lines().any(|l| l.ends_with(service.top_shows)),
        "fntrace top shows no {}: {shown}",
        service.top_shows
    );
    eprintln!("{shown}");
    let top_stderr = String::from_utf8_lossy(&top.stderr);
    assert!(top_stderr.contains("attached to it"), "{top_stderr}");
    uprobe.assert_count(calls, "during top");

    // 4. After.
    assert_text_as_before(pid, &before, "after detach");
    calls += requests(port, 2 * N + 1..=3 * N);
    uprobe.assert_count(calls, "after");
    calls += perf_names_functions(pid, program, port, dir, "after").0;
    uprobe.assert_count(calls, "after, perf");
    drop(uprobe);
    let (served, eintr) = target.stats();
    assert_eq!((served, eintr), (calls, 0), "requests served, EINTR");
    eprintln!("{served} requests served, each counted by the uprobe; 0 EINTR");
    let report = target.finish();
    assert!(report.starts_with(eintr_report), "{report}");
}

/// The ELF name of the Rust function `path` (rustc's legacy mangling,
/// `_ZN3svc3mix17h<hash>E`), as bpftrace takes it.
fn legacy_mangled(program: &Path, path: &[&str]) -> String {
    use object::{Object, ObjectSymbol};
    let prefix: String = path.iter().map(|p| format!("{}{p}", p.len())).collect();
    let prefix = format!("_ZN{prefix}17h");
    let image = std::fs::read(program).unwrap();
    let elf = object::File::parse(&*image).unwrap();
    elf.symbols()
        .filter_map(|s| s.name().ok())
        .find(|name| name.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {prefix}… in {}", program.display()))
        .to_string()
}

#[test]
fn c_server_built_with_pg() {
    let scratch = Scratch::new("done-when-c");
    let dir = scratch.path();
    let program = build_c(
        dir,
        "attach_server",
        "pg",
        &["-pg", "-O2", "-fPIE", "-pie"],
        &["-lpthread"],
    );
    let expected = |requests: u64, _| {
        // Keys 1..=N, 1 in 4 a multiple of 4; the load's are odd.
        common::call_table(&[
            ("handle_request", requests),
            ("parse_key", requests),
            ("mix", requests),
            ("store_put", N / 4),
        ])
    };
    let service = Service {
        program,
        uprobed: "handle_request".to_string(),
        record_args: &[
            "-F",
            "handle_request",
            "-F",
            "parse_key",
            "-F",
            "mix",
            "-F",
            "store_put",
        ],
        expected: &expected,
        patch_for_top: None,
        top_shows: " handle_request",
        refused: &[],
    };
    done_when(
        service,
        dir,
        "eintr accept=0 read=0 write=0 epoll=0 nanosleep=0 stdin=0 ",
    );
}

#[test]
fn rust_service_built_for_release() {
    let scratch = Scratch::new("done-when-rust");
    let dir = scratch.path();
    let program = build_rust_service(dir, "3");
    let mix = legacy_mangled(&program, &["svc", "mix"]);
    let expected = |requests: u64, connections: u64| {
        // svc::mix carries the uprobe: refused by -P.
        common::call_table(&[
            ("svc::handle_request", requests),
            ("svc::parse_key", requests),
            ("svc::serve", connections),
        ])
    };
    let service = Service {
        program,
        uprobed: mix,
        record_args: &["-P", "svc::*"],
        expected: &expected,
        patch_for_top: Some("svc::*"),
        top_shows: " svc::handle_request",
        refused: &["svc::mix not patched: a breakpoint at its entry (a debugger's, or a uprobe"],
    };
    done_when(service, dir, "eintr accept=0 read=0 write=0 stdin=0 ");
}
