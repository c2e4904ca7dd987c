//! A normally built Rust program (no `-Zinstrument-mcount`, no patchable
//! entries: plain `rustc -O` / `cargo build --release`) for
//! `tests/programs/runtime_patch_rust.rs`, traced with `fntrace record -P` and
//! `uftrace record -P` on its own crate's functions. Every function below
//! is kept out of line; the calls per run are fixed (see the test):
//!
//! - `calls::top` -> `calls::mid` -> 2 × `calls::leaf`, `N` times;
//! - `depth`, recursive: `DEPTH + 1` calls per outer call, 10 outer calls;
//! - `parse`, returning a `Result`: 40 calls, 10 of them errors;
//! - `sum_all::<u8>` and `sum_all::<u32>`, a generic instantiated twice:
//!   20 calls each;
//! - `Meter::bump`, a method: 30 calls;
//! - `apply`, taking a closure (`&dyn Fn`, so each closure's body is a
//!   function of its own): 25 calls, 13 of `main::{closure#0}` and 12 of
//!   `main::{closure#1}`;
//! - `release`, which ends in a tail call through the GOT (`jmp
//!   *__rust_dealloc@GOTPCREL(%rip)`: rustc calls what is outside the
//!   crate without a PLT): 20 calls;
//! - `classify`, a `match` compiled to a jump table: 20 calls;
//! - `area_of`, a virtual tail call (`jmp *%rax` through a vtable): 10
//!   calls, 5 of `<Square as Shape>::area` and 5 of `<Rect as
//!   Shape>::area`, each through the trait's default method
//!   `Shape::scaled` (10 calls).
//!
//! The result is printed so that nothing is optimised away; an argument
//! (the number of `top` calls) comes from the command line so that no
//! call is folded at compile time. `rp N phases` runs only the `top` loop,
//! once per line of its input (a test toggles tracing between phases).

use std::hint::black_box;
use std::num::ParseIntError;

mod calls {
    use std::hint::black_box;

    #[inline(never)]
    pub fn leaf(x: u64) -> u64 {
        black_box(x + 1)
    }

    #[inline(never)]
    pub fn mid(x: u64) -> u64 {
        black_box(leaf(x) + leaf(x + 1))
    }

    #[inline(never)]
    pub fn top(x: u64) -> u64 {
        black_box(mid(x) * 2)
    }
}

/// Recursion `n` deep: `n + 1` calls. The result goes through
/// `black_box`, so LLVM cannot turn the recursion into a loop.
#[inline(never)]
fn depth(n: u64) -> u64 {
    if n == 0 {
        return black_box(0);
    }
    black_box(depth(n - 1)) + 1
}

#[inline(never)]
fn parse(text: &str) -> Result<u64, ParseIntError> {
    let value: u64 = black_box(text).trim().parse()?;
    Ok(value * 3)
}

#[inline(never)]
fn sum_all<T: Copy + Into<u64>>(values: &[T]) -> u64 {
    black_box(values).iter().map(|&v| v.into()).sum()
}

struct Meter {
    total: u64,
}

impl Meter {
    #[inline(never)]
    fn bump(&mut self, by: u64) -> u64 {
        self.total = black_box(self.total.wrapping_mul(31).wrapping_add(by));
        self.total
    }
}

#[inline(never)]
fn apply(f: &dyn Fn(u64) -> u64, x: u64) -> u64 {
    black_box(f(x))
}

/// Drops `values` and ends in a tail call of `__rust_dealloc`.
#[inline(never)]
fn release(values: Vec<u64>) {
    drop(values)
}

#[inline(never)]
fn classify(x: u64) -> u64 {
    match x % 8 {
        0 => black_box(10) + x,
        1 => black_box(x * 3),
        2 => black_box(x ^ 7) - 1,
        3 => black_box(x.rotate_left(3)),
        4 => black_box(x / 3) * 5,
        5 => black_box(x + 99),
        6 => black_box(x << 2) + 1,
        _ => black_box(x >> 1) | 1,
    }
}

trait Shape {
    fn area(&self) -> u64;

    fn scaled(&self, k: u64) -> u64 {
        black_box(self.area() * k)
    }
}

struct Square(u64);

struct Rect(u64, u64);

impl Shape for Square {
    #[inline(never)]
    fn area(&self) -> u64 {
        black_box(self.0 * self.0)
    }
}

impl Shape for Rect {
    #[inline(never)]
    fn area(&self) -> u64 {
        black_box(self.0 * self.1)
    }
}

/// A virtual call in tail position: `jmp *%rax` at `opt-level` 2.
#[inline(never)]
fn area_of(shape: &dyn Shape, k: u64) -> u64 {
    shape.scaled(k.wrapping_mul(1_000_003))
}

const DEPTH: u64 = 12;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    if std::env::args().nth(2).as_deref() == Some("phases") {
        // For toggling from outside: one phase of `n` calls of
        // `calls::top` per line read, `phase` printed after each; stops
        // at the end of the input.
        for _ in std::io::stdin().lines() {
            let mut sum = 0u64;
            for i in 0..n {
                sum = sum.wrapping_add(calls::top(black_box(i)));
            }
            println!("phase {sum}");
        }
        return;
    }
    let mut sum = 0u64;
    for i in 0..n {
        sum = sum.wrapping_add(calls::top(black_box(i)));
    }
    for _ in 0..10 {
        sum = sum.wrapping_add(depth(black_box(DEPTH)));
    }
    let mut errors = 0u64;
    for i in 0..40u64 {
        let text = if i % 4 == 3 {
            format!("x{i}")
        } else {
            format!(" {i} ")
        };
        match parse(&text) {
            Ok(v) => sum = sum.wrapping_add(v),
            Err(_) => errors += 1,
        }
    }
    let small: Vec<u8> = (0..16).collect();
    let wide: Vec<u32> = (0..16).map(|v| v * 1000).collect();
    for _ in 0..20 {
        sum = sum.wrapping_add(sum_all(&small));
        sum = sum.wrapping_add(sum_all(&wide));
    }
    let mut meter = Meter { total: 1 };
    for i in 0..30 {
        sum = sum.wrapping_add(meter.bump(i));
    }
    let offset = black_box(7u64);
    let add = move |x: u64| black_box(x * 5 + offset);
    let scale = move |x: u64| black_box(x * offset);
    // Two closures, chosen at run time: `apply` cannot be specialised for
    // one of them (with a single closure LLVM inlined it into `apply`).
    let closures: [&dyn Fn(u64) -> u64; 2] = black_box([&add, &scale]);
    for i in 0..25u64 {
        sum = sum.wrapping_add(apply(closures[i as usize % 2], i));
    }
    for i in 0..20 {
        release(black_box(vec![i; 4]));
        sum = sum.wrapping_add(classify(i));
    }
    let shapes: [&dyn Shape; 2] = black_box([&Square(3), &Rect(2, 5)]);
    for i in 0..10u64 {
        sum = sum.wrapping_add(area_of(shapes[i as usize % 2], i));
    }
    println!("{sum} {errors}");
}
