//! uftrace data directories: written so that uftrace 0.13's `replay`,
//! `report`, `graph`, `dump`, `tui` and `info` read them, and read back into
//! a [`Trace`].
//!
//! # Layout
//!
//! | file | contents |
//! |---|---|
//! | `info` | 40-byte header (below), then one `key:value` text section per set info bit |
//! | `task.txt` | `SESS timestamp=S.N pid=P sid=SID exename="PATH"`, then one `TASK timestamp=S.N tid=T pid=P` per thread |
//! | `sid-SID.map` | one `/proc/PID/maps`-style line per module (`START-END r-xp 00000000 00:00 0 PATH`, `START` being the module's first mapping, its load base) and the `[stack]` line, without which uftrace takes every address for a kernel one |
//! | `TID.dat` | the thread's records, 16 bytes each (below) |
//! | `NAME.sym` | symbols of the module whose file name is `NAME`, relative to its base |
//! | `fntrace.txt` | thread names (`thread TID NAME`), which uftrace has no place for; uftrace ignores the file |
//!
//! `info` header, little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `Ftrace!\0` |
//! | 8 | 4 | version, 4 |
//! | 12 | 2 | header size, 40 |
//! | 14 | 1 | endianness, 1 (little) |
//! | 15 | 1 | ELF class, 2 (64-bit) |
//! | 16 | 8 | feature bits: `TASK_SESSION` (1) and `SYM_REL_ADDR` (5), that is `0x22`; with no feature bit uftrace 0.13 crashes |
//! | 24 | 8 | info bits: `EXE_NAME` (0, section `exename:PATH`) and `TASKINFO` (7, section `taskinfo:lines=2`, `taskinfo:nr_tid=N`, `taskinfo:tids=A,B`) |
//! | 32 | 2 | max stack depth, 1024 |
//! | 34 | 6 | zero |
//!
//! A `.dat` record is two little-endian `u64`s: the time in nanoseconds, then
//!
//! | bits | field |
//! |---|---|
//! | 0–1 | type: 0 entry, 1 exit, 2 lost (the address field holds the number of records lost), 3 event |
//! | 2 | more: argument or event data follows (fntrace never writes it) |
//! | 3–5 | magic, 5 |
//! | 6–15 | depth (0–1023) |
//! | 16–63 | address (48 bits): any address inside the function; fntrace writes its entry address |
//!
//! A `.sym` file starts with `# symbols: N` and `# path name: PATH`, then has
//! one `%016x T NAME` line per function, sorted by address, relative to the
//! module base (feature `SYM_REL_ADDR`). uftrace gives each symbol the size up
//! to the next line; fntrace knows entry addresses only, so a function's
//! size is the distance to the next known function of the module, capped at
//! [`MAX_SYMBOL_SIZE`] by a `? __func_end` line, which also ends the file.
//!
//! # Choices
//!
//! - Times are the events' monotonic nanoseconds (uftrace's default clock is
//!   the monotonic clock too). The `SESS` and `TASK` lines are timestamped one
//!   microsecond before the first event: uftrace resolves no record older than
//!   its session.
//! - Functions outside every file mapping of [`Trace::maps`] (or all of them
//!   when `maps` is empty) go into a pseudo-module `fntrace-unmapped` whose
//!   map line covers them (listed last, so real modules take precedence).
//!   Functions without a name get their address in hex as name (the form of
//!   [`Trace::name_of`]), so that uftrace never attributes them to the
//!   neighbouring symbol; [`read_uftrace_dir`] drops such names again.
//! - A thread's lost events ([`ThreadTrace::lost`]) are one lost record at
//!   the start of its `.dat`, timestamped like its first event. (Not at the
//!   end, where it would belong if the buffer filled up: uftrace 0.13's
//!   `graph` command crashes on a thread that has an exit without entry, a
//!   call without exit and a lost record after them.) Events deeper than 1023
//!   (uftrace's limit) are not written and count as lost.
//! - Two threads with the same tid (the kernel reuses tids) are written as
//!   one, in the order of their first events.
//! - Modules are told apart by file name, as uftrace does: if two modules
//!   share a file name, only the first gets a `.sym` file.
//!
//! [`read_uftrace_dir`] accepts what [`write_uftrace_dir`] writes and what
//! `uftrace record` writes (without arguments or return values): event
//! records are skipped, each function address is mapped to the start of the
//! symbol containing it, and thread names come from `fntrace.txt` if any.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::ExportError;
use crate::trace::{EventKind, GraphEvent, ThreadTrace, Trace};

/// Largest size given to a symbol in a `.sym` file, in bytes.
pub const MAX_SYMBOL_SIZE: u64 = 64 * 1024;

const MAGIC: &[u8; 8] = b"Ftrace!\0";
const VERSION: u32 = 4;
const HEADER_SIZE: u16 = 40;
const MAX_STACK: u16 = 1024;
const MAX_DEPTH: u16 = 1023;

const FEAT_TASK_SESSION: u64 = 1 << 1;
const FEAT_SYM_REL_ADDR: u64 = 1 << 5;
const INFO_EXE_NAME: u64 = 1 << 0;
const INFO_TASKINFO: u64 = 1 << 7;

