//! What attaching costs: `cargo bench --bench attach`.
//!
//! Targets are C programs built `gcc -O2 -pg` (PIE), not linked with
//! fntrace; the `fntrace` command and `libfntrace.so` are release builds.
//! Each run (`FNTRACE_BENCH_RUNS`, default 3) measures, printing the load
//! average first:
//!
//! (a) **Per-call cost, attached against preloaded.** `benches/c/attach_bench.c`
//!     calls `leaf()` 10M times in a loop and reports ns per call (its own
//!     clock); the best of 3 loops per state. Preloaded
//!     (`LD_PRELOAD=libfntrace.so FNTRACE_CONTROL=1`) and attached (started
//!     plainly, `fntrace attach`), the same `ctl filter leaf`, then `graph`,
//!     then `profile` enabled: the cost is the loop's ns with the tracer
//!     on minus with every tracer off (NOPs).
//! (b) **`fntrace attach` to the first recorded event, 10,000 functions.**
//!     A generated C file of 10,000 `-pg` functions; a thread calls 100 of
//!     them every millisecond, in turn. From just before `fntrace attach
//!     PID` is started (CLOCK_MONOTONIC) to the timestamp of the first
//!     event in the directory of the `fntrace ctl PID record DIR` run
//!     right after it returns (every function selected: 10,000 sites
//!     enabled). A new process each run (the first attach: `dlopen`).
//!     Target ≤ 100 ms.
//! (c) **The target's pause per attach.** `attach_bench stamp`: a thread
//!     reads CLOCK_MONOTONIC in a loop and keeps the largest gap between
//!     two readings; `fntrace attach --thread` borrows that very thread.
//!     21 attach/detach cycles: the largest gap seen by the thread across
//!     each attach, the pause the injector reports (the first attach's;
//!     min, median and max of all 21), and the largest gap in 300 ms with
//!     no attach (what the scheduler alone does). Target: the
//!     injector's pause ≤ 1 ms (first attach, with `dlopen`, and later).
//! (d) **bpftrace on the same function.** `uprobe` + `uretprobe` on `leaf`
//!     counting calls (`count()`), against fntrace's `profile` tracer on
//!     `leaf` in an attached process: ns per call over the untraced loop
//!     (for bpftrace, the program as built: its sites call glibc's
//!     `mcount`); both counts checked exact. Target: fntrace ≥ 100×
//!     cheaper per call.
//!
//! `FNTRACE_BENCH_PARTS` (default `abcd`): the parts measured, e.g. `c`
//! for the pause alone ((d) needs (a)'s attached process, so `d` implies
//! `a`).
//!
//! bpftrace is not a dependency of fntrace: when it is missing, or its
//! uprobes cannot attach here (no root, no uprobe support), (d) is not
//! measured, the bench says so and why, and it exits with status 2 after
//! the other parts (their figures are printed first). Targets are printed
//! MET or MISS; a miss does not fail the run.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use common::{fntrace_cli, load_average, machine_description, run_ok, TempDir};

/// Calls per timed loop in (a) and (d).
const CALLS: u64 = 10_000_000;
/// Calls under bpftrace (each costs microseconds).
const BPF_CALLS: u64 = 200_000;
/// Functions of the generated program of (b).
const FUNCTIONS: usize = 10_000;
/// Attach/detach cycles of (c): the first (with `dlopen`) and 20 more, so
/// that a median and a largest over 20 attaches mean something.
const PAUSE_CYCLES: usize = 21;

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; CLOCK_MONOTONIC exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A running target, killed when dropped.
struct Target {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// The words after "ready" on its first line.
    ready: String,
}

