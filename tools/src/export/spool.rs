//! The calls of a whole trace in the order they began, each with its end,
//! kept in a scratch file rather than in memory: [`SpooledCalls`], from
//! which the Chrome JSON and the Perfetto protobuf are written.
//!
//! Both outputs list a thread's calls in the order they began, each with its
//! duration, which is only known once the call ends: an outermost call that
//! lasts the whole trace would hold every later call back. So a first pass
//! reads the events and writes one fixed-size record per call when it
//! begins, at the call's index, and fills in its end when it ends (still in
//! the write buffer, or in the file for the few calls that outlast a buffer);
//! the outputs are then written from the file, read in order. Memory is the
//! buffer, one entry per open call and one name per function.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::calls::{stream_calls, Began, CallEvent, Ended, Incomplete, NestedCall};
use super::chrome::{chrome_async_bytes, chrome_call_bytes, chrome_frame_bytes, json_string};
use super::ExportError;
use super::OutputDir;
use crate::analysis::{Future, FutureEnd, Futures};
use fntrace_format::analysis::pairing::entries_of_calls_running_at_start;
use fntrace_format::{EventSource, ThreadInfo};

/// Bytes of one call's record: function, start, end, parent (all u64),
/// depth (u16), how it began and ended (u8 each), padding.
const RECORD_BYTES: usize = 40;
/// `parent` of a call without one.
const NO_PARENT: u64 = u64::MAX;
/// Bytes written to the scratch file at a time.
const BUFFER_BYTES: usize = 1 << 20;

/// Which calls the Chrome and Perfetto exports write, and where they keep
/// their scratch file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallExportOptions {
    /// Leave out calls shorter than this (ns). A call never lasts longer
    /// than its caller, so the callers of the calls kept are kept.
    pub min_duration_ns: u64,
    /// Directory of the scratch file (about 40 bytes per call, removed when
    /// done); default: the system's temporary directory.
    pub scratch_dir: Option<PathBuf>,
}

/// One thread's part of the scratch file.
#[derive(Debug)]
pub(crate) struct SpooledThread {
    pub(crate) info: ThreadInfo,
    /// Index of its first record in the file.
    pub(crate) first_record: u64,
    /// Its records (every call, kept or not).
    pub(crate) records: u64,
    /// Events it lost while recording.
    pub(crate) lost: u64,
}

/// The calls of a trace, reconstructed as [`crate::export`] says, kept in a
/// scratch file in the order they began: the first pass of
/// [`write_chrome_json`](super::write_chrome_json) and
/// [`write_perfetto`](super::write_perfetto), and what a caller uses to know
/// the size of the Chrome JSON before writing it.
///
/// Both outputs list a thread's calls in the order they began, each with its
/// duration, known only when the call ends: an outermost call lasting the
/// whole trace would hold every later call back. So [`SpooledCalls::new`]
/// writes a 40-byte record per call when it begins and fills in its end
/// when it ends (in the write buffer, or in the file for the few calls that
/// outlast a buffer); the outputs are then written from the file, read in
/// order. Memory is a 1 MiB buffer, one entry per open call and one name per
/// function; the file (unlinked as soon as it is made) goes when this value
/// is dropped.
#[derive(Debug)]
pub struct SpooledCalls {
    /// The scratch file, already unlinked.
    file: File,
    pub(crate) pid: u32,
    pub(crate) exe: String,
    pub(crate) threads: Vec<SpooledThread>,
    /// Names of the functions of the calls kept.
    pub(crate) names: HashMap<usize, String>,
    pub(crate) min_duration_ns: u64,
    /// Calls kept.
    calls: u64,
    /// Size of the Chrome JSON of the calls kept.
    chrome_bytes: u64,
    /// What the calls lack (entries, exits) and the events lost.
    incomplete: Incomplete,
    /// The futures shown as async slices ([`add_futures`](Self::add_futures)).
    pub(crate) futures: Vec<AsyncSlice>,
}

