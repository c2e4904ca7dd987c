//! Patching at scale: `init`, then `enable` + `disable` of every site of a
//! generated `-pg -O0` C library with 1,000, 10,000 and 100,000 functions,
//! and of a generated Rust library (`-Zinstrument-mcount`) with 10,000 and
//! 100,000 (`fntrace_fixtures::scale`), with 0, 4 and 16 threads busy
//! calling those functions, for both patch protocols and both patch
//! priorities (`Realtime`: the patching thread runs `SCHED_FIFO` where
//! permitted; `Normal`: it competes with the busy threads). Each library size runs in a
//! child process of its own (so each `init` scans one library); each cell
//! is the median of 7 enable/disable pairs after one warm-up pair, in wall
//! time and in the patching thread's CPU time (the machine is shared: CPU
//! time says what an operation costs, wall time what it waited too).
//! Prints a Markdown table; the "boost" column is what
//! `Stats::last_patch_boost` said (`NotPermitted`: no `CAP_SYS_NICE` and
//! `RLIMIT_RTPRIO` 0, so the row is no different from `Normal`).
//!
//! `cargo bench --bench toggle`; `FNTRACE_TOGGLE_BENCH_LIBRARIES=C100000,Rust100000`
//! measures only those libraries.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fntrace::{PatchPriority, PatchProtocol, Tracer};
use fntrace_fixtures::scale;

/// Counts calls: the busy threads' calls really go through the sites.
struct Count(AtomicU64);
impl Tracer for Count {
    fn entry(&self, _call: &fntrace::Call<'_>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}
static COUNT: Count = Count(AtomicU64::new(0));
fntrace::register_tracer!("bench", &COUNT);

/// (code, functions) of each library measured.
const LIBRARIES: [(&str, usize); 5] = [
    ("C", 1_000),
    ("C", 10_000),
    ("C", 100_000),
    ("Rust", 10_000),
    ("Rust", 100_000),
];
const THREADS: [usize; 3] = [0, 4, 16];
const REPS: usize = 7;
const CHILD: &str = "FNTRACE_TOGGLE_BENCH_SIZE";

fn main() {
    if let Some((code, size)) = std::env::var(CHILD).ok().and_then(|value| {
        LIBRARIES
            .into_iter()
            .find(|(code, size)| value == format!("{code}{size}"))
    }) {
        child(code, size);
        return;
    }
    // FNTRACE_TOGGLE_BENCH_LIBRARIES=C100000,...: only those.
    let chosen = std::env::var("FNTRACE_TOGGLE_BENCH_LIBRARIES").ok();
    let libraries: Vec<(&str, usize)> = LIBRARIES
        .into_iter()
        .filter(|(code, size)| {
            chosen
                .as_deref()
                .is_none_or(|list| list.split(',').any(|name| name == format!("{code}{size}")))
        })
        .collect();
    // Build every library first (cached), so no child pays for gcc or rustc.
    for &(code, size) in &libraries {
        match code {
            "C" => scale::library(size),
            _ => scale::rust_library(size),
        };
    }
    println!(
        "| code | sites | busy threads | protocol | priority (boost) | enable (ms) | disable (ms) | ns per site and operation | CPU per operation (ms) |"
    );
    println!("|---|---:|---:|---|---|---:|---:|---:|---:|");
    let mut inits = Vec::new();
    for (code, size) in libraries {
        let output = Command::new(std::env::current_exe().unwrap())
            .env(CHILD, format!("{code}{size}"))
            .output()
            .expect("running the bench child");
        assert!(
            output.status.success(),
            "child for {size} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some(init) = line.strip_prefix("INIT ") {
                inits.push(init.to_string());
            } else {
                println!("{line}");
            }
        }
    }
    println!();
    println!("| code | library functions | sites in the process | init (ms) |");
    println!("|---|---:|---:|---:|");
    for init in inits {
        println!("{init}");
    }
}

fn child(code: &str, size: usize) {
    let library = match code {
        "C" => scale::load(size),
        _ => scale::load_rust(size),
    };
    let started = Instant::now();
    fntrace::init().unwrap();
    let init = started.elapsed();
    let sites = fntrace::stats().sites;

    // FNTRACE_TOGGLE_BENCH_THREADS=N: only that many busy threads (profiling).
    let only: Option<usize> = std::env::var("FNTRACE_TOGGLE_BENCH_THREADS")
        .ok()
        .and_then(|n| n.parse().ok());
    for threads in THREADS
        .into_iter()
        .filter(|t| only.is_none_or(|only| only == *t))
    {
        let stop = Arc::new(AtomicBool::new(false));
        let busy: Vec<_> = (0..threads)
            .map(|i| {
                let stop = Arc::clone(&stop);
                let drive = library.drive;
                let n = size as i64;
                std::thread::spawn(move || {
                    let mut start = (i as i64 * 7919) % n;
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::black_box(drive(start, 64));
                        start = (start + 64) % n;
                    }
                })
            })
            .collect();
        for protocol in [PatchProtocol::Breakpoint, PatchProtocol::StopTheWorld] {
            fntrace::set_patch_protocol(protocol).unwrap();
            for priority in [PatchPriority::Realtime, PatchPriority::Normal] {
                fntrace::set_patch_priority(priority);
                let mut enables = Vec::new();
                let mut disables = Vec::new();
                let mut cpu = Vec::new();
                for rep in 0..=REPS {
                    let (started, cpu_started) = (Instant::now(), thread_cpu());
                    fntrace::enable("bench").unwrap();
                    let (enable, enable_cpu) = (started.elapsed(), thread_cpu() - cpu_started);
                    std::thread::sleep(Duration::from_millis(2));
                    let (started, cpu_started) = (Instant::now(), thread_cpu());
                    fntrace::disable("bench").unwrap();
                    let (disable, disable_cpu) = (started.elapsed(), thread_cpu() - cpu_started);
                    if rep > 0 {
                        enables.push(enable);
                        disables.push(disable);
                        cpu.extend([enable_cpu, disable_cpu]);
                    }
                }
                let boost = fntrace::stats()
                    .last_patch_boost
                    .map_or("-".to_string(), |boost| format!("{boost:?}"));
                let (enable, disable) = (median(&mut enables), median(&mut disables));
                let per_site = (enable + disable).as_nanos() as f64 / 2.0 / sites as f64;
                println!(
                    "| {code} | {sites} | {threads} | {protocol:?} | {priority:?} ({boost}) | {:.2} | {:.2} | {per_site:.0} | {:.2} |",
                    ms(enable),
                    ms(disable),
                    ms(median(&mut cpu))
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
        for thread in busy {
            thread.join().unwrap();
        }
    }
    assert!(COUNT.0.load(Ordering::Relaxed) > 0 || only == Some(0));
    println!("INIT | {code} | {size} | {sites} | {:.1} |", ms(init));
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-pointer; the clock id is a constant.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

fn ms(time: Duration) -> f64 {
    time.as_secs_f64() * 1e3
}
