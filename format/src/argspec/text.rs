//! fntrace's formats that uftrace 0.13 has no spec for, and how the
//! `info` file spells them so that uftrace's `replay` shows them: strings
//! of a pointer and a length (`/s:LEN`, recorded as `/s`), libstdc++'s
//! `std::string` (`/S`, which uftrace has), a Rust `char` (`/C`, its
//! UTF-8 text as `/s`) and an enum's tag of any width, with or without a
//! niche (`/euBITS:NAME#START+COUNT`, recorded as `/e:NAME`).

use super::{ArgFormat, ArgSlot, ArgSpec, Registers, SpecKind, Tag, TextLen, STR_MAX};

/// Parses `/s:LEN` of `text` (`len` after the `:`), whose slot is `slot`.
pub(super) fn parse_text(text: &str, slot: ArgSlot, len: &str) -> Result<ArgSpec, String> {
    let bad = |why: &str| Err(format!("`{text}`: {why}"));
    let len = if let Some(n) = len.strip_prefix("arg") {
        match n.parse::<u8>() {
            Ok(n) if (1..=super::INT_REGISTERS).contains(&n) => TextLen::Arg(n),
            _ => return bad("a length is in arg1 … arg6, rdx or at `[OFFSET]`"),
        }
    } else if len == "rdx" {
        TextLen::Rdx
    } else if let Some(offset) = len.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
        let offset = match offset.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => offset.parse::<u32>(),
        };
        match offset {
            Ok(offset) => TextLen::At(offset),
            Err(_) => return bad("`[OFFSET]` is a number"),
        }
    } else {
        return bad("a length is in arg1 … arg6, rdx or at `[OFFSET]`");
    };
    match (slot, len) {
        (ArgSlot::Int(_), TextLen::Arg(_))
        | (ArgSlot::Retval, TextLen::Rdx)
        | (ArgSlot::Deref { .. }, TextLen::At(_)) => {}
        (ArgSlot::Int(_), _) => return bad("an argument's length is in another one (`:argN`)"),
        (ArgSlot::Retval, _) => return bad("a return value's length is in rdx (`:rdx`)"),
        (ArgSlot::Deref { .. }, _) => {
            return bad("a string read through memory has its length there (`:[OFFSET]`)")
        }
        (ArgSlot::Fp(_), _) => return bad("a floating-point argument is not a string"),
        (ArgSlot::Poll { .. }, _) => return bad("`pollN(V)` is read as an integer"),
    }
    Ok(ArgSpec {
        slot,
        format: ArgFormat::Text(len),
        size: 8,
    })
}

/// Parses an enum's `BITS:NAME#START+COUNT` after `/ei` or `/eu`
/// (`signed`), given the name's parser.
pub(super) fn parse_tagged(
    text: &str,
    signed: bool,
    after: &str,
    named: &dyn Fn(&str) -> Result<super::TypeName, String>,
) -> Result<(ArgFormat, u8), String> {
    let bad = || format!("`{text}`: an enum's tag is given as `e{{i|u}}BITS:NAME[#START+COUNT]`");
    let (bits, rest) = after.split_once(':').ok_or_else(bad)?;
    let size = match bits {
        "8" => 1,
        "16" => 2,
        "32" => 4,
        "64" => 8,
        _ => return Err(bad()),
    };
    let (name, niche) = match rest.split_once('#') {
        Some((name, niche)) => {
            let (start, count) = niche.split_once('+').ok_or_else(bad)?;
            let start = match start.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => start.parse::<u64>(),
            }
            .map_err(|_| bad())?;
            let count = count.parse::<u16>().map_err(|_| bad())?;
            if signed {
                return Err(format!("`{text}`: a niche's tag is unsigned (`/eu`)"));
            }
            (name, Some((start, count)))
        }
        None => (rest, None),
    };
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return Err(bad());
    }
    Ok((ArgFormat::Tagged(named(name)?, Tag { signed, niche }), size))
}

/// The value a [`ArgFormat::Tagged`] tag of `size` bytes (`raw`'s low
/// ones) is recorded as.
pub(super) fn tagged(tag: Tag, size: u8, raw: u64) -> u64 {
    let bits = u32::from(size) * 8;
    let mask = if bits >= 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    };
    let value = raw & mask;
    if let Some((start, count)) = tag.niche {
        let distance = value.wrapping_sub(start) & mask;
        return distance.min(u64::from(count));
    }
    if tag.signed && bits < 64 {
        let shift = 64 - bits;
        return (((value << shift) as i64) >> shift) as u64;
    }
    value
}

