//! `fntrace::serve_control` in process: the server's own rules, with
//! options long enough that no assertion depends on timing (a silent
//! client holds its slot for a minute): a silent client does not hold up
//! the others, clients past the limit are told `busy`, the socket file is
//! made mode 0600 and removed on stop, a stale one is replaced and a live
//! or foreign one refused, the default path is private. The C program
//! driven from outside is `tests/control_socket.rs`.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use fntrace::ControlOptions;

/// Timeouts no slow machine reaches while a test looks.
fn patient(max_clients: usize) -> ControlOptions {
    ControlOptions {
        max_clients,
        request_timeout: Duration::from_secs(60),
        reply_timeout: Duration::from_secs(60),
    }
}

/// Sends `request` and reads the reply to the end of the connection.
fn ask(socket: &Path, request: &[u8]) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.write_all(request).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

/// [`ask`], or `None` if the connection was reset (the server closed it
/// before reading the request).
fn try_ask(socket: &Path, request: &[u8]) -> Option<String> {
    let mut stream = UnixStream::connect(socket).ok()?;
    stream.write_all(request).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

/// Whether the server has sent nothing on `stream` and keeps it open.
fn waiting(stream: &UnixStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8];
    let waiting = matches!((&*stream).read(&mut byte), Err(e) if e.kind() == ErrorKind::WouldBlock);
    stream.set_nonblocking(false).unwrap();
    waiting
}

fn status_reply() -> String {
    format!("ok pid {}\n", std::process::id())
}

