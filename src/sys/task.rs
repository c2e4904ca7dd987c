//! The threads of this process, read from `/proc/self/task` without
//! allocating: a raw `getdents64` listing into a buffer allocated up front,
//! and `/proc/self/task/<tid>/status` read into a stack buffer.
//!
//! After [`TaskDir::open`], every method makes only system calls, so a
//! patch protocol may list and inspect threads while others are stopped.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::{last_errno, tgkill};

/// Size of the `getdents64` buffer (about 1,000 entries per system call).
const DIRENT_BUFFER_BYTES: usize = 32 * 1024;

/// Listing the directory failed with this errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ListingFailed {
    /// The raw OS error.
    pub errno: i32,
}

/// `/proc/self/task`, opened once, with a preallocated listing buffer.
pub(crate) struct TaskDir {
    fd: OwnedFd,
    dirents: Vec<u8>,
}

/// What `/proc` says about one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TaskStatus {
    /// Exited, being reaped, or a zombie (a main thread that called
    /// `pthread_exit`): it will never run again.
    Gone,
    /// Still there.
    Live {
        /// The state letter of `State:` (`R`, `S`, `D`, `T`...), if read.
        state: Option<u8>,
        /// The `SigBlk:` mask (bit `n - 1` for signal `n`), if read.
        blocked: Option<u64>,
    },
}

impl TaskDir {
    /// Opens the directory and allocates the listing buffer. Allocates:
    /// call it before stopping anything.
    pub(crate) fn open() -> io::Result<TaskDir> {
        // SAFETY: the path is a NUL-terminated literal; `open` has no other
        // preconditions.
        let fd = unsafe {
            libc::open(
                c"/proc/self/task".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TaskDir {
            // SAFETY: `fd` was just returned by `open` and has no other owner.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            dirents: vec![0; DIRENT_BUFFER_BYTES],
        })
    }

    /// Number of threads listed now. Only system calls.
    pub(crate) fn count_threads(&mut self) -> Result<usize, ListingFailed> {
        let mut count = 0usize;
        self.for_each_tid(|_| {
            count += 1;
            Ok::<(), ListingFailed>(())
        })?;
        Ok(count)
    }

    /// Calls `visit` with each tid in the directory, from the start. Only
    /// system calls; stops at the first error `visit` returns.
    pub(crate) fn for_each_tid<E: From<ListingFailed>>(
        &mut self,
        mut visit: impl FnMut(i32) -> Result<(), E>,
    ) -> Result<(), E> {
        let failed = |errno| E::from(ListingFailed { errno });
        // SAFETY: lseek on an owned, open fd; no memory is passed.
        if unsafe { libc::lseek(self.fd.as_raw_fd(), 0, libc::SEEK_SET) } < 0 {
            return Err(failed(last_errno()));
        }
        loop {
            // SAFETY: `dirents` is a writable buffer of the length passed;
            // the kernel writes at most that many bytes.
            let filled = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    self.fd.as_raw_fd(),
                    self.dirents.as_mut_ptr(),
                    self.dirents.len(),
                )
            };
            if filled < 0 {
                match last_errno() {
                    libc::EINTR => continue,
                    errno => return Err(failed(errno)),
                }
            }
            if filled == 0 {
                return Ok(());
            }
            let filled = self.dirents.get(..filled as usize).unwrap_or(&[]);
            for tid in dirent_tids(filled) {
                visit(tid)?;
            }
        }
    }

    /// What `tgkill(.., 0)` and `/proc/self/task/<tid>/status` say about
    /// thread `tid` of process `pid`. Only system calls; fields that cannot
    /// be read are `None`.
    pub(crate) fn status(&self, pid: i32, tid: i32) -> TaskStatus {
        let unknown = TaskStatus::Live {
            state: None,
            blocked: None,
        };
        if tgkill(pid, tid, 0) == Err(libc::ESRCH) {
            return TaskStatus::Gone;
        }
        let mut path = [0u8; 24];
        if write_tid_status_path(tid, &mut path).is_none() {
            return unknown;
        }
        // SAFETY: `path` is NUL-terminated (written above) and the directory
        // fd is open.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                path.as_ptr().cast(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return match last_errno() {
                libc::ENOENT | libc::ESRCH => TaskStatus::Gone,
                _ => unknown,
            };
        }
        // SAFETY: `fd` was just returned by `openat` and has no other owner.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut status = [0u8; 4096];
        let mut filled = 0;
        while let Some(rest) = status.get_mut(filled..).filter(|rest| !rest.is_empty()) {
            // SAFETY: `rest` is a writable buffer of the length passed.
            let got = unsafe { libc::read(fd.as_raw_fd(), rest.as_mut_ptr().cast(), rest.len()) };
            match got {
                n if n > 0 => filled += n as usize,
                0 => break,
                _ if last_errno() == libc::EINTR => continue,
                _ if last_errno() == libc::ESRCH => return TaskStatus::Gone,
                _ => break,
            }
        }
        parse_status(status.get(..filled).unwrap_or(&[]))
    }
}

