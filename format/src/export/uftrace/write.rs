//! Writing a uftrace data directory: the session files, one `.sym` file
//! per module, and each thread's records, made consistent for uftrace.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::super::dirfd::{TraceDir, TraceOutput};
use super::super::ExportError;
use super::format::{
    basename, info_bytes, lost_record, one_line, record, timestamp, FNTRACE_FILE, RECORDER_NOTE,
};
use super::modules::{
    library_lines, library_sym_text, maps_without_libraries, sym_text, ModuleLayout,
};
use super::values::{without_data, Pending};
use crate::analysis::pairing::{entries_of_calls_running_at_start, CallStep, Calls, Reading};
use crate::source::{EventSource, Gap, ThreadInfo};
use crate::trace::{EventKind, GraphEvent, ThreadTrace, Trace};

/// Name (and map-line path) of the pseudo-module holding functions outside
/// every known mapping.
/// How far before the first event the session starts, in nanoseconds.
pub(super) const SESSION_LEAD_NS: u64 = 1_000;
/// Events between two progress reports.
const PROGRESS_EVERY: usize = 1 << 16;

/// Writes `trace` as a uftrace data directory at `dir`, creating `dir` if
/// needed; `dir` must not exist or be empty, and must not be the empty path
/// (which would mean the current directory). An existing `dir` that is a
/// link, another user's, or writable by other users is refused
/// ([`ExportError::Refused`]), and every file is created new, never through
/// a link (see [`prepare_output_dir`](crate::export::prepare_output_dir)). `progress`, if given, is called
/// now and then with the number of events written so far and the total, and
/// once at the end.
///
/// # Layout
///
/// | file | contents |
/// |---|---|
/// | `info` | 40-byte header (below), then one `key:value` text section per set info bit |
/// | `task.txt` | `SESS timestamp=S.N pid=P sid=SID exename="PATH"`, then one `TASK timestamp=S.N tid=T pid=P` per thread, then a `DLOP` line per library of [`Trace::libraries`] (their files' lines left out of the map) |
/// | `sid-SID.map` | one `/proc/PID/maps`-style line per module (`START-END r-xp 00000000 00:00 0 PATH`, `START` being the module's first mapping, its load base) and the `[stack]` line, without which uftrace takes every address for a kernel one |
/// | `TID.dat` | the thread's records, 16 bytes each (below) |
/// | `NAME.sym` | symbols of the module whose file name is `NAME`, relative to its base |
/// | `fntrace.txt` | what uftrace has no place for, and ignores: thread names (`thread TID NAME`) and the records fntrace added for uftrace (`added TID INDEX…`, below) |
///
/// `info` header, little-endian:
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 8 | magic `Ftrace!\0` |
/// | 8 | 4 | version, 4 |
/// | 12 | 2 | header size, 40 |
/// | 14 | 1 | endianness, 1 (little) |
/// | 15 | 1 | ELF class, 2 (64-bit) |
/// | 16 | 8 | feature bits: `TASK_SESSION` (1) and `SYM_REL_ADDR` (5), that is `0x22`; with no feature bit uftrace 0.13 crashes |
/// | 24 | 8 | info bits: `EXE_NAME` (0, section `exename:PATH`), `CMDLINE` (3, section `cmdline:ARGS`, [`Trace::cmdline`] or else the executable's path, escaped for a JSON string: `uftrace dump --chrome` copies it into its output, and without it writes invalid JSON) and `TASKINFO` (7, section `taskinfo:lines=2`, `taskinfo:nr_tid=N`, `taskinfo:tids=A,B`) |
/// | 32 | 2 | max stack depth, 1024 |
/// | 34 | 6 | zero |
///
/// A `.dat` record is two little-endian `u64`s: the time in nanoseconds, then
///
/// | bits | field |
/// |---|---|
/// | 0–1 | type: 0 entry, 1 exit, 2 lost (the address field holds the number of records lost), 3 event |
/// | 2 | more: argument or return-value data follows the record |
/// | 3–5 | magic, 5 |
/// | 6–15 | depth (0–1023) |
/// | 16–63 | address (48 bits): any address inside the function; fntrace writes its entry address |
///
/// A `.sym` file starts with `# symbols: N` and `# path name: PATH`, then has
/// one `%016x T NAME` line per function, sorted by address, relative to the
/// module base (feature `SYM_REL_ADDR`). `NAME` is the function's ELF symbol
/// ([`Trace::symbols`]) as [`uftrace_symbol_name`] gives it: mangled for C++
/// (uftrace demangles it, so its filters and `--demangle` modes work), readable
/// for Rust (uftrace 0.13 cannot demangle v0 names); without a symbol, its
/// [`Trace::names`] entry. uftrace gives each symbol the size up
/// to the next line; fntrace knows entry addresses only, so a function's
/// size is the distance to the next known function of the module, capped at
/// [`MAX_SYMBOL_SIZE`] by a `? __func_end` line, which also ends the file.
///
/// # Choices
///
/// - Times are the events' monotonic nanoseconds (uftrace's default clock is
///   the monotonic clock too). The `SESS` and `TASK` lines are timestamped one
///   microsecond before the first event: uftrace resolves no record older than
///   its session.
/// - Functions outside every file mapping of [`Trace::maps`] (or all of them
///   when `maps` is empty) go into a pseudo-module `fntrace-unmapped` whose
///   map line covers them (listed last, so real modules take precedence).
///   Functions without a name get their address in hex as name (the form of
///   [`Trace::name_of`]), so that uftrace never attributes them to the
///   neighbouring symbol; [`read_uftrace_dir`] drops such names again.
/// - uftrace pairs an exit with the innermost call it has open, whatever
///   the record's depth, and an exit without an entry confuses it (its
///   `graph` command drops the rest of the thread). So each thread's records
///   are made consistent, by the rules of [`crate::export`]: calls running
///   when tracing started (exits before the thread's first gap, if any,
///   whose entries are missing) get an entry at the thread's first timestamp;
///   calls that were unwound get an exit just before the event that shows it
///   (same timestamp); other exits without an entry are left out. The
///   thread of a forked child that continues its parent's calls
///   ([`EventSource::continues_parent_frames`]) is written as uftrace
///   records one: the calls running at its start get no entry and their
///   exits are written as they are; if it has no gap, its depths are
///   lowered so that its shallowest record is at 0, as the streaming
///   recorder lowers them (a child that left with `_exit`, perhaps after
///   the exit of `fork`: uftrace's report would show the parent's frames
///   above its first record as a `<0>` row). The
///   indices (among the entry and exit records of the `.dat`) of the added
///   records are listed in `fntrace.txt`, and [`read_uftrace_dir`] removes
///   them again, so that writing and reading gives back the events.
/// - Lost records are uftrace's own: time 0, depth 0, the number of events
///   lost in the address field, as uftrace 0.13's libmcount writes one at
///   the start of the first buffer it gets after losing records. Where the
///   source knows where a thread lost events ([`EventSource::gaps`]: the
///   flight recorder's window, a dump's buffers), a lost record sits at
///   each gap: the calls open there are closed just before it by an exit at
///   the time of the last record (not listed as added: fntrace's reader
///   reads it too, so that fntrace and uftrace both count the call up to
///   the gap, the most that is known of it, and give the same figures);
///   uftrace 0.13 misreads a call open at a lost record (`graph` crashed,
///   `report` gave totals of hours). After a gap, the calls whose exits
///   follow it without their entries get entries just after the lost
///   record, at the time of the first event after the gap (as uftrace's
///   recorder writes the entries of the calls open after its gaps there,
///   with their true times; not listed as added either): a call running
///   across a gap is two calls then, the part before and the part after.
///   No entry is made up at the thread's start for an exit after a gap.
///   Lost events whose place is not known ([`ThreadTrace::lost`] of
///   a [`Trace`]) are one lost record at the start of the thread's `.dat`.
///   Events deeper than 1023 (uftrace's limit) are not written and count
///   as lost there too. (`uftrace dump --chrome` prints an empty array
///   element for a lost record, as it does on its own recordings: its
///   output is not valid JSON then.)
/// - Two threads with the same tid (the kernel reuses tids) are written as
///   one, in the order of their first events.
/// - Modules are told apart by file name, as uftrace does: if two modules
///   share a file name, only the first gets a `.sym` file.
///
/// [`MAX_SYMBOL_SIZE`]: crate::export::MAX_SYMBOL_SIZE
/// [`uftrace_symbol_name`]: crate::uftrace_symbol_name
/// [`read_uftrace_dir`]: crate::export::read_uftrace_dir
pub fn write_uftrace_dir(
    trace: &Trace,
    dir: &Path,
    progress: Option<&mut dyn FnMut(usize, usize)>,
) -> Result<(), ExportError> {
    write_uftrace_dir_of(trace, &MergedThreads::of(trace), dir, progress)
}

