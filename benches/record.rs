//! What a long recording costs: `cargo bench --bench record`.
//!
//! The streaming recorder ([`fntrace::record`]) on the benchmark workload
//! (`run(n)` = run → n × (mid → 4 × leaf), C built with `gcc -pg`, PIE), two
//! threads, measured as users meet it: cold buffers, nothing excluded.
//!
//! 1. Untraced reference: the two threads for 2 s with the sites NOPed.
//! 2. Full rate: the two threads call as fast as they can for
//!    `FNTRACE_BENCH_SECONDS` (default 10) while recording: per-call cost on
//!    the traced threads over the whole run (traced minus untraced CPU per
//!    call), events written and lost (their sum must equal 2 per call, or
//!    the bench fails), the writer's CPU, bytes on disk per call, and the
//!    growth of the process's peak RSS.
//! 3. Service rate: each thread makes 401 calls every millisecond
//!    (≈ 401k calls/s) for `FNTRACE_BENCH_SERVICE_SECONDS` (default 60):
//!    events lost (target 0) and peak RSS growth (target ≤ 64 MiB); the
//!    cost per call from the threads' whole CPU and from the CPU of the
//!    bursts of calls alone (the sleeps between them cost more CPU than
//!    the calls, and swing from run to run). Then the same with 256 KiB
//!    buffers (`FNTRACE_BENCH_SMALL_SECONDS`, default 10; 0 skips it): what
//!    writing the events into a ring larger than the caches costs.
//!
//! Every phase prints the minor page faults the traced threads took. First
//! of all, a new thread's first and second pass over its buffer, with no
//! buffers kept ready (`RecordOptions::ready_buffers` 0: each page faults
//! on the traced path) and with the default 2.
//! 4. `uftrace record` on a standalone build of the same call tree
//!    (`benches/c/uftrace_workload.c`, `gcc -O2 -pg`, against the same
//!    build without `-pg`): one thread making 10M calls back to back (its
//!    added CPU per call, the program and uftrace's recorder together, and
//!    bytes per call); then, as fntrace's service rate is measured, 2
//!    threads each calling `run(80)` once a millisecond for
//!    `FNTRACE_BENCH_SECONDS`, timing their bursts of calls themselves, with
//!    `--no-libcall` (uftrace then records exactly the functions fntrace
//!    does; every call must be recorded, to the byte): the added CPU per
//!    call of the traced threads' bursts, and of uftrace's recorder process.
//!
//! 5. A real program (`benches/realprog`: `serde_json` and
//!    `regex-automata` on 2 threads, 2 documents per millisecond each,
//!    every crate built with `-Zinstrument-mcount`) run plain, under
//!    `fntrace record` and under `uftrace record`: the call counts of every
//!    function compared (by address: identical functions folded into one
//!    are named by either symbol), and each recorder's CPU per call, the
//!    program and the recorder together. `FNTRACE_BENCH_NO_REAL=1` skips
//!    it (the first run builds the program twice, ≈ 1 min each).
//!
//! Targets (printed MET or MISS; a miss does not fail the run): ≤ 25 ns
//! per traced call at full rate; 0 lost at the service rate; peak memory
//! growth ≤ 64 MiB; fntrace ≥ 5× cheaper per call than `uftrace record`,
//! judged at the service rate, where both write every event (at full rate
//! fntrace drops most events, and a drop costs less than a write), on the
//! same figure for both: the traced threads' CPU in their bursts of calls.
//! The ratio with uftrace's recorder and fntrace's writer counted is
//! printed beside it.

mod common;

use std::hint::black_box;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{build_standalone, children_cpu_ns, machine_description, thread_cpu_ns, TempDir};
use fntrace::{Filter, RecordOptions, RecordReport, DEFAULT_RECORD_BUFFER_EVENTS};
use fntrace_fixtures::c_pie;

