//! Rust's types as `-a` records them: how rustc 1.95's Rust ABI passes a
//! value (a scalar in one register, a pair of scalars in two, anything
//! else of up to 8 bytes as one integer, bigger by address, a result over
//! 16 bytes through a hidden first argument), and what is shown of it:
//! integers at their width, `bool`, `char` as its character, `&str`,
//! `String` (read through its address, its fields where DWARF puts them),
//! enums by variant (a fieldless enum's discriminant, a niche's tag),
//! references and pointers, floats; a structure as `NAME{...}`.

use addr2line::gimli;
use fntrace_tools::argspec;
use gimli::{AttributeValue, UnitOffset};

use super::types::{byte_size, Types};
use super::Slice;

/// How rustc passes a value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Abi {
    /// Zero-sized: not passed at all.
    Zst,
    /// One scalar: one register (`true`: a vector one).
    Scalar(bool),
    /// Two scalars: two registers, each of its kind.
    Pair(bool, bool),
    /// An aggregate of this many bytes: up to 8 in an integer register,
    /// more by address (an argument) or as a hidden first argument (a
    /// result over 16).
    Memory(u64),
    /// An enum with data of at most 16 bytes (a pair, or memory): its
    /// registers are not followed as an argument; returned in rax (and
    /// rdx).
    Unsure,
}

/// What is shown of a value.
#[derive(Clone, Debug)]
enum Shown {
    Nothing,
    /// In its (first) integer register, with this suffix (`/i32`, `/p`,
    /// `/C`, `/eu8:Color`).
    Int(String),
    /// A floating-point value of this many bits.
    Float(u8),
    /// `&str`: its pointer and its length in two integer registers.
    Str,
    /// A `String` at the address the register holds: its pointer's and
    /// length's offsets.
    StringAt(u64, u64),
    /// An enum at the address the register holds: its tag's offset and
    /// the format of the tag.
    EnumAt(u64, String),
    /// A structure (`NAME{...}`): its size and name.
    Struct(u64, String),
}

/// A type's [`Abi`] and what is shown of it.
struct Layout {
    abi: Abi,
    shown: Shown,
}

/// The integer argument registers, as uftrace names them in a structure's spec.
const REGISTERS: [&str; 6] = ["RDI", "RSI", "RDX", "RCX", "R8", "R9"];