/// [`write_uftrace_dir`] of the process `header` describes (pid,
/// executable, command line, maps, names and symbols; its threads are
/// ignored) with the events of `source`, read thread by thread, three times
/// at most: memory does not grow with the number of events, and the files
/// are those [`write_uftrace_dir`] writes for a [`Trace`] of the same
/// threads and events (byte for byte). `source`'s threads must have
/// distinct tids. `progress` as for [`write_uftrace_dir`].
pub fn write_uftrace_dir_of<S>(
    header: &Trace,
    source: &S,
    dir: &Path,
    progress: Option<&mut dyn FnMut(usize, usize)>,
) -> Result<(), ExportError>
where
    S: EventSource,
    ExportError: From<S::Error>,
{
    write_into(header, source, &prepare_dir(dir)?, progress)
}

/// [`write_uftrace_dir_of`] into a directory fntrace has just made and
/// holds open ([`OutputDir::make_new_dir`]): the files are made through
/// its descriptor, so nothing swapped at its path meanwhile is written
/// through. It must be empty.
///
/// [`OutputDir::make_new_dir`]: crate::export::OutputDir::make_new_dir
pub fn write_uftrace_dir_into<S>(
    header: &Trace,
    source: &S,
    dir: &TraceOutput,
    progress: Option<&mut dyn FnMut(usize, usize)>,
) -> Result<(), ExportError>
where
    S: EventSource,
    ExportError: From<S::Error>,
{
    dir.0.ensure_empty()?;
    write_into(header, source, &dir.0, progress)
}

