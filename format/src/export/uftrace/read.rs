//! Reading a uftrace data directory (fntrace's or `uftrace record`'s):
//! [`UftraceReader`] streams it thread by thread, record by record;
//! [`read_uftrace_dir`] loads it whole into a [`Trace`] through it.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};

use super::super::ExportError;
use super::debug::{load_auto_specs, load_enums, ValueNames};
use super::format::{parse_info, FEAT_SYM_REL_ADDR};
use super::meta::{
    load_symbols, parse_task_txt, read_file, read_fntrace_file, session_modules, strip_build_ids,
    SymbolTable, Tasks, SPACE_SHIFT,
};
use super::records::ThreadRecords;
use crate::analysis;
use crate::argspec::{self, ArgSpec, EnumDef, FunctionSpec, SpecKind};
use crate::glob;
use crate::names::{demangle, demangle_full};
use crate::source::{EventSource, ThreadInfo, Values};
use crate::trace::{EventKind, GraphEvent, ThreadTrace, Trace};

/// What [`UftraceReader::set_progress`] installs.
type ProgressCallback = Box<dyn FnMut(u64) + Send>;

/// Bytes of records read between two calls of the progress callback.
const PROGRESS_STEP: u64 = 4 << 20;

/// A uftrace data directory opened for reading: what [`write_uftrace_dir`]
/// writes, and what `uftrace record` writes (without arguments or return
/// values).
///
/// Opening reads the small files (`info`, `task.txt`, the session map, the
/// `.sym` symbol tables, `fntrace.txt`); the threads' records are read from
/// their `TID.dat` files each time a thread is read
/// ([`EventSource::read_thread`]), through a 1 MiB buffer, so that memory
/// does not grow with the size of the recording. Event records are skipped;
/// each address is mapped to the start of the symbol containing it, named
/// from the `.sym` files (demangled by [`EventSource::name_of`]: uftrace
/// writes ELF names, and so does fntrace, except for Rust names, written
/// readable, see [`uftrace_symbol_name`]); thread names come from
/// `fntrace.txt` if any; the command line comes from `info`.
///
/// Each thread is read in its own time order: every report and export of
/// this crate works thread by thread (the Chrome JSON and the Perfetto
/// trace list one thread after another), so none needs the threads merged
/// by time. The reader is `Sync`: several threads of the trace can be read
/// at once, from several threads of the reader's process
/// ([`map_threads`](crate::analysis::parallel::map_threads)).
///
/// [`uftrace_symbol_name`]: crate::uftrace_symbol_name
/// [`write_uftrace_dir`]: crate::export::write_uftrace_dir
pub struct UftraceReader {
    dir: PathBuf,
    pid: u32,
    exe: String,
    cmdline: String,
    threads: Vec<ThreadInfo>,
    /// Size of each thread's record file (0 if it has none).
    data_bytes: Vec<u64>,
    /// The sessions' address spaces (one per distinct map: a forked child
    /// shares its parent's, a program exec'd has its own); the first
    /// session's first.
    spaces: Vec<AddressSpace>,
    /// Per thread, the address spaces it ran in, each from a time on.
    thread_spaces: Vec<Vec<(u64, usize)>>,
    /// Per thread, the sorted indices of the records fntrace added.
    added: HashMap<u32, Vec<usize>>,
    /// Demangled names asked for so far.
    names: Mutex<HashMap<usize, String>>,
    /// C++ names in full ([`demangle_full`]) rather than uftrace's simple
    /// form ([`demangle`]).
    full_cpp_names: AtomicBool,
    /// Record bytes read so far, over every read.
    bytes_read: AtomicU64,
    /// Called with `bytes_read` as reading goes.
    progress: Mutex<Option<ProgressCallback>>,
    /// Reads of threads in progress, from any thread.
    reading_now: AtomicUsize,
    /// The argument and return-value specs of `info` (see [`argspec`]).
    arg_specs: Vec<FunctionSpec>,
    /// Whether their patterns are regular expressions (uftrace's default).
    arg_regex: bool,
    /// The specs as `info` has them.
    arg_spec: String,
    retval_spec: String,
    /// The enums of the `.dbg` files (`/e:NAME` values are named by).
    enums: Vec<EnumDef>,
}

