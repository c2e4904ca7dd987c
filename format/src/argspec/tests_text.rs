//! fntrace's own formats: strings of a pointer and a length, `std::string`,
//! a 32-bit `char`, an enum's tag with or without a niche; their data read
//! back as the `info` file's uftrace spelling reads it.

use super::*;

fn one(text: &str, kind: SpecKind) -> Vec<ArgSpec> {
    let mut specs = parse(text, kind).expect(text);
    assert_eq!(specs.len(), 1);
    specs.remove(0).values
}

/// Memory for the reads: a `String`-like block at 0x1000 (capacity,
/// pointer 0x2000, length 5), its text at 0x2000, a `std::string` at
/// 0x3000 (pointer 0x2000, length 3); nothing else is readable.
fn read(addr: u64, buf: &mut [u8]) -> Option<usize> {
    let mut memory = vec![0u8; 0x4000];
    memory[0x1000..0x1008].copy_from_slice(&9u64.to_le_bytes());
    memory[0x1008..0x1010].copy_from_slice(&0x2000u64.to_le_bytes());
    memory[0x1010..0x1018].copy_from_slice(&5u64.to_le_bytes());
    memory[0x2000..0x200c].copy_from_slice(b"hello, world");
    memory[0x3000..0x3008].copy_from_slice(&0x2000u64.to_le_bytes());
    memory[0x3008..0x3010].copy_from_slice(&3u64.to_le_bytes());
    let at = usize::try_from(addr)
        .ok()
        .filter(|&a| (0x1000..0x4000).contains(&a))?;
    let n = buf.len().min(0x4000 - at);
    buf[..n].copy_from_slice(&memory[at..at + n]);
    Some(n)
}

/// What `fntrace` records for `spec` and shows from the data, and what a
/// reader of `info` (its uftrace spelling) shows from the same data.
fn both(spec: &str, kind: SpecKind, regs: &Registers) -> (String, String) {
    let values = one(spec, kind);
    let retval = kind == SpecKind::Retval;
    let mut out = [0u8; DATA_MAX + 4];
    let len = encode(&values, retval, regs, &mut read, &mut out);
    let ours = show(&values, retval, &out[..len]).unwrap();
    let spelled = uftrace_spelling(spec, kind);
    let theirs = one(&spelled, SpecKind::Any);
    assert_eq!(
        data_len(&theirs, retval, &out[..len]),
        Some(len),
        "{spelled}"
    );
    (ours, show(&theirs, retval, &out[..len]).unwrap())
}

#[test]
fn strings_of_a_pointer_and_a_length() {
    let regs = Registers {
        int: [0x2000, 5, 0x1000, 0x3000, 1, 0],
        rax: 0x2007,
        rdx: 5,
        ..Registers::default()
    };
    let args = SpecKind::Arguments;
    for (spec, kind, spelled, shown) in [
        ("f@arg1/s:arg2", args, "f@arg1/s", "(\"hello\")"),
        ("f@arg5/s:arg6", args, "f@arg5/s", "(\"\")"),
        ("f@arg3[8]/s:[16]", args, "f@arg3/s", "(\"hello\")"),
        ("f@arg4/S", args, "f@arg4/S", "(\"hel\"s)"),
        ("f@arg6/S", args, "f@arg6/S", "(\"NULL\"s)"),
        ("f@arg2/S", args, "f@arg2/S", "(\"<0x5>\"s)"),
        (
            "f@retval/s:rdx",
            SpecKind::Retval,
            "f@retval/s",
            " = \"world\"",
        ),
        (
            "f@arg3[8]/s:[16]",
            SpecKind::Retval,
            "f@retval/s",
            " = \"hello\"",
        ),
        (
            "f@arg2[8]/s:[16]",
            SpecKind::Retval,
            "f@retval/s",
            " = \"<0x5>\"",
        ),
    ] {
        assert_eq!(uftrace_spelling(spec, kind), spelled);
        let (ours, theirs) = both(spec, kind, &regs);
        assert_eq!(ours, shown, "{spec}");
        assert_eq!(theirs, shown, "{spec} as {spelled}");
    }
    // A length past the limit: cut as `/s` cuts, never read past it.
    let regs = Registers {
        int: [0x2000, 1 << 40, 0, 0, 0, 0],
        ..Registers::default()
    };
    let values = one("f@arg1/s:arg2", args);
    let mut out = [0u8; DATA_MAX + 4];
    let mut asked = 0;
    let mut fill = |_: u64, buf: &mut [u8]| {
        asked = asked.max(buf.len());
        buf.fill(b'a');
        Some(buf.len())
    };
    let len = encode(&values, false, &regs, &mut fill, &mut out);
    assert_eq!(asked, STR_MAX + 1);
    let long = format!("(\"{}...\")", "a".repeat(STR_MAX - 3));
    assert_eq!(show(&values, false, &out[..len]).unwrap(), long);
}