impl Types<'_, '_> {
    /// The `-A` values and the `-R` value of a Rust function whose return
    /// type is `returns` and whose parameters' types are `params`.
    pub(super) fn rust_specs(
        &mut self,
        returns: Option<AttributeValue<Slice>>,
        params: &[Option<AttributeValue<Slice>>],
    ) -> (Vec<String>, Option<String>) {
        let mut ints = 0u8;
        let mut floats = 0u8;
        let mut retval = None;
        if let Some(AttributeValue::UnitRef(at)) = returns {
            match self.layout(at, 0) {
                Some(Layout {
                    abi: Abi::Memory(size),
                    shown,
                }) if size > 16 => {
                    // Returned through the address the caller passes first.
                    ints = 1;
                    retval = match shown {
                        Shown::StringAt(pointer, len) => Some(format!("arg1[{pointer}]/s:[{len}]")),
                        Shown::EnumAt(offset, format) => Some(format!("arg1[{offset}]{format}")),
                        Shown::Struct(_, name) => Some(format!("retval/t16{name}")),
                        _ => None,
                    };
                }
                Some(layout) => {
                    retval = match (layout.abi, layout.shown) {
                        (_, Shown::Int(suffix)) => Some(format!("retval{suffix}")),
                        (_, Shown::Float(64)) => Some("retval/f".into()),
                        (_, Shown::Float(_)) => Some("retval/f32".into()),
                        (Abi::Pair(false, false), Shown::Str) => Some("retval/s:rdx".into()),
                        (Abi::Pair(false, false) | Abi::Memory(_), Shown::Struct(size, name)) => {
                            Some(format!("retval/t{size}{name}"))
                        }
                        _ => None,
                    }
                }
                // Where a type not followed is returned depends on its size.
                None => match self.size_of(at) {
                    Some(size) if size > 16 => ints = 1,
                    Some(_) => {}
                    None => return (Vec::new(), None),
                },
            }
        }
        let mut values = Vec::new();
        for param in params {
            let Some(AttributeValue::UnitRef(at)) = *param else {
                break;
            };
            let Some(layout) = self.layout(at, 0) else {
                break;
            };
            let (need_int, need_float) = match layout.abi {
                Abi::Zst => continue,
                Abi::Scalar(float) => (u8::from(!float), u8::from(float)),
                Abi::Pair(a, b) => (u8::from(!a) + u8::from(!b), u8::from(a) + u8::from(b)),
                Abi::Memory(_) => (1, 0),
                Abi::Unsure => break,
            };
            if ints + need_int > 6 || floats + need_float > 8 {
                break;
            }
            let n = ints + 1;
            let shown = match (layout.abi, layout.shown) {
                (Abi::Scalar(false) | Abi::Memory(_), Shown::Int(suffix)) => {
                    Some(format!("arg{n}{suffix}"))
                }
                (Abi::Scalar(true), Shown::Float(64)) => Some(format!("fparg{}", floats + 1)),
                (Abi::Scalar(true), Shown::Float(_)) => Some(format!("fparg{}/32", floats + 1)),
                // By address, or a reference to it.
                (Abi::Scalar(false) | Abi::Memory(_), Shown::StringAt(pointer, len)) => {
                    Some(format!("arg{n}[{pointer}]/s:[{len}]"))
                }
                (Abi::Scalar(false) | Abi::Memory(_), Shown::EnumAt(offset, format)) => {
                    Some(format!("arg{n}[{offset}]{format}"))
                }
                (Abi::Memory(size), Shown::Struct(_, name)) => {
                    Some(format!("arg{n}/t{}{name}", size.min(8)))
                }
                (Abi::Pair(false, false), Shown::Str) => Some(format!("arg{n}/s:arg{}", n + 1)),
                (Abi::Pair(false, false), Shown::Int(suffix)) => Some(format!("arg{n}{suffix}")),
                // Both registers' bytes are not the structure's: named
                // by its first (recorded whole: its `{...}` is all shown).
                (Abi::Pair(false, false), Shown::Struct(size, name)) if size <= 8 => {
                    Some(format!("arg{n}/t{size}{name}"))
                }
                (Abi::Pair(false, false), Shown::Struct(size, name)) => Some(format!(
                    "arg{n}/t{size}{name}%{}+{}",
                    REGISTERS[usize::from(n - 1)],
                    REGISTERS[usize::from(n)]
                )),
                // An integer and a float: named by the integer register
                // (its `{...}` is all shown).
                (Abi::Pair(a, b), Shown::Struct(_, name)) if a != b => {
                    Some(format!("arg{n}/t8{name}"))
                }
                (Abi::Pair(true, true), Shown::Struct(size, name)) if size <= 8 => {
                    Some(format!("fparg{}/t{size}{name}", floats + 1))
                }
                (Abi::Pair(true, true), Shown::Struct(size, name)) => Some(format!(
                    "fparg{}/t{size}{name}%XMM{floats}+XMM{}",
                    floats + 1,
                    floats + 1
                )),
                _ => None,
            };
            values.extend(shown);
            ints += need_int;
            floats += need_float;
        }
        (values, retval)
    }

