//! The profile soak's machinery (memory must stay flat over a 10-minute
//! run), shared by `benches/profile_soak.rs` (10 minutes) and
//! `tests/programs/profile_soak.rs` (20 s): a real `gcc -pg` service
//! (`tests/c/profile_soak.c`, not linked with fntrace: `libfntrace.so`
//! preloaded, no code change) serves paced requests on worker threads and
//! churns short-lived threads, while this driver, once a second, samples
//! its resident memory (`VmRSS`, `VmHWM` of `/proc/PID/status`) and
//! scrapes `GET /metrics` (`FNTRACE_METRICS`), and through `fntrace ctl`
//! reads the profile every few seconds, resets it now and then, and
//! switches it off and on again now and then.
//!
//! Near the end, at a known point, the service's threads are stopped, the
//! profile is reset, they run again, they are stopped, the profile is
//! switched off, and `fntrace ctl metrics` must count per function exactly
//! the calls the service says it made since the reset (it counts its own
//! calls per function).
//!
//! Every file goes under one temporary directory, removed at the end.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use crate::native::Scratch;
use crate::native::{build_libraries, cli, profile_dir, repo};

/// The functions the profile selects: the service's own.
const FILTER: &str = "soak_*";

/// How long a line of the service may take before the run counts as hung.
const LINE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a run does.
#[derive(Clone, Debug)]
pub struct Config {
    /// Seconds from `start` to the last `stop`.
    pub seconds: u64,
    /// Seconds of warm-up: the resident size at their end is the baseline.
    pub warmup: u64,
    /// Seconds at the end between the known reset and the last `stop`
    /// (no reset nor switch meanwhile).
    pub exact: u64,
    /// `fntrace ctl profile` every this many seconds.
    pub profile_every: u64,
    /// `fntrace ctl profile reset` every this many seconds.
    pub reset_every: u64,
    /// `disable profile` every this many seconds (at an offset of half of
    /// it), and `enable profile` a second later.
    pub toggle_every: u64,
}

impl Config {
    /// The bench's: `seconds` long, a 30 s warm-up (less in a short run).
    pub fn with_seconds(seconds: u64) -> Config {
        Config {
            seconds,
            warmup: 30.min(seconds / 4),
            exact: 10.min(seconds / 4),
            profile_every: 3,
            reset_every: 30.min(seconds / 3).max(4),
            toggle_every: 20.min(seconds / 3).max(4),
        }
    }
}

/// One sample of the service's memory.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Seconds since `start`.
    pub at: f64,
    /// `VmRSS`, KiB.
    pub rss_kib: u64,
    /// `VmHWM`, KiB.
    pub hwm_kib: u64,
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Report {
    /// Every sample, one a second.
    pub samples: Vec<Sample>,
    /// `VmRSS` at the end of the warm-up, KiB.
    pub start_kib: u64,
    /// When the warm-up ended, seconds since `start`.
    pub warmup_at: f64,
    /// The largest `VmRSS` sampled after the warm-up, KiB.
    pub max_kib: u64,
    /// `VmRSS` at the end (quiescent), KiB.
    pub end_kib: u64,
    /// `VmHWM` at the end, KiB (the peak since the warm-up's end when
    /// `hwm_reset`, else since the start).
    pub hwm_kib: u64,
    /// Whether `VmHWM` was reset at the warm-up's end (`clear_refs`).
    pub hwm_reset: bool,
    /// The least-squares slope of `VmRSS` after the warm-up, KiB/min.
    pub slope_kib_per_min: f64,
    /// The same over the second half of the run (after a leak, still the
    /// leak's rate; after a warm-up ramp, about 0), KiB/min.
    pub late_slope_kib_per_min: f64,
    /// Scrapes of `/metrics` answered `200` with a whole text.
    pub scrapes: u64,
    /// The longest scrape, ms.
    pub slowest_scrape_ms: f64,
    /// `fntrace ctl profile` answered.
    pub profiles: u64,
    /// `fntrace ctl profile reset` answered.
    pub resets: u64,
    /// `disable profile` then `enable profile`, answered.
    pub toggles: u64,
    /// Calls the service made, in all (its own counts).
    pub calls: u64,
    /// Threads the service started (its own count).
    pub threads: u64,
    /// Seconds from `start` to the last `stop`.
    pub seconds: f64,
    /// Calls made per function between the known reset and the end.
    pub expected: BTreeMap<String, u64>,
    /// `_count` per function of `fntrace ctl metrics` at the end.
    pub counted: BTreeMap<String, u64>,
    /// `fntrace_profile_lost_calls_total` and `fntrace_profile_pathless_calls_total`
    /// at the end.
    pub not_kept: (u64, u64),
    /// What went wrong (a failed request, a bad scrape, a line on stderr).
    pub failures: Vec<String>,
    /// Lines fntrace printed that are explained (a thread being created
    /// blocks every signal for a moment, SIGTRAP too: that `enable`
    /// patched stopping the world, and says so), by text.
    pub notes: BTreeMap<String, u64>,
    /// The mappings whose resident size changed most from the warm-up's
    /// end to the last second of the run (threads still running), KiB:
    /// `(mapping, before, after)`.
    pub grown: Vec<(String, u64, u64)>,
}

