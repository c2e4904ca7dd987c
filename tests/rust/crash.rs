// A Rust program that dies of a signal, for fntrace record
// (tests/programs/record_command.rs): `crash segv` writes through a null pointer
// inside crash(); `crash overflow` overflows the main thread's stack, which
// std reports ("has overflowed its stack") before it aborts.
#[inline(never)]
fn leaf(i: u64) -> u64 {
    std::hint::black_box(i * 3)
}

#[inline(never)]
fn crash(address: usize) {
    // SAFETY: none: the store faults, as this program means it to.
    unsafe { std::ptr::write_volatile(address as *mut u64, 1) }
}

#[inline(never)]
fn deep(n: u64) -> u64 {
    let frame = [n; 64];
    std::hint::black_box(&frame);
    if n == 0 {
        0
    } else {
        deep(n - 1) + frame[3]
    }
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let sum: u64 = (0..100).map(leaf).sum();
    std::hint::black_box(sum);
    match mode.as_str() {
        "segv" => crash(std::hint::black_box(0)),
        "overflow" => {
            deep(u64::MAX);
        }
        _ => {}
    }
}