    /// The layout of the type at `at`; `None` for one not followed (a
    /// 128-bit integer, an array, a SIMD vector, a trait object by value).
    fn layout(&mut self, mut at: UnitOffset, depth: u8) -> Option<Layout> {
        if depth > 12 {
            return None;
        }
        for _ in 0..16 {
            let entry = self.unit.entry(at).ok()?;
            let size = byte_size(&entry);
            let layout = |abi, shown| Some(Layout { abi, shown });
            match entry.tag() {
                gimli::DW_TAG_typedef | gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type => {
                    match entry.attr_value(gimli::DW_AT_type) {
                        Ok(Some(AttributeValue::UnitRef(next))) => at = next,
                        _ => return None,
                    }
                }
                gimli::DW_TAG_base_type => {
                    let encoding = match entry.attr_value(gimli::DW_AT_encoding) {
                        Ok(Some(AttributeValue::Encoding(e))) => e,
                        _ => return None,
                    };
                    let bits = size * 8;
                    return match (encoding, size) {
                        (_, 0) => layout(Abi::Zst, Shown::Nothing),
                        (gimli::DW_ATE_float, 4 | 8) => {
                            layout(Abi::Scalar(true), Shown::Float(bits as u8))
                        }
                        (gimli::DW_ATE_boolean, 1) => layout(Abi::Scalar(false), int("/u8")),
                        (gimli::DW_ATE_UTF, 4) => layout(Abi::Scalar(false), int("/C")),
                        (gimli::DW_ATE_signed | gimli::DW_ATE_signed_char, 1 | 2 | 4 | 8) => {
                            layout(Abi::Scalar(false), int(&format!("/i{bits}")))
                        }
                        (gimli::DW_ATE_unsigned | gimli::DW_ATE_unsigned_char, 1 | 2 | 4 | 8) => {
                            layout(Abi::Scalar(false), int(&format!("/u{bits}")))
                        }
                        _ => None,
                    };
                }
                gimli::DW_TAG_pointer_type
                | gimli::DW_TAG_reference_type
                | gimli::DW_TAG_rvalue_reference_type => {
                    let shown = match entry.attr_value(gimli::DW_AT_type) {
                        Ok(Some(AttributeValue::UnitRef(target))) => match self.string_at(target) {
                            Some((pointer, len)) => Shown::StringAt(pointer, len),
                            None => int("/p"),
                        },
                        _ => int("/p"),
                    };
                    return layout(Abi::Scalar(false), shown);
                }
                gimli::DW_TAG_enumeration_type if size == 0 => {
                    return layout(Abi::Zst, Shown::Nothing)
                }
                gimli::DW_TAG_enumeration_type => {
                    let signed = self.signed_enum(&entry);
                    let format = self.fieldless_enum(at, size, signed)?;
                    return layout(Abi::Scalar(false), Shown::Int(format));
                }
                gimli::DW_TAG_union_type => {
                    return layout(Abi::Memory(size), Shown::Struct(size, self.short_name(at)))
                }
                gimli::DW_TAG_structure_type => return self.structure(at, size, depth),
                _ => return None,
            }
        }
        None
    }

    /// The layout of the structure at `at` (`size` bytes): a Rust enum
    /// with data, `String`, a fat pointer, or a structure.
    fn structure(&mut self, at: UnitOffset, size: u64, depth: u8) -> Option<Layout> {
        if size == 0 {
            return Some(Layout {
                abi: Abi::Zst,
                shown: Shown::Nothing,
            });
        }
        let name = self.name(at).unwrap_or_default();
        let members = self.members(at)?;
        if members.iter().any(|m| m.variant_part) {
            return self.enum_with_data(at, size, &name);
        }
        if let Some((pointer, len)) = self.string_at(at) {
            return Some(Layout {
                abi: Abi::Memory(size),
                shown: Shown::StringAt(pointer, len),
            });
        }
        // `&str`, `&[T]`, `&dyn Trait`: a pointer and a length or vtable.
        let fat = ["&", "*const ", "*mut "]
            .iter()
            .any(|p| name.starts_with(p))
            && members.iter().any(|m| m.name == "data_ptr");
        if fat {
            let shown = match name.trim_start_matches(['&', '*']) {
                "str" | "mut str" | "const str" => Shown::Str,
                _ => int("/p"),
            };
            return Some(Layout {
                abi: Abi::Pair(false, false),
                shown,
            });
        }
        let mut fields = Vec::new();
        for member in &members {
            let layout = self.layout(member.type_at?, depth + 1)?;
            if layout.abi != Abi::Zst {
                fields.push((member.offset, layout));
            }
        }
        let short = self.short_name(at);
        match fields.as_mut_slice() {
            // A newtype is passed, and shown, as what it wraps.
            [(0, inner)] => Some(Layout {
                abi: inner.abi,
                shown: std::mem::replace(&mut inner.shown, Shown::Nothing),
            }),
            [(_, a), (_, b)] => match (a.abi, b.abi) {
                (Abi::Scalar(x), Abi::Scalar(y)) => {
                    fields.sort_by_key(|(offset, _)| *offset);
                    let (first, second) = match (fields[0].1.abi, fields[1].1.abi) {
                        (Abi::Scalar(p), Abi::Scalar(q)) => (p, q),
                        _ => (x, y),
                    };
                    Some(Layout {
                        abi: Abi::Pair(first, second),
                        shown: Shown::Struct(size, short),
                    })
                }
                _ => Some(Layout {
                    abi: Abi::Memory(size),
                    shown: Shown::Struct(size, short),
                }),
            },
            _ => Some(Layout {
                abi: Abi::Memory(size),
                shown: Shown::Struct(size, short),
            }),
        }
    }

