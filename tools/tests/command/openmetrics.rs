//! The metrics text of a live profile, in the Prometheus text format 0.0.4,
//! passes `promtool check metrics` (Prometheus's linter, Debian package
//! `prometheus`) with every option of the exposition. The test fails,
//! never skips, when promtool is missing.

use crate::profile_program;

use fntrace_tools::analysis::{
    exposition, openmetrics, Exposition, FunctionProfile, Histogram, NotKept, ProcessInfo,
    ProfileSnapshot, TextFormat,
};
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
            // Two instances of one generic function: one short name.
            function(
                0x7000,
                "core::ptr::drop_in_place::<kv::Conn<u8>>",
                &[100, 200],
                0,
            ),
            function(
                0x8000,
                "core::ptr::drop_in_place::<std::io::Error>",
                &[300],
                0,
            ),
        ],
        paths: Vec::new(),
        not_kept: NotKept {
            paths: 10,
            functions: 2,
        },
    };
    let everything = Exposition::everything(TextFormat::Prometheus);
    let process = ProcessInfo {
        version: "0.1.0".into(),
        pid: 4242,
        exe: "kv-service".into(),
        threads: 3,
    };
    let variants = [
        ("everything", everything.clone()),
        (
            "the endpoint's default",
            Exposition {
                format: TextFormat::Prometheus,
                process: Some(process.clone()),
                ..Exposition::default()
            },
        ),
        (
            "full names",
            Exposition {
                full_names: true,
                ..everything.clone()
            },
        ),
        (
            "no histograms",
            Exposition {
                histograms: 0,
                ..everything.clone()
            },
        ),
        (
            "8 buckets per power of two",
            Exposition {
                buckets_per_doubling: 8,
                ..everything.clone()
            },
        ),
        (
            "a filter",
            Exposition {
                filter: vec!["kv::*".into(), "!main".into()],
                ..everything.clone()
            },
        ),
        (
            "a ceiling",
            Exposition {
                max_functions: 2,
                histograms: 1,
                process: Some(process),
                ..everything.clone()
            },
        ),
    ];
    for (what, options) in variants {
        let text = exposition(&snapshot, &options);
        let (ok, said) = promtool_check(&text);
        assert!(ok && said.is_empty(), "{what}: promtool: {said}\n{text}");
    }
    let text = exposition(&snapshot, &everything);
    // Merged by name: one series for both `Store::get`.
    assert!(
        text.contains(
            "fntrace_function_duration_seconds_count{function=\"kv::store::Store::get\"} 5\n"
        ),
        "{text}"
    );
    let short = exposition(
        &snapshot,
        &Exposition {
            full_names: false,
            ..everything
        },
    );
    assert!(
        short.contains(
            "fntrace_function_duration_seconds_count{function=\"core::ptr::drop_in_place\"} 3\n"
        ),
        "{short}"
    );
    // The OpenMetrics text is the one promtool cannot read: its counters.
    let (ok, said) = promtool_check(&openmetrics(&snapshot));
    assert!(
        !ok && said.contains("fntrace_profile_lost_calls_total no help text"),
        "{said}"
    );
}

#[test]
fn promtool_rejects_what_it_should() {
    // The check has teeth: an OpenMetrics-style counter (family `x`, sample
    // `x_total`), which the 0.0.4 text names `x_total` for that reason,
    // fails it.
    let counter = "# TYPE x counter\n# HELP x A counter.\nx_total 1\n# EOF\n";
    let (ok, said) = promtool_check(counter);
    assert!(!ok, "promtool accepted {counter:?}: {said}");
}
