//! A real Prometheus server (Debian package `prometheus`) scrapes a traced
//! program's `/metrics` (`FNTRACE_METRICS=127.0.0.1:PORT`: the runtime
//! serves the live profile's OpenMetrics text), and the counts are read
//! back through Prometheus's query API, exact; the same for the text of
//! `fntrace ctl metrics` served by the test. The tests fail, never skip,
//! when the server is missing.
//!
//! The server runs in a temporary directory of its own (configuration,
//! database), on a free loopback port, scraping every second.

use crate::common;
use crate::profile_program;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::prometheus_server::{encode, free_port, get, Prometheus};
use common::TempDir;
use fntrace_tools::analysis::ProfileSnapshot;
use profile_program::Program;

/// The traced program in a new temporary directory (`name`), serving its
/// metrics on a free loopback port (and `env`), its control socket at
/// `control.sock` there; the metrics address.
fn serving_metrics(name: &str, env: &[(&str, &str)]) -> (TempDir, Program, String) {
    let dir = TempDir::new(name);
    let address = format!("127.0.0.1:{}", free_port());
    let mut vars = vec![("FNTRACE_METRICS", address.as_str())];
    vars.extend_from_slice(env);
    let program = Program::start(&dir.0, &dir.0.join("control.sock"), &vars);
    (dir, program, address)
}

impl Prometheus {
    /// The families read as typed, with their unit: the OpenMetrics
    /// parser read them.
    fn expect_openmetrics_families(&self) {
        assert_eq!(
            self.metadata("fntrace_function_duration_seconds"),
            ("histogram".to_string(), "seconds".to_string())
        );
        assert_eq!(
            self.metadata("fntrace_function_self_seconds"),
            ("summary".to_string(), "seconds".to_string())
        );
        assert_eq!(self.metadata("fntrace_function_running_calls").0, "gauge");
    }
}

#[test]
fn prometheus_scrapes_exact_counts() {
    let (dir, mut program, metrics_address) = serving_metrics("prometheus", &[]);
    let socket = dir.0.join("control.sock");
    let target = socket.to_str().unwrap();
    profile_program::fntrace(&["ctl", target, "enable", "profile"]);
    assert_eq!(program.ask("run 1234"), 1234);

    let (prometheus, log) = Prometheus::start_in(&dir.0, &metrics_address, &[]);
    prometheus.expect(
        &log,
        &[
            ("up{job=\"fntrace\"}", "1"),
            (
                "fntrace_function_duration_seconds_count{function=\"handle\"}",
                "1234",
            ),
            (
                "fntrace_function_duration_seconds_count{function=\"leaf\"}",
                "2468",
            ),
            (
                "fntrace_function_duration_seconds_bucket{function=\"parse\",le=\"+Inf\"}",
                "1234",
            ),
            (
                "fntrace_function_self_seconds_count{function=\"parse\"}",
                "1234",
            ),
            ("fntrace_profile_lost_calls_total", "0"),
        ],
    );

    // More calls: the next scrapes see them, exact.
    assert_eq!(program.ask("run 766"), 766);
    prometheus.expect(
        &log,
        &[(
            "fntrace_function_duration_seconds_count{function=\"handle\"}",
            "2000",
        )],
    );
    // The highest bound holds every call (each bound a sum of whole
    // internal buckets).
    let bound =
        "fntrace_function_duration_seconds_bucket{function=\"handle\",le=\"137.438953472\"}";
    assert_eq!(prometheus.value(bound).as_deref(), Some("2000"));
    prometheus.expect_openmetrics_families();
}

/// Serves `text` as OpenMetrics on a free loopback port, from a thread,
/// to every request; the address.
fn serve_text(text: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            // The request's head, up to the empty line.
            let mut head = Vec::new();
            let mut byte = [0];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; \
                 charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    address
}

