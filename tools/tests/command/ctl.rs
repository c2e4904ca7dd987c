//! `fntrace ctl` as a client, against a stand-in server on a Unix socket:
//! the request line it sends (relative directories made absolute), what it
//! prints of each reply, and its exit statuses (0 ok, 1 error reply, 2 no
//! reply or bad arguments). The real server is tested by the runtime's
//! `tests/control_socket.rs`.

use crate::common;

use common::TempDir;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Command;
use std::thread::JoinHandle;

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

/// Serves one connection at `socket`: reads the request line, answers
/// `reply` (`None`: closes without a word). The request line.
fn serve_once(socket: &Path, reply: Option<&'static [u8]>) -> JoinHandle<String> {
    let listener = UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if let Some(reply) = reply {
            reader.get_mut().write_all(reply).unwrap();
        }
        line
    })
}

struct Done {
    code: i32,
    stdout: String,
    stderr: String,
}

fn ctl(cwd: &Path, args: &[&str]) -> Done {
    let output = Command::new(CLI)
        .current_dir(cwd)
        .arg("ctl")
        .args(args)
        .output()
        .unwrap();
    Done {
        code: output.status.code().unwrap(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

#[test]
fn sends_one_line_and_prints_the_reply() {
    let dir = TempDir::new("ok");
    let socket = dir.0.join("s.sock");
    let target = socket.to_str().unwrap();
    let cases: &[(&[&str], String, &[u8], &str)] = &[
        (
            &["record", "rel.data"],
            format!("record {}\n", dir.0.join("rel.data").display()),
            b"ok recording to X\n\n",
            "recording to X\n",
        ),
        (&["dump", "/abs"], "dump /abs\n".into(), b"ok\n\n", ""),
        (
            &["snapshot", "s"],
            format!("snapshot {}\n", dir.0.join("s").display()),
            b"ok\n\n",
            "",
        ),
        (
            &["filter", "handle_*,!log_*"],
            "filter handle_*,!log_*\n".into(),
            b"ok set\n\n",
            "set\n",
        ),
        (
            &["status"],
            "status\n".into(),
            b"ok pid 7\npid: 7\n \nrecording: none\n\n",
            "pid 7\npid: 7\n\nrecording: none\n",
        ),
        (&["enable", "graph"], "enable graph\n".into(), b"ok\n\n", ""),
        (
            &["disable", "graph"],
            "disable graph\n".into(),
            b"ok\n\n",
            "",
        ),
        (&["stop"], "stop\n".into(), b"ok\n\n", ""),
        (
            &["report"],
            "report\n".into(),
            b"ok t\ncalls\n\n",
            "t\ncalls\n",
        ),
    ];
    for (args, request, reply, printed) in cases {
        let server = serve_once(&socket, Some(reply));
        let mut full = vec![target];
        full.extend_from_slice(args);
        let done = ctl(&dir.0, &full);
        assert_eq!(server.join().unwrap(), *request);
        assert_eq!(
            (done.code, done.stdout.as_str(), done.stderr.as_str()),
            (0, *printed, ""),
            "{args:?}"
        );
        std::fs::remove_file(&socket).unwrap();
    }
}

#[test]
fn an_error_reply_exits_1_and_no_reply_exits_2() {
    let dir = TempDir::new("err");
    let socket = dir.0.join("s.sock");
    let target = socket.to_str().unwrap();
    let server = serve_once(&socket, Some(b"error: no tracer named \"x\"\n\n"));
    let done = ctl(&dir.0, &[target, "enable", "x"]);
    server.join().unwrap();
    assert_eq!(
        (done.code, done.stdout.as_str(), done.stderr.as_str()),
        (1, "", "fntrace: no tracer named \"x\"\n")
    );
    std::fs::remove_file(&socket).unwrap();

    // A server that answers without reading (busy, another user): the
    // reply counts, whether or not the request could still be written.
    for _ in 0..20 {
        let listener = UnixListener::bind(&socket).unwrap();
        let refuser = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream.write_all(b"error: busy: try again\n\n").unwrap();
        });
        let done = ctl(&dir.0, &[target, "status"]);
        refuser.join().unwrap();
        assert_eq!(
            (done.code, done.stderr.as_str()),
            (1, "fntrace: busy: try again\n")
        );
        std::fs::remove_file(&socket).unwrap();
    }

    let cases: &[(Option<&'static [u8]>, &str)] = &[
        (None, "closed the connection before the reply ended"),
        (
            Some(b"ok partial\n"),
            "closed the connection before the reply ended (it began \"ok partial\")",
        ),
        (
            Some(b"HTTP/1.1 400\n\n"),
            "is not an fntrace control socket",
        ),
        (
            Some(b"\n"),
            "is not an fntrace control socket (an empty reply)",
        ),
    ];
    for (reply, message) in cases {
        let server = serve_once(&socket, *reply);
        let done = ctl(&dir.0, &[target, "status"]);
        server.join().unwrap();
        assert_eq!(done.code, 2, "{reply:?}: {}", done.stderr);
        assert!(
            done.stderr.starts_with("fntrace: ctl: ") && done.stderr.contains(message),
            "{reply:?}: {}",
            done.stderr
        );
        std::fs::remove_file(&socket).unwrap();
    }

    // No reply within --timeout.
    let listener = UnixListener::bind(&socket).unwrap();
    let done = ctl(&dir.0, &["--timeout", "1", target, "status"]);
    drop(listener);
    assert_eq!(done.code, 2);
    assert!(
        done.stderr
            .contains(&format!("no reply from {target} within 1s")),
        "{}",
        done.stderr
    );
}

#[test]
fn missing_sockets_processes_and_bad_arguments_exit_2() {
    let dir = TempDir::new("missing");
    let absent = dir.0.join("absent.sock");
    let done = ctl(&dir.0, &[absent.to_str().unwrap(), "status"]);
    assert_eq!(done.code, 2);
    assert_eq!(
        done.stderr,
        format!(
            "fntrace: ctl: no control socket at {0}: is the program running with \
             FNTRACE_CONTROL={0}?\n",
            absent.display()
        )
    );
    // A socket file no one serves.
    let stale = dir.0.join("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    let done = ctl(&dir.0, &[stale.to_str().unwrap(), "status"]);
    assert_eq!(done.code, 2);
    assert!(done.stderr.contains("nothing serves"), "{}", done.stderr);

    // A pid: its default path, from its uid.
    let pid = std::process::id();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .unwrap();
    let done = ctl(&dir.0, &[&pid.to_string(), "status"]);
    assert_eq!(done.code, 2);
    assert_eq!(
        done.stderr,
        format!(
            "fntrace: ctl: no fntrace control socket for pid {pid} at \
             /tmp/fntrace-{uid}/{pid}.sock: is the program running with FNTRACE_CONTROL=1? \
             (`fntrace attach {pid}` makes a running program serve it)\n"
        )
    );
    let done = ctl(&dir.0, &["4294967295", "status"]);
    assert_eq!(
        (done.code, done.stderr.as_str()),
        (2, "fntrace: ctl: no process with pid 4294967295\n")
    );

    // Arguments.
    let done = ctl(&dir.0, &["x.sock", "dump", "a\nb"]);
    assert_eq!(done.code, 2);
    assert!(
        done.stderr.contains("holds a line break"),
        "{}",
        done.stderr
    );
    for args in [
        &[][..],
        &["x.sock"],
        &["x.sock", "bogus"],
        &["x.sock", "enable"],
    ] {
        let done = ctl(&dir.0, args);
        assert_eq!(done.code, 2, "{args:?}");
        assert!(
            done.stderr.contains("Usage: fntrace ctl"),
            "{args:?}: {}",
            done.stderr
        );
    }
    let help = ctl(&dir.0, &["--help"]);
    assert_eq!(help.code, 0);
    assert!(help
        .stdout
        .contains("Exit status: 0 when the program answers ok"));
}
