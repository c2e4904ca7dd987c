//! Outputs on real recordings: a multi-threaded C program (gcc -pg) and a
//! Rust one (-Zinstrument-mcount) are traced, dumped with `fntrace::dump`,
//! and read back by the real `uftrace` (report, replay) and by the
//! `fntrace` command-line tool (report, graph, chrome, flame), which must
//! agree on the exact call counts and depths.

#[macro_use]
mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use fntrace::Filter;
use fntrace_fixtures::{c_pie, rust};

static SERIAL: Mutex<()> = Mutex::new(());

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fntrace-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The `fntrace` CLI. It belongs to the fntrace-tools crate, so Cargo gives
/// this test no `CARGO_BIN_EXE_fntrace`; `cargo test` at the workspace top
/// builds it (a default member) next to this test's `deps/` directory.
fn cli_path() -> String {
    let test_exe = std::env::current_exe().expect("path of this test");
    let profile_dir = test_exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary in target/PROFILE/deps");
    let cli = profile_dir.join("fntrace");
    assert!(
        cli.is_file(),
        "{} missing: run `cargo test` at the workspace top (or `cargo build -p fntrace-tools`)",
        cli.display()
    );
    cli.to_str().expect("UTF-8 path").to_owned()
}

fn run(program: &str, args: &[&str], dir: &Path) -> Output {
    Command::new(program)
        .args(args)
        .arg(dir)
        .env("LC_ALL", "C")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} ({e}); CI installs it (.ci/run)"))
}

/// `fntrace report` rows: calls first, the function name after two spaces
/// at the end.
fn fntrace_calls(report: &str, function: &str) -> Option<u64> {
    report.lines().find_map(|line| {
        let calls = line.split_whitespace().next()?.parse().ok()?;
        line.ends_with(&format!("  {function}")).then_some(calls)
    })
}

fn record_workloads() -> (Vec<u32>, Vec<u32>) {
    fntrace::init().unwrap();
    fntrace::GRAPH_TRACER.take_trace();
    let filter = Filter::new()
        .include("pie_*")
        .include("fixture_rust_workload::*");
    fntrace::enable_with("graph", &filter).unwrap();
    let c_threads: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(|| (c_pie::run(10), fntrace::current_tid()).1))
        .collect();
    let rust_threads: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(|| (rust::run(7), fntrace::current_tid()).1))
        .collect();
    let c = c_threads.into_iter().map(|t| t.join().unwrap()).collect();
    let r = rust_threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    fntrace::disable("graph").unwrap();
    (c, r)
}

