//! The named formats of a spec, as uftrace 0.13 writes them: an enum's
//! value (`/e:NAME`), a structure passed by value (`/tSIZE:NAME%REGS`),
//! the type names they carry, and the enum definitions (`enum color
//! {RED,GREEN=5,BLUE}`, the `E:` lines of a `.dbg` file) by which a reader
//! names an enum's values.

use super::{ArgFormat, ArgSlot, ArgSpec, INT_REGISTERS};

/// The longest type name a spec carries, in bytes: it is kept inline, so
/// that an [`ArgSpec`] stays `Copy` (the runtime copies specs and must
/// not allocate where it records).
pub const TYPE_NAME_MAX: usize = 47;

/// A C type's name (an enum's, a structure's), or none.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TypeName {
    len: u8,
    bytes: [u8; TYPE_NAME_MAX],
}

impl TypeName {
    /// `name`, if it fits ([`TYPE_NAME_MAX`]).
    pub fn new(name: &str) -> Option<TypeName> {
        let mut bytes = [0; TYPE_NAME_MAX];
        bytes
            .get_mut(..name.len())?
            .copy_from_slice(name.as_bytes());
        Some(TypeName {
            len: name.len() as u8,
            bytes,
        })
    }

    /// The name (empty: none).
    pub fn as_str(&self) -> &str {
        // Built from a `&str` whole: always UTF-8.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl std::fmt::Debug for TypeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// What a reader knows beside the data to show `/p` and `/e` values as
/// uftrace's `replay` does.
pub trait Names {
    /// The symbol (function or data object) that holds `addr`, if any.
    fn symbol_at(&self, addr: u64) -> Option<String>;
    /// The definition of the enum `name`, if any.
    fn enum_def(&self, name: &str) -> Option<&EnumDef>;
}

/// No names: addresses in hexadecimal, enums' values as numbers.
pub(super) struct NoNames;

impl Names for NoNames {
    fn symbol_at(&self, _: u64) -> Option<String> {
        None
    }
    fn enum_def(&self, _: &str) -> Option<&EnumDef> {
        None
    }
}

/// An enum's definition: its name and enumerators.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnumDef {
    /// The enum's name (`color`).
    pub name: String,
    /// Its enumerators, largest value first (as uftrace keeps them).
    pub values: Vec<(String, i64)>,
}

impl EnumDef {
    /// The text uftrace shows for `value`: its enumerator, else the
    /// enumerators OR-ed (`A|B`, a rest as `+0x…`), else the number.
    pub fn show(&self, value: i32) -> String {
        let value = i64::from(value);
        if let Some((name, _)) = self.values.iter().find(|(_, v)| *v == value) {
            return name.clone();
        }
        let mut rest = value;
        let mut names: Vec<&str> = Vec::new();
        for (name, v) in &self.values {
            if *v <= rest {
                rest -= v;
                names.push(name);
            }
            if rest == 0 {
                break;
            }
        }
        let joined = names.join("|");
        match (names.is_empty(), rest) {
            (false, 0) => joined,
            (false, rest) => format!("{joined}+{:#x}", rest as i32),
            (true, _) if value.abs() > 100_000 => format!("{:#x}", value as i32),
            (true, _) => value.to_string(),
        }
    }
}

/// Parses uftrace's enum definitions (`enum color {RED,GREEN=5,BLUE}`,
/// several separated by `;`): an enumerator without `=` is the previous
/// one plus 1.
pub fn parse_enum(text: &str) -> Result<Vec<EnumDef>, String> {
    let mut defs = Vec::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = |why: &str| format!("`{part}`: {why}");
        let rest = part.strip_prefix("enum").ok_or_else(|| bad("no `enum`"))?;
        let (name, body) = rest.split_once('{').ok_or_else(|| bad("no `{`"))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(bad("no name"));
        }
        let body = body
            .trim_end()
            .strip_suffix('}')
            .ok_or_else(|| bad("no `}`"))?;
        let mut values: Vec<(String, i64)> = Vec::new();
        let mut next = 0i64;
        for item in body.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (enumerator, value) = match item.split_once('=') {
                Some((e, v)) => (e.trim(), parse_c_integer(v.trim()).ok_or_else(|| bad(v))?),
                None => (item, next),
            };
            let at = values.partition_point(|(_, v)| *v > value);
            values.insert(at, (enumerator.to_string(), value));
            next = value + 1;
        }
        defs.push(EnumDef {
            name: name.to_string(),
            values,
        });
    }
    Ok(defs)
}

/// A C integer constant as `strtol(…, 0)` reads it: decimal, `0x` hex,
/// `0` octal, a sign.
fn parse_c_integer(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text),
    };
    let value = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i64::from_str_radix(hex, 16).ok()?
    } else if digits.len() > 1 && digits.starts_with('0') {
        i64::from_str_radix(&digits[1..], 8).ok()?
    } else {
        digits.parse().ok()?
    };
    Some(if negative { -value } else { value })
}

