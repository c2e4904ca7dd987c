//! `fntrace record -a` (`--auto-args`): argument and return-value specs
//! for every function the executable's DWARF describes, built from the
//! types of its parameters and its return type as uftrace 0.13's `-a`
//! builds them for C (plain `argN` for integers, `/s` for `char *`, `/c`
//! for `char`, `fparg` for floats, `/p` for other pointers, `/e:NAME` for
//! enums, `/tSIZE:NAME%REGS` for a C structure passed in integer
//! registers), in the `-A`/`-R` syntax the rest of `record` already
//! takes; and what the recording needs beside them for uftrace's `replay`
//! to name values as it does: the enums' definitions (its `.dbg` file)
//! and the program's data objects (in its `.sym` file). Where fntrace
//! cannot record what uftrace does (a structure on the stack or in vector
//! registers), it stops, as the reference page says (docs/arguments.md).

use std::borrow::Cow;
use std::path::Path;

use addr2line::gimli;
use fntrace_tools::argspec;
use gimli::{AttributeValue, EndianSlice, LittleEndian, UnitOffset};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

/// The longest spec text passed on: Linux refuses to start a program with
/// an environment string over 128 KiB (`MAX_ARG_STRLEN`).
const ENV_MAX: usize = 120 * 1024;

type Slice<'a> = EndianSlice<'a, LittleEndian>;
type Unit<'a> = gimli::Unit<Slice<'a>>;

/// The specs `-a` gives, joined by `;` as `FNTRACE_ARGS` and
/// `FNTRACE_RETVAL` take them, and what was left without.
#[derive(Debug, Default)]
pub struct AutoSpecs {
    /// The `-A` specs: `add@arg1,arg2;lookup@arg1/s,arg2`.
    pub arguments: String,
    /// The `-R` specs: `add@retval;pick@retval/s`.
    pub retval: String,
    /// Functions described by DWARF.
    pub described: usize,
    /// Functions of the symbol table that DWARF does not describe as
    /// themselves (no `-g`, code from elsewhere, a compiler's copy such as
    /// `f.isra.0`): recorded without values.
    pub undescribed: Vec<String>,
    /// The definitions of the enums the specs name, as uftrace writes
    /// them (`enum color {RED,GREEN=5,BLUE}`).
    pub enums: Vec<String>,
    /// Functions DWARF marks as having no callable ABI (`DW_CC_nocall`:
    /// rustc's functions whose arguments it passes its own way): recorded
    /// without values.
    pub nocall: Vec<String>,
}

/// `-a`'s arguments for a program without DWARF: every function's six
/// integer argument registers (rdi, rsi, rdx, rcx, r8, r9), raw.
const RAW_ARGUMENTS: &str = "*@arg1/x,arg2/x,arg3/x,arg4/x,arg5/x,arg6/x";

/// `-a`'s return value for a program without DWARF: rax, raw.
const RAW_RETVAL: &str = "*@retval/x";

/// What `record -a` passes to the program and writes into the recording
/// after it.
#[derive(Debug, Default)]
pub struct ForRecord {
    /// The `-A` specs, if any.
    pub arguments: Option<String>,
    /// The `-R` specs, if any.
    pub retval: Option<String>,
    /// The enums' definitions (see [`AutoSpecs::enums`]).
    pub enums: Vec<String>,
    /// The executable the specs describe (the program, or the one it
    /// runs), for [`complete`].
    pub described: std::path::PathBuf,
}

/// How one parameter or return type is recorded.
enum Value {
    /// An integer register value with this uftrace suffix (`""`, `/s`,
    /// `/c`, `/p`, `/e:NAME`).
    Int(String),
    /// A C structure of this size (1-16 bytes) and name, and how the SysV
    /// ABI passes it: `Some(false)` in integer registers, `Some(true)` in
    /// vector ones, `None` in both (returned in rax and xmm0).
    Struct(u64, String, Option<bool>),
    /// A floating-point value of this many bits.
    Float(u8),
    /// Nothing more can be recorded for this function (a structure or an
    /// 80-bit float passed by value: where the next values are is not
    /// followed yet).
    Stop,
    /// No value (`void`).
    None,
}

