//! `fntrace attach PID` and `fntrace detach PID` on real programs:
//! `tests/c/attach_prog.c`, built with `gcc -pg` (PIE, -O2), not linked
//! with fntrace and started with no fntrace variable, whose threads are
//! blocked in `read`, `accept`, `epoll_wait`, `nanosleep` and
//! `pthread_cond_wait` or loop over `malloc`/`free` (and `dlopen`/`dlclose`).
//! Attached, it is driven with `fntrace ctl` (exact call counts, which
//! the program reports itself); detached, its text is byte for byte what
//! it was before, no call of it failed with `EINTR`, and it exits
//! normally. Also: attach/detach cycles, and the refusals (a process
//! under `strace -p`, a static executable). Every wait has a timeout; no
//! process outlives its test.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use common::attach::{fntrace, fntrace_ok, fntrace_threads};
use common::native::{build_c, cli_with_library, Scratch};

/// `tests/c/attach_prog.c` built as the tests need it, into `dir`.
fn build(dir: &Path) -> PathBuf {
    build_c(
        dir,
        "attach_prog",
        "pg",
        &["-pg", "-O2", "-fPIE", "-pie"],
        &["-lpthread", "-ldl"],
    )
}

/// The same built with `-pg -mfentry`: its sites call glibc's `__fentry__`.
fn build_fentry(dir: &Path) -> PathBuf {
    build_c(
        dir,
        "attach_prog",
        "fentry",
        &["-pg", "-mfentry", "-O2", "-fPIE", "-pie"],
        &["-lpthread", "-ldl"],
    )
}

/// The running program, killed if still running when dropped.
struct Program {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Receiver<String>,
}

impl Program {
    fn start(program: &Path, args: &[&str], cwd: &Path) -> Program {
        let mut command = Command::new(program);
        command.args(args);
        Program::start_command(command, cwd)
    }

    /// [`Program::start`] with the command given (a wrapper that execs
    /// the program).
    fn start_command(mut command: Command, cwd: &Path) -> Program {
        command
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let set: Vec<std::ffi::OsString> = command
            .get_envs()
            .map(|(name, _)| name.to_owned())
            .collect();
        for (name, _) in std::env::vars_os() {
            let ours = name.to_string_lossy().starts_with("FNTRACE") || name == "LD_PRELOAD";
            if ours && !set.contains(&name) {
                command.env_remove(name);
            }
        }
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let child_stderr = child.stderr.take().unwrap();
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let (send_err, stderr) = channel();
        std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(child_stderr).lines() {
                let Ok(line) = line else { break };
                all += &line;
                all.push('\n');
            }
            let _ = send_err.send(all);
        });
        let mut program = Program {
            child,
            stdin,
            lines,
            stderr,
        };
        assert_eq!(program.line(), "ready");
        program
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line of its output (within 60 s).
    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the program printed nothing within 60 s")
    }

    /// `work n`: the calls of handle_request, parse_key and store_put it
    /// reports.
    fn work(&mut self, n: u64) -> (u64, u64, u64) {
        writeln!(self.stdin, "work {n}").unwrap();
        let line = self.line();
        let counts: Vec<u64> = line
            .strip_prefix("done ")
            .unwrap_or_else(|| panic!("not a done line: {line:?}"))
            .split(' ')
            .map(|n| n.parse().unwrap())
            .collect();
        (counts[0], counts[1], counts[2])
    }

    /// Ends it: its EINTR report line and its standard error; it must exit
    /// 0 within 60 s.
    fn finish(mut self) -> (String, String) {
        writeln!(self.stdin, "exit").unwrap();
        let report = self.line();
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the program did not exit");
            std::thread::sleep(Duration::from_millis(10));
        };
        let stderr = self
            .stderr
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_default();
        assert!(status.success(), "exit status {status:?}; stderr: {stderr}");
        (report, stderr)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bytes of the executable's text (its r-x mapping) in process `pid`.
fn text_of(pid: u32, program: &Path) -> Vec<u8> {
    let program = program.canonicalize().unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let (start, end) = maps
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() >= 6 && fields[1] == "r-xp" && Path::new(fields[5]) == program).then(
                || {
                    let (s, e) = fields[0].split_once('-').unwrap();
                    (
                        u64::from_str_radix(s, 16).unwrap(),
                        u64::from_str_radix(e, 16).unwrap(),
                    )
                },
            )
        })
        .unwrap_or_else(|| panic!("no r-x mapping of {} in {maps}", program.display()));
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut text = vec![0u8; (end - start) as usize];
    std::os::unix::fs::FileExt::read_exact_at(&mem, &mut text, start).unwrap();
    text
}

