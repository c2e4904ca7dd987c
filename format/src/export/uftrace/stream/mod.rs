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
//!   event written before the loss (uftrace's own recorder does the same,
//!   and the record is uftrace's: time 0, the count in the address field),
//!   with every call open there closed just before it by an exit at the
//!   time of that last event (counted in [`StreamTotals::closed_at_gaps`],
//!   not listed as added: fntrace's reader, like uftrace's, counts these
//!   calls up to the gap): uftrace 0.13 misreads calls open at a
//!   lost record (`graph` crashed, `report` gave hours). After the gap the
//!   exits of calls entered before it are left out (counted in
//!   [`StreamTotals::left_out`]), and a thread that wrote records after a
//!   gap ends with one more lost record, counting those exits, at
//!   [`UftraceStream::finish`] (see `StreamThread::end_gap`). `uftrace
//!   replay` shows lost records outside every function only with
//!   `--kernel-full`. Unlike [`write_uftrace_dir_of`](super::write_uftrace_dir_of)
//!   (snapshots, dumps), a stream cannot give the calls running after a
//!   gap their entries (their exits have not arrived): uftrace 0.13 then
//!   keeps frames below the first record after the gap, named after the
//!   calls it saw there before the gap, and takes later calls of those
//!   functions for recursive ones, leaving them out of its total (not its
//!   calls or self time): measured on a drop-mode recording of two threads
//!   of `run(200000)` with 4,096-event buffers, `pie_mid` totalled 5.457 ms
//!   in `uftrace report`, 5.560 ms in fntrace's.
//! - Records are made consistent as they arrive, by one thread's open calls
//!   (depth and function, a few words per call): an entry closes the open
//!   calls at its depth or deeper (they were unwound) with an exit at its
//!   time; an exit closes its call and any deeper ones; an exit with no open
//!   call at its depth (its entry was lost) is left out and counted in
//!   [`StreamTotals::left_out`]. Calls still open at the end stay open, as
//!   in uftrace's recordings of a program that was still running (except
//!   in a thread with a gap, see above).
//! - `info`, `task.txt` and `fntrace.txt` are rewritten (a new file renamed
//!   over the old, never half-written) whenever a thread appears, before its
//!   first records are written.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::super::dirfd::TraceDir;
use super::super::ExportError;
use super::format::{
    basename, decode, timestamp, RECORDER_NOTE, RECORD_SIZE, TYPE_ENTRY, TYPE_EXIT,
};
use super::modules::{sym_text, ModuleLayout};
use super::sessions::{is_shared_recording, write_session, Fragment};
use super::stream_thread::{
    encode_run, free_reserve, make_reserve, push_event, StreamThread, CHUNK_EVENTS, RESERVE_FILE,
    RUN_MAX,
};
use super::write::{fntrace_text, prepare_dir, session_id, task_txt};
use crate::trace::{GraphEvent, ThreadTrace, Trace};

mod finish;
pub use finish::settle_recording;
use finish::{cut_records, with_unwritten};

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
    /// Calls open at a gap, ended there by an exit record at the time of
    /// the last record before it (not among `events`; see
    /// [`UftraceStream`]'s module documentation).
    pub closed_at_gaps: u64,
    /// Bytes of records written.
    pub bytes: u64,
}

/// A uftrace data directory being written, a thread's events at a time
/// ([`UftraceStream::append`]); [`UftraceStream::finish`] completes it.
pub struct UftraceStream {
    dir: TraceDir,
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
    /// Threads whose `.dat` file is open (see `flush`: the threads of a
    /// long recording come and go).
    open_files: Vec<u32>,
    /// Whether `fntrace.txt` misses records added for consistency.
    session_files_stale: bool,
    /// Whether the map and `.sym` files are still to be written (at the
    /// first flush: naming every function of a large program takes tens of
    /// milliseconds, which a recorder's writer thread spends, not the
    /// program's start-up).
    modules_pending: bool,
    /// Whether this session joined a directory other sessions write.
    joined: bool,
    /// The parent process, if this session is a forked child's.
    forked_from: Option<u32>,
    /// What the recorder says of this session (see
    /// [`UftraceStream::set_recorder_note`]).
    recorder_note: Option<String>,
    /// When the session files were last written, and how many times.
    listed_at: Instant,
    session_writes: u64,
    /// `DLOP` lines of the libraries loaded after the session's map was
    /// written (see [`UftraceStream::add_library`]).
    dlopens: Vec<String>,
}