#[test]
fn chars_and_tagged_enums() {
    let regs = Registers {
        int: [0xdead_0000_00e9, 0x41, 0x1_ffff_fffe, 0x7f00_1234, 0, 2],
        ..Registers::default()
    };
    let args = SpecKind::Arguments;
    let (ours, theirs) = both("f@arg1/C,arg2/C", args, &regs);
    assert_eq!(
        (ours.as_str(), theirs.as_str()),
        ("(\"é\", \"A\")", "(\"é\", \"A\")")
    );
    assert_eq!(uftrace_spelling("f@arg1/C,arg2", args), "f@arg1/s,arg2");
    // -2 in 16 bits, with garbage above; an `Option<&T>` (None is 0).
    let values = one(
        "f@arg3/ei16:level,arg4/eu64:opt#0+1,arg5/eu64:opt#0+1",
        args,
    );
    let mut out = [0u8; 64];
    let len = encode(&values, false, &regs, &mut |_, _| None, &mut out);
    assert_eq!(len, 24);
    assert_eq!(i64::from_le_bytes(out[..8].try_into().unwrap()), -2);
    assert_eq!(u64::from_le_bytes(out[8..16].try_into().unwrap()), 1);
    assert_eq!(u64::from_le_bytes(out[16..24].try_into().unwrap()), 0);
    assert_eq!(
        uftrace_spelling("f@arg3/ei16:level,arg4/eu64:opt#0+1", args),
        "f@arg3/e:level,arg4/e:opt"
    );
    // A niche of two values past a `char`'s (Option<Option<char>>-like).
    let tag = Tag {
        signed: false,
        niche: Some((0x11_0000, 2)),
    };
    assert_eq!(text::tagged(tag, 4, 0x11_0001), 1);
    assert_eq!(text::tagged(tag, 4, 0x11_0000), 0);
    assert_eq!(text::tagged(tag, 4, u64::from('x')), 2);
    // A niche that wraps: tags 255 and 0 of a byte.
    let wraps = Tag {
        signed: false,
        niche: Some((255, 2)),
    };
    assert_eq!(text::tagged(wraps, 1, 0x3300), 1);
    assert_eq!(text::tagged(wraps, 1, 0xff), 0);
    assert_eq!(text::tagged(wraps, 1, 7), 2);
}

#[test]
fn fntrace_formats_refused_where_they_mean_nothing() {
    let args = SpecKind::Arguments;
    for (spec, kind) in [
        ("f@arg1/s:rdx", args),
        ("f@arg1/s:arg7", args),
        ("f@arg1[8]/s:arg2", args),
        ("f@retval/s:arg2", SpecKind::Retval),
        ("f@fparg1/C", args),
        ("f@arg1/C32", args),
        ("f@arg1/S64", args),
        ("f@arg1[8]/S", args),
        ("f@arg1/eu12:x", args),
        ("f@arg1/ei8:x#0+1", args),
        ("f@arg1/eu8:x#zero+1", args),
        ("f@arg1/eu8:9x", args),
    ] {
        assert!(parse(spec, kind).is_err(), "{spec}");
    }
}

#[test]
fn merged_by_the_slot_uftrace_names_them_by() {
    let specs = parse("f@arg1[8]/s:[16],arg2;f@arg1/x", SpecKind::Arguments).unwrap();
    let values = values_for(&specs, |_| true);
    assert_eq!(values.len(), 2);
    assert_eq!(values[0].format, ArgFormat::Hex);
    // --async's pair stays two values (an integer read through memory).
    let specs = parse("f@arg1/x,arg1[0xac]/u8", SpecKind::Arguments).unwrap();
    assert_eq!(values_for(&specs, |_| true).len(), 2);
}