fn write_into<S>(
    header: &Trace,
    source: &S,
    dir: &TraceDir,
    mut progress: Option<&mut dyn FnMut(usize, usize)>,
) -> Result<(), ExportError>
where
    S: EventSource,
    ExportError: From<S::Error>,
{
    // First pass: what the session files need, and each thread's calls
    // running at its start.
    let infos = source.threads();
    let mut functions: HashSet<usize> = header
        .names
        .keys()
        .chain(header.symbols.keys())
        .copied()
        .collect();
    let mut scans = Vec::with_capacity(infos.len());
    for index in 0..infos.len() {
        let gaps = placed_gaps(source.gaps(index));
        let (mut scan, lost) = source.read_thread(index, |events| {
            ThreadScan::of(&mut without_data(events, None), &gaps, &mut functions)
        })?;
        if source.continues_parent_frames(index) {
            scan.continue_parent_frames(gaps.is_empty());
        } else {
            scan.start_at_depth_zero();
        }
        scans.push((scan, lost, gaps));
    }
    let threads: Vec<ThreadTrace> = infos
        .iter()
        .map(|info| ThreadTrace {
            tid: info.tid,
            name: info.name.clone(),
            events: Vec::new(),
            lost: 0,
        })
        .collect();
    let first_time = scans
        .iter()
        .filter_map(|(scan, _, _)| scan.first_time)
        .min()
        .unwrap_or(SESSION_LEAD_NS);
    let session_time = first_time.saturating_sub(SESSION_LEAD_NS);
    let sid = session_id(header, first_time);

    // Modules and the functions in each; those of the libraries named by
    // time are in their own `.sym` files (see `library_lines`).
    let in_libraries: HashSet<usize> = header
        .libraries
        .iter()
        .flat_map(|library| library.functions.iter().map(|&(start, _)| start))
        .collect();
    let mut functions: Vec<usize> = functions
        .into_iter()
        .filter(|function| !in_libraries.contains(function))
        .collect();
    functions.sort_unstable();
    let layout = ModuleLayout::new(&maps_without_libraries(header), &functions);

    dir.write_new("info", &info_bytes(header, &threads))?;
    let task = task_txt(header, &threads, &sid, session_time)
        + &library_lines(header, &sid, session_time).concat();
    dir.write_new("task.txt", task.as_bytes())?;
    dir.write_new(&format!("sid-{sid}.map"), layout.map_text().as_bytes())?;
    let mut written_syms: Vec<String> = Vec::new();
    for module in &layout.modules {
        if module.functions.is_empty() {
            continue;
        }
        let file = format!("{}.sym", basename(&module.path));
        if written_syms.contains(&file) {
            continue;
        }
        dir.write_new(&file, sym_text(header, module).as_bytes())?;
        written_syms.push(file);
    }
    for library in &header.libraries {
        let file = format!("{}.sym", basename(&library.path));
        if written_syms.contains(&file) {
            continue;
        }
        let text = library_sym_text(&library.path, library.bias, library.end, &library.functions);
        if let Some(text) = text {
            dir.write_new(&file, text.as_bytes())?;
            written_syms.push(file);
        }
    }
    let total: usize = scans.iter().map(|(scan, _, _)| scan.events).sum();
    let mut done = 0usize;
    let mut next_report = 0usize;
    let mut added: Vec<(u32, Vec<usize>)> = Vec::new();
    for (index, (thread, (scan, lost, gaps))) in threads.iter().zip(scans).enumerate() {
        let name = format!("{}.dat", thread.tid);
        let path = dir.path().join(&name);
        let file = dir.create_new(&name)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);

        // Second pass, only if some record cannot be written: how many.
        let mut unwritable = 0u64;
        let (inherited, shift) = (scan.inherited, scan.shift);
        if scan.has_unwritable {
            let made_up = scan.made_up_entries.clone();
            source
                .read_thread(index, |events| {
                    let events = &mut shifted(without_data(events, None), shift);
                    consistent_records(events, made_up, &gaps, inherited, &mut |step| {
                        if let Step::Record { event, .. } = step {
                            unwritable += u64::from(record(&event).is_none());
                        }
                        Ok(())
                    })
                })?
                .0
                .map_err(|e| ExportError::io(&path, "writing", e))?;
        }
        // Events lost at places not known, and those that cannot be
        // written: one lost record at the start.
        let placed: u64 = gaps.iter().map(|gap| gap.count).sum();
        let unplaced = lost.saturating_sub(placed).saturating_add(unwritable);
        if unplaced > 0 {
            out.write_all(&lost_record(unplaced))
                .map_err(|e| ExportError::io(&path, "writing", e))?;
        }

        // Last pass: the records.
        let mut record_index = 0usize;
        let mut added_here = Vec::new();
        let pending = Pending::default();
        source
            .read_thread(index, |events| {
                let events = &mut shifted(without_data(events, Some(&pending)), shift);
                consistent_records(
                    events,
                    scan.made_up_entries,
                    &gaps,
                    inherited,
                    &mut |step| {
                        let (event, kind) = match step {
                            Step::Record { event, kind } => (event, kind),
                            Step::Lost(count) => return out.write_all(&lost_record(count)),
                        };
                        if let Some(bytes) = record(&event) {
                            pending.write(&event, bytes, kind == RecordKind::Recorded, &mut out)?;
                            if kind == RecordKind::Added {
                                added_here.push(record_index);
                            }
                            record_index += 1;
                        }
                        if kind == RecordKind::Recorded {
                            done += 1;
                            if done >= next_report {
                                if let Some(report) = progress.as_deref_mut() {
                                    report(done, total);
                                }
                                next_report = done + PROGRESS_EVERY;
                            }
                        }
                        Ok(())
                    },
                )
            })?
            .0
            .and_then(|()| out.flush())
            .map_err(|e| ExportError::io(&path, "writing", e))?;
        if !added_here.is_empty() {
            added.push((thread.tid, added_here));
        }
    }
    let mut notes = fntrace_text(&threads, &added);
    if let Some(note) = source.recorder_note() {
        notes.push_str(&format!("{RECORDER_NOTE}{}\n", one_line(&note)));
    }
    dir.write_new(FNTRACE_FILE, notes.as_bytes())?;
    if let Some(report) = progress {
        report(total, total);
    }
    Ok(())
}