impl std::fmt::Debug for UftraceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UftraceReader")
            .field("dir", &self.dir)
            .field("pid", &self.pid)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl UftraceReader {
    /// Names C++ functions in full from now on (template arguments,
    /// parameters, return type: overloads and instances apart), or, by
    /// default, in uftrace's simple form. Set it before asking for names.
    pub fn set_full_cpp_names(&self, full: bool) {
        self.full_cpp_names.store(full, Ordering::Relaxed);
        lock(&self.names).clear();
    }

    /// Opens the directory `dir`, reading everything but the records.
    pub fn open(dir: &Path) -> Result<UftraceReader, ExportError> {
        let meta = fs::metadata(dir)
            .map_err(|e| ExportError::io(dir, "opening uftrace data directory", e))?;
        if !meta.is_dir() {
            return Err(ExportError::malformed(
                dir,
                "not a directory (expected a uftrace data directory)",
            ));
        }

        let info_path = dir.join("info");
        let info = read_file(&info_path)?;
        let header = parse_info(&info_path, &info)?;

        let task_path = dir.join("task.txt");
        let tasks = parse_task_txt(
            &task_path,
            &String::from_utf8_lossy(&read_file(&task_path)?),
        )?;

        let spaces = AddressSpace::load_all(dir, &tasks, header.features & FEAT_SYM_REL_ADDR != 0)?;
        let space_of_session = spaces.1;
        let spaces = spaces.0;
        let mut seen = HashSet::new();
        let tids: Vec<u32> = tasks
            .tids
            .iter()
            .chain(&header.tids)
            .copied()
            .filter(|&tid| seen.insert(tid))
            .collect();
        let mut fntrace = read_fntrace_file(dir)?;
        let data_bytes = tids
            .iter()
            .map(|tid| fs::metadata(dir.join(format!("{tid}.dat"))).map_or(0, |m| m.len()))
            .collect();
        let thread_spaces = tids
            .iter()
            .map(|&tid| tasks.address_spaces_of(tid, &space_of_session))
            .collect();
        let threads = tids
            .iter()
            .map(|&tid| ThreadInfo {
                tid,
                name: fntrace.names.remove(&tid),
            })
            .collect();

        let first = &tasks.sessions[0];
        // Each with its kind: `argN[OFFSET]` is read at the entry in one, at
        // the exit in the other.
        let arg_specs = [
            (&header.arg_spec, SpecKind::Arguments),
            (&header.retval_spec, SpecKind::Retval),
        ]
        .iter()
        .map(|(spec, kind)| argspec::parse(spec, *kind))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ExportError::malformed(&info_path, format!("argument spec {e}")))?
        .concat();
        let (mut auto_specs, mut enums) = match &header.auto {
            Some(auto) => load_auto_specs(dir, auto),
            None => Default::default(),
        };
        // Given specs after uftrace's `-a` ones: merged over them.
        auto_specs.extend(arg_specs);
        let arg_specs = auto_specs;
        if !arg_specs.is_empty() {
            // A module's own enums first, as uftrace looks them up.
            let builtin = std::mem::replace(&mut enums, load_enums(dir));
            enums.extend(builtin);
        }
        Ok(UftraceReader {
            enums,
            arg_specs,
            arg_regex: header.regex,
            arg_spec: header.arg_spec,
            retval_spec: header.retval_spec,
            dir: dir.to_path_buf(),
            pid: first.pid,
            exe: if first.exe.is_empty() {
                header.exe
            } else {
                first.exe.clone()
            },
            cmdline: header.cmdline,
            threads,
            data_bytes,
            spaces,
            thread_spaces,
            added: fntrace.added,
            names: Mutex::new(HashMap::new()),
            full_cpp_names: AtomicBool::new(false),
            bytes_read: AtomicU64::new(0),
            progress: Mutex::new(None),
            reading_now: AtomicUsize::new(0),
        })
    }

    /// The argument and return-value specs of its `info` (`-A`, `-R`;
    /// none if it records no values).
    pub fn arg_specs(&self) -> &[FunctionSpec] {
        &self.arg_specs
    }

    /// The process's command line, from `info` (empty if missing).
    pub fn cmdline(&self) -> &str {
        &self.cmdline
    }

    /// The session's memory map (`/proc/PID/maps` text, without uftrace's
    /// build ids).
    pub fn maps(&self) -> &str {
        &self.spaces[0].maps
    }

    /// Total size of the threads' record files, in bytes: nearly all of the
    /// directory, and what one full read of every thread reads.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes.iter().sum()
    }

    /// Record bytes read so far, over every read of a thread.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// Has `progress` called with [`bytes_read`](Self::bytes_read) every few
    /// MiB of records read, and at the end of each thread's read.
    pub fn set_progress(&self, progress: impl FnMut(u64) + Send + 'static) {
        *lock(&self.progress) = Some(Box::new(progress));
    }

    /// The ELF symbol name (as the `.sym` file has it) of the symbol that
    /// starts at `function`, if it has one.
    pub fn symbol_name(&self, function: usize) -> Option<&str> {
        let space = self.spaces.get(function >> SPACE_SHIFT)?;
        let start = function & ((1 << SPACE_SHIFT) - 1);
        space
            .symbols
            .containing(start)
            .filter(|symbol| symbol.start == start)
            .and_then(|symbol| symbol.name.as_deref())
    }

    /// Counts `bytes` more record bytes read, and tells the callback when a
    /// step is passed (or at once with `force`).
    fn count_read(&self, bytes: u64, force: bool) {
        let before = self.bytes_read.fetch_add(bytes, Ordering::Relaxed);
        let after = before + bytes;
        if force || after / PROGRESS_STEP != before / PROGRESS_STEP {
            if let Some(progress) = lock(&self.progress).as_mut() {
                progress(after);
            }
        }
    }
}