const THREADS: usize = 2;
/// `run(n)` per loop turn at full rate: 50,001 calls.
const FULL_RATE_N: i64 = 10_000;
/// `run(n)` per millisecond at the service rate: 401 calls.
const SERVICE_N: i64 = 80;
/// `uftrace record` comparison: run(n) with 10,000,001 calls (+ main).
const UFTRACE_N: u64 = 2_000_000;
/// The real program: documents per thread, and per millisecond (≈ 340
/// calls each: ≈ 680k calls/s per thread).
const REAL_DOCS: u64 = 10_000;
const REAL_DOCS_PER_MS: u64 = 2;
/// `run(n)` of a first pass: 100,001 calls, 200,002 events (3 MiB).
const FIRST_PASS_N: i64 = 20_000;
const FIRST_PASS_ROUNDS: usize = 7;
/// Buffers of the cache-sized comparison: 256 KiB, 20 ms of events at the
/// service rate (drained every 10 ms).
const SMALL_BUFFER_EVENTS: usize = 1 << 14;
const TARGET_NS_PER_CALL: f64 = 25.0;
const TARGET_RSS_GROWTH: u64 = 64 << 20;
const TARGET_UFTRACE_RATIO: f64 = 5.0;

const fn calls_of(n: i64) -> u64 {
    1 + 5 * n as u64
}

fn seconds(variable: &str, default: u64) -> Duration {
    let value = std::env::var(variable).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{variable} must be a number of seconds, not {v:?}"))
    });
    Duration::from_secs(value)
}

/// What one thread did: calls made, its CPU time (all of it, and, when
/// paced, that of its bursts of calls alone, without the sleeps between
/// them), and the minor page faults it took.
#[derive(Clone, Copy, Default)]
struct ThreadRun {
    calls: u64,
    cpu_ns: u64,
    burst_cpu_ns: u64,
    minor_faults: u64,
}

/// Runs `THREADS` threads for `length`, each calling `run(n)` in a loop,
/// paced to one call of `run(n)` per `pace` if given.
fn workers(length: Duration, n: i64, pace: Option<Duration>) -> Vec<ThreadRun> {
    let start = Arc::new(Barrier::new(THREADS + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (start, stop) = (Arc::clone(&start), Arc::clone(&stop));
            thread::spawn(move || {
                start.wait();
                let faults_start = thread_minor_faults();
                let cpu_start = thread_cpu_ns();
                let begun = Instant::now();
                let mut turns = 0u64;
                let mut burst_cpu_ns = 0;
                while !stop.load(Ordering::Relaxed) {
                    let burst_start = pace.map(|_| thread_cpu_ns());
                    black_box(c_pie::run(black_box(n)));
                    turns += 1;
                    if let Some(pace) = pace {
                        burst_cpu_ns += thread_cpu_ns() - burst_start.unwrap_or(0);
                        let next = begun + pace * turns as u32;
                        if let Some(wait) = next.checked_duration_since(Instant::now()) {
                            thread::sleep(wait);
                        }
                    }
                }
                let cpu_ns = thread_cpu_ns() - cpu_start;
                ThreadRun {
                    calls: turns * calls_of(n),
                    cpu_ns,
                    burst_cpu_ns: if pace.is_some() { burst_cpu_ns } else { cpu_ns },
                    minor_faults: thread_minor_faults() - faults_start,
                }
            })
        })
        .collect();
    start.wait();
    thread::sleep(length);
    stop.store(true, Ordering::Relaxed);
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Minor page faults the calling thread took so far.
fn thread_minor_faults() -> u64 {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_THREAD) failed");
    usage.ru_minflt as u64
}

/// User + system CPU time of the whole process so far.
fn process_cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_SELF) failed");
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// A `/proc/self/status` field in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix(field)?.strip_prefix(':')?;
            rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
        * 1024
}

/// Resets the peak RSS to the current RSS (Linux ≥ 4.0).
fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").expect("writing /proc/self/clear_refs");
}

struct Recorded {
    report: RecordReport,
    runs: Vec<ThreadRun>,
    writer_cpu_ns: u64,
    rss_growth: u64,
}

