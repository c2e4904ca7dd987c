//! `fntrace pprof` and `fntrace ctl PID profile --pprof`, read by Go's own
//! `go tool pprof -top`: a `gcc -pg` C program preloaded with
//! `libfntrace.so` makes known calls (1000 × handle → parse, leaf, leaf;
//! fib(12), 465 calls of a recursive function) while it is recorded (the
//! graph tracer) and profiled (the profile tracer) at once. The profile
//! of the trace directory, of the saved snapshot and of the live program
//! each list, per function, the calls, total and self time that `fntrace
//! report` gives of the same data: calls exactly as designed, times exactly
//! against the report's numbers (pprof's `-unit=ns` prints whole
//! nanoseconds), and within the rounding of the report's text (3
//! significant digits: 0.5 %) against what `fntrace report` prints.
//!
//! The metrics endpoint's `/debug/pprof/profile?seconds=N` is read the
//! same way: the calls made in its window, exactly, and their times as
//! the difference of two snapshots the CLI saved around the window.
//!
//! Calls are counted, not timed: nothing depends on the machine's load
//! (the window is seconds long around calls that take milliseconds).

use crate::common;
use crate::profile_program;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::TempDir;
use fntrace_tools::analysis::{FunctionStats, ProfileSnapshot, Rows};
use profile_program::{fntrace, library, CLI};

/// `run N`: N × handle → parse, leaf, leaf; `fib N`: fib(N), recursive.
/// Each answers `done`.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile long sink;

__attribute__((noinline)) void leaf(long i) { sink += i; }

__attribute__((noinline)) long parse(long i) {
    for (int k = 0; k < 50; k++)
        sink += k * i;
    return sink;
}

__attribute__((noinline)) void handle(long i) {
    parse(i);
    leaf(i);
    leaf(i + 1);
}

__attribute__((noinline)) long fib(long n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

int main(void) {
    char line[64];
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "run ", 4) == 0) {
            for (long n = atol(line + 4), i = 0; i < n; i++)
                handle(i);
        } else if (strncmp(line, "fib ", 4) == 0) {
            sink += fib(atol(line + 4));
        }
        printf("done\n");
        fflush(stdout);
    }
    return 0;
}
"#;

/// The calls designed: fib(12) makes C(12) = 465 calls, C(n) = C(n-1) +
/// C(n-2) + 1, C(0) = C(1) = 1.
const DESIGNED: [(&str, u64); 4] = [
    ("fib", 465),
    ("handle", 1000),
    ("leaf", 2000),
    ("parse", 1000),
];

/// The program, preloaded with `libfntrace.so`, serving its control
/// socket; killed when dropped.
struct Program {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Program {
    fn start(dir: &Path, socket: &Path, env: &[(&str, &str)]) -> Program {
        let source = dir.join("calls.c");
        std::fs::write(&source, PROGRAM).unwrap();
        let exe = dir.join("calls");
        let built = Command::new("gcc")
            .args(["-pg", "-g", "-O1", "-fPIE", "-pie"])
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
            .envs(env.iter().copied())
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

    /// Sends `command` and waits for it to be done.
    fn ask(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        assert_eq!(self.line(), "done", "{command}");
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One function's numbers: calls, total (wall) and self, in ns.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Numbers {
    calls: f64,
    total: f64,
    self_ns: f64,
}

/// What `go tool pprof -top` says of `file`, per function: each sample
/// type's flat column. Fails, never skips, when Go is missing.
fn pprof_top(file: &Path, scratch: &Path) -> Vec<(String, Numbers)> {
    let column = |index: &str| -> Vec<(String, f64)> {
        let output = Command::new("go")
            .args([
                "tool",
                "pprof",
                "-top",
                "-nodecount=1000",
                "-nodefraction=0",
            ])
            .arg(format!("-sample_index={index}"))
            .arg("-unit=ns")
            .arg(file)
            .env("PPROF_TMPDIR", scratch)
            .output()
            .expect("go (apt-get install golang-go) must be installed for this test");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "go tool pprof: {}{text}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(text.contains(&format!("Type: {index}\n")), "{text}");
        let rows = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("flat"));
        let mut values: Vec<(String, f64)> = rows
            .skip(1)
            .map(|line| {
                let cells: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(cells.len(), 6, "{line:?} in\n{text}");
                let value = cells[0].trim_end_matches("ns").parse().unwrap();
                (cells[5].to_string(), value)
            })
            .collect();
        values.sort_by(|a, b| a.0.cmp(&b.0));
        values
    };
    let (calls, wall, self_ns) = (column("calls"), column("wall"), column("self"));
    let names = |column: &[(String, f64)]| -> Vec<String> {
        column.iter().map(|(name, _)| name.clone()).collect()
    };
    assert_eq!(names(&calls), names(&wall));
    assert_eq!(names(&calls), names(&self_ns));
    calls
        .iter()
        .zip(wall.iter().zip(&self_ns))
        .map(|((name, calls), ((_, total), (_, self_ns)))| {
            let numbers = Numbers {
                calls: *calls,
                total: *total,
                self_ns: *self_ns,
            };
            (name.clone(), numbers)
        })
        .collect()
}

/// What `go tool pprof -top -lines` names each row of `file` by (the
/// function, then its file:line when the profile has them), sorted.
fn pprof_lines(file: &Path, scratch: &Path) -> Vec<String> {
    let output = Command::new("go")
        .args(["tool", "pprof", "-top", "-lines", "-nodecount=1000"])
        .args(["-nodefraction=0", "-sample_index=calls"])
        .arg(file)
        .env("PPROF_TMPDIR", scratch)
        .output()
        .expect("go (apt-get install golang-go) must be installed for this test");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "go tool pprof -lines: {text}");
    let mut rows: Vec<String> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            assert!(cells.len() >= 6, "{line:?} in\n{text}");
            cells[5..].join(" ")
        })
        .collect();
    rows.sort();
    rows
}

