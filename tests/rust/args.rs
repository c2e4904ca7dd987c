// Arguments and return values of Rust functions for -A/-R
// (tests/programs/args_rust_vs_uftrace.rs): integers (signed, unsigned, negative,
// 64-bit), a bool, a char, a `&str` (a pointer and a length in two
// registers), an f64; returning integers. Built with -Zinstrument-mcount at
// opt-level 0 and 2, not position-independent, so that the addresses
// printed are the same in every run. `black_box` keeps every argument a
// run-time value: LLVM neither folds one into the callee nor drops it.
use std::hint::black_box;

#[inline(never)]
fn add(a: i32, b: i32) -> i32 {
    a.wrapping_add(b)
}

#[inline(never)]
fn wide(a: u64, b: i64) -> i64 {
    (a as i64).wrapping_sub(b)
}

#[inline(never)]
fn flag(on: bool) -> u8 {
    if on {
        7
    } else {
        3
    }
}

#[inline(never)]
fn letter(c: char) -> u32 {
    c as u32 + 1
}

// Not just `s.len()`: rustc inlines a body that small despite
// `#[inline(never)]` at opt-level 2.
#[inline(never)]
fn text_len(s: &str) -> usize {
    s.bytes().map(usize::from).sum::<usize>() + s.len()
}

#[inline(never)]
fn key_len(s: &str) -> usize {
    s.bytes().filter(|&b| b == b':').count() + s.len()
}

#[inline(never)]
fn scale(x: f64, times: i32) -> i64 {
    (x * times as f64) as i64
}

#[inline(never)]
fn twice(x: i32) -> i32 {
    add(x, x)
}

fn main() {
    let mut s = 0i64;
    s += add(black_box(40), black_box(2)) as i64;
    s += add(black_box(-7), black_box(3)) as i64;
    s += wide(black_box(1 << 40), black_box(-5));
    s += flag(black_box(true)) as i64;
    s += flag(black_box(false)) as i64;
    s += letter(black_box('a')) as i64;
    s += text_len(black_box("user:42")) as i64;
    s += text_len(black_box("")) as i64;
    // The first 7 bytes of a longer text: `/s` reads to the first NUL, not
    // to the length.
    s += key_len(black_box(&"user:42, then more text"[..7])) as i64;
    s += scale(black_box(2.5), black_box(4));
    s += scale(black_box(-0.125), black_box(8));
    s += twice(black_box(3)) as i64;
    black_box(s);
}
