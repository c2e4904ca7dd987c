//! The text uftrace 0.13's `replay` prints for a value's data: integers
//! as its `printf` formats print them, doubles as `%#f`, strings and
//! characters escaped as it escapes them.

use std::fmt::Write as _;

use super::ArgFormat;

/// An integer as uftrace prints it: `printf("%#<len><conv>")` with the
/// length modifier of its size, `val` holding the size's low bytes.
pub(super) fn show_int(format: ArgFormat, size: usize, val: u64, out: &mut String) {
    let mut conv = match format {
        ArgFormat::Signed => 'i',
        ArgFormat::Unsigned => 'u',
        ArgFormat::Hex => 'x',
        _ => 'd',
    };
    let mut size = size;
    let signed = val as i64;
    match format {
        ArgFormat::Auto if !(-100_000..=100_000).contains(&signed) => {
            // A small negative int in a 64-bit slot shows as an int.
            if val > 0xffff_0000 && val <= 0xffff_ffff {
                size = 4;
            } else {
                conv = 'x';
            }
        }
        ArgFormat::Unsigned if val > 100_000 => conv = 'x',
        _ => {}
    }
    // What printf's length modifier makes of the value.
    let bits = size as u32 * 8;
    let unsigned = if bits == 64 {
        val
    } else {
        val & ((1u64 << bits) - 1)
    };
    let _ = match conv {
        'x' if unsigned == 0 => write!(out, "0"),
        'x' => write!(out, "{unsigned:#x}"),
        'u' => write!(out, "{unsigned}"),
        _ => {
            let shift = 64 - bits;
            write!(out, "{}", ((unsigned << shift) as i64) >> shift)
        }
    };
}

/// A double as `printf("%#f")` prints it.
pub(super) fn show_float(v: f64, out: &mut String) {
    if v.is_nan() {
        out.push_str(if v.is_sign_negative() { "-nan" } else { "nan" });
    } else if v.is_infinite() {
        out.push_str(if v < 0.0 { "-inf" } else { "inf" });
    } else {
        let _ = write!(out, "{v:.6}");
    }
}

/// A string between quotes, escaped as uftrace escapes it (none if it has a
/// byte ≥ 0x80: shown as it is).
pub(super) fn show_str(bytes: &[u8], out: &mut String) {
    // uftrace copies the string into a C string first: it ends at a NUL.
    let bytes = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
    out.push('"');
    if bytes.iter().any(|&b| b >= 0x80) {
        out.push_str(&String::from_utf8_lossy(bytes));
    } else {
        for &b in bytes {
            escaped(b, out);
        }
    }
    out.push('"');
}

pub(super) fn escaped(b: u8, out: &mut String) {
    match b {
        0 => out.push_str("\\0"),
        8 => out.push_str("\\b"),
        b'\n' => out.push_str("\\n"),
        b => out.push(char::from(b)),
    }
}
