//! The profile's memory budget: a thread that calls more functions than
//! it has rows for (4096) has the calls of the others counted in
//! `not_kept.functions`, never dropped silently: rows and not-kept calls
//! add up to the calls made. (10,000 `gcc -pg` functions of the scale
//! fixture, each called once by its `drive` function.)

use fntrace::{Filter, PROFILE_TRACER};
use fntrace_fixtures::scale;

#[test]
fn calls_beyond_the_budget_are_counted_not_kept() {
    let library = scale::load(10_000);
    fntrace::init().unwrap();
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &Filter::new().include("scale10000_*")).unwrap();
    let (drive, n) = (library.drive, library.functions as i64);
    let result = std::thread::spawn(move || drive(0, n)).join().unwrap();
    assert_eq!(result, scale::expected_drive(10_000, 0, n));
    fntrace::disable("profile").unwrap();
    let snapshot = PROFILE_TRACER.snapshot();
    let counted: u64 = snapshot.functions.iter().map(|f| f.durations.count()).sum();
    // drive and its 10,000 callees: 4096 rows, the rest not kept.
    assert_eq!(snapshot.functions.len(), 4096);
    assert_eq!(counted + snapshot.not_kept.functions, 10_001);
    assert_eq!(snapshot.not_kept.functions, 10_001 - 4096);
    // Every call with a row has its path (drive → f_i): 4096 paths.
    assert_eq!(snapshot.not_kept.paths, 0);
    assert_eq!(snapshot.paths.iter().map(|p| p.calls).sum::<u64>(), counted);
    assert!(snapshot.functions.iter().all(|f| f.durations.count() == 1));
}