const RECORD_SIZE: usize = 16;
const RECORD_MAGIC: u64 = 5;
const TYPE_ENTRY: u64 = 0;
const TYPE_EXIT: u64 = 1;
const TYPE_LOST: u64 = 2;
const TYPE_EVENT: u64 = 3;
const ADDR_BITS: u32 = 48;

/// Name (and map-line path) of the pseudo-module holding functions outside
/// every known mapping.
const UNMAPPED_MODULE: &str = "fntrace-unmapped";
/// Where thread names are kept.
const THREADS_FILE: &str = "fntrace.txt";
/// How far before the first event the session starts, in nanoseconds.
const SESSION_LEAD_NS: u64 = 1_000;
/// Events between two progress reports.
const PROGRESS_EVERY: usize = 1 << 16;

/// Writes `trace` as a uftrace data directory at `dir` (see the [module
/// documentation](self) for the layout), creating `dir` if needed; `dir` must
/// not exist or be empty. `progress`, if given, is called now and then with
/// the number of events written so far and the total, and once at the end.
pub fn write_uftrace_dir(
    trace: &Trace,
    dir: &Path,
    mut progress: Option<&mut dyn FnMut(usize, usize)>,
) -> Result<(), ExportError> {
    prepare_dir(dir)?;

    let threads = merge_threads(&trace.threads);
    let first_time = threads
        .iter()
        .flat_map(|t| t.events.first())
        .map(|e| e.time_ns)
        .min()
        .unwrap_or(SESSION_LEAD_NS);
    let session_time = first_time.saturating_sub(SESSION_LEAD_NS);
    let sid = session_id(trace, first_time);

    // Modules and the functions in each.
    let mut functions: Vec<usize> = trace.names.keys().copied().collect();
    for thread in &threads {
        functions.extend(thread.events.iter().map(|e| e.function));
    }
    functions.sort_unstable();
    functions.dedup();
    let layout = ModuleLayout::new(&trace.maps, &functions);

    write_file(&dir.join("info"), &info_bytes(trace, &threads))?;
    write_file(
        &dir.join("task.txt"),
        task_txt(trace, &threads, &sid, session_time).as_bytes(),
    )?;
    write_file(
        &dir.join(format!("sid-{sid}.map")),
        layout.map_text().as_bytes(),
    )?;
    let mut written_syms: Vec<String> = Vec::new();
    for module in &layout.modules {
        if module.functions.is_empty() {
            continue;
        }
        let file = format!("{}.sym", basename(&module.path));
        if written_syms.contains(&file) {
            continue;
        }
        write_file(&dir.join(&file), sym_text(trace, module).as_bytes())?;
        written_syms.push(file);
    }
    write_file(&dir.join(THREADS_FILE), threads_text(&threads).as_bytes())?;

    let total: usize = threads.iter().map(|t| t.events.len()).sum();
    let mut done = 0usize;
    let mut next_report = 0usize;
    for thread in &threads {
        let path = dir.join(format!("{}.dat", thread.tid));
        let file = File::create(&path).map_err(|e| ExportError::io(&path, "creating", e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let unwritable = thread.events.iter().filter(|e| record(e).is_none()).count();
        let lost = thread.lost.saturating_add(unwritable as u64);
        if lost > 0 {
            let time = thread.events.first().map_or(session_time, |e| e.time_ns);
            let count = lost.min((1 << ADDR_BITS) - 1);
            out.write_all(&encode(time, TYPE_LOST, 0, count))
                .map_err(|e| ExportError::io(&path, "writing", e))?;
        }
        for event in &thread.events {
            if let Some(bytes) = record(event) {
                out.write_all(&bytes)
                    .map_err(|e| ExportError::io(&path, "writing", e))?;
            }
            done += 1;
            if done >= next_report {
                if let Some(report) = progress.as_deref_mut() {
                    report(done, total);
                }
                next_report = done + PROGRESS_EVERY;
            }
        }
        out.flush()
            .map_err(|e| ExportError::io(&path, "writing", e))?;
    }
    if let Some(report) = progress {
        report(total, total);
    }
    Ok(())
}

/// Loads a uftrace data directory (as written by [`write_uftrace_dir`] or by
/// `uftrace record` without arguments) into a [`Trace`]. Function addresses
/// are mapped to the start of the symbol containing them, named from the
/// `.sym` files; `maps` is the session's map file.
pub fn read_uftrace_dir(dir: &Path) -> Result<Trace, ExportError> {
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
    let tasks = parse_task_txt(&task_path, &String::from_utf8_lossy(&read_file(&task_path)?))?;

    let map_path = dir.join(format!("sid-{}.map", tasks.sid));
    let map_text = String::from_utf8_lossy(&read_file(&map_path)?).into_owned();
    let maps = strip_build_ids(&map_text);
    let modules = session_modules(&maps);

    let symbols = load_symbols(dir, &modules, header.features & FEAT_SYM_REL_ADDR != 0)?;

    let mut tids: Vec<u32> = Vec::new();
    for &tid in tasks.tids.iter().chain(&header.tids) {
        if !tids.contains(&tid) {
            tids.push(tid);
        }
    }
    let thread_names = read_thread_names(dir)?;

    let mut names = HashMap::new();
    let mut threads = Vec::with_capacity(tids.len());
    for tid in tids {
        let path = dir.join(format!("{tid}.dat"));
        let data = match fs::read(&path) {
            Ok(data) => data,
            // uftrace creates no file for a thread that recorded nothing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(ExportError::io(&path, "reading", e)),
        };
        let (mut events, lost) = parse_dat(&path, &data)?;
        for event in &mut events {
            if let Some(symbol) = symbols.containing(event.function) {
                event.function = symbol.start;
                if let Some(name) = &symbol.name {
                    names.entry(symbol.start).or_insert_with(|| name.clone());
                }
            }
        }
        threads.push(ThreadTrace {
            tid,
            name: thread_names.get(&tid).cloned(),
            events,
            lost,
        });
    }

    Ok(Trace {
        pid: tasks.pid,
        exe: if tasks.exe.is_empty() {
            header.exe
        } else {
            tasks.exe
        },
        threads,
        names,
        maps,
    })
}

// ---------------------------------------------------------------- writing

fn prepare_dir(dir: &Path) -> Result<(), ExportError> {
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ExportError::DirectoryNotEmpty(dir.to_path_buf()));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(|e| ExportError::io(dir, "creating directory", e))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(ExportError::DirectoryNotEmpty(dir.to_path_buf()))
        }
        Err(e) => Err(ExportError::io(dir, "reading directory", e)),
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    fs::write(path, bytes).map_err(|e| ExportError::io(path, "writing", e))
}

