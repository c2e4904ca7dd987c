//! The one syntax for sizes and durations that users type, wherever they
//! type them: `fntrace` options, `FNTRACE_*` variables (read by the
//! runtime, which depends on this crate) and `fntrace ctl` requests.
//!
//! Sizes: a whole number of bytes, optionally followed by `K`, `M` or `G`
//! (either case, optionally followed by `B` or `iB`). Multiples are binary:
//! `1K` = 1024 bytes, `64M` = 64 × 2²⁰, `1G` = 2³⁰ (`KB` and `KiB` mean the
//! same). Durations: a non-negative number followed by `ns`, `us`, `ms`,
//! `s` or `m` (minutes): `500us`, `20ms`, `1.5s`.

/// What a size looks like, for error messages.
pub const SIZE_SYNTAX: &str =
    "a whole number of bytes, or with K, M or G (binary: 1K = 1024): 65536, 512K, 64M, 1G";

/// What a duration looks like, for error messages.
pub const DURATION_SYNTAX: &str = "a number with a unit (ns, us, ms, s, m): 500us, 20ms, 1.5s";

/// Parses a size (see the module doc) into bytes, at least `min`. The
/// error is one line naming the text and saying what a size is.
///
/// ```
/// use fntrace_format::units::parse_size;
/// assert_eq!(parse_size("64M", 1), Ok(64 << 20));
/// assert_eq!(parse_size("512k", 1), Ok(512 * 1024));
/// assert_eq!(parse_size("1GiB", 1), Ok(1 << 30));
/// assert_eq!(parse_size("4096", 1), Ok(4096));
/// assert!(parse_size("64MB", 1).is_ok());
/// assert!(parse_size("64X", 1).is_err());
/// assert!(parse_size("8", 16).is_err());
/// ```
pub fn parse_size(text: &str, min: u64) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a size ({SIZE_SYNTAX})");
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(bad());
    }
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is too large"))?;
    let scale: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return Err(bad()),
    };
    let bytes = number
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    if bytes < min {
        return Err(format!("{text:?} is below the least size, {min} bytes"));
    }
    Ok(bytes)
}

/// `bytes` in the size syntax, exactly: the largest of `G`, `M`, `K` that
/// divides it (`64M`), else bytes (`1000`).
///
/// ```
/// use fntrace_format::units::format_size;
/// assert_eq!(format_size(64 << 20), "64M");
/// assert_eq!(format_size(1536), "1536");
/// ```
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if bytes != 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Parses a duration (see the module doc) into nanoseconds. The error is
/// one line naming the text and saying what a duration is.
///
/// ```
/// use fntrace_format::units::parse_duration_ns;
/// assert_eq!(parse_duration_ns("20ms"), Ok(20_000_000));
/// assert_eq!(parse_duration_ns("1.5s"), Ok(1_500_000_000));
/// assert_eq!(parse_duration_ns("250us"), Ok(250_000));
/// assert!(parse_duration_ns("20").is_err());
/// assert!(parse_duration_ns("-1ms").is_err());
/// ```
pub fn parse_duration_ns(text: &str) -> Result<u64, String> {
    let units: [(&str, f64); 5] = [
        ("ns", 1.0),
        ("us", 1e3),
        ("ms", 1e6),
        ("s", 1e9),
        ("m", 60e9),
    ];
    for (unit, scale) in units {
        if let Some(number) = text.strip_suffix(unit) {
            // "ms" also ends in "s": only a number before the unit counts;
            // `parse` takes "inf" and "nan", which are not durations.
            if number.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
                if let Ok(value) = number.parse::<f64>() {
                    let ns = value * scale;
                    if ns.is_finite() && ns >= 0.0 && ns < u64::MAX as f64 {
                        return Ok(ns.round() as u64);
                    }
                }
            }
        }
    }
    Err(format!("{text:?} is not a duration ({DURATION_SYNTAX})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        for (text, bytes) in [
            ("1", 1),
            ("65536", 65536),
            ("512K", 512 << 10),
            ("512k", 512 << 10),
            ("64M", 64 << 20),
            ("64MB", 64 << 20),
            ("64MiB", 64 << 20),
            ("64mib", 64 << 20),
            ("1G", 1 << 30),
            ("2gb", 2 << 30),
            ("100B", 100),
        ] {
            assert_eq!(parse_size(text, 1), Ok(bytes), "{text}");
        }
        for text in [
            "", "M", "64X", "6 4M", " 64M", "64M ", "-1", "1.5M", "0x10", "64MM", "1T",
        ] {
            let err = parse_size(text, 1).unwrap_err();
            assert!(
                err.contains("is not a size") && !err.contains('\n'),
                "{text}: {err}"
            );
        }
        assert!(parse_size("0", 1).unwrap_err().contains("below"));
        assert!(parse_size("99999999999G", 1)
            .unwrap_err()
            .contains("too large"));
        assert!(parse_size("99999999999999999999", 1)
            .unwrap_err()
            .contains("too large"));
        assert_eq!(parse_size("16", 16), Ok(16));
        assert!(parse_size("15", 16).is_err());
    }

    #[test]
    fn durations() {
        for (text, ns) in [
            ("0ns", 0),
            ("7ns", 7),
            ("5us", 5_000),
            ("5ms", 5_000_000),
            ("0.5ms", 500_000),
            ("2s", 2_000_000_000),
            ("1m", 60_000_000_000),
        ] {
            assert_eq!(parse_duration_ns(text), Ok(ns), "{text}");
        }
        for text in [
            "", "5", "ms", "5 ms", "-5ms", "infs", "nanms", "5h", "1e400s",
        ] {
            assert!(parse_duration_ns(text).is_err(), "{text}");
        }
    }
}