#[test]
fn a_silent_client_does_not_hold_up_the_others() {
    let dir = common::temp_dir("api-silent");
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("c.sock");
    let server = fntrace::serve_control_with(&socket, &patient(4)).unwrap();
    let silent = UnixStream::connect(&socket).unwrap();
    let mut slow = UnixStream::connect(&socket).unwrap();
    slow.write_all(b"stat").unwrap();
    for _ in 0..3 {
        assert!(ask(&socket, b"status\n").starts_with(&status_reply()));
    }
    assert!(waiting(&silent) && waiting(&slow));
    // The slow one finishes its line and is served.
    slow.write_all(b"us\n").unwrap();
    let mut reply = String::new();
    slow.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with(&status_reply()), "{reply}");
    assert!(waiting(&silent));
    server.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn clients_past_the_limit_are_told_busy() {
    let dir = common::temp_dir("api-busy");
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("c.sock");
    let server = fntrace::serve_control_with(&socket, &patient(4)).unwrap();
    let mut clients: Vec<UnixStream> = (0..50)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    // Accepted in order: the first four hold the slots.
    for client in &mut clients[4..] {
        let mut reply = String::new();
        client.read_to_string(&mut reply).unwrap();
        assert_eq!(
            reply,
            "error: busy: 4 clients are being served (at most 4); try again\n\n"
        );
    }
    assert!(clients[..4].iter().all(waiting));
    drop(clients);
    // Their slots are free again (the server sees them closed). While they
    // are not, the server answers busy and closes: a request written after
    // that close is reset, which counts as busy too.
    let reply = (0..1000)
        .filter_map(|_| try_ask(&socket, b"status\n"))
        .find(|reply| !reply.starts_with("error: busy"))
        .expect("the slots of closed clients are never freed");
    assert!(reply.starts_with(&status_reply()), "{reply}");
    server.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_socket_is_private_and_removed_when_stopped() {
    let dir = common::temp_dir("api-file");
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("c.sock");
    let server = fntrace::serve_control(&socket).unwrap();
    assert_eq!(server.path(), socket);
    let metadata = std::fs::symlink_metadata(&socket).unwrap();
    assert_eq!(metadata.mode() & 0o777, 0o600);
    // A second server on a live socket is refused; the first serves on.
    let err = fntrace::serve_control(&socket).unwrap_err().to_string();
    assert!(
        err.contains("a running process serves this socket already"),
        "{err}"
    );
    assert!(ask(&socket, b"status\n").starts_with(&status_reply()));
    server.stop();
    assert!(!socket.exists());
    assert_eq!(
        UnixStream::connect(&socket).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // Dropping stops too.
    drop(fntrace::serve_control(&socket).unwrap());
    assert!(!socket.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_stale_socket_is_replaced_and_other_files_are_refused() {
    let dir = common::temp_dir("api-stale");
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("c.sock");
    drop(UnixListener::bind(&socket).unwrap()); // the file stays, no one listens
    let server = fntrace::serve_control(&socket).unwrap();
    assert!(ask(&socket, b"status\n").starts_with(&status_reply()));
    server.stop();
    let file = dir.join("file");
    std::fs::write(&file, "keep").unwrap();
    let err = fntrace::serve_control(&file).unwrap_err().to_string();
    assert!(err.contains("exists and is not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    let err = fntrace::serve_control(dir.join("no/such/dir.sock"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("binding: No such file or directory"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_default_path_is_private_and_found_by_pid() {
    // SAFETY: geteuid takes no arguments and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let path = fntrace::default_control_path();
    assert_eq!(
        path,
        Path::new(&format!("/tmp/fntrace-{uid}/{}.sock", std::process::id()))
    );
    let server = fntrace::serve_control(&path).unwrap();
    let dir = std::fs::metadata(path.parent().unwrap()).unwrap();
    assert_eq!((dir.mode() & 0o777, dir.uid()), (0o700, uid));
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let output = std::process::Command::new(common::native::cli())
        .args(["ctl", &std::process::id().to_string(), "status"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.starts_with(&format!("pid {}\n", std::process::id())),
        "{stdout}"
    );
    server.stop();
    assert!(!path.exists());
}

#[test]
fn snapshot_writes_the_running_flight_recorders_window() {
    const RUNS: u64 = 20;
    const N: i64 = 100; // run(N): 1 + 5N calls
    let dir = common::temp_dir("api-flight");
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("c.sock");
    let server = fntrace::serve_control(&socket).unwrap();
    let filter = fntrace::Filter::new().include("pie_*");
    let flight =
        fntrace::flight_record("graph", &filter, fntrace::FlightOptions::default()).unwrap();
    for _ in 0..RUNS {
        std::hint::black_box(fntrace_fixtures::c_pie::run(N));
    }
    let status = ask(&socket, b"status\n");
    assert!(
        status.contains("\nrecording: a flight recorder (snapshot DIR writes its window)\n"),
        "{status}"
    );
    let snap = dir.join("snap");
    let reply = ask(&socket, format!("snapshot {}\n", snap.display()).as_bytes());
    let calls = RUNS * (1 + 5 * N as u64);
    assert!(
        reply.starts_with(&format!(
            "ok snapshot written to {}\nevents: {}\nlost: 0\nthreads: 1\nevicted: 0\n",
            snap.display(),
            2 * calls
        )),
        "{reply}"
    );
    let counts = common::call_counts(&common::read_trace_dir(&snap));
    let n = N as u64;
    assert_eq!(counts["pie_run"], (RUNS, RUNS));
    assert_eq!(counts["pie_mid"], (RUNS * n, RUNS * n));
    assert_eq!(counts["pie_leaf"], (4 * RUNS * n, 4 * RUNS * n));
    assert_eq!(counts.len(), 3, "{counts:?}");
    let uftrace = common::uftrace_calls(&snap);
    assert_eq!(uftrace.get("pie_leaf"), Some(&(4 * RUNS * n)));
    // The recorder's events are its own: no dump, no report, no disable.
    for (request, message) in [
        (
            "report",
            "a recording is running and takes the graph tracer's events",
        ),
        ("disable graph", "the graph tracer is recording"),
        ("stop", "no recording is running (record DIR starts one)"),
    ] {
        let reply = ask(&socket, format!("{request}\n").as_bytes());
        assert!(reply.starts_with(&format!("error: {message}")), "{reply}");
    }
    flight.stop().unwrap();
    let reply = ask(
        &socket,
        format!("snapshot {}\n", dir.join("s2").display()).as_bytes(),
    );
    assert!(
        reply.starts_with("error: no flight recorder is running"),
        "{reply}"
    );
    assert!(!dir.join("s2").exists());
    server.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}