/// `fntrace record -a`'s specs for `program` (found on `PATH` as it is
/// run) with `args`, and its enums; functions without DWARF are said once
/// on stderr. A program with no DWARF description that wraps another
/// (`timeout 60 ./server`, `sh -c './server'`:
/// `instrumented::program_or_wrapped`) gives the specs of the one it runs.
pub fn for_record(
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
) -> Result<ForRecord, String> {
    let path = super::instrumented::resolve(program)
        .ok_or_else(|| format!("-a: cannot find {}", program.to_string_lossy()))?;
    let mut auto = match super::instrumented::is_script(&path) {
        true => AutoSpecs::default(),
        false => specs_of(&path)?,
    };
    let mut described = path.clone();
    if auto.described == 0 {
        let mut wrapped_specs = None;
        let wrapped = super::instrumented::program_or_wrapped(program, args, |candidate| {
            let specs = (candidate != path)
                .then(|| specs_of(candidate).ok())
                .flatten();
            wrapped_specs = specs.filter(|s| s.described > 0);
            wrapped_specs.is_some()
        });
        if let (Some(wrapped), Some(specs)) = (wrapped, wrapped_specs) {
            eprintln!(
                "fntrace record: -a: the functions of {} (which {} runs)",
                wrapped.display(),
                program.to_string_lossy()
            );
            auto = specs;
            described = wrapped;
        }
    }
    let name = match described == path {
        true => program.to_string_lossy().into_owned(),
        false => described.display().to_string(),
    };
    if auto.described == 0 {
        // Nothing says how many arguments a function takes or of what
        // type: the six integer argument registers and rax, as they are.
        auto.arguments = RAW_ARGUMENTS.to_string();
        auto.retval = RAW_RETVAL.to_string();
        eprintln!(
            "fntrace record: -a: {name} has no DWARF description of its functions \
             (build it with -g): the six argument registers and the return register \
             recorded raw, in hexadecimal"
        );
    } else if let Some(first) = auto.undescribed.first() {
        eprintln!(
            "fntrace record: -a: {} function(s) of {name} have no DWARF description \
             of their own ({first}…): recorded without values",
            auto.undescribed.len()
        );
    }
    if let Some(first) = auto.nocall.first() {
        eprintln!(
            "fntrace record: -a: {} function(s) of {name} have no callable ABI in DWARF \
             (DW_CC_nocall: {first}…): recorded without values",
            auto.nocall.len()
        );
    }
    for (text, kind) in [
        (&auto.arguments, argspec::SpecKind::Arguments),
        (&auto.retval, argspec::SpecKind::Retval),
    ] {
        // What the runtime will parse: a spec it refused would leave the
        // program untraced.
        argspec::parse(text, kind).map_err(|e| format!("-a: {e}"))?;
        if text.len() > ENV_MAX {
            return Err(format!(
                "-a: the specs of {} functions take {} bytes, more than an environment \
                 variable holds ({ENV_MAX}): name the functions with -A and -R instead",
                auto.described,
                text.len()
            ));
        }
    }
    let some = |text: String| (!text.is_empty()).then_some(text);
    Ok(ForRecord {
        arguments: some(auto.arguments),
        retval: some(auto.retval),
        enums: auto.enums,
        described,
    })
}

