//! The chaos benchmark's machinery, shared by
//! `benches/chaos.rs` (60 s) and `tests/programs/chaos.rs` (a few seconds): a real
//! C service (`tests/c/chaos_service.c`, `gcc -pg`, linked with
//! `libfntrace.a`) runs everything at once (plugins, `-pg -mfentry` and
//! `-pg`, loaded and unloaded; short-lived threads; forks; SIGUSR1 with a
//! traced handler; `function` toggled through the C API) while a driver
//! thread here sends it live-control requests over its socket (`graph`,
//! `function` and `profile` toggled, recordings started and stopped, flight
//! recorders started, snapshotted and stopped, dumps, reports, `status`,
//! `profile`, filters) and scrapes its metrics endpoint. One service runs
//! under each patching protocol (`FNTRACE_PATCH=breakpoint` and `stop`),
//! both at once.
//!
//! Counted per service: every operation by kind, every failed one with its
//! message (a control request answered with an error, a recording,
//! snapshot or dump that fntrace's reader cannot read, a wrong result or a
//! failed call in the service, a line fntrace printed that is not the known
//! note), crashes (the service's or a forked child's), RSS (`VmRSS` at
//! start, after quiescing, `VmHWM`: the peak). Then, quiescent (the chaos
//! threads joined), with the filter `chaos_*,plug_*`, a lossless recording
//! and the `profile` tracer watch exactly `quiet_calls` rounds: the counts
//! of the profile snapshot, of fntrace's reader and of `uftrace report`
//! must all equal the expected ones.
//!
//! Every file goes under one temporary directory, removed at the end;
//! recordings, snapshots and dumps are removed as soon as they are read.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use crate::native::Scratch;
use crate::native::{build_c_program, repo};

/// The filter of the quiescent check: the service's and the plugins'
/// functions.
const QUIET_FILTER: &str = "chaos_*,plug_*";

/// Filters the driver sets during the chaos (each for what is enabled
/// next).
const FILTERS: [&str; 4] = [
    "*",
    "chaos_*,plug_*",
    "chaos_*,!chaos_leaf",
    "plug_*,chaos_work",
];

/// How long a reply or a line of the service may take before it counts as
/// hung.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// What a run does.
#[derive(Clone, Debug)]
pub struct Config {
    /// Seconds of chaos.
    pub seconds: f64,
    /// Rounds of the quiescent check (see [`expected_quiet_counts`]).
    pub quiet_calls: u64,
    /// Seed of the driver's choices (each protocol adds its own).
    pub seed: u64,
    /// Whether the `function` tracer is toggled (by the driver, and by the
    /// service's C API thread, which toggles `profile` otherwise). Nothing
    /// can read its events in a C service (no C function or control
    /// request drains them), so its rings are never drained: each live
    /// thread's fills up to 24 MiB and an exited thread's pages are never
    /// given back. False measures the rest's memory alone (see
    /// docs/journal/chaos-2026-11-26.md).
    pub function: bool,
}

/// `FNTRACE_CHAOS_FUNCTION`: `1` toggles the `function` tracer, `0`
/// leaves it out ([`Config::function`]); `default` if unset.
pub fn function_from_env(default: bool) -> bool {
    std::env::var("FNTRACE_CHAOS_FUNCTION").map_or(default, |v| v == "1")
}

/// What fntrace prints when a forked child's `_exit` gave up waiting for
/// its recording's last drain: a known bug (docs/journal/chaos-2026-11-26.md):
/// the child's writer blocks for ever in `dl_iterate_phdr` on glibc's
/// loader lock, taken in the parent by another thread (a `dlopen`, or
/// fntrace's own scan) when the fork happened.
pub const KNOWN_FORK_DRAIN: &str = "_exit: the recording's last drain did not finish in time";

/// The service and its two plugins, built.
pub struct Built {
    service: PathBuf,
    plugins: [PathBuf; 2],
}

/// MiB of the section [`build`] adds to the service's file.
pub const BALLAST_MIB: u64 = 64;

