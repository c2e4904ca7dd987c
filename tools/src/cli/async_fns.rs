//! `fntrace record --async`: the async state machines of an executable,
//! found in its DWARF, and the argument specs that have the runtime
//! record what linking their polls into futures needs (docs/async.md).
//!
//! rustc compiles each `async fn` and async block into a coroutine whose
//! resume function (DWARF name `{async_fn#N}` / `{async_block#N}`, symbol
//! `…::{closure#N}`) takes `Pin<&mut {async_fn_env#N}>` first; the env's
//! DWARF variant part names its discriminant member `__state`: 0
//! Unresumed, 1 Returned, 2 Panicked, 3… the suspend points. The runtime
//! reads no DWARF: it is handed `NAME@arg1/x,pin1[OFF]/u8` (the future's
//! address and its state at the poll's entry) and `NAME@pin1[OFF]/u8`
//! (its state when the poll returns); `arg2`, `pin2` where the `Poll` is
//! returned through memory (larger than 16 bytes: rdi is then the return
//! slot).
//!
//! `pinN[OFF]` claims that argument N is the poll's own `Pin<&mut ENV>`
//! and the state lies inside ENV, which the runtime then reads with a
//! plain load, no system call (`fntrace_format::argspec::ArgSlot`). The
//! claim is made only where the DWARF shows it for every function the
//! name selects: a name that some other text symbol also has (a function
//! whose layout was not found) gets the safe `argN[OFF]` instead.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use addr2line::gimli;
use object::{Object, ObjectSection, ObjectSymbol};

/// One async state machine's resume function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsyncFn {
    /// Its entry address in the file.
    pub address: u64,
    /// Its demangled symbol name (`kv::serve::{closure#0}`).
    pub name: String,
    /// Byte offset of the state discriminant in the future.
    pub state_offset: u64,
    /// Its size in bytes (1, 2 or 4).
    pub state_size: u8,
    /// The integer argument holding the future's address: 1 (rdi), or 2
    /// (rsi) when the `Poll` returned is larger than two registers and
    /// rdi holds the return slot (rustc's ABI returns it in memory).
    pub self_arg: u8,
    /// No other text symbol has its name: the name selects resume
    /// functions of known layout only, so the state may be loaded
    /// (`pinN[OFF]`).
    pub sole: bool,
    /// A hand-written `Future::poll` (no state machine): `Pending`'s
    /// discriminant in the `Poll<T>` it returns, `state_size` bytes at
    /// `state_offset` of it: in rax (offset 0), or through memory
    /// ([`AsyncFn::returned_in_memory`], `self` then the second argument);
    /// a `self_arg` of 0: not followed ([`AsyncFn::left_out`]).
    pub pending: Option<u64>,
    /// A hand-written poll's `Poll` is returned through memory (the
    /// hidden pointer first, in rdi; rax holds it at the return).
    pub returned_in_memory: bool,
}

impl AsyncFn {
    /// A hand-written poll found but not followed: its `Poll` comes back
    /// in registers with the discriminant elsewhere than at offset 0
    /// (not in rax). Said by `fntrace record --async`.
    pub fn left_out(&self) -> bool {
        self.self_arg == 0
    }
}

/// Where a poll's future says how it stands: a resume function's state
/// or a hand-written poll's returned discriminant (see [`AsyncFn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    state_offset: u64,
    state_size: u8,
    self_arg: u8,
    pending: Option<u64>,
    returned_in_memory: bool,
}

type Reader<'a> = gimli::EndianSlice<'a, gimli::LittleEndian>;

