//! The chaos benchmark's short version (the long one is
//! `cargo bench --bench chaos`, machinery in `tests/common/chaos.rs`): two
//! real `gcc -pg` services, one under each patching protocol, both at once
//! for `FNTRACE_CHAOS_SECONDS` (default 8), load and unload `-pg -mfentry`
//! and `-pg` plugins, churn threads, fork, take signals with a traced
//! handler and toggle `profile` through the C API, while the test toggles
//! `graph` and `profile`, starts and stops recordings and flight
//! recorders, takes snapshots and dumps and sends `status`, `profile`,
//! `report`, `filter` and metrics requests. Then: no crash, no failed
//! operation (but those of the known fork bug, listed), peak RSS growth ≤
//! 64 MiB, and once quiescent, exact counts read back from the profile
//! tracer, fntrace's reader and `uftrace report`.
//!
//! The `function` tracer is left out unless `FNTRACE_CHAOS_FUNCTION=1`
//! (the bench toggles it): nothing drains its rings in a C service, so
//! its memory grows with the threads it saw (docs/journal/chaos-2026-11-26.md)
//! and the RSS bound would fail at a rate set by the machine's speed.

#[path = "../common/chaos.rs"]
mod harness;

#[test]
fn chaos_under_both_protocols_at_once() {
    let seconds = std::env::var("FNTRACE_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8.0);
    let scratch = harness::Scratch::new("chaos-test");
    let started = std::time::Instant::now();
    let built = harness::build(scratch.path());
    eprintln!("built in {:.1} s", started.elapsed().as_secs_f64());
    let config = harness::Config {
        seconds,
        quiet_calls: 500,
        seed: 0x5eed_c4a0,
        function: harness::function_from_env(false),
    };
    let reports = harness::run_both(&built, &config, scratch.path());
    eprintln!("ran in {:.1} s", started.elapsed().as_secs_f64());
    eprintln!("{}", harness::table(&reports));
    eprint!("{}", harness::details(&reports));
    let shortfalls: Vec<String> = reports.iter().flat_map(|r| r.shortfalls()).collect();
    assert!(shortfalls.is_empty(), "{shortfalls:#?}");
    for report in &reports {
        // The run did what it says (a driver that did nothing would pass).
        for kind in [
            "enable graph",
            "record",
            "flight start",
            "snapshot",
            "enable profile",
        ] {
            assert!(
                report.ops.get(kind).copied().unwrap_or(0) > 0,
                "{}: no {kind}: {:?}",
                report.protocol,
                report.ops
            );
        }
        for counter in [
            "plugin_loads",
            "churn_threads",
            "forks",
            "signals_handled",
            "capi_toggles",
        ] {
            assert!(
                report.program.get(counter).copied().unwrap_or(0) > 0,
                "{}: no {counter}: {:?}",
                report.protocol,
                report.program
            );
        }
    }
}

/// fntrace rebuilds its symbol index when objects were loaded or unloaded;
/// it read each object's file whole to do so, so that the peak RSS of a
/// service grew by the size of its executable, debug information and all,
/// after every `dlopen` (+52 MiB at each rebuild for the chaos service
/// built with the test profile). Now only the symbol tables are read: the
/// service's 64 MiB of never-loaded ballast must not show.
#[test]
fn rebuilding_the_symbol_index_does_not_read_whole_files() {
    let scratch = harness::Scratch::new("chaos-rebuild");
    let built = harness::build(scratch.path());
    let growth = harness::rebuild_peak_growth_kib(&built, scratch.path()).unwrap();
    eprintln!("peak RSS growth over a rebuild: {growth} KiB");
    assert!(
        growth < (harness::BALLAST_MIB << 10) / 4,
        "peak RSS grew by {growth} KiB over one rebuild of the symbol index: the files \
         were read whole ({} MiB of ballast)",
        harness::BALLAST_MIB
    );
}
