//! Tests of the directory-descriptor layer: files made new or replaced
//! whole, links and FIFOs never followed or opened, a link anywhere in an
//! output path refused (with and without `openat2`), directories others
//! could write refused as the rules say.

use super::*;
use std::os::unix::fs::PermissionsExt;

/// A fresh directory under the temporary one, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("fntrace-dirfd-{tag}-{}", std::process::id()));
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
        rfs::CWD,
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

#[test]
fn a_link_anywhere_in_the_path_is_refused_and_nothing_is_made_beyond_it() {
    links_in_parents_refused("parents");
    // The same without openat2 (a kernel before 5.6, or a seccomp
    // filter that answers ENOSYS): every step an openat(O_NOFOLLOW).
    NO_OPENAT2.store(true, Ordering::Relaxed);
    links_in_parents_refused("parents-openat");
}

fn links_in_parents_refused(tag: &str) {
    let scratch = Scratch::new(tag);
    let real = scratch.0.join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, scratch.0.join("link")).unwrap();
    for path in ["link/t", "link/a/b/t", "link/../link/t"] {
        let err = TraceDir::open_output(&scratch.0.join(path)).unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "{} is a symbolic link",
                scratch.0.join("link").display()
            )),
            "{path}: {err}"
        );
        let err = OutputDir::open_or_make(&scratch.0.join(path)).unwrap_err();
        assert!(
            err.to_string().contains("is a symbolic link"),
            "{path}: {err}"
        );
    }
    assert!(std::fs::read_dir(&real).unwrap().next().is_none());
    // `..` is walked, not resolved: through a real directory it is fine.
    let dir = TraceDir::open_output(&scratch.0.join("real/../made/t")).unwrap();
    assert!(
        scratch.0.join("made/t").is_dir(),
        "{}",
        dir.path().display()
    );
}

#[test]
fn an_export_replaces_its_own_file_and_refuses_a_link_at_its_name() {
    let scratch = Scratch::new("replace");
    let target = scratch.0.join("target");
    std::fs::write(&target, b"keep").unwrap();
    std::os::unix::fs::symlink(&target, scratch.0.join("out.svg")).unwrap();
    let (dir, name) = OutputDir::of_file(&scratch.0.join("out.svg")).unwrap();
    let err = dir.replace(&name).unwrap_err();
    assert!(err.to_string().contains("is a symbolic link"), "{err}");
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");

    let (dir, name) = OutputDir::of_file(&scratch.0.join("new.svg")).unwrap();
    for bytes in [&b"one"[..], b"two"] {
        let mut replacement = dir.replace(&name).unwrap();
        replacement.file().write_all(bytes).unwrap();
        replacement.commit().unwrap();
        assert_eq!(std::fs::read(scratch.0.join("new.svg")).unwrap(), bytes);
    }
    // Dropped uncommitted: the temporary file goes, the file stays.
    let mut replacement = dir.replace(&name).unwrap();
    replacement.file().write_all(b"three").unwrap();
    drop(replacement);
    assert_eq!(std::fs::read(scratch.0.join("new.svg")).unwrap(), b"two");
    let mut names = dir.0.names().unwrap();
    names.sort();
    assert_eq!(names, ["new.svg", "out.svg", "target"].map(OsString::from));
    assert!(OutputDir::of_file(&scratch.0.join("dir/")).is_err());
}

#[test]
fn another_users_open_directory_is_neither_passed_through_nor_written_in() {
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let scratch = Scratch::new("theirs");
    let sticky = scratch.0.join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // Root's sticky directory (as /tmp): fine to make things in.
    OutputDir::open_or_make(&sticky.join("mine")).unwrap();
    let theirs = sticky.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    let nobody = rustix::process::Uid::from_raw(65534);
    rfs::chown(&theirs, Some(nobody), None).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = OutputDir::open_or_make(&theirs.join("t")).unwrap_err();
    assert!(
        err.to_string().contains("is owned by uid 65534, neither"),
        "{err}"
    );
    let err = OutputDir::open(&theirs).unwrap_err();
    assert!(err.to_string().contains("is owned by uid 65534"), "{err}");
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = TraceDir::open_output(&theirs.join("a/t")).unwrap_err();
    assert!(
        err.to_string().contains("writable by others (mode 0777)"),
        "{err}"
    );
    assert!(std::fs::read_dir(&theirs).unwrap().next().is_none());
    // Root's directory open to all without the sticky bit: nothing is
    // made in it.
    let open = scratch.0.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = OutputDir::open_or_make(&open.join("t")).unwrap_err();
    assert!(err.to_string().contains("without the sticky bit"), "{err}");
}
