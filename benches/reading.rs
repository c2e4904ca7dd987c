//! Reading speed of the CLI beside uftrace's, on the same directories:
//! `cargo bench --bench reading`.
//!
//! Two directories are recorded once by `fntrace record` (release builds,
//! default options) from real programs nobody here wrote:
//!
//! - ripgrep 15 (every crate `-Zinstrument-mcount`) searching the cargo
//!   registry's sources with two search threads (`-j2`): two big threads;
//! - the Lua 5.4 interpreter built `gcc -O2 -pg` running
//!   `benches/lua/work.lua` at a small scale: one thread.
//!
//! Then each reading command runs on each directory, fntrace's and
//! uftrace 0.13's in turn, `FNTRACE_BENCH_RUNS` times (default 3), their
//! output into a file in the scratch directory (not a terminal, not
//! /dev/null: `uftrace dump` writes to stdout):
//!
//! | fntrace | uftrace |
//! |---|---|
//! | `report DIR` | `report -d DIR` |
//! | `graph DIR` | `graph -d DIR` |
//! | `replay DIR` | `replay -d DIR` |
//! | `flame DIR -o F --folded` | `dump -d DIR --flame-graph` |
//! | `chrome DIR -o F` | `dump -d DIR --chrome` |
//!
//! Per command and run: wall time, CPU (user + system, from `wait4`) and
//! peak RSS; then per command the ratio of uftrace's wall time to
//! fntrace's (the target: ≥ 2, printed MET or MISS; a miss
//! does not fail the run). fntrace reads the threads of a trace on as many
//! cores as there are (`FNTRACE_READERS`); a one-thread trace is read on
//! one core, and the table says so. Everything is written into a temporary
//! directory, removed at the end; nothing is skipped (a missing uftrace,
//! gcc or ripgrep build fails the bench).

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::programs::{cache_dir, install_ripgrep, lua, Program};
use common::{fntrace_cli, load_average, machine_description, run_ok, TempDir};

/// Lua's `work.lua` scale for this bench (≈ 10M calls a unit).
const LUA_SCALE: &str = "1";
/// What ripgrep searches for in the registry's sources.
const RIPGREP_REGEX: &str = r"\w+_\w+\(";
/// uftrace's wall time over fntrace's that the bench asks for.
const TARGET_RATIO: f64 = 2.0;

/// One run of one command.
#[derive(Clone, Copy)]
struct Run {
    wall: Duration,
    cpu: Duration,
    max_rss_kib: u64,
}

fn main() {
    let runs: usize = std::env::var("FNTRACE_BENCH_RUNS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(3);
    println!("reading bench: {}", machine_description());
    let cli = fntrace_cli();
    let scratch = TempDir::new("reading");
    let traces = [
        ripgrep_trace(&cli, scratch.path()),
        lua_trace(&cli, scratch.path()),
    ];
    let mut rows = Vec::new();
    for (name, dir) in &traces {
        let threads = dat_files(dir);
        let bytes: u64 = threads.iter().map(|(_, size)| size).sum();
        println!(
            "\n{name}: {} MB of records in {} thread file(s), load {}",
            bytes >> 20,
            threads.len(),
            load_average()
        );
        for command in COMMANDS {
            let out = scratch.path().join("out");
            let mut ours = Vec::new();
            let mut theirs = Vec::new();
            for _ in 0..runs {
                ours.push(timed(&command.fntrace(&cli, dir, &out), &out));
                theirs.push(timed(&command.uftrace(dir), &out));
            }
            let _ = std::fs::remove_file(&out);
            let ratio = median(theirs.iter().map(|r| r.wall.as_secs_f64()))
                / median(ours.iter().map(|r| r.wall.as_secs_f64()));
            println!(
                "  {:<7} fntrace {}  uftrace {}  uftrace/fntrace wall {ratio:.2}",
                command.name,
                runs_text(&ours),
                runs_text(&theirs)
            );
            rows.push((name.clone(), command.name, ours, theirs, ratio));
        }
    }
    println!(
        "\n| trace | command | fntrace wall (s) | uftrace wall (s) | fntrace CPU (s) | uftrace CPU (s) | fntrace max RSS (MB) | uftrace max RSS (MB) | uftrace/fntrace wall | ≥ {TARGET_RATIO} |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (trace, command, ours, theirs, ratio) in &rows {
        let wall = |runs: &[Run]| median(runs.iter().map(|r| r.wall.as_secs_f64()));
        let cpu = |runs: &[Run]| median(runs.iter().map(|r| r.cpu.as_secs_f64()));
        let rss = |runs: &[Run]| runs.iter().map(|r| r.max_rss_kib).max().unwrap_or(0) >> 10;
        println!(
            "| {trace} | {command} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {ratio:.2} | {} |",
            wall(ours),
            wall(theirs),
            cpu(ours),
            cpu(theirs),
            rss(ours),
            rss(theirs),
            if *ratio >= TARGET_RATIO {
                "MET"
            } else {
                "MISS"
            }
        );
    }
    println!("(medians of {runs} runs; RSS: the largest)");
}

/// A reading command of both tools.
struct Reading {
    name: &'static str,
    /// fntrace's arguments before the directory, and whether it writes the
    /// output file itself (`-o FILE`).
    ours: &'static [&'static str],
    ours_writes_file: bool,
    /// uftrace's arguments (the directory goes after `-d`).
    theirs: &'static [&'static str],
}

