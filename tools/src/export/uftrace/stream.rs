//! Writing a uftrace data directory as events arrive: the streaming
//! recorder's output. Memory stays bounded whatever the length of the
//! recording, and the directory is readable at every moment between two
//! [`UftraceStream::append`] calls (a process killed mid-recording leaves
//! what was appended so far).
//!
//! The files are those of [`write_uftrace_dir`](super::write_uftrace_dir),
//! with these differences, forced by not knowing the future:
//! - The session starts at [`UftraceStream::create`]'s `start_ns`, not just
//!   before the first event.
//! - `.sym` files cover every function the header names (the caller passes
//!   every instrumented function), not only those with events.
//! - Lost events are a lost record where they happened, after the last
//!   event written before the loss (uftrace's own recorder does the same).
//! - Records are made consistent as they arrive, by one thread's open calls
//!   (depth and function, a few words per call): an entry closes the open
//!   calls at its depth or deeper (they were unwound) with an exit at its
//!   time; an exit closes its call and any deeper ones; an exit with no open
//!   call at its depth (its entry was lost) is left out and counted in
//!   [`StreamTotals::left_out`]. Calls still open at the end stay open, as
//!   in uftrace's recordings of a program that was still running.
//! - `info`, `task.txt` and `fntrace.txt` are rewritten (a new file renamed
//!   over the old, never half-written) whenever a thread appears, before its
//!   first records are written.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::super::ExportError;
use super::format::{
    basename, decode, encode, record, timestamp, ADDR_BITS, RECORD_SIZE, TYPE_ENTRY, TYPE_EXIT,
    TYPE_LOST,
};
use super::sessions::{is_shared_recording, replace_file, write_session, Fragment};
use super::write::{fntrace_text, prepare_dir, session_id, sym_text, task_txt, ModuleLayout};
use crate::trace::{EventKind, GraphEvent, ThreadTrace, Trace};

/// What a finished stream holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamTotals {
    /// Threads with a `.dat` file.
    pub threads: usize,
    /// Events written as records (entries and exits; not the records added
    /// for consistency).
    pub events: u64,
    /// Events lost before they reached the stream (buffers full), each
    /// counted in a lost record.
    pub lost: u64,
    /// Events that reached the stream but could not be written: exits whose
    /// entry was lost, events deeper than uftrace's limit of 1023.
    pub left_out: u64,
    /// Bytes of records written.
    pub bytes: u64,
}

/// One thread of the stream.
struct StreamThread {
    name: Option<String>,
    /// Open calls: depth and function, outermost first.
    open: Vec<(u16, usize)>,
    /// Entry and exit records written (the indices `fntrace.txt` uses).
    records: usize,
    /// Indices of the records added for consistency.
    added: Vec<usize>,
    /// Time of the last record written (lost records take it).
    last_time: u64,
    /// Records held until the thread is listed (see `flush`).
    held: Vec<u8>,
    /// The smallest depth of an entry seen: in a forked child's session, an
    /// exit shallower than it, with no open call, ends a call the child
    /// inherited from its parent (returning through the parent's frames,
    /// `fork` first): written as it is, as uftrace does.
    entry_floor: u16,
}

/// A uftrace data directory being written, a thread's events at a time
/// ([`UftraceStream::append`]); [`UftraceStream::finish`] completes it.
pub struct UftraceStream {
    dir: PathBuf,
    /// Process description (pid, exe, cmdline, maps, names, symbols); its
    /// `threads` stay empty.
    header: Trace,
    sid: String,
    session_time: u64,
    threads: HashMap<u32, StreamThread>,
    /// Thread ids in order of appearance.
    order: Vec<u32>,
    totals: StreamTotals,
    /// Records of the thread being appended, not yet written.
    pending: Vec<u8>,
    /// Threads seen but not yet in the session files.
    unlisted: Vec<u32>,
    /// Whether `fntrace.txt` misses records added for consistency.
    session_files_stale: bool,
    /// Whether this session joined a directory other sessions write.
    joined: bool,
    /// The parent process, if this session is a forked child's.
    forked_from: Option<u32>,
}

