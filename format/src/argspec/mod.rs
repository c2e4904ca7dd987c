//! Argument and return-value specs in uftrace's syntax (`-A
//! 'GLOB@arg1/x,arg2/s,fparg1'`, `-R 'GLOB@retval/d'`): their parsing,
//! the bytes a recorder writes after an entry or exit record for them, and
//! the text `replay` shows for those bytes, as uftrace 0.13 does — shared
//! by the runtime (which captures), the writer and the reader.
//!
//! # The data, as uftrace 0.13 writes it
//!
//! An entry (exit) record whose `more` bit is set is followed by its
//! arguments (return value), in the order of its function's spec, each
//! padded to 4 bytes, the whole padded to 8; no length: a reader needs
//! the spec (kept in `info`) to read them. An integer is its `size` low
//! bytes (8 by default), a character 1, a floating-point value 4 or 8; a
//! string is a 2-byte length and its bytes (at most [`STR_MAX`], longer
//! ones cut to end in `...`), `NULL` for a null pointer and `<0x…>` for an
//! unreadable one (uftrace's text: `replay` shows both between quotes).

use std::fmt::Write as _;

/// How a value is shown (uftrace's `/d`, `/i`, `/u`, `/x`, `/s`, `/c`,
/// `/f`, `/p`, `/e:NAME`, `/tSIZE:NAME`, `/S`; fntrace's `/s:LEN`, `/C`,
/// `/eiBITS:NAME`, `/euBITS:NAME#START+COUNT`, recorded as uftrace's `/s`
/// and `/e:NAME` are: see [`uftrace_spelling`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgFormat {
    /// `/d` (the default): decimal, hexadecimal beyond ±100000.
    Auto,
    /// `/i`: signed decimal.
    Signed,
    /// `/u`: unsigned decimal, hexadecimal beyond 100000.
    Unsigned,
    /// `/x`: hexadecimal.
    Hex,
    /// `/s`: a C string the value points to.
    Str,
    /// `/c`: a character.
    Char,
    /// `/f` (and `fparg`): a floating-point value.
    Float,
    /// `/p`: an address, shown as `&NAME` when a symbol of the data
    /// directory's `.sym` files holds it (a function or a data object),
    /// else in hexadecimal. Recorded as an integer.
    Pointer,
    /// `/e:NAME`: a value of the C enum NAME, shown by the name of its
    /// enumerator (the definitions are in the `.dbg` files beside the
    /// data). Recorded as an integer.
    Enum(TypeName),
    /// `/tSIZE:NAME%REG+REG`: a structure (union, class) of SIZE bytes
    /// (at most 16) passed by value in consecutive integer or vector
    /// registers, the first the spec's slot, recorded whole (returned:
    /// rax's 8 bytes, then zeros, as uftrace records it) and shown as
    /// `NAME{...}` (`{}` when empty), as uftrace shows it.
    Struct(TypeName),
    /// `/s:LEN` (fntrace): the string a pointer (the value) and a length
    /// give, not a C string: Rust's `&str` (`arg1/s:arg2`), returned
    /// (`retval/s:rdx`), or a `String` read through its address
    /// (`arg1[8]/s:[16]`). At most [`STR_MAX`] bytes are read; recorded
    /// and shown as `/s`.
    Text(TextLen),
    /// `/S`: a libstdc++ `std::string` at the address the value holds (its
    /// data pointer, then its length), recorded as `/s`, shown `"text"s` as
    /// uftrace shows it.
    StdString,
    /// `/C` (fntrace): a Unicode scalar value in 32 bits (Rust's `char`),
    /// recorded as its UTF-8 text (as `/s`), shown `"é"`.
    Char32,
    /// `/eiBITS:NAME`, `/euBITS:NAME[#START+COUNT]` (fntrace): a tag of
    /// BITS bits (the spec's size), sign- or zero-extended, recorded as a
    /// 64-bit `/e:NAME` value. With a niche (`#START+COUNT`, Rust's
    /// `Option<&T>`: `#0+1`), a tag in START..START+COUNT (wrapping) is
    /// recorded as its distance from START, any other as COUNT (the
    /// variant that holds data), the numbers the enum's definition gives
    /// the variants.
    Tagged(TypeName, Tag),
}

