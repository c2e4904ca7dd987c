//! What uftrace's `replay` needs beside the records to show typed values
//! as uftrace's own `-a` recording shows them: the data objects of a
//! module in its `.sym` file (a `/p` value that points into one is shown
//! as `&NAME`) and the module's `.dbg` file, whose `E:` lines define the
//! enums `/e:NAME` values are named by. uftrace 0.13 writes both for
//! every module; fntrace adds them to a finished recording (`record -a`).
//! [`ValueNames`] is what a reader finds there.

use std::path::Path;

use super::super::dirfd::TraceDir;
use super::super::ExportError;
use super::format::{basename, one_line};
use super::meta::SymbolTable;
use crate::argspec::{self, parse_enum, EnumDef, FunctionSpec, Names, SpecKind};
use crate::names::demangle;

/// The enums the `.dbg` files of `dir` define (their `E:` lines); a
/// definition that does not parse is left out, as uftrace leaves it.
pub(super) fn load_enums(dir: &Path) -> Vec<EnumDef> {
    let mut enums = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return enums;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "dbg") {
            continue;
        }
        let Ok(Some(bytes)) = super::meta::read_file_if_any(&path) else {
            continue;
        };
        for line in String::from_utf8_lossy(&bytes).lines() {
            if let Some(Ok(defs)) = line.strip_prefix("E: ").map(parse_enum) {
                enums.extend(defs);
            }
        }
    }
    enums
}

/// The specs of uftrace's own `-a` recording of `dir`: the `A:` and `R:`
/// lines of its `.dbg` files (`F: 11a6 add` then `A: @arg1,arg2`), then
/// `auto`'s (its `info`'s `argauto` and `retauto` lines), each function's
/// parsed alone: one fntrace does not read (`%stack+8`, `arg9`) is left
/// out, and a record of that function is then refused by the reader. And
/// the enums of `enumauto`.
pub(super) fn load_auto_specs(dir: &Path, auto: &[String; 3]) -> (Vec<FunctionSpec>, Vec<EnumDef>) {
    let mut specs = Vec::new();
    let mut one = |text: &str, kind| {
        if let Ok(parsed) = argspec::parse(text, kind) {
            specs.extend(parsed);
        }
    };
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "dbg") {
                continue;
            }
            let Ok(Some(bytes)) = super::meta::read_file_if_any(&path) else {
                continue;
            };
            let mut function = String::new();
            for line in String::from_utf8_lossy(&bytes).lines() {
                if let Some(rest) = line.strip_prefix("F: ") {
                    function = rest
                        .split_once(' ')
                        .map_or("", |(_, name)| name)
                        .to_string();
                } else if let Some(values) = line.strip_prefix("A: ") {
                    one(&format!("{function}{values}"), SpecKind::Arguments);
                } else if let Some(values) = line.strip_prefix("R: ") {
                    one(&format!("{function}{values}"), SpecKind::Retval);
                }
            }
        }
    }
    for (text, kind) in [
        (&auto[0], SpecKind::Arguments),
        (&auto[1], SpecKind::Retval),
    ] {
        for part in text.split(';').filter(|p| !p.is_empty()) {
            one(part, kind);
        }
    }
    let enums = auto[2]
        .split_inclusive(';')
        .filter_map(|definition| parse_enum(definition).ok())
        .flatten()
        .collect();
    (specs, enums)
}

/// The names a reader gives `/p` and `/e` values: the symbols of an
/// address space (functions, then data objects) and the enums.
pub(super) struct ValueNames<'a> {
    pub(super) functions: &'a SymbolTable,
    pub(super) objects: &'a SymbolTable,
    pub(super) enums: &'a [EnumDef],
}

impl Names for ValueNames<'_> {
    fn symbol_at(&self, addr: u64) -> Option<String> {
        let addr = usize::try_from(addr).ok()?;
        let symbol = (self.functions.containing(addr)).or_else(|| self.objects.containing(addr))?;
        symbol.name.as_deref().map(demangle)
    }

    fn enum_def(&self, name: &str) -> Option<&EnumDef> {
        self.enums.iter().find(|def| def.name == name)
    }
}

/// A data object of a module (an ELF `STT_OBJECT` symbol with a size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSymbol {
    /// Its address relative to the module's first mapping, as the `.sym`
    /// file's addresses are.
    pub offset: u64,
    /// Its size in bytes (more than 0).
    pub size: u64,
    /// Whether it is local to its file (`d`; global or weak: `D`).
    pub local: bool,
    /// Its ELF name.
    pub name: String,
}

/// Adds `data` to the `.sym` file of the module at `path` in the
/// recording `dir` (if it has one: no function of the module was named
/// otherwise) and writes the module's `.dbg` file with `enums` (uftrace's
/// definitions, `enum color {RED,GREEN=5,BLUE}`), replacing any. Each data
/// object is followed by an end marker at its end, so that uftrace gives
/// it its own size (the file has no sizes).
pub fn add_debug_info(
    dir: &Path,
    path: &str,
    data: &[DataSymbol],
    enums: &[String],
) -> Result<(), ExportError> {
    let dir = TraceDir::open_output(dir)?;
    let file = basename(path);
    let sym_file = format!("{file}.sym");
    if !data.is_empty() {
        if let Some(bytes) = dir.read(&sym_file)? {
            let text = String::from_utf8_lossy(&bytes);
            let header = format!("# path name: {}", one_line(path));
            if text.lines().any(|line| line == header) {
                dir.replace(&sym_file, with_data(&text, data).as_bytes())?;
            }
        }
    }
    if !enums.is_empty() {
        let mut text = format!("# path name: {}\n", one_line(path));
        for definition in enums {
            text.push_str(&format!("E: {}\n", one_line(definition)));
        }
        dir.replace(&format!("{file}.dbg"), text.as_bytes())?;
    }
    Ok(())
}

/// `text` (a `.sym` file) with `data`'s lines appended, sorted, and its
/// symbol count raised.
fn with_data(text: &str, data: &[DataSymbol]) -> String {
    let mut data: Vec<&DataSymbol> = data.iter().collect();
    data.sort_by_key(|symbol| symbol.offset);
    let mut out = String::with_capacity(text.len() + data.len() * 64);
    for line in text.lines() {
        match line.strip_prefix("# symbols: ").map(str::parse::<usize>) {
            Some(Ok(n)) => out.push_str(&format!("# symbols: {}\n", n + data.len())),
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for (k, symbol) in data.iter().enumerate() {
        let kind = if symbol.local { 'd' } else { 'D' };
        out.push_str(&format!(
            "{:016x} {kind} {}\n",
            symbol.offset,
            one_line(&symbol.name)
        ));
        let end = symbol.offset.saturating_add(symbol.size);
        if data.get(k + 1).is_none_or(|next| next.offset != end) {
            out.push_str(&format!("{end:016x} ? __sym_end\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_objects_follow_the_functions_each_with_its_end() {
        let sym = "# symbols: 2\n# path name: /t/p\n\
                   00000000000011a6 T add\n00000000000011cb ? __func_end\n";
        let data = [
            DataSymbol {
                offset: 0x4038,
                size: 4,
                local: false,
                name: "counter".into(),
            },
            DataSymbol {
                offset: 0x4030,
                size: 8,
                local: true,
                name: "called.0".into(),
            },
        ];
        assert_eq!(
            with_data(sym, &data),
            "# symbols: 4\n# path name: /t/p\n\
             00000000000011a6 T add\n00000000000011cb ? __func_end\n\
             0000000000004030 d called.0\n\
             0000000000004038 D counter\n\
             000000000000403c ? __sym_end\n"
        );
    }
}
