//! Hand-written futures (`impl Future`, no async fn) of six `Poll<T>`
//! layouts, for `fntrace record --async` (tools/tests/command/
//! async_hand_written.rs): two worker threads take futures from one queue
//! per type, poll each once through its vtable and put it back while it is
//! pending, so many are pending at once and one future's polls run on
//! both threads; boxes freed after `Ready` are reused at the same
//! addresses. Prints, per type, the futures it completed and their polls.
//! Built with `rustc -O -g -Zinstrument-mcount`; std only.
//!
//! `Poll<()>` comes back in `al`, `Poll<bool>` in `al` (Pending 2, a niche
//! of `bool`), `Poll<Option<u32>>` in `eax`/`edx`, `Poll<u64>` and
//! `Poll<io::Result<usize>>` in `rax`/`rdx`; `Poll<Result<u32,
//! io::Error>>` through memory (three scalars), which `--async` leaves
//! out.
//!
//! Arguments: futures per type (default 40). `HAND_FUTURES_LINGER` set:
//! wait until stdin closes before exiting (for a live reading).

use std::collections::VecDeque;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

/// Pending `.0` times, then ready with nothing.
struct Countdown(u32);

impl Future for Countdown {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            return Poll::Ready(());
        }
        self.0 -= 1;
        Poll::Pending
    }
}

/// Pending `.0` times, adding up `.1`, then ready with the sum.
struct Sum(u32, u64);

impl Future for Sum {
    type Output = u64;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<u64> {
        if self.0 == 0 {
            return Poll::Ready(self.1);
        }
        self.0 -= 1;
        self.1 += black_box(3);
        Poll::Pending
    }
}

/// Ready with a `bool`.
struct Flag(u32);

impl Future for Flag {
    type Output = bool;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<bool> {
        if self.0 == 0 {
            return Poll::Ready(black_box(self.0 == 0));
        }
        self.0 -= 1;
        Poll::Pending
    }
}

/// Ready with an `Option<u32>` (`None` when it started at 0).
struct Maybe(u32, u32);

impl Future for Maybe {
    type Output = Option<u32>;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<u32>> {
        if self.0 == 0 {
            return Poll::Ready(black_box((self.1 > 0).then_some(self.1)));
        }
        self.0 -= 1;
        self.1 += 1;
        Poll::Pending
    }
}

/// Ready with an `io::Result<usize>` (an error every third future).
struct Io(u32, u32);

impl Future for Io {
    type Output = std::io::Result<usize>;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        if self.0 == 0 {
            if self.1 % 3 == 2 {
                return Poll::Ready(Err(std::io::Error::other("every third")));
            }
            return Poll::Ready(Ok(black_box(9)));
        }
        self.0 -= 1;
        Poll::Pending
    }
}

/// Ready with a `Result<u32, io::Error>`: returned through memory.
struct Wide(u32);

impl Future for Wide {
    type Output = Result<u32, std::io::Error>;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<u32, std::io::Error>> {
        if self.0 == 0 {
            return Poll::Ready(Ok(black_box(9)));
        }
        self.0 -= 1;
        Poll::Pending
    }
}

/// Rounds of futures (see `main`).
const ROUNDS: u32 = 4;

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One type's futures waiting for a poll, and what was counted of them.
struct Queue<T> {
    name: &'static str,
    waiting: Mutex<VecDeque<Boxed<T>>>,
    completed: AtomicU64,
    polls: AtomicU64,
}

impl<T> Queue<T> {
    fn new(name: &'static str) -> Queue<T> {
        Queue {
            name,
            waiting: Mutex::new(VecDeque::new()),
            completed: AtomicU64::new(0),
            polls: AtomicU64::new(0),
        }
    }

    fn fill(&self, futures: impl Iterator<Item = Boxed<T>>) {
        self.waiting.lock().unwrap().extend(futures);
    }

    /// Polls the next future once (put back if pending): whether there
    /// was one.
    fn step(&self, cx: &mut Context<'_>) -> bool {
        let Some(mut future) = self.waiting.lock().unwrap().pop_front() else {
            return false;
        };
        self.polls.fetch_add(1, Ordering::Relaxed);
        match future.as_mut().poll(cx) {
            Poll::Ready(value) => {
                black_box(value);
                self.completed.fetch_add(1, Ordering::Relaxed);
            }
            Poll::Pending => self.waiting.lock().unwrap().push_back(future),
        }
        true
    }

    fn report(&self) {
        println!(
            "{} futures {} polls {}",
            self.name,
            self.completed.load(Ordering::Relaxed),
            self.polls.load(Ordering::Relaxed)
        );
    }
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(40);
    let (countdown, sum, flag) = (Queue::new("Countdown"), Queue::new("Sum"), Queue::new("Flag"));
    let (maybe, io, wide) = (Queue::new("Maybe"), Queue::new("Io"), Queue::new("Wide"));
    // In rounds, each after the last one's futures are freed: new futures
    // at the addresses of old ones.
    for round in 0..ROUNDS {
        // Future i is pending i % 5 times: 1-5 polls a future.
        let batch = || (round * n / ROUNDS)..((round + 1) * n / ROUNDS);
        let pending = |i: u32| i % 5;
        countdown.fill(batch().map(|i| Box::pin(Countdown(pending(i))) as _));
        sum.fill(batch().map(|i| Box::pin(Sum(pending(i), 0)) as _));
        flag.fill(batch().map(|i| Box::pin(Flag(pending(i))) as _));
        maybe.fill(batch().map(|i| Box::pin(Maybe(pending(i), 0)) as _));
        io.fill(batch().map(|i| Box::pin(Io(pending(i), i)) as _));
        wide.fill(batch().map(|i| Box::pin(Wide(pending(i))) as _));
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    let mut cx = Context::from_waker(Waker::noop());
                    loop {
                        let mut any = false;
                        any |= countdown.step(&mut cx);
                        any |= sum.step(&mut cx);
                        any |= flag.step(&mut cx);
                        any |= maybe.step(&mut cx);
                        any |= io.step(&mut cx);
                        any |= wide.step(&mut cx);
                        if !any {
                            break;
                        }
                    }
                });
            }
        });
    }
    countdown.report();
    sum.report();
    flag.report();
    maybe.report();
    io.report();
    wide.report();
    if std::env::var_os("HAND_FUTURES_LINGER").is_some() {
        // Until stdin closes.
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new()).unwrap();
    }
}