impl Target {
    fn start(mut command: Command) -> Target {
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = command.spawn().expect("starting a target");
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
            ready: String::new(),
        };
        let first = target.line();
        target.ready = first
            .strip_prefix("ready")
            .unwrap_or_else(|| panic!("not a ready line: {first:?}"))
            .trim()
            .to_string();
        target
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(120))
            .expect("the target printed nothing within 120 s")
    }

    /// `COMMAND`'s one-line answer, without its first word.
    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").unwrap();
        let line = self.line();
        line.split_once(' ')
            .map(|(_, rest)| rest.to_string())
            .unwrap_or(line)
    }

    /// ns per call of `leaf` over `n` calls, the best of `tries` loops.
    fn ns_per_call(&mut self, n: u64, tries: usize) -> f64 {
        (0..tries)
            .map(|_| self.ask(&format!("run {n}")).parse::<f64>().unwrap())
            .fold(f64::INFINITY, f64::min)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `fntrace ARGS` (which must succeed); its standard output.
fn fntrace(cli: &Path, args: &[&str]) -> String {
    let output = Command::new(cli)
        .args(args)
        .env_remove("FNTRACE_LIB")
        .output()
        .expect("running fntrace");
    assert!(
        output.status.success(),
        "fntrace {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The pause `fntrace attach` reports, in ms.
fn reported_pause_ms(attached: &str) -> f64 {
    attached
        .split(" paused ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no pause in {attached:?}"))
}

fn build(dir: &Path, source: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    run_ok(
        Command::new("gcc")
            .args(["-O2", "-pg", "-fPIE", "-pie", "-pthread"])
            .args(extra)
            .arg(source)
            .arg("-o")
            .arg(&out),
    );
    out
}

/// The C source of (b)'s program: `FUNCTIONS` functions `f0`..., and a
/// thread calling 100 of them, in turn, every millisecond.
fn generated_source() -> String {
    let mut c = String::from(
        "#define _GNU_SOURCE\n#include <pthread.h>\n#include <stdio.h>\n#include <time.h>\n\
         #include <unistd.h>\nextern void moncontrol(int);\nstatic volatile long sink;\n",
    );
    for i in 0..FUNCTIONS {
        c += &format!(
            "__attribute__((noinline)) long f{i}(long x) {{ sink += x; \
             asm volatile(\"\" ::: \"memory\"); return x * 3 + {i}; }}\n"
        );
    }
    c += "static long (*const table[])(long) = {\n";
    for i in 0..FUNCTIONS {
        c += &format!("f{i},");
        if i % 16 == 15 {
            c.push('\n');
        }
    }
    c += &format!(
        "}};\nstatic void *caller(void *arg) {{ (void)arg; long next = 0;\n\
         for (;;) {{ for (int i = 0; i < 100; i++) {{ sink += table[next](next); \
         next = (next + 1) % {FUNCTIONS}; }}\n\
         struct timespec t = {{0, 1000000}}; nanosleep(&t, NULL); }} return NULL; }}\n\
         int main(void) {{ moncontrol(0); pthread_t id; pthread_create(&id, NULL, caller, NULL);\n\
         printf(\"ready\\n\"); fflush(stdout); char buf[64]; while (read(0, buf, sizeof buf) > 0) {{}}\n\
         return 0; }}\n"
    );
    c
}

/// (a): (graph, profile) ns per call over the NOPs, and the NOPs' ns.
fn per_call(cli: &Path, target: &mut Target) -> (f64, f64, f64) {
    let pid = target.pid();
    fntrace(cli, &["ctl", &pid, "filter", "leaf"]);
    let off = target.ns_per_call(CALLS, 3);
    fntrace(cli, &["ctl", &pid, "enable", "graph"]);
    let graph = target.ns_per_call(CALLS, 3);
    fntrace(cli, &["ctl", &pid, "disable", "graph"]);
    fntrace(cli, &["ctl", &pid, "enable", "profile"]);
    let profile = target.ns_per_call(CALLS, 3);
    fntrace(cli, &["ctl", &pid, "disable", "profile"]);
    (graph - off, profile - off, off)
}

/// The calls of `name` in `fntrace ctl PID profile`'s reply.
fn profile_calls(cli: &Path, pid: &str, name: &str) -> u64 {
    let reply = fntrace(cli, &["ctl", pid, "profile"]);
    // The table's rows: calls first, the function's name last.
    reply
        .lines()
        .find(|l| l.split_whitespace().last() == Some(name))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the profile: {reply}"))
}

/// (b): ms from `fntrace attach` to the first event, and the attach
/// command's own wall time.
fn first_event(cli: &Path, program: &Path, dir: &Path) -> (f64, f64) {
    let mut target = Target::start(Command::new(program));
    let pid = target.pid();
    let trace = dir.join("first-event");
    let _ = std::fs::remove_dir_all(&trace);
    std::thread::sleep(Duration::from_millis(100));
    let t0 = monotonic_ns();
    fntrace(cli, &["attach", &pid]);
    let attached = monotonic_ns();
    fntrace(cli, &["ctl", &pid, "record", trace.to_str().unwrap()]);
    std::thread::sleep(Duration::from_millis(300));
    fntrace(cli, &["ctl", &pid, "stop"]);
    fntrace(cli, &["detach", &pid]);
    let first = std::fs::read_dir(&trace)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "dat"))
        .filter_map(|e| {
            let bytes = std::fs::read(e.path()).ok()?;
            Some(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?))
        })
        .min()
        .expect("no event recorded");
    writeln!(target.stdin).unwrap();
    (
        (first as f64 - t0 as f64) / 1e6,
        (attached - t0) as f64 / 1e6,
    )
}

