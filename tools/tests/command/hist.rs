//! Whole distributions, offline and live, on the same calls: a `gcc -pg`
//! C program whose `wait_for` spins 10 µs or sleeps 300 µs or 5 ms (8, 9
//! and 3 calls of every 20) is recorded (`ctl record`, the graph tracer) and
//! profiled (the profile tracer) at once. `fntrace report DIR --hist`,
//! `fntrace ctl profile --hist` and `fntrace report SNAPSHOT --hist` print
//! the same rows, each count exact; p50 and p90 of the tables (report,
//! ctl profile, top) fall in the rows designed for them.
//!
//! Calls are counted, not timed, so the counts are exact whatever the
//! machine's load, as long as each call lasts less than the end of its
//! row: the durations sit far from the rows' edges (10 µs in [8192,
//! 16384), 300 µs in [262144, 524288), 5 ms in [4194304, 8388608)), and
//! the program times each call itself around it (the tracers' times lie
//! within) and says how many a preemption pushed past their row's end: a
//! round with any is done again (for up to 90 s, or 40 rounds if longer;
//! each late round says how late its calls were).
//!
//! And the exact text of `--hist` on a hand-made trace and on the profile
//! snapshot of the same calls, finer rows, and its wrong uses.
use crate::common;
use crate::profile_program;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::TempDir;
use profile_program::{fntrace, library};

/// `round` makes 20 calls of `wait_for` (3, 9 and 8 wait 5 ms, 300 µs
/// and 10 µs) and answers `done D`, D the calls that lasted
/// past the end of their log2 row; `rounds N` makes N rounds.
const PROGRAM: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

static volatile long sink;

/* Inlined: no call of mcount of its own. */
static inline __attribute__((always_inline)) long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Spins 10 µs (too short to sleep precisely); sleeps the longer
   waits, so that a loaded machine's scheduler favours the thread when it
   wakes rather than preempting it mid-spin. */
__attribute__((noinline)) void wait_for(long ns) {
    long long until = now_ns() + ns;
    if (ns < 100000) {
        while (now_ns() < until)
            sink++;
        return;
    }
    struct timespec deadline = {until / 1000000000LL, until % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, NULL) == EINTR)
        ;
}

/* The durations of the round's late calls, for the test's message. */
static char late_durations[512];

static long round_of_calls(void) {
    long late = 0;
    late_durations[0] = 0;
    for (int i = 0; i < 20; i++) {
        /* A 5 ms call first: the tracers' first call on a thread in a
           recording sets things up, far within its row's margin. */
        long ns = i < 3 ? 5000000 : i < 12 ? 300000 : 10000;
        long end = ns < 16384 ? 16384 : ns < 524288 ? 524288 : 8388608;
        long long start = now_ns();
        wait_for(ns);
        long long took = now_ns() - start;
        if (took >= end) {
            size_t used = strlen(late_durations);
            snprintf(late_durations + used, sizeof late_durations - used, " %lld", took);
            late++;
        }
    }
    return late;
}

