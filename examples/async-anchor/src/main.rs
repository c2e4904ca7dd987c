//! A service whose every request is its own tokio task of a known shape,
//! and a client measuring each request's latency: the anchor fntrace's
//! async rows are checked against (`tools/tests/command/async_futures.rs`).
//!
//! `async-anchor THREADS REQUESTS IN_FLIGHT STEPS SLEEP_MS`: a runtime of
//! THREADS workers (0: the current-thread runtime) serves REQUESTS
//! requests, IN_FLIGHT at a time; each request's handler (`serve`) sleeps
//! SLEEP_MS milliseconds STEPS times, with some CPU work after each sleep,
//! so that it is polled exactly STEPS + 1 times. The client (one task per
//! slot in flight) times each request from its spawn to its answer and
//! prints one `latency_ns N` line per request, then `requests N`.
//! `ANCHOR_WORK=N` makes the work after each sleep N iterations (50,000
//! unset). `ANCHOR_TASK_METRICS=FILE` also writes tokio-metrics' figures for the
//! requests' tasks to FILE (`task_metrics`).
//!
//! `ASYNC_ANCHOR_SLOW=ID:MS` makes request ID (the requests are numbered
//! from 0) sleep MS milliseconds at each step instead of SLEEP_MS: the
//! same polls, a longer wait between them. `ASYNC_ANCHOR_LINGER_MS=N`
//! keeps the process N ms after its last line; `ASYNC_ANCHOR_CANCEL=N`
//! spawns each request's future boxed and has the client abort every
//! N-th request once its handler is pending (a `cancelled K` line, the
//! requests line then counts those answered); `ASYNC_ANCHOR_START_MS=N`
//! waits N ms before the runtime starts (for a live view to sample it
//! before any future).

mod task_metrics;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Iterations of `work`'s loop: `ANCHOR_WORK`, else 50,000 (set at start).
static WORK: AtomicU64 = AtomicU64::new(50_000);

/// Requests cancelled (`ASYNC_ANCHOR_CANCEL`).
static CANCELLED: AtomicU64 = AtomicU64::new(0);

/// CPU work after each sleep (about 10 µs here at 50,000 iterations), kept
/// from the optimiser.
#[inline(never)]
fn work(seed: u64) -> u64 {
    let mut x = seed;
    for i in 0..WORK.load(Ordering::Relaxed) {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
    }
    std::hint::black_box(x)
}

/// The request `ASYNC_ANCHOR_SLOW=ID:MS` names, and its sleep.
fn slow_request() -> Option<(u64, Duration)> {
    static SLOW: std::sync::OnceLock<Option<(u64, Duration)>> = std::sync::OnceLock::new();
    *SLOW.get_or_init(|| {
        let value = std::env::var("ASYNC_ANCHOR_SLOW").ok()?;
        let (id, ms) = value.split_once(':').expect("ASYNC_ANCHOR_SLOW=ID:MS");
        let ms = ms.parse().expect("ASYNC_ANCHOR_SLOW=ID:MS");
        Some((
            id.parse().expect("ASYNC_ANCHOR_SLOW=ID:MS"),
            Duration::from_millis(ms),
        ))
    })
}

/// `ASYNC_ANCHOR_CANCEL=N`: every N-th request (ids N-1, 2N-1, ...) is
/// cancelled while pending.
fn cancel_every() -> Option<u64> {
    static EVERY: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *EVERY.get_or_init(|| {
        let value = std::env::var("ASYNC_ANCHOR_CANCEL").ok()?;
        Some(value.parse().expect("ASYNC_ANCHOR_CANCEL=N")).filter(|&n| n > 0)
    })
}

/// The requests whose handler has begun (kept with `ASYNC_ANCHOR_CANCEL`
/// only: the client cancels a request once it is pending).
static STARTED: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

/// One request's handler: STEPS sleeps of SLEEP each, work after each.
async fn serve(id: u64, steps: u32, sleep: Duration) -> u64 {
    if cancel_every().is_some() {
        STARTED.lock().unwrap().push(id);
    }
    let sleep = match slow_request() {
        Some((slow, longer)) if slow == id => longer,
        _ => sleep,
    };
    let mut acc = id;
    for _ in 0..steps {
        tokio::time::sleep(sleep).await;
        acc = acc.wrapping_add(work(acc));
    }
    acc
}

/// One client slot: its share of the requests, one after another.
async fn client(first: u64, count: u64, steps: u32, sleep: Duration) -> Vec<u64> {
    let mut latencies = Vec::new();
    for id in first..first + count {
        let start = Instant::now();
        if let Some(every) = cancel_every() {
            // Boxed (dropped through its vtable, as a `BoxFuture` is); every
            // N-th aborted once its first poll has begun: its future is
            // dropped pending, at its first sleep.
            let boxed: std::pin::Pin<Box<dyn std::future::Future<Output = u64> + Send>> =
                Box::pin(serve(id, steps, sleep));
            let handle = tokio::spawn(boxed);
            if id % every == every - 1 {
                tokio::time::sleep(sleep / 2).await;
                while !STARTED.lock().unwrap().contains(&id) {
                    tokio::task::yield_now().await;
                }
                handle.abort();
                assert!(handle.await.is_err_and(|e| e.is_cancelled()));
                CANCELLED.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let answer = handle.await;
            latencies.push(start.elapsed().as_nanos() as u64);
            std::hint::black_box(answer.ok());
            continue;
        }
        let answer = task_metrics::spawn(serve(id, steps, sleep)).await;
        latencies.push(start.elapsed().as_nanos() as u64);
        std::hint::black_box(answer.ok());
    }
    latencies
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .expect("numbers: THREADS REQUESTS IN_FLIGHT STEPS SLEEP_MS")
        })
        .collect();
    let [threads, requests, in_flight, steps, sleep_ms] = args[..] else {
        panic!("usage: async-anchor THREADS REQUESTS IN_FLIGHT STEPS SLEEP_MS");
    };
    if let Ok(iterations) = std::env::var("ANCHOR_WORK") {
        WORK.store(
            iterations.parse().expect("ANCHOR_WORK: a number"),
            Ordering::Relaxed,
        );
    }
    if let Ok(ms) = std::env::var("ASYNC_ANCHOR_START_MS") {
        let ms = ms.parse().expect("ASYNC_ANCHOR_START_MS=N");
        std::thread::sleep(Duration::from_millis(ms));
    }
    let runtime = match threads {
        0 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(n as usize);
            builder
        }
    }
    .enable_time()
    .build()
    .expect("a tokio runtime");
    let sleep = Duration::from_millis(sleep_ms);
    let latencies = runtime.block_on(async move {
        let per_slot = requests / in_flight;
        let clients: Vec<_> = (0..in_flight)
            .map(|slot| tokio::spawn(client(slot * per_slot, per_slot, steps as u32, sleep)))
            .collect();
        let mut all = Vec::new();
        for c in clients {
            all.extend(c.await.expect("a client"));
        }
        all
    });
    for l in &latencies {
        println!("latency_ns {l}");
    }
    if cancel_every().is_some() {
        println!("cancelled {}", CANCELLED.load(Ordering::Relaxed));
    }
    println!("requests {}", latencies.len());
    task_metrics::write();
    // ASYNC_ANCHOR_LINGER_MS=N: the process stays N ms after its answers
    // (for a scrape of its metrics).
    if let Ok(ms) = std::env::var("ASYNC_ANCHOR_LINGER_MS") {
        let ms = ms.parse().expect("ASYNC_ANCHOR_LINGER_MS=N");
        std::thread::sleep(Duration::from_millis(ms));
    }
}