/// The pause the attach line reports, in ms.
fn pause_ms(attach_line: &str) -> f64 {
    attach_line
        .split(" paused ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no pause in {attach_line:?}"))
}

const NO_EINTR: &str = "eintr read=0 accept=0 epoll=0 nanosleep=0 cond=0 malloc=0 dl=0";

#[test]
fn attach_trace_and_detach_a_program_started_without_fntrace() {
    let scratch = Scratch::new("attach");
    let dir = scratch.path();
    let program = build(dir);
    let mut running = Program::start(&program, &[], dir);
    let pid = running.pid().to_string();
    let before = text_of(running.pid(), &program);

    let attached = fntrace_ok(&["attach", &pid]);
    assert!(attached.contains("libfntrace.so loaded"), "{attached}");
    eprintln!("{}", attached.trim());
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains("libfntrace.so"));
    assert_ne!(
        text_of(running.pid(), &program),
        before,
        "attached: the call sites are NOPs"
    );
    let status = fntrace_ok(&["ctl", &pid, "status"]);
    assert!(status.contains("patched"), "{status}");

    // A recording, with exact counts.
    let trace = dir.join("trace");
    fntrace_ok(&["ctl", &pid, "filter", "handle_*,parse_*,store_*"]);
    fntrace_ok(&["ctl", &pid, "record", trace.to_str().unwrap()]);
    assert_eq!(running.work(1000), (1000, 1000, 250));
    let stopped = fntrace_ok(&["ctl", &pid, "stop"]);
    assert!(stopped.contains("lost: 0"), "{stopped}");
    let calls = common::completed_calls(&trace);
    assert_eq!(
        calls,
        common::call_table(&[
            ("handle_request", 1000),
            ("parse_key", 1000),
            ("store_put", 250)
        ]),
        "{stopped}"
    );

    // The graph tracer in memory, its report.
    fntrace_ok(&["ctl", &pid, "enable", "graph"]);
    assert_eq!(running.work(40), (40, 40, 10));
    let report = fntrace_ok(&["ctl", &pid, "report"]);
    let row = |name: &str| {
        report
            .lines()
            .find(|line| line.trim_end().ends_with(name))
            .unwrap_or_else(|| panic!("no {name} in {report}"))
            .to_string()
    };
    assert!(row("handle_request").contains(" 40 "), "{report}");
    assert!(row("store_put").contains(" 10 "), "{report}");

    // A second attach reuses the server.
    let again = fntrace_ok(&["attach", &pid]);
    assert!(
        again.contains("serves its control socket already"),
        "{again}"
    );

    let detached = fntrace_ok(&["detach", &pid]);
    assert!(detached.contains("detached"), "{detached}");
    assert!(detached.contains("graph disabled"), "{detached}");
    assert_eq!(
        text_of(running.pid(), &program),
        before,
        "detached: the text is what it was before attach"
    );
    let gone = fntrace(&["ctl", &pid, "status"], Duration::from_secs(20));
    assert_eq!(gone.status.code(), Some(2), "no socket after detach");
    // fntrace's threads (control, attach, writer) have ended.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ours = fntrace_threads(running.pid());
        if ours.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still running: {ours:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(running.work(10), (10, 10, 3));

    // Attached again: the library is reused, not loaded twice.
    let again = fntrace_ok(&["attach", &pid]);
    assert!(again.contains("was loaded already"), "{again}");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let loads = maps
        .lines()
        .filter(|l| l.ends_with("libfntrace.so") && l.contains(" r-xp "))
        .count();
    assert_eq!(loads, 1, "{maps}");
    fntrace_ok(&["ctl", &pid, "enable", "graph"]);
    assert_eq!(running.work(20), (20, 20, 5));
    fntrace_ok(&["detach", &pid]);
    assert_eq!(text_of(running.pid(), &program), before);

    let (report, stderr) = running.finish();
    assert!(report.starts_with(NO_EINTR), "{report}");
    assert!(
        !stderr.contains("fntrace"),
        "the library said something: {stderr}"
    );
}

