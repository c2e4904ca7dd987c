//! The OpenMetrics text of a live profile passes `promtool check metrics`
//! (Prometheus's linter, Debian package `prometheus`). The test fails, never
//! skips, when promtool is missing.

mod profile_program;

use fntrace_tools::analysis::{openmetrics, FunctionProfile, Histogram, NotKept, ProfileSnapshot};
use profile_program::promtool_check;

fn function(address: usize, name: &str, values: &[u64], running: u64) -> FunctionProfile {
    let mut durations = Histogram::new();
    for &value in values {
        durations.record(value);
    }
    FunctionProfile {
        function: address,
        name: name.into(),
        total_ns: durations.sum(),
        self_ns: durations.sum() / 2,
        durations,
        running,
    }
}

#[test]
fn promtool_accepts_the_exposition() {
    let snapshot = ProfileSnapshot {
        taken_ns: 1,
        threads: 3,
        functions: vec![
            function(0x1000, "main", &[5_000_000_000], 1),
            function(
                0x2000,
                "kv::store::Store::get",
                &[80, 300, 1_000, 70_000],
                0,
            ),
            function(0x3000, "a \"quoted\\\" name\nwith a line feed", &[1], 0),
            function(0x4000, "std::vec::Vec<T,A>::push", &[], 4),
            function(0x5000, "kv::store::Store::get", &[90], 0),
            function(0x6000, "", &[200_000_000_000], 0),
        ],
        paths: Vec::new(),
        not_kept: NotKept {
            paths: 10,
            functions: 2,
        },
    };
    let text = openmetrics(&snapshot);
    let (ok, said) = promtool_check(&text);
    assert!(ok && said.is_empty(), "promtool: {said}\n{text}");
    // Merged by name: one series for both `Store::get`.
    assert!(
        text.contains(
            "fntrace_function_duration_seconds_count{function=\"kv::store::Store::get\"} 5\n"
        ),
        "{text}"
    );
}

#[test]
fn promtool_rejects_what_it_should() {
    // The check has teeth: an OpenMetrics-style counter (family `x`, sample
    // `x_total`), which this exposition avoids for that reason, fails it.
    let counter = "# TYPE x counter\n# HELP x A counter.\nx_total 1\n# EOF\n";
    let (ok, said) = promtool_check(counter);
    assert!(!ok, "promtool accepted {counter:?}: {said}");
}