/// The rows of a latency report with completed calls, by name.
fn exact(rows: &[FunctionStats]) -> Vec<(String, Numbers)> {
    let mut numbers: Vec<(String, Numbers)> = rows
        .iter()
        .filter(|row| row.calls > 0)
        .map(|row| {
            let numbers = Numbers {
                calls: row.calls as f64,
                total: row.total_ns as f64,
                self_ns: row.self_ns as f64,
            };
            (row.name.clone(), numbers)
        })
        .collect();
    numbers.sort_by(|a, b| a.0.cmp(&b.0));
    numbers
}

/// A duration as report's table prints it (`301 µs`, `5.00 ms`), in ns.
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

/// The rows `fntrace report` prints with completed calls: calls, total,
/// self (its columns: calls, unfinished or running, total, self, ...).
fn report_text(text: &str) -> Vec<(String, Numbers)> {
    let mut rows: Vec<(String, Numbers)> = text
        .lines()
        .skip_while(|line| !line.starts_with("calls "))
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            let numbers = Numbers {
                calls: cells[0].parse().unwrap(),
                total: ns_of(cells[2], cells[3]),
                self_ns: ns_of(cells[4], cells[5]),
            };
            (cells.last().unwrap().to_string(), numbers)
        })
        .filter(|(_, numbers)| numbers.calls > 0.0)
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

/// The designed calls of each function of `numbers`, and no other.
fn assert_designed(numbers: &[(String, Numbers)], what: &str) {
    let calls: Vec<(&str, u64)> = numbers
        .iter()
        .map(|(name, numbers)| (name.as_str(), numbers.calls as u64))
        .collect();
    assert_eq!(calls, DESIGNED, "{what}");
}

/// pprof's numbers and report's text agree: calls exactly, times within
/// the rounding of the text (3 significant digits).
fn assert_within_rounding(pprof: &[(String, Numbers)], text: &[(String, Numbers)], what: &str) {
    assert_eq!(pprof.len(), text.len(), "{what}: {pprof:?}\n{text:?}");
    for ((name, ours), (their_name, theirs)) in pprof.iter().zip(text) {
        assert_eq!(name, their_name, "{what}");
        assert_eq!(ours.calls, theirs.calls, "{what}: {name}");
        for (a, b) in [(ours.total, theirs.total), (ours.self_ns, theirs.self_ns)] {
            assert!(
                (a - b).abs() <= a * 0.005 + 1.0,
                "{what}: {name}: pprof {a} ns, report {b} ns"
            );
        }
    }
}