/// A future as an async slice of the Chrome and Perfetto exports: from
/// its first poll's entry to the exit of its poll that returned `Ready`,
/// or, still pending, to the trace's last event.
#[derive(Clone, Debug)]
pub(crate) struct AsyncSlice {
    /// Unique in the trace (addresses are reused): 1, 2, ... in the
    /// order the futures were first polled.
    pub(crate) id: u64,
    /// The async function's name.
    pub(crate) name: String,
    pub(crate) future: Future,
    /// Where the slice ends (ns).
    pub(crate) end_ns: u64,
    /// Still pending when the recording ended.
    pub(crate) unfinished: bool,
}

impl SpooledCalls {
    /// Reads every thread of `source` (twice: a first pass finds the calls
    /// running when tracing started) and spools its calls.
    pub fn new<S: EventSource>(
        source: &S,
        options: &CallExportOptions,
    ) -> Result<SpooledCalls, ExportError>
    where
        S::Error: Into<ExportError>,
    {
        let dir = options
            .scratch_dir
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        let mut spool = PatchableFile::new(scratch_file(&dir)?, dir);
        let pid = source.pid();
        let exe = source.exe().to_string();
        let mut names: HashMap<usize, String> = HashMap::new();
        // JSON-escaped size of each name.
        let mut json_names: HashMap<usize, u64> = HashMap::new();
        let mut threads = Vec::new();
        let mut calls = 0u64;
        let mut chrome_bytes = 0u64;
        let mut incomplete = Incomplete::default();
        let mut failed = None;
        for (index, info) in source.threads().into_iter().enumerate() {
            let (made_up, _) = source
                .read_thread(index, |events| entries_of_calls_running_at_start(events))
                .map_err(Into::into)?;
            let first_record = spool.records;
            let tid = info.tid;
            let ((), lost) = source
                .read_thread(index, |events| {
                    stream_calls(events, made_up, |event| {
                        if failed.is_some() {
                            return;
                        }
                        let (index, call) = match event {
                            CallEvent::Opened(index, call) | CallEvent::Closed(index, call) => {
                                (index, call)
                            }
                        };
                        let offset = (first_record + index as u64) * RECORD_BYTES as u64;
                        let closed = matches!(event, CallEvent::Closed(..));
                        if closed {
                            incomplete.count(call);
                        }
                        if closed && call.duration() >= options.min_duration_ns {
                            calls += 1;
                            let name_bytes =
                                *json_names.entry(call.function).or_insert_with(|| {
                                    let name = source.name_of(call.function);
                                    let bytes = json_string(&name).len() as u64;
                                    names.insert(call.function, name);
                                    bytes
                                });
                            chrome_bytes += chrome_call_bytes(call, name_bytes, pid, tid);
                        }
                        let written = if closed {
                            spool.patch(offset, &encode(call))
                        } else {
                            spool.append(offset, &encode(call))
                        };
                        if let Err(e) = written {
                            failed = Some(e);
                        }
                    })
                })
                .map_err(Into::into)?;
            if let Some(e) = failed.take() {
                return Err(e);
            }
            threads.push(SpooledThread {
                info,
                first_record,
                records: spool.records - first_record,
                lost,
            });
        }
        spool.flush()?;
        let infos: Vec<&ThreadInfo> = threads.iter().map(|t| &t.info).collect();
        let lost = threads.iter().map(|t| t.lost).sum();
        incomplete.lost_events = lost;
        chrome_bytes += chrome_frame_bytes(pid, &exe, &infos, lost);
        Ok(SpooledCalls {
            file: spool.file,
            pid,
            exe,
            threads,
            names,
            min_duration_ns: options.min_duration_ns,
            calls,
            chrome_bytes,
            incomplete,
            futures: Vec::new(),
        })
    }

