//! Other tools keep seeing a process fntrace patches: its text stays mapped
//! from its file (perf names functions from `/proc/PID/maps`), and a
//! uprobe on one of its functions — what bpftrace and `perf probe` set —
//! fires for every call before, while and after fntrace traces it.
//!
//! `tests/c/ctl_prog.c` (`gcc -pg`, PIE, linked with `libfntrace.a`) runs
//! with `FNTRACE_CONTROL=1` and the default way of writing text; the test
//! sets a uprobe on `handle_get` through the kernel's tracefs (as root,
//! mounting it if it is not), drives the program's rounds of calls on its
//! standard input, and enables and disables the graph tracer with
//! `fntrace ctl`. The uprobe's hit count is exact: 4 threads × N calls a
//! round, in each of the three rounds.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::native::{self, build_c_program, cli, repo, Scratch};

/// Threads of `ctl_prog`; each calls `handle_get` once an iteration.
const THREADS: u64 = 4;
const N: u64 = 500;

/// Where tracefs is, mounted if it was not.
fn tracefs() -> PathBuf {
    let at = PathBuf::from("/sys/kernel/tracing");
    if !at.join("uprobe_events").exists() {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        assert_eq!(
            uid, 0,
            "this test sets a uprobe through tracefs: run it as root (CI does)"
        );
        let status = Command::new("mount")
            .args(["-t", "tracefs", "nodev"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(status.success(), "mount -t tracefs at {}", at.display());
    }
    assert!(
        at.join("uprobe_events").exists(),
        "no uprobes in this kernel"
    );
    at
}

/// A uprobe set through tracefs, removed when dropped.
struct Uprobe {
    tracefs: PathBuf,
    group: String,
    /// The file and event, as `uprobe_profile` lists them.
    listed: (String, String),
}

impl Uprobe {
    fn set(program: &Path, function: &str) -> Uprobe {
        let tracefs = tracefs();
        let group = format!("fntrace_test_{}", std::process::id());
        let definition = format!(
            "p:{group}/{function} {}:{:#x}\n",
            program.display(),
            native::symbol_in_file(program, function).1
        );
        append(&tracefs.join("uprobe_events"), &definition);
        std::fs::write(tracefs.join("events").join(&group).join("enable"), "1").unwrap();
        let listed = (program.display().to_string(), function.to_string());
        Uprobe {
            tracefs,
            group,
            listed,
        }
    }

    /// Its hits so far (`uprobe_profile`: file, event, hits).
    fn hits(&self) -> u64 {
        let profile = std::fs::read_to_string(self.tracefs.join("uprobe_profile")).unwrap();
        profile
            .lines()
            .find_map(
                |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                    [file, event, hits] if (file, event) == (&self.listed.0, &self.listed.1) => {
                        hits.parse().ok()
                    }
                    _ => None,
                },
            )
            .unwrap_or_else(|| panic!("no uprobe {:?} in {profile}", self.listed))
    }
}

impl Drop for Uprobe {
    fn drop(&mut self) {
        let events = self.tracefs.join("events").join(&self.group);
        let _ = std::fs::write(events.join("enable"), "0");
        append(
            &self.tracefs.join("uprobe_events"),
            &format!("-:{}/handle_get\n", self.group),
        );
    }
}

fn append(file: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    file.write_all(line.as_bytes())
        .unwrap_or_else(|e| panic!("writing {line:?}: {e}"));
}

/// The `maps` line of process `pid` holding `address`.
fn maps_line(pid: u32, address: u64) -> String {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .find(|line| {
            let range = line.split(' ').next().unwrap();
            let (start, end) = range.split_once('-').unwrap();
            let start = u64::from_str_radix(start, 16).unwrap();
            let end = u64::from_str_radix(end, 16).unwrap();
            (start..end).contains(&address)
        })
        .unwrap_or_else(|| panic!("{address:#x} is not mapped: {maps}"))
        .to_string()
}

/// `fntrace ctl PID ARGS`, which must succeed.
fn ctl(pid: u32, args: &[&str]) -> String {
    let output = Command::new(cli())
        .arg("ctl")
        .arg(pid.to_string())
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(output.status.success(), "ctl {args:?}: {stdout}");
    stdout
}

#[test]
fn perf_and_uprobes_see_the_text_before_while_and_after_tracing() {
    let scratch = Scratch::new("other-tools");
    let program = scratch.path().join("ctl_prog");
    build_c_program(&repo().join("tests/c/ctl_prog.c"), &["-pg"], &program);
    let uprobe = Uprobe::set(&program, "handle_get");
    assert_eq!(uprobe.hits(), 0);

    let mut child = Command::new(&program)
        .env("FNTRACE_CONTROL", "1")
        .env_remove("FNTRACE_TEXT_WRITES")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut expect = |stdout: &mut BufReader<_>, what: &str| {
        line.clear();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, format!("{what}\n"));
    };
    expect(&mut stdout, "ready");
    let mut round = |stdin: &mut std::process::ChildStdin, stdout: &mut BufReader<_>| {
        writeln!(stdin, "work {N}").unwrap();
        expect(stdout, "done");
    };
    let handle_get = {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        let base = maps
            .lines()
            .find(|l| l.ends_with(program.to_str().unwrap()))
            .and_then(|l| l.split('-').next())
            .map(|start| u64::from_str_radix(start, 16).unwrap())
            .unwrap();
        base + native::symbol_in_file(&program, "handle_get").0
    };

    // Before: fntrace has turned the sites into NOPs only.
    round(&mut stdin, &mut stdout);
    assert_eq!(uprobe.hits(), THREADS * N);

    // While the graph tracer runs on handle_get.
    ctl(pid, &["filter", "handle_get"]);
    let enabled = ctl(pid, &["enable", "graph"]);
    assert!(enabled.starts_with("enabled graph"), "{enabled}");
    let status = ctl(pid, &["status"]);
    assert!(status.contains("(1 patched)"), "{status}");
    round(&mut stdin, &mut stdout);
    assert_eq!(uprobe.hits(), 2 * THREADS * N);
    let text = maps_line(pid, handle_get);
    assert!(
        text.contains(" r-xp ") && text.ends_with(program.to_str().unwrap()),
        "handle_get's text is not mapped from the program's file: {text}"
    );
    let report = ctl(pid, &["report"]);
    let traced = report
        .lines()
        .find(|l| l.ends_with(" handle_get"))
        .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok());
    assert_eq!(traced, Some(THREADS * N), "{report}");

    // After.
    ctl(pid, &["disable", "graph"]);
    round(&mut stdin, &mut stdout);
    assert_eq!(uprobe.hits(), 3 * THREADS * N);
    assert!(maps_line(pid, handle_get).ends_with(program.to_str().unwrap()));

    writeln!(stdin, "exit").unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