impl UftraceStream {
    /// Starts a directory at `dir` (which must not exist or be empty) for
    /// the process `header` describes; `start_ns` is the session's start
    /// (no event may be older). Writes every file but the threads' records.
    pub fn create(dir: &Path, header: Trace, start_ns: u64) -> Result<Self, ExportError> {
        prepare_dir(dir)?;
        Self::start_session(dir, header, start_ns, false, None)
    }

    /// Adds a session for the process `header` describes to the recording
    /// at `dir`, which another process (a parent that forked this one, or
    /// this process before an `exec`) started with [`UftraceStream::create`]
    /// or [`UftraceStream::join`]; a directory that does not exist or is
    /// empty is started as `create` would. The sessions share `info`,
    /// `task.txt` and `fntrace.txt` (see `sessions.rs`); uftrace shows each
    /// session's threads with its own symbols.
    pub fn join(dir: &Path, header: Trace, start_ns: u64) -> Result<Self, ExportError> {
        Self::join_session(dir, header, start_ns, None)
    }

    /// [`UftraceStream::join`] for the child of a `fork` by `parent_pid`:
    /// as in uftrace's recordings, the child has no session of its own
    /// (no `SESS` line, no map: readers resolve its addresses through the
    /// parent's session, its address space at the fork); `task.txt` says
    /// whose child it is (a `FORK` line) and lists the threads it starts.
    /// Its calls can return through frames of the parent's (exits with no
    /// entry in the child's records).
    pub fn join_forked(
        dir: &Path,
        header: Trace,
        start_ns: u64,
        parent_pid: u32,
    ) -> Result<Self, ExportError> {
        Self::join_session(dir, header, start_ns, Some(parent_pid))
    }

    fn join_session(
        dir: &Path,
        header: Trace,
        start_ns: u64,
        forked_from: Option<u32>,
    ) -> Result<Self, ExportError> {
        match prepare_dir(dir) {
            Err(ExportError::DirectoryNotEmpty(_)) if dir.is_dir() => {
                if !is_shared_recording(dir)? {
                    return Err(ExportError::malformed(
                        dir,
                        "not a recording made by fntrace's streaming recorder: cannot add to it",
                    ));
                }
            }
            other => other?,
        }
        Self::start_session(dir, header, start_ns, true, forked_from)
    }

    fn start_session(
        dir: &Path,
        header: Trace,
        start_ns: u64,
        joined: bool,
        forked_from: Option<u32>,
    ) -> Result<Self, ExportError> {
        let sid = session_id(&header, start_ns);
        let stream = UftraceStream {
            dir: dir.to_path_buf(),
            header,
            sid,
            session_time: start_ns,
            threads: HashMap::new(),
            order: Vec::new(),
            totals: StreamTotals::default(),
            pending: Vec::new(),
            unlisted: Vec::new(),
            session_files_stale: false,
            joined,
            forked_from,
        };
        stream.write_modules()?;
        stream.write_session_files()?;
        Ok(stream)
    }

    /// The map file and a `.sym` file per module, for every function of
    /// the header; none for a forked child, which runs in its parent's
    /// session.
    fn write_modules(&self) -> Result<(), ExportError> {
        if self.forked_from.is_some() {
            return Ok(());
        }
        let mut functions: Vec<usize> = self
            .header
            .names
            .keys()
            .chain(self.header.symbols.keys())
            .copied()
            .collect();
        functions.sort_unstable();
        functions.dedup();
        let layout = ModuleLayout::new(&self.header.maps, &functions);
        replace_file(
            &self.dir,
            &format!("sid-{}.map", self.sid),
            layout.map_text().as_bytes(),
        )?;
        let mut written: Vec<String> = Vec::new();
        for module in &layout.modules {
            let file = format!("{}.sym", basename(&module.path));
            // Another session of the same program wrote the same file.
            if module.functions.is_empty()
                || written.contains(&file)
                || self.dir.join(&file).exists()
            {
                continue;
            }
            replace_file(&self.dir, &file, sym_text(&self.header, module).as_bytes())?;
            written.push(file);
        }
        Ok(())
    }