const COMMANDS: [Reading; 5] = [
    Reading {
        name: "report",
        ours: &["report"],
        ours_writes_file: false,
        theirs: &["report"],
    },
    Reading {
        name: "graph",
        ours: &["graph"],
        ours_writes_file: false,
        theirs: &["graph"],
    },
    Reading {
        name: "replay",
        ours: &["replay"],
        ours_writes_file: false,
        theirs: &["replay"],
    },
    Reading {
        name: "flame",
        ours: &["flame", "--folded"],
        ours_writes_file: true,
        theirs: &["dump", "--flame-graph"],
    },
    Reading {
        name: "chrome",
        ours: &["chrome"],
        ours_writes_file: true,
        theirs: &["dump", "--chrome"],
    },
];

impl Reading {
    fn fntrace(&self, cli: &Path, dir: &Path, out: &Path) -> Command {
        let mut command = Command::new(cli);
        command.args(self.ours).arg("--no-pager").arg(dir);
        if self.ours_writes_file {
            command.arg("-o").arg(out);
        }
        command
    }

    fn uftrace(&self, dir: &Path) -> Command {
        let mut command = Command::new("uftrace");
        command
            .arg(self.theirs[0])
            .arg("--no-pager")
            .arg("-d")
            .arg(dir)
            .args(&self.theirs[1..]);
        command
    }
}

/// Runs `command` (its stdout into `out`), to success: wall time, CPU and
/// peak RSS of the child, from `wait4`.
fn timed(command: &Command, out: &Path) -> Run {
    let mut command = clone(command);
    let stdout = File::create(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let started = Instant::now();
    // Waited for by wait4 below, for the child's own rusage.
    #[allow(clippy::zombie_processes)]
    let child = command
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet waited for (`child` is never
    // waited on: it is only dropped); `status` and `usage` are writable.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = started.elapsed();
    assert_eq!(waited, pid, "wait4 of {command:?} failed");
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr {
        use std::io::Read;
        let _ = pipe.read_to_string(&mut stderr);
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{command:?} failed (status {status:#x}): {stderr}"
    );
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Run {
        wall,
        cpu: time(usage.ru_utime) + time(usage.ru_stime),
        max_rss_kib: usage.ru_maxrss as u64,
    }
}

/// A fresh `Command` with `command`'s program and arguments.
fn clone(command: &Command) -> Command {
    let mut copy = Command::new(command.get_program());
    copy.args(command.get_args());
    copy
}

/// `wall/cpu` of each run, in seconds.
fn runs_text(runs: &[Run]) -> String {
    runs.iter()
        .map(|r| format!("{:.2}/{:.2}s", r.wall.as_secs_f64(), r.cpu.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The threads' record files of `dir` and their sizes.
fn dat_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "dat"))
        .map(|path| {
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            (path, size)
        })
        .collect()
}

/// `fntrace record -o DIR -- ARGV` to success, recording without loss.
fn record(cli: &Path, dir: &Path, argv: &[String]) {
    run_ok(
        Command::new(cli)
            .arg("record")
            .arg("-o")
            .arg(dir)
            .arg("--")
            .args(argv)
            .stdout(Stdio::null()),
    );
    let summary = Command::new(cli)
        .args(["report", "--no-pager"])
        .arg(dir)
        .output()
        .expect("running fntrace report");
    let text = String::from_utf8_lossy(&summary.stdout);
    assert!(
        summary.status.success() && !text.contains("were lost"),
        "{}: the recording lost events or cannot be read:\n{text}",
        dir.display()
    );
}

/// ripgrep's recording: two search threads over the registry's sources.
fn ripgrep_trace(cli: &Path, scratch: &Path) -> (String, PathBuf) {
    let rg = install_ripgrep(
        &cache_dir(),
        "ripgrep-mcount",
        "-Zinstrument-mcount -Cforce-frame-pointers=yes",
    );
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let dir = scratch.join("ripgrep");
    let argv = [
        rg.display().to_string(),
        "--no-config".to_string(),
        "-j2".to_string(),
        "-c".to_string(),
        RIPGREP_REGEX.to_string(),
        home.join("registry/src").display().to_string(),
    ];
    record(cli, &dir, &argv);
    (format!("ripgrep -j2 '{RIPGREP_REGEX}'"), dir)
}

/// Lua's recording: one thread.
fn lua_trace(cli: &Path, scratch: &Path) -> (String, PathBuf) {
    let Program { traced, .. } = lua(scratch, "lua -O2 -pg", &["-pg"], LUA_SCALE);
    let dir = scratch.join("lua");
    record(cli, &dir, &traced);
    (format!("Lua work.lua {LUA_SCALE}"), dir)
}
