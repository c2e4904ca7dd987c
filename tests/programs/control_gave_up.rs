//! A control request whose client gave up is not run later:
//! `tests/c/ctl_prog.c` (`gcc -pg`, linked with `libfntrace.a`) serves its
//! control socket; it is stopped with `SIGSTOP`; `fntrace ctl --timeout 1`
//! asks it to enable the graph tracer and to set a filter, gets no reply
//! and exits 2; the program is continued with `SIGCONT`: neither request
//! is applied (the server drops the requests of clients that closed their
//! connection). A client that only shut down its writing side while the
//! program was stopped is still waiting, and is answered.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::native::{build_c_program, cli, repo};

/// `fntrace ctl ARGS`: exit status, stdout, stderr.
fn ctl(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(cli()).arg("ctl").args(args).output().unwrap();
    (
        output.status.code().expect("fntrace ctl was killed"),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// The `key: value` lines of `fntrace ctl SOCKET status`.
fn status(socket: &str) -> HashMap<String, String> {
    let (code, out, err) = ctl(&[socket, "status"]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn signal(child: &Child, signo: i32) {
    // SAFETY: kill takes a pid and a signal number; the child is ours and
    // not reaped yet.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signo) }, 0);
}

/// Waits until the kernel shows `pid` stopped (`T` in /proc/PID/stat).
fn wait_stopped(pid: u32) {
    let started = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let state = stat.rsplit_once(") ").unwrap().1.chars().next().unwrap();
        if state == 'T' {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "not stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_request_whose_client_gave_up_is_not_run_after_sigcont() {
    let base = common::temp_dir("ctl-gave-up");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("ctl_prog");
    build_c_program(&repo().join("tests/c/ctl_prog.c"), &["-pg"], &program);
    let socket_path = base.join("ctl.sock");
    let socket = socket_path.to_str().unwrap();

    let mut command = Command::new(&program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("FNTRACE") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .env("FNTRACE_CONTROL", &socket_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");

    let before = status(socket);
    assert!(!before["tracers"].contains("enabled"), "{before:?}");
    assert_eq!(before["filter"], "none (every function)");

    signal(&child, libc::SIGSTOP);
    wait_stopped(child.id());
    // Clients that give up: no reply within a second, exit 2.
    for args in [&["enable", "graph"][..], &["filter", "handle_*"]] {
        let started = Instant::now();
        let mut full = vec!["--timeout", "1", socket];
        full.extend_from_slice(args);
        let (code, _, err) = ctl(&full);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("no reply"), "{args:?}: {err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    // A client that says it has no more to send, and waits.
    let mut waiting = UnixStream::connect(socket).unwrap();
    waiting.write_all(b"status\n").unwrap();
    waiting.shutdown(std::net::Shutdown::Write).unwrap();

    signal(&child, libc::SIGCONT);
    let mut reply = String::new();
    waiting
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    waiting.read_to_string(&mut reply).unwrap();
    assert!(
        reply.starts_with(&format!("ok pid {}\n", child.id())),
        "{reply:?}"
    );
    // The requests of the clients that gave up came before that one: had
    // they run, they would have run by now.
    let after = status(socket);
    assert!(
        !after["tracers"].contains("enabled"),
        "a request whose client gave up was run: {after:?}"
    );
    assert_eq!(
        after["filter"], "none (every function)",
        "a request whose client gave up was run"
    );
    // The same requests from a client that waits are run.
    assert_eq!(ctl(&[socket, "enable", "graph"]).0, 0);
    assert!(status(socket)["tracers"].contains("graph (enabled)"));
    assert_eq!(ctl(&[socket, "disable", "graph"]).0, 0);

    writeln!(stdin, "exit").unwrap();
    drop(stdin);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let exited = child.wait().unwrap();
    assert!(exited.success(), "{exited}: {stderr}");
    let _ = std::fs::remove_dir_all(&base);
}
