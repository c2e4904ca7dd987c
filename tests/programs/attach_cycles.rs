//! Attach, record, detach, again and again, on services under load:
//! detach leaves nothing behind.
//!
//! Two targets, each started with no fntrace variable and not linked with
//! fntrace, served by 2 client threads of this test all along (each sends
//! batches of 16 requests on a connection, checks every reply, and opens
//! a new connection every 256 requests, so the workers go back to
//! `accept`):
//!
//! - `tests/c/attach_server.c` built with `gcc -pg` (PIE, -O2): 4 workers
//!   (in `accept`, `read`, `write`), a thread in `epoll_wait` on a 5 ms
//!   timerfd, one looping 5 ms `nanosleep`s, the main thread in `read`.
//!   Odd cycles: `fntrace attach`, `ctl filter`, `ctl record`, `ctl
//!   stop`, `ctl enable graph` (events kept in memory), `fntrace detach`,
//!   which drops them; even ones: `fntrace record -p PID --duration`,
//!   which attaches and detaches by itself.
//! - `tests/rust/attach_service.rs` built by plain `rustc -O` (no
//!   instrumentation): each cycle `fntrace attach`, `ctl patch 'svc::*'`
//!   (run-time entry patching, `-P`), `ctl record`, `ctl stop`, `fntrace
//!   detach`, which gives the entry jumps back.
//!
//! After every detach: every file-backed executable mapping of the target
//! that existed before the first attach (the executable's text, libc's,
//! the loader's...) holds the bytes it held then (read through
//! `/proc/PID/mem`); no thread named `fntrace*` is left; no tracer
//! (`TracerPid` 0); the target answers. Every recording reads in fntrace's
//! reader and in `uftrace report`, with > 0 calls of `handle_request`, at
//! most as many as the requests served from just before `record` to just
//! after `stop` (plus one per worker, for calls under way at the start),
//! and the calls of `parse_key` (which it calls once) equal to its own
//! within that margin. Only those two functions are recorded: the
//! recording's writer holds up to 4 MiB of a new thread's records until
//! it lists it, and what it frees stays in glibc's per-thread arenas (not
//! trimmed by `malloc_trim`): a plateau of `VmRSS` after about 20 cycles
//! (+0.7–0.9 MiB here: two arenas) that grows with the events per window,
//! not with the cycles. At the end: 0 failed requests, 0 EINTR in the target (every
//! blocking call it makes counts them), its exit status 0, and its VmRSS
//! after the last detach within 2 MiB of that after the first.
//!
//! Cycles: `FNTRACE_ATTACH_CYCLES` (default 100) per target. Every wait
//! has a timeout; no process outlives its test.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::attach::{fntrace, fntrace_ok, fntrace_threads};
use common::native::{build_c, cli_with_library, Scratch};
use common::service::{assert_text_as_before, build_rust_service, texts, value_of, Target};