/// A process that preloaded libfntrace.so with no FNTRACE_ variable (its
/// sites call fntrace's `mcount`, which returns at once): attach reuses
/// the library, and detach writes those calls back.
#[test]
fn attach_reuses_a_preloaded_library_and_detach_gives_its_calls_back() {
    let scratch = Scratch::new("attach-preloaded");
    let dir = scratch.path();
    let program = build(dir);
    let library = common::native::profile_dir().join("libfntrace.so");
    cli_with_library();
    let mut running = {
        let mut command = Command::new(&program);
        command.env("LD_PRELOAD", &library);
        Program::start_command(command, dir)
    };
    let pid = running.pid().to_string();
    let before = text_of(running.pid(), &program);
    let attached = fntrace_ok(&["attach", &pid]);
    assert!(attached.contains("was loaded already"), "{attached}");
    assert_ne!(
        text_of(running.pid(), &program),
        before,
        "NOPs while attached"
    );
    let trace = dir.join("trace");
    fntrace_ok(&["ctl", &pid, "filter", "handle_*,parse_*,store_*"]);
    fntrace_ok(&["ctl", &pid, "record", trace.to_str().unwrap()]);
    assert_eq!(running.work(100), (100, 100, 25));
    fntrace_ok(&["ctl", &pid, "stop"]);
    assert_eq!(
        common::completed_calls(&trace),
        common::call_table(&[
            ("handle_request", 100),
            ("parse_key", 100),
            ("store_put", 25)
        ])
    );
    fntrace_ok(&["detach", &pid]);
    assert_eq!(text_of(running.pid(), &program), before);
    let (report, _) = running.finish();
    assert!(report.starts_with(NO_EINTR), "{report}");
}

/// A `-pg -mfentry` build: the sites adopted are calls of glibc's
/// `__fentry__`; recorded counts exact, text given back.
#[test]
fn attach_a_fentry_build() {
    let scratch = Scratch::new("attach-fentry");
    let dir = scratch.path();
    let program = build_fentry(dir);
    let mut running = Program::start(&program, &[], dir);
    let pid = running.pid().to_string();
    let before = text_of(running.pid(), &program);
    fntrace_ok(&["attach", &pid]);
    let trace = dir.join("trace");
    fntrace_ok(&["ctl", &pid, "filter", "handle_*,parse_*,store_*"]);
    fntrace_ok(&["ctl", &pid, "record", trace.to_str().unwrap()]);
    assert_eq!(running.work(300), (300, 300, 75));
    fntrace_ok(&["ctl", &pid, "stop"]);
    assert_eq!(
        common::completed_calls(&trace),
        common::call_table(&[
            ("handle_request", 300),
            ("parse_key", 300),
            ("store_put", 75)
        ])
    );
    fntrace_ok(&["detach", &pid]);
    assert_eq!(text_of(running.pid(), &program), before);
    let (report, _) = running.finish();
    assert!(report.starts_with(NO_EINTR), "{report}");
}

#[test]
fn attach_detach_cycles_under_malloc_and_dlopen_load() {
    let cycles: usize = std::env::var("FNTRACE_ATTACH_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(30);
    let scratch = Scratch::new("attach-cycles");
    let dir = scratch.path();
    let program = build(dir);
    let mut running = Program::start(&program, &["dl"], dir);
    let pid = running.pid().to_string();
    let before = text_of(running.pid(), &program);
    let threads = program_threads(running.pid());
    let mut pauses = Vec::new();
    let started = Instant::now();
    for cycle in 0..cycles {
        let attached = fntrace(&["attach", &pid], Duration::from_secs(60));
        let out = String::from_utf8_lossy(&attached.stdout);
        assert!(
            attached.status.success(),
            "cycle {cycle}: {out}{}",
            String::from_utf8_lossy(&attached.stderr)
        );
        // The thread started to load the library ended before attach
        // returned.
        assert_eq!(program_threads(running.pid()), threads, "cycle {cycle}");
        pauses.push(pause_ms(&out));
        fntrace_ok(&["ctl", &pid, "enable", "graph"]);
        assert_eq!(running.work(8), (8, 8, 2), "cycle {cycle}");
        fntrace_ok(&["detach", &pid]);
        assert_eq!(text_of(running.pid(), &program), before, "cycle {cycle}");
    }
    pauses.sort_by(f64::total_cmp);
    eprintln!(
        "{cycles} attach/detach cycles in {:.1} s; thread paused min {:.2} ms, median {:.2} ms, \
         max {:.2} ms",
        started.elapsed().as_secs_f64(),
        pauses[0],
        pauses[pauses.len() / 2],
        pauses[pauses.len() - 1]
    );
    let (report, stderr) = running.finish();
    assert!(report.starts_with(NO_EINTR), "{report}");
    assert!(!stderr.contains("fntrace"), "{stderr}");
}

/// The ids of process `pid`'s threads that are not fntrace's, sorted.
fn program_threads(pid: u32) -> Vec<u32> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|tid| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .is_ok_and(|comm| !comm.starts_with("fntrace"))
        })
        .collect();
    tids.sort_unstable();
    tids
}

