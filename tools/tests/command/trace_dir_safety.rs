//! Writing and reading trace directories where other users can reach
//! them (`docs/safe-writes.md`): a link planted at a name fntrace writes (a
//! temporary `.NAME.PID.new` above all, or a thread's `.dat`) is never
//! followed, a root-owned file it points to stays byte for byte as it was;
//! a directory another user owns or every user can write is refused with
//! one line saying why; a FIFO in place of a trace file, or given as the
//! directory itself, makes every reader fail at once instead of blocking
//! in `open`.
//!
//! The planting tests need root (to give a link to uid 65534 with
//! `lchown`, and to own the victim); they say so and return otherwise.

use crate::common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TempDir;
use fntrace_tools::export::{read_uftrace_dir, write_uftrace_dir, UftraceReader, UftraceStream};
use fntrace_tools::{EventKind, GraphEvent, Trace};

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");
/// The user that plants the links: `nobody` on Debian.
const OTHER_UID: u32 = 65534;
const VICTIM_BYTES: &[u8] = b"root:secret:0600 file that no trace may overwrite\n";
const FUNCTION: usize = 0x40_1000;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A root-owned mode-0600 file in `dir`.
fn victim(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("victim");
    std::fs::write(&path, VICTIM_BYTES).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn assert_untouched(victim: &Path) {
    assert_eq!(
        std::fs::read(victim).unwrap(),
        VICTIM_BYTES,
        "the file a planted link points to was written"
    );
}

/// A symbolic link `dir/name` to `target`, owned by [`OTHER_UID`] as if
/// that user had planted it.
fn plant(dir: &Path, name: &str, target: &Path) {
    std::os::unix::fs::symlink(target, dir.join(name)).unwrap();
    rustix::fs::chownat(
        rustix::fs::CWD,
        dir.join(name),
        Some(rustix::process::Uid::from_raw(OTHER_UID)),
        Some(rustix::process::Gid::from_raw(OTHER_UID)),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap();
}

fn header(pid: u32) -> Trace {
    Trace {
        pid,
        exe: "/usr/bin/service".into(),
        names: [(FUNCTION, "handle".to_string())].into(),
        ..Trace::default()
    }
}

/// One call of `handle`, at `t`.
fn call(t: u64) -> Vec<GraphEvent> {
    let event = |time_ns, kind| GraphEvent {
        time_ns,
        function: FUNCTION,
        depth: 0,
        kind,
    };
    vec![event(t, EventKind::Entry), event(t + 10, EventKind::Exit)]
}

/// The temporary names this process's writers use for the shared files.
fn temporary_names() -> Vec<String> {
    let pid = std::process::id();
    ["info", "task.txt", "fntrace.txt"]
        .iter()
        .map(|name| format!(".{name}.{pid}.new"))
        .collect()
}

#[test]
fn links_planted_in_a_world_writable_directory_are_never_followed() {
    if !is_root() {
        eprintln!("skipped: planting another user's links needs root");
        return;
    }
    let base = TempDir::new("planted-1777");
    let victim = victim(&base.0);
    let shared = base.0.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();

    // A root service starts recording into the world-writable directory;
    // another user plants links at the temporary names of the files the
    // service rewrites whenever a thread appears; a thread appears.
    match UftraceStream::create(&shared, header(std::process::id()), 1_000) {
        Err(err) => {
            let message = err.to_string();
            assert!(
                message.contains("writable by every user") && !message.contains('\n'),
                "{message}"
            );
        }
        Ok(mut stream) => {
            for name in temporary_names() {
                plant(&shared, &name, &victim);
            }
            let _ = stream
                .append(7, Some("worker"), &call(2_000), 0)
                .and_then(|()| stream.flush());
            let _ = stream.finish();
        }
    }
    assert_untouched(&victim);
    // Whatever happened, nothing but the links was made there, and a
    // one-shot writer is refused too.
    for name in temporary_names() {
        plant(&shared, &name, &victim);
    }
    let trace = Trace {
        threads: vec![fntrace_tools::ThreadTrace {
            tid: 7,
            name: None,
            events: call(2_000),
            lost: 0,
        }],
        ..header(1)
    };
    let err = write_uftrace_dir(&trace, &shared, None).unwrap_err();
    assert!(err.to_string().contains("writable by every user"), "{err}");
    assert_untouched(&victim);
}

#[test]
fn a_link_at_a_temporary_name_is_not_followed_when_a_session_joins() {
    let base = TempDir::new("planted-join");
    let victim = victim(&base.0);
    let dir = base.0.join("trace");
    let stream = UftraceStream::create(&dir, header(std::process::id()), 1_000).unwrap();
    stream.finish().unwrap();
    // Links left at the temporary names (by whoever could write there
    // once): a second session (a forked child, an exec, FNTRACE_APPEND)
    // rewrites the shared files through those names.
    for name in temporary_names() {
        std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
    }
    match UftraceStream::join(&dir, header(std::process::id()), 5_000) {
        Ok(stream) => drop(stream.finish()),
        Err(err) => {
            let message = err.to_string();
            assert!(
                message.contains("exists already") && message.contains(".new"),
                "{message}"
            );
        }
    }
    assert_untouched(&victim);
    // The links are still there, not replaced nor written through.
    for name in temporary_names() {
        assert!(dir.join(&name).is_symlink(), "{name}");
    }
}

#[test]
fn a_link_in_place_of_a_thread_file_is_not_appended_to() {
    let base = TempDir::new("planted-dat");
    let victim = victim(&base.0);
    let dir = base.0.join("trace");
    let mut stream = UftraceStream::create(&dir, header(std::process::id()), 1_000).unwrap();
    stream.append(7, None, &call(2_000), 0).unwrap();
    stream.finish().unwrap();
    std::fs::remove_file(dir.join("7.dat")).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("7.dat")).unwrap();
    // The program execs; thread 7 goes on in the new session and appends
    // to its file.
    let outcome =
        UftraceStream::join(&dir, header(std::process::id()), 5_000).and_then(|mut stream| {
            stream.append(7, None, &call(6_000), 0)?;
            stream.finish()
        });
    let err = outcome.expect_err("a link was written through");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_untouched(&victim);
}

#[test]
fn a_directory_owned_by_another_user_is_refused() {
    if !is_root() {
        eprintln!("skipped: giving a directory to another user needs root");
        return;
    }
    let base = TempDir::new("other-owner");
    let dir = base.0.join("theirs");
    std::fs::create_dir(&dir).unwrap();
    rustix::fs::chown(
        &dir,
        Some(rustix::process::Uid::from_raw(OTHER_UID)),
        Some(rustix::process::Gid::from_raw(OTHER_UID)),
    )
    .unwrap();
    let Err(err) = UftraceStream::create(&dir, header(1), 1_000) else {
        panic!("another user's directory was accepted");
    };
    let message = err.to_string();
    assert!(
        message.contains(&format!("is owned by uid {OTHER_UID}")) && !message.contains('\n'),
        "{message}"
    );
    let Err(err) = UftraceStream::join(&dir, header(1), 1_000) else {
        panic!("another user's directory was accepted");
    };
    assert!(err.to_string().contains("is owned by uid"), "{err}");
    let err = write_uftrace_dir(&header(1), &dir, None).unwrap_err();
    assert!(err.to_string().contains("is owned by uid"), "{err}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "written into");
}

#[test]
fn a_directory_fntrace_makes_is_writable_by_its_owner_only() {
    let base = TempDir::new("made-mode");
    let dir = base.0.join("new");
    UftraceStream::create(&dir, header(1), 1_000)
        .unwrap()
        .finish()
        .unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o022, 0, "mode {mode:o}");
    // So a second session (same user) joins it.
    UftraceStream::join(&dir, header(2), 2_000)
        .unwrap()
        .finish()
        .unwrap();
}

/// A copy of the recording in `tools/tests/data/uftrace-threads` with a
/// FIFO in place of `file`.
fn recording_with_fifo(tag: &str, file: &str) -> TempDir {
    let dir = TempDir::new(tag);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/uftrace-threads");
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.0.join(entry.file_name())).unwrap();
    }
    std::fs::remove_file(dir.0.join(file)).unwrap();
    let made = Command::new("mkfifo")
        .arg(dir.0.join(file))
        .status()
        .unwrap();
    assert!(made.success());
    dir
}

