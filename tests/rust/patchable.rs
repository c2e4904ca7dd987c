//! w_top -> w_mid -> 2 x w_leaf, 1000 times, for
//! `tests/programs/patchable_vs_uftrace.rs`: built with
//! `rustc -Zpatchable-function-entry=5,0` (LLVM's one five-byte NOP at each
//! entry, `0f 1f 44 00 08`), no other instrumentation.

use std::hint::black_box;

#[inline(never)]
#[no_mangle]
pub extern "C" fn w_leaf(x: u64) -> u64 {
    black_box(x + 1)
}

#[inline(never)]
#[no_mangle]
pub extern "C" fn w_mid(x: u64) -> u64 {
    black_box(w_leaf(x) + w_leaf(x + 1))
}

#[inline(never)]
#[no_mangle]
pub extern "C" fn w_top(x: u64) -> u64 {
    black_box(w_mid(x) * 2)
}

fn main() {
    let mut sum = 0;
    for i in 0..1000 {
        sum += w_top(black_box(i));
    }
    println!("{sum}");
}
