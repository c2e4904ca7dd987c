//! The streaming commands print exactly what the whole-trace-in-memory
//! commands printed before them: every output of `fntrace` on the trace
//! directories of `tests/data/` is compared byte for byte with
//! `tests/data/golden/`, which the in-memory `fntrace` (commit 38dc1d4, the
//! last before the streaming reader) wrote; blessed again where a later
//! change altered what is printed on purpose (recursive totals counted once, as
//! uftrace's; `replay -D 1` the outermost level only; unfinished calls told
//! apart as still running or unwound), each change checked against
//! `uftrace report`/`replay` by `report_vs_uftrace.rs`; where the report's
//! p50 and p90 columns came beside p99 (every other cell as it was); and
//! where the graph
//! began ordering paths and backtraces by time across threads (`random.graph`
//! and `threads.graph-outer` are now uftrace's `graph` output, headers aside).
//!
//! The directories: `uftrace-threads`, a `uftrace record --no-sched` of a
//! 3-thread C program built with `gcc -pg` that ends in `exit` (calls
//! without an exit, library calls); `edge-cases`, written by
//! `write_uftrace_dir` from a hand-made trace (calls running when tracing
//! started, an unwound call, an exit naming another function, lost events,
//! calls still running at the end, names to escape); `random`, 3 threads of
//! a random call forest, 1,500 calls each, up to 8 deep.
//!
//! To write the golden files again with another build of the CLI:
//! `FNTRACE_GOLDEN_BLESS=/path/to/fntrace cargo test -p fntrace-tools --test command golden::`.

use std::path::{Path, PathBuf};
use std::process::Command;

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

/// (golden file, trace directory, arguments after the directory; `OUT` is
/// replaced by an output file, which is then the output compared).
const CASES: &[(&str, &str, &[&str])] = &[
    ("threads.report", "uftrace-threads", &["report"]),
    (
        "threads.report-threads",
        "uftrace-threads",
        &["report", "--threads", "-s", "calls,self"],
    ),
    (
        "threads.report-selected",
        "uftrace-threads",
        &["report", "-F", "worker", "-N", "fact", "--top", "3"],
    ),
    ("threads.graph", "uftrace-threads", &["graph"]),
    (
        "threads.graph-outer",
        "uftrace-threads",
        &["graph", "outer"],
    ),
    ("threads.replay", "uftrace-threads", &["replay"]),
    (
        "threads.replay-d1",
        "uftrace-threads",
        &["replay", "-D", "1"],
    ),
    ("threads.json", "uftrace-threads", &["chrome", "-o", "OUT"]),
    (
        "threads.perfetto",
        "uftrace-threads",
        &["perfetto", "-o", "OUT"],
    ),
    (
        "threads.folded",
        "uftrace-threads",
        &["flame", "--folded", "-o", "OUT"],
    ),
    (
        "threads.folded-merged",
        "uftrace-threads",
        &["flame", "--folded", "--merge-threads", "-o", "OUT"],
    ),
    ("threads.svg", "uftrace-threads", &["flame", "-o", "OUT"]),
    ("edge.report", "edge-cases", &["report"]),
    (
        "edge.report-threads",
        "edge-cases",
        &["report", "--threads"],
    ),
    ("edge.graph", "edge-cases", &["graph"]),
    ("edge.graph-fib", "edge-cases", &["graph", "demo::fib"]),
    ("edge.replay", "edge-cases", &["replay"]),
    ("edge.json", "edge-cases", &["chrome", "-o", "OUT"]),
    ("edge.perfetto", "edge-cases", &["perfetto", "-o", "OUT"]),
    (
        "edge.folded",
        "edge-cases",
        &["flame", "--folded", "-o", "OUT"],
    ),
    (
        "edge.folded-merged",
        "edge-cases",
        &["flame", "--folded", "--merge-threads", "-o", "OUT"],
    ),
    (
        "edge.json-selected",
        "edge-cases",
        &["chrome", "-o", "OUT", "--tid", "100", "-N", "demo::parse"],
    ),
    ("random.report", "random", &["report"]),
    ("random.graph", "random", &["graph"]),
    (
        "random.replay-window",
        "random",
        &["replay", "--time-range", "1ms~1.5ms"],
    ),
    ("random.json", "random", &["chrome", "-o", "OUT"]),
    ("random.perfetto", "random", &["perfetto", "-o", "OUT"]),
    (
        "random.folded",
        "random",
        &["flame", "--folded", "-o", "OUT"],
    ),
    (
        "random.json-window",
        "random",
        &[
            "chrome",
            "-o",
            "OUT",
            "--tid",
            "2001",
            "--time-range",
            "2ms~4ms",
        ],
    ),
    (
        "random.perfetto-selected",
        "random",
        &[
            "perfetto",
            "-o",
            "OUT",
            "-F",
            "app::module1::*",
            "--tid",
            "2002",
        ],
    ),
];

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// What `cli` prints (or writes to `OUT`) for `args` on `dir`.
fn output_of(cli: &Path, dir: &Path, args: &[&str], scratch: &Path) -> Vec<u8> {
    let out = scratch.join("out");
    let _ = std::fs::remove_file(&out);
    let args: Vec<String> = args
        .iter()
        .map(|arg| match *arg {
            "OUT" => out.to_str().unwrap().to_string(),
            arg => arg.to_string(),
        })
        .collect();
    let output = Command::new(cli)
        .args(args.iter().take(1))
        .arg(dir)
        .args(args.iter().skip(1))
        .env("LC_ALL", "C")
        .output()
        .expect("running fntrace");
    assert!(
        output.status.success(),
        "fntrace {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    if args.iter().any(|arg| *arg == out.to_str().unwrap()) {
        std::fs::read(&out).expect("the output file")
    } else {
        output.stdout
    }
}

#[test]
fn streamed_outputs_equal_the_in_memory_ones() {
    let scratch = std::env::temp_dir().join(format!("fntrace-golden-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let golden = data().join("golden");
    let bless = std::env::var_os("FNTRACE_GOLDEN_BLESS").map(PathBuf::from);
    let mut differing = Vec::new();
    for (name, dir, args) in CASES {
        let dir = data().join(dir);
        let path = golden.join(name);
        if let Some(cli) = &bless {
            std::fs::create_dir_all(&golden).unwrap();
            std::fs::write(&path, output_of(cli, &dir, args, &scratch)).unwrap();
            continue;
        }
        let expected = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (see this file's docs)", path.display()));
        let actual = output_of(Path::new(CLI), &dir, args, &scratch);
        if actual != expected {
            std::fs::write(scratch.join(name), &actual).unwrap();
            differing.push(format!(
                "{name}: {} bytes, golden {} (written to {})",
                actual.len(),
                expected.len(),
                scratch.join(name).display()
            ));
        }
    }
    assert!(differing.is_empty(), "{}", differing.join("\n"));
    let _ = std::fs::remove_dir_all(&scratch);
}
