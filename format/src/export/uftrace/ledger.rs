//! The ledger of processes in a recording fntrace streamed: each process
//! appends `start PID` to [`PROCESS_LEDGER`] when it starts its part, and
//! `end PID` once it has finished it (the runtime's `record::ledger`). A
//! process killed by SIGKILL runs no code that could say what it lost: its
//! start without an end is how `fntrace record` and the readers know that
//! its events after its last drain are missing, uncounted.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The ledger's name in a recording's directory.
pub const PROCESS_LEDGER: &str = ".fntrace-processes";

/// What a recording's ledger says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessLedger {
    /// Processes that started their part.
    pub started: usize,
    /// Processes that finished it.
    pub ended: usize,
}

impl ProcessLedger {
    /// Processes that started their part and did not finish it.
    pub fn unfinished(&self) -> usize {
        self.started.saturating_sub(self.ended)
    }
}

/// The ledger of the recording in `dir` (all zero without one: a
/// recording of uftrace's, or an older fntrace's). Read without
/// following a link or blocking on a FIFO put in its place.
pub fn process_ledger(dir: &Path) -> ProcessLedger {
    let flags = (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32;
    let mut text = String::new();
    let read = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(dir.join(PROCESS_LEDGER))
        .and_then(|mut file| match file.metadata()?.is_file() {
            true => file.read_to_string(&mut text),
            false => Ok(0),
        });
    if read.is_err() {
        return ProcessLedger::default();
    }
    let count = |word: &str| {
        (text.lines())
            .filter(|line| line.split(' ').next() == Some(word))
            .count()
    };
    ProcessLedger {
        started: count("start"),
        ended: count("end"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_without_an_end_are_unfinished() {
        let dir = std::env::temp_dir().join(format!("fntrace-ledger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(process_ledger(&dir), ProcessLedger::default());
        std::fs::write(
            dir.join(PROCESS_LEDGER),
            "start 10\nstart 11\nend 11\nstart 12\nstart 10\nend 10\n",
        )
        .unwrap();
        let ledger = process_ledger(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            (ledger.started, ledger.ended, ledger.unfinished()),
            (4, 2, 2)
        );
    }
}