/// Builds the service (`gcc -pg`, PIE, linked with `libfntrace.a`) and the
/// plugins (`plug_a_`: `-pg -mfentry`; `plug_b_`: `-pg`) into `dir`. The
/// service's file gets a section of [`BALLAST_MIB`] MiB that is never
/// loaded, as a service's debug information is not: fntrace must not read
/// it (it read every object's file whole each time it rebuilt its symbol
/// index).
pub fn build(dir: &Path) -> Built {
    let service = dir.join("chaos_service");
    let plain = dir.join("chaos_service.plain");
    build_c_program(
        &repo().join("tests/c/chaos_service.c"),
        &["-pg", "-pthread"],
        &plain,
    );
    let ballast = dir.join("ballast");
    std::fs::File::create(&ballast)
        .and_then(|file| file.set_len(BALLAST_MIB << 20))
        .unwrap();
    let output = Command::new("objcopy")
        .arg(format!(
            "--add-section=.chaos_ballast={}",
            ballast.display()
        ))
        .arg(&plain)
        .arg(&service)
        .output()
        .expect("cannot run objcopy");
    assert!(
        output.status.success(),
        "objcopy: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let _ = std::fs::remove_file(&ballast);
    let _ = std::fs::remove_file(&plain);
    let plugin = |prefix: &str, flags: &[&str]| {
        let out = dir.join(format!("lib{prefix}plugin.so"));
        let output = Command::new("gcc")
            .args(["-O2", "-fPIC", "-shared"])
            .args(flags)
            .arg(format!("-DPREFIX={prefix}"))
            .arg(repo().join("tests/c/chaos_plugin.c"))
            .arg("-o")
            .arg(&out)
            .output()
            .expect("cannot run gcc");
        assert!(
            output.status.success(),
            "gcc {prefix} plugin: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        out
    };
    let plugins = [
        plugin("plug_a_", &["-pg", "-mfentry"]),
        plugin("plug_b_", &["-pg"]),
    ];
    Built { service, plugins }
}

/// Calls per function in `quiet_calls` rounds of the quiescent check: 2
/// threads each call `chaos_work(5)` (5 × `chaos_mid`, 4 × `chaos_leaf`
/// each) `quiet_calls` times, then each plugin's `run(1)` (1 `mid`, 4
/// `leaf`) is called `quiet_calls` times.
pub fn expected_quiet_counts(quiet_calls: u64) -> BTreeMap<String, u64> {
    let k = quiet_calls;
    let mut counts = BTreeMap::new();
    counts.insert("chaos_work".to_string(), 2 * k);
    counts.insert("chaos_mid".to_string(), 10 * k);
    counts.insert("chaos_leaf".to_string(), 40 * k);
    for plugin in ["plug_a_", "plug_b_"] {
        counts.insert(format!("{plugin}run"), k);
        counts.insert(format!("{plugin}mid"), k);
        counts.insert(format!("{plugin}leaf"), 4 * k);
    }
    counts
}

/// What one service under one protocol went through.
#[derive(Debug, Default)]
pub struct Report {
    /// `breakpoint` or `stop`.
    pub protocol: String,
    /// Seconds of chaos, measured.
    pub seconds: f64,
    /// Operations of the driver, by kind (failed ones included).
    pub ops: BTreeMap<&'static str, u64>,
    /// The service's own counters (`quiet ...`), by name.
    pub program: BTreeMap<String, u64>,
    /// Events written and lost by the drop-mode recordings, in total.
    pub recorded_events: u64,
    /// See `recorded_events`.
    pub recorded_lost: u64,
    /// Flight snapshots written by triggers.
    pub trigger_snapshots: u64,
    /// Failed operations, each with its message.
    pub failures: Vec<String>,
    /// Failures of a known, reported bug ([`KNOWN_FORK_DRAIN`]), by text.
    pub known: BTreeMap<String, u64>,
    /// Lines fntrace printed that are explained (a thread being created
    /// blocks SIGTRAP: that operation patched stopping the world), by text.
    pub notes: BTreeMap<String, u64>,
    /// How the service or a forked child crashed, if it did.
    pub crashes: Vec<String>,
    /// Whether the service hung (a request or a line of its output did
    /// not come within a minute, and it did not exit when told), and then
    /// its threads' stacks, taken before it was killed.
    pub hung: Option<String>,
    /// `VmRSS` when the service was ready (fntrace initialised), KiB.
    pub rss_start_kib: u64,
    /// `VmRSS` once quiescent (chaos threads joined, tracers off), KiB.
    pub rss_quiet_kib: u64,
    /// `VmHWM` at the end of the quiescent check: the peak, KiB.
    pub rss_peak_kib: u64,
    /// The largest `VmRSS` sampled every 50 ms, KiB.
    pub rss_sampled_max_kib: u64,
    /// Per function of the quiescent check: expected, then the counts of
    /// the profile snapshot, fntrace's reader (entries) and `uftrace
    /// report` (absent: 0).
    pub quiet: BTreeMap<String, [u64; 4]>,
    /// Functions counted in the quiescent check that were not expected.
    pub quiet_extra: Vec<String>,
}

impl Report {
    /// Peak RSS growth over the start, KiB.
    pub fn rss_growth_kib(&self) -> u64 {
        self.rss_peak_kib
            .max(self.rss_sampled_max_kib)
            .saturating_sub(self.rss_start_kib)
    }

    /// Whether every quiescent count is exact.
    pub fn quiet_exact(&self) -> bool {
        !self.quiet.is_empty()
            && self.quiet_extra.is_empty()
            && self
                .quiet
                .values()
                .all(|[expected, profile, reader, uftrace]| {
                    [profile, reader, uftrace].iter().all(|n| **n == *expected)
                })
    }

    /// Everything the benchmark asks of the run: no crash, no failed operation,
    /// peak RSS growth ≤ 64 MiB, exact quiescent counts. The reasons it
    /// falls short.
    pub fn shortfalls(&self) -> Vec<String> {
        let mut short = Vec::new();
        if !self.crashes.is_empty() {
            short.push(format!("{}: crashes: {:?}", self.protocol, self.crashes));
        }
        if self.hung.is_some() {
            short.push(format!("{}: the service hung (killed)", self.protocol));
        }
        if !self.failures.is_empty() {
            short.push(format!(
                "{}: {} failed operations: {:#?}",
                self.protocol,
                self.failures.len(),
                self.failures
            ));
        }
        if self.rss_growth_kib() > 64 * 1024 {
            short.push(format!(
                "{}: peak RSS growth {} KiB > 64 MiB",
                self.protocol,
                self.rss_growth_kib()
            ));
        }
        if !self.quiet_exact() {
            short.push(format!(
                "{}: quiescent counts not exact: {:?}, extra {:?}",
                self.protocol, self.quiet, self.quiet_extra
            ));
        }
        short
    }
}

/// Runs the chaos for `config.seconds` under both protocols at once (one
/// service each), then the quiescent check; the two reports.
pub fn run_both(built: &Built, config: &Config, scratch: &Path) -> Vec<Report> {
    std::thread::scope(|scope| {
        let runs: Vec<_> = ["breakpoint", "stop"]
            .into_iter()
            .enumerate()
            .map(|(index, protocol)| {
                let work = scratch.join(protocol);
                std::fs::create_dir_all(&work).unwrap();
                let mut config = config.clone();
                config.seed = config.seed.wrapping_add(index as u64 * 0x9e37_79b9);
                scope.spawn(move || run(built, protocol, &config, &work))
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

/// The service, started.
struct Service {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<String>>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl Service {
    fn start(
        built: &Built,
        protocol: &str,
        socket: &Path,
        metrics_port: u16,
        function: bool,
    ) -> Service {
        let mut command = Command::new(&built.service);
        command
            .args(&built.plugins)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("FNTRACE") {
                command.env_remove(name);
            }
        }
        command
            .env("FNTRACE_PATCH", protocol)
            .env("FNTRACE_CONTROL", socket)
            .env("FNTRACE_METRICS", format!("127.0.0.1:{metrics_port}"));
        if !function {
            command.env("CHAOS_NO_FUNCTION", "1");
        }
        let mut child = command.spawn().expect("starting the chaos service");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stderr_reader = {
            let stderr = stderr.clone();
            let pipe = child.stderr.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    stderr.lock().unwrap().push(line);
                }
            })
        };
        Service {
            child,
            stdin,
            lines,
            stderr,
            stderr_reader: Some(stderr_reader),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `command`; the line the service answers, which must start
    /// with `answer`.
    fn say(&mut self, command: &str, answer: &str) -> Result<String, String> {
        writeln!(self.stdin, "{command}").map_err(|e| format!("{command}: the service: {e}"))?;
        self.expect(answer)
            .map_err(|e| format!("{command}: the service: {e}"))
    }

    /// The next line of the service's output, which must start with
    /// `answer`.
    fn expect(&mut self, answer: &str) -> Result<String, String> {
        match self.lines.recv_timeout(REPLY_TIMEOUT) {
            Ok(line) if line.starts_with(answer) => Ok(line),
            Ok(line) => Err(format!("answered {line:?}, not {answer:?}")),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("no {answer:?} within {REPLY_TIMEOUT:?}"))
            }
            Err(RecvTimeoutError::Disconnected) => Err("its output ended".to_string()),
        }
    }

    /// Whether it has exited (then how).
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Ends it (`exit`, or a kill if it does not go); its exit status,
    /// whether it had to be killed, and its standard error.
    fn finish(mut self) -> (std::process::ExitStatus, bool, Vec<String>) {
        let _ = writeln!(self.stdin, "exit");
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let mut killed = false;
        let status = loop {
            if let Some(status) = self.exited() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                killed = true;
                break self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        if let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        let stderr = std::mem::take(&mut *self.stderr.lock().unwrap());
        (status, killed, stderr)
    }
}

/// What each thread of the live process `pid` is doing: its name, state,
/// kernel wait channel and system call (`/proc/PID/task/TID/syscall`:
/// number, arguments, stack pointer, program counter) and kernel stack,
/// which never hang; then every thread's stack by gdb, if there is one,
/// given 60 s (interrupted then, so that what it printed is kept).
fn stacks(pid: u32) -> String {
    let mut text = String::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|entries| {
            entries
                .filter_map(|e| Some(e.ok()?.path()))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for task in tasks {
        let read = |name: &str| {
            std::fs::read_to_string(task.join(name))
                .unwrap_or_default()
                .trim()
                .replace('\n', " | ")
        };
        let stat = read("stat");
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        let _ = writeln!(
            text,
            "task {} {:?} state {state} wchan {} syscall {} kernel stack {}",
            task.file_name().unwrap_or_default().to_string_lossy(),
            read("comm"),
            read("wchan"),
            read("syscall"),
            read("stack"),
        );
    }
    let output = Command::new("timeout")
        .args([
            "-k",
            "10",
            "-s",
            "INT",
            "60",
            "gdb",
            "-p",
            &pid.to_string(),
            "-batch",
        ])
        .args(["-ex", "set pagination off", "-ex", "thread apply all bt 40"])
        .output();
    match output {
        Ok(output) => text.extend(
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter(|line| line.starts_with('#') || line.starts_with("Thread "))
                .map(|line| format!("{line}\n")),
        ),
        Err(error) => text.push_str(&format!("no stacks: cannot run gdb: {error}\n")),
    }
    text
}

/// `VmRSS` and `VmHWM` of `pid`, KiB.
fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status.lines().find_map(|line| {
            line.strip_prefix(name)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Samples `VmRSS` of a process every 50 ms on a thread of its own, until
/// stopped or dropped.
struct Sampler {
    sampling: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let sampling = Arc::new(AtomicBool::new(true));
        let thread = {
            let sampling = sampling.clone();
            std::thread::spawn(move || {
                let mut max = 0;
                while sampling.load(Ordering::Relaxed) {
                    if let Some((rss, _)) = rss_kib(pid) {
                        max = max.max(rss);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                max
            })
        };
        Sampler {
            sampling,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the largest `VmRSS` seen, KiB.
    fn stop(mut self) -> u64 {
        self.sampling.store(false, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap_or(0))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.sampling.store(false, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Resets `VmHWM` of `pid` to its current RSS (proc(5), `clear_refs`
/// value 5): the peak measured from now, not fntrace's start-up (reading
/// the executable's symbols maps it whole for a moment).
fn reset_peak(pid: u32) -> Result<(), String> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .map_err(|e| format!("resetting VmHWM of {pid}: {e}"))
}

/// Sends `request` on a connection of its own; the reply if it starts with
/// `ok`, else the error.
fn ask(socket: &Path, request: &str) -> Result<String, String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(format!("{request}\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .map_err(|e| format!("read: {e}"))?;
    match reply.starts_with("ok") {
        true => Ok(reply),
        false => Err(reply.trim_end().to_string()),
    }
}

/// `GET /metrics` on `port`; the body's size if the status is 200.
fn scrape(port: u16) -> Result<usize, String> {
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .map_err(|e| format!("read: {e}"))?;
    let status = reply.lines().next().unwrap_or_default();
    match status.split_whitespace().nth(1) {
        Some("200") => Ok(reply.len()),
        _ => Err(format!("status line {status:?}")),
    }
}

/// The value of `key: value` in a reply.
fn field(reply: &str, key: &str) -> Option<u64> {
    reply.lines().find_map(|line| {
        line.strip_prefix(key)?
            .strip_prefix(": ")?
            .trim()
            .parse()
            .ok()
    })
}

/// A free TCP port on the loopback address (bound and let go: the service
/// binds it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Who holds the graph tracer (what `enable graph`, `record` and `flight
/// start` share: one at a time).
enum Slot {
    Idle,
    Graph,
    Recording(Instant),
    /// Until when, the directory of its trigger snapshots, and whether a
    /// snapshot was taken (one is before it stops, however slowly the
    /// requests came back: CI once saw a run take none).
    Flight(Instant, PathBuf, bool),
}

/// The driver of one service.
struct Driver<'a> {
    /// Whether `function` is toggled.
    function: bool,
    /// When the graph tracer's events in memory were last dumped.
    last_dump: Instant,
    socket: PathBuf,
    work: &'a Path,
    metrics_port: u16,
    report: Report,
    rng: u64,
    next_dir: u64,
    function_on: bool,
    profile_on: bool,
    /// Steps made while the graph tracer was idle, see
    /// [`Driver::first_steps_then_random`].
    idle_steps: u64,
    /// Steps of [`Driver::other_step`] made.
    other_steps: u64,
    /// Directories read, to be removed once no forked child can still be
    /// writing to them (see [`Driver::read_and_remove`]).
    to_remove: Vec<(Instant, PathBuf)>,
}

impl Driver<'_> {
    /// The graph tracer's first owners are a flight recorder (its
    /// snapshots follow), a recording and `enable graph`, in that order:
    /// a short run on a loaded machine (the test's 8 s) makes every kind
    /// of request the test checks for; then random choices below `below`.
    fn first_steps_then_random(&mut self, below: u64) -> u64 {
        self.idle_steps += 1;
        match self.idle_steps {
            1 => 2,
            2 => 1,
            3 => 0,
            _ => self.random(below),
        }
    }

    fn random(&mut self, below: u64) -> u64 {
        // xorshift64: repeatable choices from the seed.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % below
    }

    /// A new directory name for a recording, snapshot or dump.
    fn fresh_dir(&mut self, what: &str) -> PathBuf {
        self.next_dir += 1;
        self.work.join(format!("{what}-{}", self.next_dir))
    }

    fn fail(&mut self, what: String) {
        self.report.failures.push(what);
    }

    /// Sends `request`, counted as `kind`; the reply, or `None` (the
    /// failure counted).
    fn request(&mut self, kind: &'static str, request: &str) -> Option<String> {
        *self.report.ops.entry(kind).or_default() += 1;
        match ask(&self.socket, request) {
            Ok(reply) => Some(reply),
            Err(error) => {
                self.fail(format!("{request}: {error}"));
                None
            }
        }
    }

    /// Reads the uftrace directory `dir` with fntrace's reader (it must
    /// read), then has it removed 5 s later: a child forked during a
    /// recording adds its part when it exits, after `stop` perhaps (and
    /// gives up 2 s after its `_exit`); removed earlier, the child's
    /// writer fails. The trace's events.
    fn read_and_remove(&mut self, what: &str, dir: &Path) -> Option<u64> {
        let read = fntrace::export::read_uftrace_dir(dir);
        self.to_remove.push((Instant::now(), dir.to_path_buf()));
        self.remove_old(Duration::from_secs(5));
        match read {
            Ok(trace) => Some(trace.threads.iter().map(|t| t.events.len() as u64).sum()),
            Err(error) => {
                self.fail(format!("reading the {what} {}: {error}", dir.display()));
                None
            }
        }
    }

    /// One operation on whoever holds the graph tracer.
    fn slot_step(&mut self, slot: Slot) -> Slot {
        let now = Instant::now();
        match slot {
            Slot::Idle => match self.first_steps_then_random(4) {
                0 => match self.request("enable graph", "enable graph") {
                    Some(_) => Slot::Graph,
                    None => Slot::Idle,
                },
                1 => {
                    let dir = self.fresh_dir("rec");
                    let until = now + Duration::from_millis(100 + self.random(300));
                    match self.request("record", &format!("record {}", dir.display())) {
                        Some(_) => Slot::Recording(until),
                        None => Slot::Idle,
                    }
                }
                2 => {
                    let dir = self.fresh_dir("flight");
                    let until = now + Duration::from_millis(200 + self.random(600));
                    let started = self.request(
                        "flight start",
                        &format!("flight start --budget 2M {}", dir.display()),
                    );
                    match started {
                        Some(_) => {
                            self.request("flight trigger", "flight trigger chaos_slow>2ms");
                            Slot::Flight(until, dir, false)
                        }
                        None => Slot::Idle,
                    }
                }
                _ => {
                    self.dump();
                    Slot::Idle
                }
            },
            // Events in memory are kept until read: dumped as often as a
            // service's operator would drain them (as the recorder does).
            Slot::Graph if now.duration_since(self.last_dump) > Duration::from_millis(200) => {
                self.dump();
                Slot::Graph
            }
            Slot::Graph => match self.random(4) {
                0 | 1 => match self.request("disable graph", "disable graph") {
                    Some(_) => Slot::Idle,
                    None => Slot::Graph,
                },
                2 => {
                    self.request("report", "report");
                    Slot::Graph
                }
                _ => {
                    self.dump();
                    Slot::Graph
                }
            },
            Slot::Recording(until) if now >= until => {
                self.stop_recording();
                Slot::Idle
            }
            Slot::Flight(until, dir, true) if now >= until => {
                self.stop_flight(&dir);
                Slot::Idle
            }
            Slot::Flight(until, flight_dir, _) => {
                let dir = self.fresh_dir("snapshot");
                if self
                    .request("snapshot", &format!("snapshot {}", dir.display()))
                    .is_some()
                {
                    self.read_and_remove("snapshot", &dir);
                }
                Slot::Flight(until, flight_dir, true)
            }
            recording => recording,
        }
    }

    /// Removes the directories read more than `age` ago.
    fn remove_old(&mut self, age: Duration) {
        self.to_remove.retain(|(read, dir)| {
            let old = read.elapsed() >= age;
            if old {
                let _ = std::fs::remove_dir_all(dir);
            }
            !old
        });
    }

    fn dump(&mut self) {
        self.last_dump = Instant::now();
        let dir = self.fresh_dir("dump");
        if self
            .request("dump", &format!("dump {}", dir.display()))
            .is_some()
        {
            self.read_and_remove("dump", &dir);
        }
    }

    fn stop_recording(&mut self) {
        if let Some(reply) = self.request("stop", "stop") {
            self.report.recorded_events += field(&reply, "events").unwrap_or(0);
            self.report.recorded_lost += field(&reply, "lost").unwrap_or(0);
            let dir = reply
                .lines()
                .next()
                .and_then(|line| line.strip_prefix("ok stopped recording to "))
                .map(PathBuf::from);
            match dir {
                Some(dir) => {
                    self.read_and_remove("recording", &dir);
                }
                None => self.fail(format!("stop: no directory in {reply:?}")),
            }
        }
    }

    /// `flight stop`, then reads and removes the trigger snapshots in `dir`.
    fn stop_flight(&mut self, dir: &Path) {
        if let Some(reply) = self.request("flight stop", "flight stop") {
            self.report.trigger_snapshots += field(&reply, "trigger snapshots").unwrap_or(0);
        }
        let snapshots: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|entries| entries.filter_map(|e| Some(e.ok()?.path())).collect())
            .unwrap_or_default();
        for snapshot in snapshots {
            self.read_and_remove("trigger snapshot", &snapshot);
        }
        self.to_remove.push((Instant::now(), dir.to_path_buf()));
    }

    /// One operation besides the graph tracer's.
    fn other_step(&mut self) {
        // The first one turns `profile` on (see `first_steps_then_random`).
        let pick = if self.other_steps == 0 {
            5
        } else {
            self.random(20)
        };
        self.other_steps += 1;
        match pick {
            0..=4 if self.function => {
                let on = !self.function_on;
                let verb = if on { "enable" } else { "disable" };
                let kind = if on {
                    "enable function"
                } else {
                    "disable function"
                };
                if self.request(kind, &format!("{verb} function")).is_some() {
                    self.function_on = on;
                }
            }
            0..=7 => {
                let on = !self.profile_on;
                let verb = if on { "enable" } else { "disable" };
                let kind = if on {
                    "enable profile"
                } else {
                    "disable profile"
                };
                if self.request(kind, &format!("{verb} profile")).is_some() {
                    self.profile_on = on;
                }
            }
            8..=10 => {
                if let Some(reply) = self.request("profile", "profile") {
                    // The open calls' lines come first (see live-control.md).
                    let text: String = reply
                        .lines()
                        .skip_while(|line| !line.starts_with("fntrace-profile "))
                        .take_while(|line| !line.is_empty())
                        .map(|line| format!("{line}\n"))
                        .collect();
                    if let Err(error) = fntrace::analysis::ProfileSnapshot::from_text(&text) {
                        self.fail(format!("profile: the snapshot does not read back: {error}"));
                    }
                }
            }
            11 => {
                self.request("profile reset", "profile reset");
            }
            12..=14 => {
                if let Some(reply) = self.request("status", "status") {
                    if !reply.starts_with("ok pid ") {
                        self.fail(format!("status: {reply:?}"));
                    }
                }
            }
            15..=17 => {
                *self.report.ops.entry("GET /metrics").or_default() += 1;
                if let Err(error) = scrape(self.metrics_port) {
                    self.fail(format!("GET /metrics: {error}"));
                }
            }
            _ => {
                // `--pending`: the plugin's functions may be unloaded now,
                // and come back with its next load.
                let filter = FILTERS[self.random(FILTERS.len() as u64) as usize];
                self.request("filter", &format!("filter --pending {filter}"));
            }
        }
    }

    /// Ends what runs: recording, flight recorder, tracers.
    fn settle(&mut self, slot: Slot) {
        match slot {
            Slot::Recording(_) => self.stop_recording(),
            Slot::Flight(_, dir, _) => self.stop_flight(&dir),
            Slot::Graph => {
                self.request("disable graph", "disable graph");
            }
            Slot::Idle => {}
        }
        if self.function {
            self.request("disable function", "disable function");
        }
        self.request("disable profile", "disable profile");
        self.function_on = false;
        self.profile_on = false;
        // Events left in memory by `enable graph` are taken now, not by
        // the quiescent recording.
        self.dump();
    }
}

/// Counts per function of the profile tracer's reply.
fn profile_counts(reply: &str) -> Result<BTreeMap<String, u64>, String> {
    let text: String = reply
        .lines()
        .skip(1)
        .take_while(|line| !line.is_empty())
        .map(|line| format!("{line}\n"))
        .collect();
    let snapshot =
        fntrace::analysis::ProfileSnapshot::from_text(&text).map_err(|e| e.to_string())?;
    Ok(snapshot
        .functions
        .iter()
        .filter(|f| f.durations.count() > 0)
        .map(|f| (f.name.clone(), f.durations.count()))
        .collect())
}

/// Calls per function in `uftrace report` of `dir`.
fn uftrace_counts(dir: &Path) -> Result<BTreeMap<String, u64>, String> {
    let output = Command::new("uftrace")
        .args(["report", "--no-pager", "-d"])
        .arg(dir)
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| format!("cannot run uftrace: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "uftrace report: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    // Rows: total and self (a value and a unit each), calls, function.
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 6 {
                return None;
            }
            Some((fields[5..].join(" "), fields[4].parse().ok()?))
        })
        .collect())
}

/// Starts the service (no chaos), loads its plugins, then has fntrace
/// rebuild its symbol index (`enable graph` after the `dlopen`s) and
/// `disable graph`: the growth of the service's peak RSS over that, KiB.
pub fn rebuild_peak_growth_kib(built: &Built, work: &Path) -> Result<u64, String> {
    let socket = work.join("rebuild.sock");
    let mut service = Service::start(built, "breakpoint", &socket, free_port(), false);
    let pid = service.pid();
    let growth = (|| {
        service.expect("ready")?;
        reset_peak(pid)?;
        let (start, _) = rss_kib(pid).ok_or("no /proc/PID/status")?;
        service.say("load", "loaded")?;
        ask(&socket, "enable graph")?;
        ask(&socket, "disable graph")?;
        let (_, peak) = rss_kib(pid).ok_or("no /proc/PID/status")?;
        Ok(peak.saturating_sub(start))
    })();
    let (status, _, stderr) = service.finish();
    if !status.success() {
        return Err(format!("the service: {status}: {stderr:?}"));
    }
    growth
}

/// Runs one service under `protocol`: chaos for `config.seconds`, then the
/// quiescent check. Files go under `work`.
pub fn run(built: &Built, protocol: &str, config: &Config, work: &Path) -> Report {
    let socket = work.join("control.sock");
    let metrics_port = free_port();
    let mut service = Service::start(built, protocol, &socket, metrics_port, config.function);
    let mut driver = Driver {
        function: config.function,
        last_dump: Instant::now(),
        socket,
        work,
        metrics_port,
        report: Report {
            protocol: protocol.to_string(),
            ..Report::default()
        },
        rng: config.seed | 1,
        next_dir: 0,
        function_on: false,
        profile_on: false,
        idle_steps: 0,
        other_steps: 0,
        to_remove: Vec::new(),
    };
    let pid = service.pid();
    let result = chaos_and_check(&mut service, &mut driver, config, pid);
    let mut stacks_if_hung = None;
    if let Err(error) = result {
        if service.exited().is_none() && error.contains("within") {
            stacks_if_hung = Some(stacks(pid));
        }
        driver.fail(error);
    }
    let (status, killed, stderr) = service.finish();
    if killed {
        driver.report.hung = Some(stacks_if_hung.unwrap_or_default());
    }
    // The service and its children are gone.
    driver.remove_old(Duration::ZERO);
    let report = &mut driver.report;
    use std::os::unix::process::ExitStatusExt;
    if killed {
        // Killed here: a hang, not a crash.
    } else if let Some(signal) = status.signal() {
        report
            .crashes
            .push(format!("the service died of signal {signal} ({status})"));
    } else if !status.success() {
        report
            .failures
            .push(format!("the service exited with {status}"));
    }
    for line in stderr {
        if line.starts_with("chaos: ") && line.contains("crashed: signal") {
            report.crashes.push(line);
            continue;
        }
        // A thread being created has every signal blocked for a moment:
        // an operation under the breakpoint protocol then patches stopping
        // the world, and says so (as tests/dlclose_toggle.rs accepts).
        if line.starts_with("fntrace:") && line.contains(KNOWN_FORK_DRAIN) {
            *report.known.entry(line).or_default() += 1;
        } else if line.starts_with("fntrace:") && line.contains("blocks SIGTRAP") {
            let note = line
                .split_once(" (")
                .map_or(line.as_str(), |(head, _)| head)
                .to_string();
            *report.notes.entry(note).or_default() += 1;
        } else {
            report.failures.push(format!("stderr: {line}"));
        }
    }
    driver.report
}

/// The chaos, then the quiescent check; an error ends the run early (it is
/// counted as a failure).
fn chaos_and_check(
    service: &mut Service,
    driver: &mut Driver,
    config: &Config,
    pid: u32,
) -> Result<(), String> {
    service.expect("ready")?;
    reset_peak(pid)?;
    let (rss, _) = rss_kib(pid).ok_or("no /proc/PID/status")?;
    driver.report.rss_start_kib = rss;
    let sampler = Sampler::start(pid);
    service.say("start", "started")?;
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(config.seconds);
    let mut slot = Slot::Idle;
    let mut crashed = None;
    while Instant::now() < end {
        if let Some(status) = service.exited() {
            crashed = Some(status);
            break;
        }
        slot = if driver.random(2) == 0 {
            driver.slot_step(slot)
        } else {
            driver.other_step();
            slot
        };
        std::thread::sleep(Duration::from_millis(1));
    }
    driver.report.seconds = started.elapsed().as_secs_f64();
    if let Some(status) = crashed {
        driver.report.rss_sampled_max_kib = sampler.stop();
        return Err(format!("the service ended during the chaos: {status}"));
    }
    let quiet = service.say("quiesce", "quiet ")?;
    for pair in quiet.split_whitespace().skip(1) {
        if let Some((name, value)) = pair.split_once('=') {
            let value = value.parse().unwrap_or(u64::MAX);
            driver.report.program.insert(name.to_string(), value);
        }
    }
    driver.settle(slot);
    if let Some((rss, _)) = rss_kib(pid) {
        driver.report.rss_quiet_kib = rss;
    }

    // Quiescent: exact counts.
    let k = config.quiet_calls;
    let recording = driver.fresh_dir("quiet");
    driver
        // `--pending`: the plugin is loaded after it.
        .request("filter", &format!("filter --pending {QUIET_FILTER}"))
        .ok_or("quiescent filter refused")?;
    service.say("load", "loaded")?;
    driver
        .request("profile reset", "profile reset")
        .ok_or("quiescent profile reset refused")?;
    driver
        .request("enable profile", "enable profile")
        .ok_or("quiescent enable profile refused")?;
    driver
        .request(
            "record",
            &format!("record --mode=lossless {}", recording.display()),
        )
        .ok_or("quiescent record refused")?;
    service.say(&format!("calls {k}"), "called")?;
    let stopped = driver
        .request("stop", "stop")
        .ok_or("quiescent stop refused")?;
    driver
        .request("disable profile", "disable profile")
        .ok_or("quiescent disable profile refused")?;
    let profile = driver
        .request("profile", "profile")
        .ok_or("quiescent profile refused")?;
    let expected = expected_quiet_counts(k);
    let expected_events: u64 = 2 * expected.values().sum::<u64>();
    if field(&stopped, "events") != Some(expected_events) || field(&stopped, "lost") != Some(0) {
        driver.fail(format!(
            "quiescent recording: {expected_events} events expected, 0 lost: {stopped:?}"
        ));
    }
    let profile = profile_counts(&profile)?;
    let trace = fntrace::export::read_uftrace_dir(&recording)
        .map_err(|e| format!("reading the quiescent recording: {e}"))?;
    let mut reader: BTreeMap<String, u64> = BTreeMap::new();
    for thread in &trace.threads {
        for event in &thread.events {
            if event.kind == fntrace::EventKind::Entry {
                *reader.entry(trace.name_of(event.function)).or_default() += 1;
            }
        }
    }
    let uftrace = uftrace_counts(&recording)?;
    let _ = std::fs::remove_dir_all(&recording);
    for (name, calls) in &expected {
        let of = |counts: &BTreeMap<String, u64>| counts.get(name).copied().unwrap_or(0);
        driver.report.quiet.insert(
            name.clone(),
            [*calls, of(&profile), of(&reader), of(&uftrace)],
        );
    }
    for (source, counts) in [
        ("profile", &profile),
        ("fntrace", &reader),
        ("uftrace", &uftrace),
    ] {
        for name in counts.keys().filter(|name| !expected.contains_key(*name)) {
            driver.report.quiet_extra.push(format!("{source}: {name}"));
        }
    }
    let (_, hwm) = rss_kib(pid).ok_or("no /proc/PID/status")?;
    driver.report.rss_peak_kib = hwm;
    driver.report.rss_sampled_max_kib = sampler.stop();
    Ok(())
}

/// The reports as a table: one column per protocol.
pub fn table(reports: &[Report]) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, cell: &dyn Fn(&Report) -> String| {
        rows.push((name.to_string(), reports.iter().map(cell).collect()));
    };
    row("protocol", &|r| r.protocol.clone());
    row("chaos seconds", &|r| format!("{:.1}", r.seconds));
    let mut kinds: Vec<&'static str> = reports.iter().flat_map(|r| r.ops.keys().copied()).collect();
    kinds.sort();
    kinds.dedup();
    for kind in kinds {
        row(&format!("op: {kind}"), &|r| {
            r.ops.get(kind).copied().unwrap_or(0).to_string()
        });
    }
    row("recordings: events written", &|r| {
        r.recorded_events.to_string()
    });
    row("recordings: events lost (drop mode)", &|r| {
        r.recorded_lost.to_string()
    });
    row("flight: trigger snapshots", &|r| {
        r.trigger_snapshots.to_string()
    });
    let mut counters: Vec<&String> = reports.iter().flat_map(|r| r.program.keys()).collect();
    counters.sort();
    counters.dedup();
    for counter in counters {
        row(&format!("service: {counter}"), &|r| {
            r.program
                .get(counter)
                .map_or("-".to_string(), u64::to_string)
        });
    }
    row("crashes", &|r| r.crashes.len().to_string());
    row("hangs (killed after 60 s)", &|r| {
        u8::from(r.hung.is_some()).to_string()
    });
    row("failed operations", &|r| r.failures.len().to_string());
    row("failed: forked child's last drain (known bug)", &|r| {
        r.known.values().sum::<u64>().to_string()
    });
    row("notes (thread blocking SIGTRAP)", &|r| {
        r.notes.values().sum::<u64>().to_string()
    });
    row("RSS at start (MiB)", &|r| mib(r.rss_start_kib));
    row("RSS peak, VmHWM (MiB)", &|r| mib(r.rss_peak_kib));
    row("peak RSS growth (MiB)", &|r| mib(r.rss_growth_kib()));
    row("RSS once quiescent (MiB)", &|r| mib(r.rss_quiet_kib));
    let mut functions: Vec<&String> = reports.iter().flat_map(|r| r.quiet.keys()).collect();
    functions.sort();
    functions.dedup();
    for function in functions {
        row(
            &format!("quiescent {function}: expected/profile/fntrace/uftrace"),
            &|r| {
                r.quiet.get(function).map_or("-".to_string(), |counts| {
                    counts
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join("/")
                })
            },
        );
    }
    row("quiescent counts exact", &|r| {
        if r.quiet_exact() { "yes" } else { "NO" }.to_string()
    });
    let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    let mut text = String::new();
    for (name, cells) in rows {
        let _ = write!(text, "| {name:width$} |");
        for cell in cells {
            let _ = write!(text, " {cell:>22} |");
        }
        text.push('\n');
        if name == "protocol" {
            let _ = write!(text, "|{}|", "-".repeat(width + 2));
            for _ in reports {
                let _ = write!(text, "{}:|", "-".repeat(23));
            }
            text.push('\n');
        }
    }
    text
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// The failures, notes and crashes of each report, one per line.
pub fn details(reports: &[Report]) -> String {
    let mut text = String::new();
    for report in reports {
        for crash in &report.crashes {
            let _ = writeln!(text, "{}: crash: {crash}", report.protocol);
        }
        if let Some(stacks) = &report.hung {
            let _ = writeln!(text, "{}: hung; its threads:\n{stacks}", report.protocol);
        }
        for failure in &report.failures {
            let _ = writeln!(text, "{}: failed: {failure}", report.protocol);
        }
        for (known, count) in &report.known {
            let _ = writeln!(text, "{}: known bug ×{count}: {known}", report.protocol);
        }
        for (note, count) in &report.notes {
            let _ = writeln!(text, "{}: note ×{count}: {note}", report.protocol);
        }
    }
    text
}