/// Attach/record/detach cycles per target.
fn cycles() -> usize {
    std::env::var("FNTRACE_ATTACH_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100)
}

/// The workers each target runs.
const WORKERS: usize = 4;
/// The client threads of this test.
const CLIENTS: usize = 2;
/// How long each recording lasts.
const WINDOW: Duration = Duration::from_millis(100);
/// How far apart VmRSS after the first and the last detach may be.
const RSS_SLACK_KIB: i64 = 2048;

/// The client threads: each checks every reply; failures are kept with
/// what went wrong.
struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(port: u16) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..CLIENTS as u64)
            .map(|client| {
                let (stop, answered, failures) = (stop.clone(), answered.clone(), failures.clone());
                std::thread::spawn(move || {
                    let mut next = client << 40;
                    while !stop.load(Ordering::Relaxed) {
                        if let Err(why) = connection(port, &mut next, &answered, &stop) {
                            failures.lock().unwrap().push(why);
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            answered,
            failures,
            threads,
        }
    }

    /// Stops the clients: the requests answered, and the failures.
    fn stop(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread.join().unwrap();
        }
        let failures = self.failures.lock().unwrap().clone();
        (self.answered.load(Ordering::Relaxed), failures)
    }
}

/// One connection of 256 requests in batches of 16, every reply checked.
fn connection(
    port: u16,
    next: &mut u64,
    answered: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(), String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut writer = stream;
    for _ in 0..16 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let keys: Vec<u64> = (0..16)
            .map(|_| {
                *next += 1;
                *next
            })
            .collect();
        let batch: String = keys.iter().map(|k| format!("{k}\n")).collect();
        writer
            .write_all(batch.as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        for &k in &keys {
            let mut line = String::new();
            let n = reader
                .read_line(&mut line)
                .map_err(|e| format!("reading the reply to {k}: {e}"))?;
            if n == 0 {
                return Err(format!("the connection closed before the reply to {k}"));
            }
            let expected = format!("{k} {}\n", value_of(k));
            if line != expected {
                return Err(format!("reply {line:?} to {k}, expected {expected:?}"));
            }
            answered.fetch_add(1, Ordering::Relaxed);
        }
    }
    writer
        .shutdown(std::net::Shutdown::Write)
        .map_err(|e| format!("shutdown: {e}"))?;
    // The server closes its side once ours is closed: nothing more comes.
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
    match rest.is_empty() {
        true => Ok(()),
        false => Err(format!("{} unexpected bytes after the replies", rest.len())),
    }
}

/// A field of `/proc/PID/status` (the first word of its value).
fn status_field(pid: u32, name: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
        .to_string()
}

/// After a detach: no fntrace thread left (within 10 s: the control
/// thread ends after its last reply), no tracer attached.
fn assert_nothing_left(pid: u32, when: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ours = fntrace_threads(pid);
        if ours.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "{when}: still running: {ours:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(status_field(pid, "TracerPid"), "0", "{when}: a tracer");
}

/// Checks one recording: read by fntrace's reader and by uftrace, each
/// function's exits at most its entries and at most one per worker fewer,
/// some calls of `handle_request`, at most `served` + one per worker, and
/// `parse_key`'s calls equal to it within one per worker.
/// `prefix` is the names' prefix (`svc::` for the Rust service).
fn check_recording(dir: &Path, prefix: &str, served: Option<u64>, when: &str) -> u64 {
    // Entries, and exits: a call under way when the recording stopped
    // has no exit (one per worker at most).
    let calls = common::call_counts(&common::read_trace_dir(dir));
    for (name, &(entries, exits)) in &calls {
        assert!(
            exits <= entries && entries <= exits + WORKERS as u64,
            "{when}: {name}: {entries} entries, {exits} exits"
        );
    }
    let of = |name: &str| calls.get(&format!("{prefix}{name}")).map_or(0, |c| c.0);
    let handled = of("handle_request");
    assert!(handled > 0, "{when}: no handle_request recorded: {calls:?}");
    if let Some(served) = served {
        assert!(
            handled <= served + WORKERS as u64,
            "{when}: {handled} calls of handle_request recorded, {served} requests served"
        );
    }
    assert!(
        of("parse_key").abs_diff(handled) <= WORKERS as u64,
        "{when}: {} calls of parse_key, {handled} of handle_request: {calls:?}",
        of("parse_key")
    );
    let by_uftrace = common::uftrace_calls(dir);
    let uftrace_handled = by_uftrace
        .iter()
        .find(|(name, _)| name.ends_with("handle_request"))
        .map(|(_, &n)| n)
        .unwrap_or(0);
    assert!(
        uftrace_handled > 0,
        "{when}: uftrace report shows no handle_request: {by_uftrace:?}"
    );
    handled
}

/// What the cycles measured, printed at the end of each test.
struct Summary {
    cycles: usize,
    elapsed: Duration,
    recorded: u64,
    rss_first: i64,
    rss_last: i64,
}

impl Summary {
    fn print(&self, what: &str, answered: u64) {
        eprintln!(
            "{what}: {} cycles in {:.1} s ({:.0} ms each), {} handle_request calls recorded, \
             {answered} requests answered, VmRSS {} KiB after the first detach, {} KiB after \
             the last",
            self.cycles,
            self.elapsed.as_secs_f64(),
            self.elapsed.as_secs_f64() * 1e3 / self.cycles as f64,
            self.recorded,
            self.rss_first,
            self.rss_last
        );
    }
}

fn vm_rss_kib(pid: u32) -> i64 {
    status_field(pid, "VmRSS").parse().unwrap()
}

/// The C server (`gcc -pg`): attach/record/detach cycles, alternately by
/// hand and by `fntrace record -p`.
#[test]
fn c_server_attach_record_detach_cycles_under_load() {
    let scratch = Scratch::new("attach-cycles-c");
    let dir = scratch.path();
    let program = build_c(
        dir,
        "attach_server",
        "pg",
        &["-pg", "-O2", "-fPIE", "-pie"],
        &["-lpthread"],
    );
    cli_with_library();
    let mut target = Target::start(&program, WORKERS, dir);
    let pid = target.pid();
    let pid_text = pid.to_string();
    let before = texts(pid);
    let load = Load::start(target.port);
    let cycles = cycles();
    let started = Instant::now();
    let mut rss_first = 0;
    let mut recorded = 0;
    for cycle in 0..cycles {
        let when = format!("cycle {cycle}");
        let trace = dir.join(format!("trace-{cycle}"));
        let trace_text = trace.to_str().unwrap();
        let (served_before, _) = target.stats();
        if cycle % 2 == 1 {
            let attached = fntrace_ok(&["attach", &pid_text]);
            assert!(attached.contains("attached to process"), "{attached}");
            fntrace_ok(&["ctl", &pid_text, "filter", "handle_*,parse_*"]);
            fntrace_ok(&["ctl", &pid_text, "record", trace_text]);
            std::thread::sleep(WINDOW);
            let stopped = fntrace_ok(&["ctl", &pid_text, "stop"]);
            assert!(stopped.contains("lost: 0"), "{when}: {stopped}");
            // The graph tracer in memory: detach drops what it holds (it
            // stayed, and grew with each attach).
            fntrace_ok(&["ctl", &pid_text, "enable", "graph"]);
            std::thread::sleep(WINDOW / 2);
            let detached = fntrace_ok(&["detach", &pid_text]);
            assert!(detached.contains("detached: "), "{when}: {detached}");
            assert!(
                detached.contains("graph events in memory dropped"),
                "{when}: {detached}"
            );
        } else {
            let ms = format!("{}ms", WINDOW.as_millis());
            let output = fntrace(
                &[
                    "record",
                    "-p",
                    &pid_text,
                    "-o",
                    trace_text,
                    "--duration",
                    &ms,
                    "-F",
                    "handle_*",
                    "-F",
                    "parse_*",
                ],
                Duration::from_secs(60),
            );
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "{when}: {stderr}");
            assert!(stderr.contains("attached to it"), "{when}: {stderr}");
            assert!(stderr.contains(", 0 lost"), "{when}: {stderr}");
        }
        let (served_after, eintr) = target.stats();
        assert_eq!(eintr, 0, "{when}: the target saw EINTR");
        assert_nothing_left(pid, &when);
        assert_text_as_before(pid, &before, &when);
        recorded += check_recording(&trace, "", Some(served_after - served_before), &when);
        std::fs::remove_dir_all(&trace).unwrap();
        if cycle == 0 {
            rss_first = vm_rss_kib(pid);
        }
        if cycle % 10 == 9 {
            eprintln!(
                "{when}: {:.1} s, VmRSS {} KiB",
                started.elapsed().as_secs_f64(),
                vm_rss_kib(pid)
            );
        }
    }
    let summary = Summary {
        cycles,
        elapsed: started.elapsed(),
        recorded,
        rss_first,
        rss_last: vm_rss_kib(pid),
    };
    // It still answers after the last detach.
    let (served, _) = target.stats();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        target.stats().0 > served,
        "no request served after the last detach"
    );
    let (answered, failures) = load.stop();
    summary.print("C server (gcc -pg)", answered);
    assert!(failures.is_empty(), "failed requests: {failures:?}");
    let report = target.finish();
    assert!(
        report.starts_with("eintr accept=0 read=0 write=0 epoll=0 nanosleep=0 stdin=0 "),
        "{report}"
    );
    assert!(
        (summary.rss_last - summary.rss_first).abs() <= RSS_SLACK_KIB,
        "VmRSS {} KiB after the first detach, {} KiB after the last",
        summary.rss_first,
        summary.rss_last
    );
}