    /// Adds the futures of `linked` (of `source`, as
    /// [`futures_of`](crate::analysis::futures_of) linked them) as async
    /// slices: each future `Ready` or still pending at the end, of at least
    /// the minimum duration, is one slice across its polls, whichever
    /// threads they ran on. Dropped and panicked futures, and those first
    /// polled before the recording, are left out.
    pub fn add_futures<S: EventSource>(&mut self, source: &S, linked: &Futures) {
        let mut names: HashMap<usize, String> = HashMap::new();
        for future in &linked.futures {
            let (end_ns, unfinished) = match future.end {
                FutureEnd::Ready => (future.end_ns, false),
                FutureEnd::Pending => (linked.last_ns.max(future.end_ns), true),
                _ => continue,
            };
            if end_ns - future.start_ns < self.min_duration_ns {
                continue;
            }
            let name = names
                .entry(future.function)
                .or_insert_with(|| source.name_of(future.function));
            let slice = AsyncSlice {
                id: self.futures.len() as u64 + 1,
                name: name.clone(),
                future: future.clone(),
                end_ns,
                unfinished,
            };
            self.chrome_bytes += chrome_async_bytes(&slice, self.pid);
            self.futures.push(slice);
        }
    }

    /// Futures shown as async slices.
    pub fn futures(&self) -> usize {
        self.futures.len()
    }

    /// What the outputs have to make up: events lost while recording,
    /// calls without an entry or an exit (all calls, kept or not).
    pub fn incomplete(&self) -> Incomplete {
        self.incomplete
    }

    /// Calls kept (all, or those of at least the minimum duration).
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// The exact size in bytes of the Chrome JSON
    /// [`write_chrome_json`](Self::write_chrome_json) writes.
    pub fn chrome_json_bytes(&self) -> u64 {
        self.chrome_bytes
    }

    /// Events lost while recording, all threads.
    pub fn lost(&self) -> u64 {
        self.threads.iter().map(|t| t.lost).sum()
    }

    /// The calls kept of thread `index`, in the order they began, each with
    /// its index among the thread's calls (parents refer to these).
    pub(crate) fn thread_calls(
        &self,
        index: usize,
    ) -> Result<impl Iterator<Item = Result<(usize, NestedCall), ExportError>> + '_, ExportError>
    {
        let thread = &self.threads[index];
        let mut file = &self.file;
        let scratch = || PathBuf::from("(scratch file)");
        file.seek(SeekFrom::Start(thread.first_record * RECORD_BYTES as u64))
            .map_err(|e| ExportError::io(scratch(), "reading", e))?;
        let mut reader = BufReader::with_capacity(BUFFER_BYTES, file);
        let min = self.min_duration_ns;
        Ok((0..thread.records as usize)
            .map(move |index| {
                let mut bytes = [0u8; RECORD_BYTES];
                reader
                    .read_exact(&mut bytes)
                    .map_err(|e| ExportError::io(scratch(), "reading", e))?;
                Ok((index, decode(&bytes)))
            })
            .filter(move |call| {
                call.as_ref()
                    .map_or(true, |(_, call)| call.duration() >= min)
            }))
    }
}

/// A new scratch file in `dir`, unlinked at once: it goes when closed.
/// `dir` is opened as every output directory is (no link followed on
/// the way, fit to make files in), and the file made by its descriptor.
fn scratch_file(dir: &Path) -> Result<File, ExportError> {
    OutputDir::open(dir)?.scratch_file()
}

/// A file written at its end through a buffer, whose records can be
/// rewritten: in the buffer if they are still there, in the file otherwise.
struct PatchableFile {
    file: File,
    /// For error messages.
    dir: PathBuf,
    /// Bytes not written yet; they go at `flushed`.
    buffer: Vec<u8>,
    flushed: u64,
    /// Records appended.
    records: u64,
}

impl PatchableFile {
    fn new(file: File, dir: PathBuf) -> Self {
        PatchableFile {
            file,
            dir,
            buffer: Vec::with_capacity(BUFFER_BYTES),
            flushed: 0,
            records: 0,
        }
    }

    fn error(&self, e: std::io::Error) -> ExportError {
        ExportError::io(&self.dir, "writing a scratch file in", e)
    }

    /// Appends `record`, which goes at `offset`: the end.
    fn append(&mut self, offset: u64, record: &[u8; RECORD_BYTES]) -> Result<(), ExportError> {
        debug_assert_eq!(offset, self.flushed + self.buffer.len() as u64);
        if self.buffer.len() + RECORD_BYTES > BUFFER_BYTES {
            self.flush()?;
        }
        self.buffer.extend_from_slice(record);
        self.records += 1;
        Ok(())
    }