/// Threads by tid: those sharing a tid are concatenated in the order of
/// their first events. Keeps the order of first appearance.
fn merge_threads(threads: &[ThreadTrace]) -> Vec<ThreadTrace> {
    let mut order: Vec<u32> = Vec::new();
    let mut by_tid: HashMap<u32, Vec<&ThreadTrace>> = HashMap::new();
    for thread in threads {
        by_tid
            .entry(thread.tid)
            .or_insert_with(|| {
                order.push(thread.tid);
                Vec::new()
            })
            .push(thread);
    }
    order
        .into_iter()
        .map(|tid| {
            let mut parts = by_tid.remove(&tid).unwrap_or_default();
            parts.sort_by_key(|t| t.events.first().map_or(u64::MAX, |e| e.time_ns));
            let mut merged = ThreadTrace {
                tid,
                name: parts.iter().find_map(|t| t.name.clone()),
                events: Vec::new(),
                lost: 0,
            };
            for part in parts {
                merged.events.extend_from_slice(&part.events);
                merged.lost += part.lost;
            }
            merged
        })
        .collect()
}

/// A 16-hex-digit session id derived from the trace (FNV-1a), so that the
/// same trace always gives the same directory.
fn session_id(trace: &Trace, first_time: u64) -> String {
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

fn info_bytes(trace: &Trace, threads: &[ThreadTrace]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&HEADER_SIZE.to_le_bytes());
    out.push(1); // little-endian
    out.push(2); // ELFCLASS64
    out.extend_from_slice(&(FEAT_TASK_SESSION | FEAT_SYM_REL_ADDR).to_le_bytes());
    out.extend_from_slice(&(INFO_EXE_NAME | INFO_TASKINFO).to_le_bytes());
    out.extend_from_slice(&MAX_STACK.to_le_bytes());
    out.extend_from_slice(&[0; 6]);
    debug_assert_eq!(out.len(), usize::from(HEADER_SIZE));

    let tids: Vec<String> = threads.iter().map(|t| t.tid.to_string()).collect();
    let text = format!(
        "exename:{}\ntaskinfo:lines=2\ntaskinfo:nr_tid={}\ntaskinfo:tids={}\n",
        one_line(&trace.exe),
        tids.len(),
        tids.join(",")
    );
    out.extend_from_slice(text.as_bytes());
    out
}

fn timestamp(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

fn task_txt(trace: &Trace, threads: &[ThreadTrace], sid: &str, session_time: u64) -> String {
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

fn threads_text(threads: &[ThreadTrace]) -> String {
    let mut out = String::from("# fntrace: thread names (uftrace ignores this file)\n");
    for thread in threads {
        if let Some(name) = &thread.name {
            out.push_str(&format!("thread {} {}\n", thread.tid, one_line(name)));
        }
    }
    out
}

/// The record for `event`, or `None` if uftrace cannot represent it (depth
/// above 1023 or an address wider than 48 bits).
fn record(event: &GraphEvent) -> Option<[u8; RECORD_SIZE]> {
    let addr = event.function as u64;
    if event.depth > MAX_DEPTH || addr >> ADDR_BITS != 0 {
        return None;
    }
    let kind = match event.kind {
        EventKind::Entry => TYPE_ENTRY,
        EventKind::Exit => TYPE_EXIT,
    };
    Some(encode(event.time_ns, kind, event.depth, addr))
}

fn encode(time: u64, kind: u64, depth: u16, addr: u64) -> [u8; RECORD_SIZE] {
    let word = kind | (RECORD_MAGIC << 3) | (u64::from(depth) << 6) | (addr << 16);
    let mut out = [0u8; RECORD_SIZE];
    out[..8].copy_from_slice(&time.to_le_bytes());
    out[8..].copy_from_slice(&word.to_le_bytes());
    out
}

/// Names and paths go into line-based files.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r', '\t'], " ")
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// One line of `/proc/PID/maps`.
struct MapLine<'a> {
    start: u64,
    end: u64,
    path: &'a str,
}

fn parse_map_line(line: &str) -> Option<MapLine<'_>> {
    let mut rest = line.trim_start();
    let mut fields = [""; 5];
    for field in &mut fields {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        *field = &rest[..end];
        rest = rest[end..].trim_start();
    }
    let (start, end) = fields[0].split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let path = rest.trim_end();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    Some(MapLine { start, end, path })
}