/// (c): per cycle, (largest gap the borrowed thread saw across the
/// attach, the pause the injector reported), both ms; and the largest
/// gap in 300 ms with no attach.
fn pauses(cli: &Path, program: &Path) -> (Vec<(f64, f64)>, f64) {
    let mut command = Command::new(program);
    command.arg("stamp");
    let mut target = Target::start(command);
    let pid = target.pid();
    let stamper = target.ready.clone();
    target.ask("gap");
    std::thread::sleep(Duration::from_millis(300));
    let quiet: f64 = target.ask("gap").parse::<f64>().unwrap() / 1e6;
    let mut cycles = Vec::new();
    for _ in 0..PAUSE_CYCLES {
        target.ask("gap");
        let attached = fntrace(cli, &["attach", &pid, "--thread", &stamper]);
        let gap: f64 = target.ask("gap").parse::<f64>().unwrap() / 1e6;
        cycles.push((gap, reported_pause_ms(&attached)));
        fntrace(cli, &["detach", &pid]);
    }
    (cycles, quiet)
}

/// Why bpftrace cannot be used here, if it cannot.
fn bpftrace_missing() -> Option<String> {
    match Command::new("bpftrace").arg("--version").output() {
        Ok(output) if output.status.success() => None,
        Ok(output) => Some(format!(
            "`bpftrace --version` failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Err(e) => Some(format!(
            "bpftrace is not installed ({e}): `apt-get install bpftrace` (as root)"
        )),
    }
}

