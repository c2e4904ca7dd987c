//! The end of a [`UftraceStream`]: each thread's records closed (after a
//! gap, a last lost record), a forked child's depths rebased, and the end
//! of a stream whose directory could not be written (a full file system):
//! the gaps and the note that say so.

use std::path::Path;

use super::super::super::dirfd::TraceDir;
use super::super::super::ExportError;
use super::super::format::{RECORD_SIZE, TYPE_ENTRY, TYPE_EXIT};
use super::super::sessions::settle_shared_files;
use super::super::stream_thread::free_reserve;
use super::{StreamTotals, UftraceStream};

impl UftraceStream {
    /// Ends a stream whose writing failed (an append or a flush returned
    /// an error: the file system is full, say) so that readers see the
    /// loss: with the reserve's space (see `RESERVE_FILE`), each thread of
    /// `lost` (tid, events not written since) gets a lost record with its
    /// count at the end of its file, its open calls closed just before it
    /// (as at any gap), and the session files are written with the
    /// recorder's note (which should say what failed). uftrace's `replay`
    /// and `report` and fntrace's show the lost records. Threads of `lost`
    /// that never reached the stream have no file to mark: only the note
    /// counts them.
    pub fn finish_incomplete(mut self, lost: &[(u32, u64)]) -> Result<StreamTotals, ExportError> {
        free_reserve(&self.dir);
        // Held records of new threads may not fit: the gaps and the note
        // matter more.
        let listed = self.list_new_threads();
        let mut out = Vec::new();
        for &(tid, count) in lost {
            let Some(thread) = self.threads.get_mut(&tid) else {
                continue;
            };
            if thread.cut {
                // Its file ends where the file system filled, its last
                // calls open: a lost record would not close them.
                continue;
            }
            out.clear();
            self.totals.closed_at_gaps += thread.write_gap(count, &mut out);
            self.totals.lost += count;
            thread.write(&self.dir, tid, &out)?;
            thread.file = None;
        }
        self.end_threads()?;
        self.write_session_files()?;
        listed?;
        Ok(self.totals())
    }

    /// The end of each thread's records, at the stream's end.
    pub(super) fn end_threads(&mut self) -> Result<(), ExportError> {
        // Threads that wrote records after a gap end with a lost record
        // (see `StreamThread::end_gap`).
        let mut out = Vec::new();
        for &tid in &self.order {
            let thread = self.threads.get_mut(&tid).expect("ordered threads exist");
            out.clear();
            if let Some(closed) = thread.end_gap(&mut out) {
                self.totals.closed_at_gaps += closed;
                thread.write(&self.dir, tid, &out)?;
                thread.file = None;
                self.totals.bytes += out.len() as u64;
                self.session_files_stale = true;
            }
        }
        Ok(())
    }

    /// In a forked child's session, at the end: the records of a thread
    /// that never returned into the outermost call it inherited from its
    /// parent (it left with `_exit`, or is still running) are moved up so
    /// that its shallowest is at depth 0. Read as they were written (starting below the
    /// parent's frames), uftrace takes the frames above the first record
    /// for calls of the child's, with no address, and `uftrace report`
    /// shows them as a `<0>` row (a call of no function, as long as the
    /// child ran). uftrace's own recordings escape it through the
    /// scheduler events it records with each task (its reader starts a
    /// task's frames at the first, at depth 0), which fntrace does not
    /// record. `uftrace replay` shows such a child from depth 0 either
    /// way. The exits of inherited calls it returned from (`fork`'s
    /// own, a library call, always: see [`push_forked`]) move up with the
    /// rest: uftrace's reader takes such an exit at depth 0 as it takes
    /// the same exit in its own recording, under the task's first
    /// scheduler event. A thread with a lost record keeps its depths.
    pub(super) fn rebase_inherited(&mut self) -> Result<(), ExportError> {
        for &tid in &self.order {
            let thread = self.threads.get_mut(&tid).expect("ordered threads exist");
            let shift = thread.min_depth;
            if shift == 0 || shift == u16::MAX || thread.records_at_gap.is_some() {
                continue;
            }
            let name = format!("{tid}.dat");
            let Some(mut bytes) = self.dir.read(&name)? else {
                continue;
            };
            rebase_records(&mut bytes, shift);
            thread.file = None;
            self.dir.replace(&name, &bytes)?;
        }
        Ok(())
    }
}

/// Records a full file system cut off (0 for any other error).
pub(super) fn cut_records(err: &ExportError) -> u64 {
    match err {
        ExportError::Full { unwritten, .. } => *unwritten,
        _ => 0,
    }
}

/// `err`, if the file system was full, with the events of the append that
/// were not written.
pub(super) fn with_unwritten(err: ExportError, unwritten: u64) -> ExportError {
    match err {
        ExportError::Full { path, source, .. } => ExportError::Full {
            path,
            unwritten,
            source,
        },
        other => other,
    }
}

/// Lowers the depth of every entry and exit record of `bytes` (a `.dat`
/// file's) by `shift` (records shallower than it stay at 0).
fn rebase_records(bytes: &mut [u8], shift: u16) {
    for chunk in bytes.chunks_exact_mut(RECORD_SIZE) {
        let mut word = [0u8; 8];
        word.copy_from_slice(&chunk[8..]);
        let word = u64::from_le_bytes(word);
        let kind = word & 3;
        if kind != TYPE_ENTRY && kind != TYPE_EXIT {
            continue;
        }
        let depth = (word >> DEPTH_SHIFT) & DEPTH_MASK;
        let depth = depth.saturating_sub(u64::from(shift));
        let word = (word & !(DEPTH_MASK << DEPTH_SHIFT)) | (depth << DEPTH_SHIFT);
        chunk[8..].copy_from_slice(&word.to_le_bytes());
    }
}

/// Where a record's depth lies in its second word (bits 6-15).
const DEPTH_SHIFT: u32 = 6;
const DEPTH_MASK: u64 = 0x3ff;

/// Completes the shared files (`info`, `task.txt`, `fntrace.txt`) of the
/// recording at `dir` once every process recording into it has ended: a
/// session that ended while another rebuilt them left its part to that
/// one, which may have been killed before it did. `fntrace record` calls
/// it after the program's end.
pub fn settle_recording(dir: &Path) -> Result<(), ExportError> {
    let dir = TraceDir::open_output(dir)?;
    free_reserve(&dir);
    settle_shared_files(&dir)
}
