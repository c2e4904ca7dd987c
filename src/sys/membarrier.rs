//! `membarrier(2)` for cross-modifying code: make every CPU running a
//! thread of this process execute a core-serializing instruction before it
//! runs user code again (`MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE`,
//! Linux ≥ 4.16). The process registers for it once; a thread that is not
//! running at the time serializes when it is next scheduled in, so after
//! [`sync_core`] returns no thread runs instructions fetched before it.

use std::io;
use std::sync::atomic::{AtomicU8, Ordering};

use super::last_errno;

/// `MEMBARRIER_CMD_QUERY`: the supported commands, as a bit mask.
const CMD_QUERY: i32 = 0;
/// `MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE`.
const CMD_PRIVATE_EXPEDITED_SYNC_CORE: i32 = 1 << 5;
/// `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE`.
const CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: i32 = 1 << 6;

/// Registration state: 0 not tried, 1 registered, 2 unsupported.
static REGISTERED: AtomicU8 = AtomicU8::new(0);

fn membarrier(cmd: i32) -> Result<i64, i32> {
    // SAFETY: membarrier takes plain integers (flags 0, cpu_id 0) and
    // touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) };
    if rc < 0 {
        Err(last_errno())
    } else {
        Ok(rc)
    }
}

/// Registers the process for [`sync_core`] (once; later calls return the
/// first outcome). Fails when the kernel lacks the command (before 4.16,
/// or a kernel built without `CONFIG_MEMBARRIER`, or a seccomp filter).
pub(crate) fn register_sync_core() -> io::Result<()> {
    match REGISTERED.load(Ordering::Acquire) {
        1 => return Ok(()),
        2 => return Err(io::Error::from_raw_os_error(libc::ENOSYS)),
        _ => {}
    }
    let outcome = membarrier(CMD_QUERY).and_then(|supported| {
        if supported & i64::from(CMD_PRIVATE_EXPEDITED_SYNC_CORE) == 0 {
            return Err(libc::EINVAL);
        }
        membarrier(CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE).map(drop)
    });
    // Registering twice is harmless, so a race between two first callers
    // only costs a system call.
    match outcome {
        Ok(()) => {
            REGISTERED.store(1, Ordering::Release);
            Ok(())
        }
        Err(errno) => {
            REGISTERED.store(2, Ordering::Release);
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// Serializes every CPU running a thread of this process; needs
/// [`register_sync_core`] first. Only a system call: async-signal-safe and
/// allocation-free. The raw errno on failure.
pub(crate) fn sync_core() -> Result<(), i32> {
    loop {
        match membarrier(CMD_PRIVATE_EXPEDITED_SYNC_CORE) {
            Ok(_) => return Ok(()),
            Err(libc::EINTR) => continue,
            Err(errno) => return Err(errno),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_once_and_syncs() {
        // Linux >= 4.16 has the command; tests/no_membarrier.rs runs without it.
        register_sync_core().unwrap();
        register_sync_core().unwrap();
        sync_core().unwrap();
    }
}
