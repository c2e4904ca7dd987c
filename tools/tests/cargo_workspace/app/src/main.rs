//! Prints, for each crate of the build, the RUSTC_BOOTSTRAP its rustc saw,
//! and calls a function of each crate.

#[inline(never)]
fn app_work(x: u64) -> u64 {
    helper::helper_work(x) + outside::outside_work(x)
}

fn main() {
    println!("app {:?}", option_env!("RUSTC_BOOTSTRAP"));
    println!("helper {:?}", helper::RUSTC_BOOTSTRAP);
    println!("outside {:?}", outside::RUSTC_BOOTSTRAP);
    println!("macros {}", macros::rustc_bootstrap!());
    println!("build-script {}", env!("BUILD_SCRIPT_RUSTC_BOOTSTRAP"));
    println!("work {}", app_work(std::hint::black_box(20)));
}