/// The thread of process `pid` named `name`.
fn thread_named(pid: u32, name: &str) -> u32 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|tid| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .is_ok_and(|comm| comm.trim() == name)
        })
        .unwrap_or_else(|| panic!("no thread named {name}"))
}

/// Each blocked thread borrowed in turn (`--thread`): the call it was
/// blocked in resumes with no EINTR (nanosleep's restart block included);
/// the thread looping over malloc/free is taken only between two calls;
/// the one waiting in a futex is never taken: refused after the bounded
/// tries, nothing loaded.
#[test]
fn each_kind_of_blocked_thread_is_borrowed_without_eintr() {
    let scratch = Scratch::new("attach-threads");
    let dir = scratch.path();
    let program = build(dir);
    let mut running = Program::start(&program, &[], dir);
    let pid = running.pid().to_string();
    let before = text_of(running.pid(), &program);

    let waiter = thread_named(running.pid(), "waiter").to_string();
    let refused = fntrace(
        &["attach", &pid, "--thread", &waiter],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("safe point"), "{stderr}");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(!maps.contains("libfntrace.so"), "nothing was loaded");

    for name in ["sleeper", "reader", "acceptor", "epoller", "mallocer"] {
        let tid = thread_named(running.pid(), name);
        let attached = fntrace_ok(&["attach", &pid, "--thread", &tid.to_string()]);
        assert!(
            attached.contains(&format!("thread {tid} paused")),
            "{attached}"
        );
        eprintln!("{name}: {}", attached.trim());
        fntrace_ok(&["ctl", &pid, "enable", "graph"]);
        assert_eq!(running.work(12), (12, 12, 3), "{name}");
        fntrace_ok(&["detach", &pid]);
        assert_eq!(text_of(running.pid(), &program), before, "{name}");
    }
    let (report, stderr) = running.finish();
    assert!(report.starts_with(NO_EINTR), "{report}");
    assert!(!stderr.contains("fntrace"), "{stderr}");
}

/// Real-time signals sent to the borrowed thread all along its attach
/// (before, during and after the calls made in it) are all handled, once
/// each: those that arrive while it is borrowed are kept and delivered
/// after, in its own context; its read resumes with no EINTR.
#[test]
fn signals_sent_to_the_borrowed_thread_are_all_delivered() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let scratch = Scratch::new("attach-signals");
    let dir = scratch.path();
    let program = build(dir);
    let mut running = Program::start(&program, &[], dir);
    let pid = running.pid();
    let reader = thread_named(pid, "reader");
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: tgkill takes plain integers; the thread is the
                // test's child's, alive until `finish`.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_tgkill,
                        pid as libc::c_long,
                        reader as libc::c_long,
                        (libc::SIGRTMIN() + 1) as libc::c_long,
                    )
                };
                assert_eq!(rc, 0, "tgkill");
                sent += 1;
                std::thread::sleep(Duration::from_micros(50));
            }
            sent
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let attached = fntrace_ok(&["attach", &pid.to_string(), "--thread", &reader.to_string()]);
    eprintln!("{}", attached.trim());
    fntrace_ok(&["ctl", &pid.to_string(), "enable", "graph"]);
    assert_eq!(running.work(10), (10, 10, 3));
    fntrace_ok(&["detach", &pid.to_string()]);
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().unwrap();
    let (report, _) = running.finish();
    assert!(report.starts_with(NO_EINTR), "{report}");
    assert!(
        report.ends_with(&format!(" rt={sent}")),
        "{sent} signals sent: {report}"
    );
    eprintln!("{sent} signals sent to the borrowed thread, all handled");
}