/// The bounds a run is held to.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Growth after the warm-up (largest sample, end, and `VmHWM`), KiB.
    pub growth_kib: u64,
    /// The magnitude of the slope over the second half of the run,
    /// KiB/min (`None`: not checked). The whole run's line must also rise
    /// less than `growth_kib` from the warm-up's end to the end.
    pub slope_kib_per_min: Option<f64>,
}

impl Report {
    /// What falls short of `bounds` (empty: passed).
    pub fn shortfalls(&self, bounds: &Bounds) -> Vec<String> {
        let mut out: Vec<String> = self.failures.clone();
        let growth = |kib: u64| kib.saturating_sub(self.start_kib);
        if growth(self.max_kib) > bounds.growth_kib {
            out.push(format!(
                "VmRSS grew by {} KiB after the warm-up (largest sample), over {} KiB",
                growth(self.max_kib),
                bounds.growth_kib
            ));
        }
        if growth(self.end_kib) > bounds.growth_kib {
            out.push(format!(
                "VmRSS grew by {} KiB after the warm-up (end), over {} KiB",
                growth(self.end_kib),
                bounds.growth_kib
            ));
        }
        if self.hwm_reset && growth(self.hwm_kib) > bounds.growth_kib {
            out.push(format!(
                "VmHWM grew by {} KiB after the warm-up, over {} KiB",
                growth(self.hwm_kib),
                bounds.growth_kib
            ));
        }
        if let Some(slope) = bounds.slope_kib_per_min {
            if self.late_slope_kib_per_min.abs() > slope {
                out.push(format!(
                    "VmRSS slope over the second half {:.1} KiB/min, beyond ±{slope} KiB/min",
                    self.late_slope_kib_per_min
                ));
            }
            let minutes = (self.seconds - self.warmup_at) / 60.0;
            let rise = self.slope_kib_per_min * minutes;
            if rise.abs() > bounds.growth_kib as f64 {
                out.push(format!(
                    "the least-squares line of VmRSS rises {rise:.0} KiB over the run, \
                     beyond {} KiB",
                    bounds.growth_kib
                ));
            }
        }
        if self.expected != self.counted {
            out.push(format!(
                "ctl metrics counted {:?}, the service made {:?} since the reset",
                self.counted, self.expected
            ));
        }
        if self.expected.values().sum::<u64>() == 0 {
            out.push("no calls made after the known reset".to_string());
        }
        if self.not_kept != (0, 0) {
            out.push(format!("calls not kept: {:?}", self.not_kept));
        }
        out
    }

