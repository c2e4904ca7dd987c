//! Reading a uftrace data directory (fntrace's or `uftrace record`'s) back
//! into a [`Trace`].

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::Read;
use std::path::Path;

use super::super::ExportError;
use super::format::{
    basename, decode, parse_info, parse_map_line, parse_timestamp, RawRecord, FEAT_SYM_REL_ADDR,
    FNTRACE_FILE, RECORD_MAGIC, RECORD_SIZE, TYPE_ENTRY, TYPE_EVENT, TYPE_EXIT, TYPE_LOST,
};
use crate::names::demangle;
use crate::trace::{EventKind, GraphEvent, ThreadTrace, Trace};

/// Loads a uftrace data directory into a [`Trace`]: what
/// [`write_uftrace_dir`] writes, and what `uftrace record` writes (without
/// arguments or return values). Event records are skipped; each function
/// address is mapped to the start of the symbol containing it, named from the
/// `.sym` files ([`Trace::symbols`] as written there, [`Trace::names`]
/// demangled: uftrace writes ELF names, and so does fntrace, except for
/// Rust names, written readable, see [`uftrace_symbol_name`]); thread names
/// come from `fntrace.txt` if any; `maps` is the session's map file; the
/// command line comes from `info`.
///
/// [`uftrace_symbol_name`]: crate::uftrace_symbol_name
///
/// [`write_uftrace_dir`]: crate::export::write_uftrace_dir
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

    // Each session (a process, or a program it exec'd) has its own map;
    // sessions with the same map (forked children) share one symbol table.
    let relative = header.features & FEAT_SYM_REL_ADDR != 0;
    let mut address_spaces: Vec<(String, SymbolTable)> = Vec::new();
    let mut space_of_session: Vec<usize> = Vec::with_capacity(tasks.sessions.len());
    for session in &tasks.sessions {
        let map_path = dir.join(format!("sid-{}.map", session.sid));
        let map_text = String::from_utf8_lossy(&read_file(&map_path)?).into_owned();
        let maps = strip_build_ids(&map_text);
        let space = match address_spaces.iter().position(|(known, _)| *known == maps) {
            Some(space) => space,
            None => {
                let symbols = load_symbols(dir, &session_modules(&maps), relative)?;
                address_spaces.push((maps, symbols));
                address_spaces.len() - 1
            }
        };
        space_of_session.push(space);
    }
    let maps = address_spaces[0].0.clone();
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
    let mut raw_names = HashMap::new();
    let mut first_address_of: HashMap<String, usize> = HashMap::new();
    let mut threads = Vec::with_capacity(tids.len());
    let total_bytes: u64 = tids
        .iter()
        .filter_map(|tid| fs::metadata(dir.join(format!("{tid}.dat"))).ok())
        .map(|meta| meta.len())
        .sum();
    let mut read_bytes = 0;
    for tid in tids {
        let path = dir.join(format!("{tid}.dat"));
        let data = match fs::read(&path) {
            Ok(data) => data,
            // uftrace creates no file for a thread that recorded nothing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(ExportError::io(&path, "reading", e)),
        };
        read_bytes += data.len() as u64;
        progress(read_bytes, total_bytes);
        let added = fntrace.added.get(&tid).map_or(&[][..], |v| &v[..]);
        let (mut events, lost) = parse_dat(&path, &data, added)?;
        let spaces = tasks.address_spaces_of(tid, &space_of_session);
        for event in &mut events {
            let space = spaces
                .iter()
                .rev()
                .find(|(since, _)| *since <= event.time_ns)
                .or(spaces.first())
                .map_or(0, |&(_, space)| space);
            let symbols = &address_spaces[space].1;
            if let Some(symbol) = symbols.containing(event.function) {
                // A function of another address space (a program exec'd)
                // takes the address its name has in the first space that
                // has it, as uftrace's reports merge functions by name;
                // other functions there get distinct addresses above user
                // space.
                let function = match &symbol.name {
                    Some(name) if space > 0 => *first_address_of
                        .entry(name.clone())
                        .or_insert(symbol.start | (space << SPACE_SHIFT)),
                    Some(name) => {
                        first_address_of.entry(name.clone()).or_insert(symbol.start);
                        symbol.start
                    }
                    None => symbol.start | (space << SPACE_SHIFT),
                };
                event.function = function;
                if let Some(name) = &symbol.name {
                    raw_names.entry(function).or_insert_with(|| {
                        names.insert(function, demangle(name));
                        name.clone()
                    });
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

    let first = &tasks.sessions[0];
    Ok(Trace {
        pid: first.pid,
        exe: if first.exe.is_empty() {
            header.exe
        } else {
            first.exe.clone()
        },
        cmdline: header.cmdline,
        threads,
        names,
        symbols: raw_names,
        maps,
    })
}

fn read_file(path: &Path) -> Result<Vec<u8>, ExportError> {
    let mut file = File::open(path).map_err(|e| ExportError::io(path, "opening", e))?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)
        .map_err(|e| ExportError::io(path, "reading", e))?;
    Ok(data)
}

/// Above user-space addresses (47 bits): a trace read from a directory
/// with several address spaces (a recorded program exec'd another) gives
/// the functions of the `k`-th space addresses `start | k << SPACE_SHIFT`.
const SPACE_SHIFT: u32 = 48;

/// One `SESS` line of `task.txt`.
struct Session {
    pid: u32,
    sid: String,
    exe: String,
    start: u64,
}

/// What `task.txt` says.
struct Tasks {
    /// In the order of the file; at least one.
    sessions: Vec<Session>,
    /// Every `TASK` line, by tid: pid, time.
    task_lines: HashMap<u32, Vec<(u32, u64)>>,
    /// Forked children's parents (`FORK` lines): pid to parent pid.
    parents: HashMap<u32, u32>,
    /// Thread ids in order of first appearance.
    tids: Vec<u32>,
}

impl Tasks {
    /// The address spaces thread `tid` ran in, each from a time on (oldest
    /// first), as uftrace picks a thread's session: the newest session of
    /// its process started by the time of each of its `TASK` lines, or else
    /// its parent's.
    fn address_spaces_of(&self, tid: u32, space_of_session: &[usize]) -> Vec<(u64, usize)> {
        let mut spaces = Vec::new();
        for &(pid, time) in self.task_lines.get(&tid).into_iter().flatten() {
            let mut process = Some(pid);
            while let Some(pid) = process {
                let newest = self
                    .sessions
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.pid == pid && s.start <= time)
                    .max_by_key(|(_, s)| s.start);
                if let Some((index, _)) = newest {
                    spaces.push((time, space_of_session[index]));
                    break;
                }
                process = self.parents.get(&pid).copied().filter(|&p| p != pid);
            }
        }
        spaces.sort_by_key(|&(time, _)| time);
        spaces
    }
}

fn parse_task_txt(path: &Path, text: &str) -> Result<Tasks, ExportError> {
    let mut tasks = Tasks {
        sessions: Vec::new(),
        task_lines: HashMap::new(),
        parents: HashMap::new(),
        tids: Vec::new(),
    };
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
        let time = fields
            .get("timestamp")
            .and_then(|t| parse_timestamp(t))
            .ok_or_else(|| bad("missing or bad timestamp="))?;
        match kind {
            "SESS" => {
                let pid = number("pid")?;
                let sid = fields.get("sid").ok_or_else(|| bad("no sid="))?;
                if sid.len() != 16 || !sid.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad("sid= is not 16 hex digits"));
                }
                let exe = fields.get("exename").copied().unwrap_or_default();
                tasks.sessions.push(Session {
                    pid,
                    sid: sid.to_string(),
                    exe: exe.to_string(),
                    start: time,
                });
            }
            "TASK" => {
                let tid = number("tid")?;
                let pid = number("pid")?;
                let lines = tasks.task_lines.entry(tid).or_default();
                if lines.is_empty() {
                    tasks.tids.push(tid);
                }
                lines.push((pid, time));
            }
            "FORK" => {
                tasks.parents.insert(number("pid")?, number("ppid")?);
            }
            "EXEC" | "DLOP" => {}
            _ => return Err(bad("not a SESS, TASK, FORK, EXEC or DLOP line")),
        }
    }
    if tasks.sessions.is_empty() {
        return Err(ExportError::malformed(
            path,
            "no SESS line (no session recorded)",
        ));
    }
    Ok(tasks)
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
        let RawRecord {
            time,
            kind,
            more,
            magic,
            depth,
            addr,
        } = decode(bytes.try_into().expect("a slice of RECORD_SIZE bytes"));
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
