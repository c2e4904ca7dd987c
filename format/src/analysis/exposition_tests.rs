//! Tests of the exposition's options (`super::exposition`): short names,
//! histograms for the top functions only, the filter, the process lines;
//! apart from both the selection and the writer, which they run together.

use super::exposition as render;
use super::{Exposition, FunctionProfile, Histogram, ProcessInfo, ProfileSnapshot};

fn function(address: usize, name: &str, total_ns: u64) -> FunctionProfile {
    let mut durations = Histogram::new();
    durations.record(total_ns);
    FunctionProfile {
        function: address,
        name: name.into(),
        durations,
        total_ns,
        ..FunctionProfile::default()
    }
}

fn snapshot() -> ProfileSnapshot {
    ProfileSnapshot {
        functions: vec![
            function(0x1000, "core::ptr::drop_in_place::<kv::Conn>", 100),
            function(0x2000, "core::ptr::drop_in_place::<std::io::Error>", 200),
            function(0x3000, "<kv::Store<u8>>::get", 5_000),
            function(0x4000, "kv::handle", 9_000),
            function(0x5000, "std::rt::lang_start::<()>", 50),
        ],
        ..ProfileSnapshot::default()
    }
}

/// The label values of the `fntrace_function_running_calls` series.
fn exported(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("fntrace_function_running_calls{function=\""))
        .map(|l| l.split('"').next().unwrap())
        .collect()
}

/// The label values with a histogram.
fn with_histogram(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("fntrace_function_duration_seconds_count{function=\""))
        .map(|l| l.split('"').next().unwrap())
        .collect()
}

#[test]
fn short_names_merge_the_instances_of_a_generic_function() {
    let options = Exposition::default();
    let text = render(&snapshot(), &options);
    assert_eq!(
        exported(&text),
        [
            "<kv::Store>::get",
            "core::ptr::drop_in_place",
            "kv::handle",
            "std::rt::lang_start"
        ],
        "{text}"
    );
    // One series of both drop_in_place instances: 2 calls, 300 ns.
    assert!(
        text.contains(
            "fntrace_function_self_seconds_count{function=\"core::ptr::drop_in_place\"} 2\n"
        ),
        "{text}"
    );
    assert!(text.contains(
        "fntrace_function_duration_seconds_sum{function=\"core::ptr::drop_in_place\"} 0.0000003\n"
    ));
    let full = Exposition {
        full_names: true,
        ..Exposition::default()
    };
    let text = render(&snapshot(), &full);
    assert_eq!(exported(&text).len(), 5, "{text}");
    assert!(text.contains("function=\"<kv::Store<u8>>::get\""));
}

#[test]
fn only_the_most_total_time_carries_a_histogram() {
    let options = Exposition {
        histograms: 2,
        ..Exposition::default()
    };
    let text = render(&snapshot(), &options);
    assert_eq!(
        with_histogram(&text),
        ["<kv::Store>::get", "kv::handle"],
        "{text}"
    );
    assert_eq!(exported(&text).len(), 4);
    // 2 × 37 + 2 × 3 function series, 2 counters, 2 gauges.
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(samples, 2 * 37 + 2 * 3 + 4, "{text}");
    let none = Exposition {
        histograms: 0,
        ..Exposition::default()
    };
    assert!(with_histogram(&render(&snapshot(), &none)).is_empty());
}

#[test]
fn the_filter_takes_the_trace_filters_globs_on_full_names() {
    let options = Exposition {
        filter: vec!["kv::*".into(), "!kv::handle".into()],
        ..Exposition::default()
    };
    let text = render(&snapshot(), &options);
    // `kv::*` selects the drop_in_place of a kv type too (a path starts
    // after `<`), not the one of std's; `!` excludes.
    assert_eq!(
        exported(&text),
        ["<kv::Store>::get", "core::ptr::drop_in_place"],
        "{text}"
    );
    assert!(text.contains(
        "fntrace_function_self_seconds_count{function=\"core::ptr::drop_in_place\"} 1\n"
    ));
    // Not counted as omitted: the filter asked for them to be left out.
    assert!(text.contains("\nfntrace_metrics_functions_omitted 0\n"));
}

#[test]
fn the_process_is_described() {
    let options = Exposition {
        process: Some(ProcessInfo {
            version: "1.2.3".into(),
            pid: 42,
            exe: "kv \"service\"".into(),
            threads: 7,
        }),
        ..Exposition::default()
    };
    let text = render(&snapshot(), &options);
    assert!(text.contains("\nfntrace_process_threads 7\n"), "{text}");
    assert!(
        text.contains(
            "\nfntrace_build_info{version=\"1.2.3\",pid=\"42\",exe=\"kv \\\"service\\\"\"} 1\n# EOF\n"
        ),
        "{text}"
    );
    assert!(!render(&snapshot(), &Exposition::default()).contains("fntrace_build_info"));
}