/// A module as uftrace sees it: a file, based at its first mapping.
struct Module {
    path: String,
    base: u64,
    end: u64,
    /// Traced or named functions inside, sorted.
    functions: Vec<usize>,
}

struct ModuleLayout {
    modules: Vec<Module>,
    stack: (u64, u64),
}

impl ModuleLayout {
    fn new(maps: &str, functions: &[usize]) -> Self {
        let mut modules: Vec<Module> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut ranges: Vec<(u64, u64, usize)> = Vec::new();
        let mut stack = None;
        for line in maps.lines().filter_map(parse_map_line) {
            if line.path == "[stack]" {
                stack = Some((line.start, line.end));
            }
            if !line.path.starts_with('/') || line.end <= line.start {
                continue;
            }
            let i = *index.entry(line.path).or_insert_with(|| {
                modules.push(Module {
                    path: line.path.to_string(),
                    base: line.start,
                    end: line.end,
                    functions: Vec::new(),
                });
                modules.len() - 1
            });
            let module = &mut modules[i];
            module.base = module.base.min(line.start);
            module.end = module.end.max(line.end);
            ranges.push((line.start, line.end, i));
        }
        ranges.sort_unstable();

        let mut unmapped = Vec::new();
        for &function in functions {
            let addr = function as u64;
            let at = ranges.partition_point(|&(start, _, _)| start <= addr);
            match at.checked_sub(1).map(|k| ranges[k]) {
                Some((_, end, i)) if addr < end => modules[i].functions.push(function),
                _ => unmapped.push(function),
            }
        }
        if let (Some(&lo), Some(&hi)) = (unmapped.first(), unmapped.last()) {
            modules.push(Module {
                path: UNMAPPED_MODULE.to_string(),
                base: (lo as u64) & !0xfff,
                end: (hi as u64).saturating_add(MAX_SYMBOL_SIZE),
                functions: unmapped,
            });
        }
        ModuleLayout {
            modules,
            // What a Linux x86-64 stack looks like; only its being a user
            // address matters to uftrace.
            stack: stack.unwrap_or((0x7fff_fffd_e000, 0x7fff_ffff_f000)),
        }
    }

    fn map_text(&self) -> String {
        let mut out = String::new();
        for m in &self.modules {
            out.push_str(&format!(
                "{:08x}-{:08x} r-xp 00000000 00:00 0 {}\n",
                m.base, m.end, m.path
            ));
        }
        out.push_str(&format!(
            "{:08x}-{:08x} rw-p 00000000 00:00 0 [stack]\n",
            self.stack.0, self.stack.1
        ));
        out
    }
}

