//! `/proc/thread-self/mem`, the text writer's way to text without a
//! writable view: the kernel reads and writes the target through its own
//! mapping of the page, so the text stays read-execute throughout.

use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::sys::last_errno;

/// Calls `transfer(done)` (bytes moved, or -1 with errno set) until `len`
/// bytes have moved: EINTR retries, a zero-byte transfer is EIO. The raw
/// errno on failure.
fn transfer_all(len: usize, mut transfer: impl FnMut(usize) -> isize) -> Result<(), i32> {
    let mut done = 0;
    while done < len {
        match transfer(done) {
            n if n > 0 => done += n as usize,
            0 => return Err(libc::EIO),
            _ => match last_errno() {
                libc::EINTR => continue,
                errno => return Err(errno),
            },
        }
    }
    Ok(())
}

/// `pread` of all of `buf` from the `mem` file at `addr`; the raw errno on
/// failure. The kernel reads the target through its own mapping, so an
/// unmapped address yields EIO, not a fault.
pub(super) fn pread_all(fd: &OwnedFd, addr: usize, buf: &mut [u8]) -> Result<(), i32> {
    let len = buf.len();
    transfer_all(len, |done| {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid, writable buffer of `rest.len()` bytes.
        unsafe {
            libc::pread(
                fd.as_raw_fd(),
                rest.as_mut_ptr().cast::<c_void>(),
                rest.len(),
                (addr + done) as libc::off_t,
            )
        }
    })
}

/// `pwrite` of all of `bytes` to the `mem` file at `addr`; text protection
/// never changes. The raw errno on failure.
pub(super) fn pwrite_all(fd: &OwnedFd, addr: usize, bytes: &[u8]) -> Result<(), i32> {
    transfer_all(bytes.len(), |done| {
        let rest = &bytes[done..];
        // SAFETY: `rest` is a valid buffer of `rest.len()` bytes; the kernel
        // writes the target through its own mapping (forcing write access
        // to the private text page), so no fault can occur in this process.
        unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                rest.as_ptr().cast::<c_void>(),
                rest.len(),
                (addr + done) as libc::off_t,
            )
        }
    })
}

/// Opens `/proc/thread-self/mem` (or `/proc/self/mem` on kernels before
/// 3.17) read-write, else read-only, else not at all.
pub(super) fn open_proc_mem() -> Option<OwnedFd> {
    let paths = [c"/proc/thread-self/mem", c"/proc/self/mem"];
    for (path, flags) in paths
        .into_iter()
        .flat_map(|path| [(path, libc::O_RDWR), (path, libc::O_RDONLY)])
    {
        // SAFETY: the path is a NUL-terminated literal; `open` has no other
        // preconditions.
        let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
        if fd >= 0 {
            // SAFETY: `fd` was just returned by `open` and is owned by no one
            // else.
            return Some(unsafe { OwnedFd::from_raw_fd(fd) });
        }
    }
    None
}
