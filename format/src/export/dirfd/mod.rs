//! Output paths opened as directory descriptors, so that writing a trace,
//! an export or a snapshot never follows a link or overwrites a file
//! another user planted, and reading a trace never opens a FIFO or a
//! device.
//!
//! The rules (a root service may write where other users can reach; the
//! same rules are in `docs/safe-writes.md`):
//!
//! - **The walk.** A path is opened component by component from a trusted
//!   start: `/` for an absolute path, the current directory for a relative
//!   one. Each step is `openat2` with `RESOLVE_NO_SYMLINKS` (or, where the
//!   kernel has no `openat2`, `openat` with `O_NOFOLLOW|O_DIRECTORY`)
//!   relative to the descriptor of the directory before: a symbolic link
//!   anywhere in the path, a parent included, is refused, never followed.
//!   Every file and directory is then made relative to a descriptor
//!   (`openat`, `mkdirat`, `renameat`), never by a path that could be
//!   swapped meanwhile.
//! - **Passing through.** Every directory the walk passes through (the
//!   start and each parent, `/` and `/tmp` included) is refused when
//!   another user than root and the process's effective one owns it and
//!   it is writable by every user or by a group not the process's: that
//!   user could swap what lies below it.
//! - **Making something in a directory.** A directory fntrace makes a file
//!   or a directory in (a missing parent included, `mkdir -p` style) must
//!   be owned by the process's effective user or by root, and must not be
//!   writable by every user, nor by a group other than the process's
//!   effective one, unless it has the sticky bit (then no one else can
//!   rename or remove what fntrace made there; `/tmp` qualifies). Another
//!   user's directory is refused whatever its mode.
//! - **A trace directory** (a recording, a snapshot, a dump) is stricter:
//!   an existing one is refused when it is owned by another user than the
//!   process's effective one, writable by every user (sticky or not), or
//!   writable by a group that is not the process's. A directory fntrace
//!   makes is mode 0755 (less what the umask takes), so it is never one of
//!   those.
//! - **Files.** A file is created with `O_CREAT|O_EXCL|O_NOFOLLOW`
//!   (temporary names included): a name that exists, a link above all,
//!   makes the write fail rather than follow it. A file is replaced whole
//!   by an exclusively created temporary file renamed over it (the rename
//!   replaces a name, it never writes through a link); an export or a
//!   `--save` replaces only a regular file of the process's user, and
//!   refuses a link or another user's file at its name. The one file
//!   appended to (a thread's `.dat`, which a program continues after an
//!   `exec`) must be a regular file of the process's user.
//! - Nothing is deleted but the temporary file of a failed replacement,
//!   and scratch files, which this process created (by descriptor).
//! - Readers open trace files with `O_NONBLOCK|O_NOFOLLOW` and refuse
//!   anything that is not a regular file ([`open_regular`]): a FIFO in
//!   place of a `.dat` would otherwise block the open forever.
//!
//! Every refusal is one line naming the path (the component at fault) and
//! why; nothing was written when one is given.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
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
        let fd = walk(path, Walk::Make)?;
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

    /// Refuses to replace `name` if it is a link, not a regular file, or
    /// another user's file; a missing `name` is fine.
    fn check_replaceable(&self, name: &str) -> Result<(), ExportError> {
        let path = self.at(name);
        let stat = match rfs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(ExportError::io(&path, "opening", e.into())),
        };
        let euid = rustix::process::geteuid().as_raw();
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => Err(refused(
                &path,
                "is a symbolic link: fntrace neither writes through it nor replaces it \
                 (remove it or name another file; nothing was written)",
            )),
            FileType::RegularFile if stat.st_uid != euid => Err(refused(
                &path,
                &format!(
                    "is owned by uid {}, not by this process's user (uid {euid}): fntrace \
                     replaces only its own files (nothing was written)",
                    stat.st_uid
                ),
            )),
            FileType::RegularFile => Ok(()),
            _ => check_regular(&path, &stat),
        }
    }

    /// A scratch file, read and written, unlinked at once.
    fn scratch_file(&self) -> Result<File, ExportError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            ".fntrace-spool-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let flags =
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rfs::openat(&self.fd, &*name, flags, Mode::from_raw_mode(0o600))
            .map_err(|e| ExportError::io(self.at(&name), "creating scratch file", e.into()))?;
        rfs::unlinkat(&self.fd, &*name, AtFlags::empty())
            .map_err(|e| ExportError::io(self.at(&name), "removing", e.into()))?;
        Ok(File::from(fd))
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