    /// The figures, one per line.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let mib = |kib: u64| kib as f64 / 1024.0;
        let _ = writeln!(out, "run:                 {:.1} s", self.seconds);
        let _ = writeln!(
            out,
            "calls made:          {} ({:.0}/s), threads started: {}",
            self.calls,
            self.calls as f64 / self.seconds.max(1e-9),
            self.threads
        );
        let _ = writeln!(
            out,
            "scrapes of /metrics: {} (slowest {:.1} ms); ctl profile: {}; resets: {}; \
             disable+enable: {}",
            self.scrapes, self.slowest_scrape_ms, self.profiles, self.resets, self.toggles
        );
        let first = self.samples.first().map_or(0, |s| s.rss_kib);
        let _ = writeln!(
            out,
            "VmRSS first sample:  {} KiB ({:.2} MiB)",
            first,
            mib(first)
        );
        let _ = writeln!(
            out,
            "VmRSS after warm-up: {} KiB ({:.2} MiB)",
            self.start_kib,
            mib(self.start_kib)
        );
        let _ = writeln!(
            out,
            "VmRSS max after it:  {} KiB (+{} KiB)",
            self.max_kib,
            self.max_kib as i64 - self.start_kib as i64
        );
        let _ = writeln!(
            out,
            "VmRSS at end:        {} KiB ({:+} KiB)",
            self.end_kib,
            self.end_kib as i64 - self.start_kib as i64
        );
        let _ = writeln!(
            out,
            "VmHWM at end:        {} KiB ({:+} KiB; {})",
            self.hwm_kib,
            self.hwm_kib as i64 - self.start_kib as i64,
            if self.hwm_reset {
                "reset at the warm-up's end"
            } else {
                "since the start: clear_refs refused"
            }
        );
        let _ = writeln!(
            out,
            "VmRSS slope:         {:+.2} KiB/min (least squares, {} samples after the warm-up)",
            self.slope_kib_per_min,
            self.samples
                .iter()
                .filter(|s| s.at >= self.warmup_at)
                .count()
        );
        let _ = writeln!(
            out,
            "VmRSS slope, 2nd half: {:+.2} KiB/min",
            self.late_slope_kib_per_min
        );
        let _ = writeln!(
            out,
            "exact counts since the known reset (service / ctl metrics):"
        );
        for (name, made) in &self.expected {
            let counted = self.counted.get(name).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "  {name:<18} {made:>10} {counted:>10}{}",
                if *made == counted { "" } else { "  DIFFERS" }
            );
        }
        for (name, counted) in &self.counted {
            if !self.expected.contains_key(name) {
                let _ = writeln!(out, "  {name:<18} {:>10} {counted:>10}  DIFFERS", 0);
            }
        }
        let _ = writeln!(
            out,
            "not kept (lost, pathless): {} {}",
            self.not_kept.0, self.not_kept.1
        );
        for (note, times) in &self.notes {
            let _ = writeln!(out, "note ({times}×): {note}");
        }
        if !self.grown.is_empty() {
            let _ = writeln!(
                out,
                "resident KiB per mapping, warm-up's end -> last second (largest changes):"
            );
            for (mapping, before, after) in &self.grown {
                let _ = writeln!(
                    out,
                    "  {before:>6} -> {after:>6} ({:+}) {mapping}",
                    *after as i64 - *before as i64
                );
            }
        }
        out
    }
}

/// The slope of the least-squares line through `(minutes, kib)`, KiB/min.
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

/// What the run needs built: the service (`gcc -pg`, in `dir`), the
/// preload library and the `fntrace` command.
pub struct Built {
    service: PathBuf,
    library: PathBuf,
    cli: PathBuf,
}

/// Builds them.
pub fn build(dir: &Path) -> Built {
    build_libraries();
    let service = dir.join("profile_soak");
    let gcc = Command::new("gcc")
        .args(["-pg", "-O1", "-fPIE", "-pie", "-pthread"])
        .arg(repo().join("tests/c/profile_soak.c"))
        .arg("-o")
        .arg(&service)
        .output()
        .expect("cannot run gcc");
    assert!(
        gcc.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&gcc.stderr)
    );
    Built {
        service,
        library: profile_dir().join("libfntrace.so"),
        cli: cli(),
    }
}

/// `VmRSS` and `VmHWM` of `/proc/PID/status`, in KiB, from one read (0
/// once the process is gone). One read: the kernel raises its high-water
/// mark lazily (when memory is unmapped) and prints it as at least the
/// current RSS, so an RSS read before a drop could exceed a peak read
/// after it.
fn rss_and_hwm_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.trim().trim_end_matches(" kB").parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS"), field("VmHWM"))
}