/// The executable whose async functions `--async` records for `program`
/// run with `args`, and those functions: the program itself if its DWARF
/// has some, else the program a wrapper runs
/// (`instrumented::program_or_wrapped`: `timeout 60 ./server`, `sh -c
/// './server --port 8080'`).
pub fn find_for_command(
    program: &OsStr,
    args: &[OsString],
    deps: bool,
) -> Result<(PathBuf, Vec<AsyncFn>), String> {
    let path = super::instrumented::resolve(program)
        .ok_or_else(|| format!("--async: {} not found", program.to_string_lossy()))?;
    // The program's own DWARF errs loudly (a script has none); a wrapped
    // candidate's is skipped.
    let own = match super::instrumented::is_script(&path) {
        true => Vec::new(),
        false => find(&path, deps)?,
    };
    if !own.is_empty() {
        return Ok((path, own));
    }
    let mut found = Vec::new();
    let wrapped = super::instrumented::program_or_wrapped(program, args, |candidate| {
        if candidate == path {
            return false; // read above
        }
        found = find(candidate, deps).unwrap_or_default();
        !found.is_empty()
    });
    wrapped.map(|candidate| (candidate, found)).ok_or_else(|| {
        format!(
            "--async: {} has no async fn or block with a symbol in its DWARF (built without \
             debug info, or all inlined?), nor has a program its arguments (or its script) name",
            path.display()
        )
    })
}

/// The async resume functions of the executable at `path` that have a
/// symbol (those inlined into their callers have none, and no call site),
/// and its hand-written `Future::poll`s: those of its own code, or with
/// `deps` those of every crate (`fntrace record --async-deps`).
pub fn find(path: &Path, deps: bool) -> Result<Vec<AsyncFn>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file = object::File::parse(&*bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let sections = gimli::DwarfSections::load(|id| -> Result<Cow<[u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    })
    .map_err(|e| format!("{}: DWARF: {e}", path.display()))?;
    let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, gimli::LittleEndian));
    let mut found: BTreeMap<u64, Layout> = BTreeMap::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let _ = resume_functions(&dwarf, &unit, deps, &mut found);
    }
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    for symbol in file.symbols() {
        if found.contains_key(&symbol.address()) && symbol.kind() == object::SymbolKind::Text {
            if let Ok(name) = symbol.name() {
                names.insert(symbol.address(), fntrace_tools::demangle(name));
            }
        }
    }
    // A `poll` returning `Poll<T>` counts as a future's only as
    // `Future::poll` (not an inherent `poll`, nor another trait's).
    found.retain(|address, layout| {
        layout.pending.is_none()
            || names
                .get(address)
                .is_some_and(|name| name.ends_with(FUTURE_POLL))
    });
    // Names some function of unknown layout shares (a monomorphisation
    // whose DWARF was not understood, a closure of the same path).
    let known: std::collections::HashSet<&str> = names.values().map(String::as_str).collect();
    let mut shared: std::collections::HashSet<String> = std::collections::HashSet::new();
    for symbol in file.symbols() {
        if symbol.kind() != object::SymbolKind::Text || found.contains_key(&symbol.address()) {
            continue;
        }
        if let Ok(name) = symbol.name() {
            let name = fntrace_tools::demangle(name);
            if known.contains(name.as_str()) {
                shared.insert(name);
            }
        }
    }
    Ok(found
        .into_iter()
        .filter_map(|(address, layout)| {
            let name = names.remove(&address)?;
            Some(AsyncFn {
                address,
                sole: !shared.contains(&name),
                name,
                state_offset: layout.state_offset,
                state_size: layout.state_size,
                self_arg: layout.self_arg,
                pending: layout.pending,
                returned_in_memory: layout.returned_in_memory,
            })
        })
        .collect())
}

/// How the symbol of a hand-written future's poll ends (demangled).
const FUTURE_POLL: &str = " as core::future::future::Future>::poll";

