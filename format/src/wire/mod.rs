//! Live control's definitions shared by its two ends, the runtime, which
//! serves the control socket (`FNTRACE_CONTROL`, `fntrace::serve_control`),
//! and `fntrace ctl`, which connects to it: where the socket is by default,
//! `/tmp/fntrace-UID/PID.sock` (UID: the process's effective uid), and the
//! requests' words ([`request`]).

pub mod request;

use std::path::PathBuf;

/// The directory of the default control socket paths of the processes
/// whose effective uid is `uid`.
pub fn control_socket_dir(uid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/fntrace-{uid}"))
}

/// The default control socket path of process `pid`, whose effective uid
/// is `uid`.
pub fn control_socket_path(uid: u32, pid: u32) -> PathBuf {
    control_socket_dir(uid).join(format!("{pid}.sock"))
}

/// The default control socket path of process `pid`, named after its
/// effective uid as `/proc/PID/status` gives it (what `fntrace ctl PID`
/// connects to); the error says why there is none.
pub fn control_socket_path_of(pid: u32) -> Result<PathBuf, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|_| format!("no process with pid {pid}"))?;
    // `Uid:` real, effective, saved, filesystem: the socket's directory
    // is named after the effective uid.
    let uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|uid| uid.parse().ok())
        .ok_or_else(|| format!("/proc/{pid}/status has no Uid line"))?;
    Ok(control_socket_path(uid, pid))
}

/// This process's default control socket path.
pub fn own_control_socket_path() -> PathBuf {
    control_socket_path(rustix::process::geteuid().as_raw(), std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_path_is_per_user_and_per_process() {
        assert_eq!(
            control_socket_path(1000, 42),
            PathBuf::from("/tmp/fntrace-1000/42.sock")
        );
        let own = own_control_socket_path();
        assert_eq!(
            own.file_name().unwrap().to_str().unwrap(),
            format!("{}.sock", std::process::id())
        );
        // geteuid and /proc say the same.
        assert_eq!(control_socket_path_of(std::process::id()), Ok(own));
        assert!(control_socket_path_of(u32::MAX).is_err());
    }
}