#[test]
fn a_fifo_in_a_recording_fails_every_reader_at_once() {
    for file in [
        "23103.dat",
        "info",
        "task.txt",
        "w.sym",
        "sid-bde5d821e061d980.map",
    ] {
        let dir = recording_with_fifo("fifo", file);
        // In process, on a thread: an open that blocks would hang the
        // test, so it is timed from here.
        let path = dir.0.clone();
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let result = read_uftrace_dir(&path)
                .map(|_| ())
                .map_err(|e| e.to_string());
            let reader = UftraceReader::open(&path).map(|_| ());
            let _ = send.send((result, reader.is_ok()));
        });
        let (result, _) = receive
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("reading with a FIFO as {file} blocked"));
        let err = result.expect_err("a FIFO was read as a trace file");
        assert!(
            err.contains(file) && err.contains("a FIFO, not a regular file"),
            "{file}: {err}"
        );

        // The CLI: every command reading the directory exits with the
        // error, promptly.
        for command in [&["report"][..], &["replay"], &["graph"]] {
            let (status, stderr) = run_promptly(command, &dir.0, &[]);
            assert!(!status.success(), "{command:?} {file}: {stderr}");
            assert!(
                stderr.contains("a FIFO, not a regular file"),
                "{command:?} {file}: {stderr}"
            );
        }
    }
}