/// Where the length of a [`ArgFormat::Text`] string is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextLen {
    /// `:argN`: in the N-th integer argument register (1-6).
    Arg(u8),
    /// `:rdx`: in rdx at the return (a pair returned in rax and rdx).
    Rdx,
    /// `:[OFFSET]`: at OFFSET bytes from the address the spec's
    /// `argN[...]` reads through.
    At(u32),
}

/// How a [`ArgFormat::Tagged`] tag becomes the value recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    /// Sign-extended (`/ei…`), else zero-extended.
    pub signed: bool,
    /// The niche: the first tag value and how many follow.
    pub niche: Option<(u64, u16)>,
}

impl ArgFormat {
    /// Whether the value is recorded as a string (a 2-byte length and
    /// its bytes).
    pub fn is_text(self) -> bool {
        matches!(
            self,
            ArgFormat::Str | ArgFormat::Text(_) | ArgFormat::StdString | ArgFormat::Char32
        )
    }

    /// Whether uftrace has no such format: the `info` file spells it as
    /// uftrace's format it is recorded as ([`uftrace_spelling`]).
    pub fn is_extension(self) -> bool {
        matches!(
            self,
            ArgFormat::Text(_) | ArgFormat::Char32 | ArgFormat::Tagged(..)
        )
    }
}

/// Where a value is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgSlot {
    /// `argN`: the N-th integer argument (1-based; 1-6 are registers).
    Int(u8),
    /// `fpargN`: the N-th floating-point argument (xmm0 is 1).
    Fp(u8),
    /// `retval`: the return value.
    Retval,
    /// `argN[OFFSET]` (a fntrace extension, no uftrace syntax): the bytes
    /// at OFFSET in the memory the N-th integer argument points to, read
    /// at the entry (`-A`) or, with the argument as it was at the entry,
    /// when the function returns (`-R`; what the runtime needs to read an
    /// async state machine's state after a poll: see docs/async.md). An
    /// unreadable address reads as all ones bytes.
    ///
    /// `pinN[OFFSET]` (fntrace, written by `fntrace record --async` only)
    /// is the same value with a claim: the N-th argument is the call's own
    /// `Pin<&mut Self>`, and OFFSET + size lies inside what it points to,
    /// so the memory stays mapped and unchanged by others from the entry
    /// to the return, and the runtime reads it with a plain load instead
    /// of a system call (`pinned`). A wrong claim faults the traced
    /// program: the CLI refuses it in `-A` and `-R` (docs/arguments.md).
    /// Recorded and spelled in `info` as `argN[OFFSET]`.
    Deref {
        /// The argument (1-6).
        arg: u8,
        /// Byte offset from the address the argument holds.
        offset: u32,
        /// Read when the function returns (given with `-R`).
        at_exit: bool,
        /// Spelled `pinN[OFFSET]`: read with a load (see above).
        pinned: bool,
    },
    /// `pollN(V)` (fntrace, given with `-R`; what `fntrace record --async`
    /// writes for a hand-written `Future::poll`): the return value, read
    /// as `retval` is (rax, its first SIZE bytes), with a claim the
    /// linkers of futures use: it is the discriminant of the `Poll<T>`
    /// the function returns in registers, `V` meaning `Pending` (any other
    /// value `Ready`), and argument N held the polled future's address,
    /// which the entry keeps for the exit as it does for `argN[OFFSET]`.
    /// `pollN(V)[OFFSET]`: the `Poll<T>` is returned through memory, whose
    /// address rax holds at the return (x86-64's rule for a value
    /// returned through a hidden pointer), the discriminant at OFFSET in
    /// it, read as `argN[OFFSET]` is (a system call: never a fault).
    /// Spelled so in `info` too (fntrace's readers read it; uftrace cannot).
    Poll {
        /// N: the future's argument (1-6).
        arg: u8,
        /// V: the discriminant of `Pending`.
        pending: u64,
        /// OFFSET, for a `Poll` returned through memory.
        at: Option<u32>,
    },
}

