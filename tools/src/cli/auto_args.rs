//! `fntrace record -a` (`--auto-args`): argument and return-value specs
//! for every function the executable's DWARF describes, built from the
//! types of its parameters and its return type as uftrace 0.13's `-a`
//! builds them for C (plain `argN` for integers, `/s` for `char *`, `/c`
//! for `char`, `fparg` for floats), in the `-A`/`-R` syntax the rest of
//! `record` already takes. Where fntrace cannot show what uftrace shows
//! (enum names, pointers named after the symbol they point to, structures
//! passed by value), it records the raw value or stops, as the reference
//! page says (docs/arguments.md).

use std::borrow::Cow;
use std::path::Path;

use addr2line::gimli;
use fntrace_tools::argspec;
use gimli::{AttributeValue, EndianSlice, LittleEndian, UnitOffset};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

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
}

/// How one parameter or return type is recorded.
enum Value {
    /// An integer register value with this uftrace suffix (`""`, `/s`,
    /// `/c`, `/x`, `/d32`).
    Int(&'static str),
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
/// run), `-A`'s then `-R`'s (`None`: no spec of that kind); functions
/// without DWARF are said once on stderr.
pub fn for_record(program: &std::ffi::OsStr) -> Result<(Option<String>, Option<String>), String> {
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
    Ok((some(auto.arguments), some(auto.retval)))
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
    let returns = value_of(
        dwarf,
        unit,
        root.entry().attr_value(gimli::DW_AT_type).ok().flatten(),
    );
    let mut values = Vec::new();
    let (mut ints, mut floats) = (0u8, 0u8);
    let mut children = root.children();
    while let Some(child) = children.next().map_err(|e| e.to_string())? {
        let entry = child.entry();
        if entry.tag() != gimli::DW_TAG_formal_parameter {
            continue;
        }
        match value_of(
            dwarf,
            unit,
            entry.attr_value(gimli::DW_AT_type).ok().flatten(),
        ) {
            Value::Int(suffix) if ints < 6 => {
                ints += 1;
                values.push(format!("arg{ints}{suffix}"));
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
        // `/f`, not `/f64`: uftrace 0.13 records a wrong value for
        // `retval/f64` (the first argument), the right one for `/f`.
        Value::Float(64) => join(&mut specs.retval, format!("{name}@retval/f")),
        Value::Float(32) => join(&mut specs.retval, format!("{name}@retval/f32")),
        _ => {}
    }
    Ok(())
}

/// How a value of the type at `type_ref` is recorded.
fn value_of(
    dwarf: &gimli::Dwarf<Slice>,
    unit: &Unit,
    type_ref: Option<AttributeValue<Slice>>,
) -> Value {
    let Some(AttributeValue::UnitRef(mut at)) = type_ref else {
        return Value::None;
    };
    // Through typedefs and qualifiers, to the type itself.
    for _ in 0..16 {
        let Ok(entry) = unit.entry(at) else {
            return Value::Stop;
        };
        let size = match entry.attr_value(gimli::DW_AT_byte_size) {
            Ok(Some(AttributeValue::Udata(n))) => n,
            Ok(Some(AttributeValue::Data1(n))) => u64::from(n),
            Ok(Some(AttributeValue::Data2(n))) => u64::from(n),
            _ => 0,
        };
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
                return if is_char(dwarf, unit, target) {
                    Value::Int("/s")
                } else {
                    // uftrace's `/p` names the symbol pointed to, from the
                    // data symbols of its `.sym` files, which fntrace's do
                    // not hold: the address in hexadecimal.
                    Value::Int("/x")
                };
            }
            // uftrace shows an enum's value by name (`/e:NAME`, with the
            // definition in a `.dbg` file fntrace does not write): the
            // number.
            gimli::DW_TAG_enumeration_type => return Value::Int("/d32"),
            gimli::DW_TAG_base_type => {
                let encoding = match entry.attr_value(gimli::DW_AT_encoding) {
                    Ok(Some(AttributeValue::Encoding(e))) => e,
                    _ => return Value::Stop,
                };
                return match encoding {
                    gimli::DW_ATE_float if size == 4 || size == 8 => Value::Float(size as u8 * 8),
                    gimli::DW_ATE_float => Value::Stop,
                    gimli::DW_ATE_signed_char | gimli::DW_ATE_unsigned_char
                        if base_name(dwarf, unit, at).as_deref() == Some("char") =>
                    {
                        Value::Int("/c")
                    }
                    _ if size <= 8 => Value::Int(""),
                    _ => Value::Stop,
                };
            }
            _ => return Value::Stop,
        }
    }
    Value::Stop
}

/// Whether the type at `type_ref` is `char` (through qualifiers).
fn is_char(
    dwarf: &gimli::Dwarf<Slice>,
    unit: &Unit,
    type_ref: Option<AttributeValue<Slice>>,
) -> bool {
    let Some(AttributeValue::UnitRef(mut at)) = type_ref else {
        return false;
    };
    for _ in 0..16 {
        let Ok(entry) = unit.entry(at) else {
            return false;
        };
        match entry.tag() {
            gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type => {
                match entry.attr_value(gimli::DW_AT_type) {
                    Ok(Some(AttributeValue::UnitRef(next))) => at = next,
                    _ => return false,
                }
            }
            gimli::DW_TAG_base_type => {
                return base_name(dwarf, unit, at).as_deref() == Some("char")
            }
            _ => return false,
        }
    }
    false
}

fn base_name(dwarf: &gimli::Dwarf<Slice>, unit: &Unit, at: UnitOffset) -> Option<String> {
    let entry = unit.entry(at).ok()?;
    let value = entry.attr_value(gimli::DW_AT_name).ok()??;
    let text = dwarf.attr_string(unit, value).ok()?;
    Some(text.to_string_lossy().into_owned())
}
