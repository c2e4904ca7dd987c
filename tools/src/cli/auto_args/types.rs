//! The C and C++ types of one DWARF unit as `-a` records them: how a
//! parameter or return type of a C function is recorded (integers,
//! `char`, strings, pointers, enums, structures passed by value in
//! registers as the SysV ABI passes them), C++'s `std::string`, and the
//! enums' definitions as uftrace writes them.

use addr2line::gimli;
use fntrace_tools::argspec;
use gimli::{AttributeValue, UnitOffset};

use super::{Slice, Unit, Value};

/// The types of one unit, read for specs.
pub(super) struct Types<'a, 'd> {
    pub(super) dwarf: &'a gimli::Dwarf<Slice<'d>>,
    pub(super) unit: &'a Unit<'d>,
    /// Whether the unit is C (structures are passed as the SysV ABI says).
    pub(super) c_unit: bool,
    /// Whether the unit is C++ (`std::string`, enums of any size).
    pub(super) cxx_unit: bool,
    /// The definitions of the enums met, uftrace's way.
    pub(super) enums: Vec<String>,
}

impl Types<'_, '_> {
    /// How a value of the type at `type_ref` is recorded.
    pub(super) fn value_of(&mut self, type_ref: Option<AttributeValue<Slice>>) -> Value {
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
                    // A reference to a `std::string` is its address, as
                    // one passed by value is (not a pointer: one may point
                    // to a string not built yet, as `this` in its
                    // constructor does).
                    let reference = entry.tag() != gimli::DW_TAG_pointer_type;
                    if self.cxx_unit && reference && self.is_std_string(target) {
                        return Value::Int("/S".into());
                    }
                    return Value::Int(if self.is_char(target) { "/s" } else { "/p" }.into());
                }
                gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type
                    if self.cxx_unit && self.is_std_string(Some(AttributeValue::UnitRef(at))) =>
                {
                    return Value::Int("/S".into());
                }
                // An enum of another size than `int`'s (C++'s `enum class
                // E : uint8_t`): its tag at its width.
                gimli::DW_TAG_enumeration_type if self.cxx_unit && size != 4 => {
                    return match self.enum_def(at) {
                        Some((name, definition)) if matches!(size, 1 | 2 | 8) => {
                            if !self.enums.contains(&definition) {
                                self.enums.push(definition);
                            }
                            let sign = if self.signed_enum(&entry) { 'i' } else { 'u' };
                            Value::Int(format!("/e{sign}{}:{name}", size * 8))
                        }
                        _ => Value::Int("/d32".into()),
                    };
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
    pub(super) fn enum_def(&self, at: UnitOffset) -> Option<(String, String)> {
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

    /// Whether a function returning the type at `type_ref` takes the
    /// address to return it at as its first argument (a structure over 16
    /// bytes; in C++ also a class that is not trivially copied, as
    /// `std::string`).
    pub(super) fn returned_by_address(&self, type_ref: Option<AttributeValue<Slice>>) -> bool {
        let Some(at) = self.unqualified(type_ref) else {
            return false;
        };
        let Ok(entry) = self.unit.entry(at) else {
            return false;
        };
        match entry.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
                let by_reference = matches!(
                    entry.attr_value(gimli::DW_AT_calling_convention),
                    Ok(Some(AttributeValue::CallingConvention(
                        gimli::DW_CC_pass_by_reference
                    )))
                );
                byte_size(&entry) > 16
                    || by_reference
                    || (self.cxx_unit && self.is_std_string(Some(AttributeValue::UnitRef(at))))
            }
            _ => false,
        }
    }

    /// Whether the type at `type_ref` is libstdc++'s `std::string` (a
    /// `basic_string<char…>` whose first member is `_M_dataplus`).
    fn is_std_string(&self, type_ref: Option<AttributeValue<Slice>>) -> bool {
        let Some(at) = self.unqualified(type_ref) else {
            return false;
        };
        let Ok(entry) = self.unit.entry(at) else {
            return false;
        };
        match entry.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => {
                if !self.name(at).is_some_and(|n| {
                    n.starts_with("basic_string<char,") || n.starts_with("basic_string<char>")
                }) {
                    return false;
                }
                let Ok(mut tree) = self.unit.entries_tree(Some(at)) else {
                    return false;
                };
                let Ok(root) = tree.root() else {
                    return false;
                };
                let mut children = root.children();
                while let Ok(Some(child)) = children.next() {
                    if child.entry().tag() == gimli::DW_TAG_member {
                        return self.name(child.entry().offset()).as_deref() == Some("_M_dataplus");
                    }
                }
                false
            }
            _ => false,
        }
    }

    /// The type `type_ref` names itself: typedefs and qualifiers (`const`,
    /// `volatile`, `restrict`, `_Atomic`) followed, at most 16 deep; `None`
    /// where a link is missing.
    fn unqualified(&self, type_ref: Option<AttributeValue<Slice>>) -> Option<UnitOffset> {
        let Some(AttributeValue::UnitRef(mut at)) = type_ref else {
            return None;
        };
        for _ in 0..16 {
            let entry = self.unit.entry(at).ok()?;
            match entry.tag() {
                gimli::DW_TAG_typedef
                | gimli::DW_TAG_const_type
                | gimli::DW_TAG_volatile_type
                | gimli::DW_TAG_restrict_type
                | gimli::DW_TAG_atomic_type => match entry.attr_value(gimli::DW_AT_type) {
                    Ok(Some(AttributeValue::UnitRef(next))) => at = next,
                    _ => return None,
                },
                _ => return Some(at),
            }
        }
        None
    }

    /// Whether an enumeration's underlying type is signed.
    pub(super) fn signed_enum(&self, entry: &gimli::DebuggingInformationEntry<Slice>) -> bool {
        let Ok(Some(AttributeValue::UnitRef(base))) = entry.attr_value(gimli::DW_AT_type) else {
            return false;
        };
        self.unit.entry(base).is_ok_and(|base| {
            matches!(
                base.attr_value(gimli::DW_AT_encoding),
                Ok(Some(AttributeValue::Encoding(
                    gimli::DW_ATE_signed | gimli::DW_ATE_signed_char
                )))
            )
        })
    }

    /// Whether the type at `type_ref` is `char` (through qualifiers).
    fn is_char(&self, type_ref: Option<AttributeValue<Slice>>) -> bool {
        let Some(at) = self.unqualified(type_ref) else {
            return false;
        };
        let Ok(entry) = self.unit.entry(at) else {
            return false;
        };
        match entry.tag() {
            gimli::DW_TAG_base_type => self.name(at).as_deref() == Some("char"),
            _ => false,
        }
    }

    /// The `DW_AT_name` of the entry at `at`.
    pub(super) fn name(&self, at: UnitOffset) -> Option<String> {
        let entry = self.unit.entry(at).ok()?;
        let value = entry.attr_value(gimli::DW_AT_name).ok()??;
        let text = self.dwarf.attr_string(self.unit, value).ok()?;
        Some(text.to_string_lossy().into_owned())
    }
}

/// An entry's `DW_AT_byte_size` (0 if none).
pub(super) fn byte_size(entry: &gimli::DebuggingInformationEntry<Slice>) -> u64 {
    match entry.attr_value(gimli::DW_AT_byte_size) {
        Ok(Some(AttributeValue::Udata(n))) => n,
        Ok(Some(AttributeValue::Data1(n))) => u64::from(n),
        Ok(Some(AttributeValue::Data2(n))) => u64::from(n),
        Ok(Some(AttributeValue::Data4(n))) => u64::from(n),
        _ => 0,
    }
}
