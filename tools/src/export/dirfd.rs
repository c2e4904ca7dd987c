//! Trace directories opened as directory descriptors, so that writing a
//! trace never follows a link or overwrites a file another user planted,
//! and reading one never opens a FIFO or a device.
//!
//! The rules (a root service may record into a directory other users can
//! reach):
//!
//! - The output directory is opened once, with `O_DIRECTORY|O_NOFOLLOW`;
//!   every file of the trace is then made relative to that descriptor
//!   (`openat`, `renameat`), never by a path that could be swapped meanwhile.
//! - An existing output directory is refused, with one line saying why,
//!   when it is owned by another user than the process's effective one,
//!   writable by every user, or writable by a group that is not the
//!   process's: someone else could plant names in it. A directory fntrace
//!   makes is mode 0755 (less what the umask takes), so it is never one of
//!   those.
//! - A file is created with `O_CREAT|O_EXCL|O_NOFOLLOW` (temporary names
//!   included): a name that exists, a link above all, makes the write fail
//!   rather than follow it. A file is replaced whole by an exclusively
//!   created temporary file renamed over it (the rename replaces a link
//!   without following it). The one file appended to (a thread's `.dat`,
//!   which a program continues after an `exec`) must be a regular file of
//!   the process's user.
//! - Nothing is deleted but the temporary file of a failed replacement,
//!   which this process created.
//! - Readers open trace files with `O_NONBLOCK|O_NOFOLLOW` and refuse
//!   anything that is not a regular file ([`open_regular`]): a FIFO in
//!   place of a `.dat` would otherwise block the open forever.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Stat, CWD};
use rustix::io::Errno;

use super::ExportError;

/// Mode of a directory fntrace makes: writable by its owner only (the
/// umask may take more away), so that no other user can plant a name in it.
const DIR_MODE: u32 = 0o755;
/// Mode of a file fntrace makes, less the umask (as `fs::write` does).
const FILE_MODE: u32 = 0o666;

