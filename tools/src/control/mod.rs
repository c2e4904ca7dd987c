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

/// This process's default control socket path.
pub fn own_control_socket_path() -> PathBuf {
    control_socket_path(rustix::process::geteuid().as_raw(), std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
        // The effective uid, as /proc says it (`Uid:` real, effective, ...).
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let euid = status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            .unwrap();
        assert_eq!(
            own.parent().unwrap(),
            Path::new(&format!("/tmp/fntrace-{euid}"))
        );
    }
}