/// The encoder alone, whatever serves it: the text `fntrace ctl metrics
/// --openmetrics` prints for a traced program, served by this test,
/// scraped and read back exact.
#[test]
fn prometheus_reads_the_text_of_ctl_metrics() {
    let dir = TempDir::new("prometheus-ctl");
    let socket = dir.0.join("control.sock");
    let mut program = Program::start(&dir.0, &socket, &[]);
    let target = socket.to_str().unwrap();
    profile_program::fntrace(&["ctl", target, "enable", "profile"]);
    assert_eq!(program.ask("run 321"), 321);
    profile_program::fntrace(&["ctl", target, "disable", "profile"]);
    let text = profile_program::fntrace(&["ctl", target, "metrics", "--openmetrics"]);
    let address = serve_text(text);

    let (prometheus, log) = Prometheus::start_in(&dir.0, &address, &[]);
    prometheus.expect(
        &log,
        &[
            ("up{job=\"fntrace\"}", "1"),
            (
                "fntrace_function_duration_seconds_count{function=\"handle\"}",
                "321",
            ),
            (
                "fntrace_function_duration_seconds_count{function=\"leaf\"}",
                "642",
            ),
            (
                "fntrace_function_duration_seconds_bucket{function=\"leaf\",le=\"+Inf\"}",
                "642",
            ),
            (
                "fntrace_function_self_seconds_count{function=\"parse\"}",
                "321",
            ),
        ],
    );
    prometheus.expect_openmetrics_families();
}