impl ArgSlot {
    /// Whether the value is read when the function returns (`-R`), not at
    /// its entry.
    pub fn at_exit(self) -> bool {
        matches!(
            self,
            ArgSlot::Retval | ArgSlot::Poll { .. } | ArgSlot::Deref { at_exit: true, .. }
        )
    }
}

impl ArgSpec {
    /// The slot uftrace's `info` names the value by: that of a fntrace
    /// format read through memory is its argument's (`arg1[8]/s:[16]` is
    /// `arg1/s`, read at the exit `retval/s`), every other its own. Specs
    /// are merged by it, as uftrace merges what `info` lists.
    pub fn uftrace_slot(&self) -> ArgSlot {
        match self.slot {
            ArgSlot::Deref { arg, at_exit, .. } if self.format.is_extension() => match at_exit {
                true => ArgSlot::Retval,
                false => ArgSlot::Int(arg),
            },
            // `pinN[OFFSET]` is spelled `argN[OFFSET]`.
            ArgSlot::Deref {
                arg,
                offset,
                at_exit,
                ..
            } => ArgSlot::Deref {
                arg,
                offset,
                at_exit,
                pinned: false,
            },
            slot => slot,
        }
    }

    /// Whether the value is read with a plain load through the call's own
    /// pinned argument (`pinN[OFFSET]`): the argument, if so.
    pub fn pinned_arg(&self) -> Option<u8> {
        match self.slot {
            ArgSlot::Deref {
                arg, pinned: true, ..
            } => Some(arg),
            _ => None,
        }
    }

    /// Bytes its data takes, but for a string (its length is recorded).
    pub fn data_size(&self) -> usize {
        match self.format {
            ArgFormat::Tagged(..) => 8,
            _ => usize::from(self.size),
        }
    }
}

/// One value of a spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgSpec {
    /// Where it is read.
    pub slot: ArgSlot,
    /// How it is shown.
    pub format: ArgFormat,
    /// Its size in bytes (1, 2, 4 or 8).
    pub size: u8,
}

/// A glob and the values recorded for the functions it selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSpec {
    /// Function-name glob (the part before `@`).
    pub glob: String,
    /// The values, in the order given.
    pub values: Vec<ArgSpec>,
}

/// The longest string recorded, in bytes (uftrace's `ARG_STR_MAX`): a
/// longer one is cut to this length, its last three bytes `...`.
pub const STR_MAX: usize = 98;

/// The most bytes of data one record carries (uftrace's argument buffer,
/// less its length word).
pub const DATA_MAX: usize = 1020;

/// Integer arguments read from registers (rdi, rsi, rdx, rcx, r8, r9);
/// later ones are on the stack, which fntrace does not read yet.
pub const INT_REGISTERS: u8 = 6;
/// Floating-point arguments read from registers (xmm0-xmm7).
pub const FLOAT_REGISTERS: u8 = 8;

/// How the runtime hands argument data to the streaming writer among its
/// events: an event followed by data has this bit in its depth...
pub const FOLLOWED_BY_DATA: u16 = 1 << 14;
/// ...and each 8 bytes of the data follow as an event of this depth, the
/// bytes (little-endian) in place of its time.
pub const DATA_DEPTH: u16 = u16::MAX;

/// The formats fntrace records, as its refusals list them.
const SUPPORTED: &str = "d i u x s c f p e t S C";

/// Which values an option may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecKind {
    /// `-A`: `argN` and `fpargN`.
    Arguments,
    /// `-R`: `retval`.
    Retval,
    /// Either (an `info` file's lines, read back).
    Any,
}