#[test]
fn go_tool_pprof_reads_the_calls_and_times_of_report() {
    let dir = TempDir::new("pprof");
    let socket = dir.0.join("control.sock");
    let target = socket.to_str().unwrap();
    let path = |name: &str| dir.0.join(name).to_str().unwrap().to_string();
    let mut program = Program::start(&dir.0, &socket, &[]);
    fntrace(&["ctl", target, "enable", "profile"]);
    fntrace(&["ctl", target, "record", &path("trace")]);
    program.ask("run 1000");
    program.ask("fib 12");
    fntrace(&["ctl", target, "stop"]);

    // The trace directory.
    fntrace(&["pprof", &path("trace"), "-o", &path("trace.pb.gz")]);
    let of_trace = pprof_top(&dir.0.join("trace.pb.gz"), &dir.0);
    assert_designed(&of_trace, "pprof of the trace");
    let reader = fntrace_tools::export::UftraceReader::open(&dir.0.join("trace")).unwrap();
    let report = fntrace_tools::analysis::latency_of(&reader).unwrap();
    assert_eq!(of_trace, exact(&report.functions), "trace");
    let text = fntrace(&["report", &path("trace")]);
    assert_within_rounding(&of_trace, &report_text(&text), "report of the trace");

    // The snapshot, saved, and the live profile (the program idle: the
    // same calls).
    fntrace(&["ctl", target, "profile", "--save", &path("now.profile")]);
    fntrace(&["pprof", &path("now.profile"), "-o", &path("snapshot.pb.gz")]);
    fntrace(&["ctl", target, "profile", "--pprof", &path("live.pb.gz")]);
    let saved = std::fs::read_to_string(dir.0.join("now.profile")).unwrap();
    let snapshot = ProfileSnapshot::from_text(&saved).unwrap();
    let rows = exact(&snapshot.latency_report(Rows::ByName).functions);
    let text = report_text(&fntrace(&["report", &path("now.profile")]));
    for file in ["snapshot.pb.gz", "live.pb.gz"] {
        let numbers = pprof_top(&dir.0.join(file), &dir.0);
        assert_designed(&numbers, file);
        assert_eq!(numbers, rows, "{file}");
        assert_within_rounding(&numbers, &text, file);
    }

    // File and line: where each function's definition begins in calls.c,
    // in the profiles of the trace and of the live program (their
    // addresses lie in files of the program's memory map); a snapshot
    // file keeps no map, its functions are named alone.
    let source = dir.0.join("calls.c");
    let defined: Vec<String> = DESIGNED
        .iter()
        .map(|&(name, _)| {
            let line = PROGRAM
                .lines()
                .position(|line| {
                    line.starts_with("__attribute__") && line.contains(&format!(" {name}("))
                })
                .expect("the function's definition");
            format!("{name} {}:{}", source.display(), line + 1)
        })
        .collect();
    assert_eq!(pprof_lines(&dir.0.join("trace.pb.gz"), &dir.0), defined);
    assert_eq!(pprof_lines(&dir.0.join("live.pb.gz"), &dir.0), defined);
    let named: Vec<String> = DESIGNED.iter().map(|&(name, _)| name.into()).collect();
    assert_eq!(pprof_lines(&dir.0.join("snapshot.pb.gz"), &dir.0), named);

    // -F: the calls inside handle only.
    let handle = path("handle.pb.gz");
    fntrace(&["pprof", &path("trace"), "-F", "handle", "-o", &handle]);
    let inside: Vec<(String, u64)> = pprof_top(Path::new(&handle), &dir.0)
        .into_iter()
        .map(|(name, numbers)| (name, numbers.calls as u64))
        .collect();
    let expected = [("handle", 1000), ("leaf", 2000), ("parse", 1000)];
    let expected: Vec<(String, u64)> = expected.map(|(n, c)| (n.to_string(), c)).into();
    assert_eq!(inside, expected);

    // A link at the output is refused, its target untouched.
    let kept = dir.0.join("kept");
    std::fs::write(&kept, "kept").unwrap();
    let link = dir.0.join("link.pb.gz");
    std::os::unix::fs::symlink(&kept, &link).unwrap();
    let refused = Command::new(CLI)
        .args(["pprof", &path("trace"), "-o", link.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("link.pb.gz"), "{said}");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "kept");
}

/// A request for `target` sent to `127.0.0.1:port`, its reply not read.
fn request(port: u16, target: &str) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(stream, "GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    stream
}

/// The reply on `stream`: status, head, body.
fn reply(mut stream: TcpStream) -> (u16, String, Vec<u8>) {
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(&bytes)));
    let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head, bytes[end + 4..].to_vec())
}