#[test]
fn uftrace_and_the_cli_read_the_dump_with_exact_counts() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (c_tids, rust_tids) = record_workloads();
    let dir = temp_dir("dump");
    let report = fntrace::dump(&dir).expect("dump");
    assert_eq!(report.threads, 5);
    assert_eq!(report.lost, 0);
    // C: 3 × (1 run + 10 mid + 40 leaf); Rust: 2 × (1 + 7 + 28); 2 events each.
    assert_eq!(report.events, 2 * (3 * 51 + 2 * 36));

    let expected = [
        ("pie_run", 3),
        ("pie_mid", 30),
        ("pie_leaf", 120),
        ("fixture_rust_workload::run", 2),
        ("fixture_rust_workload::mid", 14),
        ("fixture_rust_workload::leaf", 56),
    ];
    let uftrace_report = common::uftrace_calls(&dir);
    let cli = run(&cli_path(), &["report"], &dir);
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let cli_report = String::from_utf8(cli.stdout).unwrap();
    for (function, calls) in expected {
        assert_eq!(
            uftrace_report.get(function),
            Some(&calls),
            "uftrace report: {function}"
        );
        assert_eq!(
            fntrace_calls(&cli_report, function),
            Some(calls),
            "fntrace report: {function}\n{cli_report}"
        );
    }

    // Depths in uftrace replay: leaf calls two levels below run.
    let replay = common::uftrace(&["replay", "--no-pager"], &dir);
    for tid in c_tids.iter().chain(&rust_tids) {
        let lines: Vec<&str> = replay
            .lines()
            .filter(|l| l.contains(&format!("[{tid:>6}]")))
            .collect();
        let depth_of = |name: &str| -> Vec<usize> {
            lines
                .iter()
                .filter_map(|l| {
                    let body = l.split_once("| ")?.1;
                    let trimmed = body.trim_start();
                    trimmed
                        .starts_with(name)
                        .then(|| (body.len() - trimmed.len()) / 2)
                })
                .collect()
        };
        let (run, mid, leaf) = if c_tids.contains(tid) {
            ("pie_run", "pie_mid", "pie_leaf")
        } else {
            (
                "fixture_rust_workload::run",
                "fixture_rust_workload::mid",
                "fixture_rust_workload::leaf",
            )
        };
        assert_eq!(
            depth_of(run),
            vec![0],
            "thread {tid}:\n{}",
            lines.join("\n")
        );
        assert!(depth_of(mid).iter().all(|&d| d == 1) && !depth_of(mid).is_empty());
        let leaves = depth_of(leaf);
        assert!(leaves.iter().all(|&d| d == 2), "thread {tid}");
        assert_eq!(leaves.len(), if c_tids.contains(tid) { 40 } else { 28 });
    }

    // uftrace's own Chrome JSON is valid (the info file has the command
    // line it copies in) and names the process's command line.
    let chrome = Command::new("uftrace")
        .args(["dump", "--chrome", "--no-pager", "-d"])
        .arg(&dir)
        .output()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(chrome.status.success());
    let chrome: serde_json::Value = serde_json::from_slice(&chrome.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&chrome.stdout)));
    let argv0 = std::env::args().next().unwrap();
    let cmdline = chrome["metadata"]["command_line"].as_str().unwrap();
    assert!(cmdline.starts_with(&argv0), "{cmdline:?}");

    // The CLI's timeline, aggregated call graph, Chrome JSON and flame graph.
    let replay = run(&cli_path(), &["replay"], &dir);
    let replay = String::from_utf8(replay.stdout).unwrap();
    assert_eq!(replay.matches("pie_leaf();").count(), 120);
    assert_eq!(replay.matches("fixture_rust_workload::leaf();").count(), 56);
    // The aggregated graph: every thread's calls merged, the same nodes and
    // counts as uftrace's (its lines from the tree prefix on).
    let graph = run(&cli_path(), &["graph"], &dir);
    let graph = String::from_utf8(graph.stdout).unwrap();
    let nodes = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|line| Some(line.split_once(" : ")?.1.trim_end().to_string()))
            .collect()
    };
    assert_eq!(
        nodes(&graph),
        nodes(&common::uftrace(&["graph", "--no-pager"], &dir)),
        "{graph}"
    );
    assert!(graph.contains("(120) pie_leaf\n"), "{graph}");
    assert!(
        graph.contains("(56) fixture_rust_workload::leaf\n"),
        "{graph}"
    );
    // A crate glob selects that crate's functions only.
    let rust_only = run(
        &cli_path(),
        &["report", "-F", "fixture_rust_workload::*"],
        &dir,
    );
    let rust_only = String::from_utf8(rust_only.stdout).unwrap();
    assert_eq!(
        fntrace_calls(&rust_only, "fixture_rust_workload::leaf"),
        Some(56)
    );
    assert_eq!(fntrace_calls(&rust_only, "pie_leaf"), None, "{rust_only}");

    let json_path = dir.with_extension("json");
    let out = run(
        &cli_path(),
        &["chrome", "-o", json_path.to_str().unwrap()],
        &dir,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().expect("traceEvents");
    let complete: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(complete.len(), 3 * 51 + 2 * 36);
    assert_eq!(
        complete.iter().filter(|e| e["name"] == "pie_leaf").count(),
        120
    );
    // Nesting: on each thread, every event lies inside the enclosing one.
    let mut by_thread: HashMap<u64, Vec<(f64, f64)>> = HashMap::new();
    for e in &complete {
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        by_thread
            .entry(e["tid"].as_u64().unwrap())
            .or_default()
            .push((ts, ts + dur));
    }
    for spans in by_thread.values_mut() {
        spans.sort_by(|a, b| {
            a.0.partial_cmp(&b.0)
                .unwrap()
                .then(b.1.partial_cmp(&a.1).unwrap())
        });
        let mut open: Vec<(f64, f64)> = Vec::new();
        for span in spans.iter() {
            // ts + dur is a float sum of microseconds: allow the ns
            // rounding when a call starts right where the last one ended.
            while open.last().is_some_and(|top| top.1 <= span.0 + 1e-3) {
                open.pop();
            }
            if let Some(parent) = open.last() {
                assert!(span.1 <= parent.1 + 1e-3, "{span:?} crosses {parent:?}");
            }
            open.push(*span);
        }
    }
    let thread_names = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .count();
    assert_eq!(thread_names, 5);

    let svg_path = dir.with_extension("svg");
    let out = run(
        &cli_path(),
        &["flame", "-o", svg_path.to_str().unwrap()],
        &dir,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<?xml"), "{svg}");
    // The names are checked in the folded stacks: the drawing leaves out
    // frames narrower than its minimum width, which a preempted call
    // elsewhere can make a short function's (beside a CPU hog).
    let folded_path = dir.with_extension("folded");
    let out = run(
        &cli_path(),
        &["flame", "--folded", "-o", folded_path.to_str().unwrap()],
        &dir,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let folded = std::fs::read_to_string(&folded_path).unwrap();
    assert!(
        folded.contains("pie_leaf") && folded.contains("fixture_rust_workload::leaf"),
        "{folded}"
    );

    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&json_path);
    let _ = std::fs::remove_file(&svg_path);
}

#[test]
fn a_failed_dump_loses_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    record_workloads();
    // A path below a regular file cannot be created.
    let blocker = temp_dir("blocker");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let err = fntrace::dump(blocker.join("trace")).expect_err("dump must fail");
    assert!(
        err.to_string().contains("blocker"),
        "the error names the path: {err}"
    );
    let dir = temp_dir("after-failure");
    let report = fntrace::dump(&dir).expect("dump elsewhere");
    assert_eq!(report.events, 2 * (3 * 51 + 2 * 36), "nothing was lost");
    // Dumped events are gone from memory afterwards.
    assert_eq!(
        fntrace::dump(temp_dir("empty"))
            .map(|r| r.events)
            .unwrap_or(0),
        0
    );
    let _ = std::fs::remove_file(&blocker);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(temp_dir("empty"));
}