impl Recorded {
    fn calls(&self) -> u64 {
        self.runs.iter().map(|r| r.calls).sum()
    }
    fn cpu_per_call(&self) -> f64 {
        self.runs.iter().map(|r| r.cpu_ns).sum::<u64>() as f64 / self.calls() as f64
    }
    fn burst_cpu_per_call(&self) -> f64 {
        burst_per_call(&self.runs)
    }
    fn minor_faults(&self) -> u64 {
        self.runs.iter().map(|r| r.minor_faults).sum()
    }
}

/// CPU per call of the bursts alone (no sleeps), over all threads.
fn burst_per_call(runs: &[ThreadRun]) -> f64 {
    runs.iter().map(|r| r.burst_cpu_ns).sum::<u64>() as f64
        / runs.iter().map(|r| r.calls).sum::<u64>() as f64
}

/// Records `THREADS` workers for `length` into `dir`; checks that every
/// event was written or counted lost.
fn record(
    dir: &Path,
    length: Duration,
    n: i64,
    pace: Option<Duration>,
    buffer_events: usize,
) -> Recorded {
    let _ = std::fs::remove_dir_all(dir);
    reset_peak_rss();
    let rss_before = status_bytes("VmRSS");
    let cpu_before = process_cpu_ns();
    let options = RecordOptions {
        buffer_events,
        ..RecordOptions::default()
    };
    let recording = fntrace::record_with("graph", &Filter::new().include("pie_*"), dir, &options)
        .unwrap_or_else(|e| panic!("fntrace::record: {e}"));
    let runs = workers(length, n, pace);
    let report = recording
        .stop()
        .unwrap_or_else(|e| panic!("Recording::stop: {e}"));
    let all_cpu = process_cpu_ns() - cpu_before;
    let recorded = Recorded {
        writer_cpu_ns: all_cpu.saturating_sub(runs.iter().map(|r| r.cpu_ns).sum()),
        rss_growth: status_bytes("VmHWM").saturating_sub(rss_before),
        report,
        runs,
    };
    assert_eq!(
        recorded.report.events + recorded.report.lost,
        2 * recorded.calls(),
        "every event must be written or counted lost: {:?}",
        recorded.report
    );
    let _ = std::fs::remove_dir_all(dir);
    recorded
}

/// A new thread's first pass over its buffer (`run(FIRST_PASS_N)`, which
/// fills most of a 4 MiB buffer), then, after a drain, a second pass over
/// the same pages; `ready_buffers` as in [`RecordOptions`]. Medians of
/// `FIRST_PASS_ROUNDS` threads: CPU per call and minor faults of each pass.
fn first_pass(scratch: &Path, ready_buffers: usize) -> [(f64, u64); 2] {
    let mut rounds: Vec<[(f64, u64); 2]> = (0..FIRST_PASS_ROUNDS)
        .map(|round| {
            let dir = scratch.join(format!("first-pass-{ready_buffers}-{round}.data"));
            let _ = std::fs::remove_dir_all(&dir);
            let options = RecordOptions {
                ready_buffers,
                ..RecordOptions::default()
            };
            let recording =
                fntrace::record_with("graph", &Filter::new().include("pie_*"), &dir, &options)
                    .unwrap_or_else(|e| panic!("fntrace::record: {e}"));
            let passes = thread::scope(|scope| {
                let (first_done, first_done_rx) = std::sync::mpsc::channel();
                let (drained, drained_rx) = std::sync::mpsc::channel();
                let passes = scope.spawn(move || {
                    let pass = || {
                        let (cpu, faults) = (thread_cpu_ns(), thread_minor_faults());
                        black_box(c_pie::run(black_box(FIRST_PASS_N)));
                        let calls = calls_of(FIRST_PASS_N) as f64;
                        (
                            (thread_cpu_ns() - cpu) as f64 / calls,
                            thread_minor_faults() - faults,
                        )
                    };
                    let first = pass();
                    first_done.send(()).unwrap();
                    drained_rx.recv().unwrap();
                    [first, pass()]
                });
                // The second pass starts once a whole drain ran after the
                // first (on a loaded host a drain can take longer than
                // any fixed wait).
                first_done_rx.recv().unwrap();
                let drains = recording.drains();
                while recording.drains() < drains + 2 {
                    thread::sleep(Duration::from_millis(1));
                }
                drained.send(()).unwrap();
                passes.join().unwrap()
            });
            let report = recording.stop().unwrap();
            assert_eq!(report.lost, 0, "{report:?}");
            assert_eq!(report.events, 4 * calls_of(FIRST_PASS_N), "{report:?}");
            let _ = std::fs::remove_dir_all(&dir);
            passes
        })
        .collect();
    let median = |pass: usize, rounds: &mut Vec<[(f64, u64); 2]>| {
        rounds.sort_by(|a, b| a[pass].0.total_cmp(&b[pass].0));
        rounds[rounds.len() / 2][pass]
    };
    [median(0, &mut rounds), median(1, &mut rounds)]
}