    /// This session's part of `info`, `task.txt` and `fntrace.txt` for the
    /// threads seen so far, and those files rebuilt with it.
    fn write_session_files(&self) -> Result<(), ExportError> {
        let threads: Vec<ThreadTrace> = self
            .order
            .iter()
            .map(|tid| ThreadTrace {
                tid: *tid,
                name: self.threads[tid].name.clone(),
                events: Vec::new(),
                lost: 0,
            })
            .collect();
        let added: Vec<(u32, Vec<usize>)> = self
            .order
            .iter()
            .filter(|tid| !self.threads[tid].added.is_empty())
            .map(|tid| (*tid, self.threads[tid].added.clone()))
            .collect();
        let fragment = Fragment {
            start: self.session_time,
            exe: self.header.exe.clone(),
            cmdline: if self.header.cmdline.is_empty() {
                self.header.exe.clone()
            } else {
                self.header.cmdline.clone()
            },
            tids: self.order.clone(),
            task: match self.forked_from {
                // As uftrace: the child runs in its parent's session (whose
                // map and symbols are the child's address space at the
                // fork) until it execs; a FORK line, then TASK lines for
                // the threads it starts.
                Some(parent) => {
                    let task = task_txt(&self.header, &threads, &self.sid, self.session_time);
                    let started: String = task
                        .lines()
                        .skip(1) // the SESS line
                        .filter(|line| !line.contains(&format!(" tid={} ", self.header.pid)))
                        .map(|line| format!("{line}\n"))
                        .collect();
                    format!(
                        "FORK timestamp={} pid={} ppid={parent}\n{started}",
                        timestamp(self.session_time),
                        self.header.pid,
                    )
                }
                None => task_txt(&self.header, &threads, &self.sid, self.session_time),
            },
            notes: fntrace_text(&threads, &added),
        };
        write_session(&self.dir, &self.sid, &fragment)
    }

    /// Appends thread `tid`'s next `events` (oldest first, as recorded),
    /// then a lost record for `lost_after` events lost after them (0: none).
    /// `name` is the thread's name, used when the thread is new. A new
    /// thread's records are held in memory until the next
    /// [`UftraceStream::flush`], which lists the thread first.
    pub fn append(
        &mut self,
        tid: u32,
        name: Option<&str>,
        events: &[GraphEvent],
        lost_after: u64,
    ) -> Result<(), ExportError> {
        if events.is_empty() && lost_after == 0 {
            return Ok(());
        }
        if !self.threads.contains_key(&tid) {
            // After an exec, the thread's file holds the records of the
            // program before; fntrace.txt's indices count them too.
            let records = if self.joined {
                records_in(&self.dir.join(format!("{tid}.dat")))?
            } else {
                0
            };
            self.order.push(tid);
            self.unlisted.push(tid);
            let thread = StreamThread {
                name: name.filter(|n| !n.is_empty()).map(str::to_string),
                open: Vec::new(),
                records,
                added: Vec::new(),
                last_time: self.session_time,
                held: Vec::new(),
                entry_floor: u16::MAX,
            };
            self.threads.insert(tid, thread);
        }
        let thread = self.threads.get_mut(&tid).expect("inserted above");
        let added_before = thread.added.len();
        let listed = !self.unlisted.contains(&tid);
        let out = if listed {
            self.pending.clear();
            &mut self.pending
        } else {
            &mut thread.held
        };
        let written_before = out.len();
        for event in events {
            if event.kind == EventKind::Entry {
                thread.entry_floor = thread.entry_floor.min(event.depth);
            } else if self.forked_from.is_some()
                && event.depth < thread.entry_floor
                && !thread.open.iter().any(|&(depth, _)| depth == event.depth)
            {
                if let Some(bytes) = record(event) {
                    out.extend_from_slice(&bytes);
                    thread.records += 1;
                    thread.last_time = event.time_ns;
                    self.totals.events += 1;
                }
                continue;
            }
            consistent_push(
                &mut thread.open,
                &mut thread.added,
                &mut thread.records,
                &mut thread.last_time,
                event,
                out,
                &mut self.totals,
            );
        }
        if lost_after > 0 {
            let count = lost_after.min((1 << ADDR_BITS) - 1);
            out.extend_from_slice(&encode(thread.last_time, TYPE_LOST, 0, count));
            self.totals.lost += lost_after;
        }
        self.totals.bytes += (out.len() - written_before) as u64;
        self.session_files_stale |= thread.added.len() != added_before;
        if listed {
            append_to(&self.dir.join(format!("{tid}.dat")), &self.pending)?;
        }
        Ok(())
    }