/// Adds the resume functions of `unit` to `found`, and the `poll`s
/// returning `Poll<T>` in registers that the program's own code declares
/// (`find` keeps those that are `Future::poll`): entry address → where
/// the future says how it stands.
fn resume_functions(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    deps: bool,
    found: &mut BTreeMap<u64, Layout>,
) -> gimli::Result<()> {
    let mut entries = unit.entries();
    while let Some((_, entry)) = entries.next_dfs()? {
        if entry.tag() != gimli::DW_TAG_subprogram {
            continue;
        }
        let Some(gimli::AttributeValue::Addr(low_pc)) = entry.attr_value(gimli::DW_AT_low_pc)?
        else {
            continue;
        };
        let Some(name) = entry.attr_value(gimli::DW_AT_name)? else {
            continue;
        };
        let name = dwarf.attr_string(unit, name)?;
        let name = name.to_string_lossy();
        if name == "poll" {
            if let Some(layout) = hand_written_poll(dwarf, unit, entry, deps)? {
                found.insert(low_pc, layout);
            }
            continue;
        }
        if !(name.starts_with("{async_fn#") || name.starts_with("{async_block#")) {
            continue;
        }
        // x86-64: rustc returns a value larger than two registers through
        // a slot whose address comes first (rdi); the future is then rsi.
        let returned = match entry.attr_value(gimli::DW_AT_type)? {
            Some(gimli::AttributeValue::UnitRef(ty)) => unit
                .entry(ty)?
                .attr_value(gimli::DW_AT_byte_size)?
                .and_then(|v| v.udata_value()),
            _ => None,
        };
        let Some(returned) = returned else {
            continue;
        };
        let self_arg = if returned > 16 { 2 } else { 1 };
        if let Some((offset, size)) = state_of_resume(unit, entry.offset())? {
            let layout = Layout {
                state_offset: offset,
                state_size: size,
                self_arg,
                pending: None,
                returned_in_memory: false,
            };
            found.insert(low_pc, layout);
        }
    }
    Ok(())
}

/// The state discriminant (offset, size) of the coroutine whose resume
/// function is at `subprogram`: its first parameter is
/// `Pin<&mut ENV>`, ENV's variant part names the discriminant.
fn state_of_resume(
    unit: &gimli::Unit<Reader<'_>>,
    subprogram: gimli::UnitOffset,
) -> gimli::Result<Option<(u64, u8)>> {
    let mut tree = unit.entries_tree(Some(subprogram))?;
    let root = tree.root()?;
    let mut children = root.children();
    let mut param_type = None;
    while let Some(child) = children.next()? {
        if child.entry().tag() == gimli::DW_TAG_formal_parameter {
            param_type = type_of(unit, child.entry().offset())?;
            break;
        }
    }
    // Pin<&mut ENV> → its one member `pointer` → &mut ENV → ENV.
    let Some(pin) = param_type else {
        return Ok(None);
    };
    let Some(pointer) = first_child(unit, pin, gimli::DW_TAG_member)? else {
        return Ok(None);
    };
    let Some(reference) = type_of(unit, pointer)? else {
        return Ok(None);
    };
    let Some(env) = type_of(unit, reference)? else {
        return Ok(None);
    };
    let Some(part) = first_child(unit, env, gimli::DW_TAG_variant_part)? else {
        return Ok(None);
    };
    let Some(gimli::AttributeValue::UnitRef(discr)) =
        unit.entry(part)?.attr_value(gimli::DW_AT_discr)?
    else {
        return Ok(None);
    };
    let member = unit.entry(discr)?;
    let Some(offset) = member
        .attr_value(gimli::DW_AT_data_member_location)?
        .and_then(|v| v.udata_value())
    else {
        return Ok(None);
    };
    let Some(state_type) = type_of(unit, discr)? else {
        return Ok(None);
    };
    let size = unit
        .entry(state_type)?
        .attr_value(gimli::DW_AT_byte_size)?
        .and_then(|v| v.udata_value());
    Ok(match size {
        Some(size @ (1 | 2 | 4)) => Some((offset, size as u8)),
        _ => None,
    })
}