#[test]
fn the_cli_names_the_file_and_the_problem() {
    let cli = &cli_path();
    let missing = temp_dir("missing");
    let out = run(cli, &["report"], &missing);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(missing.to_str().unwrap()), "{stderr}");

    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    record_workloads();
    let dir = temp_dir("corrupt");
    fntrace::dump(&dir).unwrap();
    // A truncated .dat file.
    let dat = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "dat"))
        .unwrap();
    let bytes = std::fs::read(&dat).unwrap();
    std::fs::write(&dat, &bytes[..bytes.len() - 5]).unwrap();
    let out = run(cli, &["report"], &dir);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(dat.file_name().unwrap().to_str().unwrap()),
        "{stderr}"
    );
    // Bad magic in info.
    std::fs::write(&dat, &bytes).unwrap();
    let info = dir.join("info");
    let mut header = std::fs::read(&info).unwrap();
    header[0] = b'X';
    std::fs::write(&info, &header).unwrap();
    let out = run(cli, &["graph"], &dir);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("info"), "{stderr}");
    // Usage errors.
    let out = Command::new(cli).arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_large_dump_reports_its_progress() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    fntrace::GRAPH_TRACER.take_trace();
    fntrace::enable_with("graph", &Filter::new().include("fixture_rust_workload::*")).unwrap();
    rust::run(20_000); // 100,001 calls: 200,002 events
    fntrace::disable("graph").unwrap();
    let dir = temp_dir("progress");
    let mut reports = Vec::new();
    let report = fntrace::dump_with_progress(&dir, &mut |done, total| reports.push((done, total)))
        .expect("dump");
    assert_eq!(report.events, 200_002);
    assert!(reports.len() >= 3, "{reports:?}");
    assert!(reports.windows(2).all(|w| w[0].0 < w[1].0), "{reports:?}");
    assert!(reports.iter().all(|&(_, total)| total == 200_002));
    assert_eq!(reports.last(), Some(&(200_002, 200_002)));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every file of `dir`, by name, with its bytes.
fn files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect()
}

/// The dump reads the events where they are and writes them a thread at a
/// time; what it writes is, byte for byte, what the whole-trace writer
/// (`write_uftrace_dir` of a `Trace`, which the dump used before) writes
/// for the same events of real -pg and Rust code, and uftrace replays
/// both the same. Then events kept from before (as `snapshot` keeps them)
/// and events still in the threads' buffers are dumped together, with
/// exact counts.
#[test]
fn the_dump_writes_what_the_whole_trace_writer_writes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    record_workloads();
    let (whole, dumped) = (temp_dir("whole"), temp_dir("dumped"));
    let trace = fntrace::GRAPH_TRACER.snapshot(); // kept for the dump
    fntrace::export::write_uftrace_dir(&trace, &whole, None).unwrap();
    let report = fntrace::dump(&dumped).unwrap();
    assert_eq!(report.events, 2 * (3 * 51 + 2 * 36));
    assert_eq!(report.threads, 5);
    let (whole_files, dumped_files) = (files(&whole), files(&dumped));
    assert_eq!(whole_files.len(), 5 + 5, "{:?}", whole_files.keys());
    assert_eq!(whole_files, dumped_files);
    assert_eq!(
        common::uftrace(&["replay", "--no-pager"], &whole),
        common::uftrace(&["replay", "--no-pager"], &dumped)
    );

    // Kept events and buffered ones, on the same threads and others.
    let kept_dir = temp_dir("kept");
    record_workloads();
    fntrace::GRAPH_TRACER.snapshot();
    fntrace::enable_with("graph", &Filter::new().include("pie_*")).unwrap();
    c_pie::run(4); // this thread: 1 + 4 + 16 calls
    std::thread::spawn(|| c_pie::run(2)).join().unwrap(); // 1 + 2 + 8
    fntrace::disable("graph").unwrap();
    let report = fntrace::dump(&kept_dir).unwrap();
    assert_eq!(report.events, 2 * (3 * 51 + 2 * 36 + 21 + 11));
    assert_eq!(report.threads, 7);
    let calls = common::uftrace_calls(&kept_dir);
    assert_eq!(calls.get("pie_run"), Some(&(3 + 2)));
    assert_eq!(calls.get("pie_mid"), Some(&(30 + 4 + 2)));
    assert_eq!(calls.get("pie_leaf"), Some(&(120 + 16 + 8)));
    assert_eq!(calls.get("fixture_rust_workload::leaf"), Some(&56));
    assert_eq!(fntrace::dump(temp_dir("nothing-left")).unwrap().events, 0);

    for dir in [whole, dumped, kept_dir, temp_dir("nothing-left")] {
        let _ = std::fs::remove_dir_all(dir);
    }
}
