//! `fntrace record -o DIR` deletes nothing it did not write and writes
//! into no directory another user could plant files in
//! (`docs/safe-writes.md`): an existing `DIR.old` that is not a recording fntrace wrote (a
//! directory of the user's, a file, uftrace's own recording) is left
//! byte for byte and the command refuses in one line; a recording in
//! `DIR.old` is replaced, and each move is said on stderr; an output
//! directory every user can write, or another user's, is refused before
//! the program runs.

use crate::common;

use common::native;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// `tests/c/family.c`'s sibling `tests/c/ctl_prog.c` would do as well; a
/// short `-pg` program of its own keeps this test quick.
fn build_program(dir: &Path) -> PathBuf {
    let source = dir.join("prog.c");
    std::fs::write(
        &source,
        "__attribute__((noinline)) int leaf(int x) { return x * 3; }\n\
         int main(void) { volatile int s = 0; for (int i = 0; i < 10; i++) s += leaf(i); return 0; }\n",
    )
    .unwrap();
    let program = dir.join("prog");
    native::gcc(&[
        "-pg".as_ref(),
        "-O0".as_ref(),
        "-o".as_ref(),
        program.as_os_str(),
        source.as_os_str(),
    ]);
    program
}

/// Every file under `dir` with its bytes, sorted: what must not change.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    if dir.is_file() {
        return vec![(dir.to_path_buf(), std::fs::read(dir).unwrap())];
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(snapshot(&path));
        } else {
            files.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    files.sort();
    files
}

/// Puts something at `rx.old`.
type MakeOld<'a> = dyn Fn(&Path) + 'a;

#[test]
fn an_old_directory_that_is_not_a_recording_is_never_deleted() {
    let base = common::temp_dir("record-old");
    std::fs::create_dir_all(&base).unwrap();
    let program = build_program(&base);
    let program = program.to_str().unwrap();

    let first = native::fntrace_record(&base, &["-o", "rx", program]);
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        native::stderr_of(&first)
    );
    assert!(base.join("rx/info").is_file());
    let recording = snapshot(&base.join("rx"));

    // rx.old: the user's own directory, a file, uftrace's own recording.
    let uftrace_recording = native::repo().join("tools/tests/data/uftrace-threads");
    let unrelated: [(&str, &MakeOld); 3] = [
        ("a directory of the user's", &|old| {
            std::fs::create_dir_all(old.join("sub")).unwrap();
            std::fs::write(old.join("notes.txt"), "mine").unwrap();
            std::fs::write(old.join("sub/more.txt"), "mine too").unwrap();
        }),
        ("a file", &|old| {
            std::fs::write(old, "a file named rx.old").unwrap()
        }),
        ("a recording uftrace wrote", &|old| {
            std::fs::create_dir_all(old).unwrap();
            for entry in std::fs::read_dir(&uftrace_recording).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), old.join(entry.file_name())).unwrap();
            }
        }),
    ];
    let old = base.join("rx.old");
    for (what, make) in unrelated {
        make(&old);
        let before = snapshot(&old);
        let output = native::fntrace_record(&base, &["-o", "rx", program]);
        let says = native::stderr_of(&output);
        assert_eq!(output.status.code(), Some(2), "{what}: {says}");
        assert!(
            says.contains("fntrace deletes nothing it did not write") && says.lines().count() == 1,
            "{what}: {says}"
        );
        assert_eq!(snapshot(&old), before, "{what}: rx.old was changed");
        assert_eq!(snapshot(&base.join("rx")), recording, "{what}: rx changed");
        if old.is_dir() {
            std::fs::remove_dir_all(&old).unwrap();
        } else {
            std::fs::remove_file(&old).unwrap();
        }
    }

    // No rx.old: rx moves there, and says so.
    let output = native::fntrace_record(&base, &["-o", "rx", program]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        native::stderr_of(&output)
    );
    let said = format!(
        "fntrace record: moved the previous recording {} to {}\n",
        base.join("rx").display(),
        old.display()
    );
    assert!(
        native::stderr_of(&output).starts_with(&said),
        "{}",
        native::stderr_of(&output)
    );
    assert_eq!(snapshot(&old).len(), recording.len());
    // rx.old is a recording fntrace wrote: replaced by rx, said so.
    let newer = snapshot(&base.join("rx"));
    let output = native::fntrace_record(&base, &["-o", "rx", program]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        native::stderr_of(&output)
    );
    assert!(
        native::stderr_of(&output).contains("(in place of the older recording there)"),
        "{}",
        native::stderr_of(&output)
    );
    let moved: Vec<Vec<u8>> = snapshot(&old).into_iter().map(|(_, b)| b).collect();
    let newer: Vec<Vec<u8>> = newer.into_iter().map(|(_, b)| b).collect();
    assert_eq!(moved, newer, "rx.old is not the previous rx");
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn an_output_directory_others_can_write_is_refused_before_the_program_runs() {
    let base = common::temp_dir("record-shared");
    std::fs::create_dir_all(&base).unwrap();
    let shared = base.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let marker = base.join("ran");
    let output = native::fntrace_record(
        &base,
        &["-o", "shared", "--force", "touch", marker.to_str().unwrap()],
    );
    let says = native::stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{says}");
    assert!(
        says.contains("is writable by every user") && says.lines().count() == 1,
        "{says}"
    );
    assert!(!marker.exists(), "the program ran");
    assert_eq!(std::fs::read_dir(&shared).unwrap().count(), 0);

    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = base.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let output = native::fntrace_record(
            &base,
            &["-o", "theirs", "--force", "touch", marker.to_str().unwrap()],
        );
        let says = native::stderr_of(&output);
        assert_eq!(output.status.code(), Some(2), "{says}");
        assert!(says.contains("is owned by uid 65534"), "{says}");
        assert!(!marker.exists(), "the program ran");
        assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
    }
    std::fs::remove_dir_all(&base).unwrap();
}