/// New threads wait this long at most to be listed (their records held
/// meanwhile), unless enough of them came (see [`UftraceStream::flush`]).
const LISTING_INTERVAL: Duration = Duration::from_millis(500);
/// Records held for unlisted threads that make them listed at once.
const MAX_HELD_BYTES: usize = 4 << 20;

impl UftraceStream {
    /// Starts a directory at `dir` (which must not exist or be empty, and
    /// be writable by this user only, as for
    /// [`write_uftrace_dir`](super::write_uftrace_dir)) for the process
    /// `header` describes; `start_ns` is the session's start
    /// (no event may be older). Writes the session files (`info`,
    /// `task.txt`); the map and `.sym` files come with the first
    /// [`UftraceStream::flush`].
    pub fn create(dir: &Path, header: Trace, start_ns: u64) -> Result<Self, ExportError> {
        let dir = prepare_dir(dir)?;
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
        let dir = TraceDir::open_output(dir)?;
        if !dir.names()?.is_empty() && !is_shared_recording(&dir)? {
            return Err(ExportError::malformed(
                dir.path(),
                "not a recording made by fntrace's streaming recorder: cannot add to it",
            ));
        }
        Self::start_session(dir, header, start_ns, true, forked_from)
    }

    fn start_session(
        dir: TraceDir,
        header: Trace,
        start_ns: u64,
        joined: bool,
        forked_from: Option<u32>,
    ) -> Result<Self, ExportError> {
        let sid = session_id(&header, start_ns);
        // The space that finishes the recording if the file system fills
        // (see `RESERVE_FILE`): a forked child shares its parent's.
        if forked_from.is_none() && !dir.exists(RESERVE_FILE) {
            // Another session may make it at the same moment; a file
            // system too full for it leaves a shorter one.
            let _ = make_reserve(&dir);
        }
        let stream = UftraceStream {
            dir,
            header,
            sid,
            session_time: start_ns,
            threads: HashMap::new(),
            order: Vec::new(),
            totals: StreamTotals::default(),
            pending: Vec::new(),
            unlisted: Vec::new(),
            open_files: Vec::new(),
            session_files_stale: false,
            modules_pending: true,
            listed_at: Instant::now(),
            session_writes: 0,
            joined,
            forked_from,
            recorder_note: None,
            dlopens: Vec::new(),
        };
        stream.write_session_files()?;
        Ok(stream)
    }

    /// The map file and a `.sym` file per module, for every function of
    /// the header, once; none for a forked child, which runs in its
    /// parent's session.
    fn write_modules(&mut self) -> Result<(), ExportError> {
        if !std::mem::take(&mut self.modules_pending) || self.forked_from.is_some() {
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
        self.dir.replace(
            &format!("sid-{}.map", self.sid),
            layout.map_text().as_bytes(),
        )?;
        let mut written: Vec<String> = Vec::new();
        for module in &layout.modules {
            let file = format!("{}.sym", basename(&module.path));
            // Another session of the same program wrote the same file.
            if module.functions.is_empty() || written.contains(&file) || self.dir.exists(&file) {
                continue;
            }
            self.dir
                .replace(&file, sym_text(&self.header, module).as_bytes())?;
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
            arg_spec: self.header.arg_spec.clone(),
            retval_spec: self.header.retval_spec.clone(),
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
            } + &self.dlopens.concat(),
            notes: match &self.recorder_note {
                Some(note) => format!("{}{RECORDER_NOTE}{note}\n", fntrace_text(&threads, &added)),
                None => fntrace_text(&threads, &added),
            },
        };
        write_session(&self.dir, &self.sid, &fragment)
    }