/// Parses one `-A` or `-R` value: `GLOB@VALUE,VALUE…`, several separated
/// by `;` (as uftrace joins them in `info`).
///
/// ```
/// use fntrace_format::argspec::{parse, ArgFormat, ArgSlot, SpecKind};
/// let specs = parse("f@arg1/x,arg2/s", SpecKind::Arguments).unwrap();
/// assert_eq!(specs[0].glob, "f");
/// assert_eq!(specs[0].values[1].slot, ArgSlot::Int(2));
/// assert_eq!(specs[0].values[1].format, ArgFormat::Str);
/// assert!(parse("f@arg1/o", SpecKind::Arguments).is_err());
/// ```
pub fn parse(text: &str, kind: SpecKind) -> Result<Vec<FunctionSpec>, String> {
    text.split(';')
        .filter(|part| !part.is_empty())
        .map(|part| parse_one(part, kind))
        .collect()
}

fn parse_one(text: &str, kind: SpecKind) -> Result<FunctionSpec, String> {
    let Some((glob, values)) = text.split_once('@') else {
        return Err(format!(
            "`{text}`: expected FUNCTION@VALUES (for example `f@arg1/x,arg2/s`)"
        ));
    };
    if glob.is_empty() {
        return Err(format!("`{text}`: no function before `@`"));
    }
    let values = values
        .split(',')
        .map(|value| parse_value(value, kind).map_err(|why| format!("`{text}`: {why}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(FunctionSpec {
        glob: glob.to_string(),
        values,
    })
}

fn parse_value(text: &str, kind: SpecKind) -> Result<ArgSpec, String> {
    // `argN%REG`: the register uftrace's `-a` found the value in (a
    // structure's registers are its own syntax).
    let is_struct = text
        .split_once('/')
        .is_some_and(|(_, written)| written.starts_with('t'));
    match text.split_once('%') {
        Some((value, register)) if !is_struct => {
            types::in_register(text, parse_value_at(value, kind)?, register)
        }
        _ => parse_value_at(text, kind),
    }
}

/// A number of `text` written in decimal or `0x` hexadecimal: `what` it
/// is, in the error.
fn number_in(text: &str, written: &str, what: &str) -> Result<u64, String> {
    match written.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => written.parse::<u64>(),
    }
    .map_err(|_| format!("`{text}`: `{written}` is not {what}"))
}