/// Resident KiB per mapping of `/proc/PID/smaps`, by start address (a
/// heap that grows keeps its start), with its size and path or name (such
/// as `[heap]`).
fn smaps(pid: u32) -> BTreeMap<String, (String, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut out = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (start, end) = first.split_once('-').unwrap();
            let size = (u64::from_str_radix(end, 16).unwrap_or(0)
                - u64::from_str_radix(start, 16).unwrap_or(0))
                / 1024;
            let description = format!("({size} KiB) {}", fields.get(5).copied().unwrap_or(""));
            current = Some((start.to_string(), description));
        } else if let (Some((start, description)), Some(rss)) =
            (&current, line.strip_prefix("Rss:"))
        {
            let kib = rss
                .trim()
                .trim_end_matches(" kB")
                .trim()
                .parse()
                .unwrap_or(0);
            out.insert(start.clone(), (description.clone(), kib));
        }
    }
    out
}

/// The mappings whose resident size differs most between `before` and
/// `after` (at most `n`, changes of at least 16 KiB).
fn grown(
    before: &BTreeMap<String, (String, u64)>,
    after: &BTreeMap<String, (String, u64)>,
    n: usize,
) -> Vec<(String, u64, u64)> {
    let mut changes: Vec<(String, u64, u64)> = before
        .keys()
        .chain(after.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|key| {
            let (b, a) = (before.get(key), after.get(key));
            let description = a.or(b).map_or("", |(d, _)| d.as_str());
            (
                format!("{key} {description}"),
                b.map_or(0, |(_, kib)| *kib),
                a.map_or(0, |(_, kib)| *kib),
            )
        })
        .filter(|(_, b, a)| b.abs_diff(*a) >= 16)
        .collect();
    changes.sort_by_key(|(_, b, a)| std::cmp::Reverse(b.abs_diff(*a)));
    changes.truncate(n);
    changes
}

/// The running service: its stdin, its stdout lines, its stderr lines.
struct Service {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<String>>>,
    socket: PathBuf,
    metrics: SocketAddr,
    cli: PathBuf,
}