/// The value of `text` (`argN/e:NAME`, `argN/tSIZE:NAME%REGS`), whose
/// slot is `slot` and whose format, after its letter (`c`: `e` or `t`),
/// is `after`.
pub(super) fn parse_named(
    text: &str,
    slot: ArgSlot,
    c: char,
    after: &str,
) -> Result<ArgSpec, String> {
    let named = |name: &str| {
        TypeName::new(name)
            .ok_or_else(|| format!("`{text}`: a type name has at most {TYPE_NAME_MAX} bytes"))
    };
    if c == 'e' && matches!(slot, ArgSlot::Fp(_)) {
        return Err(format!(
            "`{text}`: a floating-point argument is not an enum"
        ));
    }
    if c == 'e' {
        if let Some((signed, rest)) = after
            .strip_prefix('i')
            .map(|r| (true, r))
            .or_else(|| after.strip_prefix('u').map(|r| (false, r)))
        {
            let (format, size) = super::text::parse_tagged(text, signed, rest, &named)?;
            return Ok(ArgSpec { slot, format, size });
        }
        let name = after.strip_prefix(':').unwrap_or("");
        if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            return Err(format!("`{text}`: an enum is given as `e:NAME`"));
        }
        if name.contains('%') {
            return Err(format!(
                "`{text}`: registers and stack offsets (`%…`) are not supported yet"
            ));
        }
        let format = ArgFormat::Enum(named(name)?);
        return Ok(ArgSpec {
            slot,
            format,
            size: 8,
        });
    }
    let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let size: usize = after[..digits]
        .parse()
        .map_err(|_| format!("`{text}`: a structure is given as `tSIZE[:NAME]`"))?;
    let rest = &after[digits..];
    let (name, registers) = match rest.split_once('%') {
        Some((name, registers)) => (name, Some(registers)),
        None => (rest, None),
    };
    let name = match name {
        "" => "",
        _ => name
            .strip_prefix(':')
            .ok_or_else(|| format!("`{text}`: a structure is given as `tSIZE[:NAME]`"))?,
    };
    let unsupported = |what: &str| Err(format!("`{text}`: {what} is not supported yet"));
    let slot = match (slot, registers) {
        (ArgSlot::Deref { .. }, _) => {
            return Err(format!(
                "`{text}`: memory at an offset is read as an integer (d, i, u, x)"
            ))
        }
        (_, Some(r)) if r.starts_with("stack") => {
            return unsupported("a structure passed on the stack")
        }
        (_, _) if size > 16 => return unsupported("a structure over 16 bytes"),
        (ArgSlot::Retval, _) => ArgSlot::Retval,
        (_, None) if size > 8 => {
            return Err(format!(
                "`{text}`: a structure over 8 bytes needs its registers (`%RDI+RSI`)"
            ))
        }
        (slot, None) => slot,
        (_, Some(registers)) => {
            // All integer registers or all vector ones, consecutive: the
            // first is the slot, the next ones follow it (uftrace's `-a`
            // names only the first at -O2).
            let slots = registers
                .split('+')
                .map(register_slot)
                .collect::<Option<Vec<ArgSlot>>>();
            let Some(slots) = slots else {
                return Err(format!(
                    "`{text}`: `%{registers}` are not argument registers \
                     (rdi rsi rdx rcx r8 r9, xmm0-xmm7)"
                ));
            };
            let consecutive = slots.windows(2).all(|w| match (w[0], w[1]) {
                (ArgSlot::Int(a), ArgSlot::Int(b)) | (ArgSlot::Fp(a), ArgSlot::Fp(b)) => b == a + 1,
                _ => false,
            });
            if !consecutive || slots.len() > size.div_ceil(8).max(1) {
                return unsupported(
                    "a structure in registers other than consecutive ones of one kind",
                );
            }
            slots[0]
        }
    };
    Ok(ArgSpec {
        slot,
        format: ArgFormat::Struct(named(name)?),
        size: size as u8,
    })
}

/// `spec` read from `register` (`rdi`, `xmm0`; uftrace's `-a` names the
/// register it found a value in): an integer from an integer argument
/// register, a floating-point value from a vector one.
pub(super) fn in_register(text: &str, spec: ArgSpec, register: &str) -> Result<ArgSpec, String> {
    if register.starts_with("stack") {
        return Err(format!(
            "`{text}`: stack offsets (`%stack…`) are not supported yet"
        ));
    }
    let vector = register
        .to_ascii_lowercase()
        .strip_prefix("xmm")
        .and_then(|n| n.parse::<u8>().ok())
        .filter(|&n| n < super::FLOAT_REGISTERS);
    let slot = match (spec.slot, int_register(register), vector) {
        (ArgSlot::Int(_), Some(n), _) if spec.format != ArgFormat::Float => ArgSlot::Int(n),
        (ArgSlot::Fp(_), _, Some(n)) => ArgSlot::Fp(n + 1),
        (ArgSlot::Int(_) | ArgSlot::Fp(_), ..) => {
            return Err(format!(
                "`{text}`: `%{register}` is not a register of such an argument \
                 (rdi rsi rdx rcx r8 r9, xmm0-xmm7)"
            ))
        }
        _ => {
            return Err(format!(
                "`{text}`: only an argument is read from a register"
            ))
        }
    };
    Ok(ArgSpec { slot, ..spec })
}

/// The slot of an argument register: `RDI` is `arg1`, `XMM0` `fparg1`.
fn register_slot(name: &str) -> Option<ArgSlot> {
    if let Some(n) = int_register(name) {
        return Some(ArgSlot::Int(n));
    }
    let n = name
        .to_ascii_lowercase()
        .strip_prefix("xmm")?
        .parse::<u8>()
        .ok()?;
    (n < super::FLOAT_REGISTERS).then_some(ArgSlot::Fp(n + 1))
}

/// The argument number (1-6) of an integer argument register (`RDI`).
fn int_register(name: &str) -> Option<u8> {
    let names = ["rdi", "rsi", "rdx", "rcx", "r8", "r9"];
    let at = names.iter().position(|n| n.eq_ignore_ascii_case(name))?;
    debug_assert!(at < usize::from(INT_REGISTERS));
    Some(at as u8 + 1)
}