    /// A Rust enum with data (a variant part): its tag's format, read in
    /// its register when the tag is the whole value, through its address
    /// when it is passed by address; with a niche if one variant has no
    /// tag value of its own.
    fn enum_with_data(&mut self, at: UnitOffset, size: u64, name: &str) -> Option<Layout> {
        let mut tree = self.unit.entries_tree(Some(at)).ok()?;
        let root = tree.root().ok()?;
        let mut children = root.children();
        let mut part = None;
        while let Ok(Some(child)) = children.next() {
            if child.entry().tag() == gimli::DW_TAG_variant_part {
                part = Some(child.entry().offset());
                break;
            }
        }
        let part = part?;
        let entry = self.unit.entry(part).ok()?;
        let Ok(Some(AttributeValue::UnitRef(discr))) = entry.attr_value(gimli::DW_AT_discr) else {
            return None;
        };
        let discr_entry = self.unit.entry(discr).ok()?;
        let offset = member_offset(&discr_entry)?;
        let Ok(Some(AttributeValue::UnitRef(tag_type))) = discr_entry.attr_value(gimli::DW_AT_type)
        else {
            return None;
        };
        let tag_size = self.size_of(tag_type)?;
        if !matches!(tag_size, 1 | 2 | 4 | 8) {
            return None;
        }
        let mask = if tag_size == 8 {
            u64::MAX
        } else {
            (1u64 << (tag_size * 8)) - 1
        };
        // The variants: their names and tag values (none: the niche's
        // variant, which holds the data).
        let mut variants: Vec<(String, Option<u64>)> = Vec::new();
        let mut tree = self.unit.entries_tree(Some(part)).ok()?;
        let root = tree.root().ok()?;
        let mut children = root.children();
        while let Ok(Some(child)) = children.next() {
            let variant = child.entry();
            if variant.tag() != gimli::DW_TAG_variant {
                continue;
            }
            let value = match variant.attr_value(gimli::DW_AT_discr_value) {
                Ok(Some(value)) => Some(constant(&value)? & mask),
                _ => None,
            };
            let mut inner = child.children();
            let mut variant_name = None;
            while let Ok(Some(member)) = inner.next() {
                if member.entry().tag() == gimli::DW_TAG_member {
                    variant_name = self.name(member.entry().offset());
                    break;
                }
            }
            variants.push((variant_name?, value));
        }
        let defaults = variants.iter().filter(|(_, v)| v.is_none()).count();
        let (format_tail, items) = match defaults {
            0 => {
                let items: Vec<(String, i64)> = variants
                    .iter()
                    .map(|(n, v)| (n.clone(), v.unwrap_or(0) as i64))
                    .collect();
                (String::new(), items)
            }
            1 => {
                let tagged: Vec<u64> = variants.iter().filter_map(|(_, v)| *v).collect();
                let count = tagged.len() as u64;
                // The first of the niche's values: the one all others follow.
                let start = *tagged
                    .iter()
                    .find(|&&s| tagged.iter().all(|&v| v.wrapping_sub(s) & mask < count))?;
                let mut items: Vec<(String, i64)> = variants
                    .iter()
                    .map(|(n, v)| match v {
                        Some(v) => (n.clone(), (v.wrapping_sub(start) & mask) as i64),
                        None => (n.clone(), count as i64),
                    })
                    .collect();
                items.sort_by_key(|&(_, v)| v);
                (format!("#{start}+{count}"), items)
            }
            _ => return None,
        };
        let enum_name = self.add_enum(name, items)?;
        let format = format!("/eu{}:{enum_name}{format_tail}", tag_size * 8);
        if offset == 0 && tag_size == size {
            Some(Layout {
                abi: Abi::Scalar(false),
                shown: Shown::Int(format),
            })
        } else if size > 16 {
            Some(Layout {
                abi: Abi::Memory(size),
                shown: Shown::EnumAt(offset, format),
            })
        } else if offset == 0 {
            Some(Layout {
                abi: Abi::Unsure,
                shown: Shown::Int(format),
            })
        } else {
            Some(Layout {
                abi: Abi::Unsure,
                shown: Shown::Nothing,
            })
        }
    }