impl EventSource for UftraceReader {
    type Error = ExportError;

    fn pid(&self) -> u32 {
        self.pid
    }

    fn exe(&self) -> &str {
        &self.exe
    }

    fn threads(&self) -> Vec<ThreadInfo> {
        self.threads.clone()
    }

    fn name_of(&self, function: usize) -> String {
        if let Some(name) = lock(&self.names).get(&function) {
            return name.clone();
        }
        let name = match self.symbol_name(function) {
            Some(symbol) if self.full_cpp_names.load(Ordering::Relaxed) => demangle_full(symbol),
            Some(symbol) => demangle(symbol),
            None => format!("{function:#x}"),
        };
        lock(&self.names).insert(function, name.clone());
        name
    }

    fn read_thread<R>(
        &self,
        index: usize,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), ExportError> {
        let records = self.records_of(index)?;
        let reading = ReadingNow::enter(&self.reading_now);
        // A core left over: records are decoded on it while `read` runs
        // here (a third of a report's time is decoding); not worth a
        // thread for a small file (a trace of 10,000 short threads).
        if reading.count < analysis::parallel::reading_threads(usize::MAX)
            && self.data_bytes[index] >= PIPELINE_MIN_BYTES
        {
            self.read_pipelined(index, records, read)
        } else {
            self.read_here(index, records, read)
        }
    }

    fn size_hint(&self, index: usize) -> u64 {
        self.data_bytes[index]
    }

    /// Read from the thread's file, apart from its events: only the
    /// records that carry values are kept.
    fn values_of(&self, index: usize) -> Result<Values, ExportError> {
        let mut values = Values::new();
        if self.arg_specs.is_empty() {
            return Ok(values);
        }
        let mut records = self.records_of(index)?;
        while let Some(event) = records.next_event()? {
            if records.data.is_empty() {
                continue;
            }
            let exit = event.kind == EventKind::Exit;
            let space = &self.spaces[self.space_at(index, event.time_ns)];
            let names = ValueNames {
                functions: &space.symbols,
                objects: &space.objects,
                enums: &self.enums,
            };
            if let Some(text) = argspec::show_named(&records.values, exit, &records.data, &names) {
                values.entry((event.time_ns, exit)).or_insert(text);
            }
        }
        Ok(values)
    }
}

/// Record bytes from which a thread's read is pipelined (64K records).
const PIPELINE_MIN_BYTES: u64 = 1 << 20;

/// Events decoded at a time by the decoding thread of a pipelined read.
const BATCH_EVENTS: usize = 16 * 1024;

/// Batches in flight between the decoding thread and the reading one.
const BATCHES_IN_FLIGHT: usize = 4;