fn sym_text(trace: &Trace, module: &Module) -> String {
    let mut lines = Vec::with_capacity(module.functions.len() * 2 + 1);
    let functions = &module.functions;
    for (k, &function) in functions.iter().enumerate() {
        let start = function as u64;
        let rel = start - module.base;
        let name = match trace.names.get(&function) {
            Some(name) if !name.trim().is_empty() => one_line(name),
            _ => format!("{function:#x}"),
        };
        lines.push(format!("{rel:016x} T {name}"));
        let limit = start.saturating_add(MAX_SYMBOL_SIZE);
        match functions.get(k + 1) {
            Some(&next) if (next as u64) <= limit => {}
            Some(_) => lines.push(format!("{:016x} ? __func_end", limit - module.base)),
            None => {
                let end = limit.min(module.end).max(start + 1);
                lines.push(format!("{:016x} ? __func_end", end - module.base));
            }
        }
    }
    let mut out = format!(
        "# symbols: {}\n# path name: {}\n",
        functions.len(),
        module.path
    );
    for line in lines {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------- reading

fn read_file(path: &Path) -> Result<Vec<u8>, ExportError> {
    let mut file = File::open(path).map_err(|e| ExportError::io(path, "opening", e))?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)
        .map_err(|e| ExportError::io(path, "reading", e))?;
    Ok(data)
}

struct InfoHeader {
    features: u64,
    exe: String,
    tids: Vec<u32>,
}

fn parse_info(path: &Path, data: &[u8]) -> Result<InfoHeader, ExportError> {
    let bad = |problem: String| ExportError::malformed(path, problem);
    if data.len() < usize::from(HEADER_SIZE) {
        return Err(bad(format!(
            "only {} bytes; a uftrace info header has {HEADER_SIZE}",
            data.len()
        )));
    }
    if &data[..8] != MAGIC {
        return Err(bad(format!(
            "bad magic {:02x?} (expected \"Ftrace!\\0\"): not a uftrace info file",
            &data[..8]
        )));
    }
    let u16_at = |at: usize| u16::from_le_bytes([data[at], data[at + 1]]);
    let u32_at = |at: usize| {
        u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
    };
    let u64_at = |at: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&data[at..at + 8]);
        u64::from_le_bytes(bytes)
    };
    let version = u32_at(8);
    if !(4..=5).contains(&version) {
        return Err(bad(format!(
            "file format version {version}; fntrace reads versions 4 and 5"
        )));
    }
    let header_size = usize::from(u16_at(12));
    if header_size < usize::from(HEADER_SIZE) || header_size > data.len() {
        return Err(bad(format!("bad header size {header_size}")));
    }
    if data[14] != 1 {
        return Err(bad(
            "big-endian data; fntrace reads little-endian data only".into()
        ));
    }
    if data[15] != 2 {
        return Err(bad("32-bit data; fntrace reads 64-bit data only".into()));
    }
    let features = u64_at(16);

    let text = String::from_utf8_lossy(&data[header_size..]);
    let mut exe = String::new();
    let mut tids = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("exename:") {
            exe = name.to_string();
        } else if let Some(list) = line.strip_prefix("taskinfo:tids=") {
            for tid in list.split(',').filter(|s| !s.trim().is_empty()) {
                tids.push(tid.trim().parse().map_err(|_| {
                    bad(format!("bad tid {tid:?} in line {line:?}"))
                })?);
            }
        }
    }
    Ok(InfoHeader {
        features,
        exe,
        tids,
    })
}

struct Tasks {
    pid: u32,
    sid: String,
    exe: String,
    tids: Vec<u32>,
}

fn parse_task_txt(path: &Path, text: &str) -> Result<Tasks, ExportError> {
    let mut session: Option<(u32, String, String)> = None;
    let mut tids = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        let bad = |why: &str| {
            ExportError::malformed(path, format!("line {line_no}: {why}: {line:?}"))
        };
        let line = line.trim_end();
        let Some((kind, rest)) = line.split_once(' ') else {
            if line.is_empty() {
                continue;
            }
            return Err(bad("not a SESS, TASK, FORK, EXEC or DLOP line"));
        };
        let fields = task_fields(rest);
        let number = |key: &str| -> Result<u32, ExportError> {
            fields
                .get(key)
                .ok_or_else(|| bad(&format!("no {key}=")))?
                .parse()
                .map_err(|_| bad(&format!("bad {key}=")))
        };
        fields
            .get("timestamp")
            .filter(|t| parse_timestamp(t).is_some())
            .ok_or_else(|| bad("missing or bad timestamp="))?;
        match kind {
            "SESS" => {
                let pid = number("pid")?;
                let sid = fields.get("sid").ok_or_else(|| bad("no sid="))?;
                if sid.len() != 16 || !sid.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad("sid= is not 16 hex digits"));
                }
                let exe = fields.get("exename").copied().unwrap_or_default();
                if session.is_none() {
                    session = Some((pid, sid.to_string(), exe.to_string()));
                }
            }
            "TASK" => {
                let tid = number("tid")?;
                number("pid")?;
                if !tids.contains(&tid) {
                    tids.push(tid);
                }
            }
            "FORK" | "EXEC" | "DLOP" => {}
            _ => return Err(bad("not a SESS, TASK, FORK, EXEC or DLOP line")),
        }
    }
    let (pid, sid, exe) = session
        .ok_or_else(|| ExportError::malformed(path, "no SESS line (no session recorded)"))?;
    Ok(Tasks {
        pid,
        sid,
        exe,
        tids,
    })
}

/// `key=value` fields of a task.txt line; a value may be a quoted string
/// with spaces.
fn task_fields(rest: &str) -> HashMap<&str, &str> {
    let mut fields = HashMap::new();
    let mut rest = rest.trim_start();
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim();
        let after = &rest[eq + 1..];
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.find('"') {
                Some(close) => (&quoted[..close], &quoted[close + 1..]),
                None => (quoted, ""),
            }
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        fields.insert(key, value);
        rest = next.trim_start();
    }
    fields
}