/// An output directory of a trace, open for writing files into it.
#[derive(Debug)]
pub(crate) struct TraceDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl TraceDir {
    /// Opens the directory at `path` to write a trace into, making it (and
    /// its missing parents) if it does not exist. Refuses an empty path, a
    /// path that is a link or not a directory, and a directory other users
    /// could write into (see the module's documentation).
    pub(crate) fn open_output(path: &Path) -> Result<TraceDir, ExportError> {
        // `""` joined with a file name is a relative path: refuse it before
        // anything could land in the current directory.
        if path.as_os_str().is_empty() {
            return Err(ExportError::EmptyPath);
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| ExportError::io(parent, "creating directory", e))?;
        }
        match rfs::mkdir(path, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(ExportError::io(path, "creating directory", e.into())),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rfs::open(path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOTDIR | Errno::LOOP) if is_symlink(CWD, path) => {
                return Err(refused(
                    path,
                    "is a symbolic link; fntrace does not follow it (give the directory itself)",
                ))
            }
            Err(Errno::NOTDIR) => return Err(ExportError::DirectoryNotEmpty(path.to_path_buf())),
            Err(e) => return Err(ExportError::io(path, "opening directory", e.into())),
        };
        let stat = rfs::fstat(&fd).map_err(|e| ExportError::io(path, "opening", e.into()))?;
        check_directory_owner(path, &stat)?;
        Ok(TraceDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The directory's path, as given.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn at(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The names in the directory (`.` and `..` left out).
    pub(crate) fn names(&self) -> Result<Vec<OsString>, ExportError> {
        let io = |e: Errno| ExportError::io(&self.path, "reading directory", e.into());
        let mut names = Vec::new();
        for entry in rfs::Dir::read_from(&self.fd).map_err(io)? {
            let name = entry.map_err(io)?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name));
            }
        }
        Ok(names)
    }

    /// Refuses a directory that is not empty.
    pub(crate) fn ensure_empty(&self) -> Result<(), ExportError> {
        if self.names()?.is_empty() {
            Ok(())
        } else {
            Err(ExportError::DirectoryNotEmpty(self.path.clone()))
        }
    }

    /// Whether `name` exists (whatever it is; a link is not followed).
    pub(crate) fn exists(&self, name: &str) -> bool {
        rfs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// Removes the file `name`: whether there was one.
    pub(crate) fn remove(&self, name: &str) -> Result<bool, ExportError> {
        match rfs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(ExportError::io(self.at(name), "removing", e.into())),
        }
    }

    /// Creates the file `name`, which must not exist (not even as a link).
    pub(crate) fn create_new(&self, name: &str) -> Result<File, ExportError> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rfs::openat(&self.fd, name, flags, Mode::from_raw_mode(FILE_MODE)) {
            Ok(fd) => Ok(File::from(fd)),
            Err(Errno::EXIST) => Err(refused(
                &self.at(name),
                "exists already, and fntrace did not just write it: it is neither followed \
                 nor overwritten (nothing was written to it)",
            )),
            Err(e) => Err(ExportError::io(self.at(name), "creating", e.into())),
        }
    }

    /// Creates the file `name` (which must not exist) holding `bytes`.
    pub(crate) fn write_new(&self, name: &str, bytes: &[u8]) -> Result<(), ExportError> {
        self.create_new(name)?
            .write_all(bytes)
            .map_err(|e| ExportError::io(self.at(name), "writing", e))
    }

    /// Makes `name` hold `bytes`, whole: a temporary file `.NAME.PID.new`,
    /// created exclusively (unique to this process: sessions of several
    /// processes replace the same names), renamed over `name`. A reader
    /// never sees half a file; what was at `name` (a link too) is replaced,
    /// not written through.
    pub(crate) fn replace(&self, name: &str, bytes: &[u8]) -> Result<(), ExportError> {
        let temporary = format!(".{name}.{}.new", std::process::id());
        let mut file = self.create_new(&temporary)?;
        let written = file.write_all(bytes);
        drop(file);
        let renamed = written
            .map_err(|e| ExportError::io(self.at(&temporary), "writing", e))
            .and_then(|()| {
                rfs::renameat(&self.fd, &*temporary, &self.fd, name)
                    .map_err(|e| ExportError::io(self.at(name), "replacing", e.into()))
            });
        if renamed.is_err() {
            // This process made the temporary file a moment ago.
            let _ = rfs::unlinkat(&self.fd, &*temporary, AtFlags::empty());
        }
        renamed
    }

    /// Opens `name` to append to it, creating it if it does not exist. It
    /// must be a regular file of the process's user, not a link.
    pub(crate) fn append_open(&self, name: &str) -> Result<File, ExportError> {
        self.open_own(name, OFlags::WRONLY | OFlags::APPEND, "appending to")
    }

    /// Opens `name` to read and write (a lock file), creating it if it does
    /// not exist; as [`TraceDir::append_open`] checks it.
    pub(crate) fn open_lock(&self, name: &str) -> Result<File, ExportError> {
        self.open_own(name, OFlags::RDWR, "opening")
    }

    fn open_own(&self, name: &str, access: OFlags, action: &str) -> Result<File, ExportError> {
        let path = self.at(name);
        // O_NONBLOCK: opening a FIFO to write would wait for a reader.
        let flags = access | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rfs::openat(&self.fd, name, flags, Mode::from_raw_mode(FILE_MODE)) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => {
                return Err(refused(
                    &path,
                    &format!("is a symbolic link: fntrace does not follow it ({action} it)"),
                ))
            }
            Err(Errno::NXIO) => return Err(not_regular(&path, "a FIFO")),
            Err(e) => return Err(ExportError::io(&path, "opening", e.into())),
        };
        let stat = rfs::fstat(&fd).map_err(|e| ExportError::io(&path, "opening", e.into()))?;
        check_regular(&path, &stat)?;
        let euid = rustix::process::geteuid().as_raw();
        if stat.st_uid != euid {
            return Err(refused(
                &path,
                &format!(
                    "is owned by uid {}, not by this process's user (uid {euid}): fntrace \
                     writes only into its own files",
                    stat.st_uid
                ),
            ));
        }
        // Back to blocking writes (no difference for a regular file, but
        // nothing is left to chance).
        rfs::fcntl_setfl(&fd, access & OFlags::APPEND)
            .map_err(|e| ExportError::io(&path, "opening", e.into()))?;
        Ok(File::from(fd))
    }

    /// The contents of the regular file `name`, or `None` if there is none;
    /// anything else at `name` is refused (see [`open_regular`]).
    pub(crate) fn read(&self, name: &str) -> Result<Option<Vec<u8>>, ExportError> {
        let path = self.at(name);
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        match rfs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => read_regular(&path, fd).map(Some),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::LOOP) => Err(symlink_refused(&path)),
            Err(e) => Err(ExportError::io(&path, "opening", e.into())),
        }
    }
}