/// Runs `command` to success, its output discarded; the CPU it took (it
/// and its descendants: a recorder's process too).
fn cpu_of(command: &mut Command) -> f64 {
    let before = children_cpu_ns();
    let status = command
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("running {command:?}: {e} (are uftrace and gcc installed?)"));
    assert!(status.success(), "{command:?}: {status}");
    (children_cpu_ns() - before) as f64
}

/// What `uftrace record` cost on the standalone build of the same call
/// tree, measured twice.
struct UftraceFigures {
    /// One thread calling `run(UFTRACE_N)` back to back: added CPU per
    /// call, the program and uftrace's recorder together, and bytes per
    /// call on disk.
    single_cost: f64,
    single_bytes: f64,
    /// The service rate as fntrace's is measured: `THREADS` threads, each
    /// calling `run(SERVICE_N)` once a millisecond; the added CPU per call
    /// of the bursts of calls alone (the threads time them themselves), and
    /// the CPU of uftrace's recorder (the `uftrace` process: its whole CPU
    /// less the traced program's own) per call.
    service_bursts: f64,
    service_recorder: f64,
    service_calls: u64,
}

/// What the standalone program prints in its paced mode.
struct PacedRun {
    calls: u64,
    bursts_cpu_ns: u64,
    process_cpu_ns: u64,
    /// CPU of the whole command (the program, and uftrace when it records).
    command_cpu_ns: u64,
}

/// Runs `command` (the standalone program in paced mode, or uftrace
/// running it) in `dir` and reads the line the program prints.
fn paced_run(command: &mut Command, dir: &Path) -> PacedRun {
    let before = children_cpu_ns();
    let output = command
        .current_dir(dir)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e} (is uftrace installed?)"));
    let command_cpu_ns = children_cpu_ns() - before;
    assert!(output.status.success(), "{command:?}: {}", output.status);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("calls "))
        .unwrap_or_else(|| panic!("{command:?} printed no figures: {stdout:?}"));
    let field = |name: &str| -> u64 {
        let mut words = line.split_whitespace();
        words
            .position(|w| w == name)
            .and_then(|_| words.next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    assert_eq!(
        field("threads_at_exit"),
        1,
        "the program ended with threads of its own left: {line:?}"
    );
    PacedRun {
        calls: field("calls"),
        bursts_cpu_ns: field("bursts_cpu_ns"),
        process_cpu_ns: field("process_cpu_ns"),
        command_cpu_ns,
    }
}

/// Bytes of the `.dat` files in a uftrace data directory.
fn dat_bytes(data: &Path) -> u64 {
    std::fs::read_dir(data)
        .expect("uftrace data directory")
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            // perf-cpuN.dat holds uftrace's scheduling events, not calls.
            name.ends_with(".dat") && !name.starts_with("perf-")
        })
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum()
}