    /// Rewrites the record at `offset`.
    fn patch(&mut self, offset: u64, record: &[u8; RECORD_BYTES]) -> Result<(), ExportError> {
        match offset.checked_sub(self.flushed) {
            Some(at) => {
                let at = at as usize;
                self.buffer[at..at + RECORD_BYTES].copy_from_slice(record);
                Ok(())
            }
            None => self
                .file
                .write_all_at(record, offset)
                .map_err(|e| self.error(e)),
        }
    }

    fn flush(&mut self) -> Result<(), ExportError> {
        self.file
            .write_all_at(&self.buffer, self.flushed)
            .map_err(|e| self.error(e))?;
        self.flushed += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }
}

fn encode(call: &NestedCall) -> [u8; RECORD_BYTES] {
    let mut out = [0u8; RECORD_BYTES];
    out[0..8].copy_from_slice(&(call.function as u64).to_le_bytes());
    out[8..16].copy_from_slice(&call.start.to_le_bytes());
    out[16..24].copy_from_slice(&call.end.to_le_bytes());
    let parent = call.parent.map_or(NO_PARENT, |p| p as u64);
    out[24..32].copy_from_slice(&parent.to_le_bytes());
    out[32..34].copy_from_slice(&call.depth.to_le_bytes());
    out[34] = match call.began {
        Began::Entered => 0,
        Began::BeforeTrace => 1,
    };
    out[35] = match call.ended {
        Ended::Returned => 0,
        Ended::Unwound => 1,
        Ended::StillRunning => 2,
    };
    out
}

fn decode(bytes: &[u8; RECORD_BYTES]) -> NestedCall {
    let u64_at = |at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(word)
    };
    let parent = u64_at(24);
    NestedCall {
        function: u64_at(0) as usize,
        start: u64_at(8),
        end: u64_at(16),
        parent: (parent != NO_PARENT).then_some(parent as usize),
        depth: u16::from_le_bytes([bytes[32], bytes[33]]),
        began: if bytes[34] == 1 {
            Began::BeforeTrace
        } else {
            Began::Entered
        },
        ended: match bytes[35] {
            0 => Ended::Returned,
            1 => Ended::Unwound,
            _ => Ended::StillRunning,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let call = NestedCall {
            function: 0x40_1234,
            depth: 7,
            start: 11,
            end: u64::MAX - 1,
            parent: Some(3),
            began: Began::BeforeTrace,
            ended: Ended::Unwound,
        };
        assert_eq!(decode(&encode(&call)), call);
        let call = NestedCall {
            parent: None,
            began: Began::Entered,
            ended: Ended::StillRunning,
            ..call
        };
        assert_eq!(decode(&encode(&call)), call);
    }

    #[test]
    fn patches_reach_the_buffer_and_the_file() {
        let dir = std::env::temp_dir();
        let mut spool = PatchableFile::new(scratch_file(&dir).unwrap(), dir);
        let record = |n: u8| [n; RECORD_BYTES];
        let per_buffer = (BUFFER_BYTES / RECORD_BYTES) as u64;
        for n in 0..per_buffer + 2 {
            spool.append(n * RECORD_BYTES as u64, &record(1)).unwrap();
        }
        // The first record is in the file by now, the last in the buffer.
        spool.patch(0, &record(2)).unwrap();
        spool
            .patch((per_buffer + 1) * RECORD_BYTES as u64, &record(3))
            .unwrap();
        spool.flush().unwrap();
        let mut all = Vec::new();
        (&spool.file).seek(SeekFrom::Start(0)).unwrap();
        (&spool.file).read_to_end(&mut all).unwrap();
        assert_eq!(all.len() as u64, (per_buffer + 2) * RECORD_BYTES as u64);
        assert_eq!(all[..RECORD_BYTES], record(2));
        assert_eq!(all[RECORD_BYTES..2 * RECORD_BYTES], record(1));
        assert_eq!(all[all.len() - RECORD_BYTES..], record(3));
    }
}