fn parse_timestamp(text: &str) -> Option<u64> {
    let (secs, nanos) = text.split_once('.')?;
    let secs: u64 = secs.parse().ok()?;
    if nanos.len() != 9 {
        return None;
    }
    let nanos: u64 = nanos.parse().ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// The map text without the ` build-id:HEX` uftrace appends to each line.
fn strip_build_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let line = match line.rfind(" build-id:") {
            Some(at) => line[..at].trim_end(),
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Modules of a session map, as uftrace reads them: the first line of each
/// file gives its base; following lines of the same file extend it.
fn session_modules(maps: &str) -> Vec<(String, u64, u64)> {
    let mut modules: Vec<(String, u64, u64)> = Vec::new();
    for line in maps.lines().filter_map(parse_map_line) {
        if line.path.is_empty() || line.path.starts_with('[') {
            continue;
        }
        match modules.last_mut() {
            Some(last) if last.0 == line.path => last.2 = last.2.max(line.end),
            _ => modules.push((line.path.to_string(), line.start, line.end)),
        }
    }
    modules
}

struct Symbol {
    start: usize,
    end: usize,
    /// `None` for fntrace's hex stand-in names.
    name: Option<String>,
}

struct SymbolTable(Vec<Symbol>);

impl SymbolTable {
    fn containing(&self, addr: usize) -> Option<&Symbol> {
        let at = self.0.partition_point(|s| s.start <= addr);
        at.checked_sub(1)
            .map(|k| &self.0[k])
            .filter(|s| addr < s.end)
    }
}

fn load_symbols(
    dir: &Path,
    modules: &[(String, u64, u64)],
    relative: bool,
) -> Result<SymbolTable, ExportError> {
    let mut symbols = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (path, base, end) in modules {
        let file = basename(path);
        if seen.contains(&file) {
            continue;
        }
        seen.push(file);
        let sym_path = dir.join(format!("{file}.sym"));
        let data = match fs::read(&sym_path) {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ExportError::io(&sym_path, "reading", e)),
        };
        let offset = if relative { *base } else { 0 };
        parse_sym(
            &sym_path,
            &String::from_utf8_lossy(&data),
            offset,
            *end,
            &mut symbols,
        )?;
    }
    symbols.sort_by_key(|s: &Symbol| s.start);
    Ok(SymbolTable(symbols))
}

/// Appends the functions of a `.sym` file to `out`, each ending where the
/// next line (function, data or end marker) of the file begins.
fn parse_sym(
    path: &PathBuf,
    text: &str,
    offset: u64,
    module_end: u64,
    out: &mut Vec<Symbol>,
) -> Result<(), ExportError> {
    // (address, is a function, name)
    let mut entries: Vec<(u64, bool, &str)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let bad = || {
            ExportError::malformed(
                path,
                format!(
                    "line {}: expected \"ADDRESS TYPE NAME\": {line:?}",
                    n + 1
                ),
            )
        };
        let mut parts = line.splitn(3, ' ');
        let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let addr = u64::from_str_radix(addr, 16).map_err(|_| bad())?;
        let addr = addr.checked_add(offset).ok_or_else(bad)?;
        let name = name.split('\t').next().unwrap_or(name);
        let is_end = kind == "?" || matches!(name, "__func_end" | "__sym_end" | "__dynsym_end");
        let is_function = !is_end && matches!(kind, "T" | "t" | "W" | "w" | "P" | "i");
        entries.push((addr, is_function, name));
    }
    entries.sort_by_key(|&(addr, _, _)| addr);
    for (k, &(start, is_function, name)) in entries.iter().enumerate() {
        if !is_function {
            continue;
        }
        let end = entries[k + 1..]
            .iter()
            .map(|&(addr, _, _)| addr)
            .find(|&addr| addr > start)
            .unwrap_or(module_end.max(start + 1));
        let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
            continue;
        };
        let hex_stand_in = name == format!("{start:#x}");
        out.push(Symbol {
            start,
            end,
            name: (!hex_stand_in).then(|| name.to_string()),
        });
    }
    Ok(())
}

fn read_thread_names(dir: &Path) -> Result<BTreeMap<u32, String>, ExportError> {
    let path = dir.join(THREADS_FILE);
    let text = match fs::read(&path) {
        Ok(data) => String::from_utf8_lossy(&data).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(ExportError::io(&path, "reading", e)),
    };
    let mut names = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let parsed = line
            .strip_prefix("thread ")
            .and_then(|rest| rest.split_once(' '))
            .and_then(|(tid, name)| Some((tid.parse::<u32>().ok()?, name)));
        let Some((tid, name)) = parsed else {
            return Err(ExportError::malformed(
                &path,
                format!("line {}: expected \"thread TID NAME\": {line:?}", n + 1),
            ));
        };
        names.insert(tid, name.to_string());
    }
    Ok(names)
}

