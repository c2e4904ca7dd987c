//! What fntrace costs per call: `cargo bench --bench overhead`.
//!
//! Workload everywhere: `run(n)` = run → n × (mid → 4 × leaf), 1 + 5n calls
//! (`tests/fixtures/c/workload.c`, `tests/fixtures/rust/workload.rs`), built
//! several ways by the fixtures crate. Measured side by side in one process:
//!
//! 1. untraced costs: gcc `-pg` (PIE) with the sites NOPed by fntrace, the
//!    same source with gcc's own NOPs (`-mnop-mcount`), and without `-pg`;
//! 2. the graph tracer on C, 3. on Rust (`-Zinstrument-mcount`): traced
//!    minus untraced, per call (entry + exit);
//! 4. the function tracer (entry only), for reference; and the profile
//!    tracer (entry and exit, aggregated in the process), on C and Rust;
//! 5. the graph tracer's cost on two threads at once against one (each
//!    less the NOPed run with the same threads);
//! 6. `uftrace record` on a standalone `gcc -pg` build of the same call tree;
//!    and, for reference, that build run alone (glibc's `mcount`), with
//!    `libfntrace.so` preloaded and nothing asked, and with
//!    `FNTRACE_CONTROL` too (its sites NOPs from start-up); and the graph
//!    tracer's cost per call where each traced leaf returns to one of 16
//!    callers in a random order (`benches/c/callers.c` under `fntrace
//!    record --flight`: the traced thread alone, no writer), which the
//!    return stubs are for (`src/patch/return_stubs.rs`);
//!
//! 7. a dispatcher calling 1,000 distinct functions (`c_dispatch`:
//!    `tests/fixtures/c/dispatch.c`, gcc `-pg`), in round robin and in a
//!    seeded random order: the graph and profile tracers' costs per call
//!    and their ratio, against the target (profile <= 1.2 x graph:
//!    the profile's call-trie lookup must not grow with the callees); and,
//!    for reference, in round robin among its first 10 and 100 callees.
//!    `FNTRACE_BENCH_DISPATCH=1` measures this part alone;
//!
//! and, for reference, what one TSC read costs here (the graph tracer takes
//! two timestamps per call).
//!
//! Each run is timed twice: the running thread's CPU clock and the wall
//! clock. Targets are judged on CPU time, which other processes on a busy
//! machine do not inflate (preemption does not count; lost cache and
//! contention between fntrace's threads do); the wall time is shown beside
//! it. Each in-process figure is the median over [`ROUNDS`] rounds; a round
//! runs every measurement once, one after the other, so a slow phase of the
//! machine weighs on all of them alike. This host has quiet and contended
//! phases that switch within milliseconds (untraced code runs ≈ 1.35×
//! slower in the contended ones, traced code ≈ 1.5×); the lower quartiles,
//! shown for reference, give the quiet-phase figures. Targets are judged
//! on the medians. Every traced run is checked: exactly
//! 2 graph events (1 function event) per call, none lost. A missed target is
//! printed as MISS and does not fail the run; a wrong event count, a missing
//! tool or a failing command does.

mod common;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{
    build_bench_c, build_standalone, children_cpu_ns, fntrace_cli, load_average,
    machine_description, thread_cpu_ns, TempDir,
};
use fntrace::{Filter, FUNCTION_TRACER, GRAPH_TRACER, PROFILE_TRACER};
use fntrace_fixtures::{c_dispatch, c_fentry_nopie, c_nopmcount, c_pie, c_plain, rust};

/// Rounds whose medians are reported, after [`WARM_UP_ROUNDS`] discarded
/// ones (they fault in the trace buffers and warm the caches).
const ROUNDS: usize = 15;
const WARM_UP_ROUNDS: usize = 2;
/// `run(n)` iterations of an untraced run: 5,000,001 calls.
const UNTRACED_ITERATIONS: u64 = 1_000_000;
/// `run(n)` iterations of a traced run: 1,000,001 calls, 2,000,002 graph
/// events, all kept in the thread's buffer until drained after the run.
const TRACED_ITERATIONS: u64 = 200_000;
/// Graph events per thread buffer: room for two traced runs (the main
/// thread records C and Rust in each round), so the warm-up rounds touch
/// every page of it and no timed run takes a page fault.
const GRAPH_BUFFER_EVENTS: usize = 2 * 2 * calls_of(TRACED_ITERATIONS) as usize;
/// Function events per thread buffer: two traced runs (one per round).
const FUNCTION_BUFFER_EVENTS: usize = 2 * calls_of(TRACED_ITERATIONS) as usize;
/// Rounds of the standalone programs (uftrace comparison).
const UFTRACE_ROUNDS: usize = 5;
/// Iterations of `benches/c/callers.c`: 2 traced calls each.
const CALLERS_ITERATIONS: u64 = 2_000_000;
/// The graph tracer's cost target per call, in TSC reads' costs: two reads
/// (entry and exit) and 15 % more: the clock is the floor, the rest is ours.
const GRAPH_COST_PER_TWO_TSC_READS: f64 = 1.15;
/// Bytes uftrace writes per traced call (an entry and an exit record).
const UFTRACE_BYTES_PER_CALL: u64 = 32;
const UFTRACE: &str = "uftrace";

const fn calls_of(iterations: u64) -> u64 {
    1 + 5 * iterations
}

fn main() {
    let tools = Toolchain::detect();
    fntrace::init().expect("fntrace::init");
    GRAPH_TRACER.set_buffer_events(GRAPH_BUFFER_EVENTS);
    FUNCTION_TRACER.set_buffer_events(FUNCTION_BUFFER_EVENTS);
    let site_forms = check_untraced_state();
    if let Ok(tracer) = std::env::var("FNTRACE_BENCH_LOOP") {
        return loop_one_tracer(&tracer);
    }
    let dispatch_only = std::env::var_os("FNTRACE_BENCH_DISPATCH").is_some();

    println!("fntrace overhead benchmark");
    println!("machine:   {}", machine_description());
    println!("toolchain: {}", tools.describe());
    println!(
        "clock:     {} (event timestamps)",
        if fntrace::stats().tsc_clock {
            "TSC"
        } else {
            "clock_gettime"
        }
    );
    println!("sites:     {site_forms}");
    if dispatch_only {
        println!(
            "method:    part 7 alone; load average before: {}",
            load_average()
        );
    } else {
        println!(
            "method:    median of {ROUNDS} rounds after {WARM_UP_ROUNDS} warm-up rounds; \
             {} calls per untraced run, {} per traced run; load average before: {}",
            calls_of(UNTRACED_ITERATIONS),
            calls_of(TRACED_ITERATIONS),
            load_average()
        );
    }
    println!();

    let started = Instant::now();
    if !dispatch_only {
        let in_process = measure_in_process();
        let uftrace = measure_uftrace(&tools);
        report(&in_process, &uftrace);
        println!();
        report_toggles();
        println!();
    }
    report_dispatch(&measure_dispatch());
    println!();
    println!(
        "benchmark time: {:.1} s; load average after: {}",
        started.elapsed().as_secs_f64(),
        load_average()
    );
}