    /// A fieldless enum's format (`/eu8:Color`), its definition kept.
    fn fieldless_enum(&mut self, at: UnitOffset, size: u64, signed: bool) -> Option<String> {
        if !matches!(size, 1 | 2 | 4 | 8) {
            return None;
        }
        let mut items = Vec::new();
        let mut tree = self.unit.entries_tree(Some(at)).ok()?;
        let root = tree.root().ok()?;
        let mut children = root.children();
        while let Ok(Some(child)) = children.next() {
            let entry = child.entry();
            if entry.tag() != gimli::DW_TAG_enumerator {
                continue;
            }
            let value = constant(&entry.attr_value(gimli::DW_AT_const_value).ok()??)?;
            let value = if signed {
                let shift = 64 - size * 8;
                ((value << shift) as i64) >> shift
            } else {
                value as i64
            };
            items.push((self.name(entry.offset())?, value));
        }
        let name = self.add_enum(&self.name(at).unwrap_or_default(), items)?;
        Some(format!(
            "/e{}{}:{name}",
            if signed { 'i' } else { 'u' },
            size * 8
        ))
    }

    /// Keeps the definition of an enum of these enumerators under a name
    /// uftrace takes, made of `name` (`Option<&u64>`: `Option_u64`), one
    /// of its own if another enum has it: that name.
    fn add_enum(&mut self, name: &str, mut items: Vec<(String, i64)>) -> Option<String> {
        if items.is_empty() {
            return None;
        }
        items.sort_by_key(|&(_, value)| value);
        let mut last = -1i64;
        let body: Vec<String> = items
            .iter()
            .map(|(item, value)| {
                let simple = *value == last + 1;
                last = *value;
                if simple {
                    item.clone()
                } else {
                    format!("{item}={value}")
                }
            })
            .collect();
        let base = identifier(name, argspec::TYPE_NAME_MAX - 4);
        for n in 1..100 {
            let candidate = if n == 1 {
                base.clone()
            } else {
                format!("{base}_{n}")
            };
            let definition = format!("enum {candidate} {{{}}}", body.join(","));
            let prefix = format!("enum {candidate} {{");
            match self.enums.iter().find(|d| d.starts_with(&prefix)) {
                Some(same) if *same == definition => return Some(candidate),
                Some(_) => continue,
                None => {
                    self.enums.push(definition);
                    return Some(candidate);
                }
            }
        }
        None
    }

    /// The offsets of a `String`'s data pointer and length, if the type at
    /// `at` is `alloc::string::String` (a `Vec<u8>` named `vec`, whose
    /// `len` and only pointer are found wherever DWARF puts them).
    fn string_at(&self, at: UnitOffset) -> Option<(u64, u64)> {
        let entry = self.unit.entry(at).ok()?;
        if entry.tag() != gimli::DW_TAG_structure_type || self.name(at)? != "String" {
            return None;
        }
        let members = self.members(at)?;
        let vec = members.iter().find(|m| m.name == "vec")?;
        let vec_members = self.members(vec.type_at?)?;
        let len = vec_members.iter().find(|m| m.name == "len")?;
        let mut pointers = Vec::new();
        self.pointers_in(vec.type_at?, vec.offset, &mut pointers, 0);
        match pointers.as_slice() {
            [pointer] => Some((*pointer, vec.offset + len.offset)),
            _ => None,
        }
    }

    /// Appends the offsets (from `base`) of the pointers inside the type
    /// at `at`.
    fn pointers_in(&self, at: UnitOffset, base: u64, out: &mut Vec<u64>, depth: u8) {
        let Ok(entry) = self.unit.entry(at) else {
            return;
        };
        match entry.tag() {
            gimli::DW_TAG_pointer_type => out.push(base),
            gimli::DW_TAG_structure_type if depth < 8 => {
                for member in self.members(at).unwrap_or_default() {
                    if let Some(ty) = member.type_at {
                        self.pointers_in(ty, base + member.offset, out, depth + 1);
                    }
                }
            }
            _ => {}
        }
    }