/// The entries and exits of a `.dat` file, and the number of records it
/// says were lost.
fn parse_dat(path: &Path, data: &[u8]) -> Result<(Vec<GraphEvent>, u64), ExportError> {
    let mut events = Vec::with_capacity(data.len() / RECORD_SIZE);
    let mut lost = 0u64;
    let mut at = 0usize;
    while at < data.len() {
        let Some(bytes) = data.get(at..at + RECORD_SIZE) else {
            return Err(ExportError::malformed(
                path,
                format!(
                    "truncated record at byte {at}: {} bytes left, records have {RECORD_SIZE}",
                    data.len() - at
                ),
            ));
        };
        let mut time = [0u8; 8];
        time.copy_from_slice(&bytes[..8]);
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[8..]);
        let time = u64::from_le_bytes(time);
        let word = u64::from_le_bytes(word);
        let kind = word & 0b11;
        let more = (word >> 2) & 1 != 0;
        let magic = (word >> 3) & 0b111;
        let depth = ((word >> 6) & 0x3ff) as u16;
        let addr = word >> 16;
        if magic != RECORD_MAGIC {
            return Err(ExportError::malformed(
                path,
                format!(
                    "bad record magic {magic} (expected {RECORD_MAGIC}) in record {} at byte {at}",
                    at / RECORD_SIZE
                ),
            ));
        }
        at += RECORD_SIZE;
        match kind {
            TYPE_ENTRY | TYPE_EXIT => {
                if more {
                    return Err(ExportError::malformed(
                        path,
                        format!(
                            "record at byte {} carries arguments or a return value, \
                             which fntrace does not read",
                            at - RECORD_SIZE
                        ),
                    ));
                }
                let Ok(function) = usize::try_from(addr) else {
                    continue;
                };
                events.push(GraphEvent {
                    time_ns: time,
                    function,
                    depth,
                    kind: if kind == TYPE_ENTRY {
                        EventKind::Entry
                    } else {
                        EventKind::Exit
                    },
                });
            }
            TYPE_LOST => lost = lost.saturating_add(addr),
            _ => {
                debug_assert_eq!(kind, TYPE_EVENT);
                if more {
                    // A u16 length, the data, padding to 8 bytes.
                    let len = data
                        .get(at..at + 2)
                        .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
                        .ok_or_else(|| {
                            ExportError::malformed(
                                path,
                                format!("truncated event data at byte {at}"),
                            )
                        })?;
                    let skip = (len + 2).div_ceil(8) * 8;
                    if at + skip > data.len() {
                        return Err(ExportError::malformed(
                            path,
                            format!("truncated event data at byte {at}"),
                        ));
                    }
                    at += skip;
                }
            }
        }
    }
    Ok((events, lost))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hint::black_box;
    use std::process::Command;
    use std::sync::atomic::{AtomicUsize, Ordering};

    // Functions of this test binary, so that uftrace finds their addresses
    // in a real mapping of a real file. Distinct bodies keep them apart.
    #[inline(never)]
    fn sample_main() -> u64 {
        black_box(1)
    }
    #[inline(never)]
    fn sample_mid() -> u64 {
        black_box(2) * 3
    }
    #[inline(never)]
    fn sample_leaf() -> u64 {
        black_box(3) + 4
    }
    #[inline(never)]
    fn sample_fib() -> u64 {
        black_box(5) ^ 6
    }
    #[inline(never)]
    fn sample_worker() -> u64 {
        black_box(7) << 2
    }

    struct Fns {
        main: usize,
        mid: usize,
        leaf: usize,
        fib: usize,
        worker: usize,
    }

    fn fns() -> Fns {
        Fns {
            main: sample_main as fn() -> u64 as usize,
            mid: sample_mid as fn() -> u64 as usize,
            leaf: sample_leaf as fn() -> u64 as usize,
            fib: sample_fib as fn() -> u64 as usize,
            worker: sample_worker as fn() -> u64 as usize,
        }
    }

    fn ev(time_ns: u64, function: usize, depth: u16, kind: EventKind) -> GraphEvent {
        GraphEvent {
            time_ns,
            function,
            depth,
            kind,
        }
    }
    use EventKind::{Entry as In, Exit as Out};

    const T0: u64 = 5_000_000_000;

    /// Two threads: nested calls and recursion on one; on the other, calls
    /// that were running when tracing started (exits only) and a call that
    /// never returns.
    fn sample_trace() -> Trace {
        let f = fns();
        let main_thread = ThreadTrace {
            tid: 4001,
            name: Some("main".into()),
            events: vec![
                ev(T0, f.main, 0, In),
                ev(T0 + 100, f.mid, 1, In),
                ev(T0 + 200, f.leaf, 2, In),
                ev(T0 + 300, f.leaf, 2, Out),
                ev(T0 + 400, f.leaf, 2, In),
                ev(T0 + 450, f.leaf, 2, Out),
                ev(T0 + 600, f.mid, 1, Out),
                ev(T0 + 700, f.fib, 1, In),
                ev(T0 + 710, f.fib, 2, In),
                ev(T0 + 720, f.fib, 3, In),
                ev(T0 + 730, f.fib, 3, Out),
                ev(T0 + 740, f.fib, 2, Out),
                ev(T0 + 800, f.fib, 1, Out),
                ev(T0 + 1000, f.main, 0, Out),
            ],
            lost: 0,
        };
        let worker = ThreadTrace {
            tid: 4002,
            name: Some("worker \"w1\"".into()),
            events: vec![
                ev(T0 + 20, f.fib, 1, Out), // running when tracing started
                ev(T0 + 30, f.main, 0, Out),
                ev(T0 + 50, f.worker, 0, In),
                ev(T0 + 150, f.leaf, 1, In),
                ev(T0 + 200, f.leaf, 1, Out),
                ev(T0 + 300, f.mid, 1, In), // never returns
                ev(T0 + 350, f.leaf, 2, In),
                ev(T0 + 400, f.leaf, 2, Out),
            ],
            lost: 3,
        };
        let names = [
            (f.main, "main"),
            (f.mid, "mid"),
            (f.leaf, "leaf"),
            (f.fib, "fib"),
            (f.worker, "worker"),
        ]
        .into_iter()
        .map(|(a, n)| (a, n.to_string()))
        .collect();
        Trace {
            pid: 4001,
            exe: std::env::current_exe()
                .expect("current_exe")
                .to_string_lossy()
                .into_owned(),
            threads: vec![main_thread, worker],
            names,
            maps: fs::read_to_string("/proc/self/maps").expect("reading /proc/self/maps"),
        }
    }

    fn temp_dir(tag: &str) -> PathBuf {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fntrace-export-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    /// Runs the real uftrace; fails (never skips) if it is missing.
    fn uftrace(args: &[&str], dir: &Path) -> String {
        let output = Command::new("uftrace")
            .args(args)
            .arg("-d")
            .arg(dir)
            .args(["--no-pager"])
            .env("LC_ALL", "C")
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run uftrace ({e}); install it (CI: .ci/run does)")
            });
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "uftrace {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            output.status
        );
        stdout
    }

    #[test]
    fn uftrace_replay_shows_the_calls_nested() {
        let dir = temp_dir("replay");
        write_uftrace_dir(&sample_trace(), &dir, None).unwrap();
        let out = uftrace(&["replay", "--no-comment"], &dir);
        // Lines as "DURATION [TID] | FUNCTION", keep "[TID] | FUNCTION".
        let lines: Vec<String> = out
            .lines()
            .filter(|l| l.contains('|'))
            .skip(1)
            .map(|l| {
                let at = l.find('[').unwrap_or(0);
                l[at..].trim_end().to_string()
            })
            .collect();
        let expected = [
            "[  4001] | main() {",
            "[  4002] | worker() {",
            "[  4001] |   mid() {",
            "[  4002] |   leaf();",
            "[  4001] |     leaf();",
            "[  4002] |   mid() {",
            "[  4002] |     leaf();",
            "[  4001] |     leaf();",
            "[  4001] |   } /* mid */",
            "[  4001] |   fib() {",
            "[  4001] |     fib() {",
            "[  4001] |       fib();",
            "[  4001] |     } /* fib */",
            "[  4001] |   } /* fib */",
            "[  4001] | } /* main */",
        ];
        assert_eq!(lines, expected, "uftrace replay printed:\n{out}");
        // Durations come from our timestamps: main took 1000 ns.
        assert!(out.contains("1.000 us [  4001] | } /* main */"), "{out}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn uftrace_report_counts_the_calls() {
        let dir = temp_dir("report");
        write_uftrace_dir(&sample_trace(), &dir, None).unwrap();
        let out = uftrace(&["report", "-f", "call", "-s", "func"], &dir);
        let mut counts: Vec<(String, u32)> = out
            .lines()
            .skip(2)
            .filter_map(|l| {
                let mut parts = l.split_whitespace();
                let calls = parts.next()?.parse().ok()?;
                Some((parts.next()?.to_string(), calls))
            })
            .collect();
        counts.sort();
        let expected: Vec<(String, u32)> = [
            ("fib", 3),
            ("leaf", 5),
            ("main", 1),
            ("mid", 2),
            ("worker", 1),
        ]
        .into_iter()
        .map(|(n, c)| (n.to_string(), c))
        .collect();
        assert_eq!(counts, expected, "uftrace report printed:\n{out}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn uftrace_graph_shows_the_call_tree() {
        let dir = temp_dir("graph");
        write_uftrace_dir(&sample_trace(), &dir, None).unwrap();
        let out = uftrace(&["graph", "main"], &dir);
        let tree: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once(" : ").map(|(_, t)| t.trim_end()))
            .filter(|t| t.contains('('))
            .collect();
        assert_eq!(
            tree,
            [
                "(1) main",
                "+-(1) mid",
                "| (2) leaf",
                "+-(1) fib",
                "(1) fib",
                "(1) fib",
            ]
            .map(|s| s.to_string())
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .iter()
            .zip(tree.iter())
            .map(|(_, t)| *t)
            .collect::<Vec<_>>(),
            "uftrace graph printed:\n{out}"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn scratch_keep_dir() {
        let dir = PathBuf::from("/tmp/fx-keep");
        let _ = fs::remove_dir_all(&dir);
        write_uftrace_dir(&sample_trace(), &dir, None).unwrap();
    }

    #[test]
    fn round_trip_keeps_events_names_and_threads() {
        let dir = temp_dir("roundtrip");
        let trace = sample_trace();
        let mut reports = Vec::new();
        let mut progress = |done: usize, total: usize| reports.push((done, total));
        write_uftrace_dir(&trace, &dir, Some(&mut progress)).unwrap();
        assert_eq!(reports.last(), Some(&(20, 20)));

        let back = read_uftrace_dir(&dir).unwrap();
        assert_eq!(back.pid, trace.pid);
        assert_eq!(back.exe, trace.exe);
        assert_eq!(back.threads, trace.threads);
        assert_eq!(back.names, trace.names);
        let exe_line = back
            .maps
            .lines()
            .find(|l| l.ends_with(&trace.exe))
            .expect("the executable's map line");
        assert!(exe_line.contains(" r-xp "), "{exe_line}");
        let _ = fs::remove_dir_all(&dir);
    }
}