/// Completes the recording `dir` of the executable `program` for
/// uftrace's `replay`: its data objects in its `.sym` file (to name what
/// a `/p` value points to) and its `.dbg` file with `enums`.
pub fn complete(dir: &Path, program: &Path, enums: &[String]) -> Result<(), String> {
    let path = std::fs::canonicalize(program)
        .map_err(|e| format!("cannot find {}: {e}", program.display()))?;
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let elf = object::File::parse(&*bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    // The `.sym` file's addresses are relative to the module's first
    // mapping: its lowest segment's page.
    let base = elf
        .segments()
        .map(|segment| segment.address())
        .min()
        .unwrap_or(0)
        & !0xfff;
    let mut data = Vec::new();
    let mut last = None;
    for symbol in elf.symbols() {
        if symbol.kind() != SymbolKind::Data || !symbol.is_definition() || symbol.size() == 0 {
            continue;
        }
        // An alias of the previous one (uftrace keeps the first).
        if last.replace(symbol.address()) == Some(symbol.address()) {
            continue;
        }
        let Ok(name) = symbol.name() else { continue };
        data.push(fntrace_tools::export::DataSymbol {
            offset: symbol.address().wrapping_sub(base),
            size: symbol.size(),
            local: symbol.is_local(),
            // As the `.sym` file names functions: a Rust name demangled.
            name: fntrace_tools::uftrace_symbol_name(name),
        });
    }
    fntrace_tools::export::add_debug_info(dir, &path.to_string_lossy(), &data, enums)
        .map_err(|e| e.to_string())
}

/// Reads `program`'s DWARF and builds its specs. A file without DWARF
/// gives empty specs (every function undescribed).
pub fn specs_of(program: &Path) -> Result<AutoSpecs, String> {
    let bytes = std::fs::read(program).map_err(|e| format!("{}: {e}", program.display()))?;
    let elf = object::File::parse(&*bytes).map_err(|e| format!("{}: {e}", program.display()))?;
    let sections = gimli::DwarfSections::load(|id| -> Result<Cow<[u8]>, String> {
        Ok(match elf.section_by_name(id.name()) {
            Some(section) => section
                .uncompressed_data()
                .map_err(|e| format!("{}: {}: {e}", program.display(), id.name()))?,
            None => Cow::Borrowed(&[]),
        })
    })?;
    let dwarf = sections.borrow(|section| EndianSlice::new(section, LittleEndian));
    // The functions' own names, by address: a DWARF description whose
    // address holds no symbol of its name is a compiler's copy
    // (`f.isra.0`, `f.constprop.0`, `f.part.0`) whose parameters may not
    // be the declared ones; uftrace shows none for them either.
    let mut symbols: std::collections::HashMap<u64, Vec<String>> = Default::default();
    for symbol in elf.symbols() {
        if symbol.kind() == SymbolKind::Text && symbol.is_definition() {
            // A function's cold part (g++ -O2's `f.cold`) is entered by
            // jumps from it, never called.
            if let Ok(name) = symbol
                .name()
                .map_err(drop)
                .and_then(|n| match n.ends_with(".cold") {
                    true => Err(()),
                    false => Ok(n),
                })
            {
                symbols
                    .entry(symbol.address())
                    .or_default()
                    .push(fntrace_tools::demangle(name));
            }
        }
    }
    let mut specs = AutoSpecs::default();
    let mut names = std::collections::HashSet::new();
    // The specs of each name's first description, and the names described
    // again with other types.
    let mut first_specs = std::collections::HashMap::new();
    let mut ambiguous = std::collections::HashSet::new();
    // Where each name's descriptions start: a name some of whose
    // functions DWARF does not describe (a C++ overload compiled without
    // `-g`, or only declared) is ambiguous too.
    let mut described_at: std::collections::HashMap<String, std::collections::HashSet<u64>> =
        Default::default();
    let mut units = dwarf.units();
    while let Some(header) = units.next().map_err(|e| e.to_string())? {
        let unit = dwarf.unit(header).map_err(|e| e.to_string())?;
        let mut entries = unit.entries();
        while let Some((_, entry)) = entries.next_dfs().map_err(|e| e.to_string())? {
            if entry.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            // Where it starts: its low address, or, for a function split
            // in pieces (g++ -O2's `.cold` part), the start of one of its
            // ranges (the one its symbol names, below).
            let mut starts = Vec::new();
            match entry.attr_value(gimli::DW_AT_low_pc).ok().flatten() {
                Some(low_pc) => starts.extend(dwarf.attr_address(&unit, low_pc).ok().flatten()),
                None if entry
                    .attr_value(gimli::DW_AT_ranges)
                    .ok()
                    .flatten()
                    .is_some() =>
                {
                    if let Ok(mut ranges) = dwarf.die_ranges(&unit, entry) {
                        while let Ok(Some(range)) = ranges.next() {
                            starts.push(range.begin);
                        }
                    }
                }
                None => {}
            }
            if starts.is_empty() {
                continue;
            }
            // An out-of-line copy names its source in its abstract origin.
            let origin = match entry.attr_value(gimli::DW_AT_abstract_origin) {
                Ok(Some(AttributeValue::UnitRef(offset))) => offset,
                _ => entry.offset(),
            };
            let Some(name) = name_of(&dwarf, &unit, origin) else {
                continue;
            };
            let named_here =
                |address: &&u64| symbols.get(address).is_some_and(|at| at.contains(&name));
            let Some(&address) = starts.iter().find(named_here) else {
                continue;
            };
            described_at
                .entry(name.clone())
                .or_default()
                .insert(address);
            if !names.insert(name.clone()) {
                // Two functions of one name (static C functions, C++
                // overloads, which share their short name): typed alike,
                // one spec for both; else none, as neither's values
                // would be the other's.
                let mut again = AutoSpecs::default();
                function_specs(&dwarf, &unit, origin, &name, &mut again)?;
                if first_specs.get(&name) != Some(&(again.arguments, again.retval)) {
                    ambiguous.insert(name);
                }
                continue;
            }
            let nocall = |offset| {
                unit.entry(offset).is_ok_and(|e| {
                    matches!(
                        e.attr_value(gimli::DW_AT_calling_convention),
                        Ok(Some(AttributeValue::CallingConvention(gimli::DW_CC_nocall)))
                    )
                })
            };
            if nocall(entry.offset()) || nocall(origin) {
                specs.nocall.push(name);
                continue;
            }
            specs.described += 1;
            let mut own = AutoSpecs::default();
            function_specs(&dwarf, &unit, origin, &name, &mut own)?;
            join(&mut specs.arguments, own.arguments.clone());
            join(&mut specs.retval, own.retval.clone());
            for definition in own.enums {
                if !specs.enums.contains(&definition) {
                    specs.enums.push(definition);
                }
            }
            first_specs.insert(name, (own.arguments, own.retval));
        }
    }
    for (address, at) in &symbols {
        for name in at {
            if described_at
                .get(name)
                .is_some_and(|seen| !seen.contains(address))
            {
                ambiguous.insert(name.clone());
            }
        }
    }
    // A library function of the same short name (libstdc++'s copy
    // constructor beside the program's own `basic_string(const char *)`):
    // its calls would take the spec too.
    for symbol in elf.symbols().chain(elf.dynamic_symbols()) {
        if symbol.is_undefined() {
            if let Ok(raw) = symbol.name() {
                let name = fntrace_tools::demangle(raw.split('@').next().unwrap_or(raw));
                if described_at.contains_key(&name) {
                    ambiguous.insert(name);
                }
            }
        }
    }
    for text in [&mut specs.arguments, &mut specs.retval] {
        *text = text
            .split(';')
            .filter(|spec| {
                spec.split_once('@')
                    .is_some_and(|(glob, _)| !ambiguous.contains(glob))
            })
            .collect::<Vec<_>>()
            .join(";");
    }
    // The library functions the program declares (`char *getenv(const
    // char *)` from stdlib.h): typed by their prototypes, where uftrace
    // types them by its own table of libc's.
    let mut units = dwarf.units();
    while let Some(header) = units.next().map_err(|e| e.to_string())? {
        let unit = dwarf.unit(header).map_err(|e| e.to_string())?;
        let mut entries = unit.entries();
        while let Some((_, entry)) = entries.next_dfs().map_err(|e| e.to_string())? {
            let flag =
                |attr| matches!(entry.attr_value(attr), Ok(Some(AttributeValue::Flag(true))));
            if entry.tag() != gimli::DW_TAG_subprogram
                || !flag(gimli::DW_AT_declaration)
                || !flag(gimli::DW_AT_external)
                || !flag(gimli::DW_AT_prototyped)
            {
                continue;
            }
            let Some(name) = name_of(&dwarf, &unit, entry.offset()) else {
                continue;
            };
            if names.insert(name.clone()) {
                function_specs(&dwarf, &unit, entry.offset(), &name, &mut specs)?;
            }
        }
    }
    specs.undescribed = elf
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.size() > 0)
        .filter_map(|s| s.name().ok().map(fntrace_tools::demangle))
        .filter(|n| !names.contains(n))
        .collect();
    specs.undescribed.sort();
    specs.undescribed.dedup();
    Ok(specs)
}