/// `FNTRACE_BENCH_LOOP=graph|function|profile`: only that tracer's C run,
/// `FNTRACE_BENCH_LOOP_RUNS` times (default 50), each figure printed: a
/// steady loop to run under `perf record`, and a quick A/B figure.
/// `FNTRACE_BENCH_LOOP=profile/graph`: the two in turn (`loop_two_tracers`).
fn loop_one_tracer(tracer: &str) {
    let runs: usize = std::env::var("FNTRACE_BENCH_LOOP_RUNS")
        .ok()
        .and_then(|runs| runs.parse().ok())
        .unwrap_or(50);
    let filter = Filter::new().include("pie_*");
    if let Some((first, second)) = tracer.split_once('/') {
        return loop_two_tracers(first, second, runs, &filter);
    }
    fntrace::enable_with(tracer, &filter).expect("enabling the tracer");
    let mut cpu: Vec<f64> = (0..runs).map(|_| checked_c_run(tracer).cpu).collect();
    fntrace::disable(tracer).expect("disabling the tracer");
    cpu.sort_by(f64::total_cmp);
    println!(
        "{tracer}: {runs} runs, per call CPU: min {:.2} ns, median {:.2} ns, max {:.2} ns",
        cpu[0],
        cpu[runs / 2],
        cpu[runs - 1]
    );
}

/// `FNTRACE_BENCH_LOOP=profile/graph`: the two tracers' C runs in turn,
/// `runs` pairs, each enabled alone for its run: the median of the pairs'
/// ratios drifts less with the host than two separate loops' medians.
fn loop_two_tracers(first: &str, second: &str, runs: usize, filter: &Filter) {
    let one_run = |tracer: &str| -> f64 {
        fntrace::enable_with(tracer, filter).expect("enabling the tracer");
        let cost = checked_c_run(tracer);
        fntrace::disable(tracer).expect("disabling the tracer");
        cost.cpu
    };
    let pairs: Vec<(f64, f64)> = (0..runs)
        .map(|_| (one_run(first), one_run(second)))
        .collect();
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let ratios = pairs.iter().map(|(a, b)| a / b).collect();
    println!(
        "{first}/{second}: {runs} pairs, per call CPU median {:.2} / {:.2} ns, \
         median of the pairs' ratios {:.4}",
        median(pairs.iter().map(|p| p.0).collect()),
        median(pairs.iter().map(|p| p.1).collect()),
        median(ratios)
    );
}

/// One traced C run of [`TRACED_ITERATIONS`] on this thread under
/// `tracer` (already enabled), its events or counts checked.
fn checked_c_run(tracer: &str) -> Cost {
    let run = || {
        timed(TRACED_ITERATIONS, |n| {
            black_box(c_pie::run(n as i64));
        })
    };
    match tracer {
        "graph" => traced_c_run_checked_here(),
        "function" => function_checked(run),
        "profile" => profile_checked(c_pie::mid_address(), run),
        other => panic!("FNTRACE_BENCH_LOOP: unknown tracer {other}"),
    }
}

// ---------------------------------------------------------------------------
// Timing.

/// Nanoseconds per call of one run.
#[derive(Clone, Copy, Debug, Default)]
struct Cost {
    /// The running thread's CPU time.
    cpu: f64,
    /// Wall-clock time.
    wall: f64,
}

impl Cost {
    fn minus(self, other: Cost) -> Cost {
        Cost {
            cpu: self.cpu - other.cpu,
            wall: self.wall - other.wall,
        }
    }

    fn ratio(self, other: Cost) -> Cost {
        Cost {
            cpu: self.cpu / other.cpu,
            wall: self.wall / other.wall,
        }
    }
}

/// CPU time of the calling thread, in nanoseconds.
/// Page faults taken inside timed runs since the warm-up rounds ended. A
/// fault there (a trace buffer page touched for the first time) would be
/// counted as tracer cost; the report shows this count.
static TIMED_PAGE_FAULTS: AtomicU64 = AtomicU64::new(0);

/// Page faults of the calling thread so far.
fn thread_page_faults() -> u64 {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_THREAD) failed");
    (usage.ru_minflt + usage.ru_majflt) as u64
}

/// Runs `workload(iterations)` once on this thread; its cost per call.
fn timed(iterations: u64, workload: impl Fn(u64)) -> Cost {
    timed_calls(calls_of(iterations), || workload(black_box(iterations)))
}

/// Runs `workload` (which makes `calls` traced calls) once on this
/// thread; its cost per call.
fn timed_calls(calls: u64, workload: impl FnOnce()) -> Cost {
    let faults_before = thread_page_faults();
    let (wall_start, cpu_start) = (Instant::now(), thread_cpu_ns());
    workload();
    let cpu = thread_cpu_ns() - cpu_start;
    let wall = wall_start.elapsed().as_nanos();
    TIMED_PAGE_FAULTS.fetch_add(thread_page_faults() - faults_before, Ordering::Relaxed);
    Cost {
        cpu: cpu as f64 / calls as f64,
        wall: wall as f64 / calls as f64,
    }
}

/// The cost of one TSC read (`rdtsc` back to back, throughput) on this
/// thread. The graph tracer reads it twice per call (entry and exit); the
/// host's slow phases show first in this figure.
fn tsc_read_cost() -> Cost {
    const READS: u64 = 2_000_000;
    let (wall_start, cpu_start) = (Instant::now(), thread_cpu_ns());
    let mut sink = 0u64;
    for _ in 0..READS {
        // SAFETY: rdtsc exists on every x86-64 CPU and has no side effects.
        sink = sink.wrapping_add(unsafe { std::arch::x86_64::_rdtsc() });
    }
    black_box(sink);
    let cpu = thread_cpu_ns() - cpu_start;
    let wall = wall_start.elapsed().as_nanos();
    Cost {
        cpu: cpu as f64 / READS as f64,
        wall: wall as f64 / READS as f64,
    }
}