/// `uftrace record` on the standalone build, against the same build
/// without `-pg`: one thread back to back, then `THREADS` threads at the
/// service rate for `service_length`.
fn uftrace_figures(service_length: Duration) -> UftraceFigures {
    let scratch = TempDir::new("fntrace-bench-record-uftrace");
    let plain = build_standalone(scratch.path(), "workload_plain", &[]);
    let instrumented = build_standalone(scratch.path(), "workload_pg", &["-pg"]);
    let data = scratch.path().join("uftrace.data");
    let cpu_of = |command: &mut Command| cpu_of(command.current_dir(scratch.path()));
    let plain_cpu = cpu_of(Command::new(&plain).arg(UFTRACE_N.to_string()));
    let traced_cpu = cpu_of(
        Command::new("uftrace")
            .args(["record", "--no-pager", "-d"])
            .arg(&data)
            .arg(&instrumented)
            .arg(UFTRACE_N.to_string()),
    );
    let bytes = dat_bytes(&data);
    let calls = calls_of(UFTRACE_N as i64) + 1;
    assert!(
        bytes >= 32 * calls,
        "uftrace recorded {bytes} bytes for {calls} calls"
    );
    std::fs::remove_dir_all(&data).expect("removing uftrace's data");

    // The service rate. `--no-libcall`: uftrace would also hook the
    // program's calls into libc (clock_gettime, clock_nanosleep), which
    // fntrace does not trace; without them it records exactly the
    // functions fntrace does.
    let turns = service_length.as_millis() as u64;
    let paced_args = [
        SERVICE_N.to_string(),
        THREADS.to_string(),
        turns.to_string(),
        "1000".to_string(),
    ];
    let plain_run = paced_run(Command::new(&plain).args(&paced_args), scratch.path());
    let traced_run = paced_run(
        Command::new("uftrace")
            .args(["record", "--no-pager", "--no-libcall", "-d"])
            .arg(&data)
            .arg(&instrumented)
            .args(&paced_args),
        scratch.path(),
    );
    let service_calls = THREADS as u64 * turns * calls_of(SERVICE_N);
    assert_eq!(plain_run.calls, service_calls);
    assert_eq!(traced_run.calls, service_calls);
    // Every call recorded, none lost: an entry and an exit of 16 bytes
    // each for the calls of run's tree, main and each thread's start.
    assert_eq!(
        dat_bytes(&data),
        32 * (service_calls + THREADS as u64 + 1),
        "uftrace's recording of {service_calls} calls is not whole"
    );
    UftraceFigures {
        single_cost: (traced_cpu - plain_cpu) / calls as f64,
        single_bytes: bytes as f64 / calls as f64,
        service_bursts: (traced_run.bursts_cpu_ns as f64 - plain_run.bursts_cpu_ns as f64)
            / service_calls as f64,
        service_recorder: traced_run
            .command_cpu_ns
            .saturating_sub(traced_run.process_cpu_ns) as f64
            / service_calls as f64,
        service_calls,
    }
}

/// Calls per function in `uftrace report` of `dir` (fntrace's directories
/// and uftrace's read alike), names demangled (uftrace leaves Rust's v0
/// names mangled), without uftrace's kernel scheduling rows (`linux:`).
fn report_calls(dir: &Path) -> std::collections::BTreeMap<String, u64> {
    let output = Command::new("uftrace")
        .args(["report", "--no-pager", "-d"])
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("running uftrace report: {e} (is uftrace installed?)"));
    assert!(output.status.success(), "uftrace report -d {dir:?} failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let name = fields.get(5..)?.join(" ");
            let name = fntrace_format::demangle(name.split(".llvm.").next().unwrap_or(&name));
            Some((name, fields[4].parse::<u64>().ok()?))
        })
        .filter(|(name, _)| !name.starts_with("linux:"))
        .fold(Default::default(), |mut calls, (name, n)| {
            *calls.entry(name).or_default() += n;
            calls
        })
}

