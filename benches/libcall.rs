//! What a library call costs when fntrace hooks it: `cargo bench --bench
//! libcall`.
//!
//! `benches/c/libcall_cost.c` (`gcc -O2 -pg`) calls `lc_cheap`, a function
//! of a shared library of its own (`benches/c/libcall_cheap.c`, `x + 1`),
//! `FNTRACE_BENCH_CALLS` times (default 20M) through its PLT, on one
//! thread, and prints its CPU time per call. Run as:
//!
//! 1. plain (no `libfntrace.so`);
//! 2. preloaded, `FNTRACE_LIBCALL=1` and no tracer: the call goes through
//!    its stub, whose site is a NOP (what hooked calls cost that no
//!    tracer selects);
//! 3. the flight recorder, `FNTRACE_LIBCALL=0` (`FNTRACE_FLIGHT=8M`,
//!    `FNTRACE_OUTPUT`): the library call untraced;
//! 4. the flight recorder with its default: the library call traced by
//!    the graph tracer into the window (two events a call).
//!
//! `FNTRACE_BENCH_RUNS` rounds (default 5), the four in turn in each.
//! Printed: each case's CPU per call (min–max over the rounds), and the
//! differences per round (2 − 1: a hooked call idle; 4 − 3: a traced
//! library call), min–max. `FNTRACE_BENCH_LIB=PATH` measures that
//! `libfntrace.so` instead of building this tree's (release).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::TempDir;

/// Runs `program` with `env`; its CPU ns per call.
fn run(program: &Path, calls: u64, env: &[(&str, &str)], preload: Option<&Path>) -> f64 {
    let mut command = Command::new(program);
    command.arg(calls.to_string());
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") || name == "LD_PRELOAD" {
            command.env_remove(name);
        }
    }
    if let Some(library) = preload {
        command.env("LD_PRELOAD", library);
    }
    let output = command.envs(env.iter().copied()).output().unwrap();
    assert!(
        output.status.success(),
        "{env:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if env.contains(&("FNTRACE_LIBCALL", "1")) {
        assert!(
            stderr.contains("library functions hooked"),
            "{env:?}: {stderr}"
        );
    }
    stdout
        .split_whitespace()
        .next()
        .and_then(|cpu| cpu.parse().ok())
        .unwrap_or_else(|| panic!("{env:?}: the program printed {stdout:?}"))
}

fn main() {
    let calls: u64 = std::env::var("FNTRACE_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000_000);
    let rounds: usize = std::env::var("FNTRACE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let library = match std::env::var_os("FNTRACE_BENCH_LIB") {
        Some(path) => PathBuf::from(path),
        None => {
            common::fntrace_cli();
            common::profile_dir()
                .parent()
                .unwrap()
                .join("release/libfntrace.so")
        }
    };
    let dir = TempDir::new("fntrace-bench-libcall");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cheap = dir.path().join("liblc_cheap.so");
    common::run_ok(
        Command::new("gcc")
            .args(["-O2", "-fPIC", "-shared", "-o"])
            .arg(&cheap)
            .arg(manifest.join("benches/c/libcall_cheap.c")),
    );
    let program = dir.path().join("libcall_cost");
    let rpath = format!("-Wl,-rpath,{}", dir.path().display());
    common::run_ok(
        Command::new("gcc")
            .args(["-O2", "-pg", "-o"])
            .arg(&program)
            .arg(manifest.join("benches/c/libcall_cost.c"))
            .arg("-L")
            .arg(dir.path())
            .args(["-llc_cheap", &rpath]),
    );
    println!(
        "libcall bench: {calls} calls of lc_cheap through the PLT, {rounds} rounds; {}; load {}; {}",
        common::machine_description(),
        common::load_average(),
        library.display()
    );
    let names = [
        "plain",
        "hooked, no tracer (FNTRACE_LIBCALL=1)",
        "flight recorder, FNTRACE_LIBCALL=0",
        "flight recorder, library calls on (the default)",
    ];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        let out = |case: &str| dir.path().join(format!("out-{round}-{case}"));
        let (off, on) = (out("off"), out("on"));
        let cases: [(&[(&str, &str)], bool); 4] = [
            (&[], false),
            (&[("FNTRACE_LIBCALL", "1")], true),
            (
                &[
                    ("FNTRACE_FLIGHT", "8M"),
                    ("FNTRACE_OUTPUT", off.to_str().unwrap()),
                    ("FNTRACE_LIBCALL", "0"),
                ],
                true,
            ),
            (
                &[
                    ("FNTRACE_FLIGHT", "8M"),
                    ("FNTRACE_OUTPUT", on.to_str().unwrap()),
                ],
                true,
            ),
        ];
        for (i, (env, preload)) in cases.iter().enumerate() {
            let preload = preload.then_some(library.as_path());
            cpu[i].push(run(&program, calls, env, preload));
        }
    }
    let range = |values: &[f64]| {
        let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        format!("{min:.2}–{max:.2} ns")
    };
    for (name, values) in names.iter().zip(&cpu) {
        println!("  {name}: CPU per call {}", range(values));
    }
    let differences = |a: usize, b: usize| -> Vec<f64> {
        cpu[a].iter().zip(&cpu[b]).map(|(x, y)| x - y).collect()
    };
    println!(
        "  a hooked library call no tracer selects (2 − 1): {} more per call",
        range(&differences(1, 0))
    );
    println!(
        "  a library call traced by the flight recorder (4 − 3): {} more per call",
        range(&differences(3, 2))
    );
}
