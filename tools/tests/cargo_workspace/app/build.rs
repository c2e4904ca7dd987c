//! Tells the program whether this build script's rustc had RUSTC_BOOTSTRAP
//! set (`option_env!` is read when the build script is compiled).

#[inline(never)]
fn build_script_work() -> Option<&'static str> {
    option_env!("RUSTC_BOOTSTRAP")
}

fn main() {
    println!(
        "cargo:rustc-env=BUILD_SCRIPT_RUSTC_BOOTSTRAP={:?}",
        build_script_work()
    );
}
