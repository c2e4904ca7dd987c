//! The modules of a uftrace directory: which file each traced function
//! lies in (from the process's maps), the `map` text that lists them, and
//! each module's `.sym` file.

use std::collections::HashMap;

use super::format::{basename, one_line, parse_map_line, MAX_SYMBOL_SIZE};
use crate::names::uftrace_symbol_name;
use crate::trace::Trace;

/// Where functions that lie in no mapped file are put.
const UNMAPPED_MODULE: &str = "fntrace-unmapped";

/// A module as uftrace sees it: a file, based at its first mapping.
pub(super) struct Module {
    pub(super) path: String,
    pub(super) base: u64,
    pub(super) end: u64,
    /// Traced or named functions inside, sorted.
    pub(super) functions: Vec<usize>,
}

pub(super) struct ModuleLayout {
    pub(super) modules: Vec<Module>,
    stack: (u64, u64),
}

impl ModuleLayout {
    pub(super) fn new(maps: &str, functions: &[usize]) -> Self {
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

    pub(super) fn map_text(&self) -> String {
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

pub(super) fn sym_text(trace: &Trace, module: &Module) -> String {
    let mut lines = Vec::with_capacity(module.functions.len() * 2 + 1);
    let functions = &module.functions;
    for (k, &function) in functions.iter().enumerate() {
        let start = function as u64;
        let rel = start - module.base;
        let name = match trace.symbols.get(&function) {
            Some(raw) if !raw.trim().is_empty() => one_line(&uftrace_symbol_name(raw)),
            _ => match trace.names.get(&function) {
                Some(name) if !name.trim().is_empty() => one_line(name),
                _ => format!("{function:#x}"),
            },
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

/// The `DLOP` line of `task.txt` for a library loaded at `bias` after its
/// session began (uftrace's recorder writes one at each `dlopen`): from
/// `time` on, addresses of session `sid` that no module of its map holds
/// are looked up in that library's `.sym` file, at `bias`; uftrace takes
/// the newest library loaded by an event's time that has a symbol there.
pub(super) fn dlop_line(time: u64, pid: u32, sid: &str, bias: u64, path: &str) -> String {
    format!(
        "DLOP timestamp={} tid={pid} sid={sid} base={bias:x} libname=\"{}\"\n",
        super::format::timestamp(time),
        one_line(path),
    )
}

/// The `.sym` file of a library of a `DLOP` line: its `functions` (start
/// address and ELF name), relative to `bias`; `end` ends the last one.
/// `None` without functions.
pub(super) fn library_sym_text(
    path: &str,
    bias: u64,
    end: u64,
    functions: &[(usize, String)],
) -> Option<String> {
    if functions.is_empty() {
        return None;
    }
    let mut starts: Vec<usize> = functions.iter().map(|&(start, _)| start).collect();
    starts.sort_unstable();
    starts.dedup();
    let module = Module {
        path: path.to_string(),
        base: bias,
        end: end.max(bias),
        functions: starts,
    };
    let names = Trace {
        symbols: functions.iter().cloned().collect(),
        ..Trace::default()
    };
    Some(sym_text(&names, &module))
}

/// The `DLOP` lines of `header`'s libraries (see [`Trace::libraries`]),
/// oldest first, as the streaming recorder writes them: uftrace names an
/// address outside the map after the newest library loaded there by the
/// time of the event.
pub(super) fn library_lines(header: &Trace, sid: &str, session_time: u64) -> Vec<String> {
    let mut libraries: Vec<_> = header
        .libraries
        .iter()
        .filter(|library| !library.functions.is_empty())
        .collect();
    libraries.sort_by_key(|library| library.loaded_after_ns);
    libraries
        .into_iter()
        .map(|library| {
            dlop_line(
                library.loaded_after_ns.max(session_time),
                header.pid,
                sid,
                library.bias,
                &library.path,
            )
        })
        .collect()
}

/// `header.maps` without the lines of its libraries' files (named by
/// their `DLOP` lines, see [`Trace::libraries`]): uftrace looks an
/// address up in the map first.
pub(super) fn maps_without_libraries(header: &Trace) -> String {
    if header.libraries.is_empty() {
        return header.maps.clone();
    }
    let named_by_time = |line: &str| {
        parse_map_line(line).is_some_and(|line| {
            header
                .libraries
                .iter()
                .any(|library| basename(&library.path) == basename(line.path))
        })
    };
    header
        .maps
        .lines()
        .filter(|line| !named_by_time(line))
        .map(|line| format!("{line}\n"))
        .collect()
}