int main(void) {
    char line[64];
    /* Sleeps end when asked, not up to 50 µs later. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        long late = 0;
        if (strncmp(line, "rounds ", 7) == 0) {
            for (long n = atol(line + 7); n > 0; n--)
                late += round_of_calls();
        } else if (strncmp(line, "round", 5) == 0) {
            late = round_of_calls();
        }
        printf("done %ld%s\n", late, late ? late_durations : "");
        fflush(stdout);
    }
    return 0;
}
"#;

/// The program, preloaded with `libfntrace.so`, serving its control
/// socket; killed when dropped.
struct Program {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Program {
    fn start(dir: &Path, socket: &Path) -> Program {
        let source = dir.join("waits.c");
        std::fs::write(&source, PROGRAM).unwrap();
        let exe = dir.join("waits");
        let built = Command::new("gcc")
            .args(["-pg", "-O1", "-fPIE", "-pie"])
            .arg(&source)
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("running gcc");
        assert!(built.status.success(), "gcc: {built:?}");
        let mut command = Command::new(&exe);
        for (name, _) in std::env::vars() {
            if name.starts_with("FNTRACE") {
                command.env_remove(name);
            }
        }
        let mut child = command
            .env("LD_PRELOAD", library())
            .env("FNTRACE_CONTROL", socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut program = Program {
            child,
            stdin,
            stdout,
        };
        assert_eq!(program.line(), "ready");
        common::wait_for_socket(socket);
        program
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }

    fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The calls that lasted past their row once the command is done, and
    /// the last round's late durations in ns (for messages).
    fn done(&mut self) -> (u64, String) {
        let line = self.line();
        let said = line.strip_prefix("done ");
        let said = said.unwrap_or_else(|| panic!("the program said {line:?}"));
        let (late, durations) = said.split_once(' ').unwrap_or((said, ""));
        (late.parse().unwrap(), durations.to_string())
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rows designed: 8 calls in [8192, 16384), 9 in [262144, 524288),
/// 3 in [4194304, 8388608), the rows between empty.
fn designed_rows() -> Vec<(u64, u64, u64)> {
    (13..23)
        .map(|power| {
            let count = match power {
                13 => 8,
                18 => 9,
                22 => 3,
                _ => 0,
            };
            (1 << power, 1 << (power + 1), count)
        })
        .collect()
}

/// The `[lo, hi) : count` rows of a `--hist` output, and the lines
/// themselves (with their bars).
fn hist_rows(text: &str) -> (Vec<(u64, u64, u64)>, Vec<&str>) {
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('[')).collect();
    let rows = lines
        .iter()
        .map(|line| {
            let (range, rest) = line[1..].split_once(')').unwrap();
            let (lo, hi) = range.split_once(',').unwrap();
            let count = rest.trim_start_matches(" : ").split(' ').next().unwrap();
            (
                lo.trim().parse().unwrap(),
                hi.trim().parse().unwrap(),
                count.parse().unwrap(),
            )
        })
        .collect();
    (rows, lines)
}

/// A duration as the tables print it (`301 µs`, `5.00 ms`) in ns.
fn ns_of(value: &str, unit: &str) -> f64 {
    let value: f64 = value.parse().unwrap();
    value
        * match unit {
            "ns" => 1.0,
            "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            _ => panic!("unit {unit:?}"),
        }
}

/// The cells of the table row of `function` whose header line starts
/// with `first_header`: each header's value, durations in ns.
fn table_row(table: &str, first_header: &str, function: &str) -> Vec<(String, f64)> {
    let mut lines = table.lines().skip_while(|l| !l.starts_with(first_header));
    let headers: Vec<&str> = lines.next().expect("a table").split_whitespace().collect();
    let row = lines
        .find(|line| line.ends_with(&format!("  {function}")))
        .unwrap_or_else(|| panic!("no row of {function}:\n{table}"));
    let mut tokens = row.split_whitespace().peekable();
    let mut cells = Vec::new();
    for header in &headers[..headers.len() - 1] {
        let value = tokens.next().unwrap();
        let unit = tokens
            .peek()
            .copied()
            .filter(|t| ["ns", "µs", "ms", "s"].contains(t));
        let number = match unit {
            Some(unit) => {
                tokens.next();
                ns_of(value, unit)
            }
            // No figure (top's off-cpu% of a call not open through the
            // interval).
            None if value == "-" => f64::NAN,
            None => value.trim_end_matches('%').parse().unwrap(),
        };
        cells.push((header.to_string(), number));
    }
    cells
}

/// The cell under `header`.
fn cell(row: &[(String, f64)], header: &str) -> f64 {
    row.iter().find(|(h, _)| h == header).unwrap().1
}

/// p50 in the 300 µs calls' row, p90 (and with `p99`, p99) in the 5 ms
/// calls' row.
fn assert_percentiles_in_their_rows(row: &[(String, f64)], table: &str, p99: bool) {
    let p50 = cell(row, "p50");
    assert!((262_144.0..524_288.0).contains(&p50), "p50 {p50}:\n{table}");
    for p in ["p90", "p99"].into_iter().take(if p99 { 2 } else { 1 }) {
        let value = cell(row, p);
        assert!(
            (4_194_304.0..8_388_608.0).contains(&value),
            "{p} {value}:\n{table}"
        );
    }
}

#[test]
fn offline_and_live_distributions_agree_on_the_same_calls() {
    let dir = TempDir::new("hist");
    let socket = dir.0.join("control.sock");
    let target = socket.to_str().unwrap();
    let mut program = Program::start(&dir.0, &socket);
    fntrace(&["ctl", target, "enable", "profile"]);

    // Until a round has no call pushed past its row by a preemption.
    let mut attempt = 0;
    let began = Instant::now();
    let trace =
        loop {
            attempt += 1;
            let trace = dir.0.join(format!("trace-{attempt}"));
            fntrace(&["ctl", target, "profile", "reset"]);
            fntrace(&["ctl", target, "record", trace.to_str().unwrap()]);
            program.send("round");
            let (late, durations) = program.done();
            fntrace(&["ctl", target, "stop"]);
            if late == 0 {
                break trace;
            }
            eprintln!("round {attempt}: {late} late call(s), ns:{durations}");
            assert!(
            attempt < 40 || began.elapsed() < Duration::from_secs(90),
            "{late} late calls in each of {attempt} rounds (the last's, ns:{durations}); load {}",
            std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
        );
        };
    let trace = trace.to_str().unwrap();

    let offline = fntrace(&["report", trace, "--hist", "wait_f*"]);
    let live = fntrace(&["ctl", target, "profile", "--hist", "wait_f*"]);
    let saved = dir.0.join("now.profile");
    fntrace(&["ctl", target, "profile", "--save", saved.to_str().unwrap()]);
    let snapshot = fntrace(&["report", saved.to_str().unwrap(), "--hist", "wait_f*"]);
    let (offline_rows, offline_lines) = hist_rows(&offline);
    assert_eq!(offline_rows, designed_rows(), "{offline}");
    assert!(
        offline.contains("\n# wait_for: 20 calls, p50 "),
        "{offline}"
    );
    for text in [&live, &snapshot] {
        let (rows, lines) = hist_rows(text);
        assert_eq!(rows, designed_rows(), "{text}");
        assert_eq!(lines, offline_lines, "{text}");
    }
    assert_eq!(
        offline_lines[0],
        "[   8192,   16384) : 8      |***********************************     |"
    );
    assert_eq!(
        offline_lines[9],
        "[4194304, 8388608) : 3      |*************                           |"
    );

    // Finer rows: 4 per power of two, the same calls in them.
    let fine = |text: &str| {
        let (rows, _) = hist_rows(text);
        rows.into_iter().filter(|r| r.2 > 0).collect::<Vec<_>>()
    };
    let offline_fine = fine(&fntrace(&[
        "report",
        trace,
        "--hist",
        "wait_for",
        "--hist-buckets",
        "4",
    ]));
    let live_fine = fine(&fntrace(&[
        "ctl",
        target,
        "profile",
        "--hist",
        "wait_for",
        "--hist-buckets",
        "4",
    ]));
    assert_eq!(offline_fine, live_fine);
    assert_eq!(
        offline_fine.iter().map(|r| r.2).sum::<u64>(),
        20,
        "{offline_fine:?}"
    );
    for (lo, hi, _) in &offline_fine {
        assert!(
            [8_192, 262_144, 4_194_304]
                .iter()
                .any(|&base| *lo >= base && *hi <= 2 * base),
            "{offline_fine:?}"
        );
    }

    // The tables' percentiles: in the rows designed for them.
    let report = fntrace(&["report", trace]);
    let row = table_row(&report, "calls", "wait_for");
    assert_eq!(cell(&row, "calls"), 20.0, "{report}");
    assert_percentiles_in_their_rows(&row, &report, true);
    let profile = fntrace(&["ctl", target, "profile"]);
    let live_row = table_row(&profile, "calls", "wait_for");
    assert_eq!(cell(&live_row, "calls"), 20.0, "{profile}");
    assert_percentiles_in_their_rows(&live_row, &profile, true);

    // top, over an interval of rounds, late calls or not: a few late ones
    // move neither p50 nor p90 out of its row.
    program.send("rounds 100");
    let frame = fntrace(&["top", target, "--once", "--interval", "1s"]);
    program.done();
    let top_row = table_row(&frame, "calls/s", "wait_for");
    assert_percentiles_in_their_rows(&top_row, &frame, false);

    // A glob that matches nothing names the closest names.
    for args in [
        vec!["report", trace, "--hist", "wait_fr"],
        vec!["ctl", target, "profile", "--hist", "wait_fr"],
    ] {
        let output = Command::new(profile_program::CLI)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(if args[0] == "ctl" { 2 } else { 1 })
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("--hist wait_fr: no function called in ")
                && stderr.contains("matches it (closest: wait_for"),
            "{args:?}: {stderr}"
        );
    }
}

/// A trace of `work` (3 calls of 100 ns, one of 5 µs) and `worker` (2
/// calls of 300 ns, one still running at the end), and the profile
/// snapshot of the same calls.
fn work_trace() -> (
    fntrace_tools::Trace,
    fntrace_tools::analysis::ProfileSnapshot,
) {
    use fntrace_tools::analysis::{FunctionProfile, Histogram, ProfileSnapshot};
    use fntrace_tools::{EventKind, GraphEvent, ThreadTrace, Trace};
    let (work, worker) = (0x10, 0x20);
    let mut events = Vec::new();
    let calls = [
        (work, 0, 100),
        (work, 200, 300),
        (work, 400, 500),
        (work, 600, 5_600),
        (worker, 6_000, 6_300),
        (worker, 7_000, 7_300),
    ];
    for (function, entry, exit) in calls {
        for (time_ns, kind) in [(entry, EventKind::Entry), (exit, EventKind::Exit)] {
            events.push(GraphEvent {
                time_ns,
                function,
                depth: 0,
                kind,
            });
        }
    }
    events.push(GraphEvent {
        time_ns: 8_000,
        function: worker,
        depth: 0,
        kind: EventKind::Entry,
    });
    let trace = Trace {
        pid: 7,
        exe: "/usr/bin/x".into(),
        threads: vec![ThreadTrace {
            tid: 7,
            name: None,
            events,
            lost: 0,
        }],
        names: [(work, "work".to_string()), (worker, "worker".to_string())].into(),
        ..Trace::default()
    };
    let profile = |function, name: &str, durations: &[u64], running| {
        let mut histogram = Histogram::new();
        durations.iter().for_each(|&d| histogram.record(d));
        FunctionProfile {
            function,
            name: name.into(),
            total_ns: histogram.sum(),
            self_ns: histogram.sum(),
            durations: histogram,
            running,
        }
    };
    let snapshot = ProfileSnapshot {
        taken_ns: 9_000,
        threads: 1,
        functions: vec![
            profile(work, "work", &[100, 100, 100, 5_000], 0),
            profile(worker, "worker", &[300, 300], 1),
        ],
        ..ProfileSnapshot::default()
    };
    (trace, snapshot)
}

#[test]
fn hist_of_a_trace_and_of_a_snapshot_exactly() {
    let dir = TempDir::new("hist-exact");
    let trace_dir = dir.0.join("trace");
    let (trace, snapshot) = work_trace();
    fntrace_tools::export::write_uftrace_dir(&trace, &trace_dir, None).unwrap();
    let saved = dir.0.join("work.profile");
    std::fs::write(&saved, snapshot.to_text()).unwrap();
    let (trace_dir, saved) = (trace_dir.to_str().unwrap(), saved.to_str().unwrap());

    let offline = fntrace(&["report", trace_dir, "--hist", "work*"]);
    assert_eq!(
        offline,
        concat!(
            "# /usr/bin/x (pid 7): 1 threads, 13 events; durations: wall-clock time, blocked time included\n",
            "# 1 call has no exit (1 still running when the trace ended): worker ×1\n",
            "\n",
            "# work: 4 calls, p50 100 ns, p90 5.00 µs, p99 5.00 µs, max 5.00 µs\n",
            "       nsecs : count  distribution\n",
            "[  64,  128) : 3      |****************************************|\n",
            "[ 128,  256) : 0      |                                        |\n",
            "[ 256,  512) : 0      |                                        |\n",
            "[ 512, 1024) : 0      |                                        |\n",
            "[1024, 2048) : 0      |                                        |\n",
            "[2048, 4096) : 0      |                                        |\n",
            "[4096, 8192) : 1      |*************                           |\n",
            "\n",
            "# worker: 2 calls, p50 300 ns, p90 300 ns, p99 300 ns, max 300 ns \
             (1 unfinished, not counted below)\n",
            "     nsecs : count  distribution\n",
            "[256, 512) : 2      |****************************************|\n",
        )
    );
    // The snapshot of the same calls: the same rows.
    let live = fntrace(&["report", saved, "--hist", "work*"]);
    let rows = |text: &str| -> Vec<String> {
        (text.lines())
            .filter(|line| line.starts_with('[') || line.contains("nsecs"))
            .map(String::from)
            .collect()
    };
    assert_eq!(rows(&live), rows(&offline), "{live}");
    assert!(
        live.contains("max 300 ns (1 running, not counted below)\n"),
        "{live}"
    );

    // Finer: 4 rows per power of two, the empty run as one row.
    let fine = fntrace(&["report", trace_dir, "--hist", "work", "--hist-buckets", "4"]);
    assert!(
        fine.ends_with(concat!(
            "# work: 4 calls, p50 100 ns, p90 5.00 µs, p99 5.00 µs, max 5.00 µs\n",
            "       nsecs : count  distribution\n",
            "[  96,  112) : 3      |****************************************|\n",
            "[ 112, 4096) : 0      |                                        |\n",
            "[4096, 5120) : 1      |*************                           |\n",
        )),
        "{fine}"
    );
    let fine_live = fntrace(&["report", saved, "--hist", "work", "--hist-buckets", "4"]);
    assert_eq!(rows(&fine_live), rows(&fine));

    // Wrong uses: named, nothing printed on stdout.
    let run = |args: &[&str]| {
        Command::new(profile_program::CLI)
            .args(args)
            .output()
            .unwrap()
    };
    for place in [trace_dir, saved] {
        let output = run(&["report", place, "--hist", "wrk"]);
        assert_eq!(output.status.code(), Some(1));
        assert!(output.stdout.is_empty());
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            format!(
                "fntrace: --hist wrk: no function called in {}{place} matches it (closest: \
                 work, worker)\n",
                if place == saved { "profile " } else { "" }
            )
        );
    }
    for args in [
        &["report", trace_dir, "--hist", "work", "--threads"][..],
        &["report", trace_dir, "--hist-buckets", "4"],
        &["report", trace_dir, "--hist", "work", "--hist-buckets", "3"],
        &[
            "report",
            trace_dir,
            "--hist",
            "work",
            "--hist-buckets",
            "256",
        ],
    ] {
        let output = run(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
    }
}