/// Opens the file of a trace at `path` to read it, or `None` if there is
/// none. Refuses a link (not followed) and anything but a regular file (a
/// FIFO, a device, a socket, a directory), without blocking: `O_NONBLOCK`
/// keeps a FIFO's open from waiting for a writer.
pub(crate) fn open_regular(path: &Path) -> Result<Option<File>, ExportError> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rfs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => return Err(symlink_refused(path)),
        Err(e) => return Err(ExportError::io(path, "opening", e.into())),
    };
    let stat = rfs::fstat(&fd).map_err(|e| ExportError::io(path, "opening", e.into()))?;
    check_regular(path, &stat)?;
    // Reads block as usual (a regular file's never wait anyway).
    rfs::fcntl_setfl(&fd, OFlags::empty())
        .map_err(|e| ExportError::io(path, "opening", e.into()))?;
    Ok(Some(File::from(fd)))
}

/// [`open_regular`], read whole; a missing file is an error.
pub(crate) fn read_regular_file(path: &Path) -> Result<Vec<u8>, ExportError> {
    match open_regular(path)? {
        Some(file) => read_regular(path, file.into()),
        None => Err(ExportError::io(
            path,
            "opening",
            std::io::ErrorKind::NotFound.into(),
        )),
    }
}

fn read_regular(path: &Path, fd: OwnedFd) -> Result<Vec<u8>, ExportError> {
    use std::io::Read;
    let stat = rfs::fstat(&fd).map_err(|e| ExportError::io(path, "opening", e.into()))?;
    check_regular(path, &stat)?;
    let mut data = Vec::new();
    File::from(fd)
        .read_to_end(&mut data)
        .map_err(|e| ExportError::io(path, "reading", e))?;
    Ok(data)
}

fn check_regular(path: &Path, stat: &Stat) -> Result<(), ExportError> {
    let what = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => return Ok(()),
        FileType::Fifo => "a FIFO",
        FileType::Directory => "a directory",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Socket => "a socket",
        _ => "not a file",
    };
    Err(not_regular(path, what))
}

fn not_regular(path: &Path, what: &str) -> ExportError {
    refused(
        path,
        &format!("is {what}, not a regular file: fntrace reads and writes only regular files in a trace directory"),
    )
}

fn symlink_refused(path: &Path) -> ExportError {
    refused(
        path,
        "is a symbolic link: fntrace does not follow links in a trace directory",
    )
}

/// Refuses a directory another user could plant names in.
fn check_directory_owner(path: &Path, stat: &Stat) -> Result<(), ExportError> {
    let euid = rustix::process::geteuid().as_raw();
    let egid = rustix::process::getegid().as_raw();
    let mode = stat.st_mode & 0o7777;
    let why = if stat.st_uid != euid {
        format!(
            "is owned by uid {}, not by this process's user (uid {euid})",
            stat.st_uid
        )
    } else if mode & 0o002 != 0 {
        format!("is writable by every user (mode {mode:04o})")
    } else if mode & 0o020 != 0 && stat.st_gid != egid {
        format!(
            "is writable by group {} (mode {mode:04o}), not this process's group",
            stat.st_gid
        )
    } else {
        return Ok(());
    };
    Err(refused(
        path,
        &format!(
            "{why}: another user could plant files in it; fntrace writes a trace only into a \
             directory no one else can write (give a new path, fntrace makes it; nothing was \
             written)"
        ),
    ))
}