    /// The members of the structure at `at` (a variant part noted).
    fn members(&self, at: UnitOffset) -> Option<Vec<Member>> {
        let mut tree = self.unit.entries_tree(Some(at)).ok()?;
        let root = tree.root().ok()?;
        let mut children = root.children();
        let mut out = Vec::new();
        while let Ok(Some(child)) = children.next() {
            let entry = child.entry();
            match entry.tag() {
                gimli::DW_TAG_variant_part => out.push(Member {
                    name: String::new(),
                    offset: 0,
                    type_at: None,
                    variant_part: true,
                }),
                gimli::DW_TAG_member => out.push(Member {
                    name: self.name(entry.offset()).unwrap_or_default(),
                    offset: member_offset(entry)?,
                    type_at: match entry.attr_value(gimli::DW_AT_type) {
                        Ok(Some(AttributeValue::UnitRef(ty))) => Some(ty),
                        _ => None,
                    },
                    variant_part: false,
                }),
                _ => {}
            }
        }
        Some(out)
    }

    /// The size of the type at `at`, through typedefs and qualifiers.
    fn size_of(&self, mut at: UnitOffset) -> Option<u64> {
        for _ in 0..16 {
            let entry = self.unit.entry(at).ok()?;
            if let Ok(Some(_)) = entry.attr_value(gimli::DW_AT_byte_size) {
                return Some(byte_size(&entry));
            }
            match entry.tag() {
                gimli::DW_TAG_pointer_type
                | gimli::DW_TAG_reference_type
                | gimli::DW_TAG_rvalue_reference_type => return Some(8),
                _ => match entry.attr_value(gimli::DW_AT_type) {
                    Ok(Some(AttributeValue::UnitRef(next))) => at = next,
                    _ => return None,
                },
            }
        }
        None
    }

    /// `:NAME` for a structure's spec (its name to the first character
    /// that is not part of an identifier: `Wrapper<u8>` is `Wrapper`), or
    /// nothing.
    fn short_name(&self, at: UnitOffset) -> String {
        let name = self.name(at).unwrap_or_default();
        let end = name
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(name.len())
            .min(argspec::TYPE_NAME_MAX);
        match &name[..end] {
            "" => String::new(),
            short => format!(":{short}"),
        }
    }
}

/// A structure's member.
struct Member {
    name: String,
    offset: u64,
    type_at: Option<UnitOffset>,
    variant_part: bool,
}

/// `Shown::Int` of `suffix`.
fn int(suffix: &str) -> Shown {
    Shown::Int(suffix.to_string())
}

/// A member's `DW_AT_data_member_location` (0 if none).
fn member_offset(entry: &gimli::DebuggingInformationEntry<Slice>) -> Option<u64> {
    match entry.attr_value(gimli::DW_AT_data_member_location) {
        Ok(None) => Some(0),
        Ok(Some(value)) => constant(&value),
        Err(_) => None,
    }
}

/// A constant attribute's value, as unsigned bits.
fn constant(value: &AttributeValue<Slice>) -> Option<u64> {
    Some(match *value {
        AttributeValue::Udata(v) => v,
        AttributeValue::Sdata(v) => v as u64,
        AttributeValue::Data1(v) => u64::from(v),
        AttributeValue::Data2(v) => u64::from(v),
        AttributeValue::Data4(v) => u64::from(v),
        AttributeValue::Data8(v) => v,
        _ => return None,
    })
}

/// `name` made an identifier uftrace takes as an enum's name (letters,
/// digits and `_`, not starting with a digit), of at most `max` bytes.
fn identifier(name: &str, max: usize) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    let mut out = out.trim_matches('_').to_string();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert(0, '_');
    }
    out.truncate(max);
    out
}

#[cfg(test)]
mod tests {
    use super::identifier;

    #[test]
    fn enum_names_become_identifiers_uftrace_takes() {
        assert_eq!(identifier("Option<&u64>", 43), "Option_u64");
        assert_eq!(
            identifier("Option<core::num::nonzero::NonZero<u32>>", 43),
            "Option_core_num_nonzero_NonZero_u32"
        );
        assert_eq!(identifier("Color", 43), "Color");
        assert_eq!(identifier("(u8, u8)", 43), "u8_u8");
        assert_eq!(identifier("[u8; 4]", 43), "u8_4");
        assert_eq!(identifier("<>", 43), "_");
        assert_eq!(identifier("Result<u8, E>", 6), "Result");
    }
}
