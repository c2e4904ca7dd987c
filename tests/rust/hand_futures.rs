//! Hand-written futures (`impl Future`, no async fn) of seven `Poll<T>`
//! layouts, for `fntrace record --async` (tools/tests/command/
//! async_hand_written.rs): two worker threads take futures from one queue
//! per type, poll each once through its vtable and put it back while it is
//! pending, so many are pending at once and one future's polls run on
//! both threads; boxes freed after `Ready` are reused at the same
//! addresses. A seventh type, with drop glue, has every third future
//! dropped while pending. Prints, per type, the futures it completed, their
//! polls, and those it dropped.
//! Built with `rustc -O -g -Zinstrument-mcount`; std only.
//!
//! `Poll<()>` comes back in `al`, `Poll<bool>` in `al` (Pending 2, a niche
//! of `bool`), `Poll<Option<u32>>` in `eax`/`edx`, `Poll<u64>` and
//! `Poll<io::Result<usize>>` in `rax`/`rdx`; `Poll<Result<u32,
//! io::Error>>` (three scalars) and `Poll<Option<String>>` (24 bytes)
//! through memory.
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

/// Ready with an `Option<String>`: 24 bytes, returned through memory,
/// `Pending` a niche of the string's capacity.
struct Text(u32);

impl Future for Text {
    type Output = Option<String>;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<String>> {
        if self.0 == 0 {
            return Poll::Ready(black_box(Some(String::from("done"))));
        }
        self.0 -= 1;
        Poll::Pending
    }
}

/// Holds a box (so it has drop glue, `drop_in_place::<Held>`): pending
/// `.0` times, then ready with the boxed value. Every third is dropped
/// while pending (see `Queue::cancel_every`).
struct Held(u32, Box<u64>);

impl Future for Held {
    type Output = u64;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<u64> {
        if self.0 == 0 {
            return Poll::Ready(*self.1);
        }
        self.0 -= 1;
        *self.1 += 1;
        Poll::Pending
    }
}

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One type's futures waiting for a poll (each with its number and its
/// polls so far), and what was counted of them.
struct Queue<T> {
    name: &'static str,
    waiting: Mutex<VecDeque<(Boxed<T>, u32, u64)>>,
    /// Every this-many-th future (by number) is dropped after its first
    /// poll, pending (0: none).
    cancel_every: u32,
    completed: AtomicU64,
    /// The polls of the futures that completed.
    polls: AtomicU64,
    dropped: AtomicU64,
}

impl<T> Queue<T> {
    fn new(name: &'static str, cancel_every: u32) -> Queue<T> {
        Queue {
            name,
            waiting: Mutex::new(VecDeque::new()),
            cancel_every,
            completed: AtomicU64::new(0),
            polls: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    fn fill(&self, futures: impl Iterator<Item = (u32, Boxed<T>)>) {
        let mut waiting = self.waiting.lock().unwrap();
        waiting.extend(futures.map(|(number, future)| (future, number, 0)));
    }

    /// Polls the next future once (put back if pending): whether there
    /// was one.
    fn step(&self, cx: &mut Context<'_>) -> bool {
        let Some((mut future, number, polls)) = self.waiting.lock().unwrap().pop_front() else {
            return false;
        };
        match future.as_mut().poll(cx) {
            Poll::Ready(value) => {
                black_box(value);
                self.completed.fetch_add(1, Ordering::Relaxed);
                self.polls.fetch_add(polls + 1, Ordering::Relaxed);
            }
            Poll::Pending if self.cancel_every > 0 && number % self.cancel_every == 0 => {
                drop(future);
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Poll::Pending => (self.waiting.lock().unwrap()).push_back((future, number, polls + 1)),
        }
        true
    }

    fn report(&self) {
        println!(
            "{} futures {} polls {} dropped {}",
            self.name,
            self.completed.load(Ordering::Relaxed),
            self.polls.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed)
        );
    }
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(40);
    let (countdown, sum, flag) = (Queue::new("Countdown", 0), Queue::new("Sum", 0), Queue::new("Flag", 0));
    let (maybe, io, wide) = (Queue::new("Maybe", 0), Queue::new("Io", 0), Queue::new("Wide", 0));
    let (text, held) = (Queue::new("Text", 0), Queue::new("Held", 3));
    // In rounds, each after the last one's futures are freed: new futures
    // at the addresses of old ones.
    for round in 0..ROUNDS {
        // Future i is pending i % 5 times: 1-5 polls a future.
        let batch = || ((round * n / ROUNDS)..((round + 1) * n / ROUNDS)).map(|i| (i, i % 5));
        countdown.fill(batch().map(|(i, p)| (i, Box::pin(Countdown(p)) as _)));
        sum.fill(batch().map(|(i, p)| (i, Box::pin(Sum(p, 0)) as _)));
        flag.fill(batch().map(|(i, p)| (i, Box::pin(Flag(p)) as _)));
        maybe.fill(batch().map(|(i, p)| (i, Box::pin(Maybe(p, 0)) as _)));
        io.fill(batch().map(|(i, p)| (i, Box::pin(Io(p, i)) as _)));
        wide.fill(batch().map(|(i, p)| (i, Box::pin(Wide(p)) as _)));
        text.fill(batch().map(|(i, p)| (i, Box::pin(Text(p)) as _)));
        // Pending at least once, so that the dropped ones were pending.
        held.fill(batch().map(|(i, p)| (i, Box::pin(Held(p + 1, Box::new(0))) as _)));
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
                        any |= text.step(&mut cx);
                        any |= held.step(&mut cx);
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
    text.report();
    held.report();
    if std::env::var_os("HAND_FUTURES_LINGER").is_some() {
        // Until stdin closes.
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new()).unwrap();
    }
}
