//! Helpers shared by the tools' integration tests.
// Each test binary uses some of these.
#![allow(dead_code)]

use std::path::PathBuf;

/// A directory under the system's temporary directory, named after the
/// test binary, `tag` and the process id, removed (with its contents) when
/// dropped. Whatever an earlier run left there is removed first.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Makes the directory.
    pub fn new(tag: &str) -> Self {
        let dir = Self::unmade(tag);
        std::fs::create_dir_all(&dir.0).unwrap();
        dir
    }

    /// Only the name: for the program under test to create (an existing
    /// directory is not always an acceptable output).
    pub fn unmade(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "fntrace-{}-{tag}-{}",
            env!("CARGO_CRATE_NAME"),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
