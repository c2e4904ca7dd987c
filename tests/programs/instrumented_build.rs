//! The whole build instrumented, fntrace included (what a user gets from a
//! global `RUSTFLAGS=-Zinstrument-mcount`): builds the demo that way in its
//! own target directory, runs it, and checks the exact call counts of its
//! latency table and the shape of its call graph. fntrace's own code must not trace itself.

use std::path::Path;
use std::process::Command;

#[test]
fn demo_built_with_everything_instrumented_traces_exact_counts() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = root.join("target").join("instrumented");
    let status = Command::new(&cargo)
        .current_dir(root)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTFLAGS", "-Zinstrument-mcount")
        // `-p fntrace-demo`, as the README says: the CLI's own features
        // (clap, the terminal UI) stay out of the build, half its work.
        .args(["build", "-p", "fntrace-demo", "--release"])
        .arg("--target-dir")
        .arg(&target_dir)
        .status()
        .expect("running cargo");
    assert!(status.success(), "building the instrumented demo failed");

    // The trace goes to a directory of this test's own: the demo's default
    // (`fntrace-demo.data` in the temporary directory) is the user's.
    let trace_dir =
        std::env::temp_dir().join(format!("fntrace-instrumented-demo-{}", std::process::id()));
    let output = Command::new(target_dir.join("release/demo"))
        .arg("500")
        .arg(&trace_dir)
        .output()
        .expect("running the demo");
    let _ = std::fs::remove_dir_all(&trace_dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(" to {}\n", trace_dir.display())),
        "{stdout}"
    );
    // The latency table says what `fntrace report` says.
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("calls") && line.contains(" avg ")),
        "{stdout}"
    );

    // Latency table rows: calls first, the function name last.
    let count_of = |function: &str| -> Option<u64> {
        stdout.lines().find_map(|line| {
            let calls = line.split_whitespace().next()?.parse().ok()?;
            line.ends_with(&format!("  {function}")).then_some(calls)
        })
    };
    // 4 workers × 500 requests while tracing was on.
    // Ids 499 of 0..500: one malformed request per worker, whose handler
    // panics through traced frames (caught by the worker); its calls still
    // end, where the panic is caught, so every call below is complete.
    assert!(
        stdout.contains("4 requests failed while traced"),
        "{stdout}"
    );
    assert_eq!(count_of("demo::serve"), Some(2_000), "{stdout}");
    assert_eq!(count_of("demo::handle_request"), Some(2_000), "{stdout}");
    assert_eq!(count_of("demo::tokenize"), Some(2_000), "{stdout}");
    assert_eq!(count_of("demo::parse_request"), Some(2_000), "{stdout}");
    assert!(stdout.contains(" events written, 0 lost"), "{stdout}");
    // The call graph shows a worker's calls nested under handle_request.
    assert!(stdout.contains("demo::handle_request() {"), "{stdout}");
    assert!(stdout.contains("}  /* demo::tokenize */"), "{stdout}");
    assert!(
        !stdout.contains("fntrace::"),
        "fntrace traced itself:\n{stdout}"
    );
}