impl UftraceReader {
    /// Thread `index`'s record file, opened.
    pub(super) fn records_of(&self, index: usize) -> Result<ThreadRecords<'_>, ExportError> {
        let tid = self.threads[index].tid;
        let added = self.added.get(&tid).map_or(&[][..], |v| &v[..]);
        let values_at = Box::new(move |address, time| self.values_at(address, time, index));
        ThreadRecords::open(&self.dir.join(format!("{tid}.dat")), added, Some(values_at))
    }

    /// The values the spec gives the function at `address` (as recorded,
    /// at `time`): as uftrace merges them.
    fn values_at(&self, address: u64, time: u64, thread: usize) -> Result<Vec<ArgSpec>, String> {
        let space = self.space_at(thread, time);
        let name = usize::try_from(address)
            .ok()
            .and_then(|a| self.spaces.get(space)?.symbols.containing(a))
            .and_then(|symbol| symbol.name.as_deref())
            .map(demangle)
            .ok_or_else(|| format!("no symbol holds its address {address:#x}"))?;
        let mut refused = None;
        let values = argspec::values_for(&self.arg_specs, |pattern| {
            if !self.arg_regex {
                return glob::matches(pattern, &name);
            }
            // A regular expression without special characters is matched
            // as a plain name, as uftrace does; fntrace reads no others.
            if pattern.contains(|c| ".^$*+?()[]{}|\\".contains(c)) {
                refused = Some(pattern.to_string());
                return false;
            }
            pattern == name
        });
        match refused {
            Some(pattern) if values.is_empty() => Err(format!(
                "its function {name} may be selected by the regular expression `{pattern}`, \
                 which fntrace does not read (uftrace record --match glob records globs)"
            )),
            _ if values.is_empty() => Err(format!("no spec selects its function {name}")),
            _ => Ok(values),
        }
    }

    /// The address space `thread` ran in at `time`.
    fn space_at(&self, thread: usize, time: u64) -> usize {
        self.thread_spaces[thread]
            .iter()
            .rev()
            .find(|(since, _)| *since <= time)
            .or(self.thread_spaces[thread].first())
            .map_or(0, |&(_, space)| space)
    }

    /// [`EventSource::read_thread`] on the calling thread alone.
    pub(super) fn read_here<R>(
        &self,
        index: usize,
        mut records: ThreadRecords<'_>,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), ExportError> {
        let mut decoder = Decoder::new(self, index);
        let mut error = None;
        let mut events = std::iter::from_fn(|| {
            decoder.next(&mut records).unwrap_or_else(|e| {
                error = Some(e);
                None
            })
        });
        let value = read(&mut events);
        decoder.finish(&records);
        match error {
            Some(e) => Err(e),
            None => Ok((value, records.lost)),
        }
    }

    /// [`EventSource::read_thread`] with the records decoded on a thread of
    /// their own, handed over in batches; `read` runs on the calling
    /// thread. Stops decoding when `read` returns.
    pub(super) fn read_pipelined<R>(
        &self,
        index: usize,
        mut records: ThreadRecords<'_>,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), ExportError> {
        let (full, full_rx) = mpsc::sync_channel::<Vec<GraphEvent>>(BATCHES_IN_FLIGHT);
        let (empty, empty_rx) = mpsc::channel::<Vec<GraphEvent>>();
        std::thread::scope(|scope| {
            let decoding = scope.spawn(move || {
                let mut decoder = Decoder::new(self, index);
                let result = 'decode: loop {
                    let mut batch = empty_rx
                        .try_recv()
                        .unwrap_or_else(|_| Vec::with_capacity(BATCH_EVENTS));
                    batch.clear();
                    while batch.len() < BATCH_EVENTS {
                        match decoder.next(&mut records) {
                            Ok(Some(event)) => batch.push(event),
                            Ok(None) => break,
                            Err(e) => {
                                // The events before the error still go.
                                let _ = full.send(batch);
                                break 'decode Err(e);
                            }
                        }
                    }
                    let last = batch.len() < BATCH_EVENTS;
                    // A closed channel: `read` is done with the events.
                    if (!batch.is_empty() && full.send(batch).is_err()) || last {
                        break Ok(());
                    }
                };
                decoder.finish(&records);
                result.map(|()| records.lost)
            });
            let mut batches = Batches {
                full: full_rx,
                empty,
                batch: Vec::new(),
                next: 0,
            };
            let value = read(&mut batches);
            drop(batches);
            match decoding.join() {
                Ok(result) => result.map(|lost| (value, lost)),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
}

/// The events of a pipelined read, batch after batch; used batches go back
/// to the decoding thread.
struct Batches {
    full: mpsc::Receiver<Vec<GraphEvent>>,
    empty: mpsc::Sender<Vec<GraphEvent>>,
    batch: Vec<GraphEvent>,
    next: usize,
}

impl Iterator for Batches {
    type Item = GraphEvent;

    fn next(&mut self) -> Option<GraphEvent> {
        while self.next == self.batch.len() {
            let batch = self.full.recv().ok()?;
            let used = std::mem::replace(&mut self.batch, batch);
            // The decoder may be gone already: then the batch is freed.
            let _ = self.empty.send(used);
            self.next = 0;
        }
        let event = self.batch[self.next];
        self.next += 1;
        Some(event)
    }
}

/// Turns one thread's records into events with their functions' addresses
/// in the trace, telling the progress callback as it goes.
struct Decoder<'r> {
    reader: &'r UftraceReader,
    /// The thread's address spaces, each from a time on.
    spaces: &'r [(u64, usize)],
    /// This read's own memo per address space: reads run side by side.
    memos: Vec<Box<Memo>>,
    /// Record bytes already counted as read.
    counted: u64,
}

impl<'r> Decoder<'r> {
    fn new(reader: &'r UftraceReader, index: usize) -> Self {
        Decoder {
            reader,
            spaces: &reader.thread_spaces[index],
            // Made here, on the heap: a 64 KiB array built in `next` would
            // make every call probe its stack pages.
            memos: (0..reader.spaces.len())
                .map(|_| vec![(NO_ADDRESS, 0); MEMO_SLOTS].into_boxed_slice())
                .collect(),
            counted: 0,
        }
    }

    /// The next event of `records`, if any.
    fn next(&mut self, records: &mut ThreadRecords<'_>) -> Result<Option<GraphEvent>, ExportError> {
        let Some(event) = records.next_event()? else {
            return Ok(None);
        };
        // A step of progress every PROGRESS_STEP bytes.
        if records.offset - self.counted >= PROGRESS_STEP {
            self.reader.count_read(records.offset - self.counted, false);
            self.counted = records.offset;
        }
        let space = self
            .spaces
            .iter()
            .rev()
            .find(|(since, _)| *since <= event.time_ns)
            .or(self.spaces.first())
            .map_or(0, |&(_, space)| space);
        Ok(Some(
            self.reader.spaces[space].function_of(event, &mut self.memos[space]),
        ))
    }

    /// Counts the rest of what was read.
    fn finish(&mut self, records: &ThreadRecords<'_>) {
        self.reader.count_read(records.offset - self.counted, true);
        self.counted = records.offset;
    }
}

/// One read of a thread in progress, counted in the reader while it lasts.
struct ReadingNow<'r> {
    reads: &'r AtomicUsize,
    /// The reads in progress, this one included, when it began.
    count: usize,
}