/// `events` with every depth lowered by `shift`.
fn shifted<'a>(
    events: impl Iterator<Item = GraphEvent> + 'a,
    shift: u16,
) -> impl Iterator<Item = GraphEvent> + 'a {
    events.map(move |event| GraphEvent {
        depth: event.depth - shift,
        ..event
    })
}

/// What the first pass over a thread's events finds.
struct ThreadScan {
    /// Time of its first event.
    first_time: Option<u64>,
    /// Its events.
    events: usize,
    /// Entries for the calls running at its start (see [`Calls::streaming`]),
    /// then for those running at the end of each of its gaps.
    made_up_entries: Vec<Vec<GraphEvent>>,
    /// Whether an event cannot be written as a record (too deep, or an
    /// address beyond 48 bits); records made up from events can only then.
    has_unwritable: bool,
    /// The smallest depth of its events.
    min_depth: u16,
    /// Whether the exits of calls running at its start are written as
    /// they are (see [`ThreadScan::continue_parent_frames`]).
    inherited: bool,
    /// How much every depth is lowered by.
    shift: u16,
}

impl ThreadScan {
    /// Reads `events` to their end, adding their functions to `functions`;
    /// the calls running at the start are found in the events before the
    /// first of `gaps`, those running at the end of a gap in the events
    /// between it and the next (an exit after a gap may end a call entered
    /// in the gap, or before).
    fn of(
        events: &mut dyn Iterator<Item = GraphEvent>,
        gaps: &[Gap],
        functions: &mut HashSet<usize>,
    ) -> Self {
        let mut scan = ThreadScan {
            first_time: None,
            events: 0,
            made_up_entries: Vec::new(),
            has_unwritable: false,
            min_depth: u16::MAX,
            inherited: false,
            shift: 0,
        };
        // Events repeat few functions: skip runs of the same one cheaply.
        let mut last_function = None;
        let mut see = |event: &GraphEvent| {
            scan.first_time.get_or_insert(event.time_ns);
            scan.events += 1;
            scan.has_unwritable |= record(event).is_none();
            scan.min_depth = scan.min_depth.min(event.depth);
            if last_function != Some(event.function) {
                last_function = Some(event.function);
                functions.insert(event.function);
            }
        };
        let mut read = 0;
        let mut made_up = Vec::with_capacity(gaps.len() + 1);
        for segment in 0..=gaps.len() {
            let end = gaps.get(segment).map_or(usize::MAX, |gap| gap.after);
            let mut part = (&mut *events).take(end - read);
            made_up.push(entries_of_calls_running_at_start(
                (&mut part).inspect(&mut see),
            ));
            part.for_each(|event| see(&event));
            read = end;
        }
        scan.made_up_entries = made_up;
        scan
    }

