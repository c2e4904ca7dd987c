//! The profile soak (memory must stay flat over a 10-minute run):
//! `cargo bench --bench profile_soak`, 10 minutes (`FNTRACE_SOAK_SECONDS`
//! sets another length).
//!
//! A real `gcc -pg` service (`tests/c/profile_soak.c`) runs with
//! `libfntrace.so` preloaded (no code change): two worker threads serving
//! paced requests through several call paths (about 200,000 traced calls
//! a second) and a thread starting two short-lived threads every 10 ms.
//! The driver enables the profile tracer with `fntrace ctl`, scrapes `GET
//! /metrics` (`FNTRACE_METRICS`) and samples `VmRSS`/`VmHWM` every second,
//! reads `fntrace ctl profile` every 3 s, resets the profile every 30 s and
//! switches it off for a second every 20 s. In the last 10 s, from a reset
//! taken with the service's threads stopped, the calls made are counted
//! exactly by `fntrace ctl metrics` (threads stopped, profile off). The
//! machinery is `tests/common/soak.rs`; `tests/programs/profile_soak.rs` runs it for
//! 20 s.
//!
//! Prints the figures (resident size after the 30 s warm-up, its largest
//! value after it, at the end, `VmHWM`, the least-squares slope, scrapes,
//! calls) and exits non-zero unless memory is flat (growth after the
//! warm-up ≤ 1 MiB: the largest sample, the end, `VmHWM` and the rise of
//! the least-squares line over the run; the slope over the second half
//! within ±32 KiB/min, where a leak would still show and the allocator's
//! warm-up no longer does) and the counts exact.

mod common;

#[allow(dead_code)]
#[path = "../tests/common/native.rs"]
mod native;

#[path = "../tests/common/soak.rs"]
mod soak;

fn main() {
    // `cargo bench` passes `--bench`; a filter argument selects nothing here.
    let seconds = std::env::var("FNTRACE_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let scratch = soak::Scratch::new("profile-soak-bench");
    let built = soak::build(scratch.path());
    let config = soak::Config::with_seconds(seconds);
    println!("profile soak: {seconds} s, {config:?}");
    println!("machine: {}", common::machine_description());
    println!("load average before: {}", common::load_average());
    let report = soak::run(&built, &config, scratch.path(), &mut |sample| {
        // A line every 10 s, so that a long run shows it is alive.
        let at = sample.at.round() as u64;
        if at.is_multiple_of(10) {
            println!(
                "  {at:>4} s: VmRSS {} KiB, VmHWM {} KiB",
                sample.rss_kib, sample.hwm_kib
            );
        }
    });
    println!("load average after: {}", common::load_average());
    println!();
    print!("{}", report.table());
    let bounds = soak::Bounds {
        growth_kib: 1024,
        slope_kib_per_min: Some(32.0),
    };
    let shortfalls = report.shortfalls(&bounds);
    if shortfalls.is_empty() {
        println!(
            "MET: VmRSS growth after the warm-up <= 1 MiB (largest sample, end, VmHWM; \
             least-squares line over the run), slope over the second half within \
             ±32 KiB/min, exact counts"
        );
    } else {
        for shortfall in &shortfalls {
            println!("MISS: {shortfall}");
        }
        drop(scratch);
        std::process::exit(1);
    }
}