fn is_symlink(dir: impl rustix::fd::AsFd, path: &Path) -> bool {
    rfs::statat(dir, path, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Symlink)
}

fn refused(path: &Path, why: &str) -> ExportError {
    ExportError::Refused {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// Checks that `dir` can take a new trace, as [`write_uftrace_dir`] and
/// [`UftraceStream::create`] check it when they start: the directory is
/// made if it does not exist (mode 0755 less the umask); an existing one
/// must be empty, be the process's user's, and be writable by no other
/// user; a link is not followed. The error is one line saying why.
///
/// [`write_uftrace_dir`]: super::write_uftrace_dir
/// [`UftraceStream::create`]: super::UftraceStream::create
pub fn prepare_output_dir(dir: &Path) -> Result<(), ExportError> {
    TraceDir::open_output(dir)?.ensure_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fresh directory under the temporary one, removed at the end.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let path =
                std::env::temp_dir().join(format!("fntrace-dirfd-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Scratch(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_made_directory_is_not_writable_by_others_and_files_are_made_new() {
        let scratch = Scratch::new("made");
        let dir = TraceDir::open_output(&scratch.0.join("a/b")).unwrap();
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o022, 0, "{mode:o}");
        dir.write_new("info", b"one").unwrap();
        let err = dir.write_new("info", b"two").unwrap_err();
        assert!(err.to_string().contains("exists already"), "{err}");
        assert_eq!(std::fs::read(dir.path().join("info")).unwrap(), b"one");
        dir.replace("info", b"three").unwrap();
        assert_eq!(dir.read("info").unwrap().unwrap(), b"three");
        // The temporary file went with the rename.
        assert_eq!(dir.names().unwrap(), vec![OsString::from("info")]);
    }

    #[test]
    fn a_link_or_a_fifo_is_never_opened_to_append_or_read() {
        let scratch = Scratch::new("special");
        let dir = TraceDir::open_output(&scratch.0.join("t")).unwrap();
        let target = scratch.0.join("target");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("1.dat")).unwrap();
        let err = dir.append_open("1.dat").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let err = dir.read("1.dat").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");

        rfs::mknodat(
            CWD,
            dir.path().join("2.dat"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // Neither blocks: no reader or writer is ever on the other end.
        let err = dir.append_open("2.dat").unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
        let err = dir.read("2.dat").unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
        let err = open_regular(&dir.path().join("2.dat")).unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
        assert!(open_regular(&dir.path().join("none")).unwrap().is_none());
    }

    #[test]
    fn a_link_as_the_output_directory_is_refused() {
        let scratch = Scratch::new("dirlink");
        std::fs::create_dir(scratch.0.join("real")).unwrap();
        std::os::unix::fs::symlink(scratch.0.join("real"), scratch.0.join("link")).unwrap();
        let err = TraceDir::open_output(&scratch.0.join("link")).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        std::fs::write(scratch.0.join("file"), b"x").unwrap();
        let err = TraceDir::open_output(&scratch.0.join("file")).unwrap_err();
        assert!(matches!(err, ExportError::DirectoryNotEmpty(_)), "{err}");
    }

    #[test]
    fn a_directory_writable_by_every_user_or_another_group_is_refused() {
        let scratch = Scratch::new("modes");
        let path = scratch.0.join("open");
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = TraceDir::open_output(&path).unwrap_err();
        assert!(
            err.to_string()
                .contains("writable by every user (mode 0777)"),
            "{err}"
        );
        // Group-writable: accepted for the process's own group only.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o775)).unwrap();
        TraceDir::open_output(&path).unwrap();
        if rustix::process::geteuid().is_root() {
            let other = rustix::process::Gid::from_raw(65534);
            rfs::chown(&path, None, Some(other)).unwrap();
            let err = TraceDir::open_output(&path).unwrap_err();
            assert!(err.to_string().contains("writable by group 65534"), "{err}");
        }
    }
}
