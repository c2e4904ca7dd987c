//! Live control through the control socket, from outside the process:
//! `tests/c/ctl_prog.c`, a multi-threaded C program that never calls
//! fntrace, built with `gcc -pg` (PIE) and `gcc -pg -mfentry` and linked
//! with `libfntrace.a`, runs with `FNTRACE_CONTROL`; the test drives it
//! with the `fntrace ctl` command while it runs (paced by its standard
//! input, so the calls between two commands are known) and reads what it
//! recorded and dumped back with fntrace's reader and the real `uftrace
//! report`: exact counts. Every bad value and hostile client gets an error
//! reply and changes nothing: the program runs on and its counts stay
//! exact. `tests/control_api.rs` covers `fntrace::serve_control` in
//! process.

mod common;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::ctl_prog::Program;
use common::native::{build_c_program, cli, repo};

const THREADS: u64 = 4;
/// Iterations per thread of one `work` line.
const N: u64 = 1000;
const FILTER: &str = "handle_*,parse_*,!handle_log*";

/// Calls of the selected functions in `iterations` per thread.
fn expected(iterations: u64) -> [(&'static str, u64); 3] {
    let gets = THREADS * iterations;
    let puts = THREADS * iterations / 4;
    [
        ("handle_get", gets),
        ("handle_put", puts),
        ("parse_key", gets + 2 * puts),
    ]
}

/// Entries and exits of those calls.
fn expected_events(iterations: u64) -> u64 {
    expected(iterations).iter().map(|(_, n)| 2 * n).sum()
}

/// The exact counts of `iterations` per thread in `dir`, by fntrace's
/// reader and by `uftrace report`.
fn check_counts(dir: &Path, iterations: u64) {
    let counts = common::call_counts(&common::read_trace_dir(dir));
    for (name, n) in expected(iterations) {
        assert_eq!(counts.get(name), Some(&(n, n)), "{name} in {counts:?}");
    }
    assert_eq!(counts.len(), 3, "only the selected functions: {counts:?}");
    let uftrace = common::uftrace_calls(dir);
    for (name, n) in expected(iterations) {
        assert_eq!(uftrace.get(name), Some(&n), "{name} in uftrace {uftrace:?}");
    }
    assert_eq!(uftrace.len(), 3, "uftrace: {uftrace:?}");
}

fn build(variant: &str, flags: &[&str]) -> (PathBuf, PathBuf) {
    let base = common::temp_dir(&format!("ctl-{variant}"));
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("ctl_prog");
    build_c_program(&repo().join("tests/c/ctl_prog.c"), flags, &program);
    (base, program)
}

/// What `fntrace ctl` did.
struct Ctl {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `fntrace ctl TARGET ARGS` in `cwd`.
fn ctl(cwd: &Path, target: &str, args: &[&str]) -> Ctl {
    let output = Command::new(cli())
        .current_dir(cwd)
        .arg("ctl")
        .arg(target)
        .args(args)
        .output()
        .unwrap();
    Ctl {
        code: output.status.code().expect("fntrace ctl was killed"),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// `fntrace ctl TARGET ARGS`, which must succeed; what it printed.
fn ctl_ok(cwd: &Path, target: &str, args: &[&str]) -> String {
    let done = ctl(cwd, target, args);
    assert_eq!(
        (done.code, done.stderr.as_str()),
        (0, ""),
        "ctl {args:?}: {}",
        done.stdout
    );
    done.stdout
}

/// The `key: value` lines of a reply.
fn fields(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Calls per function in a latency table (rows: calls first, function
/// last).
fn table_calls(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            Some((fields.last()?.to_string(), fields.first()?.parse().ok()?))
        })
        .collect()
}

/// Asserts that the first 32 bytes of `function` in the running process
/// `pid` differ from the executable's (`program`, PIE) only where its
/// mcount/fentry call is (`e8 rel32`, `67 e8 rel32` or `ff 15 disp32`),
/// which holds a NOP of the same length.
fn assert_nop_over_call(program: &Path, pid: u32, function: &str) {
    use std::os::unix::fs::FileExt;
    const LEN: usize = 32;
    let image = std::fs::read(program).unwrap();
    let (address, offset) = common::native::symbol_in_file(program, function);
    let offset = offset as usize;
    let in_file = &image[offset..offset + LEN];
    // The executable's first mapping (file offset 0) is where address 0 is.
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let base = maps
        .lines()
        .find(|line| line.ends_with(program.to_str().unwrap()))
        .and_then(|line| line.split('-').next())
        .map(|start| u64::from_str_radix(start, 16).unwrap())
        .unwrap();
    let mut in_memory = vec![0u8; LEN];
    std::fs::File::open(format!("/proc/{pid}/mem"))
        .unwrap()
        .read_exact_at(&mut in_memory, base + address)
        .unwrap();
    let changed: Vec<usize> = (0..LEN).filter(|&i| in_file[i] != in_memory[i]).collect();
    let (Some(&first), Some(&last)) = (changed.first(), changed.last()) else {
        panic!("{function}: its text is as built, the call still there: {in_file:02x?}");
    };
    let call = &in_file[first..];
    let len = match call {
        [0xe8, ..] => 5,
        [0x67, 0xe8, ..] | [0xff, 0x15, ..] => 6,
        _ => panic!("{function}: no call where the text changed: {in_file:02x?} {in_memory:02x?}"),
    };
    let nop: &[u8] = if len == 5 {
        &common::NOP5
    } else {
        &common::NOP6
    };
    assert!(
        last < first + len,
        "{function}: {in_file:02x?} {in_memory:02x?}"
    );
    assert_eq!(&in_memory[first..first + len], nop, "{function}");
}

/// Sends `request` as a client of its own and reads the reply to the end
/// (the server closes the connection after it).
fn ask(socket: &Path, request: &[u8]) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    // The server may close before reading all of an over-long request.
    let _ = stream.write_all(request);
    read_reply(&mut stream)
}

/// `ask`, again while the server is busy (its slots are freed as it sees
/// the clients before go).
fn ask_when_free(socket: &Path, request: &[u8]) -> String {
    (0..1000)
        .map(|_| ask(socket, request))
        .find(|reply| !reply.starts_with("error: busy"))
        .expect("the slots of gone clients are never freed")
}

/// The reply on `stream`, read to the end of the connection.
fn read_reply(stream: &mut UnixStream) -> String {
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
            // The server closed with our unread bytes: after the reply.
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(err) => panic!("reading the reply: {err}"),
        }
    }
    String::from_utf8(reply).unwrap()
}

fn uid() -> u32 {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// Records, stops, enables, disables, reports and dumps a running program,
/// through its socket at a path or (`by_pid`) the default path of its pid.
fn controlled_live(variant: &str, flags: &[&str], by_pid: bool) {
    let (base, program) = build(variant, flags);
    let path_socket = base.join("ctl.sock");
    let control: &OsStr = match by_pid {
        true => OsStr::new("1"),
        false => path_socket.as_os_str(),
    };
    let mut p = Program::start(&program, &[("FNTRACE_CONTROL", control)], &base);
    let pid = p.pid();
    let (target, socket) = match by_pid {
        true => (
            pid.to_string(),
            PathBuf::from(format!("/tmp/fntrace-{}/{pid}.sock", uid())),
        ),
        false => (path_socket.to_str().unwrap().to_string(), path_socket),
    };
    let metadata = std::fs::symlink_metadata(&socket).unwrap();
    assert_eq!(metadata.mode() & 0o777, 0o600, "{}", socket.display());
    if by_pid {
        let dir = std::fs::metadata(socket.parent().unwrap()).unwrap();
        assert_eq!((dir.mode() & 0o777, dir.uid()), (0o700, uid()));
    }
    let ctl_ok = |args: &[&str]| ctl_ok(&base, &target, args);

    let status = ctl_ok(&["status"]);
    assert!(status.starts_with(&format!("pid {pid}\n")), "{status}");
    let status = fields(&status);
    assert_eq!(status["filter"], "none (every function)");
    assert_eq!(status["recording"], "none");
    let tracers: Vec<&str> = status["tracers"].split(", ").collect();
    assert_eq!(tracers.len(), 3, "{tracers:?}");
    assert!(tracers.contains(&"graph") && tracers.contains(&"function"));
    assert!(tracers.contains(&"profile"));
    // fntrace found the sites at start-up: each is a NOP already, the only
    // change to the text, before any tracer was enabled.
    assert_eq!(status["sites"].split_once(" (").unwrap().1, "0 patched)");
    assert_nop_over_call(&program, pid, "handle_get");
    p.work(N); // nothing traced

    assert_eq!(
        ctl_ok(&["filter", FILTER]),
        format!("filter {FILTER}: for the tracers enabled from now on, and recordings\n")
    );
    let recorded = base.join("rec.data");
    assert_eq!(
        ctl_ok(&["record", "rec.data"]), // relative: to the client's directory
        format!("recording to {}\n", recorded.display())
    );
    let status = fields(&ctl_ok(&["status"]));
    assert!(status["tracers"].contains("graph (enabled)"), "{status:?}");
    // Enabling the recorded tracer again is refused, and says why.
    let again = ctl(&base, &target, &["enable", "graph"]);
    assert!(
        again.code != 0 && again.stderr.contains("the graph tracer is recording"),
        "{} {} {}",
        again.code,
        again.stdout,
        again.stderr
    );
    assert!(
        status["recording"].starts_with(&format!("{} (", recorded.display())),
        "{status:?}"
    );
    assert_eq!(
        status["filter"],
        format!("{FILTER} (for tracers enabled from now on, and recordings)")
    );
    p.work(N);
    let stopped = ctl_ok(&["stop"]);
    assert!(
        stopped.starts_with(&format!("stopped recording to {}\n", recorded.display())),
        "{stopped}"
    );
    let stopped = fields(&stopped);
    assert_eq!(stopped["events"], expected_events(N).to_string());
    assert_eq!(stopped["lost"], "0");
    assert_eq!(stopped["threads"], THREADS.to_string());
    check_counts(&recorded, N);
    // A live service's recording drops rather than waits, by default: the
    // reply says so, and has no waits or buffer peak to report.
    assert_eq!(recorder_mode(&recorded), "drop");
    assert_eq!(stopped["mode"], "drop");
    assert!(
        !stopped.contains_key("waits") && !stopped.contains_key("memory_peak"),
        "{stopped:?}"
    );
    let status = fields(&ctl_ok(&["status"]));
    assert_eq!(status["recording"], "none");
    assert!(!status["tracers"].contains("enabled"), "{status:?}");

    // Directories that are not empty are refused, and left alone.
    let files = std::fs::read_dir(&base).unwrap().count();
    for command in ["record", "dump"] {
        let done = ctl(&base, &target, &[command, base.to_str().unwrap()]);
        assert_eq!(done.code, 1, "{command}: {}", done.stderr);
        assert!(
            done.stderr.starts_with("fntrace: ") && done.stderr.contains("not an empty directory"),
            "{command}: {}",
            done.stderr
        );
    }
    assert_eq!(std::fs::read_dir(&base).unwrap().count(), files);
    assert_eq!(fields(&ctl_ok(&["status"]))["recording"], "none");

    // Another tracer, on and off.
    assert_eq!(
        ctl_ok(&["enable", "function"]),
        format!("enabled function ({FILTER})\n")
    );
    assert!(fields(&ctl_ok(&["status"]))["tracers"].contains("function (enabled)"));
    assert_eq!(ctl_ok(&["disable", "function"]), "disabled function\n");
    assert_eq!(
        ctl_ok(&["disable", "function"]),
        "disabled function (it was not enabled)\n"
    );

    assert_eq!(
        ctl_ok(&["enable", "graph"]),
        format!("enabled graph ({FILTER})\n")
    );
    p.work(N);
    assert_eq!(ctl_ok(&["disable", "graph"]), "disabled graph\n");
    p.work(N); // not traced
    let report = ctl_ok(&["report"]);
    assert!(
        report.starts_with(&format!(
            "latency of the graph tracer's {} events in memory\n\
             # durations: wall-clock time, blocked time included\ncalls ",
            expected_events(N)
        )),
        "{report}"
    );
    assert_eq!(
        table_calls(&report),
        expected(N)
            .iter()
            .map(|&(name, n)| (name.to_string(), n))
            .collect(),
        "{report}"
    );
    let dumped = base.join("dump.data");
    let dump = ctl_ok(&["dump", dumped.to_str().unwrap()]);
    assert_eq!(
        dump,
        format!(
            "dumped to {}\nevents: {}\nlost: 0\nthreads: {THREADS}\n",
            dumped.display(),
            expected_events(N)
        )
    );
    check_counts(&dumped, N);
    assert!(ctl_ok(&["report"]).starts_with("latency of the graph tracer's 0 events in memory\n"));

    // Stopped, a lossless recording says how often threads waited.
    let waited = base.join("waited.data");
    ctl_ok(&["record", "--mode", "lossless", waited.to_str().unwrap()]);
    p.work(N);
    let stopped = fields(&ctl_ok(&["stop"]));
    assert_eq!(stopped["mode"], "lossless");
    assert_eq!(stopped["lost"], "0");
    assert!(
        stopped.contains_key("waits") && stopped.contains_key("memory_peak"),
        "{stopped:?}"
    );
    check_counts(&waited, N);

    // A recording running at exit is finished then; lossless when asked.
    let at_exit = base.join("at-exit.data");
    ctl_ok(&["record", "--mode", "lossless", at_exit.to_str().unwrap()]);
    p.work(N);
    let stderr = p.finish();
    check_counts(&at_exit, N);
    assert_eq!(recorder_mode(&at_exit), "lossless");
    assert_eq!(stderr, "");
    assert!(!socket.exists(), "{} stays after exit", socket.display());
    assert!(!base.join("gmon.out").exists(), "gprof ran");
    std::fs::remove_dir_all(&base).unwrap();
}

/// The mode the recorder noted in the recording at `dir` (one session).
fn recorder_mode(dir: &Path) -> String {
    let notes = fntrace::export::recorder_notes(dir).unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    notes[0]
        .iter()
        .find(|(key, _)| key == "mode")
        .map(|(_, value)| value.clone())
        .unwrap_or_else(|| panic!("no mode in {notes:?}"))
}

#[test]
fn gcc_pg_pie_program_is_controlled_through_its_socket_path() {
    controlled_live("mcount", &["-pg"], false);
}

#[test]
fn gcc_pg_mfentry_program_is_controlled_by_its_pid() {
    controlled_live("fentry", &["-pg", "-mfentry"], true);
}

/// Bad requests, each with the start of its one-line error reply.
fn bad_requests(base: &Path) -> Vec<(Vec<u8>, String)> {
    let commands = "the commands are: status, enable [--pending] TRACER, disable TRACER, \
                    filter [--pending] GLOBS, functions [GLOB], patch GLOBS, record DIR, stop, \
                    snapshot DIR, dump DIR, report";
    let other = base.join("other.data");
    let other = other.to_str().unwrap();
    let cases: Vec<(Vec<u8>, String)> =
        vec![
        (b"bogus\n".to_vec(), format!("unknown command \"bogus\"; {commands}")),
        (b"\n".to_vec(), format!("empty request; {commands}")),
        (b"status now\n".to_vec(), "status takes no argument (got \"now\")".into()),
        (b"patch\n".to_vec(), "patch needs globs: patch GLOBS".into()),
        (b"patch w_*,!x\n".to_vec(), "patch w_*,!x: !x: `!` excludes nothing here".into()),
        (b"stop now\n".to_vec(), "stop takes no argument".into()),
        (b"report all\n".to_vec(), "report takes no argument".into()),
        (b"enable\n".to_vec(), "enable needs TRACER: enable TRACER".into()),
        (b"disable\n".to_vec(), "disable needs TRACER".into()),
        (
            b"enable graph function\n".to_vec(),
            "enable takes one TRACER, not more (got \"function\" after it)".into(),
        ),
        (b"filter\n".to_vec(), "filter needs globs".into()),
        (b"record\n".to_vec(), "record needs a directory: record DIR".into()),
        (b"dump\n".to_vec(), "dump needs a directory".into()),
        (b"snapshot\n".to_vec(), "snapshot needs a directory".into()),
        (
            b"record rel.data\n".to_vec(),
            "record: \"rel.data\" is not an absolute path".into(),
        ),
        (
            b"enable nosuch\n".to_vec(),
            "no tracer named \"nosuch\" is registered (registered: ".into(),
        ),
        (
            b"disable nosuch\n".to_vec(),
            "no tracer named \"nosuch\" is registered".into(),
        ),
        (
            b"\x00\x01\x02garbage\n".to_vec(),
            "the request contains the control character '\\0'".into(),
        ),
        (
            b"st\xff\xfeatus\n".to_vec(),
            "the request is not UTF-8 (byte 3)".into(),
        ),
        (
            vec![b'a'; 5000],
            "the request is longer than 4096 bytes without a newline; closing".into(),
        ),
        // While a recording runs: nothing that would disturb it.
        (
            format!("record {other}\n").into_bytes(),
            "a recording is running already".into(),
        ),
        (
            format!("dump {other}\n").into_bytes(),
            "a recording is running and takes the graph tracer's events: `stop` it before `dump`"
                .into(),
        ),
        (
            b"report\n".to_vec(),
            "a recording is running and takes the graph tracer's events".into(),
        ),
        (
            b"disable graph\n".to_vec(),
            "the graph tracer is recording: `stop` ends the recording".into(),
        ),
        (
            format!("snapshot {other}\n").into_bytes(),
            "no flight recorder is running".into(),
        ),
        (
            b"filter handle_*,,x\n".to_vec(),
            "bad filter: item 2 of \"handle_*,,x\" is an empty glob".into(),
        ),
    ];
    cases
}

#[test]
fn hostile_clients_get_error_replies_and_change_nothing() {
    let (base, program) = build("hostile", &["-pg"]);
    let socket = base.join("ctl.sock");
    let target = socket.to_str().unwrap();
    let mut p = Program::start(&program, &[("FNTRACE_CONTROL", socket.as_os_str())], &base);
    ctl_ok(&base, target, &["filter", FILTER]);
    let recorded = base.join("rec.data");
    ctl_ok(&base, target, &["record", recorded.to_str().unwrap()]);
    // The threads make calls while the clients come.
    let busy_iterations = 20 * N;
    p.begin_work(busy_iterations);

    for (request, message) in bad_requests(&base) {
        let reply = ask(&socket, &request);
        assert!(
            reply.starts_with(&format!("error: {message}")) && reply.ends_with("\n\n"),
            "{:?}: {reply:?}",
            String::from_utf8_lossy(&request)
        );
        assert_eq!(reply.matches('\n').count(), 2, "one line: {reply:?}");
    }
    // The longest request: 4096 bytes with its newline.
    let mut longest = b"status".to_vec();
    longest.resize(4095, b' ');
    longest.push(b'\n');
    assert!(ask(&socket, &longest).starts_with(&format!("ok pid {}\n", p.pid())));

    // The command gives error replies exit status 1, usage errors 2.
    let done = ctl(&base, target, &["enable", "nosuch"]);
    assert_eq!(done.code, 1, "{}", done.stderr);
    assert!(
        done.stderr
            .starts_with("fntrace: no tracer named \"nosuch\" is registered"),
        "{}",
        done.stderr
    );
    assert_eq!(done.stdout, "");
    for args in [&["bogus"][..], &["enable"], &["status", "x"], &[]] {
        let done = ctl(&base, target, args);
        assert_eq!(done.code, 2, "ctl {args:?}: {}", done.stderr);
    }

    // A silent client and a slow one hold no one up; each is closed with
    // an error after the request timeout.
    let mut silent = UnixStream::connect(&socket).unwrap();
    let mut slow = UnixStream::connect(&socket).unwrap();
    slow.write_all(b"sta").unwrap();
    assert!(ask(&socket, b"status\n").starts_with("ok pid"));
    for stream in [&mut silent, &mut slow] {
        assert_eq!(
            read_reply(stream),
            "error: no complete request line within 2s; closing\n\n"
        );
    }

    // Clients gone mid-request, and gone before their reply (their
    // socket refuses it: EPIPE, which must not be a SIGPIPE).
    for _ in 0..10 {
        let mut gone = UnixStream::connect(&socket).unwrap();
        gone.write_all(b"sta").unwrap();
    }
    let deaf: Vec<UnixStream> = (0..20)
        .map(|_| {
            let mut deaf = UnixStream::connect(&socket).unwrap();
            deaf.shutdown(std::net::Shutdown::Read).unwrap();
            deaf.write_all(b"status\n").unwrap();
            deaf
        })
        .collect();
    let reply = ask_when_free(&socket, b"status\n");
    assert!(reply.starts_with("ok pid"), "{reply}");
    drop(deaf);

    // 50 clients at once: each gets a whole reply, served or busy.
    let asking: Vec<_> = (0..50)
        .map(|_| {
            let socket = socket.clone();
            std::thread::spawn(move || ask(&socket, b"status\n"))
        })
        .collect();
    let replies: Vec<String> = asking.into_iter().map(|t| t.join().unwrap()).collect();
    let served = replies.iter().filter(|r| r.starts_with("ok pid")).count();
    let busy = replies
        .iter()
        .filter(|r| r.starts_with("error: busy: ") && r.ends_with("; try again\n\n"))
        .count();
    assert_eq!(served + busy, 50, "{replies:?}");
    assert!(served >= 1, "{replies:?}");
    // 50 silent clients at once: at most 16 are served at a time, the
    // others are told so at once; the served ones time out.
    let mut silent: Vec<UnixStream> = (0..50)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    let replies: Vec<String> = silent.iter_mut().map(read_reply).collect();
    let timed_out = replies
        .iter()
        .filter(|r| *r == "error: no complete request line within 2s; closing\n\n")
        .count();
    let busy = replies
        .iter()
        .filter(|r| r.starts_with("error: busy: 16 clients are being served (at most 16)"))
        .count();
    assert_eq!(timed_out + busy, 50, "{replies:?}");
    assert!(timed_out >= 16 && busy >= 1, "{timed_out} {busy}");

    // Nothing changed: the filter, the recording; the program runs on.
    p.end_work();
    let status = fields(&ctl_ok(&base, target, &["status"]));
    assert_eq!(
        status["filter"],
        format!("{FILTER} (for tracers enabled from now on, and recordings)")
    );
    assert!(status["recording"].starts_with(recorded.to_str().unwrap()));
    p.work(N);
    let stopped = fields(&ctl_ok(&base, target, &["stop"]));
    let iterations = busy_iterations + N;
    assert_eq!(stopped["events"], expected_events(iterations).to_string());
    assert_eq!(stopped["lost"], "0");
    check_counts(&recorded, iterations);
    assert!(!base.join("other.data").exists());
    assert_eq!(p.finish(), "");
    assert!(!socket.exists());
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn another_user_is_refused() {
    // Acting as another user takes root (CI runs as root).
    assert_eq!(uid(), 0, "this test needs root, to run a client as nobody");
    const NOBODY: u32 = 65534;
    let (base, program) = build("uid", &["-pg"]);
    let socket = base.join("ctl.sock");
    let target = socket.to_str().unwrap();
    let p = Program::start(&program, &[("FNTRACE_CONTROL", socket.as_os_str())], &base);
    let as_nobody = || {
        let output = Command::new(cli())
            .args(["ctl", target, "status"])
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap();
        (
            output.status.code().unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };
    // Mode 0600: the kernel refuses the connection.
    let (code, stderr) = as_nobody();
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("{target}: permission denied")),
        "{stderr}"
    );
    // Were the socket open to all, the server refuses the peer's uid.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, stderr) = as_nobody();
    assert_eq!(
        (code, stderr.as_str()),
        (
            1,
            "fntrace: permission denied: uid 65534 may not control this process \
             (only uid 0 or root)\n"
        )
    );
    assert!(ctl_ok(&base, target, &["status"]).starts_with("pid"));
    assert_eq!(p.finish(), "");
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn invalid_control_values_print_one_line_and_the_program_runs_on() {
    let (base, program) = build("bad-values", &["-pg"]);
    let file = base.join("a-file");
    std::fs::write(&file, "keep").unwrap();
    let served = base.join("served.sock");
    let first = Program::start(&program, &[("FNTRACE_CONTROL", served.as_os_str())], &base);
    let long = format!("/tmp/{}.sock", "x".repeat(100));
    let cases: Vec<(&OsStr, String)> =
        vec![
        (
            OsStr::new("/nonexistent-fntrace-dir/x.sock"),
            "control socket /nonexistent-fntrace-dir/x.sock: binding: No such file or directory"
                .into(),
        ),
        (
            OsStr::new(&long),
            "the path is 110 bytes; a Unix socket's is at most 107".into(),
        ),
        (
            file.as_os_str(),
            "the path exists and is not a socket; it is left alone".into(),
        ),
        (
            base.as_os_str(),
            "the path exists and is not a socket; it is left alone".into(),
        ),
        (
            served.as_os_str(),
            "a running process serves this socket already".into(),
        ),
        (OsStr::from_bytes(b"/tmp/\xff.sock"), "not valid UTF-8".into()),
    ];
    for (i, (value, message)) in cases.iter().enumerate() {
        // The tracing variables still apply.
        let out = base.join(format!("out{i}"));
        let vars = [
            ("FNTRACE_CONTROL", *value),
            ("FNTRACE", OsStr::new("graph")),
            ("FNTRACE_FILTER", OsStr::new(FILTER)),
            ("FNTRACE_OUTPUT", out.as_os_str()),
        ];
        let mut p = Program::start(&program, &vars, &base);
        p.work(N);
        let stderr = p.finish();
        let shown = value.to_string_lossy();
        assert_eq!(stderr.lines().count(), 1, "{shown}: {stderr}");
        assert!(
            stderr.starts_with(&format!("fntrace: FNTRACE_CONTROL={shown}: "))
                && stderr.contains(message.as_str())
                && stderr.ends_with("; the program runs on without live control\n"),
            "{shown}: {stderr}"
        );
        check_counts(&out, N);
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    // The first program's socket still serves it.
    assert!(ask(&served, b"status\n").starts_with(&format!("ok pid {}\n", first.pid())));
    assert_eq!(first.finish(), "");
    // Off: no socket, no line.
    for value in ["", "0"] {
        let p = Program::start(&program, &[("FNTRACE_CONTROL", OsStr::new(value))], &base);
        let default = PathBuf::from(format!("/tmp/fntrace-{}/{}.sock", uid(), p.pid()));
        assert!(!default.exists());
        assert_eq!(p.finish(), "", "FNTRACE_CONTROL={value:?}");
    }
    std::fs::remove_dir_all(&base).unwrap();
}