fn parse_value_at(text: &str, kind: SpecKind) -> Result<ArgSpec, String> {
    let (name, written) = match text.split_once('/') {
        Some((name, written)) => (name, Some(written)),
        None => (text, None),
    };
    // A structure names its registers after a `%`; `e` and `t` carry a
    // type name.
    let named = written
        .and_then(|w| w.chars().next())
        .filter(|c| matches!(c, 'e' | 't'));
    if text.contains('%') && named != Some('t') {
        return Err(format!(
            "`{text}`: registers and stack offsets (`%…`) are not supported yet"
        ));
    }
    let index = |digits: &str, what: &str, max: u8| -> Result<u8, String> {
        match digits.parse::<u8>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            Ok(n) if n > max => Err(format!(
                "`{text}`: only the first {max} {what} (those in registers) can be recorded"
            )),
            _ => Err(format!(
                "`{text}`: `{name}` is not a value (argN, fpargN or retval)"
            )),
        }
    };
    let slot = if let Some(poll) = name.strip_prefix("poll") {
        if kind != SpecKind::Retval {
            return Err(format!(
                "`{text}`: `pollN(V)` is a return value: given with -R, not -A"
            ));
        }
        let (poll, at) = match poll.strip_suffix(']').and_then(|p| p.split_once(")[")) {
            Some((poll, at)) => (format!("{poll})"), Some(number_in(text, at, "an offset")?)),
            None => (poll.to_string(), None),
        };
        let Some((n, pending)) = poll.strip_suffix(')').and_then(|p| p.split_once('(')) else {
            return Err(format!(
                "`{text}`: a `Poll` is `pollN(V)` or `pollN(V)[OFFSET]`"
            ));
        };
        ArgSlot::Poll {
            arg: index(n, "integer arguments", INT_REGISTERS)?,
            pending: number_in(text, pending, "a discriminant")?,
            at: match at {
                Some(at) => {
                    Some(u32::try_from(at).map_err(|_| format!("`{text}`: offset too large"))?)
                }
                None => None,
            },
        }
    } else if let Some((arg, offset)) = name.strip_suffix(']').and_then(|n| n.split_once('[')) {
        let pinned = arg.starts_with("pin");
        let Some(n) = arg.strip_prefix("arg").or_else(|| arg.strip_prefix("pin")) else {
            return Err(format!("`{text}`: only `argN[OFFSET]` reads memory"));
        };
        let offset = match offset.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => offset.parse::<u32>(),
        }
        .map_err(|_| format!("`{text}`: `{offset}` is not an offset"))?;
        ArgSlot::Deref {
            arg: index(n, "integer arguments", INT_REGISTERS)?,
            offset,
            at_exit: kind == SpecKind::Retval,
            pinned,
        }
    } else if name.starts_with("pin") {
        return Err(format!("`{text}`: `pinN` reads memory: `pinN[OFFSET]`"));
    } else if let Some(n) = name.strip_prefix("fparg") {
        ArgSlot::Fp(index(n, "floating-point arguments", FLOAT_REGISTERS)?)
    } else if let Some(n) = name.strip_prefix("arg") {
        ArgSlot::Int(index(n, "integer arguments", INT_REGISTERS)?)
    } else if name == "retval" {
        ArgSlot::Retval
    } else {
        return Err(format!(
            "`{text}`: `{name}` is not a value (argN, fpargN or retval)"
        ));
    };
    match (kind, slot) {
        (SpecKind::Arguments, ArgSlot::Retval) => {
            return Err(format!("`{text}`: a return value is given with -R, not -A"))
        }
        (SpecKind::Retval, ArgSlot::Int(_) | ArgSlot::Fp(_)) => {
            return Err(format!(
                "`{text}`: -R takes `retval` (or `argN[OFFSET]`) only"
            ))
        }
        _ => {}
    }
    // A load reads a plain integer: nothing that follows a pointer or
    // reads more than the value.
    let pinned = matches!(slot, ArgSlot::Deref { pinned: true, .. });
    let polled = matches!(slot, ArgSlot::Poll { .. });
    let plain = |c: char| matches!(c, 'd' | 'i' | 'u' | 'x');
    if (pinned || polled)
        && written
            .and_then(|w| w.chars().next())
            .is_some_and(|c| !plain(c))
    {
        let what = if pinned { "pinN[OFFSET]" } else { "pollN(V)" };
        return Err(format!(
            "`{text}`: `{what}` is read as an integer (d, i, u, x)"
        ));
    }
    if let (Some(c), Some(written)) = (named, written) {
        return types::parse_named(text, slot, c, &written[1..]);
    }
    let float_slot = matches!(slot, ArgSlot::Fp(_));
    let (mut format, mut size) = if float_slot {
        (ArgFormat::Float, 8)
    } else {
        (ArgFormat::Auto, 8)
    };
    let Some(spec) = written else {
        return Ok(ArgSpec { slot, format, size });
    };
    let mut chars = spec.chars();
    let bits = match chars.next() {
        Some(c) if float_slot && c.is_ascii_digit() => spec,
        Some(c) => {
            format = match c {
                'd' => ArgFormat::Auto,
                'i' => ArgFormat::Signed,
                'u' => ArgFormat::Unsigned,
                'x' => ArgFormat::Hex,
                's' => ArgFormat::Str,
                'c' => ArgFormat::Char,
                'f' => ArgFormat::Float,
                'p' => ArgFormat::Pointer,
                'S' => ArgFormat::StdString,
                'C' => ArgFormat::Char32,
                _ => {
                    return Err(format!(
                        "`{text}`: unknown format `/{c}` (supported: {SUPPORTED})"
                    ))
                }
            };
            size = match format {
                ArgFormat::Char => 1,
                ArgFormat::Char32 => 4,
                _ => 8,
            };
            let rest = chars.as_str();
            if let (ArgFormat::Str, Some(len)) = (format, rest.strip_prefix(':')) {
                return text::parse_text(text, slot, len);
            }
            if matches!(format, ArgFormat::StdString | ArgFormat::Char32) && !rest.is_empty() {
                return Err(format!("`{text}`: `/{c}` takes no size"));
            }
            rest
        }
        None => return Err(format!("`{text}`: nothing after `/`")),
    };
    if !bits.is_empty() {
        size = match (bits, format) {
            ("8", _) => 1,
            ("16", _) => 2,
            ("32", _) => 4,
            ("64", _) => 8,
            ("80", ArgFormat::Float) => {
                return Err(format!(
                    "`{text}`: 80-bit floating point is not supported yet"
                ))
            }
            _ => return Err(format!("`{text}`: size must be 8, 16, 32 or 64 bits")),
        };
        if format == ArgFormat::Float && size < 4 {
            return Err(format!(
                "`{text}`: a floating-point value has 32 or 64 bits"
            ));
        }
        if format == ArgFormat::Str && size != 8 {
            return Err(format!("`{text}`: a string is a 64-bit pointer"));
        }
    }
    if matches!(slot, ArgSlot::Deref { .. })
        && matches!(
            format,
            ArgFormat::Str | ArgFormat::Char | ArgFormat::Float | ArgFormat::StdString
        )
    {
        return Err(format!(
            "`{text}`: memory at an offset is read as an integer (d, i, u, x)"
        ));
    }
    // `argN/f` is uftrace's `fpargN`: read from the N-th vector register.
    let slot = match (slot, format) {
        (ArgSlot::Int(n), ArgFormat::Float) => ArgSlot::Fp(n),
        (ArgSlot::Fp(_), ArgFormat::StdString | ArgFormat::Char32) => {
            return Err(format!(
                "`{text}`: a floating-point argument is not a string or a character"
            ))
        }
        _ => slot,
    };
    Ok(ArgSpec { slot, format, size })
}