/// The layout of a hand-written poll at `entry` (a subprogram named
/// `poll`), if it is one `--async` follows: declared in the program's own
/// code (not in a crate from a registry or git checkout, nor in Rust's
/// library: their futures are the executor's and the libraries' own
/// business, and many), unless `deps`, returning a `Poll<T>` whose DWARF variant part
/// places the discriminant and gives `Pending` a value. rustc returns it
/// in registers when it is at most 8 bytes, or 16 made of two scalars
/// (its scalar pair, the discriminant first, in rax): the discriminant
/// must then be at offset 0 (else the layout's `self_arg` is 0, left
/// out); anything else through memory (`Poll<Result<u32, io::Error>>`:
/// three scalars), the hidden pointer first, `self` second.
fn hand_written_poll(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'_>>,
    deps: bool,
) -> gimli::Result<Option<Layout>> {
    if !deps && !declared_in_own_code(dwarf, unit, entry)? {
        return Ok(None);
    }
    let Some(poll) = type_of(unit, entry.offset())? else {
        return Ok(None);
    };
    let poll_entry = unit.entry(poll)?;
    let type_name = match poll_entry.attr_value(gimli::DW_AT_name)? {
        Some(name) => dwarf
            .attr_string(unit, name)?
            .to_string_lossy()
            .into_owned(),
        None => return Ok(None),
    };
    let size = poll_entry
        .attr_value(gimli::DW_AT_byte_size)?
        .and_then(|v| v.udata_value());
    let (Some(size), true) = (size, type_name.starts_with("Poll<")) else {
        return Ok(None);
    };
    let Some(part) = first_child(unit, poll, gimli::DW_TAG_variant_part)? else {
        return Ok(None);
    };
    let Some(gimli::AttributeValue::UnitRef(discr)) =
        unit.entry(part)?.attr_value(gimli::DW_AT_discr)?
    else {
        return Ok(None);
    };
    let discr_offset = unit
        .entry(discr)?
        .attr_value(gimli::DW_AT_data_member_location)?
        .and_then(|v| v.udata_value());
    let discr_size = match type_of(unit, discr)? {
        Some(t) => byte_size(unit, t)?,
        None => None,
    };
    let (Some(discr_offset), Some(discr_size @ (1 | 2 | 4 | 8))) = (discr_offset, discr_size)
    else {
        return Ok(None);
    };
    let Some(pending) = pending_value(dwarf, unit, part)? else {
        return Ok(None);
    };
    let in_registers = match size {
        0..=8 => true,
        9..=16 => {
            let mut scalars = Vec::new();
            scalar_pair(unit, poll, 0, &mut scalars, 0)? && scalars.len() == 2
        }
        _ => false,
    };
    // In registers, the discriminant must be rax's low bytes.
    let self_arg = match (in_registers, discr_offset) {
        (true, 0) => 1,
        (true, _) => 0,
        (false, _) => 2,
    };
    Ok(Some(Layout {
        state_offset: discr_offset,
        state_size: discr_size as u8,
        self_arg,
        pending: Some(pending),
        returned_in_memory: !in_registers,
    }))
}

/// Whether the subprogram at `entry` is declared outside Cargo's registry
/// and git checkouts and Rust's own library (its `DW_AT_decl_file`).
fn declared_in_own_code(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'_>>,
) -> gimli::Result<bool> {
    let Some(gimli::AttributeValue::FileIndex(index)) = entry.attr_value(gimli::DW_AT_decl_file)?
    else {
        return Ok(false);
    };
    let Some(program) = &unit.line_program else {
        return Ok(false);
    };
    let header = program.header();
    let Some(file) = header.file(index) else {
        return Ok(false);
    };
    let mut path = String::new();
    if let Some(directory) = file.directory(header) {
        path.push_str(&dwarf.attr_string(unit, directory)?.to_string_lossy());
        path.push('/');
    }
    path.push_str(&dwarf.attr_string(unit, file.path_name())?.to_string_lossy());
    let foreign = [
        "/.cargo/registry/",
        "/.cargo/git/",
        "/rustc/",
        "/lib/rustlib/",
    ];
    Ok(!path.starts_with("/rustc/") && !foreign.iter().any(|f| path.contains(f)))
}