/// The name fntrace matches globs against: the demangled linkage name if
/// there is one (C++, Rust), else the plain name (C). `None` for a name a
/// glob could not select alone.
fn name_of(dwarf: &gimli::Dwarf<Slice>, unit: &Unit, mut at: UnitOffset) -> Option<String> {
    // A C++ member function defined out of its class names itself in its
    // declaration (`DW_AT_specification`).
    let mut entry = unit.entry(at).ok()?;
    for _ in 0..4 {
        let named = [gimli::DW_AT_linkage_name, gimli::DW_AT_name]
            .iter()
            .any(|&attr| matches!(entry.attr_value(attr), Ok(Some(_))));
        match entry.attr_value(gimli::DW_AT_specification) {
            Ok(Some(AttributeValue::UnitRef(next))) if !named => {
                at = next;
                entry = unit.entry(at).ok()?;
            }
            _ => break,
        }
    }
    let string = |attr| {
        let value = entry.attr_value(attr).ok()??;
        let text = dwarf.attr_string(unit, value).ok()?;
        Some(text.to_string_lossy().into_owned())
    };
    let name = match string(gimli::DW_AT_linkage_name) {
        Some(linkage) => fntrace_tools::demangle(&linkage),
        None => string(gimli::DW_AT_name)?,
    };
    (!name.contains(['*', '?', '[', ']', ';', ',', '@', '!'])).then_some(name)
}