/// The values recorded for the function `name`: those of every spec whose
/// glob selects it (`selects`), merged as uftrace merges them — a value
/// named again replaces the earlier one in place, new ones are appended.
pub fn values_for(specs: &[FunctionSpec], mut selects: impl FnMut(&str) -> bool) -> Vec<ArgSpec> {
    let mut values: Vec<ArgSpec> = Vec::new();
    for spec in specs {
        if !selects(&spec.glob) {
            continue;
        }
        for value in &spec.values {
            match values
                .iter_mut()
                .find(|v| v.uftrace_slot() == value.uftrace_slot())
            {
                Some(old) => *old = *value,
                None => values.push(*value),
            }
        }
    }
    values
}

/// The bytes `values` take after a record (`retval`: the return value's,
/// else the arguments'), given `data`, what follows the record: `None`
/// when `data` is too short. Padded to 8, as written.
pub fn data_len(values: &[ArgSpec], retval: bool, data: &[u8]) -> Option<usize> {
    let mut at = 0;
    for value in values.iter().filter(|v| v.slot.at_exit() == retval) {
        let size = if value.format.is_text() {
            2 + usize::from(u16::from_le_bytes(data.get(at..at + 2)?.try_into().ok()?))
        } else {
            value.data_size()
        };
        at += size.next_multiple_of(4);
    }
    let len = at.next_multiple_of(8);
    (len <= data.len()).then_some(len)
}

/// The text uftrace 0.13's `replay` shows for `data`: `(1, "key")` for
/// arguments (the parentheses included), ` = 5` for a return value (only
/// the first retval spec counts, as in uftrace). `None` if `data` is too
/// short for `values`.
pub fn show(values: &[ArgSpec], retval: bool, data: &[u8]) -> Option<String> {
    show_named(values, retval, data, &types::NoNames)
}