/// `fntrace record -p PID --duration` and `fntrace top PID` on a process
/// started without fntrace: each attaches first (one line on stderr) and
/// detaches at the end, leaving the text as it was.
#[test]
fn record_p_and_top_attach_first_and_detach_at_the_end() {
    let scratch = Scratch::new("attach-record");
    let dir = scratch.path();
    let program = build(dir);
    let mut running = Program::start(&program, &[], dir);
    let pid = running.pid().to_string();
    let before = text_of(running.pid(), &program);
    let trace = dir.join("recorded");

    let mut record = Command::new(cli_with_library())
        .args(["record", "-p", &pid, "-o", trace.to_str().unwrap()])
        .args([
            "--duration",
            "4s",
            "-F",
            "handle_*",
            "-F",
            "parse_*",
            "-F",
            "store_*",
            "-A",
            "parse_key@arg1",
            "-R",
            "parse_key@retval",
        ])
        .env_remove("FNTRACE_LIB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Work once the recording runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = fntrace(&["ctl", &pid, "status"], Duration::from_secs(20));
        if String::from_utf8_lossy(&status.stdout).contains(trace.to_str().unwrap()) {
            break;
        }
        assert!(Instant::now() < deadline, "the recording did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(running.work(500), (500, 500, 125));
    let deadline = Instant::now() + Duration::from_secs(60);
    while record.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = record.kill();
            panic!("fntrace record -p did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = record.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "fntrace record: process {pid} serves no control socket: attached to it"
        )),
        "{stderr}"
    );
    assert_eq!(
        common::completed_calls(&trace),
        common::call_table(&[
            ("handle_request", 500),
            ("parse_key", 500),
            ("store_put", 125)
        ]),
        "{stderr}"
    );
    // -A/-R: parse_key(k) = 3k for k = 0..500, each once.
    let replay = common::uftrace(&["replay", "--no-pager", "-f", "none"], &trace);
    let mut valued: Vec<&str> = replay
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("parse_key("))
        .collect();
    valued.sort_unstable();
    let mut expected: Vec<String> = (0..500)
        .map(|k| format!("parse_key({k}) = {};", 3 * k))
        .collect();
    expected.sort_unstable();
    assert_eq!(valued, expected, "{stderr}");
    assert_eq!(text_of(running.pid(), &program), before, "detached after");

    let top = fntrace(
        &["top", &pid, "--once", "--interval", "200ms"],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&top.stderr);
    assert!(top.status.success(), "{stderr}");
    assert!(
        String::from_utf8_lossy(&top.stdout).contains(&format!("fntrace top {pid}")),
        "{}",
        String::from_utf8_lossy(&top.stdout)
    );
    assert!(stderr.contains("attached to it"), "{stderr}");
    assert_eq!(
        text_of(running.pid(), &program),
        before,
        "detached after top"
    );
    let gone = fntrace(&["ctl", &pid, "status"], Duration::from_secs(20));
    assert_eq!(gone.status.code(), Some(2));

    let (report, stderr) = running.finish();
    assert!(report.starts_with(NO_EINTR), "{report}");
    assert!(!stderr.contains("fntrace"), "{stderr}");
}

#[test]
fn a_process_under_strace_is_refused_with_the_reason() {
    let scratch = Scratch::new("attach-strace");
    let dir = scratch.path();
    let program = build(dir);
    let running = Program::start(&program, &[], dir);
    let pid = running.pid().to_string();
    let mut strace = Command::new("strace")
        .args(["-p", &pid, "-f", "-o", "/dev/null"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("strace is installed");
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let strace_pid = strace.id();
    let traced = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .map(|v| v.trim().to_string())
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while traced(&pid) == "0" {
        if let Some(status) = strace.try_wait().unwrap() {
            panic!("strace exited: {status:?}");
        }
        assert!(Instant::now() < deadline, "strace did not attach");
        std::thread::sleep(Duration::from_millis(10));
    }
    let strace = Kill(strace);
    let refused = fntrace(&["attach", &pid], Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("traced already, by process {strace_pid} (strace)")),
        "{stderr}"
    );
    drop(strace);
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(!maps.contains("libfntrace.so"), "nothing was loaded");
    let (report, _) = running.finish();
    assert!(report.starts_with("eintr read=0"), "{report}");
}

/// Another user may not attach: the refusal names ptrace's rule and the
/// fix.
#[test]
fn another_user_is_refused_with_the_rule() {
    let scratch = Scratch::new("attach-eperm");
    let dir = scratch.path();
    let program = build(dir);
    let running = Program::start(&program, &[], dir);
    let pid = running.pid().to_string();
    if effective_uid() != 0 {
        eprintln!("not root: the test needs to run fntrace as another user; skipped");
        return;
    }
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(cli_with_library())
        .args(["attach", &pid])
        .env_remove("FNTRACE_LIB")
        .output()
        .expect("setpriv (util-linux) is installed");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("not permitted to trace process {pid}"))
            && stderr.contains("CAP_SYS_PTRACE")
            && stderr.contains("run fntrace as uid 0 or as root"),
        "{stderr}"
    );
    let (report, _) = running.finish();
    assert!(report.starts_with(NO_EINTR), "{report}");
}

