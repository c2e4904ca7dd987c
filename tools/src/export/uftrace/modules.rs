//! The modules of a uftrace directory: which file each traced function
//! lies in (from the process's maps), the `map` text that lists them, and
//! each module's `.sym` file.

use std::collections::HashMap;

use super::format::{one_line, parse_map_line, MAX_SYMBOL_SIZE};
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