/// [`show`], with `names` to name what `/p` values point to and `/e`
/// values (what uftrace's `replay` finds in the data directory's `.sym`
/// and `.dbg` files).
pub fn show_named(
    values: &[ArgSpec],
    retval: bool,
    data: &[u8],
    names: &dyn Names,
) -> Option<String> {
    let mut out = String::new();
    out.push_str(if retval { " = " } else { "(" });
    let mut at = 0;
    let mut first = true;
    for value in values.iter().filter(|v| v.slot.at_exit() == retval) {
        if !first {
            out.push_str(", ");
        }
        first = false;
        let size = usize::from(value.size);
        let used = match value.format {
            format if format.is_text() => {
                let len = usize::from(u16::from_le_bytes(data.get(at..at + 2)?.try_into().ok()?));
                let bytes = data.get(at + 2..at + 2 + len)?;
                show_str(bytes, &mut out);
                // uftrace's C++14 literal: `"text"s` (`"NULL"s` too).
                if format == ArgFormat::StdString {
                    out.push('s');
                }
                2 + len
            }
            ArgFormat::Char => {
                out.push('\'');
                escaped(*data.get(at)?, &mut out);
                out.push('\'');
                1
            }
            ArgFormat::Float => {
                let bytes = data.get(at..at + size)?;
                let v = if size == 4 {
                    f64::from(f32::from_le_bytes(bytes.try_into().ok()?))
                } else {
                    f64::from_le_bytes(bytes.try_into().ok()?)
                };
                show_float(v, &mut out);
                size
            }
            ArgFormat::Struct(name) => {
                data.get(at..at + size)?;
                // gcc names a lambda's type `<lambda`: uftrace leaves it out.
                if name.as_str() != "<lambda" {
                    out.push_str(name.as_str());
                }
                out.push_str(if size == 0 { "{}" } else { "{...}" });
                size
            }
            format => {
                let size = value.data_size();
                let mut raw = [0u8; 8];
                raw[..size].copy_from_slice(data.get(at..at + size)?);
                let raw = u64::from_le_bytes(raw);
                match format {
                    ArgFormat::Pointer => match names.symbol_at(raw) {
                        Some(symbol) => {
                            let _ = write!(out, "&{symbol}");
                        }
                        None if raw == 0 => out.push('0'),
                        None => {
                            let _ = write!(out, "{raw:#x}");
                        }
                    },
                    ArgFormat::Enum(name) | ArgFormat::Tagged(name, _) => {
                        match names.enum_def(name.as_str()) {
                            Some(def) => out.push_str(&def.show(raw as i32)),
                            None => {
                                let _ = write!(out, "{}", raw as i32);
                            }
                        }
                    }
                    _ => show_int(format, size, raw, &mut out),
                }
                size
            }
        };
        at += used.next_multiple_of(4);
        if retval {
            break;
        }
    }
    if !retval {
        out.push(')');
    }
    Some(out)
}

/// A value's raw register contents, for [`encode`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Registers {
    /// rdi, rsi, rdx, rcx, r8, r9.
    pub int: [u64; INT_REGISTERS as usize],
    /// The low 64 bits of xmm0-xmm7.
    pub float: [u64; FLOAT_REGISTERS as usize],
    /// rax at a return.
    pub rax: u64,
    /// rdx at a return (the second of a pair returned).
    pub rdx: u64,
    /// The low 64 bits of xmm0 at a return.
    pub xmm0: u64,
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_text;

mod shown;
use shown::{escaped, show_float, show_int, show_str};

mod text;
pub use text::uftrace_spelling;

mod encode;
pub(crate) use encode::bad_pointer;
pub use encode::{encode, encode_with, encoded_bound, ReadAt};

mod types;
pub use types::{parse_enum, EnumDef, Names, TypeName, TYPE_NAME_MAX};