/// Reads the `State:` and `SigBlk:` lines of a status text.
fn parse_status(status: &[u8]) -> TaskStatus {
    // "State:\tS (sleeping)". Z: a main thread that called pthread_exit;
    // X: being reaped.
    let state = status_field(status, b"\nState:\t").and_then(|state| state.first().copied());
    if matches!(state, Some(b'Z' | b'X')) {
        return TaskStatus::Gone;
    }
    TaskStatus::Live {
        state,
        blocked: status_field(status, b"\nSigBlk:\t").and_then(parse_hex_u64),
    }
}

/// The value after `key` in a `/proc/.../status` text, up to the line end.
fn status_field<'a>(status: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let start = status.windows(key.len()).position(|window| window == key)? + key.len();
    let value = status.get(start..)?;
    let end = value
        .iter()
        .position(|&byte| byte == b'\n')
        .unwrap_or(value.len());
    value.get(..end)
}

/// Parses a hexadecimal mask such as `SigBlk`'s `0000000000000800`.
fn parse_hex_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    text.iter().try_fold(0u64, |value, &byte| {
        let digit = char::from(byte).to_digit(16)?;
        value.checked_mul(16)?.checked_add(u64::from(digit))
    })
}

/// Writes `"<tid>/status\0"` into `path`; `None` if `tid` is negative.
fn write_tid_status_path(tid: i32, path: &mut [u8; 24]) -> Option<()> {
    let mut digits = [0u8; 10];
    let mut value = u32::try_from(tid).ok()?;
    let mut count = 0;
    loop {
        *digits.get_mut(count)? = b'0' + (value % 10) as u8;
        count += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    let mut len = 0;
    for &digit in digits.get(..count)?.iter().rev() {
        *path.get_mut(len)? = digit;
        len += 1;
    }
    for &byte in b"/status\0" {
        *path.get_mut(len)? = byte;
        len += 1;
    }
    Some(())
}

/// The numeric names in a `getdents64` buffer (`.` and `..` skipped).
/// Record layout: u64 inode, i64 offset, u16 record length, u8 type, name.
fn dirent_tids(buffer: &[u8]) -> impl Iterator<Item = i32> + '_ {
    const NAME_OFFSET: usize = 19;
    let mut position = 0usize;
    std::iter::from_fn(move || loop {
        let record = buffer.get(position..)?;
        let record_len = match record.get(16..18) {
            Some(&[low, high]) => usize::from(u16::from_ne_bytes([low, high])),
            _ => return None,
        };
        if record_len <= NAME_OFFSET {
            return None;
        }
        position += record_len;
        let name = record.get(NAME_OFFSET..record_len.min(record.len()))?;
        let name = name.split(|&byte| byte == 0).next().unwrap_or(&[]);
        if let Some(tid) = parse_tid(name) {
            return Some(tid);
        }
    })
}

/// Parses a positive decimal tid; `None` for anything else.
fn parse_tid(name: &[u8]) -> Option<i32> {
    if name.is_empty() {
        return None;
    }
    name.iter().try_fold(0i32, |value, &byte| {
        if !byte.is_ascii_digit() {
            return None;
        }
        value.checked_mul(10)?.checked_add(i32::from(byte - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_this_thread() {
        let mut dir = TaskDir::open().unwrap();
        let me = super::super::gettid();
        let mut seen = false;
        dir.for_each_tid(|tid| {
            seen |= tid == me;
            Ok::<(), ListingFailed>(())
        })
        .unwrap();
        assert!(seen);
        assert!(dir.count_threads().unwrap() >= 1);
        assert!(matches!(
            dir.status(super::super::getpid(), me),
            TaskStatus::Live {
                state: Some(b'R'),
                blocked: Some(_)
            }
        ));
    }

    #[test]
    fn parses_status_lines() {
        let text = b"Name:\tx\nState:\tS (sleeping)\nSigBlk:\t0000000000000800\n";
        assert_eq!(
            parse_status(text),
            TaskStatus::Live {
                state: Some(b'S'),
                blocked: Some(0x800)
            }
        );
        assert_eq!(
            parse_status(b"Name:\tx\nState:\tZ (zombie)\n"),
            TaskStatus::Gone
        );
        let mut path = [0u8; 24];
        write_tid_status_path(1234, &mut path).unwrap();
        assert_eq!(&path[..12], b"1234/status\0");
        assert_eq!(parse_tid(b".."), None);
        assert_eq!(parse_tid(b"42"), Some(42));
    }
}
