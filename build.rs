//! Compiles the x86-64 trampolines in `asm/` into a static library that the
//! crate links. Other targets are refused (by `compile_error!` in
//! `src/lib.rs`, which says why); nothing is built for them here.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");

    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if arch != "x86_64" || os != "linux" {
        return;
    }

    let sources = [
        "asm/x86_64/entry.S",
        "asm/x86_64/graph.S",
        "asm/x86_64/return.S",
    ];
    // Offsets of Rust structures, shared by the sources.
    println!("cargo:rerun-if-changed=asm/x86_64/layout.h");
    let mut build = cc::Build::new();
    for src in sources {
        println!("cargo:rerun-if-changed={src}");
        build.file(src);
    }
    // The trampolines must never themselves call mcount.
    build.flag_if_supported("-fno-pg");
    build.include("asm/x86_64");
    build.compile("fntrace_trampolines");
}