impl Service {
    fn start(built: &Built, dir: &Path) -> Service {
        let socket = dir.join("control.sock");
        // A free port (closed again before the service binds it).
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut command = Command::new(&built.service);
        for (name, _) in std::env::vars_os() {
            if name.as_bytes().starts_with(b"FNTRACE") {
                command.env_remove(name);
            }
        }
        let mut child = command
            .current_dir(dir)
            .env("LD_PRELOAD", &built.library)
            .env("FNTRACE_CONTROL", &socket)
            .env("FNTRACE_METRICS", format!("127.0.0.1:{port}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start the soak service");
        let stdin = child.stdin.take().unwrap();
        let (send, lines) = mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::clone(&stderr);
        let child_stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in child_stderr.lines() {
                let Ok(line) = line else { break };
                errors.lock().unwrap().push(line);
            }
        });
        Service {
            child,
            stdin,
            lines,
            stderr,
            socket,
            metrics: SocketAddr::from(([127, 0, 0, 1], port)),
            cli: built.cli.clone(),
        }
    }

    /// The next line of its stdout.
    fn line(&self) -> String {
        self.lines
            .recv_timeout(LINE_TIMEOUT)
            .unwrap_or_else(|e| panic!("the soak service said nothing: {e}"))
    }

    /// Sends `command` and returns its reply line.
    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        self.line()
    }

    /// `stop`: the calls per function made so far.
    fn stop(&mut self) -> BTreeMap<String, u64> {
        let reply = self.ask("stop");
        let rest = reply
            .strip_prefix("stopped ")
            .unwrap_or_else(|| panic!("stop: {reply}"));
        rest.split(' ')
            .map(|pair| {
                let (name, calls) = pair.split_once('=').unwrap();
                (name.to_string(), calls.parse().unwrap())
            })
            .collect()
    }

    /// `fntrace ctl SOCKET ARGS`: its stdout, or what went wrong.
    fn ctl(&self, args: &[&str]) -> Result<String, String> {
        let output = Command::new(&self.cli)
            .arg("ctl")
            .arg(&self.socket)
            .args(args)
            .env("LC_ALL", "C")
            .output()
            .map_err(|e| format!("fntrace ctl {args:?}: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!(
                "fntrace ctl {args:?}: {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }

    /// `GET /metrics`: the body, or what went wrong.
    fn scrape(&self) -> Result<String, String> {
        let mut stream = TcpStream::connect_timeout(&self.metrics, Duration::from_secs(10))
            .map_err(|e| format!("connect to /metrics: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: soak\r\n\r\n")
            .map_err(|e| format!("send to /metrics: {e}"))?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .map_err(|e| format!("read /metrics: {e}"))?;
        let response = String::from_utf8(response).map_err(|e| format!("/metrics: {e}"))?;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("/metrics: no head: {response:.200}"))?;
        if !head.starts_with("HTTP/1.1 200 ") {
            return Err(format!("/metrics: {head}"));
        }
        if !body.ends_with("# EOF\n") {
            return Err(format!("/metrics: cut short ({} bytes)", body.len()));
        }
        Ok(body.to_string())
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fntrace_function_self_seconds_count` (calls) per exported function.
pub fn counts(body: &str) -> BTreeMap<String, u64> {
    body.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("fntrace_function_self_seconds_count{function=\"")?;
            let (name, value) = rest.split_once("\"} ")?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The value of the gauge `name` (without labels).
fn gauge(body: &str, name: &str) -> Option<u64> {
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// `what`'s text, or its error kept in `report.failures`.
fn fail(report: &mut Report, what: Result<String, String>) -> Option<String> {
    match what {
        Ok(text) => Some(text),
        Err(e) => {
            report.failures.push(e);
            None
        }
    }
}

/// Runs the soak: `config.seconds` of service with the driver's requests,
/// then the exact counts. `progress` is told every sample (for a long
/// run's output).
pub fn run(
    built: &Built,
    config: &Config,
    dir: &Path,
    progress: &mut dyn FnMut(&Sample),
) -> Report {
    let mut report = Report::default();
    let mut service = Service::start(built, dir);
    let pid = service.child.id();
    assert_eq!(service.line(), "ready");
    let r = service.ctl(&["filter", FILTER]);
    fail(&mut report, r);
    let r = service.ctl(&["enable", "profile"]);
    fail(&mut report, r);
    assert_eq!(service.ask("start"), "started");
    let started = Instant::now();
    let exact_from = config.seconds - config.exact;
    let mut before_reset: Option<BTreeMap<String, u64>> = None;
    let mut enabled = true;
    let mut at_warmup = BTreeMap::new();
    for tick in 1..=config.seconds {
        // Once a second, on the second.
        let due = started + Duration::from_secs(tick);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let at = started.elapsed().as_secs_f64();
        let (rss_kib, hwm_kib) = rss_and_hwm_kib(pid);
        let sample = Sample {
            at,
            rss_kib,
            hwm_kib,
        };
        if sample.rss_kib == 0 {
            report
                .failures
                .push(format!("the service is gone at {at:.1} s"));
            break;
        }
        report.samples.push(sample);
        progress(&sample);
        if tick == config.warmup {
            report.start_kib = sample.rss_kib;
            report.warmup_at = at;
            // "5" resets VmHWM to the current resident size.
            report.hwm_reset = std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
            at_warmup = smaps(pid);
        }
        let scraping = Instant::now();
        match service.scrape() {
            Ok(_) => {
                report.scrapes += 1;
                report.slowest_scrape_ms = report
                    .slowest_scrape_ms
                    .max(scraping.elapsed().as_secs_f64() * 1e3);
            }
            Err(e) => report.failures.push(format!("at {at:.1} s: {e}")),
        }
        if tick == config.seconds {
            report.grown = grown(&at_warmup, &smaps(pid), 12);
            break;
        }
        if tick == exact_from {
            // The known point: quiescent, reset, on, and running again.
            before_reset = Some(service.stop());
            let r = service.ctl(&["profile", "reset"]);
            if fail(&mut report, r).is_some() {
                report.resets += 1;
            }
            if !enabled {
                let r = service.ctl(&["enable", "profile"]);
                fail(&mut report, r);
                enabled = true;
            }
            assert_eq!(service.ask("start"), "started");
            continue;
        }
        if tick > exact_from {
            if tick.is_multiple_of(config.profile_every) {
                let r = service.ctl(&["profile"]);
                if fail(&mut report, r).is_some() {
                    report.profiles += 1;
                }
            }
            continue;
        }
        if tick.is_multiple_of(config.profile_every) {
            let r = service.ctl(&["profile"]);
            if fail(&mut report, r).is_some() {
                report.profiles += 1;
            }
        }
        if tick.is_multiple_of(config.reset_every) {
            let r = service.ctl(&["profile", "reset"]);
            if fail(&mut report, r).is_some() {
                report.resets += 1;
            }
        }
        let half = config.toggle_every / 2;
        if tick % config.toggle_every == half {
            let r = service.ctl(&["disable", "profile"]);
            fail(&mut report, r);
            enabled = false;
        } else if !enabled && tick % config.toggle_every == half + 1 {
            let r = service.ctl(&["enable", "profile"]);
            if fail(&mut report, r).is_some() {
                report.toggles += 1;
            }
            enabled = true;
        }
    }
    let made = service.stop();
    report.seconds = started.elapsed().as_secs_f64();
    let r = service.ctl(&["disable", "profile"]);
    fail(&mut report, r);
    let r = service.ctl(&["metrics"]);
    if let Some(metrics) = fail(&mut report, r) {
        report.counted = counts(&metrics);
        report.not_kept = (
            gauge(&metrics, "fntrace_profile_lost_calls_total").unwrap_or(u64::MAX),
            gauge(&metrics, "fntrace_profile_pathless_calls_total").unwrap_or(u64::MAX),
        );
    }
    let before = before_reset.unwrap_or_default();
    report.expected = made
        .iter()
        .map(|(name, calls)| (name.clone(), calls - before.get(name).copied().unwrap_or(0)))
        .filter(|(_, calls)| *calls > 0)
        .collect();
    report.calls = made.values().sum();
    report.threads = made.get("soak_churn_thread").copied().unwrap_or(0)
        + made.get("soak_worker").copied().unwrap_or(0)
        + made.get("soak_churner").copied().unwrap_or(0);
    (report.end_kib, report.hwm_kib) = rss_and_hwm_kib(pid);
    let after: Vec<(f64, f64)> = report
        .samples
        .iter()
        .filter(|s| s.at >= report.warmup_at)
        .map(|s| (s.at / 60.0, s.rss_kib as f64))
        .collect();
    report.max_kib = after.iter().map(|p| p.1 as u64).max().unwrap_or(0);
    report.slope_kib_per_min = slope(&after);
    let half = report.seconds / 2.0 / 60.0;
    let late: Vec<(f64, f64)> = after.iter().copied().filter(|p| p.0 >= half).collect();
    report.late_slope_kib_per_min = slope(&late);
    writeln!(service.stdin, "exit").unwrap();
    let status = service.child.wait().unwrap();
    if !status.success() {
        report
            .failures
            .push(format!("the service exited: {status}"));
    }
    for line in service.stderr.lock().unwrap().iter() {
        if line.starts_with("fntrace:") && line.contains("blocks SIGTRAP") {
            let note = line
                .split_once(" (")
                .map_or(line.as_str(), |(head, _)| head);
            // The thread id varies; the rest is the note.
            let note = note
                .split(' ')
                .map(|word| {
                    if word.parse::<u32>().is_ok() {
                        "N"
                    } else {
                        word
                    }
                })
                .collect::<Vec<_>>()
                .join(" ");
            *report.notes.entry(note).or_default() += 1;
        } else {
            report.failures.push(format!("service stderr: {line}"));
        }
    }
    report
}
