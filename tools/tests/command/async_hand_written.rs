//! `fntrace record --async` on hand-written futures (`impl Future`, no
//! async fn): `tests/rust/hand_futures.rs`, two worker threads polling
//! futures of seven `Poll<T>` layouts from shared queues, in rounds whose
//! boxes reuse the last round's addresses. `--async` finds each
//! `<T as Future>::poll` in the program's DWARF and links its polls by
//! the `Poll` it returns (`pollN(V)`): the report's rows (the offline
//! linker) and `fntrace ctl PID futures` (the runtime linker, read while
//! the program lingers) count exactly the futures and polls the program
//! counted itself, for the five layouts returned in registers, the two
//! returned through memory (`Poll<Result<u32, io::Error>>`,
//! `Poll<Option<String>>`: the discriminant read where rax points at the
//! return), and a future type with drop glue, a third of whose futures the
//! program drops while pending: said dropped before Ready (its
//! `drop_in_place` recorded), not linked into the next future at their
//! address.

use crate::common::{self, TempDir};
use crate::profile_program;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

/// Futures of each type the program makes.
const FUTURES: u64 = 60;

/// The future types: their `Poll` in registers, through memory (`Wide`,
/// `Text`); `Held`: a third of its futures dropped while pending.
const FOLLOWED: [&str; 8] = [
    "Countdown",
    "Sum",
    "Flag",
    "Maybe",
    "Io",
    "Wide",
    "Text",
    "Held",
];

/// `tests/rust/hand_futures.rs` built as `--async` needs it (instrumented,
/// optimised, full debug info) in `dir`.
fn build(dir: &Path) -> PathBuf {
    build_as(dir, &[])
}

/// [`build`] with more rustc arguments.
fn build_as(dir: &Path, more: &[&str]) -> PathBuf {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/rust/hand_futures.rs");
    let exe = dir.join("hand_futures");
    let status = Command::new("rustc")
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["-O", "-g", "-Zinstrument-mcount", "--edition", "2021"])
        .args(more)
        .arg("-o")
        .arg(&exe)
        .arg(source)
        .status()
        .expect("running rustc");
    assert!(status.success(), "rustc {source}");
    exe
}

/// The poll function of hand-written future `name`.
fn poll_of(name: &str) -> String {
    format!("<hand_futures::{name} as core::future::future::Future>::poll")
}

/// The futures and polls of the row of `function` (a name with spaces)
/// in the table of `fntrace report`'s async columns in `table` (after
/// its header: the call table above it names the function too).
fn row(table: &str, function: &str) -> Option<(u64, u64)> {
    let line = (table.lines())
        .skip_while(|l| !l.trim_start().starts_with("futures "))
        .find(|l| l.ends_with(&format!("  {function}")))?;
    let mut words = line.split_whitespace();
    Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
}

/// The program's own count of `name`'s futures completed, their polls,
/// and its futures dropped while pending.
fn counted(stdout: &str, name: &str) -> ((u64, u64), u64) {
    let line = (stdout.lines())
        .find(|l| l.starts_with(&format!("{name} futures ")))
        .unwrap_or_else(|| panic!("no {name} line in:\n{stdout}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let number = |at: usize| words[at].parse::<u64>().unwrap();
    ((number(2), number(4)), number(6))
}

#[test]
fn hand_written_futures_are_linked_by_the_poll_they_return() {
    let dir = TempDir::new("async-hand-written");
    let exe = build(&dir.0);
    let data = dir.0.join("data");
    let socket = dir.0.join("control.sock");
    let mut child = Command::new(CLI)
        .arg("record")
        .arg("--lib")
        .arg(profile_program::library())
        .args(["--async", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&exe)
        .arg(FUTURES.to_string())
        .env("FNTRACE_CONTROL", &socket)
        .env("HAND_FUTURES_LINGER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running fntrace record");
    // The program's counts come once every future is done; then it
    // lingers, and the runtime linker's rows are read.
    let mut stdout = String::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while !stdout.contains("Held futures") {
        let line = lines.next().expect("the program's counts").unwrap();
        stdout.push_str(&line);
        stdout.push('\n');
    }
    let live = common::ctl_futures(&socket);
    // Done with it: the recording ends with the program.
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains(" 0 lost"), "{stderr}");

    let report = common::fntrace_ok(&["report"], &data);
    for name in FOLLOWED {
        let (expected, dropped) = counted(&stdout, name);
        let function = poll_of(name);
        // Dropped before Ready by their drop function, said per function.
        let said = format!("{function}: {dropped} dropped before Ready");
        match name {
            "Held" => {
                assert_eq!(
                    (expected.0, dropped),
                    (FUTURES / 3 * 2, FUTURES / 3),
                    "{stdout}"
                );
                assert!(report.contains(&said), "{report}");
                assert!(live.contains(&said), "{live}");
            }
            _ => assert_eq!((expected.0, dropped), (FUTURES, 0), "{stdout}"),
        }
        assert!(expected.1 > expected.0, "{stdout}");
        assert_eq!(
            row(&report, &function),
            Some(expected),
            "{function}:\n{report}"
        );
        assert_eq!(row(&live, &function), Some(expected), "{function}:\n{live}");
    }
    // Every one followed: none said left out.
    assert!(!stderr.contains("left out"), "{stderr}");
    // Every future ended Ready or dropped: none left pending, none but
    // Held's dropped.
    assert!(live.contains("; 0 pending now;"), "{live}");
    assert!(!report.contains("still pending at the end"), "{report}");
    assert_eq!(
        report.matches("dropped before Ready").count(),
        1,
        "{report}"
    );
    assert_eq!(live.matches("dropped before Ready").count(), 1, "{live}");
}

/// The same program as if it were a dependency (its source path remapped
/// into Cargo's registry, as its DWARF then says): `--async` leaves its
/// hand-written futures out (none left: refused, said), `--async-deps`
/// follows them.
#[test]
fn dependencies_futures_are_followed_with_async_deps() {
    let dir = TempDir::new("async-hand-written-deps");
    let tests = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests");
    let registry = "/root/.cargo/registry/src/index.crates.io-0000/hand-futures-0.1.0";
    let remap = format!("--remap-path-prefix={tests}={registry}");
    let exe = build_as(&dir.0, &[&remap]);
    let record = |extra: &[&str]| {
        let data = dir.0.join(format!("data{}", extra.len()));
        let output = Command::new(CLI)
            .arg("record")
            .arg("--lib")
            .arg(profile_program::library())
            .arg("--async")
            .args(extra)
            .arg("-o")
            .arg(&data)
            .arg("--")
            .arg(&exe)
            .arg("30")
            .output()
            .expect("running fntrace record");
        (output, data)
    };
    let (own, _) = record(&[]);
    let said = String::from_utf8_lossy(&own.stderr);
    assert_eq!(own.status.code(), Some(2), "{said}");
    assert!(said.contains("has no async fn"), "{said}");
    let (deps, data) = record(&["--async-deps"]);
    let stdout = String::from_utf8_lossy(&deps.stdout);
    assert!(
        deps.status.success(),
        "{}",
        String::from_utf8_lossy(&deps.stderr)
    );
    let report = common::fntrace_ok(&["report"], &data);
    for name in ["Countdown", "Text"] {
        let ((completed, polls), _) = counted(&stdout, name);
        assert_eq!(completed, 30, "{stdout}");
        assert_eq!(
            row(&report, &poll_of(name)),
            Some((completed, polls)),
            "{report}"
        );
    }
}