    /// Lists the threads that appeared since the last call (rewriting the
    /// session files), then writes their held records. Call after each
    /// batch of [`UftraceStream::append`]s.
    pub fn flush(&mut self) -> Result<(), ExportError> {
        if self.unlisted.is_empty() && !self.session_files_stale {
            return Ok(());
        }
        self.write_session_files()?;
        self.session_files_stale = false;
        for tid in std::mem::take(&mut self.unlisted) {
            let thread = self.threads.get_mut(&tid).expect("listed threads exist");
            let held = std::mem::take(&mut thread.held);
            append_to(&self.dir.join(format!("{tid}.dat")), &held)?;
        }
        Ok(())
    }

    /// Events written, lost and left out so far.
    pub fn totals(&self) -> StreamTotals {
        StreamTotals {
            threads: self.order.len(),
            ..self.totals
        }
    }

    /// The directory being written.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Ends the stream: writes what [`UftraceStream::flush`] would, and the
    /// session files one last time; returns the totals.
    pub fn finish(mut self) -> Result<StreamTotals, ExportError> {
        self.flush()?;
        self.write_session_files()?;
        Ok(self.totals())
    }
}

/// Entry and exit records in the `.dat` file at `path` (0 if there is
/// none).
fn records_in(path: &Path) -> Result<usize, ExportError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(ExportError::io(path, "reading", e)),
    };
    Ok(bytes
        .chunks_exact(RECORD_SIZE)
        .filter(|chunk| {
            let record = decode((*chunk).try_into().expect("chunks of RECORD_SIZE"));
            record.kind == TYPE_ENTRY || record.kind == TYPE_EXIT
        })
        .count())
}

/// Appends `bytes` to the file at `path`, creating it.
fn append_to(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    if bytes.is_empty() {
        return Ok(());
    }
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| ExportError::io(path, "opening", e))?;
    file.write_all(bytes)
        .map_err(|e| ExportError::io(path, "writing", e))
}

/// Encodes one thread's `event` into `out`, making the records consistent
/// (see the [module documentation](self)): `open` holds the thread's open
/// calls, `added` the indices of records made up, `records` the count of
/// records so far, `last_time` the time of the last one.
fn consistent_push(
    open: &mut Vec<(u16, usize)>,
    added: &mut Vec<usize>,
    records: &mut usize,
    last_time: &mut u64,
    event: &GraphEvent,
    out: &mut Vec<u8>,
    totals: &mut StreamTotals,
) {
    let mut emit = |event: &GraphEvent, made_up: bool| match record(event) {
        Some(bytes) => {
            out.extend_from_slice(&bytes);
            if made_up {
                added.push(*records);
            } else {
                totals.events += 1;
            }
            *records += 1;
            *last_time = event.time_ns;
        }
        None if !made_up => totals.left_out += 1,
        None => {}
    };
    // The open calls at `depth` or deeper were left (unwound): made-up
    // exits at this event's time close them.
    let close_from =
        |open: &mut Vec<(u16, usize)>, depth: u16, emit: &mut dyn FnMut(&GraphEvent, bool)| {
            while let Some(&(open_depth, function)) = open.last() {
                if open_depth < depth {
                    break;
                }
                open.pop();
                let exit = GraphEvent {
                    time_ns: event.time_ns,
                    function,
                    depth: open_depth,
                    kind: EventKind::Exit,
                };
                emit(&exit, true);
            }
        };
    match event.kind {
        EventKind::Entry => {
            close_from(open, event.depth, &mut emit);
            open.push((event.depth, event.function));
            emit(event, false);
        }
        EventKind::Exit => {
            if !open.iter().any(|&(depth, _)| depth == event.depth) {
                totals.left_out += 1;
                return;
            }
            close_from(open, event.depth + 1, &mut emit);
            open.pop();
            emit(event, false);
        }
    }
}
