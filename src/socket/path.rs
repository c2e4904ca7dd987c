//! Where a control socket lives: the default path `/tmp/fntrace-UID/PID.sock`
//! (what `fntrace ctl PID` connects to) and the checks of its directory.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::Error;

/// The longest socket path (`sun_path` holds 108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// The control socket path `fntrace ctl PID` looks for:
/// `/tmp/fntrace-UID/PID.sock`, UID being this process's effective uid
/// (defined once, in `fntrace_format::wire`, for both).
/// Serve it with [`serve_control`](crate::serve_control) (which makes the
/// directory, mode 0700) or `FNTRACE_CONTROL=1`.
pub fn default_control_path() -> PathBuf {
    fntrace_format::wire::own_control_socket_path()
}

/// Makes `path`'s directory if it is the default one: mode 0700, owned by
/// this process's user. An existing one must be a directory (not a link),
/// owned by this user, and writable by no one else; else it is refused.
pub(crate) fn prepare_default_dir(path: &Path) -> Result<(), Error> {
    // SAFETY: geteuid takes no arguments and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let dir = fntrace_format::wire::control_socket_dir(uid);
    if path.parent() == Some(dir.as_path()) {
        prepare_private_dir(&dir, uid)?;
    }
    Ok(())
}

/// Makes `dir` (mode 0700) or checks the one there: a directory owned by
/// `uid`, not writable by group or others.
fn prepare_private_dir(dir: &Path, uid: u32) -> Result<(), Error> {
    let io = |source| Error::Io {
        what: format!("control socket directory {}", dir.display()),
        source,
    };
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(io(err)),
    }
    let metadata = std::fs::symlink_metadata(dir).map_err(io)?;
    let refuse = |why: String| {
        io(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{why}; not used (remove it, or set FNTRACE_CONTROL=PATH)"),
        ))
    };
    if !metadata.file_type().is_dir() {
        return Err(refuse("not a directory".to_string()));
    }
    if metadata.uid() != uid {
        return Err(refuse(format!(
            "owned by uid {}, not by this process's uid {uid}",
            metadata.uid()
        )));
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "writable by group or others (mode {:o})",
            metadata.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Refuses a path too long for a Unix socket address.
pub(super) fn check_length(path: &Path) -> Result<(), Error> {
    let len = path.as_os_str().as_bytes().len();
    if len > MAX_SOCKET_PATH {
        return Err(Error::Io {
            what: format!("control socket {}", path.display()),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("the path is {len} bytes; a Unix socket's is at most {MAX_SOCKET_PATH}"),
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fntrace-unit-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(&dir);
        dir
    }

    fn uid() -> u32 {
        // SAFETY: geteuid takes no arguments and cannot fail.
        unsafe { libc::geteuid() }
    }

    #[test]
    fn default_path_names_the_user_and_the_process() {
        assert_eq!(
            default_control_path(),
            PathBuf::from(format!(
                "/tmp/fntrace-{}/{}.sock",
                uid(),
                std::process::id()
            ))
        );
    }

    #[test]
    fn a_private_directory_is_made_mode_0700_and_accepted_again() {
        let dir = scratch("private");
        prepare_private_dir(&dir, uid()).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        prepare_private_dir(&dir, uid()).unwrap();
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn an_unsafe_directory_is_refused() {
        // Writable by others.
        let dir = scratch("world-writable");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = prepare_private_dir(&dir, uid()).unwrap_err().to_string();
        assert!(
            err.contains("writable by group or others (mode 777)"),
            "{err}"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o720)).unwrap();
        let err = prepare_private_dir(&dir, uid()).unwrap_err().to_string();
        assert!(err.contains("mode 720"), "{err}");
        // Owned by another user (as that user would see ours).
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let err = prepare_private_dir(&dir, uid() + 1)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "owned by uid {}, not by this process's uid {}",
                uid(),
                uid() + 1
            )),
            "{err}"
        );
        std::fs::remove_dir(&dir).unwrap();
        // A link to a directory, and a file.
        let target = scratch("link-target");
        std::fs::create_dir(&target).unwrap();
        let link = scratch("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = prepare_private_dir(&link, uid()).unwrap_err().to_string();
        assert!(err.contains("not a directory"), "{err}");
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir(&target).unwrap();
        let file = scratch("file");
        std::fs::write(&file, "x").unwrap();
        let err = prepare_private_dir(&file, uid()).unwrap_err().to_string();
        assert!(err.contains("not a directory"), "{err}");
        std::fs::remove_file(&file).unwrap();
    }

    #[test]
    fn a_path_too_long_for_a_socket_is_refused() {
        let ok = PathBuf::from(format!("/{}", "a".repeat(106)));
        check_length(&ok).unwrap();
        let long = PathBuf::from(format!("/{}", "a".repeat(107)));
        let err = check_length(&long).unwrap_err().to_string();
        assert!(err.contains("108 bytes"), "{err}");
    }
}