/// The Rust service (no instrumentation): each cycle patches its entries
/// (`patch 'svc::*'`), records, and detaches, which writes them back.
#[test]
fn rust_service_entry_patch_record_detach_cycles_under_load() {
    let scratch = Scratch::new("attach-cycles-rust");
    let dir = scratch.path();
    let program = build_rust_service(dir, "2");
    cli_with_library();
    let mut target = Target::start(&program, WORKERS, dir);
    let pid = target.pid();
    let pid_text = pid.to_string();
    let before = texts(pid);
    let load = Load::start(target.port);
    let cycles = cycles();
    let started = Instant::now();
    let mut rss_first = 0;
    let mut recorded = 0;
    for cycle in 0..cycles {
        let when = format!("cycle {cycle}");
        let trace = dir.join(format!("trace-{cycle}"));
        let trace_text = trace.to_str().unwrap();
        let (served_before, _) = target.stats();
        let attached = fntrace_ok(&["attach", &pid_text]);
        assert!(attached.contains("attached to process"), "{attached}");
        let patched = fntrace_ok(&["ctl", &pid_text, "patch", "svc::*"]);
        let count: usize = patched
            .split("functions patched")
            .next()
            .and_then(|head| head.rsplit(' ').nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{when}: {patched}"));
        assert!(count >= 4, "{when}: {patched}");
        assert_ne!(texts(pid), before, "{when}: patched, the entries jump");
        // Recorded: functions whose calls end within the window (a
        // worker's `svc::serve` lasts as long as its connection).
        fntrace_ok(&[
            "ctl",
            &pid_text,
            "filter",
            "svc::handle_request,svc::parse_key",
        ]);
        fntrace_ok(&["ctl", &pid_text, "record", trace_text]);
        std::thread::sleep(WINDOW);
        let stopped = fntrace_ok(&["ctl", &pid_text, "stop"]);
        assert!(stopped.contains("lost: 0"), "{when}: {stopped}");
        let detached = fntrace_ok(&["detach", &pid_text]);
        assert!(detached.contains("detached: "), "{when}: {detached}");
        let (served_after, eintr) = target.stats();
        assert_eq!(eintr, 0, "{when}: the target saw EINTR");
        assert_nothing_left(pid, &when);
        assert_text_as_before(pid, &before, &when);
        recorded += check_recording(&trace, "svc::", Some(served_after - served_before), &when);
        std::fs::remove_dir_all(&trace).unwrap();
        if cycle == 0 {
            rss_first = vm_rss_kib(pid);
        }
        if cycle % 10 == 9 {
            eprintln!(
                "{when}: {:.1} s, VmRSS {} KiB",
                started.elapsed().as_secs_f64(),
                vm_rss_kib(pid)
            );
        }
    }
    let summary = Summary {
        cycles,
        elapsed: started.elapsed(),
        recorded,
        rss_first,
        rss_last: vm_rss_kib(pid),
    };
    let (served, _) = target.stats();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        target.stats().0 > served,
        "no request served after the last detach"
    );
    let (answered, failures) = load.stop();
    summary.print("Rust service (rustc -O, entry patches)", answered);
    assert!(failures.is_empty(), "failed requests: {failures:?}");
    let report = target.finish();
    assert!(
        report.starts_with("eintr accept=0 read=0 write=0 stdin=0 "),
        "{report}"
    );
    assert!(
        (summary.rss_last - summary.rss_first).abs() <= RSS_SLACK_KIB,
        "VmRSS {} KiB after the first detach, {} KiB after the last",
        summary.rss_first,
        summary.rss_last
    );
}
