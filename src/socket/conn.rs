//! What the control server and the metrics endpoint share: a server
//! thread stopped through a wake-up pipe, `poll` over non-blocking
//! clients with deadlines, and sending without ever blocking or raising
//! `SIGPIPE`. Each protocol keeps its own reading and replies.

use std::io::ErrorKind;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A server's thread and the pipe that tells it to stop.
pub(super) struct ServerThread {
    /// Written to wake the thread when it must stop.
    wake: OwnedFd,
    thread: Option<JoinHandle<()>>,
    /// The pipe's read end, kept open here when the thread may end by
    /// itself (`detach`): writing to a pipe nobody reads raises `SIGPIPE`.
    _reader: Option<OwnedFd>,
}

impl ServerThread {
    /// The thread serving, and the write end of the pipe its loop polls.
    pub fn new(wake: OwnedFd, thread: JoinHandle<()>) -> ServerThread {
        ServerThread {
            wake,
            thread: Some(thread),
            _reader: None,
        }
    }

    /// [`ServerThread::new`] for a thread that may end by itself: `reader`
    /// (a duplicate of the pipe's read end) stays open as long as this.
    pub fn keeping_reader(wake: OwnedFd, reader: OwnedFd, thread: JoinHandle<()>) -> ServerThread {
        ServerThread {
            _reader: Some(reader),
            ..ServerThread::new(wake, thread)
        }
    }

    /// Wakes the thread and waits for it to end; whether it was still
    /// running (a second call does nothing).
    pub fn stop(&mut self) -> bool {
        let Some(thread) = self.thread.take() else {
            return false;
        };
        // SAFETY: writes one byte from a live buffer to our pipe's write end.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        let _ = thread.join();
        true
    }
}

/// A pipe, both ends non-blocking and closed on exec: (read, write).
pub(super) fn wake_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two file descriptors into `fds`, which has room
    // for them.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A `poll` entry for `fd`.
pub(super) fn pollfd(fd: i32, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Milliseconds from `now` to `deadline`, rounded up (at least 0).
pub(super) fn poll_timeout(deadline: Instant, now: Instant) -> i32 {
    let left = deadline.saturating_duration_since(now);
    i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
}

/// Polls `fds` until one is ready or the earliest of `deadlines` passes
/// (none: no time limit); false when the call failed and the loop should
/// look again (EINTR, the stop signal of a patch; other failures after a
/// pause, not to spin).
pub(super) fn poll_ready(
    fds: &mut [libc::pollfd],
    deadlines: impl Iterator<Item = Instant>,
) -> bool {
    let timeout = deadlines
        .min()
        .map_or(-1, |deadline| poll_timeout(deadline, Instant::now()));
    // SAFETY: `fds` holds `fds.len()` initialised pollfd entries.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
    if ready < 0 {
        if std::io::Error::last_os_error().kind() != ErrorKind::Interrupted {
            std::thread::sleep(Duration::from_millis(10));
        }
        return false;
    }
    true
}

/// Sends as much of `bytes` as the socket takes now; `None` if the client
/// is gone. `MSG_NOSIGNAL`: a closed peer is an error (EPIPE), not a
/// `SIGPIPE` that would end the program.
pub(super) fn send_some(socket: BorrowedFd<'_>, bytes: &[u8]) -> Option<usize> {
    let mut sent = 0;
    while sent < bytes.len() {
        // SAFETY: sends from `bytes[sent..]`, live and that long, on a
        // descriptor the caller keeps open.
        let n = unsafe {
            libc::send(
                socket.as_raw_fd(),
                bytes[sent..].as_ptr().cast(),
                bytes.len() - sent,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            sent += n as usize;
            continue;
        }
        match std::io::Error::last_os_error().kind() {
            ErrorKind::Interrupted => {}
            ErrorKind::WouldBlock => return Some(sent),
            _ => return None,
        }
    }
    Some(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn poll_waits_until_the_deadline_rounded_up() {
        let now = Instant::now();
        assert_eq!(poll_timeout(now, now + Duration::from_secs(1)), 0);
        assert_eq!(poll_timeout(now + Duration::from_micros(1), now), 1);
        assert_eq!(poll_timeout(now + Duration::from_millis(2000), now), 2000);
    }

    #[test]
    fn sending_to_a_closed_peer_is_none_not_sigpipe() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(send_some(ours.as_fd(), b"hello"), Some(5));
        drop(theirs);
        assert_eq!(send_some(ours.as_fd(), b"again"), None);
    }
}