/// Pins the calling thread to `cpu` if the machine has it and allows it.
fn pin_to_cpu(cpu: usize) {
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    if cpu >= cpus {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays inside it
    // (cpu < available CPUs < CPU_SETSIZE); sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The costs of one measurement, one per round.
#[derive(Default)]
struct Series(Vec<Cost>);

impl Series {
    fn push(&mut self, cost: Cost) {
        self.0.push(cost);
    }

    fn median(&self) -> Cost {
        Cost {
            cpu: median(self.0.iter().map(|c| c.cpu)),
            wall: median(self.0.iter().map(|c| c.wall)),
        }
    }

    /// The lower quartile: the cost in the host's quiet phases, when at
    /// least a quarter of the rounds ran in one.
    fn lower_quartile(&self) -> Cost {
        Cost {
            cpu: lower_quartile(self.0.iter().map(|c| c.cpu)),
            wall: lower_quartile(self.0.iter().map(|c| c.wall)),
        }
    }

    /// Smallest and largest CPU cost.
    fn cpu_range(&self) -> (f64, f64) {
        self.0
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |r, c| {
                (r.0.min(c.cpu), r.1.max(c.cpu))
            })
    }
}

fn lower_quartile(values: impl Iterator<Item = f64>) -> f64 {
    let mut sorted: Vec<f64> = values.collect();
    assert!(!sorted.is_empty(), "quartile of nothing");
    sorted.sort_by(f64::total_cmp);
    sorted[(sorted.len() - 1) / 4]
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut sorted: Vec<f64> = values.collect();
    assert!(!sorted.is_empty(), "median of nothing");
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

// ---------------------------------------------------------------------------
// In-process measurements.

#[derive(Default)]
struct InProcess {
    c_nopped: Series,
    c_nopmcount: Series,
    c_plain: Series,
    c_fentry_nopped: Series,
    rust_nopped: Series,
    c_graph: Series,
    rust_graph: Series,
    c_function: Series,
    c_profile: Series,
    rust_profile: Series,
    tsc_read: Series,
    nopped_one_thread: Series,
    nopped_two_threads: Series,
    graph_one_thread: Series,
    graph_two_threads: Series,
}

fn measure_in_process() -> InProcess {
    let workers = [
        Worker::spawn("bench-worker-a", 0),
        Worker::spawn("bench-worker-b", 1),
    ];
    let graph_filter = Filter::new()
        .include("pie_*")
        .include("fixture_rust_workload::*");
    let function_filter = Filter::new().include("pie_*");
    let mut figures = InProcess::default();
    let mut warm_up = InProcess::default();
    for round in 0..WARM_UP_ROUNDS + ROUNDS {
        if round == WARM_UP_ROUNDS {
            TIMED_PAGE_FAULTS.store(0, Ordering::Relaxed);
        }
        let target = if round < WARM_UP_ROUNDS {
            &mut warm_up
        } else {
            &mut figures
        };

        target.tsc_read.push(tsc_read_cost());
        target.c_nopped.push(timed(UNTRACED_ITERATIONS, |n| {
            black_box(c_pie::run(n as i64));
        }));
        target.c_nopmcount.push(timed(UNTRACED_ITERATIONS, |n| {
            black_box(c_nopmcount::run(n as i64));
        }));
        target.c_plain.push(timed(UNTRACED_ITERATIONS, |n| {
            black_box(c_plain::run(n as i64));
        }));
        target.c_fentry_nopped.push(timed(UNTRACED_ITERATIONS, |n| {
            black_box(c_fentry_nopie::run(n as i64));
        }));
        target.rust_nopped.push(timed(UNTRACED_ITERATIONS, |n| {
            black_box(rust::run(n));
        }));
        target
            .nopped_one_thread
            .push(c_runs_on(&workers[..1], UNTRACED_ITERATIONS).1);
        target
            .nopped_two_threads
            .push(c_runs_on(&workers, UNTRACED_ITERATIONS).1);

        fntrace::enable_with("graph", &graph_filter).expect("enabling the graph tracer");
        target.c_graph.push(traced_c_run_checked_here());
        target.rust_graph.push(graph_checked(|| {
            let cost = timed(TRACED_ITERATIONS, |n| {
                black_box(rust::run(n));
            });
            (vec![fntrace::current_tid()], cost)
        }));
        target.graph_one_thread.push(graph_checked(|| {
            c_runs_on(&workers[..1], TRACED_ITERATIONS)
        }));
        target
            .graph_two_threads
            .push(graph_checked(|| c_runs_on(&workers, TRACED_ITERATIONS)));
        fntrace::disable("graph").expect("disabling the graph tracer");

        fntrace::enable_with("function", &function_filter).expect("enabling the function tracer");
        target.c_function.push(function_checked(|| {
            timed(TRACED_ITERATIONS, |n| {
                black_box(c_pie::run(n as i64));
            })
        }));
        fntrace::disable("function").expect("disabling the function tracer");

        fntrace::enable_with("profile", &graph_filter).expect("enabling the profile tracer");
        target
            .c_profile
            .push(profile_checked(c_pie::mid_address(), || {
                timed(TRACED_ITERATIONS, |n| {
                    black_box(c_pie::run(n as i64));
                })
            }));
        target
            .rust_profile
            .push(profile_checked(rust::mid as *const () as usize, || {
                timed(TRACED_ITERATIONS, |n| {
                    black_box(rust::run(n));
                })
            }));
        fntrace::disable("profile").expect("disabling the profile tracer");
    }
    figures
}

/// Runs `traced_run` (one traced run of [`TRACED_ITERATIONS`] on this
/// thread) with the profile reset before, and checks that the profile
/// counted exactly [`TRACED_ITERATIONS`] calls of `mid` and nothing lost.
fn profile_checked(mid: usize, traced_run: impl FnOnce() -> Cost) -> Cost {
    PROFILE_TRACER.reset();
    let cost = traced_run();
    let snapshot = PROFILE_TRACER.snapshot();
    let counted: u64 = snapshot
        .functions
        .iter()
        .filter(|f| f.function == mid)
        .map(|f| f.durations.count())
        .sum();
    assert_eq!(counted, TRACED_ITERATIONS, "profile: calls of mid");
    assert_eq!(snapshot.not_kept, Default::default(), "profile: not kept");
    cost
}

/// The traced C run on this thread, checked.
fn traced_c_run_checked_here() -> Cost {
    graph_checked(|| {
        let cost = timed(TRACED_ITERATIONS, |n| {
            black_box(c_pie::run(n as i64));
        });
        (vec![fntrace::current_tid()], cost)
    })
}

/// Runs the C workload (`iterations`) on each of `workers` at once
/// (released together); returns their thread ids and the mean of their
/// costs.
fn c_runs_on(workers: &[Worker], iterations: u64) -> (Vec<u32>, Cost) {
    let start_together = Arc::new(Barrier::new(workers.len()));
    let pending: Vec<_> = workers
        .iter()
        .map(|worker| {
            let start_together = Arc::clone(&start_together);
            worker.start(move || {
                start_together.wait();
                let cost = timed(iterations, |n| {
                    black_box(c_pie::run(n as i64));
                });
                (fntrace::current_tid(), cost)
            })
        })
        .collect();
    let (tids, costs): (Vec<u32>, Vec<Cost>) = pending
        .into_iter()
        .map(|result| result.recv().expect("worker thread died"))
        .unzip();
    let threads = costs.len() as f64;
    let mean = Cost {
        cpu: costs.iter().map(|c| c.cpu).sum::<f64>() / threads,
        wall: costs.iter().map(|c| c.wall).sum::<f64>() / threads,
    };
    (tids, mean)
}

/// Runs `traced_runs` (one traced run of [`TRACED_ITERATIONS`] on each
/// thread it returns), then takes the graph trace and checks it: exactly
/// two events (entry, exit) per call for each of those threads, none from
/// any other thread, none lost.
fn graph_checked(traced_runs: impl FnOnce() -> (Vec<u32>, Cost)) -> Cost {
    graph_checked_calls(calls_of(TRACED_ITERATIONS), traced_runs)
}

/// [`graph_checked`] for runs of `calls` traced calls each.
fn graph_checked_calls(calls: u64, traced_runs: impl FnOnce() -> (Vec<u32>, Cost)) -> Cost {
    let (tids, cost) = traced_runs();
    let trace = GRAPH_TRACER.take_trace();
    assert_eq!(
        trace.lost(),
        0,
        "the graph tracer lost events (buffer of {GRAPH_BUFFER_EVENTS} events too small?)"
    );
    let expected = 2 * calls as usize;
    for tid in &tids {
        let events: usize = trace
            .threads
            .iter()
            .filter(|thread| thread.tid == *tid)
            .map(|thread| thread.events.len())
            .sum();
        assert_eq!(events, expected, "graph events of thread {tid}");
    }
    let all: usize = trace.threads.iter().map(|t| t.events.len()).sum();
    assert_eq!(all, expected * tids.len(), "graph events of other threads");
    cost
}

/// Runs `traced_run` (one traced run of [`TRACED_ITERATIONS`] on this
/// thread) with the function tracer, then takes and checks its events.
fn function_checked(traced_run: impl FnOnce() -> Cost) -> Cost {
    let cost = traced_run();
    let events = FUNCTION_TRACER.take_events();
    assert_eq!(
        FUNCTION_TRACER.lost_events(),
        0,
        "function tracer lost events"
    );
    assert_eq!(
        events.len() as u64,
        calls_of(TRACED_ITERATIONS),
        "function tracer events"
    );
    cost
}

/// Checks that nothing is patched and the sites are where the figures
/// assume; describes them.
fn check_untraced_state() -> String {
    let stats = fntrace::stats();
    assert_eq!(stats.patched_sites, 0, "sites patched before any enable");
    let form_of = |function: usize, what: &str| {
        let site =
            fntrace::site_of(function).unwrap_or_else(|| panic!("no call site found in {what}"));
        assert!(!site.patched, "{what}: site is patched");
        let form = site
            .form
            .unwrap_or_else(|| panic!("{what}: call site not recognised"));
        format!("{form:?} ({} bytes)", site.original.len())
    };
    for (function, what) in [
        (c_nopmcount::leaf_address(), "nopmcount_leaf"),
        (c_plain::leaf_address(), "plain_leaf"),
    ] {
        assert!(
            fntrace::site_of(function).is_none(),
            "{what} should have no call site fntrace knows"
        );
    }
    format!(
        "C -pg PIE {}, C -pg -mfentry non-PIE {}, Rust {}; all NOPed by fntrace::init",
        form_of(c_pie::leaf_address(), "pie_leaf"),
        form_of(c_fentry_nopie::leaf_address(), "fentry_nopie_leaf"),
        form_of(rust::leaf as *const () as usize, "rust leaf"),
    )
}

type Job = Box<dyn FnOnce() + Send>;

/// A long-lived thread running jobs one at a time: its trace buffer and
/// shadow stack are made once, in the warm-up rounds, not in a timed run.
struct Worker {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Worker {
    /// A worker pinned to CPU `cpu` (when the machine has that many), so
    /// that one-thread and two-thread runs compare the same placement.
    fn spawn(name: &str, cpu: usize) -> Worker {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let thread = thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                pin_to_cpu(cpu);
                for job in inbox {
                    job();
                }
            })
            .expect("spawning a worker thread");
        Worker {
            jobs: Some(jobs),
            thread: Some(thread),
        }
    }

    /// Starts `job` on the worker; its result arrives on the receiver.
    fn start<R: Send + 'static>(
        &self,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> mpsc::Receiver<R> {
        let (result_tx, result_rx) = mpsc::channel();
        let job: Job = Box::new(move || {
            let _ = result_tx.send(job());
        });
        self.jobs
            .as_ref()
            .expect("worker is running")
            .send(job)
            .expect("worker thread died");
        result_rx
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// ---------------------------------------------------------------------------
// uftrace comparison.

struct UftraceFigures {
    /// Added cost per call under `uftrace record`, fixed costs (start-up,
    /// writing out) excluded. CPU: the traced program and uftrace's
    /// recorder together.
    record: Cost,
    /// `uftrace record`'s fixed cost per run, milliseconds.
    fixed_ms: Cost,
    /// The `-pg` build run without uftrace (glibc's `mcount`), added cost
    /// per call, for reference.
    glibc_mcount: Cost,
    /// The `-pg` build with `libfntrace.so` preloaded and nothing asked
    /// (its sites call fntrace's `mcount`, which returns at once), added
    /// cost per call.
    preloaded_idle: Cost,
    /// The same with `FNTRACE_CONTROL` (its sites NOPs from start-up).
    preloaded_control: Cost,
    /// Graph cost per traced call of `callers.c` under `fntrace record
    /// --flight` (16 callers of a leaf, in a random order).
    callers_graph: Cost,
    calls: u64,
}

/// Time of a child process: wall, and CPU of it and its descendants.
fn run_timed(command: &mut Command) -> Cost {
    let cpu_start = children_cpu_ns();
    let start = Instant::now();
    let status = command
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    let wall = start.elapsed().as_nanos() as f64;
    assert!(status.success(), "{command:?} failed: {status}");
    Cost {
        cpu: (children_cpu_ns() - cpu_start) as f64,
        wall,
    }
}

/// Builds the standalone program with and without `-pg` and times it
/// untraced, under `uftrace record`, and with glibc's `mcount`, each with
/// [`TRACED_ITERATIONS`] and with 0 iterations: the difference of the two
/// leaves out the fixed costs of starting and ending the process.
fn measure_uftrace(tools: &Toolchain) -> UftraceFigures {
    let dir = TempDir::new("fntrace-bench-uftrace");
    let plain = build_standalone(dir.path(), "workload_plain", &[]);
    let instrumented = build_standalone(dir.path(), "workload_pg", &["-pg"]);
    let callers_plain = build_bench_c(dir.path(), "callers.c", "callers_plain", &[]);
    let callers_pg = build_bench_c(dir.path(), "callers.c", "callers_pg", &["-pg"]);
    let flight = dir.path().join("flight.data");
    let callers_recorded = || {
        let mut command = Command::new(fntrace_cli());
        command
            .args(["record", "--flight", "1M", "-o"])
            .arg(&flight)
            .arg("--")
            .arg(&callers_pg);
        command
    };
    let library = fntrace_cli().with_file_name("libfntrace.so");
    let preloaded = |control: bool| {
        let mut command = Command::new(&instrumented);
        command.env("LD_PRELOAD", &library);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("FNTRACE") {
                command.env_remove(name);
            }
        }
        if control {
            command.env("FNTRACE_CONTROL", dir.path().join("ctl.sock"));
        }
        command
    };
    let data = dir.path().join("uftrace.data");
    // main + run + 5 per iteration.
    let calls = 1 + calls_of(TRACED_ITERATIONS);

    let time = |iterations: u64, mut command: Command| {
        // The -pg build writes gmon.out into its working directory.
        run_timed(command.arg(iterations.to_string()).current_dir(dir.path()))
    };
    let uftrace_record = || {
        let mut command = Command::new(&tools.uftrace);
        command
            .args(["record", "--no-pager", "-d"])
            .arg(&data)
            .arg(&instrumented);
        command
    };
    let mut plain_work = Series::default();
    let mut glibc_work = Series::default();
    let mut idle_work = Series::default();
    let mut control_work = Series::default();
    let mut uftrace_work = Series::default();
    let mut uftrace_fixed = Series::default();
    let mut callers_plain_work = Series::default();
    let mut callers_work = Series::default();
    for _ in 0..UFTRACE_ROUNDS {
        let callers_full = time(CALLERS_ITERATIONS, callers_recorded());
        std::fs::remove_dir_all(&flight).expect("removing the flight recording");
        let callers_empty = time(0, callers_recorded());
        std::fs::remove_dir_all(&flight).expect("removing the flight recording");
        callers_work.push(callers_full.minus(callers_empty));
        callers_plain_work.push(
            time(CALLERS_ITERATIONS, Command::new(&callers_plain))
                .minus(time(0, Command::new(&callers_plain))),
        );
        let plain_full = time(TRACED_ITERATIONS, Command::new(&plain));
        let plain_empty = time(0, Command::new(&plain));
        let glibc_full = time(TRACED_ITERATIONS, Command::new(&instrumented));
        let glibc_empty = time(0, Command::new(&instrumented));
        let idle_full = time(TRACED_ITERATIONS, preloaded(false));
        let idle_empty = time(0, preloaded(false));
        let control_full = time(TRACED_ITERATIONS, preloaded(true));
        let control_empty = time(0, preloaded(true));
        let uftrace_full = time(TRACED_ITERATIONS, uftrace_record());
        check_uftrace_data(&data, calls);
        std::fs::remove_dir_all(&data).expect("removing uftrace data");
        let uftrace_empty = time(0, uftrace_record());
        std::fs::remove_dir_all(&data).expect("removing uftrace data");

        plain_work.push(plain_full.minus(plain_empty));
        glibc_work.push(glibc_full.minus(glibc_empty));
        idle_work.push(idle_full.minus(idle_empty));
        control_work.push(control_full.minus(control_empty));
        uftrace_work.push(uftrace_full.minus(uftrace_empty));
        uftrace_fixed.push(uftrace_empty.minus(plain_empty));
    }
    let per_call = |work: Cost| Cost {
        cpu: work.cpu / calls as f64,
        wall: work.wall / calls as f64,
    };
    let fixed = uftrace_fixed.median();
    UftraceFigures {
        record: per_call(uftrace_work.median().minus(plain_work.median())),
        fixed_ms: Cost {
            cpu: fixed.cpu / 1e6,
            wall: fixed.wall / 1e6,
        },
        glibc_mcount: per_call(glibc_work.median().minus(plain_work.median())),
        preloaded_idle: per_call(idle_work.median().minus(plain_work.median())),
        preloaded_control: per_call(control_work.median().minus(plain_work.median())),
        callers_graph: {
            let work = callers_work.median().minus(callers_plain_work.median());
            let traced_calls = 2.0 * CALLERS_ITERATIONS as f64;
            Cost {
                cpu: work.cpu / traced_calls,
                wall: work.wall / traced_calls,
            }
        },
        calls,
    }
}

/// uftrace must have recorded every call: its per-thread `<tid>.dat` files
/// hold an entry and an exit record per call.
fn check_uftrace_data(data: &Path, calls: u64) {
    let bytes: u64 = std::fs::read_dir(data)
        .unwrap_or_else(|e| panic!("uftrace wrote no data directory {data:?}: {e}"))
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.strip_suffix(".dat")
                .is_some_and(|tid| tid.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|entry| entry.metadata().map_or(0, |m| m.len()))
        .sum();
    assert!(
        bytes >= UFTRACE_BYTES_PER_CALL * calls,
        "uftrace recorded {bytes} bytes for {calls} calls: not every call was traced"
    );
}

// ---------------------------------------------------------------------------
// Machine, tools, report.

struct Toolchain {
    rustc: String,
    gcc: String,
    uftrace_version: String,
    uftrace: PathBuf,
}

impl Toolchain {
    /// Versions of the tools; fails when gcc or uftrace is missing.
    fn detect() -> Toolchain {
        let first_line = |program: &str, arg: &str| -> Option<String> {
            let output = Command::new(program).arg(arg).output().ok()?;
            output.status.success().then(|| {
                String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_string()
            })
        };
        let uftrace_version = first_line(UFTRACE, "--version").unwrap_or_else(|| {
            panic!(
                "`{UFTRACE}` is not installed or does not run: this benchmark compares \
                 fntrace with `uftrace record` and never skips that; install it \
                 (Debian: apt-get install uftrace)"
            )
        });
        let gcc = first_line("gcc", "--version")
            .unwrap_or_else(|| panic!("gcc is not installed: the standalone workload needs it"));
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
        let rustc = first_line(&rustc, "--version").unwrap_or_else(|| "rustc: unknown".into());
        Toolchain {
            rustc,
            gcc,
            uftrace_version,
            uftrace: PathBuf::from(UFTRACE),
        }
    }

    fn describe(&self) -> String {
        format!("{}; {}; {}", self.rustc, self.gcc, self.uftrace_version)
    }
}

/// One line of the table.
#[derive(Default)]
struct Line {
    label: String,
    cpu: String,
    spread: String,
    wall: String,
    target: String,
    verdict: &'static str,
}

impl Line {
    fn measured(label: impl Into<String>, series: &Series) -> Line {
        let median = series.median();
        let (low, high) = series.cpu_range();
        Line {
            label: label.into(),
            cpu: format!("{:.2} ns", median.cpu),
            spread: format!("{low:.1}..{high:.1}"),
            wall: format!("{:.2} ns", median.wall),
            ..Line::default()
        }
    }

    fn nanoseconds(label: impl Into<String>, cost: Cost) -> Line {
        Line {
            label: label.into(),
            cpu: format!("{:.2} ns", cost.cpu),
            wall: format!("{:.2} ns", cost.wall),
            ..Line::default()
        }
    }

    fn ratio(label: impl Into<String>, ratio: Cost) -> Line {
        Line {
            label: label.into(),
            cpu: format!("{:.3}", ratio.cpu),
            wall: format!("{:.3}", ratio.wall),
            ..Line::default()
        }
    }

    fn with_target(self, target: impl Into<String>, pass: bool, tally: &mut Tally) -> Line {
        Line {
            target: target.into(),
            verdict: tally.verdict(pass),
            ..self
        }
    }
}

#[derive(Default)]
struct Tally {
    targets: usize,
    met: usize,
}

impl Tally {
    fn verdict(&mut self, pass: bool) -> &'static str {
        self.targets += 1;
        if pass {
            self.met += 1;
            "PASS"
        } else {
            "MISS"
        }
    }
}

/// The graph cost lines (judged median, quiet-phase reference) of a traced
/// series against its NOPed one. The target: at most 1.15
/// times the cost of the two TSC reads a traced call makes (`tsc_read`,
/// measured in the same rounds).
fn push_graph_cost(
    lines: &mut Vec<Line>,
    tally: &mut Tally,
    traced: &Series,
    nopped: &Series,
    tsc_read: Cost,
) {
    let cost = traced.median().minus(nopped.median());
    let limit = GRAPH_COST_PER_TWO_TSC_READS * 2.0 * tsc_read.cpu;
    lines.push(
        Line::nanoseconds("  graph cost: traced - NOPed", cost).with_target(
            format!("<= {limit:.1} ns"),
            cost.cpu <= limit,
            tally,
        ),
    );
    lines.push(Line::nanoseconds(
        "  same, quiet phase (lower quartiles, ref.)",
        traced.lower_quartile().minus(nopped.lower_quartile()),
    ));
}

fn report(figures: &InProcess, uftrace: &UftraceFigures) {
    let mut tally = Tally::default();
    let mut lines = Vec::new();

    // 1. Untraced.
    let c_nopped = figures.c_nopped.median();
    let nop_ratio = c_nopped.ratio(figures.c_nopmcount.median());
    lines.push(Line::measured(
        "1 C -pg PIE, NOPed by fntrace",
        &figures.c_nopped,
    ));
    lines.push(Line::measured(
        "  C -pg -mfentry -mnop-mcount (gcc's NOPs)",
        &figures.c_nopmcount,
    ));
    lines.push(Line::measured("  C without -pg", &figures.c_plain));
    lines.push(Line::measured(
        "  C -pg -mfentry non-PIE, NOPed (reference)",
        &figures.c_fentry_nopped,
    ));
    lines.push(
        Line::ratio("  ratio NOPed -pg / -mnop-mcount", nop_ratio).with_target(
            "<= 1.10",
            nop_ratio.cpu <= 1.10,
            &mut tally,
        ),
    );
    lines.push(Line::ratio(
        "  ratio NOPed -pg / without -pg",
        c_nopped.ratio(figures.c_plain.median()),
    ));
    // Both have a 5-byte NOP at offset 0: the same code but for who wrote
    // the NOP, so code layout weighs less here than in the target ratio.
    lines.push(Line::ratio(
        "  ratio NOPed -mfentry / -mnop-mcount (ref.)",
        figures
            .c_fentry_nopped
            .median()
            .ratio(figures.c_nopmcount.median()),
    ));

    // 2, 3. Graph tracer.
    let c_graph = figures.c_graph.median().minus(c_nopped);
    lines.push(Line::measured("2 C, graph tracer on", &figures.c_graph));
    let tsc_read = figures.tsc_read.median();
    push_graph_cost(
        &mut lines,
        &mut tally,
        &figures.c_graph,
        &figures.c_nopped,
        tsc_read,
    );
    lines.push(Line::measured(
        "3 Rust -Zinstrument-mcount, NOPed",
        &figures.rust_nopped,
    ));
    lines.push(Line::measured(
        "  Rust, graph tracer on",
        &figures.rust_graph,
    ));
    push_graph_cost(
        &mut lines,
        &mut tally,
        &figures.rust_graph,
        &figures.rust_nopped,
        tsc_read,
    );

    // For reference: the graph tracer reads the TSC at entry and at exit.
    // Back to back, one read costs this much here (a throughput figure:
    // inside the tracer its latency overlaps other work).
    lines.push(Line::nanoseconds(
        "  one TSC read, back to back (ref.)",
        tsc_read,
    ));

    // 4. Function tracer.
    lines.push(Line::measured(
        "4 C, function tracer on",
        &figures.c_function,
    ));
    lines.push(Line::nanoseconds(
        "  function cost: traced - NOPed (ref.)",
        figures.c_function.median().minus(c_nopped),
    ));

    // The profile tracer (its own fast path, asm/x86_64/profile.S), beside
    // the graph tracer's cost on the same calls (its target: no more).
    let c_profile = figures.c_profile.median().minus(c_nopped);
    lines.push(Line::measured("  C, profile tracer on", &figures.c_profile));
    lines.push(
        Line::nanoseconds("  profile cost: traced - NOPed", c_profile).with_target(
            "<= graph's",
            c_profile.cpu <= c_graph.cpu,
            &mut tally,
        ),
    );
    lines.push(Line::measured(
        "  Rust, profile tracer on",
        &figures.rust_profile,
    ));
    let rust_nopped = figures.rust_nopped.median();
    let rust_profile = figures.rust_profile.median().minus(rust_nopped);
    lines.push(Line::nanoseconds(
        "  profile cost, Rust: traced - NOPed",
        rust_profile,
    ));
    lines.push(Line::ratio(
        "  ratio of costs, profile / graph, C",
        c_profile.ratio(c_graph),
    ));
    lines.push(Line::ratio(
        "  ratio of costs, profile / graph, Rust",
        rust_profile.ratio(figures.rust_graph.median().minus(rust_nopped)),
    ));
    // Both tracers are bounded by the clock (two TSC reads a call), so
    // the profile's cost is also shown against that bound.
    let two_tsc_reads = Cost {
        cpu: 2.0 * tsc_read.cpu,
        wall: 2.0 * tsc_read.wall,
    };
    lines.push(Line::ratio(
        "  profile cost / two TSC reads, C (ref.)",
        c_profile.ratio(two_tsc_reads),
    ));
    lines.push(Line::ratio(
        "  profile cost / two TSC reads, Rust (ref.)",
        rust_profile.ratio(two_tsc_reads),
    ));

    // 5. Threads: the tracing cost (traced - NOPed, both measured with the
    // same number of threads) of two threads at once against one. The
    // NOPed ratio shows what running two threads costs this machine
    // anyway (shared caches, a host that may not give two full cores).
    let one_thread = figures
        .graph_one_thread
        .median()
        .minus(figures.nopped_one_thread.median());
    let two_threads = figures
        .graph_two_threads
        .median()
        .minus(figures.nopped_two_threads.median());
    let thread_ratio = two_threads.ratio(one_thread);
    lines.push(Line::measured(
        "5 C NOPed, 1 worker thread",
        &figures.nopped_one_thread,
    ));
    lines.push(Line::measured(
        "  C NOPed, 2 threads at once, per thread",
        &figures.nopped_two_threads,
    ));
    lines.push(Line::measured(
        "  C graph, 1 worker thread",
        &figures.graph_one_thread,
    ));
    lines.push(Line::measured(
        "  C graph, 2 threads at once, per thread",
        &figures.graph_two_threads,
    ));
    lines.push(Line::nanoseconds("  graph cost, 1 thread", one_thread));
    lines.push(Line::nanoseconds(
        "  graph cost, 2 threads at once",
        two_threads,
    ));
    lines.push(
        Line::ratio("  ratio of costs, 2 threads / 1", thread_ratio).with_target(
            "<= 1.10",
            thread_ratio.cpu <= 1.10,
            &mut tally,
        ),
    );
    lines.push(Line::ratio(
        "  ratio NOPed, 2 threads / 1 (ref.)",
        figures
            .nopped_two_threads
            .median()
            .ratio(figures.nopped_one_thread.median()),
    ));

    // 6. uftrace. Its CPU column counts its recorder too.
    let speedup = uftrace.record.ratio(c_graph);
    lines.push(Line::nanoseconds(
        "6 uftrace record, cost per call",
        uftrace.record,
    ));
    lines.push(Line {
        label: "  uftrace record, fixed cost per run".into(),
        cpu: format!("{:.1} ms", uftrace.fixed_ms.cpu),
        wall: format!("{:.1} ms", uftrace.fixed_ms.wall),
        ..Line::default()
    });
    lines.push(Line::nanoseconds(
        "  -pg with glibc's mcount, cost (ref.)",
        uftrace.glibc_mcount,
    ));
    lines.push(Line::nanoseconds(
        "  -pg, libfntrace.so preloaded, idle (ref.)",
        uftrace.preloaded_idle,
    ));
    lines.push(Line::nanoseconds(
        "  same with FNTRACE_CONTROL: NOPs (ref.)",
        uftrace.preloaded_control,
    ));
    lines.push(Line::nanoseconds(
        "  graph, 16 callers in random order (ref.)",
        uftrace.callers_graph,
    ));
    // (No target against uftrace: the clock bounds fntrace's cost, so the
    // targets are stated against the TSC reads; a reference here.)
    lines.push(Line {
        label: "  uftrace / fntrace graph (C) cost (ref.)".into(),
        cpu: format!("{:.1}x", speedup.cpu),
        wall: format!("{:.1}x", speedup.wall),
        ..Line::default()
    });

    print_lines(&lines);
    println!();
    println!(
        "Targets are judged on the CPU column (the running thread's CPU time); the graph cost's is"
    );
    println!(
        "{GRAPH_COST_PER_TWO_TSC_READS} x two TSC reads (issue 22). In 6, uftrace's CPU column counts the traced"
    );
    println!("program and uftrace's recorder. Per call = run time / calls (1 + 5n). Targets use medians; the lower");
    println!("quartiles show the host's quiet phases (its phases switch within milliseconds).");
    println!(
        "uftrace: {} calls of a standalone gcc -O2 -pg build; (run under `uftrace record` - run",
        uftrace.calls
    );
    println!(
        "of the same program built without -pg), each less the same with 2 calls; median of {UFTRACE_ROUNDS}."
    );
    println!(
        "Page faults inside the timed in-process runs after warm-up: {}.",
        TIMED_PAGE_FAULTS.load(Ordering::Relaxed)
    );
    println!("targets met: {} of {}", tally.met, tally.targets);
}

/// The table's header and lines.
fn print_lines(lines: &[Line]) {
    println!(
        "{:<44} {:>11} {:>13} {:>11}  {:>10}  result",
        "per call", "CPU median", "CPU min..max", "wall median", "target"
    );
    for line in lines {
        println!(
            "{:<44} {:>11} {:>13} {:>11}  {:>10}  {}",
            line.label, line.cpu, line.spread, line.wall, line.target, line.verdict
        );
    }
}

// ---------------------------------------------------------------------------
// A dispatcher of 1,000 callees: one caller whose calls
// go to 1,000 distinct functions, as an interpreter's or a message loop's
// do. The profile tracer finds each call's path under its caller's; its
// cost per call must not grow with the caller's number of callees.

/// Callee calls per dispatcher run (the dispatcher's own call besides):
/// 2,000,002 graph events, within [`GRAPH_BUFFER_EVENTS`].
const DISPATCH_CALLS: u64 = 1_000_000;
/// The random order's seed (`c_dispatch::random_counts` computes it too).
const DISPATCH_SEED: u64 = 0x3807;
/// The target: the profile's cost per call at most this times graph's, in
/// both orders (its call-trie lookup must not grow with the callees).
const DISPATCH_PROFILE_PER_GRAPH: f64 = 1.2;
/// Rounds of the dispatcher's measurements (after [`WARM_UP_ROUNDS`]):
/// more than [`ROUNDS`], its runs being short and the ratio the figure.
const DISPATCH_ROUNDS: usize = 31;

/// The order in which the dispatcher calls its callees: in turn among
/// the first N of them, or drawn at random among all.
#[derive(Clone, Copy)]
enum Order {
    RoundRobin(usize),
    Random,
}

impl Order {
    /// Judged: all callees in turn and at random; for reference, in turn
    /// among 10 and 100 (the cost must not grow with the callees).
    const ALL: [Order; 4] = [
        Order::RoundRobin(10),
        Order::RoundRobin(100),
        Order::RoundRobin(c_dispatch::CALLEES),
        Order::Random,
    ];

    fn name(self) -> String {
        match self {
            Order::RoundRobin(c_dispatch::CALLEES) => "round robin".into(),
            Order::RoundRobin(among) => format!("round robin, {among}"),
            Order::Random => "random order".into(),
        }
    }

    /// Whether the target applies (1,000 callees).
    fn judged(self) -> bool {
        !matches!(self, Order::RoundRobin(among) if among < c_dispatch::CALLEES)
    }

    /// One run: [`DISPATCH_CALLS`] + 1 traced calls.
    fn run(self, build: &c_dispatch::Build) {
        match self {
            Order::RoundRobin(among) => {
                black_box(build.round_robin_among(DISPATCH_CALLS as i64, among))
            }
            Order::Random => black_box(build.random_order(DISPATCH_CALLS as i64, DISPATCH_SEED)),
        };
    }

    /// Calls of each callee in one run.
    fn counts(self) -> Vec<u64> {
        match self {
            Order::RoundRobin(among) => c_dispatch::round_robin_among_counts(DISPATCH_CALLS, among),
            Order::Random => c_dispatch::random_counts(DISPATCH_CALLS, DISPATCH_SEED),
        }
    }

    fn dispatcher(self, build: &c_dispatch::Build) -> usize {
        match self {
            Order::RoundRobin(_) => build.round_robin_address(),
            Order::Random => build.random_order_address(),
        }
    }
}

/// One order's runs: untraced (sites NOPed), under graph, under profile.
#[derive(Default)]
struct DispatchSeries {
    nopped: Series,
    graph: Series,
    profile: Series,
}

/// Rounds as in [`measure_in_process`]: each runs both orders NOPed, under
/// graph and under profile, one after the other on this thread (so a
/// round's three runs share the host's phase), every traced run checked.
fn measure_dispatch() -> [DispatchSeries; 4] {
    let build = &c_dispatch::builds()[0];
    let filter = Filter::new().include("dsp_*");
    let calls = DISPATCH_CALLS + 1;
    let mut figures: [DispatchSeries; 4] = Default::default();
    let mut warm_up: [DispatchSeries; 4] = Default::default();
    for round in 0..WARM_UP_ROUNDS + DISPATCH_ROUNDS {
        if round == WARM_UP_ROUNDS {
            TIMED_PAGE_FAULTS.store(0, Ordering::Relaxed);
        }
        let target = if round < WARM_UP_ROUNDS {
            &mut warm_up
        } else {
            &mut figures
        };
        for (order, series) in Order::ALL.into_iter().zip(target.iter_mut()) {
            series.nopped.push(timed_calls(calls, || order.run(build)));

            fntrace::enable_with("graph", &filter).expect("enabling the graph tracer");
            series.graph.push(graph_checked_calls(calls, || {
                let cost = timed_calls(calls, || order.run(build));
                (vec![fntrace::current_tid()], cost)
            }));
            fntrace::disable("graph").expect("disabling the graph tracer");

            fntrace::enable_with("profile", &filter).expect("enabling the profile tracer");
            series
                .profile
                .push(dispatch_profile_checked(build, order, || {
                    timed_calls(calls, || order.run(build))
                }));
            fntrace::disable("profile").expect("disabling the profile tracer");
        }
    }
    figures
}

/// Runs `traced_run` (one dispatcher run in `order` on this thread) with
/// the profile reset before, and checks the profile: every callee's calls
/// exactly, the dispatcher's, nothing left out.
fn dispatch_profile_checked(
    build: &c_dispatch::Build,
    order: Order,
    traced_run: impl FnOnce() -> Cost,
) -> Cost {
    PROFILE_TRACER.reset();
    // The thread's block catches up with the reset (zeroes its counters)
    // at its next traced call: this one, outside the timed run.
    black_box(build.round_robin(0));
    let cost = traced_run();
    let snapshot = PROFILE_TRACER.snapshot();
    let calls_of = |address: usize| -> u64 {
        snapshot
            .functions
            .iter()
            .filter(|f| f.function == address)
            .map(|f| f.durations.count())
            .sum()
    };
    let expected = order.counts();
    for (i, address) in build.callee_addresses().into_iter().enumerate() {
        assert_eq!(calls_of(address), expected[i], "profile: calls of f{i:03}");
    }
    let dispatcher_calls = match order {
        Order::RoundRobin(_) => 2,
        Order::Random => 1,
    };
    assert_eq!(
        calls_of(order.dispatcher(build)),
        dispatcher_calls,
        "profile: calls of the dispatcher"
    );
    assert_eq!(snapshot.not_kept, Default::default(), "profile: not kept");
    cost
}

/// The dispatcher's table: per order, the untraced run, each tracer's cost
/// (traced - NOPed) and their ratio, judged against the target (MET or
/// MISS) as the median of the rounds' ratios (each round's three runs
/// share the host's phase; the ratio of the medians mixes phases, shown
/// for reference).
fn report_dispatch(figures: &[DispatchSeries; 4]) {
    println!(
        "7 dispatcher of {} callees (C -pg PIE, `c_dispatch`): {} callee calls + 1 per run, \
         median of {DISPATCH_ROUNDS} rounds after {WARM_UP_ROUNDS} warm-up rounds",
        c_dispatch::CALLEES,
        DISPATCH_CALLS
    );
    let mut lines = Vec::new();
    let mut verdicts = Vec::new();
    for (order, series) in Order::ALL.into_iter().zip(figures) {
        let name = order.name();
        let label = |what: &str| format!("  {name}, {what}");
        let nopped = series.nopped.median();
        let graph = series.graph.median().minus(nopped);
        let profile = series.profile.median().minus(nopped);
        let ratio = profile.ratio(graph);
        if order.judged() {
            lines.push(Line::measured(label("NOPed"), &series.nopped));
            lines.push(Line::measured(label("graph on"), &series.graph));
            lines.push(Line::measured(label("profile on"), &series.profile));
        }
        lines.push(Line::nanoseconds(
            label("graph cost: traced - NOPed"),
            graph,
        ));
        lines.push(Line::nanoseconds(
            label("profile cost: traced - NOPed"),
            profile,
        ));
        let round_ratios = |cost: fn(&Cost) -> f64| {
            median(
                (series.nopped.0.iter())
                    .zip(&series.graph.0)
                    .zip(&series.profile.0)
                    .map(|((n, g), p)| (cost(p) - cost(n)) / (cost(g) - cost(n))),
            )
        };
        let per_round = Cost {
            cpu: round_ratios(|c| c.cpu),
            wall: round_ratios(|c| c.wall),
        };
        if !order.judged() {
            lines.push(Line::ratio(
                label("profile / graph, rounds (ref.)"),
                per_round,
            ));
            continue;
        }
        lines.push(Line::ratio(label("profile / graph cost (ref.)"), ratio));
        let met = per_round.cpu <= DISPATCH_PROFILE_PER_GRAPH;
        verdicts.push(met);
        lines.push(Line {
            target: format!("<= {DISPATCH_PROFILE_PER_GRAPH}"),
            verdict: if met { "MET" } else { "MISS" },
            ..Line::ratio(label("same, median of rounds"), per_round)
        });
        lines.push(Line::ratio(
            label("same, lower quartiles (ref.)"),
            series
                .profile
                .lower_quartile()
                .minus(series.nopped.lower_quartile())
                .ratio(
                    series
                        .graph
                        .lower_quartile()
                        .minus(series.nopped.lower_quartile()),
                ),
        ));
    }
    print_lines(&lines);
    println!(
        "dispatcher target (profile cost <= {DISPATCH_PROFILE_PER_GRAPH} x graph's, median of \
         the rounds' ratios, both orders): {}; \
         page faults inside timed runs after warm-up: {}",
        if verdicts.iter().all(|&met| met) {
            "MET"
        } else {
            "MISS"
        },
        TIMED_PAGE_FAULTS.load(Ordering::Relaxed)
    );
}

// ---------------------------------------------------------------------------
// Toggling: the wall time of one enable + disable of the graph tracer over
// every fixture site, with the rest of the process idle or busy.

const TOGGLES: usize = 40;

fn report_toggles() {
    let sites = fntrace::stats().sites;
    println!(
        "toggle: enable + disable of `graph` ({sites} sites known), wall time, median of {TOGGLES}"
    );
    for busy in [0usize, 2, 8] {
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..busy)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        black_box(rust::mid(1));
                    }
                })
            })
            .collect();
        let mut took: Vec<Duration> = (0..TOGGLES)
            .map(|_| {
                let started = Instant::now();
                fntrace::enable("graph").expect("enable");
                fntrace::disable("graph").expect("disable");
                started.elapsed()
            })
            .collect();
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            worker.join().expect("busy worker");
        }
        GRAPH_TRACER.take_trace();
        took.sort();
        println!(
            "  {busy} other threads busy in traced code: {:.2} ms (min {:.2}, max {:.2})",
            took[TOGGLES / 2].as_secs_f64() * 1e3,
            took[0].as_secs_f64() * 1e3,
            took[TOGGLES - 1].as_secs_f64() * 1e3
        );
    }
}
