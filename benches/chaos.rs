//! The chaos benchmark: `cargo bench --bench chaos`.
//!
//! Two real `gcc -pg` services (`tests/c/chaos_service.c`, linked with
//! `libfntrace.a`), one under each patching protocol (`FNTRACE_PATCH=
//! breakpoint` and `stop`), run at once for `FNTRACE_CHAOS_SECONDS`
//! (default 60): plugins (`-pg -mfentry` and `-pg`) loaded and unloaded in
//! a loop, short-lived threads, forks, SIGUSR1 with a traced handler, the
//! `function` tracer toggled through the C API (`FNTRACE_CHAOS_FUNCTION=0`:
//! `profile` instead, and no `function` over the socket either; see
//! docs/journal/chaos-2026-11-26.md for why); meanwhile a driver thread
//! per service sends live-control requests over its socket: `graph`,
//! `function` and `profile` toggled, recordings started and stopped (each
//! read back), flight recorders started, snapshotted and stopped, dumps,
//! `report`, `status`, `profile` (parsed), `filter`, and `GET /metrics`.
//! Then, quiescent, exact call counts (profile tracer, fntrace's reader and
//! `uftrace report` of a lossless recording). The machinery is
//! `tests/common/chaos.rs`; `tests/programs/chaos.rs` runs it for 8 s.
//!
//! Prints a table (operations per kind, the service's own counts,
//! failures, crashes, RSS, the quiescent counts) and every failure; exits
//! non-zero if a run falls short of its targets: 0 crashes, 0
//! failed operations, peak RSS growth ≤ 64 MiB, exact quiescent counts.

mod common;

#[allow(dead_code)]
#[path = "../tests/common/native.rs"]
mod native;

// The test's check of one symbol-index rebuild is not used here.
#[allow(dead_code)]
#[path = "../tests/common/chaos.rs"]
mod chaos;

fn main() {
    // `cargo bench` passes `--bench`; a filter argument selects nothing here.
    let seconds = std::env::var("FNTRACE_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60.0);
    let seed = std::env::var("FNTRACE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_c4a0);
    let scratch = chaos::Scratch::new("chaos-bench");
    let built = chaos::build(scratch.path());
    println!(
        "chaos: {seconds} s under both protocols at once, seed {seed}, function tracer toggled: {}",
        chaos::function_from_env(true)
    );
    println!("machine: {}", common::machine_description());
    println!("load average before: {}", common::load_average());
    let config = chaos::Config {
        seconds,
        quiet_calls: 2000,
        seed,
        function: chaos::function_from_env(true),
    };
    let reports = chaos::run_both(&built, &config, scratch.path());
    println!("load average after: {}", common::load_average());
    println!();
    print!("{}", chaos::table(&reports));
    println!();
    print!("{}", chaos::details(&reports));
    let shortfalls: Vec<String> = reports.iter().flat_map(|r| r.shortfalls()).collect();
    if shortfalls.is_empty() {
        println!("MET: 0 crashes, 0 failed operations, peak RSS growth <= 64 MiB, exact quiescent counts");
    } else {
        for shortfall in &shortfalls {
            println!("MISS: {shortfall}");
        }
        drop(scratch);
        std::process::exit(1);
    }
}
