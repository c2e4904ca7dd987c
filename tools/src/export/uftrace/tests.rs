//! uftrace data directories: written so that uftrace 0.13's `replay`,
//! `report`, `graph`, `dump` and `info` commands read them (the tests run
//! each), and read back into a [`Trace`].
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
//! | `fntrace.txt` | what uftrace has no place for, and ignores: thread names (`thread TID NAME`) and the records fntrace added for uftrace (`added TID INDEX…`, below) |
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
//! - uftrace pairs an exit with the innermost call it has open, whatever
//!   the record's depth, and an exit without an entry confuses it (its
//!   `graph` command drops the rest of the thread). So each thread's records
//!   are made consistent, by the rules of [`crate::export`]: calls running
//!   when tracing started get an entry at the thread's first timestamp;
//!   calls that were unwound get an exit just before the event that shows it
//!   (same timestamp); other exits without an entry are left out. The
//!   indices (among the entry and exit records of the `.dat`) of the added
//!   records are listed in `fntrace.txt`, and [`read_uftrace_dir`] removes
//!   them again, so that writing and reading gives back the events.
//! - A thread's lost events ([`ThreadTrace::lost`]) are one lost record at
//!   the start of its `.dat`, timestamped like its first event. At the end,
//!   where it would belong if the buffer filled up, uftrace 0.13 mishandles
//!   it: `graph` misattributes the thread's remaining time, and crashes if
//!   the thread also has an exit without entry. Events deeper than 1023
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

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use super::ExportError;
use crate::analysis::pairing::{CallStep, Calls, Reading};
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
/// Where thread names and added records are listed.
const FNTRACE_FILE: &str = "fntrace.txt";
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
    let total: usize = threads.iter().map(|t| t.events.len()).sum();
    let mut done = 0usize;
    let mut next_report = 0usize;
    let mut added: Vec<(u32, Vec<usize>)> = Vec::new();
    for thread in &threads {
        let path = dir.join(format!("{}.dat", thread.tid));
        let file = File::create(&path).map_err(|e| ExportError::io(&path, "creating", e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);

        let mut unwritable = 0u64;
        consistent_records(&thread.events, &mut |event, _| {
            unwritable += u64::from(record(&event).is_none());
            Ok(())
        })
        .map_err(|e| ExportError::io(&path, "writing", e))?;
        let lost = thread.lost.saturating_add(unwritable);
        if lost > 0 {
            let time = thread.events.first().map_or(session_time, |e| e.time_ns);
            let count = lost.min((1 << ADDR_BITS) - 1);
            out.write_all(&encode(time, TYPE_LOST, 0, count))
                .map_err(|e| ExportError::io(&path, "writing", e))?;
        }

        let mut index = 0usize;
        let mut added_here = Vec::new();
        consistent_records(&thread.events, &mut |event, synthetic| {
            if let Some(bytes) = record(&event) {
                out.write_all(&bytes)?;
                if synthetic {
                    added_here.push(index);
                }
                index += 1;
            }
            if !synthetic {
                done += 1;
                if done >= next_report {
                    if let Some(report) = progress.as_deref_mut() {
                        report(done, total);
                    }
                    next_report = done + PROGRESS_EVERY;
                }
            }
            Ok(())
        })
        .and_then(|()| out.flush())
        .map_err(|e| ExportError::io(&path, "writing", e))?;
        if !added_here.is_empty() {
            added.push((thread.tid, added_here));
        }
    }
    write_file(
        &dir.join(FNTRACE_FILE),
        fntrace_text(&threads, &added).as_bytes(),
    )?;
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
    let meta =
        fs::metadata(dir).map_err(|e| ExportError::io(dir, "opening uftrace data directory", e))?;
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

    let map_path = dir.join(format!("sid-{}.map", tasks.sid));
    let map_text = String::from_utf8_lossy(&read_file(&map_path)?).into_owned();
    let maps = strip_build_ids(&map_text);
    let modules = session_modules(&maps);

    let symbols = load_symbols(dir, &modules, header.features & FEAT_SYM_REL_ADDR != 0)?;

    let mut seen = HashSet::new();
    let tids: Vec<u32> = tasks
        .tids
        .iter()
        .chain(&header.tids)
        .copied()
        .filter(|&tid| seen.insert(tid))
        .collect();
    let fntrace = read_fntrace_file(dir)?;

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
        let added = fntrace.added.get(&tid).map_or(&[][..], |v| &v[..]);
        let (mut events, lost) = parse_dat(&path, &data, added)?;
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
            name: fntrace.names.get(&tid).cloned(),
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

fn fntrace_text(threads: &[ThreadTrace], added: &[(u32, Vec<usize>)]) -> String {
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

/// Passes the records to write for a thread's `events` to `emit`, with
/// `true` for the records added to make them consistent (see the [module
/// documentation](self)).
fn consistent_records(
    events: &[GraphEvent],
    emit: &mut dyn FnMut(GraphEvent, bool) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let pairing = Calls::new(events, Reading::Exports);
    let made_up_entries = pairing.made_up_entries();
    for step in pairing {
        match step {
            CallStep::Entered { entry_index, entry } => {
                emit(entry, entry_index < made_up_entries)?;
            }
            CallStep::Returned { exit, .. } => emit(exit, false)?,
            // Unwound: closed just before the event that shows it.
            CallStep::Unfinished {
                entry,
                unwound_by: Some(event),
            } => emit(
                GraphEvent {
                    time_ns: event.time_ns,
                    kind: EventKind::Exit,
                    ..entry
                },
                true,
            )?,
            // Still running when the events end: left without an exit, as
            // recorded. An exit without entry, not explained: left out.
            CallStep::Unfinished {
                unwound_by: None, ..
            }
            | CallStep::UnmatchedExit { .. } => {}
        }
    }
    Ok(())
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
    let u32_at =
        |at: usize| u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
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
            "big-endian data; fntrace reads little-endian data only".into(),
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
                tids.push(
                    tid.trim()
                        .parse()
                        .map_err(|_| bad(format!("bad tid {tid:?} in line {line:?}")))?,
                );
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
        let bad =
            |why: &str| ExportError::malformed(path, format!("line {line_no}: {why}: {line:?}"));
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
                tids.push(number("tid")?);
                number("pid")?;
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
    path: &Path,
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
                format!("line {}: expected \"ADDRESS TYPE NAME\": {line:?}", n + 1),
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

/// What `fntrace.txt` says: thread names, and for each thread the sorted
/// indices of the records fntrace added.
#[derive(Default)]
struct FntraceFile {
    names: HashMap<u32, String>,
    added: HashMap<u32, Vec<usize>>,
}

fn read_fntrace_file(dir: &Path) -> Result<FntraceFile, ExportError> {
    let path = dir.join(FNTRACE_FILE);
    let text = match fs::read(&path) {
        Ok(data) => String::from_utf8_lossy(&data).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FntraceFile::default()),
        Err(e) => return Err(ExportError::io(&path, "reading", e)),
    };
    let mut file = FntraceFile::default();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let bad = || {
            ExportError::malformed(
                &path,
                format!(
                    "line {}: expected \"thread TID NAME\" or \"added TID INDEX...\": {line:?}",
                    n + 1
                ),
            )
        };
        let (kind, rest) = line.split_once(' ').ok_or_else(bad)?;
        let (tid, rest) = rest.split_once(' ').ok_or_else(bad)?;
        let tid: u32 = tid.parse().map_err(|_| bad())?;
        match kind {
            "thread" => {
                file.names.insert(tid, rest.to_string());
            }
            "added" => {
                let indices = file.added.entry(tid).or_default();
                for index in rest.split_whitespace() {
                    indices.push(index.parse().map_err(|_| bad())?);
                }
            }
            _ => return Err(bad()),
        }
    }
    for indices in file.added.values_mut() {
        indices.sort_unstable();
    }
    Ok(file)
}

/// The entries and exits of a `.dat` file, less those whose indices (among
/// entries and exits) are in `added` (sorted), and the number of records it
/// says were lost.
fn parse_dat(
    path: &Path,
    data: &[u8],
    added: &[usize],
) -> Result<(Vec<GraphEvent>, u64), ExportError> {
    let mut events = Vec::with_capacity(data.len() / RECORD_SIZE);
    let mut index = 0usize;
    let mut added = added.iter().peekable();
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
                index += 1;
                if added.next_if_eq(&&(index - 1)).is_some() {
                    continue;
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
    use std::collections::BTreeMap;
    use std::hint::black_box;
    use std::path::PathBuf;
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

    use crate::trace::test_event as ev;
    use EventKind::{Entry as In, Exit as Out};

    const T0: u64 = 5_000_000_000;

    fn names(pairs: &[(usize, &str)]) -> HashMap<usize, String> {
        pairs.iter().map(|&(a, n)| (a, n.to_string())).collect()
    }

    /// Two threads. Thread 4001: nested calls and recursion. Thread 4002:
    /// two calls running when tracing started (exits only), a call that
    /// never returns, and lost events.
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
                ev(T0 + 20, f.fib, 1, Out),  // running when tracing started
                ev(T0 + 30, f.main, 0, Out), // its caller
                ev(T0 + 50, f.worker, 0, In),
                ev(T0 + 150, f.leaf, 1, In),
                ev(T0 + 200, f.leaf, 1, Out),
                ev(T0 + 300, f.mid, 1, In), // never returns
                ev(T0 + 350, f.leaf, 2, In),
                ev(T0 + 400, f.leaf, 2, Out),
            ],
            lost: 3,
        };
        Trace {
            pid: 4001,
            exe: std::env::current_exe()
                .expect("current_exe")
                .to_string_lossy()
                .into_owned(),
            threads: vec![main_thread, worker],
            names: names(&[
                (f.main, "main"),
                (f.mid, "mid"),
                (f.leaf, "leaf"),
                (f.fib, "fib"),
                (f.worker, "worker"),
            ]),
            maps: fs::read_to_string("/proc/self/maps").expect("reading /proc/self/maps"),
        }
    }

    /// A fresh path under the temporary directory, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "fntrace-export-{tag}-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn written(trace: &Trace, tag: &str) -> TempDir {
        let dir = TempDir::new(tag);
        write_uftrace_dir(trace, &dir.0, None).expect("writing the uftrace directory");
        dir
    }

    /// Runs the real uftrace on `dir`; fails (never skips) if it is missing.
    fn uftrace(args: &[&str], dir: &Path) -> String {
        // Options go before a FUNCTION argument (`graph main`).
        let output = Command::new("uftrace")
            .args(&args[..1])
            .arg("--no-pager")
            .arg("-d")
            .arg(dir)
            .args(&args[1..])
            .env("LC_ALL", "C")
            .output()
            .unwrap_or_else(|e| panic!("cannot run uftrace ({e}); install it (CI: .ci/run does)"));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "uftrace {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }

    /// The trace lines of `uftrace replay` ("DURATION [TID] | CALL"),
    /// trailing spaces removed.
    fn replay_lines(out: &str) -> Vec<&str> {
        out.lines()
            .filter(|l| l.contains("] | "))
            .map(|l| l.trim_end())
            .collect()
    }

    #[test]
    fn uftrace_replay_shows_each_thread_nested() {
        let dir = written(&sample_trace(), "replay");
        let out = uftrace(&["replay", "--tid", "4001"], &dir.0);
        assert_eq!(
            replay_lines(&out),
            [
                "            [  4001] | main() {",
                "            [  4001] |   mid() {",
                "   0.100 us [  4001] |     leaf();",
                "   0.050 us [  4001] |     leaf();",
                "   0.500 us [  4001] |   } /* mid */",
                "            [  4001] |   fib() {",
                "            [  4001] |     fib() {",
                "   0.010 us [  4001] |       fib();",
                "   0.030 us [  4001] |     } /* fib */",
                "   0.100 us [  4001] |   } /* fib */",
                "   1.000 us [  4001] | } /* main */",
            ],
            "uftrace replay printed:\n{out}"
        );

        // Calls running when tracing started begin at the thread's first
        // timestamp (fib's exit, so it took 0 ns); calls without exit are
        // left open, as uftrace shows any unfinished call.
        let out = uftrace(&["replay", "--tid", "4002"], &dir.0);
        assert_eq!(
            replay_lines(&out),
            [
                "            [  4002] | main() {",
                "            [  4002] |   fib();",
                "   0.010 us [  4002] | } /* main */",
                "            [  4002] | worker() {",
                "   0.050 us [  4002] |   leaf();",
                "            [  4002] |   mid() {",
                "   0.050 us [  4002] |     leaf();",
            ],
            "uftrace replay printed:\n{out}"
        );
        assert!(
            out.contains("uftrace stopped tracing with remaining functions"),
            "{out}"
        );
    }

    #[test]
    fn uftrace_report_counts_the_calls() {
        let dir = written(&sample_trace(), "report");
        let out = uftrace(&["report", "--tid", "4001", "-s", "func"], &dir.0);
        let rows: Vec<Vec<&str>> = out
            .lines()
            .skip(2)
            .map(|l| l.split_whitespace().collect())
            .filter(|r: &Vec<&str>| !r.is_empty())
            .collect();
        assert_eq!(
            rows,
            [
                ["0.100", "us", "0.100", "us", "3", "fib"],
                ["0.150", "us", "0.150", "us", "2", "leaf"],
                ["1.000", "us", "0.400", "us", "1", "main"],
                ["0.500", "us", "0.350", "us", "1", "mid"],
            ],
            "uftrace report printed:\n{out}"
        );

        // Both threads. uftrace counts the call still running at the end of
        // a thread that lost records (mid on 4002), not the one that did
        // not (worker counts as its caller).
        let out = uftrace(&["report", "-f", "call", "-s", "func"], &dir.0);
        let calls: Vec<(u32, &str)> = out
            .lines()
            .skip(2)
            .filter_map(|l| {
                let mut parts = l.split_whitespace();
                Some((parts.next()?.parse().ok()?, parts.next()?))
            })
            .collect();
        assert_eq!(
            calls,
            [
                (4, "fib"),
                (4, "leaf"),
                (2, "main"),
                (2, "mid"),
                (1, "worker")
            ],
            "uftrace report printed:\n{out}"
        );
    }

    #[test]
    fn uftrace_graph_shows_the_call_tree() {
        let dir = written(&sample_trace(), "graph");
        let tree = |out: &str| -> Vec<String> {
            out.lines()
                .skip_while(|l| !l.starts_with("# TOTAL TIME"))
                .skip(1)
                .map(|l| l.trim_end().to_string())
                .filter(|l| l.contains('('))
                .collect()
        };
        let out = uftrace(&["graph", "main"], &dir.0);
        assert_eq!(
            tree(&out),
            [
                "    1.010 us : (2) main",
                "    0.100 us :  +-(2) fib",
                "    0.030 us :  | (1) fib",
                "    0.010 us :  | (1) fib",
                "    0.500 us :  +-(1) mid",
                "    0.150 us :    (2) leaf",
            ],
            "uftrace graph printed:\n{out}"
        );
        let out = uftrace(&["graph"], &dir.0);
        let full = tree(&out);
        assert_eq!(full.len(), 11, "uftrace graph printed:\n{out}");
        for (line, call) in full[1..].iter().zip([
            " +-(2) main",
            " |  +-(2) fib",
            " |  | (1) fib",
            " |  | (1) fib",
            " |  +-(1) mid",
            " |    (2) leaf",
            " +-(1) worker",
            "    +-(1) leaf",
            "    +-(1) mid",
            "      (1) leaf",
        ]) {
            assert!(line.ends_with(call), "{line:?} is not {call:?}:\n{out}");
        }
    }

    #[test]
    fn uftrace_dump_chrome_pairs_every_begin_with_an_end() {
        let dir = written(&sample_trace(), "chrome");
        let out = uftrace(&["dump", "--chrome"], &dir.0);
        // (tid, name) -> (begins, ends); uftrace leaves "tid" out for the
        // main thread, and writes an empty line for the lost record.
        let mut counts: BTreeMap<(u64, String), (u32, u32)> = BTreeMap::new();
        for line in out.lines() {
            let line = line.trim_end_matches(',');
            if !line.starts_with("{\"ts\"") {
                continue;
            }
            let event: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{e}: {line}\nuftrace printed:\n{out}"));
            let tid = event["tid"]
                .as_u64()
                .unwrap_or(event["pid"].as_u64().unwrap());
            let name = event["name"].as_str().unwrap().to_string();
            match event["ph"].as_str() {
                Some("B") => counts.entry((tid, name)).or_default().0 += 1,
                Some("E") => counts.entry((tid, name)).or_default().1 += 1,
                _ => {}
            }
        }
        let expected: BTreeMap<(u64, String), (u32, u32)> = [
            (4001, "fib", 3),
            (4001, "leaf", 2),
            (4001, "main", 1),
            (4001, "mid", 1),
            (4002, "fib", 1),
            (4002, "leaf", 2),
            (4002, "main", 1),
            (4002, "mid", 1),
            (4002, "worker", 1),
        ]
        .into_iter()
        .map(|(tid, name, n)| ((tid, name.to_string()), (n, n)))
        .collect();
        assert_eq!(counts, expected, "uftrace dump --chrome printed:\n{out}");
    }

    #[test]
    fn uftrace_info_names_the_executable_and_tasks() {
        let trace = sample_trace();
        let dir = written(&trace, "info");
        let out = uftrace(&["info"], &dir.0);
        assert!(
            out.contains(&format!("# exe image           : {}", trace.exe)),
            "{out}"
        );
        assert!(out.contains("# number of tasks     : 2"), "{out}");
    }

    #[test]
    fn functions_outside_every_mapping_still_resolve() {
        // No maps at all: the functions go into the pseudo-module.
        let trace = Trace {
            pid: 9,
            exe: "/nonexistent/prog".into(),
            threads: vec![ThreadTrace {
                tid: 9,
                name: None,
                events: vec![
                    ev(T0, 0x40_1000, 0, In),
                    ev(T0 + 10, 0x40_2000, 1, In),
                    ev(T0 + 20, 0x40_2000, 1, Out),
                    ev(T0 + 30, 0x7_0000_0000, 1, In),
                    ev(T0 + 40, 0x7_0000_0000, 1, Out),
                    ev(T0 + 50, 0x40_1000, 0, Out),
                ],
                lost: 0,
            }],
            // 0x7_0000_0000 has no name: it keeps its address.
            names: names(&[(0x40_1000, "outer"), (0x40_2000, "inner")]),
            maps: String::new(),
        };
        let dir = written(&trace, "unmapped");
        let sym = fs::read_to_string(dir.0.join("fntrace-unmapped.sym")).unwrap();
        assert_eq!(
            sym,
            "# symbols: 3\n\
             # path name: fntrace-unmapped\n\
             0000000000000000 T outer\n\
             0000000000001000 T inner\n\
             0000000000011000 ? __func_end\n\
             00000006ffbff000 T 0x700000000\n\
             00000006ffc0f000 ? __func_end\n"
        );
        let out = uftrace(&["replay"], &dir.0);
        assert_eq!(
            replay_lines(&out),
            [
                "            [     9] | outer() {",
                "   0.010 us [     9] |   inner();",
                "   0.010 us [     9] |   0x700000000();",
                "   0.050 us [     9] | } /* outer */",
            ],
            "uftrace replay printed:\n{out}"
        );
        let back = read_uftrace_dir(&dir.0).unwrap();
        assert_eq!(back.threads, trace.threads);
        assert_eq!(back.names, trace.names);
    }

    #[test]
    fn round_trip_keeps_events_names_and_threads() {
        let trace = sample_trace();
        let dir = TempDir::new("roundtrip");
        let mut reports = Vec::new();
        let mut progress = |done: usize, total: usize| reports.push((done, total));
        write_uftrace_dir(&trace, &dir.0, Some(&mut progress)).unwrap();
        assert_eq!(reports.first(), Some(&(1, 22)));
        assert_eq!(reports.last(), Some(&(22, 22)));

        let back = read_uftrace_dir(&dir.0).unwrap();
        assert_eq!(back.pid, trace.pid);
        assert_eq!(back.exe, trace.exe);
        assert_eq!(back.threads, trace.threads);
        assert_eq!(back.names, trace.names);
        let exe_line = back
            .maps
            .lines()
            .find(|l| l.ends_with(&trace.exe))
            .expect("the executable's map line");
        assert!(exe_line.contains(" r-xp 00000000 "), "{exe_line}");
        assert!(back.maps.contains("[stack]"), "{}", back.maps);
    }

    #[test]
    fn unwound_calls_get_exits_for_uftrace_and_lose_them_when_read() {
        let f = fns();
        let trace = Trace {
            pid: 7,
            exe: sample_trace().exe,
            threads: vec![ThreadTrace {
                tid: 7,
                name: None,
                events: vec![
                    ev(T0, f.main, 0, In),
                    ev(T0 + 10, f.mid, 1, In),
                    ev(T0 + 20, f.leaf, 2, In), // unwound by mid's exit
                    ev(T0 + 30, f.mid, 1, Out),
                    ev(T0 + 40, f.fib, 1, In), // unwound: longjmp to main
                    ev(T0 + 50, f.leaf, 1, In),
                    ev(T0 + 60, f.leaf, 1, Out),
                    ev(T0 + 65, f.leaf, 3, Out), // unexplained: left out
                    ev(T0 + 70, f.main, 0, Out),
                ],
                lost: 0,
            }],
            names: sample_trace().names,
            maps: sample_trace().maps,
        };
        let dir = written(&trace, "unwound");
        let out = uftrace(&["replay"], &dir.0);
        assert_eq!(
            replay_lines(&out),
            [
                "            [     7] | main() {",
                "            [     7] |   mid() {",
                "   0.010 us [     7] |     leaf();",
                "   0.020 us [     7] |   } /* mid */",
                "   0.010 us [     7] |   fib();",
                "   0.010 us [     7] |   leaf();",
                "   0.070 us [     7] | } /* main */",
            ],
            "uftrace replay printed:\n{out}"
        );
        let fntrace = fs::read_to_string(dir.0.join(FNTRACE_FILE)).unwrap();
        assert!(fntrace.contains("\nadded 7 3 6\n"), "{fntrace}");
        let back = read_uftrace_dir(&dir.0).unwrap();
        let mut expected = trace.threads[0].events.clone();
        expected.remove(7);
        assert_eq!(back.threads[0].events, expected);
    }

    #[test]
    fn too_deep_events_are_counted_as_lost() {
        let f = fns();
        let mut trace = sample_trace();
        trace.threads.truncate(1);
        let events = &mut trace.threads[0].events;
        events.insert(2, ev(T0 + 150, f.leaf, 1024, In));
        events.insert(3, ev(T0 + 160, f.leaf, 1024, Out));
        let dir = written(&trace, "deep");
        let back = read_uftrace_dir(&dir.0).unwrap();
        assert_eq!(back.threads[0].lost, 2);
        assert_eq!(back.threads[0].events, sample_trace().threads[0].events);
    }

    #[test]
    fn sym_sizes_are_capped() {
        let module = Module {
            path: "/lib/x.so".into(),
            base: 0x1000,
            end: 0x40_0000,
            functions: vec![0x2000, 0x2100, 0x30_0000],
        };
        let trace = Trace {
            names: names(&[(0x2000, "a"), (0x2100, "b\tc"), (0x30_0000, "")]),
            ..Trace::default()
        };
        assert_eq!(
            sym_text(&trace, &module),
            "# symbols: 3\n\
             # path name: /lib/x.so\n\
             0000000000001000 T a\n\
             0000000000001100 T b c\n\
             0000000000011100 ? __func_end\n\
             00000000002ff000 T 0x300000\n\
             000000000030f000 ? __func_end\n"
        );
    }

    #[test]
    fn writing_refuses_a_non_empty_directory() {
        let dir = TempDir::new("nonempty");
        fs::create_dir_all(&dir.0).unwrap();
        fs::write(dir.0.join("keep"), "x").unwrap();
        let err = write_uftrace_dir(&sample_trace(), &dir.0, None).unwrap_err();
        assert!(matches!(err, ExportError::DirectoryNotEmpty(_)), "{err}");
        assert_eq!(fs::read_dir(&dir.0).unwrap().count(), 1);
    }

    fn read_error(dir: &Path) -> String {
        match read_uftrace_dir(dir) {
            Ok(_) => panic!("reading {} succeeded", dir.display()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn reading_reports_what_is_wrong_and_where() {
        let missing = TempDir::new("missing");
        let err = read_error(&missing.0);
        assert!(err.starts_with("opening uftrace data directory "), "{err}");

        let dir = written(&sample_trace(), "broken");
        let path = |name: &str| dir.0.join(name);
        let sid = fs::read_dir(&dir.0)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .find(|n| n.starts_with("sid-"))
            .unwrap();

        // A truncated .dat record.
        let dat = fs::read(path("4001.dat")).unwrap();
        fs::write(path("4001.dat"), &dat[..dat.len() - 5]).unwrap();
        let err = read_error(&dir.0);
        assert!(
            err.contains("4001.dat: truncated record at byte 208"),
            "{err}"
        );

        // A bad record magic.
        let mut bad = dat.clone();
        bad[8 + 16] ^= 0b1000; // magic bits 3..6 of record 1
        fs::write(path("4001.dat"), &bad).unwrap();
        let err = read_error(&dir.0);
        assert!(
            err.contains("4001.dat: bad record magic 4 (expected 5) in record 1"),
            "{err}"
        );
        fs::write(path("4001.dat"), &dat).unwrap();

        // A bad task.txt line.
        let tasks = fs::read_to_string(path("task.txt")).unwrap();
        fs::write(
            path("task.txt"),
            format!("{tasks}TASK timestamp=1.000000000 tid=x pid=1\n"),
        )
        .unwrap();
        let err = read_error(&dir.0);
        assert!(err.contains("task.txt: line 4: bad tid="), "{err}");
        fs::write(path("task.txt"), format!("{tasks}GARBAGE\n")).unwrap();
        let err = read_error(&dir.0);
        assert!(err.contains("task.txt: line 4: not a SESS, TASK"), "{err}");
        fs::write(path("task.txt"), &tasks).unwrap();

        // A missing map file.
        let map = fs::read(path(&sid)).unwrap();
        fs::remove_file(path(&sid)).unwrap();
        let err = read_error(&dir.0);
        assert!(
            err.starts_with(&format!("opening {}", path(&sid).display())),
            "{err}"
        );
        fs::write(path(&sid), map).unwrap();

        // A bad info magic, then no info at all.
        let info = fs::read(path("info")).unwrap();
        let mut bad = info.clone();
        bad[0] = b'X';
        fs::write(path("info"), bad).unwrap();
        let err = read_error(&dir.0);
        assert!(err.contains("info: bad magic"), "{err}");
        fs::remove_file(path("info")).unwrap();
        let err = read_error(&dir.0);
        assert!(
            err.starts_with(&format!("opening {}", path("info").display())),
            "{err}"
        );

        fs::write(path("info"), info).unwrap();
        assert!(read_uftrace_dir(&dir.0).is_ok());
    }

    #[test]
    fn reads_what_uftrace_record_writes() {
        let work = TempDir::new("record");
        fs::create_dir_all(&work.0).unwrap();
        let source = work.0.join("prog.c");
        fs::write(
            &source,
            "int leaf(int x) { return x + 1; }\n\
             int mid(int x) { return leaf(x) + leaf(x + 1); }\n\
             int main(void) { return mid(1) == 5 ? 0 : 1; }\n",
        )
        .unwrap();
        let prog = work.0.join("prog");
        let status = Command::new("gcc")
            .args(["-pg", "-O0", "-o"])
            .arg(&prog)
            .arg(&source)
            .status()
            .unwrap_or_else(|e| panic!("cannot run gcc ({e}); install it (CI: .ci/run does)"));
        assert!(status.success(), "gcc failed");
        let data = work.0.join("uftrace.data");
        let output = Command::new("uftrace")
            .args(["record", "--no-event", "-d"])
            .arg(&data)
            .arg(&prog)
            .output()
            .unwrap_or_else(|e| panic!("cannot run uftrace ({e}); install it (CI: .ci/run does)"));
        assert!(
            output.status.success(),
            "uftrace record failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );

        let trace = read_uftrace_dir(&data).unwrap();
        assert_eq!(trace.exe, prog.to_string_lossy());
        assert_eq!(trace.threads.len(), 1);
        let thread = &trace.threads[0];
        let calls: Vec<(u16, String)> = thread
            .events
            .iter()
            .filter(|e| e.kind == EventKind::Entry)
            .map(|e| (e.depth, trace.name_of(e.function)))
            .filter(|(_, name)| ["main", "mid", "leaf"].contains(&name.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                (0, "main".to_string()),
                (1, "mid".to_string()),
                (2, "leaf".to_string()),
                (2, "leaf".to_string()),
            ]
        );
        // Addresses are the functions' starts, as in the .sym file.
        let sym = fs::read_to_string(data.join("prog.sym")).unwrap();
        let base = trace
            .maps
            .lines()
            .find(|l| l.ends_with("/prog"))
            .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
            .unwrap();
        let main = trace.names.iter().find(|(_, n)| *n == "main").unwrap().0;
        let rel = format!("{:016x} T main", *main as u64 - base);
        assert!(sym.contains(&rel), "{rel} not in\n{sym}");
    }
}