/// This process's effective uid, from /proc (no unsafe code here).
fn effective_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1)?.parse().ok())
        .unwrap()
}

/// A process in another mount namespace that cannot see libfntrace.so
/// (a tmpfs over its directory there) is refused with the reason and the
/// fix; with a copy placed in its file system and passed as
/// `--lib /proc/PID/root/PATH`, it is attached.
#[test]
fn another_mount_namespace_is_refused_or_given_a_copy() {
    let scratch = Scratch::new("attach-mntns");
    let dir = scratch.path();
    let program = build(dir);
    let library = common::native::profile_dir().join("libfntrace.so");
    cli_with_library();
    let hidden = common::native::profile_dir();
    let wrapper = dir.join("in-namespace");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nmount -t tmpfs none '{}' && exec '{}'\n",
            hidden.display(),
            program.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let unshare = Command::new("unshare")
        .args(["-m", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !unshare {
        eprintln!("unshare -m is not permitted here: skipped");
        return;
    }
    // `unshare -m` runs the wrapper, which execs the program: the same pid.
    let mut running = {
        let mut command = Command::new("unshare");
        command.arg("-m").arg(&wrapper);
        Program::start_command(command, dir)
    };
    let pid = running.pid().to_string();
    let refused = fntrace(&["attach", &pid], Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("process {pid} cannot see {}", library.display()))
            && stderr.contains("another mount namespace")
            && stderr.contains(&format!("--lib /proc/{pid}/root/PATH")),
        "{stderr}"
    );
    // A copy in its tmpfs, where it sees it.
    let copy = PathBuf::from(format!("/proc/{pid}/root"))
        .join(hidden.join("libfntrace.so").strip_prefix("/").unwrap());
    std::fs::copy(&library, &copy).unwrap();
    let attached = fntrace_ok(&["attach", &pid, "--lib", copy.to_str().unwrap()]);
    assert!(attached.contains("libfntrace.so loaded"), "{attached}");
    fntrace_ok(&["ctl", &pid, "enable", "graph"]);
    assert_eq!(running.work(10), (10, 10, 3));
    fntrace_ok(&["detach", &pid]);
    let (report, _) = running.finish();
    assert!(report.starts_with(NO_EINTR), "{report}");
}

#[test]
fn a_static_executable_is_refused_with_the_reason() {
    let scratch = Scratch::new("attach-static");
    let dir = scratch.path();
    let source = dir.join("sleeper.c");
    std::fs::write(
        &source,
        "#include <unistd.h>\nint main(void) { for (;;) pause(); }\n",
    )
    .unwrap();
    let program = dir.join("sleeper");
    common::native::gcc(&[
        "-static".as_ref(),
        "-O2".as_ref(),
        source.as_os_str(),
        "-o".as_ref(),
        program.as_os_str(),
    ]);
    let mut child = Command::new(&program).spawn().unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let pid = child.id().to_string();
    let _kill = Kill(&mut child);
    let refused = fntrace(&["attach", &pid], Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("statically linked"), "{stderr}");
}

/// `fntrace attach` loads libfntrace.so with dlopen, which finds room for
/// its thread-locals only in glibc's small surplus of static TLS: at 1,984
/// bytes the dlopen failed ("cannot allocate memory in static TLS block")
/// and every attach with it. A bound well under that, checked without a
/// process: a thread-local that grows the segment past it fails here first.
#[test]
fn the_library_keeps_its_static_tls_small_enough_for_dlopen() {
    use object::read::elf::{ElfFile64, ProgramHeader};
    use object::Endianness;
    common::native::build_libraries();
    let library = common::native::profile_dir().join("libfntrace.so");
    let bytes = std::fs::read(&library).unwrap();
    let elf = ElfFile64::<Endianness>::parse(&*bytes).unwrap();
    let endian = elf.endian();
    let tls: u64 = elf
        .elf_program_headers()
        .iter()
        .filter(|header| header.p_type(endian) == object::elf::PT_TLS)
        .map(|header| header.p_memsz(endian))
        .sum();
    assert!(tls > 0, "{}: no TLS segment", library.display());
    assert!(
        tls <= 1_536,
        "{}: {tls} bytes of static TLS (bound 1,536)",
        library.display()
    );
}
