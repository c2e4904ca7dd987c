//! Compiles the x86-64 trampolines in `asm/`, and the C definitions of the
//! variadic exec functions in `shim/`, into static libraries that the crate
//! links. Other targets are refused (by `compile_error!` in
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
        "asm/x86_64/profile.S",
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

    // execl, execlp, execle: variadic, so written in C (src/preload/exec.rs
    // exports them).
    let exec_list = "shim/exec_list.c";
    println!("cargo:rerun-if-changed={exec_list}");
    let mut build = cc::Build::new();
    build.file(exec_list);
    build.flag_if_supported("-fno-pg");
    build.compile("fntrace_exec_list");
}