/// Address of each function symbol of `binary` (`nm`), by demangled name.
fn symbol_addresses(binary: &Path) -> std::collections::HashMap<String, u64> {
    let output = Command::new("nm")
        .arg("--defined-only")
        .arg(binary)
        .output()
        .unwrap_or_else(|e| panic!("running nm: {e}"));
    assert!(output.status.success(), "nm {binary:?} failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = u64::from_str_radix(fields.next()?, 16).ok()?;
            let kind = fields.next()?;
            let name = fields.next()?;
            let name = name.split(".llvm.").next().unwrap_or(name);
            matches!(kind, "t" | "T").then(|| (fntrace_format::demangle(name), address))
        })
        .collect()
}

/// The real program (`benches/realprog`), paced: plain, under
/// `fntrace record` and under `uftrace record`; prints CPU per call of each
/// recorder (program and recorder together, less the plain run) and
/// compares the call counts of every function.
fn real_program(scratch: &Path) {
    let (plain, instrumented) = common::build_realprog();
    let cli = common::fntrace_cli();
    let args = [REAL_DOCS.to_string(), REAL_DOCS_PER_MS.to_string()];
    let ours = scratch.join("real-fntrace.data");
    let theirs = scratch.join("real-uftrace.data");
    let plain_cpu = cpu_of(Command::new(&plain).args(&args));
    let fntrace_cpu = cpu_of(
        Command::new(&cli)
            .arg("record")
            .arg("-o")
            .arg(&ours)
            .arg("--")
            .arg(&instrumented)
            .args(&args),
    );
    let uftrace_cpu = cpu_of(
        Command::new("uftrace")
            .args(["record", "--no-pager", "-d"])
            .arg(&theirs)
            .arg(&instrumented)
            .args(&args),
    );
    // Functions folded into one (identical code, one address) are named
    // by either of their symbols: count by address.
    let addresses = symbol_addresses(&instrumented);
    let mut first_name = std::collections::HashMap::<u64, &String>::new();
    for (name, address) in &addresses {
        let named = first_name.entry(*address).or_insert(name);
        if name < *named {
            *named = name;
        }
    }
    let by_address = |calls: std::collections::BTreeMap<String, u64>| {
        calls.into_iter().fold(
            std::collections::BTreeMap::<String, u64>::new(),
            |mut folded, (name, n)| {
                let key = match addresses.get(&name) {
                    Some(address) => first_name[address].clone(),
                    None => name,
                };
                *folded.entry(key).or_default() += n;
                folded
            },
        )
    };
    let (ours_calls, theirs_calls) = (
        by_address(report_calls(&ours)),
        by_address(report_calls(&theirs)),
    );
    let calls: u64 = theirs_calls.values().sum();
    let differing: Vec<String> = theirs_calls
        .keys()
        .chain(ours_calls.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|name| ours_calls.get(*name) != theirs_calls.get(*name))
        .map(|name| {
            format!(
                "{name}: fntrace {}, uftrace {}",
                ours_calls.get(name).copied().unwrap_or(0),
                theirs_calls.get(name).copied().unwrap_or(0)
            )
        })
        .collect();
    let per_call = |cpu: f64| (cpu - plain_cpu) / calls as f64;
    println!(
        "\nreal program (serde_json + regex-automata, every crate -Zinstrument-mcount, 2 threads × {REAL_DOCS} documents, {REAL_DOCS_PER_MS} per ms): {calls} calls of {} functions recorded by uftrace",
        theirs_calls.len()
    );
    println!(
        "  call counts, fntrace against uftrace: {} of {} functions equal{}",
        theirs_calls.len() - differing.len().min(theirs_calls.len()),
        theirs_calls.len(),
        if differing.is_empty() {
            String::new()
        } else {
            format!("; differing: {}", differing.join("; "))
        }
    );
    println!(
        "  CPU per call, program + recorder, less the plain run ({:.1} ns per call): fntrace record {:.1} ns, uftrace record {:.1} ns ({:.1}×)",
        plain_cpu / calls as f64,
        per_call(fntrace_cpu),
        per_call(uftrace_cpu),
        per_call(uftrace_cpu) / per_call(fntrace_cpu)
    );
}

