//! The profile soak's short version (the 10-minute run is `cargo
//! bench --bench profile_soak`, machinery in `tests/common/soak.rs`): a
//! real `gcc -pg` service with `libfntrace.so` preloaded serves paced
//! requests on two threads and churns short-lived threads for
//! `FNTRACE_SOAK_SECONDS` (default 20), while the test scrapes `/metrics`
//! and samples its resident memory every second and, through `fntrace
//! ctl`, reads, resets and switches the profile. Then: every scrape and
//! request answered, resident growth after a 5 s warm-up ≤ 4 MiB (the
//! bench holds 10 minutes to 1 MiB and a flat slope), and exact counts
//! from a reset taken at a known point.

#[path = "../common/soak.rs"]
mod soak;

#[test]
fn profile_soak_short() {
    let seconds = std::env::var("FNTRACE_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let scratch = soak::Scratch::new("profile-soak-test");
    let built = soak::build(scratch.path());
    let config = soak::Config::with_seconds(seconds);
    let report = soak::run(&built, &config, scratch.path(), &mut |_| {});
    eprint!("{}", report.table());
    let shortfalls = report.shortfalls(&soak::Bounds {
        growth_kib: 4 * 1024,
        slope_kib_per_min: None,
    });
    assert!(shortfalls.is_empty(), "{shortfalls:#?}");
    // The sampler reads the right fields, both from one read of status
    // (read apart, 8,192 KiB of RSS against a peak of 8,152 was seen).
    assert!(
        report.samples.iter().all(|s| s.hwm_kib >= s.rss_kib),
        "{:?}",
        report.samples
    );
    // The run did what it says (a driver that did nothing would pass).
    assert!(report.scrapes >= seconds - 2, "{} scrapes", report.scrapes);
    assert!(report.profiles > 0 && report.resets > 1 && report.toggles > 0);
    assert!(report.threads > 100, "{} threads", report.threads);
    assert!(report.calls > seconds * 50_000, "{} calls", report.calls);
}

#[test]
fn slope_of_a_line() {
    let points: Vec<(f64, f64)> = (0..10)
        .map(|i| {
            (
                i as f64,
                100.0 + 3.0 * i as f64 + if i % 2 == 0 { 1.0 } else { -1.0 },
            )
        })
        .collect();
    let slope = soak::slope(&points);
    assert!((slope - 3.0).abs() < 0.1, "{slope}");
    assert_eq!(soak::slope(&[(0.0, 5.0), (1.0, 5.0), (2.0, 5.0)]), 0.0);
}