/// What [`walk`] does with a directory of the path that does not exist.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// Makes it (mode 0755 less the umask), as `mkdir -p` does.
    Make,
    /// Fails.
    Existing,
}

/// Set once `openat2` is found missing (`ENOSYS`): every step is then an
/// `openat` with `O_NOFOLLOW`.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Opens `name` in `dir` without following a link, whatever the kernel.
fn open_step(dir: BorrowedFd<'_>, name: &OsStr, flags: OFlags) -> Result<OwnedFd, Errno> {
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        match rfs::openat2(dir, name, flags, Mode::empty(), resolve) {
            Err(Errno::NOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
            other => return other,
        }
    }
    rfs::openat(dir, name, flags | OFlags::NOFOLLOW, Mode::empty())
}

/// Opens the directory `path` as the module's documentation says: from
/// `/` or the current directory, one component at a time, no link
/// followed, every directory passed through checked, a missing one made
/// (when `how` says so) only inside a directory fit to make things in.
/// The directory itself is returned unchecked (open for reading): each
/// caller applies its own rule to it.
fn walk(path: &Path, how: Walk) -> Result<OwnedFd, ExportError> {
    if path.as_os_str().is_empty() {
        return Err(ExportError::EmptyPath);
    }
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            Component::ParentDir => Some(OsStr::new("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    let (start, mut shown) = if path.is_absolute() {
        ("/", PathBuf::from("/"))
    } else {
        (".", PathBuf::new())
    };
    let path_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let read_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd = rfs::open(start, path_flags, Mode::empty())
        .map_err(|e| ExportError::io(start, "opening directory", e.into()))?;
    if names.is_empty() {
        return rfs::openat(&fd, ".", read_flags, Mode::empty())
            .map_err(|e| ExportError::io(path, "opening directory", e.into()));
    }
    for (i, name) in names.iter().enumerate() {
        let here =
            rfs::fstat(&fd).map_err(|e| ExportError::io(shown_dir(&shown), "opening", e.into()))?;
        check_passed_through(&shown, &here)?;
        let last = i + 1 == names.len();
        let flags = if last { read_flags } else { path_flags };
        let next = shown.join(name);
        let opened = match open_step(fd.as_fd(), name, flags) {
            Err(Errno::NOENT) if how == Walk::Make && *name != ".." => {
                check_making_in(&shown, &here)?;
                match rfs::mkdirat(&fd, *name, Mode::from_raw_mode(DIR_MODE)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(ExportError::io(&next, "creating directory", e.into())),
                }
                open_step(fd.as_fd(), name, flags)
            }
            other => other,
        };
        fd = match opened {
            Ok(opened) => opened,
            Err(_) if is_symlink(&fd, Path::new(name)) => {
                return Err(refused(
                    &next,
                    "is a symbolic link: fntrace follows no link on the way to what it writes \
                     (give the real path; nothing was written)",
                ));
            }
            Err(Errno::NOTDIR) if last => return Err(ExportError::DirectoryNotEmpty(next)),
            Err(Errno::NOTDIR) => {
                return Err(refused(&next, "is not a directory (nothing was written)"))
            }
            Err(e) => return Err(ExportError::io(&next, "opening directory", e.into())),
        };
        shown = next;
    }
    Ok(fd)
}

/// How messages name the directory `shown` (empty: where the walk began).
fn shown_dir(shown: &Path) -> &Path {
    if shown.as_os_str().is_empty() {
        Path::new(".")
    } else {
        shown
    }
}

/// Another user's directory that others can write: the walk does not pass
/// through it.
fn check_passed_through(shown: &Path, stat: &Stat) -> Result<(), ExportError> {
    let euid = rustix::process::geteuid().as_raw();
    let egid = rustix::process::getegid().as_raw();
    let mode = stat.st_mode & 0o7777;
    if stat.st_uid == euid || stat.st_uid == 0 {
        return Ok(());
    }
    let writable = mode & 0o002 != 0 || (mode & 0o020 != 0 && stat.st_gid != egid);
    if !writable {
        return Ok(());
    }
    Err(refused(
        shown_dir(shown),
        &format!(
            "is owned by uid {} and writable by others (mode {mode:04o}): they could swap what \
             lies below it, so fntrace does not pass through it (nothing was written)",
            stat.st_uid
        ),
    ))
}

/// Refuses a directory fntrace should not make a file or directory in (see
/// the module's documentation).
fn check_making_in(shown: &Path, stat: &Stat) -> Result<(), ExportError> {
    let euid = rustix::process::geteuid().as_raw();
    let egid = rustix::process::getegid().as_raw();
    let mode = stat.st_mode & 0o7777;
    let sticky = mode & 0o1000 != 0;
    let why = if stat.st_uid != euid && stat.st_uid != 0 {
        format!(
            "is owned by uid {}, neither this process's user (uid {euid}) nor root",
            stat.st_uid
        )
    } else if mode & 0o002 != 0 && !sticky {
        format!("is writable by every user without the sticky bit (mode {mode:04o})")
    } else if mode & 0o020 != 0 && stat.st_gid != egid && !sticky {
        format!(
            "is writable by group {} (mode {mode:04o}), not this process's group, without \
             the sticky bit",
            stat.st_gid
        )
    } else {
        return Ok(());
    };
    Err(refused(
        shown_dir(shown),
        &format!(
            "{why}: another user could plant or swap names in it; fntrace makes nothing there \
             (nothing was written)"
        ),
    ))
}

/// A directory fntrace writes files into: the parent of an export or of a
/// saved profile, or of the snapshot directories the flight recorder's
/// triggers make. Opened one component at a time from `/` (or the
/// current directory), no link followed anywhere in its path, no other
/// user's open directory passed through; it must be fit to make things in
/// (owned by this process's user or root; writable by no one else unless
/// sticky). The rules: `docs/safe-writes.md`.
#[derive(Debug)]
pub struct OutputDir(TraceDir);

impl OutputDir {
    /// Opens the existing directory `path`.
    pub fn open(path: &Path) -> Result<OutputDir, ExportError> {
        OutputDir::opened(path, Walk::Existing)
    }

    /// Opens the directory `path`, making it and its missing parents
    /// (mode 0755 less the umask) as `mkdir -p` does.
    pub fn open_or_make(path: &Path) -> Result<OutputDir, ExportError> {
        OutputDir::opened(path, Walk::Make)
    }

    fn opened(path: &Path, how: Walk) -> Result<OutputDir, ExportError> {
        let fd = walk(path, how)?;
        let stat = rfs::fstat(&fd).map_err(|e| ExportError::io(path, "opening", e.into()))?;
        check_making_in(path, &stat)?;
        Ok(OutputDir(TraceDir {
            fd,
            path: path.to_path_buf(),
        }))
    }

    /// The directory of `file` (the current one for a bare name), opened
    /// as [`OutputDir::open`] does, and `file`'s name in it.
    pub fn of_file(file: &Path) -> Result<(OutputDir, String), ExportError> {
        let name = file
            .file_name()
            .filter(|_| !file.as_os_str().as_encoded_bytes().ends_with(b"/"))
            .and_then(OsStr::to_str)
            .ok_or_else(|| {
                refused(
                    file,
                    "does not end in a file name fntrace can write (nothing was written)",
                )
            })?;
        let parent = match file.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        Ok((OutputDir::open(parent)?, name.to_string()))
    }

    /// The directory's path, as given.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Makes the directory `name` in it (mode 0755 less the umask) and
    /// opens it for a trace; `None` if the name is taken (by anything, a
    /// link too, which is left alone).
    pub fn make_new_dir(&self, name: &str) -> Result<Option<TraceOutput>, ExportError> {
        let path = self.0.at(name);
        match rfs::mkdirat(&self.0.fd, name, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) => {}
            Err(Errno::EXIST) => return Ok(None),
            Err(e) => return Err(ExportError::io(&path, "creating directory", e.into())),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rfs::openat(&self.0.fd, name, flags, Mode::empty())
            .map_err(|e| ExportError::io(&path, "opening directory", e.into()))?;
        let stat = rfs::fstat(&fd).map_err(|e| ExportError::io(&path, "opening", e.into()))?;
        check_directory_owner(&path, &stat)?;
        Ok(Some(TraceOutput(TraceDir { fd, path })))
    }

    /// Creates the file `name`, which must not exist (not even as a link),
    /// holding `bytes`.
    pub fn write_new(&self, name: &str, bytes: &[u8]) -> Result<(), ExportError> {
        self.0.write_new(name, bytes)
    }

    /// Removes `made`, the directory `name` it made ([`OutputDir::make_new_dir`])
    /// and whatever files were written into it: a trace that could not be
    /// written whole must not be read as one. Names are removed through
    /// the descriptors (no link followed); a subdirectory someone made in
    /// it meanwhile is left, and so is `made` then.
    pub fn discard(&self, name: &str, made: TraceOutput) -> Result<(), ExportError> {
        for entry in made.0.names()? {
            if let Some(entry) = entry.to_str() {
                made.0.remove(entry)?;
            }
        }
        drop(made);
        rfs::unlinkat(&self.0.fd, name, AtFlags::REMOVEDIR)
            .map_err(|e| ExportError::io(self.0.at(name), "removing", e.into()))
    }

    /// Starts replacing the file `name` whole: what is written to the
    /// returned [`Replacement`] goes to a temporary file, created
    /// exclusively, that [`Replacement::commit`] renames over `name`.
    /// Refused (nothing written) if `name` is a symbolic link, is not a
    /// regular file, or is another user's file.
    pub fn replace(&self, name: &str) -> Result<Replacement<'_>, ExportError> {
        self.0.check_replaceable(name)?;
        let temporary = format!(".{name}.{}.new", std::process::id());
        let file = self.0.create_new(&temporary)?;
        Ok(Replacement {
            dir: &self.0,
            temporary,
            name: name.to_string(),
            file: Some(file),
        })
    }

    /// A scratch file in it, read and written, already unlinked: it goes
    /// when closed.
    pub fn scratch_file(&self) -> Result<File, ExportError> {
        self.0.scratch_file()
    }
}