impl Prometheus {
    /// The result of the instant query `query`: its series, with their
    /// values.
    fn result(&self, query: &str) -> Vec<serde_json::Value> {
        let (code, body) =
            get(self.port, &format!("/api/v1/query?query={}", encode(query))).unwrap();
        assert_eq!(code, 200, "{query}: {body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        json["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// The queries of the Grafana dashboard: each panel's `expr`, and each
/// variable's `label_values(METRIC, LABEL)` as `count by (LABEL) (METRIC)`,
/// with the variables given the values a user would pick (every instance
/// and function) and `$__rate_interval` the 30 s Grafana would take for a
/// scrape every second at most.
fn dashboard_queries() -> Vec<String> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let path = workspace.join("examples/grafana/fntrace-dashboard.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut queries = Vec::new();
    for panel in json["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queries.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for variable in json["templating"]["list"].as_array().unwrap() {
        let Some(query) = variable["query"]["query"].as_str() else {
            continue; // the data source
        };
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap();
        let (metric, label) = inner.rsplit_once(", ").unwrap();
        queries.push(format!("count by ({label}) ({metric})"));
    }
    queries
        .into_iter()
        .map(|q| {
            q.replace("$__rate_interval", "30s")
                .replace("$job", "fntrace")
                .replace("$instance", ".*")
                .replace("$function", ".*")
        })
        .collect()
}

/// The dashboard's queries return data from a real Prometheus scraping a
/// traced program's endpoint: every one non-empty, with a number (not
/// NaN) in at least one series.
#[test]
fn the_dashboards_queries_return_data() {
    let queries = dashboard_queries();
    assert!(queries.len() >= 12, "{queries:?}");
    assert!(queries.iter().all(|q| !q.contains('$')), "{queries:?}");
    let (dir, mut program, metrics_address) = serving_metrics("prometheus-dashboard", &[]);
    let socket = dir.0.join("control.sock");
    let target = socket.to_str().unwrap();
    profile_program::fntrace(&["ctl", target, "enable", "profile"]);
    assert_eq!(program.ask("run 100"), 100);
    let (prometheus, log) = Prometheus::start_in(&dir.0, &metrics_address, &[]);
    prometheus.expect(
        &log,
        &[(
            "fntrace_function_self_seconds_count{function=\"handle\"}",
            "100",
        )],
    );
    // Calls between scrapes, so that rates over the window are not zero.
    let mut calls = 100;
    for query in &queries {
        let start = Instant::now();
        loop {
            calls += program.ask("run 200");
            let result = prometheus.result(query);
            let numbers = result.iter().any(|series| {
                series["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok())
                    .is_some_and(f64::is_finite)
            });
            if numbers {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{query}: {result:?}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    // Every call counted, none lost.
    let total = calls.to_string();
    prometheus.expect(
        &log,
        &[
            (
                "fntrace_function_self_seconds_count{function=\"handle\"}",
                total.as_str(),
            ),
            ("fntrace_profile_lost_calls_total", "0"),
        ],
    );
}

/// With native histograms on, Prometheus asks for the protobuf format and
/// the runtime gives it the duration histogram at schema 5, filled from
/// the profile's own sub-buckets: `histogram_quantile` over it is within
/// 5 % of the profile's own p50 and p99 of the same calls (the scrape
/// taken once the calls are done: `histogram_count` gives all of them),
/// for every function, not only those whose text carries classic buckets.
#[test]
fn native_histograms_give_the_quantiles_of_the_profile() {
    let (dir, mut program, metrics_address) = serving_metrics(
        "prometheus-native",
        &[
            // Classic buckets for one function only: every function's
            // native histogram is there all the same.
            ("FNTRACE_METRICS_HISTOGRAMS", "1"),
        ],
    );
    let socket = dir.0.join("control.sock");
    let target = socket.to_str().unwrap();
    profile_program::fntrace(&["ctl", target, "enable", "profile"]);
    assert_eq!(program.ask("run 20000"), 20000);
    assert_eq!(program.ask("nap 300"), 300);
    profile_program::fntrace(&["ctl", target, "disable", "profile"]);
    let saved = dir.0.join("now.profile");
    profile_program::fntrace(&["ctl", target, "profile", "--save", saved.to_str().unwrap()]);
    let snapshot = ProfileSnapshot::from_text(&std::fs::read_to_string(&saved).unwrap()).unwrap();

    let flags = ["--enable-feature=native-histograms"];
    let (prometheus, log) = Prometheus::start_in(&dir.0, &metrics_address, &flags);
    let series =
        |function: &str| format!("fntrace_function_duration_seconds{{function=\"{function}\"}}");
    // Calls of tens of nanoseconds (below 256 ns the profile's buckets
    // are exact) and of 0.1 to 1 ms asleep.
    let functions = [
        ("handle", "20000"),
        ("leaf", "40000"),
        ("parse", "20000"),
        ("nap", "300"),
    ];
    for (function, calls) in functions {
        let count = format!("histogram_count({})", series(function));
        prometheus.expect(&log, &[(count.as_str(), calls)]);
        let own = snapshot
            .functions
            .iter()
            .find(|f| f.name == function)
            .expect("the function's row");
        for q in [0.5, 0.99] {
            let query = format!("histogram_quantile({q}, {})", series(function));
            let seen: f64 = prometheus
                .value(&query)
                .unwrap_or_else(|| panic!("{query}: no value"))
                .parse()
                .unwrap();
            let expected = own.durations.quantile(q) as f64 * 1e-9;
            let error = (seen - expected).abs() / expected;
            eprintln!("{query}: {seen:.4e} s, the profile's {expected:.4e} s");
            assert!(
                error <= 0.05,
                "{query}: {seen} s, the profile's own {expected} s ({:.1} % apart)",
                error * 100.0
            );
        }
    }
    // The other families came through the same format.
    prometheus.expect(
        &log,
        &[
            (
                "fntrace_function_self_seconds_count{function=\"parse\"}",
                "20000",
            ),
            ("fntrace_function_running_calls{function=\"handle\"}", "0"),
            ("fntrace_profile_lost_calls_total", "0"),
            ("count(fntrace_build_info{exe=\"service\"})", "1"),
        ],
    );
    assert_eq!(
        prometheus.metadata("fntrace_function_duration_seconds").0,
        "histogram"
    );
    assert_eq!(
        prometheus.metadata("fntrace_profile_lost_calls_total").0,
        "counter"
    );
}