/// `fntrace COMMAND PATH ARGS…`, killed if it has not ended after 20 s
/// (a reader blocked in `open`); its status and stderr.
fn run_promptly(
    command: &[&str],
    path: &Path,
    args: &[&str],
) -> (std::process::ExitStatus, String) {
    let started = Instant::now();
    let mut child = Command::new(CLI)
        .args(command)
        .arg(path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fntrace {command:?} {} blocked", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}

/// A FIFO given where a trace directory (or a profile snapshot) is
/// expected is refused at once by every command that reads one, saying
/// what it is, and never read: the bytes waiting in it (a snapshot's
/// first line, which a reader that opened it would take) are all still
/// there after each command. It blocked `report` and `flame` in `open`.
#[test]
fn a_fifo_given_as_the_directory_is_refused_unread() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = TempDir::new("fifo-as-dir");
    let fifo = dir.0.join("trace.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let trace = dir.0.join("trace");
    write_uftrace_dir(&header(1), &trace, None).unwrap();
    // Read-write and non-blocking: this test's own end, which neither
    // waits for a reader nor blocks when the pipe is empty.
    let mut end = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo)
        .unwrap();
    let waiting = b"fntrace-profile 1\n";
    let svg = dir.0.join("out.svg");
    let json = dir.0.join("out.json");
    let svg = svg.to_str().unwrap();
    let json = json.to_str().unwrap();
    let commands: [(&[&str], &[&str]); 8] = [
        (&["report"], &[]),
        (&["replay"], &[]),
        (&["graph"], &[]),
        (&["flame"], &["-o", svg]),
        (&["chrome"], &["-o", json]),
        (&["perfetto"], &["-o", json]),
        (&["diff"], &[trace.to_str().unwrap()]),
        (&["diff", trace.to_str().unwrap()], &[]),
    ];
    for (command, args) in commands {
        end.write_all(waiting).unwrap();
        let (status, stderr) = run_promptly(command, &fifo, args);
        assert_eq!(status.code(), Some(1), "{command:?}: {stderr}");
        assert_eq!(
            stderr,
            format!(
                "fntrace: {} is a FIFO (named pipe), not a directory (give a trace directory)\n",
                fifo.display()
            ),
            "{command:?}"
        );
        let mut still = [0u8; 18];
        end.read_exact(&mut still)
            .unwrap_or_else(|e| panic!("{command:?} read the FIFO: {e}"));
        assert_eq!(&still, waiting, "{command:?}");
    }
}