impl AsFd for OutputDir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.fd.as_fd()
    }
}

/// A trace directory fntrace has just made ([`OutputDir::make_new_dir`]):
/// a trace ([`write_uftrace_dir_into`](crate::export::write_uftrace_dir_into))
/// and files are written into it by its descriptor.
#[derive(Debug)]
pub struct TraceOutput(pub(crate) TraceDir);

impl TraceOutput {
    /// The directory's path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Creates the file `name`, which must not exist (not even as a link),
    /// holding `bytes`.
    pub fn write_new(&self, name: &str, bytes: &[u8]) -> Result<(), ExportError> {
        self.0.write_new(name, bytes)
    }
}

/// A file being replaced whole ([`OutputDir::replace`]): written to a
/// temporary file; [`Replacement::commit`] renames it over the name, and
/// dropping it uncommitted removes the temporary file.
#[derive(Debug)]
pub struct Replacement<'a> {
    dir: &'a TraceDir,
    temporary: String,
    name: String,
    file: Option<File>,
}

impl Replacement<'_> {
    /// The temporary file, to write to.
    pub fn file(&mut self) -> &mut File {
        self.file
            .as_mut()
            .expect("a replacement's file is there until it is committed")
    }

    /// Renames the temporary file over the name.
    pub fn commit(mut self) -> Result<(), ExportError> {
        drop(self.file.take());
        let renamed = rfs::renameat(&self.dir.fd, &*self.temporary, &self.dir.fd, &*self.name)
            .map_err(|e| ExportError::io(self.dir.at(&self.name), "replacing", e.into()));
        if renamed.is_ok() {
            self.temporary.clear();
        }
        renamed
    }
}

impl Drop for Replacement<'_> {
    fn drop(&mut self) {
        if !self.temporary.is_empty() {
            // This process made the temporary file.
            let _ = rfs::unlinkat(&self.dir.fd, &*self.temporary, AtFlags::empty());
        }
    }
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
mod tests;
