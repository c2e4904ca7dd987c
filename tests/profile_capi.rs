//! The live profile from outside Rust: a `gcc -pg` C program linked with
//! `libfntrace.a` writes its profile with `fntrace_profile_write` and
//! clears it with `fntrace_profile_reset` (`tests/c/profile_prog.c`); a
//! `gcc -pg` program that never calls fntrace, with `libfntrace.so`
//! preloaded, is profiled through its control socket (`enable profile`,
//! `profile`, `profile reset`). Counts are exact: the programs make known
//! numbers of calls.

mod common;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};

use common::native::{build_c_program, build_libraries, profile_dir, repo};
use fntrace::analysis::ProfileSnapshot;

/// Completed calls per function name.
fn counts(snapshot: &ProfileSnapshot) -> Vec<(String, u64)> {
    let mut counts: Vec<(String, u64)> = snapshot
        .functions
        .iter()
        .map(|f| (f.name.clone(), f.durations.count()))
        .collect();
    counts.sort();
    counts
}

#[test]
fn c_program_writes_and_resets_its_profile() {
    let base = common::temp_dir("profile-capi");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("profile_prog");
    build_c_program(&repo().join("tests/c/profile_prog.c"), &["-pg"], &program);
    let output = Command::new(&program).current_dir(&base).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let parts: Vec<&str> = stdout.split("--\n").collect();
    assert_eq!(parts.len(), 3, "{stdout}");
    let profile = ProfileSnapshot::from_text(parts[0]).unwrap();
    let (threads, iterations) = (4u64, 1000u64);
    let puts = threads * iterations / 4;
    let fibs = threads * iterations / 100;
    assert_eq!(
        counts(&profile),
        [
            ("fib".to_string(), fibs * 177),
            ("handle_get".to_string(), threads * iterations),
            ("handle_put".to_string(), puts),
            ("parse_key".to_string(), threads * iterations + 2 * puts),
        ]
    );
    assert_eq!(profile.threads, threads);
    assert_eq!(profile.not_kept, Default::default());
    let fib = profile.functions.iter().find(|f| f.name == "fib").unwrap();
    // Recursion counted once: the total is the outermost calls'.
    let outermost: u64 = profile
        .paths
        .iter()
        .filter(|p| p.parent.is_none() && profile.functions[p.function].name == "fib")
        .map(|p| p.total_ns)
        .sum();
    assert_eq!(fib.total_ns, outermost);
    assert!(fib.total_ns < fib.durations.sum());
    // fib(10) nests 10 deep: a path per depth, outermost `fibs` calls.
    let fib_paths: Vec<_> = profile
        .paths
        .iter()
        .filter(|p| profile.functions[p.function].name == "fib")
        .collect();
    assert_eq!(fib_paths.len(), 10);
    assert_eq!(fib_paths.iter().map(|p| p.calls).sum::<u64>(), fibs * 177);
    // After the reset: nothing.
    let after = ProfileSnapshot::from_text(parts[1]).unwrap();
    assert!(
        after.functions.is_empty() && after.paths.is_empty(),
        "{after:?}"
    );
    assert_eq!(parts[2].trim(), (-libc::EBADF).to_string());
    std::fs::remove_dir_all(&base).unwrap();
}

/// Sends `request` and reads the reply to the end of the connection.
fn ask(socket: &Path, request: &str) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    stream.write_all(b"\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

/// The snapshot in a `profile` reply.
fn profile_of(socket: &Path) -> ProfileSnapshot {
    let reply = ask(socket, "profile");
    let (first, text) = reply.split_once('\n').unwrap();
    assert!(first.starts_with("ok profile: "), "{reply}");
    ProfileSnapshot::from_text(text.trim_end_matches('\n')).unwrap()
}

#[test]
fn preloaded_program_is_profiled_through_its_socket() {
    build_libraries();
    let base = common::temp_dir("profile-socket");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("ctl_prog");
    // No fntrace library linked: libfntrace.so is preloaded.
    let gcc = Command::new("gcc")
        .args(["-pg", "-O0", "-fPIE", "-pie"])
        .arg(repo().join("tests/c/ctl_prog.c"))
        .args(["-lpthread", "-o"])
        .arg(&program)
        .output()
        .unwrap();
    assert!(
        gcc.status.success(),
        "{}",
        String::from_utf8_lossy(&gcc.stderr)
    );
    let socket = base.join("ctl.sock");
    let mut command = Command::new(&program);
    for (name, _) in std::env::vars_os() {
        if name.as_bytes().starts_with(b"FNTRACE") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .current_dir(&base)
        .env("LD_PRELOAD", profile_dir().join("libfntrace.so"))
        .env("FNTRACE_CONTROL", OsStr::new(&socket))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let mut work = |n: u64| {
        writeln!(stdin, "work {n}").unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "done\n");
    };
    let ok = |reply: String| assert!(reply.starts_with("ok"), "{reply}");
    ok(ask(&socket, "filter handle_*,parse_*,!handle_log*"));
    ok(ask(&socket, "enable profile"));
    work(400);
    ok(ask(&socket, "disable profile"));
    let threads = 4u64;
    let expected = |n: u64| {
        vec![
            ("handle_get".to_string(), threads * n),
            ("handle_put".to_string(), threads * n / 4),
            ("parse_key".to_string(), threads * n + 2 * threads * n / 4),
        ]
    };
    let profile = profile_of(&socket);
    assert_eq!(counts(&profile), expected(400));
    assert_eq!(profile.threads, threads);
    // Calls made with the tracer off are not counted.
    work(100);
    assert_eq!(counts(&profile_of(&socket)), expected(400));
    let reply = ask(&socket, "profile reset");
    assert!(reply.starts_with("ok profile reset"), "{reply}");
    assert!(profile_of(&socket).functions.is_empty());
    ok(ask(&socket, "enable profile"));
    work(200);
    ok(ask(&socket, "disable profile"));
    assert_eq!(counts(&profile_of(&socket)), expected(200));
    assert!(ask(&socket, "profile twice").starts_with("error: profile takes"));
    drop(stdin);
    assert!(child.wait().unwrap().success());
    std::fs::remove_dir_all(&base).unwrap();
}
