//! Losses are said where users look, and none is made where none need be:
//!
//! - a recording into a file system that fills up (a 20 MiB tmpfs) says so
//!   on stderr when it happens, ends with a lost record in each thread's
//!   file and a note in the directory that `fntrace record` reads back:
//!   "INCOMPLETE", the events it could not write counted as lost (written
//!   plus lost is every event the program made, exactly), exit status 3;
//!   uftrace and fntrace's reader see the lost records;
//! - a lossless recording whose process is stopped (SIGSTOP, as Ctrl-Z or a
//!   debugger does) for longer than a waiting thread's 10 s of patience
//!   loses nothing: only the time it was seen waiting counts.
//!
//! Both run `tests/fixtures/c/lossless.c` (`gcc -O2 -pg`: 2 threads, a
//! known call tree) under `fntrace record`, as a user does.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::native::{self, repo, Scratch, Tmpfs};

const THREADS: u64 = 2;

/// `tests/fixtures/c/lossless.c` built `gcc -O2 -pg` into `dir`.
fn build_program(dir: &Path) -> PathBuf {
    let program = dir.join("lossless");
    native::gcc(&[
        "-O2".as_ref(),
        "-pg".as_ref(),
        "-pthread".as_ref(),
        repo().join("tests/fixtures/c/lossless.c").as_os_str(),
        "-o".as_ref(),
        program.as_os_str(),
    ]);
    program
}

/// Calls the program makes with `n` calls of `lossless_top` per thread.
fn calls(n: u64) -> u64 {
    1 + THREADS + 13 * THREADS * n
}

/// The sum of `key` over the recorder notes of the recording at `dir`.
fn noted(dir: &Path, key: &str) -> u64 {
    fntrace_format::export::recorder_notes(dir)
        .unwrap()
        .iter()
        .flatten()
        .filter(|(k, _)| k == key)
        .map(|(_, value)| value.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn a_full_disk_is_said_counted_and_marked() {
    let scratch = Scratch::new("full-disk");
    let program = build_program(scratch.path());
    let mount = Tmpfs::mount(&scratch.path().join("small"), "20m");
    let dir = mount.0.join("trace");
    let n = 2_000_000;
    let output = Command::new(native::cli_with_library())
        .args(["record", "--no-libcall", "-o"])
        .arg(&dir)
        .arg("--")
        .arg(&program)
        .args([THREADS.to_string(), n.to_string()])
        .env_remove("FNTRACE_LIB")
        .output()
        .unwrap();
    let stderr = native::stderr_of(&output);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("calls {}", calls(n)),
        "the program ran whole: {stderr}"
    );
    assert_eq!(output.status.code(), Some(3), "exit status: {stderr}");
    assert!(
        stderr.contains("the recording stopped writing") && stderr.contains("No space left"),
        "said when it happened: {stderr}"
    );
    assert!(stderr.contains("INCOMPLETE"), "{stderr}");
    assert!(!stderr.contains(" 0 lost"), "{stderr}");
    let (events, lost) = (noted(&dir, "events"), noted(&dir, "lost"));
    assert!(lost > 0 && events > 0, "events {events}, lost {lost}");
    assert_eq!(
        events + lost,
        2 * calls(n),
        "every event is written or counted lost"
    );
    assert!(
        stderr.contains(&format!(" {lost} lost")),
        "the summary gives the note's count: {stderr}"
    );
    // The lost records are in the files: fntrace's reader counts them, and
    // uftrace shows them.
    let (_, lost_records) = common::streamed_counts(&dir);
    assert!(lost_records > 0, "no lost record in the files");
    let replay = common::uftrace(&["replay", "--kernel-full", "--no-pager"], &dir);
    assert!(replay.contains("LOST"), "uftrace replay: no lost record");
}

#[test]
fn a_stopped_process_loses_nothing_in_lossless_mode() {
    let scratch = Scratch::new("stopped");
    let program = build_program(scratch.path());
    let dir = scratch.path().join("trace");
    let n = 3_000_000;
    let mut command = Command::new(native::cli_with_library());
    command
        .args(["record", "--no-libcall", "--buffer", "256K", "-o"])
        .arg(&dir)
        .arg("--")
        .arg(&program)
        .args([THREADS.to_string(), n.to_string()])
        .env_remove("FNTRACE_LIB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let child = command.spawn().unwrap();
    let group = child.id() as i32;
    // Stopped in the middle: once the writer has written a few megabytes
    // (the threads wait for it, their buffers being small).
    let began = Instant::now();
    while common::bytes_under(&dir) < 8 << 20 {
        assert!(began.elapsed() < Duration::from_secs(60), "nothing written");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: plain kill(2)s of the process group the child leads.
    unsafe { libc::kill(-group, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_secs(12));
    // SAFETY: as above.
    unsafe { libc::kill(-group, libc::SIGCONT) };
    let output = child.wait_with_output().unwrap();
    let stderr = native::stderr_of(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("calls {}", calls(n))
    );
    let (counts, lost) = common::streamed_counts(&dir);
    assert_eq!(lost, 0, "{stderr}");
    assert_eq!(noted(&dir, "lost"), 0, "{stderr}");
    assert!(
        noted(&dir, "waits") > 0,
        "the threads never waited: {stderr}"
    );
    let leaf = counts.get("lossless_leaf").copied();
    assert_eq!(leaf, Some((8 * THREADS * n, 8 * THREADS * n)), "{stderr}");
}