impl<'r> ReadingNow<'r> {
    fn enter(reads: &'r AtomicUsize) -> Self {
        let count = reads.fetch_add(1, Ordering::Relaxed) + 1;
        ReadingNow { reads, count }
    }
}

impl Drop for ReadingNow<'_> {
    fn drop(&mut self) {
        self.reads.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `mutex`'s value, even if a thread panicked while holding it (the maps
/// it guards stay valid at every step).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One address space of a recording: a session's map and symbols.
struct AddressSpace {
    maps: String,
    symbols: SymbolTable,
    /// The data objects of its `.sym` files.
    objects: SymbolTable,
    /// For every space but the first: the address each of its functions
    /// has in the trace. A function whose ELF name an earlier space has
    /// takes that space's address (uftrace's reports merge functions by
    /// name: a program exec'd again is one set of rows); the others get
    /// `start | k << SPACE_SHIFT`, above user space.
    canonical: Option<HashMap<usize, usize>>,
}

/// The last addresses looked up in a space and their functions,
/// direct-mapped by address: a trace holds a few thousand distinct
/// addresses in hundreds of millions of records, and a binary search of the
/// symbol table for each record was a third of a report's time. Each read
/// of a thread has its own.
type Memo = [(usize, usize)];

/// Entries of [`AddressSpace::memo`] (a power of two).
const MEMO_SLOTS: usize = 4096;

/// An address no record holds: marks an empty memo slot.
const NO_ADDRESS: usize = usize::MAX;

impl AddressSpace {
    /// Every session's space, and each session's index among them.
    fn load_all(
        dir: &Path,
        tasks: &Tasks,
        relative: bool,
    ) -> Result<(Vec<AddressSpace>, Vec<usize>), ExportError> {
        let mut spaces: Vec<AddressSpace> = Vec::new();
        let mut space_of_session = Vec::with_capacity(tasks.sessions.len());
        let mut address_of_name: HashMap<String, usize> = HashMap::new();
        for session in &tasks.sessions {
            let map_path = dir.join(format!("sid-{}.map", session.sid));
            let map_text = String::from_utf8_lossy(&read_file(&map_path)?).into_owned();
            let maps = strip_build_ids(&map_text);
            if let Some(known) = spaces.iter().position(|space| space.maps == maps) {
                space_of_session.push(known);
                continue;
            }
            let dlopened: Vec<(&str, u64)> = tasks
                .dlopens
                .iter()
                .filter(|d| d.sid == session.sid)
                .map(|d| (d.path.as_str(), d.base))
                .collect();
            let (symbols, objects) =
                load_symbols(dir, &session_modules(&maps), &dlopened, relative)?;
            let k = spaces.len();
            let canonical = if k == 0 {
                for symbol in symbols.iter() {
                    if let Some(name) = &symbol.name {
                        address_of_name.entry(name.clone()).or_insert(symbol.start);
                    }
                }
                None
            } else {
                let mut canonical = HashMap::new();
                for symbol in symbols.iter() {
                    let own = symbol.start | (k << SPACE_SHIFT);
                    let address = match &symbol.name {
                        Some(name) => *address_of_name.entry(name.clone()).or_insert(own),
                        None => own,
                    };
                    canonical.insert(symbol.start, address);
                }
                Some(canonical)
            };
            spaces.push(AddressSpace {
                maps,
                symbols,
                objects,
                canonical,
            });
            space_of_session.push(k);
        }
        Ok((spaces, space_of_session))
    }

    /// `event` with its function's address in the trace.
    fn function_of(&self, event: GraphEvent, memo: &mut Memo) -> GraphEvent {
        let address = event.function;
        // Fibonacci hashing: code addresses differ in their low bits.
        let slot = (address as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52;
        let entry = &mut memo[slot as usize % MEMO_SLOTS];
        if entry.0 != address {
            *entry = (address, self.lookup(address));
        }
        GraphEvent {
            function: entry.1,
            ..event
        }
    }

    /// The function in the trace that `address` is in (itself when no
    /// symbol holds it).
    fn lookup(&self, address: usize) -> usize {
        match self.symbols.containing(address) {
            Some(symbol) => match &self.canonical {
                None => symbol.start,
                Some(canonical) => canonical[&symbol.start],
            },
            None => address,
        }
    }
}

/// Loads a uftrace data directory into a [`Trace`], through
/// [`UftraceReader`] (which see for what is read and how): the whole trace
/// in memory, for small traces and tests. [`Trace::names`] and
/// [`Trace::symbols`] hold the functions that occur; `maps` is the session's
/// map file.
pub fn read_uftrace_dir(dir: &Path) -> Result<Trace, ExportError> {
    read_uftrace_dir_with_progress(dir, &mut |_, _| {})
}

/// [`read_uftrace_dir`], calling `progress(bytes_read, total_bytes)` of the
/// threads' record files (`*.dat`, nearly all of a directory's size) after
/// each one is read, for a progress bar.
pub fn read_uftrace_dir_with_progress(
    dir: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Trace, ExportError> {
    let reader = UftraceReader::open(dir)?;
    let total_bytes = reader.data_bytes();
    let mut names = HashMap::new();
    let mut symbols = HashMap::new();
    let mut threads = Vec::with_capacity(reader.threads.len());
    for (index, info) in reader.threads().into_iter().enumerate() {
        let capacity = (reader.data_bytes[index] / 16) as usize;
        let (events, lost) = reader.read_thread(index, |events| {
            let mut all = Vec::with_capacity(capacity);
            all.extend(events);
            all
        })?;
        for event in &events {
            if let Some(symbol) = reader.symbol_name(event.function) {
                symbols.entry(event.function).or_insert_with(|| {
                    names.insert(event.function, demangle(symbol));
                    symbol.to_string()
                });
            }
        }
        progress(reader.bytes_read(), total_bytes);
        threads.push(ThreadTrace {
            tid: info.tid,
            name: info.name,
            events,
            lost,
        });
    }
    Ok(Trace {
        pid: reader.pid,
        exe: reader.exe.clone(),
        cmdline: reader.cmdline.clone(),
        threads,
        names,
        symbols,
        maps: reader.maps().to_string(),
        // Their functions are named in `names` and `symbols`.
        libraries: Vec::new(),
        arg_spec: reader.arg_spec.clone(),
        retval_spec: reader.retval_spec.clone(),
    })
}