    /// Adds a library loaded after the session began (with `dlopen`; it
    /// may be unloaded by now), as uftrace's recorder does: a `DLOP` line
    /// in `task.txt` (`DLOP timestamp=T tid=PID sid=SID base=BIAS
    /// libname="PATH"`: from `T` on, addresses of the session that no
    /// module of its map holds are looked up in that library, loaded at
    /// `BIAS`) and the library's `.sym` file (the start address and ELF
    /// name of each function that `functions` gives, relative to `bias`;
    /// the file stays whatever becomes of the library, and `functions` is
    /// called only if it is to be written). Nothing for a library the
    /// session's map holds already (by file name, as uftrace's recorder
    /// tells them apart: the loader may name a file through a link).
    /// `loaded_after_ns` is a time the loading came after (the line's time
    /// is the session's start if that is later). A forked child's line
    /// names its parent's session, which it runs in. Written with the
    /// session files, at the next [`UftraceStream::flush`].
    pub fn add_library(
        &mut self,
        loaded_after_ns: u64,
        bias: u64,
        path: &str,
        end: u64,
        functions: impl FnOnce() -> Vec<(usize, String)>,
    ) -> Result<(), ExportError> {
        let in_map = self
            .header
            .maps
            .lines()
            .filter_map(super::format::parse_map_line)
            .any(|line| basename(line.path) == basename(path));
        if in_map || path.is_empty() {
            return Ok(());
        }
        let sid = match self.forked_from {
            Some(parent) => match self.session_of(parent)? {
                Some(sid) => sid,
                None => return Ok(()),
            },
            None => self.sid.clone(),
        };
        let line = super::modules::dlop_line(
            loaded_after_ns.max(self.session_time),
            self.header.pid,
            &sid,
            bias,
            path,
        );
        if self.dlopens.contains(&line) {
            return Ok(());
        }
        let file = format!("{}.sym", basename(path));
        if !self.dir.exists(&file) {
            if let Some(text) = super::modules::library_sym_text(path, bias, end, &functions()) {
                self.dir.replace(&file, text.as_bytes())?;
            }
        }
        self.dlopens.push(line);
        self.session_files_stale = true;
        Ok(())
    }