/// Writes the text of `value` (a [`ArgFormat::Text`], `StdString` or
/// `Char32`, whose slot read `raw`) into `text` (at least `STR_MAX + 1`
/// bytes), reading memory with `read` only: its length. As for `/s`:
/// `NULL` for a null pointer, `<0x…>` for an unreadable one, a string of
/// [`STR_MAX`] bytes or more cut to end in `...`.
pub(super) fn encode(
    value: &ArgSpec,
    raw: u64,
    regs: &Registers,
    read: &mut dyn FnMut(u64, &mut [u8]) -> Option<usize>,
    text: &mut [u8],
) -> usize {
    // The pointer's and the length's words, read together when they are
    // near (a `String`'s, a `std::string`'s): one system call, not two.
    let mut words = |pointer: u64, len: u64| {
        let (low, high) = (pointer.min(len), pointer.max(len).wrapping_add(8));
        let mut bytes = [0u8; 32];
        let span = high.wrapping_sub(low);
        if span as usize <= bytes.len() {
            let span = span as usize;
            if read(low, &mut bytes[..span]) != Some(span) {
                return None;
            }
            let at = |addr: u64| {
                let from = (addr - low) as usize;
                u64::from_le_bytes(bytes[from..from + 8].try_into().unwrap_or_default())
            };
            return Some((at(pointer), at(len)));
        }
        let mut word = |addr: u64| {
            let mut bytes = [0u8; 8];
            (read(addr, &mut bytes) == Some(8)).then(|| u64::from_le_bytes(bytes))
        };
        Some((word(pointer)?, word(len)?))
    };
    let (pointer, len) = match value.format {
        ArgFormat::Char32 => {
            let code = raw as u32;
            return match char::from_u32(code) {
                Some(c) => c.encode_utf8(text).len(),
                None => super::bad_pointer(u64::from(code), text),
            };
        }
        ArgFormat::StdString => {
            if raw == 0 {
                text[..4].copy_from_slice(b"NULL");
                return 4;
            }
            match words(raw, raw.wrapping_add(8)) {
                Some(pair) => pair,
                None => return super::bad_pointer(raw, text),
            }
        }
        ArgFormat::Text(TextLen::Arg(n)) => (raw, regs.int[usize::from(n - 1)]),
        ArgFormat::Text(TextLen::Rdx) => (raw, regs.rdx),
        ArgFormat::Text(TextLen::At(offset)) => {
            let ArgSlot::Deref {
                arg, offset: at, ..
            } = value.slot
            else {
                return 0;
            };
            let base = regs.int[usize::from(arg - 1)];
            match words(
                base.wrapping_add(u64::from(at)),
                base.wrapping_add(u64::from(offset)),
            ) {
                Some(pair) => pair,
                None => return super::bad_pointer(base, text),
            }
        }
        _ => return 0,
    };
    if pointer == 0 {
        text[..4].copy_from_slice(b"NULL");
        return 4;
    }
    // A Rust empty string's pointer is dangling (1, an alignment): never read.
    if len == 0 {
        return 0;
    }
    let want = len.min(STR_MAX as u64 + 1) as usize;
    match read(pointer, &mut text[..want]) {
        Some(n) if n == want && len >= STR_MAX as u64 => {
            text[STR_MAX - 3..STR_MAX].copy_from_slice(b"...");
            STR_MAX
        }
        Some(n) if n == want => n,
        _ => super::bad_pointer(pointer, text),
    }
}

/// `text`, specs of `kind` joined by `;`, as uftrace's `info` file gives
/// them: each value of a fntrace format spelled as the uftrace format it
/// is recorded as (`arg1/s:arg2`, `arg1[8]/s:[16]` and `arg1/C` as
/// `arg1/s`; `-R`'s `arg1[8]/s:[16]` as `retval/s`; `arg1/eu8:color` as
/// `arg1/e:color`), the others as given. A spec that does not parse is
/// left as it is.
pub fn uftrace_spelling(text: &str, kind: SpecKind) -> String {
    let mut specs = Vec::new();
    for spec in text.split(';').filter(|s| !s.is_empty()) {
        let Some((glob, values)) = spec.split_once('@') else {
            specs.push(spec.to_string());
            continue;
        };
        let values: Vec<String> = values
            .split(',')
            .map(|value| match super::parse_value(value, kind) {
                Ok(parsed) if parsed.format.is_extension() => spelled(&parsed),
                // The same bytes as `argN[OFFSET]`, which fntrace's readers
                // know (the load is the runtime's business alone).
                Ok(parsed) if parsed.pinned_arg().is_some() => value.replacen("pin", "arg", 1),
                _ => value.to_string(),
            })
            .collect();
        specs.push(format!("{glob}@{}", values.join(",")));
    }
    specs.join(";")
}

/// A value of a fntrace format in uftrace's syntax.
fn spelled(value: &ArgSpec) -> String {
    let slot = match value.uftrace_slot() {
        ArgSlot::Int(n) => format!("arg{n}"),
        ArgSlot::Fp(n) => format!("fparg{n}"),
        _ => "retval".to_string(),
    };
    match value.format {
        ArgFormat::Tagged(name, _) => format!("{slot}/e:{}", name.as_str()),
        _ => format!("{slot}/s"),
    }
}