    /// Lowers every depth so that the smallest is 0: a thread whose
    /// events begin inside calls that never return in them (a flight
    /// window whose oldest events were evicted, a recording started while
    /// the thread ran) has no record at the depths above. uftrace fills
    /// those with a frame of address 0 and closes it at each lost record,
    /// as a `<0>` row hours long in `report`.
    fn start_at_depth_zero(&mut self) {
        if self.min_depth == u16::MAX || self.min_depth == 0 {
            return;
        }
        self.shift = self.min_depth;
        // Made-up entries are not read through `shifted`: lower them here.
        for entry in self.made_up_entries.iter_mut().flatten() {
            entry.depth -= self.shift;
        }
    }

    /// For the thread of a forked child that continues its parent's calls
    /// ([`EventSource::continues_parent_frames`]), as the streaming
    /// recorder writes one: the calls running at its start get no entry
    /// (their exits are written as they are: uftrace pairs them with the
    /// parent's frames); and if `no_gaps`, its depths are lowered so that
    /// its shallowest record (an inherited exit such as `fork`'s among
    /// them) is at 0, as `UftraceStream::finish` does and for the same
    /// reason (uftrace would show the parent's frames above the first
    /// record as a `<0>` row): nothing moves for a child that returned
    /// from `main`, whose exit is at 0.
    fn continue_parent_frames(&mut self, no_gaps: bool) {
        self.inherited = true;
        if let Some(running) = self.made_up_entries.first_mut() {
            running.clear();
        }
        if no_gaps && self.min_depth != u16::MAX {
            self.shift = self.min_depth;
        }
    }
}