    /// The session id of process `pid`'s newest session in the directory's
    /// `task.txt` (its `SESS` line), if any.
    fn session_of(&self, pid: u32) -> Result<Option<String>, ExportError> {
        let Some(bytes) = self.dir.read("task.txt")? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&bytes);
        Ok(text
            .lines()
            .rev()
            .filter(|line| line.starts_with("SESS ") && line.contains(&format!(" pid={pid} ")))
            .find_map(|line| line.split_whitespace().find_map(|w| w.strip_prefix("sid=")))
            .map(str::to_string))
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
        self.append_events(tid, name, events.iter().copied(), lost_after)
    }

    /// [`UftraceStream::append`] with the events taken from an iterator:
    /// each is encoded as it comes (a caller converting events as it reads
    /// them never collects them), and a listed thread's records are
    /// written every 8,192 events, whose records stay in the caches until
    /// the kernel copies them. The thread's file stays open while the
    /// thread appends (see [`UftraceStream::flush`]).
    pub fn append_events<I>(
        &mut self,
        tid: u32,
        name: Option<&str>,
        events: I,
        lost_after: u64,
    ) -> Result<(), ExportError>
    where
        I: IntoIterator<Item = GraphEvent>,
        I::IntoIter: ExactSizeIterator,
    {
        let events = events.into_iter();
        if events.len() == 0 && lost_after == 0 {
            return Ok(());
        }
        if !self.threads.contains_key(&tid) {
            self.add_thread(tid, name)?;
        }
        let thread = self.threads.get_mut(&tid).expect("inserted above");
        let added_before = thread.added.len();
        let listed = !thread.unlisted;
        let forked = self.forked_from.is_some();
        let path = &self.dir;
        let totals = &mut self.totals;
        // A listed thread's records go to its file a chunk at a time; an
        // unlisted one's are held until `flush` lists it.
        let mut held = std::mem::take(&mut thread.held);
        let out = if listed {
            self.pending.clear();
            &mut self.pending
        } else {
            &mut held
        };
        let written_before = out.len();
        let left_out_before = totals.left_out;
        let mut written = 0u64;
        out.reserve(RECORD_SIZE * events.len().min(CHUNK_EVENTS));
        let mut events = events;
        let mut run = RUN_MAX;
        while events.len() != 0 {
            let mut chunk = events.by_ref().take(CHUNK_EVENTS);
            if forked {
                chunk.for_each(|event| push_event(thread, &event, out, totals, true));
            } else {
                while chunk.len() != 0 {
                    run = encode_run(thread, &mut chunk, run, out, totals);
                }
            }
            if listed {
                written += out.len() as u64;
                let result = thread.write(path, tid, out);
                out.clear();
                // A full file system: the records cut off, the events not
                // encoded yet and the lost ones after them are not written.
                result.map_err(|err| {
                    let cut = cut_records(&err);
                    totals.events = totals.events.saturating_sub(cut);
                    with_unwritten(err, cut + events.len() as u64 + lost_after)
                })?;
            }
        }
        thread.left_out_since_gap += totals.left_out - left_out_before;
        if lost_after > 0 {
            totals.closed_at_gaps += thread.write_gap(lost_after, out);
            totals.lost += lost_after;
        }
        written += (out.len() - written_before) as u64;
        totals.bytes += written;
        self.session_files_stale |= thread.added.len() != added_before;
        if listed {
            thread.write(path, tid, out)?;
            thread.appended = true;
            if !self.open_files.contains(&tid) {
                self.open_files.push(tid);
            }
        } else {
            thread.held = held;
        }
        Ok(())
    }

    /// Starts thread `tid`'s part of the stream, unlisted.
    fn add_thread(&mut self, tid: u32, name: Option<&str>) -> Result<(), ExportError> {
        // After an exec, the thread's file holds the records of the
        // program before; fntrace.txt's indices count them too.
        let records = if self.joined {
            records_in(&self.dir, &format!("{tid}.dat"))?
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
            unlisted: true,
            file: None,
            appended: false,
            entry_floor: u16::MAX,
            min_depth: u16::MAX,
            records_at_gap: None,
            left_out_since_gap: 0,
            cut: false,
            data_open: false,
        };
        self.threads.insert(tid, thread);
        Ok(())
    }

    /// Writes the map and `.sym` files the first time; lists the threads
    /// that appeared since the last call (rewriting the
    /// session files), then writes their held records; closes the files of
    /// threads that did not append since the previous call. Call after each
    /// batch of [`UftraceStream::append`]s.
    pub fn flush(&mut self) -> Result<(), ExportError> {
        self.write_modules()?;
        // A thread that appended since the last flush keeps its file open
        // for the next batch (a busy thread's file is not opened again 100
        // times a second); the others' files are closed, and all of them
        // when many are open.
        let keep_any = self.open_files.len() <= MAX_OPEN_FILES;
        let threads = &mut self.threads;
        self.open_files.retain(|tid| {
            let Some(thread) = threads.get_mut(tid) else {
                return false;
            };
            let keep = std::mem::take(&mut thread.appended) && keep_any;
            if !keep {
                thread.file = None;
            }
            keep
        });
        if self.listing_due() {
            self.list_new_threads()?;
        }
        Ok(())
    }

    /// Whether [`UftraceStream::flush`] writes the session files now. They
    /// list every thread of the session (task.txt, info), so writing them
    /// for each new thread cost O(threads) each time: 10,001 short-lived
    /// threads took the writer 8.6 s of CPU (27 µs an event), and the
    /// threads waited for it (35 s against uftrace's 11 s). New threads
    /// wait instead until they are an eighth of those listed, or
    /// [`LISTING_INTERVAL`] passed, or their held records reach
    /// [`MAX_HELD_BYTES`]: the files are written O(log threads) times,
    /// plus twice a second.
    fn listing_due(&self) -> bool {
        if self.session_files_stale {
            return true;
        }
        if self.unlisted.is_empty() {
            return false;
        }
        let listed = self.order.len() - self.unlisted.len();
        let held: usize = self
            .unlisted
            .iter()
            .map(|tid| self.threads[tid].held.len())
            .sum();
        self.unlisted.len() * 8 >= listed
            || self.listed_at.elapsed() >= LISTING_INTERVAL
            || held >= MAX_HELD_BYTES
    }

    /// How many times the session files were written (for tests).
    #[doc(hidden)]
    pub fn session_writes(&self) -> u64 {
        self.session_writes
    }

    /// Writes the session files, listing the new threads, then their held
    /// records.
    fn list_new_threads(&mut self) -> Result<(), ExportError> {
        self.write_session_files()?;
        self.session_files_stale = false;
        self.listed_at = Instant::now();
        self.session_writes += 1;
        for tid in std::mem::take(&mut self.unlisted) {
            let thread = self.threads.get_mut(&tid).expect("listed threads exist");
            thread.unlisted = false;
            let held = std::mem::take(&mut thread.held);
            let written = thread.write(&self.dir, tid, &held);
            thread.file = None;
            if let Err(err) = written {
                // Records cut off by a full file system: lost, not written.
                let cut = cut_records(&err);
                self.totals.events = self.totals.events.saturating_sub(cut);
                self.totals.lost += cut;
                return Err(err);
            }
        }
        Ok(())
    }

    /// Sets what the recorder says of this session (`key=value` words, one
    /// line: events, losses, waits, the writer's CPU), written into
    /// `fntrace.txt` with the session files (at the latest by
    /// [`UftraceStream::finish`]), where [`recorder_notes`] reads it back.
    pub fn set_recorder_note(&mut self, note: &str) {
        self.recorder_note = Some(note.replace('\n', " "));
        self.session_files_stale = true;
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
        self.dir.path()
    }

    /// Ends the stream: writes what [`UftraceStream::flush`] would, and the
    /// session files one last time; returns the totals.
    pub fn finish(mut self) -> Result<StreamTotals, ExportError> {
        self.flush()?;
        self.list_new_threads()?;
        self.end_threads()?;
        if self.forked_from.is_some() {
            self.rebase_inherited()?;
        } else {
            free_reserve(&self.dir);
        }
        self.write_session_files()?;
        Ok(self.totals())
    }
}

