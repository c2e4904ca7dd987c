//! The live profile's C calls: `fntrace_profile_write` (the profile
//! tracer's snapshot, as text, to a file descriptor) and
//! `fntrace_profile_reset`.

use std::ffi::c_int;

use crate::builtin::profile::PROFILE_TRACER;

use super::{run, Failure};

/// Writes all of `bytes` to `fd`, retrying short writes and `EINTR`.
fn write_all(fd: c_int, mut bytes: &[u8]) -> Result<(), Failure> {
    while !bytes.is_empty() {
        // SAFETY: writes from a valid buffer of the given length; `fd` is
        // the caller's (an invalid one fails with EBADF).
        let wrote = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if wrote < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Failure(
                err.raw_os_error().unwrap_or(libc::EIO),
                format!("writing to file descriptor {fd}: {err}"),
            ));
        }
        bytes = &bytes[wrote as usize..];
    }
    Ok(())
}

/// `int fntrace_profile_write(int fd)`: writes the profile tracer's
/// snapshot (`ProfileSnapshot::to_text`) to `fd`.
#[unsafe(no_mangle)]
pub extern "C" fn fntrace_profile_write(fd: c_int) -> c_int {
    run("fntrace_profile_write", || {
        let text = PROFILE_TRACER.snapshot().to_text();
        write_all(fd, text.as_bytes())
    })
}

/// `int fntrace_profile_reset(void)`: forgets the calls profiled so far
/// (see `ProfileTracer::reset`).
#[unsafe(no_mangle)]
pub extern "C" fn fntrace_profile_reset() -> c_int {
    run("fntrace_profile_reset", || {
        PROFILE_TRACER.reset();
        Ok(())
    })
}