/// A [`Trace`]'s threads as [`write_uftrace_dir`] writes them: those
/// sharing a tid are one, their events concatenated in the order of their
/// first events. Keeps the order of first appearance; the first name found
/// (in that order) names the thread.
struct MergedThreads<'a> {
    trace: &'a Trace,
    /// Per tid, its threads, ordered by first event.
    threads: Vec<(u32, Vec<&'a ThreadTrace>)>,
}

impl<'a> MergedThreads<'a> {
    fn of(trace: &'a Trace) -> Self {
        let mut threads: Vec<(u32, Vec<&ThreadTrace>)> = Vec::new();
        let mut by_tid: HashMap<u32, usize> = HashMap::new();
        for thread in &trace.threads {
            let index = *by_tid.entry(thread.tid).or_insert_with(|| {
                threads.push((thread.tid, Vec::new()));
                threads.len() - 1
            });
            threads[index].1.push(thread);
        }
        for (_, parts) in &mut threads {
            parts.sort_by_key(|t| t.events.first().map_or(u64::MAX, |e| e.time_ns));
        }
        MergedThreads { trace, threads }
    }
}

impl EventSource for MergedThreads<'_> {
    type Error = Infallible;

    fn pid(&self) -> u32 {
        self.trace.pid
    }

    fn exe(&self) -> &str {
        &self.trace.exe
    }

    fn threads(&self) -> Vec<ThreadInfo> {
        self.threads
            .iter()
            .map(|(tid, parts)| ThreadInfo {
                tid: *tid,
                name: parts.iter().find_map(|t| t.name.clone()),
            })
            .collect()
    }

    fn name_of(&self, function: usize) -> String {
        self.trace.name_of(function)
    }

    fn read_thread<R>(
        &self,
        index: usize,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), Infallible> {
        let parts = &self.threads[index].1;
        let mut events = parts.iter().flat_map(|t| t.events.iter().copied());
        let lost = parts.iter().map(|t| t.lost).sum();
        Ok((read(&mut events), lost))
    }
}

/// Opens `dir` for a new uftrace data directory: it must be empty, or
/// not exist (it is made); [`TraceDir::open_output`] refuses a directory
/// another user could write into.
pub(super) fn prepare_dir(dir: &Path) -> Result<TraceDir, ExportError> {
    let dir = TraceDir::open_output(dir)?;
    dir.ensure_empty()?;
    Ok(dir)
}

/// A 16-hex-digit session id derived from the trace (FNV-1a), so that the
/// same trace always gives the same directory.
pub(super) fn session_id(trace: &Trace, first_time: u64) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let bytes = trace
        .pid
        .to_le_bytes()
        .into_iter()
        .chain(first_time.to_le_bytes())
        .chain(trace.exe.bytes());
    for byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