fn verdict(met: bool) -> &'static str {
    if met {
        "MET"
    } else {
        "MISS"
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn main() {
    let full_length = seconds("FNTRACE_BENCH_SECONDS", 10);
    let service_length = seconds("FNTRACE_BENCH_SERVICE_SECONDS", 60);
    fntrace::init().expect("fntrace::init");
    println!("fntrace recording benchmark");
    println!("machine: {}", machine_description());

    let per_call = |runs: &[ThreadRun]| {
        runs.iter().map(|r| r.cpu_ns).sum::<u64>() as f64
            / runs.iter().map(|r| r.calls).sum::<u64>() as f64
    };
    let untraced_per_call = per_call(&workers(Duration::from_secs(2), FULL_RATE_N, None));
    let paced = Some(Duration::from_millis(1));
    let untraced_paced_runs = workers(Duration::from_secs(5), SERVICE_N, paced);
    let untraced_paced = per_call(&untraced_paced_runs);
    let untraced_bursts = burst_per_call(&untraced_paced_runs);
    println!(
        "untraced: {untraced_per_call:.1} ns per call, {untraced_paced:.1} ns paced at the service rate ({untraced_bursts:.1} ns in the bursts alone, without the sleeps) (CPU, {THREADS} threads, sites NOPed)"
    );

    let scratch = TempDir::new("fntrace-bench-record");
    for (ready, what) in [
        (0, "no buffers ready (as before)"),
        (2, "2 buffers ready (default)"),
    ] {
        let [(cold, cold_faults), (warm, warm_faults)] = first_pass(scratch.path(), ready);
        println!(
            "first pass of a new thread over its buffer ({} calls), {what}: {cold:.1} ns per call, {cold_faults} minor faults; second pass: {warm:.1} ns, {warm_faults} faults (CPU, median of {FIRST_PASS_ROUNDS} threads)",
            calls_of(FIRST_PASS_N)
        );
    }
    let full = record(
        &scratch.path().join("full.data"),
        full_length,
        FULL_RATE_N,
        None,
        DEFAULT_RECORD_BUFFER_EVENTS,
    );
    let full_cost = full.cpu_per_call() - untraced_per_call;
    println!(
        "\nfull rate, {THREADS} threads, {full_length:?}: {} calls, {} events written, {} lost ({:.1} %)",
        full.calls(),
        full.report.events,
        full.report.lost,
        100.0 * full.report.lost as f64 / (2 * full.calls()) as f64
    );
    println!(
        "  traced threads: {full_cost:.1} ns per call over the whole run (target ≤ {TARGET_NS_PER_CALL} ns: {})",
        verdict(full_cost <= TARGET_NS_PER_CALL)
    );
    println!(
        "  minor page faults on the traced threads: {} ({:.2} per 1,000 calls)",
        full.minor_faults(),
        1e3 * full.minor_faults() as f64 / full.calls() as f64
    );
    println!(
        "  writer: {:.2} s CPU ({:.1} ns per event written); {:.1} bytes per call on disk ({:.0} MB)",
        full.writer_cpu_ns as f64 / 1e9,
        full.writer_cpu_ns as f64 / full.report.events.max(1) as f64,
        full.report.bytes as f64 / full.calls() as f64,
        full.report.bytes as f64 / 1e6
    );
    println!(
        "  peak RSS growth: {:.1} MiB (target ≤ {} MiB: {})",
        mib(full.rss_growth),
        mib(TARGET_RSS_GROWTH),
        verdict(full.rss_growth <= TARGET_RSS_GROWTH)
    );

    let service = record(
        &scratch.path().join("service.data"),
        service_length,
        SERVICE_N,
        paced,
        DEFAULT_RECORD_BUFFER_EVENTS,
    );
    let rate = service.calls() as f64 / service_length.as_secs_f64() / THREADS as f64;
    println!(
        "\nservice rate, {THREADS} threads × {:.0}k calls/s, {service_length:?}: {} calls, {} events written, {} lost (target 0: {})",
        rate / 1e3,
        service.calls(),
        service.report.events,
        service.report.lost,
        verdict(service.report.lost == 0)
    );
    println!(
        "  traced threads: {:.1} ns per call (CPU, less the untraced paced run); in the bursts alone: {:.1} ns; writer {:.2} s CPU ({:.1} ns per event written)",
        service.cpu_per_call() - untraced_paced,
        service.burst_cpu_per_call() - untraced_bursts,
        service.writer_cpu_ns as f64 / 1e9,
        service.writer_cpu_ns as f64 / service.report.events.max(1) as f64
    );
    println!(
        "  minor page faults on the traced threads: {}",
        service.minor_faults()
    );
    println!(
        "  peak RSS growth: {:.1} MiB (target ≤ {} MiB: {})",
        mib(service.rss_growth),
        mib(TARGET_RSS_GROWTH),
        verdict(service.rss_growth <= TARGET_RSS_GROWTH)
    );

    // The same with buffers that stay in the caches: what the memory
    // traffic of writing 16-byte events into a 4 MiB ring costs at this
    // rate (an upper bound on what smaller events could save).
    let small_length = seconds("FNTRACE_BENCH_SMALL_SECONDS", 10);
    if !small_length.is_zero() {
        let small = record(
            &scratch.path().join("small.data"),
            small_length,
            SERVICE_N,
            paced,
            SMALL_BUFFER_EVENTS,
        );
        println!(
            "\nservice rate, {small_length:?}, {SMALL_BUFFER_EVENTS}-event buffers ({} KiB, cache-sized): {} lost; traced threads: {:.1} ns per call; in the bursts alone: {:.1} ns",
            SMALL_BUFFER_EVENTS * 16 / 1024,
            small.report.lost,
            small.cpu_per_call() - untraced_paced,
            small.burst_cpu_per_call() - untraced_bursts,
        );
    }

    if std::env::var_os("FNTRACE_BENCH_NO_REAL").is_none() {
        real_program(scratch.path());
    }

    let uftrace = uftrace_figures(full_length);
    // Judged on the service rate, where every event is written (at full
    // rate most are dropped, which costs less than writing them), on the
    // bursts' CPU, for both tracers: the threads' whole CPU also holds
    // ≈ 20 µs of sleeping and waking per millisecond, which swings between
    // runs by more than tracing costs.
    let service_cost = service.burst_cpu_per_call() - untraced_bursts;
    let ratio = uftrace.service_bursts / service_cost;
    let writer_per_call = service.writer_cpu_ns as f64 / service.calls() as f64;
    let with_writer = service_cost + writer_per_call;
    let uftrace_with_recorder = uftrace.service_bursts + uftrace.service_recorder;
    println!(
        "\nuftrace record, one thread back to back ({} calls, gcc -O2 -pg): {:.1} ns per call CPU (program + recorder), {:.1} bytes per call",
        calls_of(UFTRACE_N as i64) + 1,
        uftrace.single_cost,
        uftrace.single_bytes
    );
    println!(
        "uftrace record --no-libcall, service rate ({THREADS} threads × 401 calls a millisecond, {full_length:?}, {} calls, none lost): traced threads, bursts' CPU: {:.1} ns per call; uftrace's recorder: {:.1} ns per call",
        uftrace.service_calls, uftrace.service_bursts, uftrace.service_recorder
    );
    println!(
        "  uftrace / fntrace, traced threads (bursts' CPU, service rate): {:.1} / {service_cost:.1} ns = {ratio:.1}× (target ≥ {TARGET_UFTRACE_RATIO}×: {})",
        uftrace.service_bursts,
        verdict(ratio >= TARGET_UFTRACE_RATIO)
    );
    println!(
        "  uftrace / fntrace, traced threads + recorder or writer (service rate): {uftrace_with_recorder:.1} / {with_writer:.1} ns = {:.1}× (fntrace's writer {writer_per_call:.1} ns per call)",
        uftrace_with_recorder / with_writer
    );
    println!(
        "  uftrace back to back (program + recorder) / fntrace's full-rate traced threads: {:.1}×",
        uftrace.single_cost / full_cost
    );
}
