//! The small files of a uftrace data directory, read whole when a reader
//! opens it: `task.txt`, the session map, the `.sym` symbol tables and
//! fntrace's `fntrace.txt`. The threads' record files are read elsewhere
//! (`records.rs`), record by record.

use std::collections::HashMap;
use std::path::Path;

use super::super::dirfd::{open_regular, read_regular_file};
use super::super::ExportError;
use super::format::{basename, parse_map_line, parse_timestamp, FNTRACE_FILE};

/// The file at `path`, which must be a regular file (a FIFO in its place
/// would block the open forever; see `dirfd.rs`).
pub(super) fn read_file(path: &Path) -> Result<Vec<u8>, ExportError> {
    read_regular_file(path)
}

/// [`read_file`], or `None` if there is no file at `path`.
pub(super) fn read_file_if_any(path: &Path) -> Result<Option<Vec<u8>>, ExportError> {
    use std::io::Read;
    let Some(mut file) = open_regular(path)? else {
        return Ok(None);
    };
    let mut data = Vec::new();
    file.read_to_end(&mut data)
        .map_err(|e| ExportError::io(path, "reading", e))?;
    Ok(Some(data))
}

/// Above user-space addresses (47 bits): a trace read from a directory
/// with several address spaces (a recorded program exec'd another) gives
/// the functions of the `k`-th space addresses `start | k << SPACE_SHIFT`.
pub(super) const SPACE_SHIFT: u32 = 48;

/// One `SESS` line of `task.txt`.
pub(super) struct Session {
    pub(super) pid: u32,
    pub(super) sid: String,
    pub(super) exe: String,
    pub(super) start: u64,
}

/// What `task.txt` says.
pub(super) struct Tasks {
    /// In the order of the file; at least one.
    pub(super) sessions: Vec<Session>,
    /// Every `TASK` line, by tid: pid, time.
    pub(super) task_lines: HashMap<u32, Vec<(u32, u64)>>,
    /// Forked children's parents (`FORK` lines): pid to parent pid.
    pub(super) parents: HashMap<u32, u32>,
    /// Thread ids in order of first appearance.
    pub(super) tids: Vec<u32>,
    /// Libraries loaded after their session's map was written (`DLOP`
    /// lines), in the order of the file.
    pub(super) dlopens: Vec<Dlopen>,
}

/// One `DLOP` line of `task.txt`: a library loaded (with `dlopen`) at
/// `base` (its load bias) in session `sid`. (Its time is not kept: the
/// reader names addresses whatever the time, see `load_symbols`.)
pub(super) struct Dlopen {
    pub(super) sid: String,
    pub(super) base: u64,
    pub(super) path: String,
}

