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
}

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
/// run), and its enums; functions without DWARF are said once on stderr.
pub fn for_record(program: &std::ffi::OsStr) -> Result<ForRecord, String> {
    let name = program.to_string_lossy();
    let path =
        super::instrumented::resolve(program).ok_or_else(|| format!("-a: cannot find {name}"))?;
    let auto = specs_of(&path)?;
    if auto.described == 0 {
        eprintln!(
            "fntrace record: -a: {name} has no DWARF description of its functions \
             (build it with -g): recorded without values"
        );
    } else if let Some(first) = auto.undescribed.first() {
        eprintln!(
            "fntrace record: -a: {} function(s) of {name} have no DWARF description \
             of their own ({first}…): recorded without values",
            auto.undescribed.len()
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
    })
}

/// Completes the recording `dir` of `program` for uftrace's `replay`:
/// the program's data objects in its `.sym` file (to name what a `/p`
/// value points to) and its `.dbg` file with `enums`.
pub fn complete(dir: &Path, program: &std::ffi::OsStr, enums: &[String]) -> Result<(), String> {
    let name = program.to_string_lossy();
    let path = super::instrumented::resolve(program)
        .and_then(|p| std::fs::canonicalize(p).ok())
        .ok_or_else(|| format!("cannot find {name}"))?;
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
            name: name.to_string(),
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
            if let Ok(name) = symbol.name() {
                symbols
                    .entry(symbol.address())
                    .or_default()
                    .push(fntrace_tools::demangle(name));
            }
        }
    }
    let mut specs = AutoSpecs::default();
    let mut names = std::collections::HashSet::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next().map_err(|e| e.to_string())? {
        let unit = dwarf.unit(header).map_err(|e| e.to_string())?;
        let mut entries = unit.entries();
        while let Some((_, entry)) = entries.next_dfs().map_err(|e| e.to_string())? {
            if entry.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let Some(low_pc) = entry.attr_value(gimli::DW_AT_low_pc).ok().flatten() else {
                continue;
            };
            let Ok(Some(address)) = dwarf.attr_address(&unit, low_pc) else {
                continue;
            };
            // An out-of-line copy names its source in its abstract origin.
            let origin = match entry.attr_value(gimli::DW_AT_abstract_origin) {
                Ok(Some(AttributeValue::UnitRef(offset))) => offset,
                _ => entry.offset(),
            };
            let Some(name) = name_of(&dwarf, &unit, origin) else {
                continue;
            };
            if !symbols.get(&address).is_some_and(|at| at.contains(&name)) {
                continue;
            }
            if !names.insert(name.clone()) {
                // Two static functions of one name: one spec for both.
                continue;
            }
            specs.described += 1;
            function_specs(&dwarf, &unit, origin, &name, &mut specs)?;
        }
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
fn name_of(dwarf: &gimli::Dwarf<Slice>, unit: &Unit, at: UnitOffset) -> Option<String> {
    let entry = unit.entry(at).ok()?;
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
    let c_unit = matches!(
        unit.entry(UnitOffset(unit.header.header_size()))
            .ok()
            .and_then(|cu| cu.attr_value(gimli::DW_AT_language).ok().flatten()),
        Some(AttributeValue::Language(
            gimli::DW_LANG_C89
                | gimli::DW_LANG_C
                | gimli::DW_LANG_C99
                | gimli::DW_LANG_C11
                | gimli::DW_LANG_C17
        ))
    );
    let mut types = Types {
        dwarf,
        unit,
        c_unit,
        enums: Vec::new(),
    };
    let returns = types.value_of(root.entry().attr_value(gimli::DW_AT_type).ok().flatten());
    let mut values = Vec::new();
    let (mut ints, mut floats) = (0u8, 0u8);
    let mut children = root.children();
    while let Some(child) = children.next().map_err(|e| e.to_string())? {
        let entry = child.entry();
        if entry.tag() != gimli::DW_TAG_formal_parameter {
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
    let join = |out: &mut String, text: String| {
        if !out.is_empty() {
            out.push(';');
        }
        out.push_str(&text);
    };
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

/// The types of one unit, read for specs.
struct Types<'a, 'd> {
    dwarf: &'a gimli::Dwarf<Slice<'d>>,
    unit: &'a Unit<'d>,
    /// Whether the unit is C (structures are passed as the SysV ABI says).
    c_unit: bool,
    /// The definitions of the enums met, uftrace's way.
    enums: Vec<String>,
}

impl Types<'_, '_> {
    /// How a value of the type at `type_ref` is recorded.
    fn value_of(&mut self, type_ref: Option<AttributeValue<Slice>>) -> Value {
        let Some(AttributeValue::UnitRef(mut at)) = type_ref else {
            return Value::None;
        };
        // Through typedefs and qualifiers, to the type itself.
        for _ in 0..16 {
            let Ok(entry) = self.unit.entry(at) else {
                return Value::Stop;
            };
            let size = byte_size(&entry);
            match entry.tag() {
                gimli::DW_TAG_typedef
                | gimli::DW_TAG_const_type
                | gimli::DW_TAG_volatile_type
                | gimli::DW_TAG_restrict_type
                | gimli::DW_TAG_atomic_type => match entry.attr_value(gimli::DW_AT_type) {
                    Ok(Some(AttributeValue::UnitRef(next))) => at = next,
                    _ => return Value::None,
                },
                gimli::DW_TAG_pointer_type
                | gimli::DW_TAG_reference_type
                | gimli::DW_TAG_rvalue_reference_type => {
                    let target = entry.attr_value(gimli::DW_AT_type).ok().flatten();
                    return Value::Int(if self.is_char(target) { "/s" } else { "/p" }.into());
                }
                gimli::DW_TAG_enumeration_type => {
                    return match self.enum_def(at) {
                        // An `int` enum: uftrace reads the low 32 bits.
                        Some((name, definition)) if size == 4 => {
                            if !self.enums.contains(&definition) {
                                self.enums.push(definition);
                            }
                            Value::Int(format!("/e:{name}"))
                        }
                        _ => Value::Int("/d32".into()),
                    };
                }
                gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type
                    if self.c_unit && (1..=16).contains(&size) =>
                {
                    let Some(classes) = self.eightbytes(at, size) else {
                        return Value::Stop;
                    };
                    let kind = match (classes.iter().all(|&v| v), classes.iter().any(|&v| v)) {
                        (true, _) => Some(true),
                        (false, false) => Some(false),
                        _ => None,
                    };
                    return match self.name(at) {
                        Some(name) if name.len() <= argspec::TYPE_NAME_MAX => {
                            Value::Struct(size, name, kind)
                        }
                        Some(_) => Value::Stop,
                        None => Value::Struct(size, String::new(), kind),
                    };
                }
                gimli::DW_TAG_base_type => {
                    let encoding = match entry.attr_value(gimli::DW_AT_encoding) {
                        Ok(Some(AttributeValue::Encoding(e))) => e,
                        _ => return Value::Stop,
                    };
                    return match encoding {
                        gimli::DW_ATE_float if size == 4 || size == 8 => {
                            Value::Float(size as u8 * 8)
                        }
                        gimli::DW_ATE_float => Value::Stop,
                        gimli::DW_ATE_signed_char | gimli::DW_ATE_unsigned_char
                            if self.name(at).as_deref() == Some("char") =>
                        {
                            Value::Int("/c".into())
                        }
                        _ if size <= 8 => Value::Int(String::new()),
                        _ => Value::Stop,
                    };
                }
                _ => return Value::Stop,
            }
        }
        Value::Stop
    }

    /// The enum at `at`: the name its values are given by and its
    /// definition as uftrace writes it (`enum color {RED,GREEN=5,BLUE}`:
    /// a value one more than the previous one unwritten). `None` for an
    /// enum without enumerators.
    fn enum_def(&self, at: UnitOffset) -> Option<(String, String)> {
        let name = match self.name(at) {
            Some(name) if name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') => name,
            // uftrace's name for an anonymous enum: its unit's file and
            // its offset in the unit.
            _ => {
                let cu = self.unit.entry(UnitOffset(self.unit.header.header_size()));
                let file = cu.ok().and_then(|cu| {
                    let value = cu.attr_value(gimli::DW_AT_name).ok()??;
                    let text = self.dwarf.attr_string(self.unit, value).ok()?;
                    Some(text.to_string_lossy().into_owned())
                });
                let file = file.unwrap_or_else(|| "unnamed".into());
                let file = file.rsplit('/').next().unwrap_or(&file);
                format!("_{file}_{:x}", at.0).replace(['+', '-', '.', '(', ')', '<', '>', ' '], "_")
            }
        };
        if name.len() > argspec::TYPE_NAME_MAX {
            return None;
        }
        let mut tree = self.unit.entries_tree(Some(at)).ok()?;
        let root = tree.root().ok()?;
        let mut children = root.children();
        let mut values = Vec::new();
        while let Ok(Some(child)) = children.next() {
            let entry = child.entry();
            if entry.tag() != gimli::DW_TAG_enumerator {
                continue;
            }
            let value = match entry.attr_value(gimli::DW_AT_const_value).ok()?? {
                AttributeValue::Sdata(v) => v,
                AttributeValue::Udata(v) => v as i64,
                AttributeValue::Data1(v) => i64::from(v as i8),
                AttributeValue::Data2(v) => i64::from(v as i16),
                AttributeValue::Data4(v) => i64::from(v as i32),
                AttributeValue::Data8(v) => v as i64,
                _ => return None,
            };
            let text = self
                .dwarf
                .attr_string(self.unit, entry.attr_value(gimli::DW_AT_name).ok()??)
                .ok()?;
            values.push((text.to_string_lossy().into_owned(), value));
        }
        if values.is_empty() {
            return None;
        }
        // uftrace lists them by value, the smallest first.
        values.sort_by_key(|&(_, value)| value);
        let mut last = -1i64;
        let items: Vec<String> = values
            .iter()
            .map(|(name, value)| {
                let simple = *value == last + 1;
                last = *value;
                if simple {
                    name.clone()
                } else {
                    format!("{name}={value}")
                }
            })
            .collect();
        Some((name.clone(), format!("enum {name} {{{}}}", items.join(","))))
    }

    /// The SysV classes of the eightbytes of the structure or union at
    /// `at` (`size` bytes): `true` where every member there is a `float`
    /// or `double` (passed in a vector register), `false` where one is an
    /// integer or a pointer. `None` for a member not followed (an array of
    /// floating-point values, a `long double`, a type without size).
    fn eightbytes(&self, at: UnitOffset, size: u64) -> Option<Vec<bool>> {
        let mut scalars = Vec::new();
        self.flatten(at, 0, &mut scalars, 0)?;
        let classes = (0..size.div_ceil(8))
            .map(|k| {
                let (low, high) = (8 * k, 8 * k + 8);
                let mut there = scalars
                    .iter()
                    .filter(|&&(offset, len, _)| offset < high && offset + len > low)
                    .peekable();
                there.peek()?;
                Some(there.all(|&(_, _, float)| float))
            })
            .collect::<Option<Vec<bool>>>()?;
        Some(classes)
    }

    /// Appends the scalar members of the structure or union at `at`, at
    /// `base` bytes into the outermost one, to `out` (offset, size,
    /// whether floating-point).
    fn flatten(
        &self,
        at: UnitOffset,
        base: u64,
        out: &mut Vec<(u64, u64, bool)>,
        depth: u8,
    ) -> Option<()> {
        if depth > 8 {
            return None;
        }
        let mut tree = self.unit.entries_tree(Some(at)).ok()?;
        let root = tree.root().ok()?;
        let mut children = root.children();
        while let Ok(Some(child)) = children.next() {
            let entry = child.entry();
            if entry.tag() != gimli::DW_TAG_member {
                continue;
            }
            let offset = match entry.attr_value(gimli::DW_AT_data_member_location) {
                Ok(Some(AttributeValue::Udata(n))) => n,
                Ok(Some(AttributeValue::Sdata(n))) => n as u64,
                Ok(Some(AttributeValue::Data1(n))) => u64::from(n),
                Ok(Some(AttributeValue::Data2(n))) => u64::from(n),
                Ok(Some(AttributeValue::Data4(n))) => u64::from(n),
                Ok(None) => match entry.attr_value(gimli::DW_AT_data_bit_offset) {
                    Ok(Some(AttributeValue::Udata(bits))) => bits / 8,
                    _ => 0,
                },
                _ => return None,
            };
            let Ok(Some(AttributeValue::UnitRef(mut ty))) = entry.attr_value(gimli::DW_AT_type)
            else {
                return None;
            };
            loop {
                let t = self.unit.entry(ty).ok()?;
                let len = byte_size(&t);
                match t.tag() {
                    gimli::DW_TAG_typedef
                    | gimli::DW_TAG_const_type
                    | gimli::DW_TAG_volatile_type => match t.attr_value(gimli::DW_AT_type) {
                        Ok(Some(AttributeValue::UnitRef(next))) => ty = next,
                        _ => return None,
                    },
                    gimli::DW_TAG_pointer_type | gimli::DW_TAG_enumeration_type if len > 0 => {
                        out.push((base + offset, len, false));
                        break;
                    }
                    gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type => {
                        self.flatten(ty, base + offset, out, depth + 1)?;
                        break;
                    }
                    gimli::DW_TAG_base_type if len > 0 => {
                        let float = matches!(
                            t.attr_value(gimli::DW_AT_encoding),
                            Ok(Some(AttributeValue::Encoding(gimli::DW_ATE_float)))
                        );
                        if float && len > 8 {
                            return None;
                        }
                        out.push((base + offset, len, float));
                        break;
                    }
                    // An array of integers: integers wherever it lies (its
                    // size, if DWARF gives none, from the structure's).
                    gimli::DW_TAG_array_type => {
                        let Ok(Some(AttributeValue::UnitRef(element))) =
                            t.attr_value(gimli::DW_AT_type)
                        else {
                            return None;
                        };
                        let mut probe = Vec::new();
                        self.flatten_one(element, &mut probe)?;
                        if probe.iter().any(|&(_, _, float)| float) {
                            return None;
                        }
                        let len = if len > 0 { len } else { 16 };
                        out.push((base + offset, len, false));
                        break;
                    }
                    _ => return None,
                }
            }
        }
        Some(())
    }

    /// The scalars of the type at `ty` alone (an array's element).
    fn flatten_one(&self, mut ty: UnitOffset, out: &mut Vec<(u64, u64, bool)>) -> Option<()> {
        for _ in 0..16 {
            let t = self.unit.entry(ty).ok()?;
            match t.tag() {
                gimli::DW_TAG_typedef | gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type => {
                    match t.attr_value(gimli::DW_AT_type) {
                        Ok(Some(AttributeValue::UnitRef(next))) => ty = next,
                        _ => return None,
                    }
                }
                gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type => {
                    return self.flatten(ty, 0, out, 1)
                }
                gimli::DW_TAG_base_type => {
                    let float = matches!(
                        t.attr_value(gimli::DW_AT_encoding),
                        Ok(Some(AttributeValue::Encoding(gimli::DW_ATE_float)))
                    );
                    out.push((0, byte_size(&t), float));
                    return Some(());
                }
                gimli::DW_TAG_pointer_type | gimli::DW_TAG_enumeration_type => {
                    out.push((0, 8, false));
                    return Some(());
                }
                _ => return None,
            }
        }
        None
    }

    /// Whether the type at `type_ref` is `char` (through qualifiers).
    fn is_char(&self, type_ref: Option<AttributeValue<Slice>>) -> bool {
        let Some(AttributeValue::UnitRef(mut at)) = type_ref else {
            return false;
        };
        for _ in 0..16 {
            let Ok(entry) = self.unit.entry(at) else {
                return false;
            };
            match entry.tag() {
                gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type => {
                    match entry.attr_value(gimli::DW_AT_type) {
                        Ok(Some(AttributeValue::UnitRef(next))) => at = next,
                        _ => return false,
                    }
                }
                gimli::DW_TAG_base_type => return self.name(at).as_deref() == Some("char"),
                _ => return false,
            }
        }
        false
    }

    /// The `DW_AT_name` of the entry at `at`.
    fn name(&self, at: UnitOffset) -> Option<String> {
        let entry = self.unit.entry(at).ok()?;
        let value = entry.attr_value(gimli::DW_AT_name).ok()??;
        let text = self.dwarf.attr_string(self.unit, value).ok()?;
        Some(text.to_string_lossy().into_owned())
    }
}

/// An entry's `DW_AT_byte_size` (0 if none).
fn byte_size(entry: &gimli::DebuggingInformationEntry<Slice>) -> u64 {
    match entry.attr_value(gimli::DW_AT_byte_size) {
        Ok(Some(AttributeValue::Udata(n))) => n,
        Ok(Some(AttributeValue::Data1(n))) => u64::from(n),
        Ok(Some(AttributeValue::Data2(n))) => u64::from(n),
        Ok(Some(AttributeValue::Data4(n))) => u64::from(n),
        _ => 0,
    }
}
