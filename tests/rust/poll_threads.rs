//! Async polls on several threads for the poll path's stress test
//! (tests/programs/async_poll_stress.rs): THREADS threads each make boxed
//! futures of `stepper` (STEPS awaits, then Ready) and poll them to the
//! end with a no-op waker, until standard input ends; every future's
//! result is checked against what its arguments make (registers or state
//! corrupted by a hook would show there). Prints `ok FUTURES` (all
//! threads), or `bad` and exits 1. Std only; built with `rustc -g
//! -Zinstrument-mcount`.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

/// Set once standard input ends.
static STOP: AtomicBool = AtomicBool::new(false);

/// Awaits in each future: it is polled STEPS + 1 times.
const STEPS: u64 = 9;

/// Pending once, then ready.
struct Yield(bool);

impl Future for Yield {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Six arguments in registers, each used after the hooked call.
#[inline(never)]
fn mix(a: u64, b: u64, c: u64, d: u64, e: u64, f: u64) -> u64 {
    a.wrapping_mul(3) ^ b.rotate_left(7) ^ c.wrapping_add(d) ^ e.wrapping_sub(f)
}

/// The async fn whose polls are hooked: its state and locals live across
/// its awaits.
async fn stepper(seed: u64) -> u64 {
    let mut acc = seed;
    for i in 0..STEPS {
        Yield(false).await;
        acc = acc.wrapping_add(mix(black_box(i), seed, acc, i ^ seed, 5, 6));
    }
    acc
}

/// What `stepper(seed)` returns, computed without a future.
fn expected(seed: u64) -> u64 {
    let mut acc = seed;
    for i in 0..STEPS {
        acc = acc.wrapping_add(mix(i, seed, acc, i ^ seed, 5, 6));
    }
    acc
}

fn main() {
    let threads: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut cx = Context::from_waker(Waker::noop());
                let mut futures = 0u64;
                while !STOP.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        let seed = t << 40 | futures;
                        let mut future: Pin<Box<dyn Future<Output = u64>>> =
                            black_box(Box::pin(stepper(seed)));
                        let got = loop {
                            if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                                break v;
                            }
                        };
                        if got != expected(seed) {
                            println!("bad: thread {t}, future {futures}: {got} != {}", expected(seed));
                            std::process::exit(1);
                        }
                        futures += 1;
                    }
                }
                futures
            })
        })
        .collect();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new()).unwrap();
    STOP.store(true, Ordering::Relaxed);
    let futures: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    println!("ok {futures}");
}