/// The recorder notes of every session of the recording at `dir` (see
/// [`UftraceStream::set_recorder_note`]), each as `(key, value)` pairs, in
/// the order of the sessions; none for a directory without `fntrace.txt`.
pub fn recorder_notes(dir: &Path) -> Result<Vec<Vec<(String, String)>>, ExportError> {
    let path = dir.join(super::format::FNTRACE_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ExportError::io(&path, "reading", e)),
    };
    Ok(text
        .lines()
        .filter_map(|line| line.strip_prefix(RECORDER_NOTE))
        .map(|words| {
            words
                .split_whitespace()
                .filter_map(|word| word.split_once('='))
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect()
        })
        .collect())
}

/// Files a stream keeps open from one batch to the next at most.
const MAX_OPEN_FILES: usize = 64;

/// Entry and exit records in the `.dat` file `name` of `dir` (0 if there
/// is none).
fn records_in(dir: &TraceDir, name: &str) -> Result<usize, ExportError> {
    let Some(bytes) = dir.read(name)? else {
        return Ok(0);
    };
    Ok(bytes
        .chunks_exact(RECORD_SIZE)
        .filter(|chunk| {
            let record = decode((*chunk).try_into().expect("chunks of RECORD_SIZE"));
            record.kind == TYPE_ENTRY || record.kind == TYPE_EXIT
        })
        .count())
}
