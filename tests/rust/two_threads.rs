// fntrace record on a Rust program built with -Zinstrument-mcount
// (tests/programs/record_command.rs).
#[inline(never)]
fn leaf(i: u64) -> u64 {
    std::hint::black_box(i * 3)
}

#[inline(never)]
fn run(n: u64) -> u64 {
    (0..n).map(leaf).sum()
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let workers: Vec<_> = (0..2).map(|_| std::thread::spawn(move || run(n))).collect();
    let total: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    std::hint::black_box(total);
}