pub(super) fn task_txt(
    trace: &Trace,
    threads: &[ThreadTrace],
    sid: &str,
    session_time: u64,
) -> String {
    let mut out = format!(
        "SESS timestamp={} pid={} sid={sid} exename=\"{}\"\n",
        timestamp(session_time),
        trace.pid,
        one_line(&trace.exe).replace('"', "'")
    );
    for thread in threads {
        out.push_str(&format!(
            "TASK timestamp={} tid={} pid={}\n",
            timestamp(session_time),
            thread.tid,
            trace.pid
        ));
    }
    out
}

pub(super) fn fntrace_text(threads: &[ThreadTrace], added: &[(u32, Vec<usize>)]) -> String {
    let mut out = String::from(
        "# fntrace: thread names, and records fntrace added so that uftrace pairs\n\
         # entries and exits (indices among the entry and exit records of TID.dat).\n\
         # uftrace ignores this file.\n",
    );
    for thread in threads {
        if let Some(name) = &thread.name {
            out.push_str(&format!("thread {} {}\n", thread.tid, one_line(name)));
        }
    }
    for (tid, indices) in added {
        for chunk in indices.chunks(32) {
            let list: Vec<String> = chunk.iter().map(|i| i.to_string()).collect();
            out.push_str(&format!("added {tid} {}\n", list.join(" ")));
        }
    }
    out
}

/// `gaps` as the writer places them: in order, those at the same place
/// merged, empty ones dropped.
fn placed_gaps(mut gaps: Vec<Gap>) -> Vec<Gap> {
    gaps.retain(|gap| gap.count > 0);
    gaps.sort_by_key(|gap| gap.after);
    let mut placed: Vec<Gap> = Vec::with_capacity(gaps.len());
    for gap in gaps {
        match placed.last_mut() {
            Some(last) if last.after == gap.after => {
                last.count = last.count.saturating_add(gap.count);
            }
            _ => placed.push(gap),
        }
    }
    placed
}

/// Why a record is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecordKind {
    /// An event of the thread.
    Recorded,
    /// Made up so that uftrace pairs the records: listed in `fntrace.txt`,
    /// left out again by fntrace's reader.
    Added,
    /// The exit of a call open at a gap, at the time of the last record
    /// before it: not listed, so that fntrace's reader, like uftrace's,
    /// counts the call up to the gap.
    ClosedAtGap,
    /// The entry of a call running at the end of a gap, at the time of the
    /// first event after it: not listed, as `ClosedAtGap`.
    OpenedAtGap,
}

/// One record [`consistent_records`] passes on.
enum Step {
    /// An entry or exit.
    Record { event: GraphEvent, kind: RecordKind },
    /// A lost record for this many events.
    Lost(u64),
}