/// `GET target`: status and body as text.
fn get(port: u16, target: &str) -> (u16, String) {
    let (status, _, body) = reply(request(port, target));
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn the_metrics_endpoint_serves_the_calls_of_a_window_as_pprof() {
    let dir = TempDir::new("pprof-endpoint");
    let socket = dir.0.join("control.sock");
    let target = socket.to_str().unwrap();
    let path = |name: &str| dir.0.join(name).to_str().unwrap().to_string();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let mut program = Program::start(&dir.0, &socket, &[("FNTRACE_METRICS", &address)]);
    let start = Instant::now();
    while TcpStream::connect(&address).is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "no endpoint");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Refused: the tracer off, then windows out of bounds.
    let (status, why) = get(port, "/debug/pprof/profile?seconds=1");
    assert_eq!(status, 503, "{why}");
    assert!(why.contains("profile tracer is not enabled"), "{why}");
    fntrace(&["ctl", target, "enable", "profile"]);
    for bad in ["0", "301", "2.5", "two"] {
        let (status, why) = get(port, &format!("/debug/pprof/profile?seconds={bad}"));
        assert_eq!(status, 400, "seconds={bad}: {why}");
        assert!(why.contains("from 1 to 300"), "{why}");
    }

    // Calls before the window, which it must leave out.
    program.ask("run 300");
    program.ask("fib 12");
    fntrace(&["ctl", target, "profile", "--save", &path("before.profile")]);
    let opened = Instant::now();
    let window = request(port, "/debug/pprof/profile?seconds=2");
    // /metrics is answered while the window is open. The window's head
    // was on its connection before this one was made (loopback delivers
    // in the sender's write), and the server reads the connections it
    // accepted first first: the window is open once /metrics has
    // answered, before the calls below.
    let (status, metrics) = get(port, "/metrics");
    assert_eq!(status, 200, "{metrics}");
    assert!(metrics.contains("handle"), "{metrics}");
    window.set_nonblocking(true).unwrap();
    let pending = (&window).read(&mut [0u8; 1]).map_err(|e| e.kind());
    assert_eq!(pending, Err(std::io::ErrorKind::WouldBlock), "{metrics}");
    window.set_nonblocking(false).unwrap();
    program.ask("run 1000");
    let (status, head, body) = reply(window);
    let waited = opened.elapsed();
    assert_eq!(status, 200, "{head}\n{}", String::from_utf8_lossy(&body));
    assert!(waited >= Duration::from_secs(2), "{waited:?}");
    assert!(
        head.contains("Content-Type: application/octet-stream"),
        "{head}"
    );
    assert_eq!(body[..2], [0x1f, 0x8b], "gzip");
    fntrace(&["ctl", target, "profile", "--save", &path("after.profile")]);
    std::fs::write(dir.0.join("window.pb.gz"), &body).unwrap();
    // The same message, not gzipped: pprof reads it too.
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut raw)
        .unwrap();
    std::fs::write(dir.0.join("window.pb"), &raw).unwrap();

    // The window's calls: exactly the 1000 rounds of run, no fib; their
    // times those of the difference of the two saved snapshots.
    let saved = |name: &str| {
        let text = std::fs::read_to_string(dir.0.join(name)).unwrap();
        ProfileSnapshot::from_text(&text).unwrap()
    };
    let between = saved("after.profile")
        .since(&saved("before.profile"))
        .unwrap();
    let rows = exact(&between.latency_report(Rows::ByName).functions);
    for file in ["window.pb.gz", "window.pb"] {
        let numbers = pprof_top(&dir.0.join(file), &dir.0);
        let calls: Vec<(&str, u64)> = numbers
            .iter()
            .map(|(name, numbers)| (name.as_str(), numbers.calls as u64))
            .collect();
        assert_eq!(
            calls,
            [("handle", 1000), ("leaf", 2000), ("parse", 1000)],
            "{file}"
        );
        assert_eq!(numbers, rows, "{file}");
    }

    // A reset during a window: the window has no profile.
    let window = request(port, "/debug/pprof/profile?seconds=1");
    let (status, _) = get(port, "/metrics");
    assert_eq!(status, 200);
    fntrace(&["ctl", target, "profile", "reset"]);
    let (status, _, why) = reply(window);
    let why = String::from_utf8_lossy(&why);
    assert_eq!(status, 409, "{why}");
    assert!(why.contains("reset during the window"), "{why}");
}
