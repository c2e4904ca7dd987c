// Rust functions for `fntrace record -a` (tests/programs/auto_args_rust.rs): every
// parameter and return type the DWARF reader types for Rust — integers of
// each width, bool, char, `&str`, `String` and `&String`, fieldless enums,
// `Option<&T>` and `Option<NonZeroU32>` (niches), references and raw
// pointers, floats, a `String` and a large structure returned through a
// hidden pointer (sret), a zero-sized parameter, structures by value. Built with -g
// -Zinstrument-mcount at opt-level 0 and 2, not position-independent.
// `black_box` keeps every argument a run-time value.
use std::hint::black_box;
use std::num::NonZeroU32;

#[derive(Clone, Copy, Debug)]
enum Color {
    Red,
    Green,
    Blue,
}

#[derive(Clone, Copy, Debug)]
#[repr(i16)]
enum Level {
    Low = -2,
    Mid = 10,
    High = 300,
}

struct Big {
    a: u64,
    b: u64,
    c: u64,
}

struct Marker;

#[derive(Clone, Copy)]
struct Rgb {
    r: u8,
    g: u8,
    b: u8,
}

#[derive(Clone, Copy)]
struct Point {
    x: f64,
    y: f64,
}

#[derive(Clone, Copy)]
struct Mixed {
    a: u64,
    x: f64,
}

static TOTAL: u64 = 7;

#[inline(never)]
fn ints(a: i8, b: u8, c: i16, d: u16, e: i32, f: u32, g: i64, h: u64) -> i64 {
    a as i64 + b as i64 + c as i64 + d as i64 + e as i64 + f as i64 + g + h as i64
}

#[inline(never)]
fn sizes(a: isize, b: usize) -> usize {
    (a as usize).wrapping_add(b)
}

#[inline(never)]
fn small(x: u8) -> i8 {
    (x as i8).wrapping_neg()
}

#[inline(never)]
fn flag(on: bool, n: u16) -> bool {
    on && n > 1
}

#[inline(never)]
fn letter(c: char) -> char {
    char::from_u32(c as u32 + 1).unwrap_or(c)
}

#[inline(never)]
fn text(s: &str, n: u32) -> &str {
    &s[..(n as usize).min(s.len())]
}

#[inline(never)]
fn owned(s: String, r: &String) -> usize {
    s.len() * 100 + r.len()
}

#[inline(never)]
fn greet(name: &str) -> String {
    format!("hi {name}")
}

#[inline(never)]
fn paint(c: Color, l: Level) -> Color {
    match (c, l) {
        (Color::Red, _) => Color::Green,
        (_, Level::High) => Color::Red,
        _ => Color::Blue,
    }
}

#[inline(never)]
fn find(v: Option<&u64>, n: Option<NonZeroU32>) -> Option<NonZeroU32> {
    match (v, n) {
        (Some(x), _) => NonZeroU32::new(*x as u32),
        (None, n) => n,
    }
}

#[inline(never)]
fn pointers(r: &u64, p: *const u8, _m: Marker, q: &mut i32) -> *const u64 {
    *q += 1;
    black_box(p);
    r as *const u64
}

#[inline(never)]
fn floats(x: f64, y: f32, n: i32) -> f64 {
    x * y as f64 + n as f64
}

#[inline(never)]
fn ratio(x: f32) -> f32 {
    x / 2.0
}

// By value: a pair of integers in two registers, 3 bytes in one, a pair
// of doubles in two vector registers, an integer and a double in one of
// each, 24 bytes by address; `n` after each is where the ABI puts it.
#[inline(never)]
fn structs(p: (u32, u32), c: Rgb, n: u8) -> u32 {
    p.0 + p.1 + c.r as u32 + c.g as u32 + c.b as u32 + n as u32
}

#[inline(never)]
fn more_structs(p: Point, m: Mixed, b: Big, n: u8) -> f64 {
    p.x + p.y + m.a as f64 + m.x + (b.a + b.b + b.c) as f64 + n as f64
}

#[inline(never)]
fn build(a: u64, b: u64) -> Big {
    Big { a, b, c: a + b }
}

fn main() {
    let mut s = 0i64;
    s += ints(
        black_box(-5),
        black_box(200),
        black_box(-300),
        black_box(60000),
        black_box(-70000),
        black_box(4000000000),
        black_box(-9),
        black_box(1 << 40),
    );
    s += sizes(black_box(-1), black_box(3)) as i64;
    s += small(black_box(7)) as i64;
    s += flag(black_box(true), black_box(3)) as i64;
    s += letter(black_box('a')) as i64;
    s += letter(black_box('é')) as i64;
    s += text(black_box("hello, world"), black_box(5)).len() as i64;
    let name = String::from("owned text");
    let other = String::from("borrowed");
    s += owned(black_box(name), black_box(&other)) as i64;
    s += greet(black_box("rust")).len() as i64;
    s += paint(black_box(Color::Red), black_box(Level::Low)) as i64;
    s += paint(black_box(Color::Blue), black_box(Level::High)) as i64;
    s += paint(black_box(Color::Green), black_box(Level::Mid)) as i64;
    let x = 42u64;
    s += find(black_box(Some(&x)), black_box(None)).map_or(0, |n| n.get()) as i64;
    s += find(black_box(None), black_box(NonZeroU32::new(9))).map_or(0, |n| n.get()) as i64;
    s += find(black_box(None), black_box(None)).map_or(0, |n| n.get()) as i64;
    let mut q = 1;
    s += pointers(black_box(&TOTAL), black_box(std::ptr::null()), Marker, black_box(&mut q)) as i64 & 1;
    s += floats(black_box(1.5), black_box(2.0), black_box(3)) as i64;
    s += ratio(black_box(5.0)) as i64;
    s += structs(black_box((1, 2)), black_box(Rgb { r: 3, g: 4, b: 5 }), black_box(6)) as i64;
    s += more_structs(
        black_box(Point { x: 0.5, y: 1.5 }),
        black_box(Mixed { a: 2, x: 0.25 }),
        black_box(Big { a: 1, b: 2, c: 3 }),
        black_box(9),
    ) as i64;
    let big = build(black_box(1), black_box(2));
    s += (big.a + big.b + big.c) as i64;
    black_box(s);
}
