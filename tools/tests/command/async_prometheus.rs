//! The runtime future linker's families through Prometheus's protobuf
//! format: a real Prometheus server with native histograms on (it then
//! asks for protobuf) scrapes the anchor (`examples/async-anchor`)
//! recorded with `fntrace record --async`, every third request cancelled
//! while pending (`ASYNC_ANCHOR_CANCEL=3`); once it has answered, the
//! server's queries give exactly its futures (completed, busy's count,
//! dropped, none pending) and quantiles of the native histogram (what
//! Prometheus keeps of a histogram that has both) within 10 % of the
//! offline linker's over the recording of the same run.

use crate::common;
use crate::profile_program;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::prometheus_server::{free_port, Prometheus};
use common::TempDir;
use fntrace_tools::analysis::{self, FutureEnd};
use fntrace_tools::export::UftraceReader;
use fntrace_tools::EventSource;

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");
const SERVE: &str = "async_anchor::serve::{closure#0}";

#[test]
fn prometheus_reads_the_futures_in_protobuf() {
    const REQUESTS: u64 = 24;
    const CANCELLED: u64 = REQUESTS / 3;
    const ANSWERED: u64 = REQUESTS - CANCELLED;
    let dir = TempDir::new("async-prometheus");
    let data = dir.0.join("data");
    let metrics = format!("127.0.0.1:{}", free_port());
    let flags = ["--enable-feature=native-histograms"];
    let (prometheus, log) = Prometheus::start_in(&dir.0, &metrics, &flags);
    let mut child = Command::new(CLI)
        .arg("record")
        .arg("--lib")
        .arg(profile_program::library())
        .args(["--async", "-o"])
        .arg(&data)
        .arg("--")
        .arg(common::async_anchor())
        .args(["2", &REQUESTS.to_string(), "4", "3", "10"])
        .env("FNTRACE_METRICS", &metrics)
        .env("ASYNC_ANCHOR_CANCEL", "3")
        // Scraped every second: long enough for the queries' waits.
        .env("ASYNC_ANCHOR_LINGER_MS", "30000")
        .stdout(Stdio::piped())
        .spawn()
        .expect("running fntrace record");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("the anchor's answers").unwrap();
        if line == format!("requests {ANSWERED}") {
            break;
        }
    }
    let serve = format!("{{function=\"{SERVE}\"}}");
    let latency = format!("fntrace_future_latency_seconds{serve}");
    let count = format!("histogram_count({latency})");
    let busy = format!("fntrace_future_busy_seconds_count{serve}");
    let dropped = format!("fntrace_futures_dropped_total{serve}");
    let answered = ANSWERED.to_string();
    prometheus.expect(
        &log,
        &[
            (count.as_str(), answered.as_str()),
            (busy.as_str(), answered.as_str()),
            (dropped.as_str(), &CANCELLED.to_string()),
            ("fntrace_futures_pending", "0"),
            ("fntrace_futures_untracked_total", "0"),
        ],
    );
    assert_eq!(
        prometheus.metadata("fntrace_future_latency_seconds").0,
        "histogram"
    );
    let quantile = |q: f64| -> f64 {
        let query = format!("histogram_quantile({q}, {latency})");
        let seen = prometheus.value(&query);
        seen.unwrap_or_else(|| panic!("{query}: no value"))
            .parse()
            .unwrap()
    };
    let (p50, p99) = (quantile(0.5), quantile(0.99));
    let status = child.wait().unwrap();
    assert!(status.success(), "fntrace record: {status:?}");

    // The same futures' latencies, linked offline.
    let reader = UftraceReader::open(&data).expect("reading the recording");
    let linked = analysis::futures_of(&reader, reader.arg_specs())
        .unwrap()
        .expect("recorded with --async");
    let mut latencies: Vec<u64> = (linked.futures.iter())
        .filter(|f| f.end == FutureEnd::Ready && reader.name_of(f.function) == SERVE)
        .map(|f| f.end_ns - f.start_ns)
        .collect();
    latencies.sort_unstable();
    assert_eq!(latencies.len() as u64, ANSWERED);
    for (q, seen) in [(0.5, p50), (0.99, p99)] {
        let rank = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
        let offline = latencies[rank - 1] as f64 * 1e-9;
        let error = (seen - offline).abs() / offline;
        eprintln!(
            "p{}: {seen:.4e} s native, {offline:.4e} s offline",
            q * 100.0
        );
        assert!(
            error <= 0.10,
            "p{}: {seen} s from the native histogram, {offline} s offline",
            q * 100.0
        );
    }
}