/// Passes the records to write for a thread's `events` to `emit` (see
/// [`write_uftrace_dir`], "Choices"); `made_up_entries` are those of the
/// calls running at the thread's start ([`entries_of_calls_running_at_start`]
/// of its events before the first gap), then of those running at the end
/// of each gap (of its events up to the next gap); `gaps` where it lost
/// events (see [`placed_gaps`]).
///
/// At a gap, every call still open is closed by an exit at the time of the
/// last record before it, then a lost record follows: uftrace 0.13 misreads
/// a call open at a lost record (its `graph` crashed, its `report` gave
/// totals of hours). After a gap, the pairing starts afresh, from entries
/// for the calls running then (exits after the gap without an entry after
/// it) at the time of the first event after it, written just after the
/// lost record, as uftrace's own recorder writes the entries of the calls
/// open after its gaps (with their true times, which fntrace does not
/// know): not listed as added, so that both readers count the part of the
/// call after the gap. Without them uftrace 0.13 keeps, for the calls above
/// the first record after a gap, frames named after the calls it last saw
/// at their depths before the gap, and takes later calls of those functions
/// for recursive ones (their time missing from its totals). No entry is
/// made up at the thread's first timestamp for an exit after a gap. A
/// thread whose records after its last gap start deeper than depth 0, or
/// leave exits out, ends as at a gap: its open calls closed, a lost record
/// counting the exits left out (without it, uftrace counts the frames it
/// keeps below the first record after the gap once more at the end, each
/// under the name of the last call it saw at that depth before the gap).
fn consistent_records(
    events: &mut dyn Iterator<Item = GraphEvent>,
    made_up_entries: Vec<Vec<GraphEvent>>,
    gaps: &[Gap],
    inherited: bool,
    emit: &mut dyn FnMut(Step) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut made_up_entries = made_up_entries.into_iter();
    let mut read = 0usize;
    // Time of the last record passed on; whether one followed the last gap.
    let last_time = Cell::new(None::<u64>);
    // Depth of the first record after the last gap, if any.
    let first_depth_since_gap = Cell::new(None::<u16>);
    let mut left_out_since_gap = 0u64;
    for segment in 0..=gaps.len() {
        let end = gaps.get(segment).map_or(usize::MAX, |gap| gap.after);
        let mut part = (&mut *events).take(end.saturating_sub(read));
        let pairing = Calls::streaming(
            &mut part,
            made_up_entries.next().unwrap_or_default(),
            Reading::Exports,
        );
        let made_up = pairing.made_up_entries();
        let mut record = |event: GraphEvent, kind: RecordKind| {
            last_time.set(Some(event.time_ns));
            if first_depth_since_gap.get().is_none() {
                first_depth_since_gap.set(Some(event.depth));
            }
            emit(Step::Record { event, kind })
        };
        for step in pairing {
            match step {
                CallStep::Entered { entry_index, entry } => {
                    let kind = match (entry_index < made_up, segment) {
                        (false, _) => RecordKind::Recorded,
                        (true, 0) => RecordKind::Added,
                        (true, _) => RecordKind::OpenedAtGap,
                    };
                    record(entry, kind)?;
                }
                CallStep::Returned { exit, .. } => record(exit, RecordKind::Recorded)?,
                // Unwound: closed just before the event that shows it.
                CallStep::Unfinished {
                    entry,
                    unwound_by: Some(event),
                } => record(
                    GraphEvent {
                        time_ns: event.time_ns,
                        kind: EventKind::Exit,
                        ..entry
                    },
                    RecordKind::Added,
                )?,
                // Open at a gap, or at the end of a thread with one: closed
                // at the last record's time (see above).
                // (Innermost first: the last record is the innermost
                // call's entry or exit, or an exit closing one.)
                CallStep::Unfinished {
                    entry,
                    unwound_by: None,
                } if !gaps.is_empty() => record(
                    GraphEvent {
                        time_ns: last_time.get().unwrap_or(entry.time_ns),
                        kind: EventKind::Exit,
                        ..entry
                    },
                    RecordKind::ClosedAtGap,
                )?,
                // Still running when the events end, in a thread without
                // a gap: left without an exit, as recorded.
                CallStep::Unfinished {
                    unwound_by: None, ..
                } => {}
                // Before any gap, in a forked child continuing its
                // parent's calls: the exit of one of those, as it is.
                CallStep::UnmatchedExit { exit } if inherited && segment == 0 => {
                    record(exit, RecordKind::Recorded)?
                }
                // An exit without entry: left out (after a gap, counted).
                CallStep::UnmatchedExit { .. } => {
                    if segment > 0 {
                        left_out_since_gap += 1;
                    }
                }
            }
        }
        read = end;
        match gaps.get(segment) {
            Some(gap) => {
                emit(Step::Lost(gap.count))?;
                left_out_since_gap = 0;
                first_depth_since_gap.set(None);
            }
            None if segment > 0
                && (left_out_since_gap > 0
                    || first_depth_since_gap.get().is_some_and(|d| d > 0)) =>
            {
                emit(Step::Lost(left_out_since_gap))?;
            }
            None => {}
        }
    }
    Ok(())
}