/// Appends `text` to specs joined by `;`.
fn join(out: &mut String, text: String) {
    if text.is_empty() {
        return;
    }
    if !out.is_empty() {
        out.push(';');
    }
    out.push_str(&text);
}

/// Appends the specs of the function whose DIE (or abstract origin) is at
/// `at`.
fn function_specs(
    dwarf: &gimli::Dwarf<Slice>,
    unit: &Unit,
    at: UnitOffset,
    name: &str,
    specs: &mut AutoSpecs,
) -> Result<(), String> {
    let mut tree = unit.entries_tree(Some(at)).map_err(|e| e.to_string())?;
    let root = tree.root().map_err(|e| e.to_string())?;
    let language = match unit
        .entry(UnitOffset(unit.header.header_size()))
        .ok()
        .and_then(|cu| cu.attr_value(gimli::DW_AT_language).ok().flatten())
    {
        Some(AttributeValue::Language(language)) => language,
        _ => gimli::DwLang(0),
    };
    let c_unit = matches!(
        language,
        gimli::DW_LANG_C89
            | gimli::DW_LANG_C
            | gimli::DW_LANG_C99
            | gimli::DW_LANG_C11
            | gimli::DW_LANG_C17
    );
    let cxx_unit = matches!(
        language,
        gimli::DW_LANG_C_plus_plus
            | gimli::DW_LANG_C_plus_plus_03
            | gimli::DW_LANG_C_plus_plus_11
            | gimli::DW_LANG_C_plus_plus_14
    ) || language.0 == 0x2a // DW_LANG_C_plus_plus_17 (DWARF 6)
        || language.0 == 0x2b; // DW_LANG_C_plus_plus_20
    let mut types = Types {
        dwarf,
        unit,
        c_unit,
        cxx_unit,
        enums: Vec::new(),
    };
    // A C++ member function defined out of its class: its return type is
    // in its declaration.
    let returns_ref = match root.entry().attr_value(gimli::DW_AT_type).ok().flatten() {
        None => match root.entry().attr_value(gimli::DW_AT_specification) {
            Ok(Some(AttributeValue::UnitRef(declaration))) => unit
                .entry(declaration)
                .ok()
                .and_then(|d| d.attr_value(gimli::DW_AT_type).ok().flatten()),
            _ => None,
        },
        given => given,
    };
    if language == gimli::DW_LANG_Rust {
        let mut params = Vec::new();
        let mut children = root.children();
        while let Some(child) = children.next().map_err(|e| e.to_string())? {
            let entry = child.entry();
            if entry.tag() == gimli::DW_TAG_formal_parameter {
                params.push(entry.attr_value(gimli::DW_AT_type).ok().flatten());
            }
        }
        let (mut values, mut retval) = types.rust_specs(returns_ref, &params);
        // What the runtime refuses would leave the program untraced: a
        // value it cannot parse is left out (none is expected).
        let parses = |text: &str, kind| argspec::parse(&format!("f@{text}"), kind).is_ok();
        values.retain(|v| parses(v, argspec::SpecKind::Arguments));
        retval = retval.filter(|r| parses(r, argspec::SpecKind::Retval));
        for definition in types.enums {
            if !specs.enums.contains(&definition) {
                specs.enums.push(definition);
            }
        }
        if !values.is_empty() {
            join(&mut specs.arguments, format!("{name}@{}", values.join(",")));
        }
        if let Some(retval) = retval {
            join(&mut specs.retval, format!("{name}@{retval}"));
        }
        return Ok(());
    }
    // A result returned through the address the caller passes first: the
    // arguments start at the second register.
    let hidden = types.returned_by_address(returns_ref);
    let returns = types.value_of(returns_ref);
    let mut values = Vec::new();
    let (mut ints, mut floats) = (u8::from(hidden), 0u8);
    let mut children = root.children();
    while let Some(child) = children.next().map_err(|e| e.to_string())? {
        let entry = child.entry();
        if entry.tag() != gimli::DW_TAG_formal_parameter {
            continue;
        }
        // g++'s artificial constructor and destructor parameters that a
        // complete object's constructor or destructor is not passed.
        let param_name = name_of(dwarf, unit, entry.offset()).or_else(|| {
            match entry.attr_value(gimli::DW_AT_abstract_origin) {
                Ok(Some(AttributeValue::UnitRef(origin))) => name_of(dwarf, unit, origin),
                _ => None,
            }
        });
        if matches!(param_name.as_deref(), Some("__in_chrg" | "__vtt_parm")) {
            continue;
        }
        match types.value_of(entry.attr_value(gimli::DW_AT_type).ok().flatten()) {
            Value::Int(suffix) if ints < 6 => {
                ints += 1;
                values.push(format!("arg{ints}{suffix}"));
            }
            // In the next integer (vector) registers, if they are
            // enough (else on the stack, not followed yet); the arguments
            // after it are numbered by register (`arg3` is rdx).
            Value::Struct(size, name, Some(vector)) => {
                let count = size.div_ceil(8) as u8;
                let (first, limit) = if vector { (floats, 8) } else { (ints, 6) };
                if first + count > limit {
                    break;
                }
                let used: Vec<String> = (first..first + count)
                    .map(|n| match vector {
                        true => format!("XMM{n}"),
                        false => ["RDI", "RSI", "RDX", "RCX", "R8", "R9"][usize::from(n)].into(),
                    })
                    .collect();
                let name = if name.is_empty() {
                    name
                } else {
                    format!(":{name}")
                };
                // Numbered after its first register: uftrace's `replay`
                // of fntrace's recording, which names no architecture,
                // ignores the registers and tells values apart by number.
                let slot = if vector { "fparg" } else { "arg" };
                values.push(format!(
                    "{slot}{}/t{size}{name}%{}",
                    first + 1,
                    used.join("+")
                ));
                if vector {
                    floats += count;
                } else {
                    ints += count;
                }
            }
            Value::Float(bits) if floats < 8 => {
                floats += 1;
                values.push(if bits == 32 {
                    format!("fparg{floats}/32")
                } else {
                    format!("fparg{floats}")
                });
            }
            Value::Float(_) => {}
            _ => break,
        }
    }
    for definition in types.enums {
        if !specs.enums.contains(&definition) {
            specs.enums.push(definition);
        }
    }
    if !values.is_empty() {
        join(&mut specs.arguments, format!("{name}@{}", values.join(",")));
    }
    match returns {
        Value::Int(suffix) => join(&mut specs.retval, format!("{name}@retval{suffix}")),
        // uftrace records rax's 8 bytes of it, whatever its registers.
        Value::Struct(size, type_name, _) => {
            let type_name = if type_name.is_empty() {
                type_name
            } else {
                format!(":{type_name}")
            };
            join(
                &mut specs.retval,
                format!("{name}@retval/t{size}{type_name}"),
            )
        }
        // `/f`, not `/f64`: uftrace 0.13 records a wrong value for
        // `retval/f64` (the first argument), the right one for `/f`.
        Value::Float(64) => join(&mut specs.retval, format!("{name}@retval/f")),
        Value::Float(32) => join(&mut specs.retval, format!("{name}@retval/f32")),
        _ => {}
    }
    Ok(())
}

mod rust;
mod types;
use types::Types;