/// (d): ns per call under bpftrace's uprobe + uretprobe on `leaf`, over
/// the untraced loop; or why it could not be measured.
fn bpftrace_cost(program: &Path, target: &mut Target) -> Result<(f64, f64), String> {
    let plain = target.ns_per_call(CALLS, 3);
    let script = format!(
        "BEGIN {{ printf(\"attached\\n\"); }} uprobe:{0}:leaf {{ @calls = count(); }} \
         uretprobe:{0}:leaf {{ @returns = count(); }}",
        program.display()
    );
    let mut bpf = Command::new("bpftrace")
        .args(["-e", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting bpftrace: {e}"))?;
    let stdout = bpf.stdout.take().unwrap();
    let (send, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if send.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match lines.recv_timeout(Duration::from_millis(100)) {
            Ok(line) if line.trim() == "attached" => break,
            Ok(_) => {}
            Err(_) => {
                if let Some(status) = bpf.try_wait().unwrap() {
                    let mut stderr = String::new();
                    let _ =
                        std::io::Read::read_to_string(bpf.stderr.as_mut().unwrap(), &mut stderr);
                    return Err(format!(
                        "bpftrace could not attach its uprobes ({status}): {}",
                        stderr.trim()
                    ));
                }
                if Instant::now() > deadline {
                    let _ = bpf.kill();
                    return Err("bpftrace did not attach within 60 s".to_string());
                }
            }
        }
    }
    let traced = target.ns_per_call(BPF_CALLS, 1);
    // SAFETY: kill takes plain integers; bpf is our child, alive.
    unsafe { libc::kill(bpf.id() as libc::pid_t, libc::SIGINT) };
    let status = bpf.wait().map_err(|e| e.to_string())?;
    let counts: Vec<(String, u64)> = lines
        .try_iter()
        .filter_map(|line| {
            let (name, n) = line.split_once(": ")?;
            Some((name.trim().to_string(), n.trim().parse().ok()?))
        })
        .collect();
    let count = |name: &str| counts.iter().find(|(n, _)| n == name).map(|(_, c)| *c);
    if count("@calls") != Some(BPF_CALLS) || count("@returns") != Some(BPF_CALLS) {
        return Err(format!(
            "bpftrace ({status}) counted {counts:?}, {BPF_CALLS} calls were made"
        ));
    }
    Ok((traced - plain, plain))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn verdict(met: bool) -> &'static str {
    if met {
        "MET"
    } else {
        "MISS"
    }
}

fn main() {
    let runs: usize = std::env::var("FNTRACE_BENCH_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let cli = fntrace_cli();
    let library = cli.with_file_name("libfntrace.so");
    let temp = TempDir::new("fntrace-bench-attach");
    let dir = temp.path();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bench_program = build(
        dir,
        &manifest.join("benches/c/attach_bench.c"),
        "attach_bench",
        &[],
    );
    let generated = dir.join("functions.c");
    std::fs::write(&generated, generated_source()).unwrap();
    let many = build(dir, &generated, "functions", &[]);
    let bpftrace = bpftrace_missing();
    println!("fntrace attach bench: {}", machine_description());
    let parts = std::env::var("FNTRACE_BENCH_PARTS").unwrap_or_else(|_| "abcd".to_string());
    let mut bpf_problem = if parts.contains('d') {
        bpftrace.clone()
    } else {
        None
    };
    for run in 1..=runs {
        println!("\nrun {run} of {runs}, load average {}", load_average());

        if parts.contains(['a', 'd']) {
            bpf_problem =
                per_call_and_bpftrace(&cli, &library, &bench_program, &bpftrace).or(bpf_problem);
        }
        if parts.contains('b') {
            // (b) attach to the first event, 10,000 functions.
            let (first, attach_wall) = first_event(&cli, &many, dir);
            println!(
                "(b) {FUNCTIONS} functions: `fntrace attach` to the first recorded event \
                 {first:.1} ms (the attach command {attach_wall:.1} ms of it); target <= 100 \
                 ms: {}",
                verdict(first <= 100.0)
            );
        }
        if parts.contains('c') {
            pause_part(&cli, &bench_program);
        }
    }
    if let Some(why) = bpf_problem {
        eprintln!("\nbench attach: part (d) was not measured: {why}");
        std::process::exit(2);
    }
}

/// (a) per call, preloaded and attached, then (d) bpftrace against the
/// attached process's profile; why (d) was not measured, if it was not.
fn per_call_and_bpftrace(
    cli: &Path,
    library: &Path,
    bench_program: &Path,
    bpftrace: &Option<String>,
) -> Option<String> {
    let mut bpf_problem = None;
    let mut preloaded = Command::new(bench_program);
    preloaded
        .env("LD_PRELOAD", library)
        .env("FNTRACE_CONTROL", "1");
    let mut target = Target::start(preloaded);
    std::thread::sleep(Duration::from_millis(100));
    let (graph_pre, profile_pre, off_pre) = per_call(cli, &mut target);
    drop(target);
    let mut target = Target::start(Command::new(bench_program));
    let pid = target.pid();
    fntrace(cli, &["attach", &pid]);
    let (graph_att, profile_att, off_att) = per_call(cli, &mut target);
    println!(
        "(a) per call over the NOPs, preloaded; attached: graph {graph_pre:.1}; \
             {graph_att:.1} ns, profile {profile_pre:.1}; {profile_att:.1} ns \
             (the NOPed loop: {off_pre:.1}; {off_att:.1} ns a call)"
    );

    // (d) bpftrace against profile, same process, same function.
    fntrace(cli, &["ctl", &pid, "profile", "reset"]);
    fntrace(cli, &["ctl", &pid, "enable", "profile"]);
    let on = target.ns_per_call(CALLS, 1);
    let counted = profile_calls(cli, &pid, "leaf");
    fntrace(cli, &["ctl", &pid, "disable", "profile"]);
    let off = target.ns_per_call(CALLS, 3);
    assert_eq!(counted, CALLS, "the profile's count of leaf");
    let profile_cost = on - off;
    fntrace(cli, &["detach", &pid]);
    match &bpftrace {
        Some(why) => println!("(d) bpftrace: NOT MEASURED: {why}"),
        None => match bpftrace_cost(bench_program, &mut target) {
            Ok((bpf_cost, plain)) => {
                let ratio = bpf_cost / profile_cost.max(0.1);
                println!(
                    "(d) leaf, ns per call over the untraced loop: bpftrace uprobe + \
                         uretprobe {bpf_cost:.0} ({BPF_CALLS} calls, counted exactly; the loop \
                         with glibc's mcount: {plain:.1}); fntrace profile {profile_cost:.1} \
                         ({CALLS} calls, counted exactly): {ratio:.0}x cheaper; target >= \
                         100x: {}",
                    verdict(ratio >= 100.0)
                );
            }
            Err(why) => {
                println!("(d) bpftrace: NOT MEASURED: {why}");
                bpf_problem = Some(why);
            }
        },
    }
    drop(target);
    bpf_problem
}

/// (c) the pause, printed.
fn pause_part(cli: &Path, bench_program: &Path) {
    let (cycles, quiet) = pauses(cli, bench_program);
    let (first_gap, first_pause) = cycles[0];
    let mut later_gaps: Vec<f64> = cycles[1..].iter().map(|c| c.0).collect();
    let mut later_pauses: Vec<f64> = cycles[1..].iter().map(|c| c.1).collect();
    let mut all: Vec<f64> = cycles.iter().map(|c| c.1).collect();
    all.sort_by(f64::total_cmp);
    let max_pause = all[all.len() - 1];
    println!(
        "(c) the borrowed thread's pause, reported; its largest gap across the attach: \
             first attach (dlopen) {first_pause:.2}; {first_gap:.2} ms, later {} attaches \
             median {:.2}; {:.2} ms; all {PAUSE_CYCLES} reported: min {:.2}, median {:.2}, \
             max {max_pause:.2} ms (largest gap in 300 ms with no attach: {quiet:.2} ms); \
             target <= 1 ms: {}",
        PAUSE_CYCLES - 1,
        median(&mut later_pauses),
        median(&mut later_gaps),
        all[0],
        all[all.len() / 2],
        verdict(max_pause <= 1.0)
    );
}