impl Tasks {
    /// The address spaces thread `tid` ran in, each from a time on (oldest
    /// first), as uftrace picks a thread's session: the newest session of
    /// its process started by the time of each of its `TASK` lines, or else
    /// its parent's.
    pub(super) fn address_spaces_of(
        &self,
        tid: u32,
        space_of_session: &[usize],
    ) -> Vec<(u64, usize)> {
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

pub(super) fn parse_task_txt(path: &Path, text: &str) -> Result<Tasks, ExportError> {
    let mut tasks = Tasks {
        sessions: Vec::new(),
        task_lines: HashMap::new(),
        parents: HashMap::new(),
        tids: Vec::new(),
        dlopens: Vec::new(),
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
                // The child's first thread, from the fork on: uftrace
                // writes no TASK line for it (it runs in its parent's
                // session until it execs).
                let pid = number("pid")?;
                tasks.parents.insert(pid, number("ppid")?);
                let lines = tasks.task_lines.entry(pid).or_default();
                if lines.is_empty() {
                    tasks.tids.push(pid);
                }
                lines.push((pid, time));
            }
            "DLOP" => {
                let sid = fields.get("sid").ok_or_else(|| bad("no sid="))?;
                let base = fields
                    .get("base")
                    .and_then(|b| u64::from_str_radix(b, 16).ok())
                    .ok_or_else(|| bad("missing or bad base="))?;
                let path = fields.get("libname").ok_or_else(|| bad("no libname="))?;
                tasks.dlopens.push(Dlopen {
                    sid: sid.to_string(),
                    base,
                    path: path.to_string(),
                });
            }
            "EXEC" => {}
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
pub(super) fn strip_build_ids(text: &str) -> String {
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
pub(super) fn session_modules(maps: &str) -> Vec<(String, u64, u64)> {
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

/// How far past its base a `DLOP` library's last function may end when
/// its `.sym` file has no end marker after it.
const MAX_LIBRARY_SPAN: u64 = 1 << 32;

pub(super) struct Symbol {
    pub(super) start: usize,
    pub(super) end: usize,
    /// `None` for fntrace's hex stand-in names.
    pub(super) name: Option<String>,
}

pub(super) struct SymbolTable(Vec<Symbol>);

impl SymbolTable {
    pub(super) fn iter(&self) -> impl Iterator<Item = &Symbol> {
        self.0.iter()
    }

    pub(super) fn containing(&self, addr: usize) -> Option<&Symbol> {
        let at = self.0.partition_point(|s| s.start <= addr);
        at.checked_sub(1)
            .map(|k| &self.0[k])
            .filter(|s| addr < s.end)
    }
}

/// The symbols of a session: those of the `.sym` file of each module of
/// its map (`modules`, from [`session_modules`]), at the module's base if
/// `relative`, and those of each library it loaded later (`dlopened`:
/// path and load bias, from its `DLOP` lines), at the bias, where no
/// module of the map has them. A file shared by several modules (one
/// name) is read for the first only, as uftrace does; a library loaded
/// at several places is read for each.
pub(super) fn load_symbols(
    dir: &Path,
    modules: &[(String, u64, u64)],
    dlopened: &[(&str, u64)],
    relative: bool,
) -> Result<(SymbolTable, SymbolTable), ExportError> {
    let mut symbols = Vec::new();
    let mut objects = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    let mapped = modules.iter().map(|(path, base, end)| {
        let offset = if relative { *base } else { 0 };
        (path.as_str(), offset, *end, false)
    });
    // uftrace takes a `DLOP` library's addresses relative to its base
    // whatever the feature bits say. Its functions' sizes come from the
    // file's end markers.
    let opened = dlopened
        .iter()
        .map(|&(path, base)| (path, base, base.saturating_add(MAX_LIBRARY_SPAN), true));
    let mut libraries_read: Vec<(&str, u64)> = Vec::new();
    for (path, offset, end, is_library) in mapped.chain(opened) {
        let file = basename(path);
        if is_library {
            if modules.iter().any(|(mapped, _, _)| mapped == path)
                || libraries_read.contains(&(file, offset))
            {
                continue;
            }
            libraries_read.push((file, offset));
        } else {
            if seen.contains(&file) {
                continue;
            }
            seen.push(file);
        }
        let sym_path = dir.join(format!("{file}.sym"));
        let Some(data) = read_file_if_any(&sym_path)? else {
            continue;
        };
        let (offset, end) = (&offset, &end);
        parse_sym(
            &sym_path,
            &String::from_utf8_lossy(&data),
            *offset,
            *end,
            (&mut symbols, &mut objects),
        )?;
    }
    symbols.sort_by_key(|s: &Symbol| s.start);
    objects.sort_by_key(|s: &Symbol| s.start);
    Ok((SymbolTable(symbols), SymbolTable(objects)))
}

/// Appends the functions of a `.sym` file to `out.0` and its data objects
/// (what a `/p` value may point to) to `out.1`, each ending where the
/// next line (function, data or end marker) of the file begins.
fn parse_sym(
    path: &Path,
    text: &str,
    offset: u64,
    module_end: u64,
    out: (&mut Vec<Symbol>, &mut Vec<Symbol>),
) -> Result<(), ExportError> {
    // (address, kind: function, data object or end, name)
    let mut entries: Vec<(u64, Option<bool>, &str)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        // Recorder notes: read by `recorder_notes`, not needed here.
        if line.starts_with('#') || line.trim().is_empty() || line.starts_with("recorder ") {
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
        let is_data = !is_end && matches!(kind, "D" | "d" | "v" | "u");
        let what = (is_function || is_data).then_some(is_function);
        entries.push((addr, what, name));
    }
    entries.sort_by_key(|&(addr, _, _)| addr);
    for (k, &(start, what, name)) in entries.iter().enumerate() {
        let Some(is_function) = what else {
            continue;
        };
        let end = entries[k + 1..]
            .iter()
            .map(|&(addr, _, _)| addr)
            .find(|&addr| addr > start)
            .unwrap_or(module_end.max(start + 1));
        let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
            continue;
        };
        let hex_stand_in = name == format!("{start:#x}");
        let out = if is_function {
            &mut *out.0
        } else {
            &mut *out.1
        };
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
pub(super) struct FntraceFile {
    pub(super) names: HashMap<u32, String>,
    pub(super) added: HashMap<u32, Vec<usize>>,
}

pub(super) fn read_fntrace_file(dir: &Path) -> Result<FntraceFile, ExportError> {
    let path = dir.join(FNTRACE_FILE);
    let text = match read_file_if_any(&path)? {
        Some(data) => String::from_utf8_lossy(&data).into_owned(),
        None => return Ok(FntraceFile::default()),
    };
    let mut file = FntraceFile::default();
    for (n, line) in text.lines().enumerate() {
        // Recorder notes: read by `recorder_notes`, not needed here.
        if line.starts_with('#') || line.trim().is_empty() || line.starts_with("recorder ") {
            continue;
        }
        let bad = || {
            ExportError::malformed(
                &path,
                format!(
                    "line {}: expected \"thread TID NAME\", \"added TID INDEX...\" or \"recorder KEY=VALUE...\": {line:?}",
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
