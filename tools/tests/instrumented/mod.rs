//! Which functions of a built ELF file call `mcount` at their entry (what
//! `-Zinstrument-mcount` puts there), read from its bytes: for the tests of
//! `fntrace cargo`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget};

/// How far into a function the call to mcount may be (after the frame
/// set-up and, at most, a stack adjustment and argument spills).
const ENTRY_BYTES: u64 = 64;

/// Every function symbol of the ELF file at `path`, demangled without its
/// hash, with whether it calls `mcount` within its first bytes (by name,
/// any of the functions so named does).
///
/// A call is recognised by its target, not by decoding: `e8 rel32` (or
/// `67 e8 rel32`) whose target is `mcount` defined in the file, or its PLT
/// entry (`ff 25` through mcount's GOT slot, after an `endbr64` and a `bnd`
/// prefix if any); or `ff 15 disp32` through mcount's GOT slot.
pub fn mcount_calls(path: &Path) -> BTreeMap<String, bool> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let file =
        object::File::parse(&*data).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    let is_mcount = |name: &str| name == "mcount" || name == "_mcount";

    let defined: Vec<u64> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.is_definition() && s.name().is_ok_and(is_mcount))
        .map(|s| s.address())
        .collect();
    let mut got_slots = Vec::new();
    if let (Some(relocations), Some(dynamic_symbols)) =
        (file.dynamic_relocations(), file.dynamic_symbol_table())
    {
        for (slot, relocation) in relocations {
            if let RelocationTarget::Symbol(index) = relocation.target() {
                let symbol = dynamic_symbols.symbol_by_index(index).unwrap();
                if symbol.name().is_ok_and(is_mcount) {
                    got_slots.push(slot);
                }
            }
        }
    }
    let bytes_at = |address: u64, len: u64| -> Option<&[u8]> {
        file.sections().find_map(|section| {
            let start = section.address();
            let end = start + section.size();
            if address < start || address >= end {
                return None;
            }
            let data = section.data().ok()?;
            let from = (address - start) as usize;
            let to = (from + len as usize).min(data.len());
            data.get(from..to)
        })
    };
    let rel32 = |bytes: &[u8], at: usize| -> Option<i64> {
        Some(i32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as i64)
    };
    // A PLT entry jumping through mcount's GOT slot.
    let is_mcount_plt = |address: u64| -> bool {
        let Some(bytes) = bytes_at(address, 16) else {
            return false;
        };
        let mut at = 0;
        if bytes.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
            at = 4; // endbr64
        }
        if bytes.get(at) == Some(&0xf2) {
            at += 1; // bnd
        }
        if bytes.get(at..at + 2) != Some(&[0xff, 0x25]) {
            return false;
        }
        rel32(bytes, at + 2).is_some_and(|disp| {
            let slot = (address as i64 + at as i64 + 6 + disp) as u64;
            got_slots.contains(&slot)
        })
    };

    let mut functions = BTreeMap::new();
    for symbol in file.symbols() {
        if symbol.kind() != object::SymbolKind::Text || symbol.size() == 0 {
            continue;
        }
        let Ok(raw) = symbol.name() else { continue };
        let address = symbol.address();
        let calls = bytes_at(address, symbol.size().min(ENTRY_BYTES)).is_some_and(|bytes| {
            (0..bytes.len()).any(|at| match bytes[at] {
                0xe8 => rel32(bytes, at + 1).is_some_and(|rel| {
                    let target = (address as i64 + at as i64 + 5 + rel) as u64;
                    defined.contains(&target) || is_mcount_plt(target)
                }),
                0xff if bytes.get(at + 1) == Some(&0x15) => {
                    rel32(bytes, at + 2).is_some_and(|disp| {
                        let slot = (address as i64 + at as i64 + 6 + disp) as u64;
                        got_slots.contains(&slot)
                    })
                }
                _ => false,
            })
        });
        *functions
            .entry(fntrace_tools::demangle(raw))
            .or_insert(false) |= calls;
    }
    functions
}

/// The names of the functions that call mcount, of `functions` (as
/// [`mcount_calls`] returns them).
pub fn callers(functions: &BTreeMap<String, bool>) -> Vec<&str> {
    functions
        .iter()
        .filter(|(_, &calls)| calls)
        .map(|(name, _)| name.as_str())
        .collect()
}