/// `Pending`'s `DW_AT_discr_value` in the variant part at `part`.
fn pending_value(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    part: gimli::UnitOffset,
) -> gimli::Result<Option<u64>> {
    let mut tree = unit.entries_tree(Some(part))?;
    let root = tree.root()?;
    let mut variants = root.children();
    while let Some(variant) = variants.next()? {
        if variant.entry().tag() != gimli::DW_TAG_variant {
            continue;
        }
        let value = match variant.entry().attr_value(gimli::DW_AT_discr_value)? {
            Some(gimli::AttributeValue::Sdata(v)) => Some(v as u64),
            Some(v) => v.udata_value(),
            None => None,
        };
        let mut members = variant.children();
        while let Some(member) = members.next()? {
            let named = match member.entry().attr_value(gimli::DW_AT_name)? {
                Some(name) => dwarf.attr_string(unit, name)?.to_string_lossy() == "Pending",
                None => false,
            };
            if named {
                return Ok(value);
            }
        }
    }
    Ok(None)
}

/// Collects into `scalars` the (offset, size, is a float) of every scalar
/// the type at `at` (placed at `base`) is made of, every variant's, each
/// place once; `false` if it holds something that is not a scalar, a
/// structure or an enum's variant part (an array, a union) or two
/// scalars of different kinds at one place. rustc returns a 9-16 byte
/// value in two registers when it is two scalars (its scalar pair).
fn scalar_pair(
    unit: &gimli::Unit<Reader<'_>>,
    at: gimli::UnitOffset,
    base: u64,
    scalars: &mut Vec<(u64, u64, bool)>,
    depth: u32,
) -> gimli::Result<bool> {
    if depth > 16 {
        return Ok(false);
    }
    let entry = unit.entry(at)?;
    let mut size = byte_size(unit, at)?;
    // rustc gives pointers no size of their own: an address's.
    if entry.tag() == gimli::DW_TAG_pointer_type {
        size = size.or(Some(u64::from(unit.encoding().address_size)));
    }
    match entry.tag() {
        gimli::DW_TAG_base_type | gimli::DW_TAG_pointer_type | gimli::DW_TAG_enumeration_type => {
            let Some(size) = size.filter(|&s| s > 0) else {
                return Ok(size == Some(0));
            };
            let float = entry.tag() == gimli::DW_TAG_base_type
                && entry.attr_value(gimli::DW_AT_encoding)?
                    == Some(gimli::AttributeValue::Encoding(gimli::DW_ATE_float));
            match scalars.iter().find(|s| s.0 == base) {
                Some(&seen) => Ok(seen == (base, size, float)),
                None => {
                    scalars.push((base, size, float));
                    Ok(true)
                }
            }
        }
        gimli::DW_TAG_typedef => match type_of(unit, at)? {
            Some(inner) => scalar_pair(unit, inner, base, scalars, depth + 1),
            None => Ok(false),
        },
        gimli::DW_TAG_structure_type | gimli::DW_TAG_variant_part | gimli::DW_TAG_variant => {
            if size == Some(0) {
                return Ok(true);
            }
            let mut tree = unit.entries_tree(Some(at))?;
            let root = tree.root()?;
            let mut children = root.children();
            while let Some(child) = children.next()? {
                let child = child.entry();
                let fits = match child.tag() {
                    gimli::DW_TAG_member => {
                        let offset = child
                            .attr_value(gimli::DW_AT_data_member_location)?
                            .and_then(|v| v.udata_value());
                        match (offset, type_of(unit, child.offset())?) {
                            (Some(offset), Some(ty)) => {
                                scalar_pair(unit, ty, base + offset, scalars, depth + 1)?
                            }
                            _ => false,
                        }
                    }
                    gimli::DW_TAG_variant_part | gimli::DW_TAG_variant => {
                        scalar_pair(unit, child.offset(), base, scalars, depth + 1)?
                    }
                    // Type parameters, methods, nested types: no bytes.
                    _ => true,
                };
                if !fits {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        _ => Ok(size == Some(0)),
    }
}

/// The `DW_AT_byte_size` of the type at `at`.
fn byte_size(unit: &gimli::Unit<Reader<'_>>, at: gimli::UnitOffset) -> gimli::Result<Option<u64>> {
    Ok(unit
        .entry(at)?
        .attr_value(gimli::DW_AT_byte_size)?
        .and_then(|v| v.udata_value()))
}

/// The DIE `DW_AT_type` of `at` names, if in the same unit.
fn type_of(
    unit: &gimli::Unit<Reader<'_>>,
    at: gimli::UnitOffset,
) -> gimli::Result<Option<gimli::UnitOffset>> {
    Ok(match unit.entry(at)?.attr_value(gimli::DW_AT_type)? {
        Some(gimli::AttributeValue::UnitRef(offset)) => Some(offset),
        _ => None,
    })
}

/// The first child of `at` with `tag`.
fn first_child(
    unit: &gimli::Unit<Reader<'_>>,
    at: gimli::UnitOffset,
    tag: gimli::DwTag,
) -> gimli::Result<Option<gimli::UnitOffset>> {
    let mut tree = unit.entries_tree(Some(at))?;
    let root = tree.root()?;
    let mut children = root.children();
    while let Some(child) = children.next()? {
        if child.entry().tag() == tag {
            return Ok(Some(child.entry().offset()));
        }
    }
    Ok(None)
}

/// The `-A` and `-R` specs for `functions`: per function, the future's
/// address and its state at the entry, and its state at the exit (read
/// through `pinN`, with a load, for a [`AsyncFn::sole`] name; else
/// through `argN`, with the system call that never faults); for a
/// hand-written poll, the future's address at the entry and the `Poll`'s
/// discriminant at the exit (`pollN(V)`). Names
/// a glob cannot spell exactly (`*`, `?`), and names two functions of
/// different layouts share (a glob would select both), are left out.
pub fn specs(functions: &[AsyncFn]) -> (Vec<String>, Vec<String>) {
    let mut by_name: BTreeMap<&str, Option<&AsyncFn>> = BTreeMap::new();
    for f in functions {
        if f.name.contains(['*', '?', ';', '@']) {
            continue;
        }
        let same = |g: &&AsyncFn| {
            (g.state_offset, g.state_size, g.self_arg, g.sole, g.pending)
                == (f.state_offset, f.state_size, f.self_arg, f.sole, f.pending)
        };
        by_name
            .entry(&f.name)
            .and_modify(|seen| *seen = seen.filter(same))
            .or_insert(Some(f));
    }
    let mut arguments = Vec::new();
    let mut retvals = Vec::new();
    for (name, f) in by_name {
        let Some(f) = f.filter(|f| !f.left_out()) else {
            continue;
        };
        let arg = f.self_arg;
        if let Some(pending) = f.pending {
            // The future's address; the `Poll` returned (rax, or where rax
            // points).
            arguments.push(format!("{name}@arg{arg}/x"));
            let bits = u32::from(f.state_size) * 8;
            let at = match f.returned_in_memory {
                true => format!("[{:#x}]", f.state_offset),
                false => String::new(),
            };
            retvals.push(format!("{name}@poll{arg}({pending}){at}/u{bits}"));
            continue;
        }
        let through = if f.sole { "pin" } else { "arg" };
        let state = format!(
            "{through}{arg}[{:#x}]/u{}",
            f.state_offset,
            u32::from(f.state_size) * 8
        );
        arguments.push(format!("{name}@arg{arg}/x,{state}"));
        retvals.push(format!("{name}@{state}"));
    }
    (arguments, retvals)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resume(name: &str, address: u64, sole: bool) -> AsyncFn {
        AsyncFn {
            address,
            name: name.to_string(),
            state_offset: 0x18,
            state_size: 1,
            self_arg: 1,
            sole,
            pending: None,
            returned_in_memory: false,
        }
    }

    #[test]
    fn states_are_loaded_only_through_names_of_known_layout() {
        let functions = [
            resume("a::serve::{closure#0}", 0x1000, true),
            resume("a::other::{closure#0}", 0x2000, false),
        ];
        let (arguments, retvals) = specs(&functions);
        assert_eq!(
            arguments,
            [
                "a::other::{closure#0}@arg1/x,arg1[0x18]/u8",
                "a::serve::{closure#0}@arg1/x,pin1[0x18]/u8",
            ]
        );
        assert_eq!(
            retvals,
            [
                "a::other::{closure#0}@arg1[0x18]/u8",
                "a::serve::{closure#0}@pin1[0x18]/u8",
            ]
        );
    }
}
