//! The cost of a poll under `fntrace record --async` (benches/async_poll.rs):
//! N calls of `call(i)`, then N polls of `stepper`'s state machine (futures
//! of 100 polls each, boxed and polled through their vtable with a no-op
//! waker, so that the resume function stays a call), then N polls of a
//! hand-written future (`Ticks`, the same 100 polls a future, boxed
//! likewise), each loop timed with the thread's CPU clock; prints the
//! three per call / poll. Built by the
//! benchmark with `rustc -O -g -Zinstrument-mcount`; std only.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Polls of each future: its awaits, and the one that returns.
const STEPS: u64 = 99;

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, time: *mut Timespec) -> i32;
}

/// This thread's CPU time (CLOCK_THREAD_CPUTIME_ID), in ns.
fn cpu_ns() -> i64 {
    let mut t = Timespec { sec: 0, nsec: 0 };
    // SAFETY: a valid clock id and a timespec to write.
    unsafe { clock_gettime(3, &mut t) };
    t.sec * 1_000_000_000 + t.nsec
}

/// Pending once, then ready: one suspend point of its awaiter.
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

/// A hand-written future: pending `.0` times, then ready with its count
/// (`--async` follows its `poll` by the `Poll<u64>` it returns).
struct Ticks(u64, u64);

impl Future for Ticks {
    type Output = u64;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<u64> {
        if self.0 == 0 {
            return Poll::Ready(self.1);
        }
        self.0 -= 1;
        self.1 += 1;
        Poll::Pending
    }
}

/// The async fn whose polls are measured.
async fn stepper(steps: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..steps {
        Yield(false).await;
        acc = acc.wrapping_add(black_box(i));
    }
    acc
}

/// The plain traced call.
#[inline(never)]
fn call(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let mut sum = 0u64;
    let t0 = cpu_ns();
    for i in 0..n {
        sum = sum.wrapping_add(call(i));
    }
    let t1 = cpu_ns();
    let mut cx = Context::from_waker(Waker::noop());
    let mut polls = 0u64;
    while polls < n {
        let mut future: Pin<Box<dyn Future<Output = u64>>> = black_box(Box::pin(stepper(STEPS)));
        loop {
            polls += 1;
            if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                sum = sum.wrapping_add(v);
                break;
            }
        }
    }
    let t2 = cpu_ns();
    let mut hand_polls = 0u64;
    while hand_polls < n {
        let mut future: Pin<Box<dyn Future<Output = u64>>> = black_box(Box::pin(Ticks(STEPS, 0)));
        loop {
            hand_polls += 1;
            if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                sum = sum.wrapping_add(v);
                break;
            }
        }
    }
    let t3 = cpu_ns();
    println!(
        "{:.3} {:.3} {:.3} {}",
        (t1 - t0) as f64 / n as f64,
        (t2 - t1) as f64 / polls as f64,
        (t3 - t2) as f64 / hand_polls as f64,
        sum
    );
}
