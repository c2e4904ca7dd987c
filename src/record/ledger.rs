//! The recording's ledger of processes: each process that starts its part
//! of a streaming recording appends `start PID` to [`LEDGER_FILE`] in the
//! directory (a forked child in its fork handler, before it runs any code
//! of the program's), and `end PID` once its writer has finished that
//! part. A process killed by SIGKILL runs no code of fntrace's: it leaves
//! a start without an end, even one killed before its first drain, which
//! leaves nothing else in the directory. `fntrace record` counts them, and
//! says that what they held after their last drain is lost, uncounted.

use std::os::fd::IntoRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

// The ledger's name in the directory, where `fntrace record` and the
// readers read it (`fntrace_format::export::process_ledger`).
use fntrace_format::export::PROCESS_LEDGER as LEDGER_FILE;

/// This process's ledger, open for appending (-1: none). A forked child
/// shares its parent's open file (appends do not mix lines); `exec`
/// closes it, and the new program opens the ledger again.
static LEDGER: AtomicI32 = AtomicI32::new(-1);

/// Appends `start PID`. `reopen`: a recording starting in this process
/// (perhaps into another directory than the last), not a forked child's
/// or a failed `exec`'s continuation of one.
pub(super) fn started(dir: &Path, reopen: bool) {
    if reopen || LEDGER.load(Ordering::Acquire) < 0 {
        let opened = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join(LEDGER_FILE));
        let fd = opened.map_or(-1, IntoRawFd::into_raw_fd);
        let old = LEDGER.swap(fd, Ordering::AcqRel);
        if old >= 0 {
            // SAFETY: `old` was this module's own descriptor, now out of
            // `LEDGER`; no thread writes it any more: one recording runs
            // at a time, and the last one's writer has ended.
            unsafe { libc::close(old) };
        }
    }
    append("start");
}

/// Appends `end PID`: this process's part is finished.
pub(super) fn ended() {
    append("end");
}

/// One line, in one `write` (an `O_APPEND` write of a few bytes is not
/// interleaved with another process's).
fn append(word: &str) {
    let fd = LEDGER.load(Ordering::Acquire);
    if fd < 0 {
        return;
    }
    let line = format!("{word} {}\n", std::process::id());
    // SAFETY: `fd` is open (closed only when replaced above); `line` is
    // valid for its length. A failed write leaves the ledger short, which
    // `fntrace record` reads as a process that did not finish.
    unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
}
