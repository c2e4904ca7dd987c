//! The spec parser, its errors, and the data's encoding and text against
//! bytes uftrace 0.13 wrote (`uftrace record -A … -R …`, read with `xxd`).

use super::*;

fn one(text: &str) -> Vec<ArgSpec> {
    let mut specs = parse(text, SpecKind::Any).expect(text);
    assert_eq!(specs.len(), 1);
    specs.remove(0).values
}

fn err(text: &str, kind: SpecKind) -> String {
    parse(text, kind).expect_err(text)
}

#[test]
fn parses_formats_and_sizes() {
    use ArgFormat::*;
    use ArgSlot::*;
    let spec = |slot, format, size| ArgSpec { slot, format, size };
    assert_eq!(
        one("f@arg1,arg2/x,arg3/s,arg4/c,fparg1,arg5/i32,arg6/u16"),
        vec![
            spec(Int(1), Auto, 8),
            spec(Int(2), Hex, 8),
            spec(Int(3), Str, 8),
            spec(Int(4), Char, 1),
            spec(Fp(1), Float, 8),
            spec(Int(5), Signed, 4),
            spec(Int(6), Unsigned, 2),
        ]
    );
    assert_eq!(one("g@retval/d"), vec![spec(Retval, Auto, 8)]);
    assert_eq!(one("g@retval/f32"), vec![spec(Retval, Float, 4)]);
    assert_eq!(one("g@fparg2/32"), vec![spec(Fp(2), Float, 4)]);
    // uftrace reads `argN/f` from the N-th vector register.
    assert_eq!(one("g@arg2/f"), vec![spec(Fp(2), Float, 8)]);
    assert_eq!(one("g@arg1/x8"), vec![spec(Int(1), Hex, 1)]);
    let specs = parse("a*@arg1;b@arg2/s", SpecKind::Arguments).unwrap();
    assert_eq!(specs.len(), 2);
    assert_eq!(specs[0].glob, "a*");
    assert_eq!(specs[1].glob, "b");
}

#[test]
fn refuses_bad_specs_with_a_reason() {
    let a = SpecKind::Arguments;
    assert_eq!(
        err("f", a),
        "`f`: expected FUNCTION@VALUES (for example `f@arg1/x,arg2/s`)"
    );
    assert_eq!(err("@arg1", a), "`@arg1`: no function before `@`");
    assert_eq!(
        err("f@arg1/o", a),
        "`f@arg1/o`: `arg1/o`: unknown format `/o` (supported: d i u x s c f p e t S C)"
    );
    assert_eq!(
        err("f@arg7", a),
        "`f@arg7`: `arg7`: only the first 6 integer arguments (those in registers) can be recorded"
    );
    assert_eq!(
        err("f@argx", a),
        "`f@argx`: `argx`: `argx` is not a value (argN, fpargN or retval)"
    );
    assert_eq!(
        err("f@arg0", a),
        "`f@arg0`: `arg0`: `arg0` is not a value (argN, fpargN or retval)"
    );
    assert_eq!(
        err("f@depth=2", a),
        "`f@depth=2`: `depth=2`: `depth=2` is not a value (argN, fpargN or retval)"
    );
    assert_eq!(
        err("f@arg1/i24", a),
        "`f@arg1/i24`: `arg1/i24`: size must be 8, 16, 32 or 64 bits"
    );
    assert_eq!(
        err("f@fparg1/80", a),
        "`f@fparg1/80`: `fparg1/80`: 80-bit floating point is not supported yet"
    );
    assert_eq!(
        err("f@arg1/s32", a),
        "`f@arg1/s32`: `arg1/s32`: a string is a 64-bit pointer"
    );
    assert_eq!(
        err("f@arg1%stack+8", a),
        "`f@arg1%stack+8`: `arg1%stack+8`: stack offsets (`%stack…`) are not supported yet"
    );
    assert_eq!(
        err("f@arg1%rax", a),
        "`f@arg1%rax`: `arg1%rax`: `%rax` is not a register of such an argument \
         (rdi rsi rdx rcx r8 r9, xmm0-xmm7)"
    );
    assert_eq!(
        err("f@retval", a),
        "`f@retval`: `retval`: a return value is given with -R, not -A"
    );
    assert_eq!(
        err("f@arg1", SpecKind::Retval),
        "`f@arg1`: `arg1`: -R takes `retval` (or `argN[OFFSET]`) only"
    );
    assert_eq!(err("f@arg1/", a), "`f@arg1/`: `arg1/`: nothing after `/`");
}

#[test]
fn merges_specs_as_uftrace_does() {
    let specs = parse("f*@arg1/x,arg2;f@arg2/s,arg3;g@arg9", SpecKind::Any);
    assert!(specs.is_err(), "arg9 is refused");
    let specs = parse("f*@arg1/x,arg2;f@arg2/s,arg3;g@arg4", SpecKind::Any).unwrap();
    let values = values_for(&specs, |glob| glob == "f*" || glob == "f");
    let shown: Vec<_> = values.iter().map(|v| (v.slot, v.format)).collect();
    assert_eq!(
        shown,
        vec![
            (ArgSlot::Int(1), ArgFormat::Hex),
            (ArgSlot::Int(2), ArgFormat::Str),
            (ArgSlot::Int(3), ArgFormat::Auto),
        ]
    );
}

/// The entry data of `f(42, "key", 'c', 2.5)` recorded by uftrace 0.13
/// with `-A 'f@arg1/d,arg2/s,arg3/c,fparg1'`.
const UFTRACE_ENTRY: [u8; 32] = [
    0x2a, 0, 0, 0, 0, 0, 0, 0, 3, 0, b'k', b'e', b'y', 0, 0, 0, 0x63, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0x04, 0x40, 0, 0, 0, 0,
];

#[test]
fn encodes_as_uftrace_and_shows_as_its_replay() {
    let values = one("f@arg1/d,arg2/s,arg3/c,fparg1");
    let mut regs = Registers::default();
    regs.int[0] = 42;
    regs.int[1] = 0x1000;
    regs.int[2] = 0x63;
    regs.float[0] = 2.5f64.to_bits();
    let mut out = [0xffu8; DATA_MAX + 4];
    let mut read = |addr: u64, buf: &mut [u8]| {
        assert_eq!(addr, 0x1000);
        buf[..4].copy_from_slice(b"key\0");
        Some(4)
    };
    let len = encode(&values, false, &regs, &mut read, &mut out);
    // 28 bytes of data, padded to 32 in the file.
    assert_eq!(len, 32);
    assert_eq!(out[..32], UFTRACE_ENTRY);
    assert_eq!(data_len(&values, false, &UFTRACE_ENTRY), Some(32));
    assert_eq!(
        show(&values, false, &UFTRACE_ENTRY).unwrap(),
        "(42, \"key\", 'c', 2.500000)"
    );
    assert_eq!(show(&values, false, &UFTRACE_ENTRY[..20]), None);
}

#[test]
fn null_and_bad_pointers_and_long_strings() {
    let values = one("f@arg1/s,arg2/s,arg3/s");
    let regs = Registers {
        int: [0, 0x1234, 0x2000, 0, 0, 0],
        ..Registers::default()
    };
    let mut out = [0u8; DATA_MAX + 4];
    let mut read = |addr: u64, buf: &mut [u8]| {
        if addr == 0x2000 {
            buf.fill(b'a');
            Some(buf.len())
        } else {
            None
        }
    };
    let len = encode(&values, false, &regs, &mut read, &mut out);
    let text = show(&values, false, &out[..len]).unwrap();
    let long = format!("{}...", "a".repeat(STR_MAX - 3));
    assert_eq!(text, format!("(\"NULL\", \"<0x1234>\", \"{long}\")"));
    assert_eq!(data_len(&values, false, &out[..len]), Some(len));
}

#[test]
fn integers_as_printf_shows_them() {
    let show_one = |spec: &str, raw: u64| {
        let values = one(spec);
        show(&values, false, &raw.to_le_bytes()).unwrap()
    };
    // -7 passed as an int: the register's upper half is zero.
    assert_eq!(show_one("f@arg1", 0xffff_fff9), "(-7)");
    assert_eq!(show_one("f@arg1", (-7i64) as u64), "(-7)");
    assert_eq!(show_one("f@arg1", 100_001), "(0x186a1)");
    assert_eq!(show_one("f@arg1", 100_000), "(100000)");
    assert_eq!(show_one("f@arg1/x", 0), "(0)");
    assert_eq!(show_one("f@arg1/x", 5), "(0x5)");
    assert_eq!(show_one("f@arg1/i32", 0xffff_fff9), "(-7)");
    assert_eq!(show_one("f@arg1/i", 0xffff_fff9), "(4294967289)");
    assert_eq!(show_one("f@arg1/u", 7), "(7)");
    assert_eq!(show_one("f@arg1/u", 100_001), "(0x186a1)");
    assert_eq!(show_one("f@arg1/c", u64::from(b'\n')), "('\\n')");
    let ret = one("f@retval/d");
    assert_eq!(show(&ret, true, &144u64.to_le_bytes()).unwrap(), " = 144");
}

#[test]
fn the_bound_holds_every_value_and_a_smaller_buffer_is_enough() {
    let ints = one(
        "f@arg1,arg2,arg3,arg4,arg5,arg6,fparg1,fparg2,fparg3,fparg4,fparg5,fparg6,fparg7,fparg8",
    );
    let strings = one("f@arg1/s,arg2,arg3/s");
    let regs = Registers {
        int: [1, 2, 3, 4, 5, 6],
        float: [7, 8, 9, 10, 11, 12, 13, 14],
        ..Registers::default()
    };
    let mut read = |_: u64, buf: &mut [u8]| {
        buf.fill(b'z');
        Some(buf.len())
    };
    for (values, bound) in [(&ints, 116), (&strings, 220)] {
        assert_eq!(encoded_bound(values, false), bound);
        // Filled with garbage: every byte up to the length is written.
        let mut full = [0xeeu8; DATA_MAX + 4];
        let mut exact = vec![0x55u8; bound];
        let len = encode(values, false, &regs, &mut read, &mut full);
        assert_eq!(encode(values, false, &regs, &mut read, &mut exact), len);
        assert_eq!(full[..len], exact[..len]);
    }
    // Integers: the bound is tight; one byte short, the last is left out.
    let mut short = [0u8; 115];
    assert_eq!(encode(&ints, false, &regs, &mut read, &mut short), 104);
    assert_eq!(encoded_bound(&ints, true), 4);
}

#[test]
fn memory_at_an_offset_from_an_argument() {
    let args = parse("f@arg2/x,arg2[0x90]/u8", SpecKind::Arguments).unwrap();
    let rets = parse("f@arg2[144]/u16", SpecKind::Retval).unwrap();
    assert_eq!(
        args[0].values[1].slot,
        ArgSlot::Deref {
            arg: 2,
            offset: 0x90,
            at_exit: false,
            pinned: false,
        }
    );
    assert!(rets[0].values[0].slot.at_exit() && !args[0].values[1].slot.at_exit());
    assert_eq!(rets[0].values[0].size, 2);
    for bad in ["f@arg2[0x90]/s", "f@arg9[1]", "f@fparg1[1]", "f@arg1[x]"] {
        assert!(parse(bad, SpecKind::Arguments).is_err(), "{bad}");
    }
    // At 0x1090 + 0x90 the byte 3; nothing readable elsewhere (all ones).
    let mut read = |addr: u64, buf: &mut [u8]| {
        (addr == 0x1120).then(|| {
            buf.fill(0);
            buf[0] = 3;
            buf.len()
        })
    };
    let mut out = [0u8; DATA_MAX + 4];
    let mut regs = Registers {
        int: [0, 0x1090, 0, 0, 0, 0],
        ..Registers::default()
    };
    let len = encode(&args[0].values, false, &regs, &mut read, &mut out);
    assert_eq!(
        show(&args[0].values, false, &out[..len]).unwrap(),
        "(0x1090, 3)"
    );
    regs.int[1] = 0;
    let len = encode(&rets[0].values, true, &regs, &mut read, &mut out);
    assert_eq!(
        show(&rets[0].values, true, &out[..len]).unwrap(),
        " = 65535"
    );
}

#[test]
fn pinned_memory_is_read_through_its_own_reader_and_spelled_as_arg() {
    let args = parse("f@arg1/x,pin1[0x10]/u8", SpecKind::Arguments).unwrap();
    let rets = parse("f@pin1[0x10]/u8", SpecKind::Retval).unwrap();
    let entry = args[0].values[1];
    assert_eq!(
        entry.slot,
        ArgSlot::Deref {
            arg: 1,
            offset: 0x10,
            at_exit: false,
            pinned: true,
        }
    );
    assert_eq!(entry.pinned_arg(), Some(1));
    assert_eq!(rets[0].values[0].pinned_arg(), Some(1));
    assert!(rets[0].values[0].slot.at_exit());
    let unpinned = parse("f@arg1[0x10]/u8", SpecKind::Arguments).unwrap();
    assert_eq!(unpinned[0].values[0].pinned_arg(), None);
    // Merged with `arg1[0x10]` as one value (`info` names both alike).
    assert_eq!(entry.uftrace_slot(), unpinned[0].values[0].slot);
    // A load reads an integer, nothing that follows a pointer.
    for bad in [
        "f@pin1[8]/s",
        "f@pin1[8]/s:[16]",
        "f@pin1[8]/p",
        "f@pin1[8]/e:color",
        "f@pin1[8]/eu8:color",
        "f@pin1[8]/c",
        "f@pin1",
        "f@pin7[8]",
    ] {
        assert!(parse(bad, SpecKind::Arguments).is_err(), "{bad}");
    }
    // `info` spells it as the `argN[OFFSET]` fntrace's readers know.
    assert_eq!(
        uftrace_spelling("f@arg1/x,pin1[0x10]/u8;g@arg2", SpecKind::Arguments),
        "f@arg1/x,arg1[0x10]/u8;g@arg2"
    );
    assert_eq!(
        uftrace_spelling("f@pin2[16]/u16", SpecKind::Retval),
        "f@arg2[16]/u16"
    );
    // Each read says whether it is the pinned one, and through which argument.
    let mut values = args[0].values.clone();
    values.extend(parse("f@arg1[0x20]/u32", SpecKind::Arguments).unwrap()[0].values[0..1].iter());
    let regs = Registers {
        int: [0x1000, 0, 0, 0, 0, 0],
        ..Registers::default()
    };
    let mut seen = Vec::new();
    let mut read = |pinned: Option<u8>, addr: u64, buf: &mut [u8]| {
        seen.push((pinned, addr, buf.len()));
        buf.fill(if pinned.is_some() { 3 } else { 4 });
        Some(buf.len())
    };
    let mut out = [0u8; 64];
    let len = encode_with(&values, false, &regs, &mut read, &mut out);
    assert_eq!(seen, [(Some(1), 0x1010, 1), (None, 0x1020, 4)]);
    assert_eq!(
        show(&values, false, &out[..len]).unwrap(),
        "(0x1000, 3, 0x4040404)"
    );
}

/// Names as a data directory gives them: `counter` at 0x404038, 4 bytes;
/// `enum color {RED,GREEN=5,BLUE}`.
struct TestNames(Vec<EnumDef>);

impl Names for TestNames {
    fn symbol_at(&self, addr: u64) -> Option<String> {
        (0x404038..0x40403c)
            .contains(&addr)
            .then(|| "counter".to_string())
    }
    fn enum_def(&self, name: &str) -> Option<&EnumDef> {
        self.0.iter().find(|def| def.name == name)
    }
}

#[test]
fn pointers_enums_and_structures_as_uftrace_autoargs_writes_them() {
    // `tests/c/autoargs.c`'s `where`, `next` and `sum`, as uftrace 0.13's
    // `-a` types them (its `.dbg` file's `A:` and `R:` lines).
    let specs = parse(
        "where@arg1/p;next@arg1/e:color;sum@arg1/t8:pair%RDI",
        SpecKind::Arguments,
    )
    .unwrap();
    let color = TypeName::new("color").unwrap();
    let pair = TypeName::new("pair").unwrap();
    assert_eq!(specs[0].values[0].format, ArgFormat::Pointer);
    assert_eq!(specs[1].values[0].format, ArgFormat::Enum(color));
    assert_eq!(specs[2].values[0].format, ArgFormat::Struct(pair));
    assert_eq!(specs[2].values[0].size, 8);
    assert_eq!(specs[2].values[0].slot, ArgSlot::Int(1));
    let rets = parse(
        "where@retval/p;next@retval/e:color;get@retval/t8:pair",
        SpecKind::Retval,
    )
    .unwrap();
    let names = TestNames(parse_enum("enum color {RED,GREEN=5,BLUE}").unwrap());
    // Each is 8 bytes of data, as uftrace writes them (its records above).
    let shown = |values: &[ArgSpec], retval, raw: u64| {
        show_named(values, retval, &raw.to_le_bytes(), &names).unwrap()
    };
    assert_eq!(shown(&specs[0].values, false, 0x404038), "(&counter)");
    assert_eq!(
        shown(&specs[0].values, false, 0x7ffe_0000_0010),
        "(0x7ffe00000010)"
    );
    assert_eq!(shown(&specs[0].values, false, 0), "(0)");
    assert_eq!(shown(&rets[0].values, true, 0x40403b), " = &counter");
    assert_eq!(shown(&specs[1].values, false, 5), "(GREEN)");
    assert_eq!(shown(&rets[1].values, true, 0), " = RED");
    assert_eq!(shown(&specs[2].values, false, 0x2_0000_0001), "(pair{...})");
    assert_eq!(shown(&rets[2].values, true, 1), " = pair{...}");
    // Without names: the number, the address.
    assert_eq!(
        show(&specs[1].values, false, &6u64.to_le_bytes()).unwrap(),
        "(6)"
    );
    // A structure of 12 bytes in two registers: its 12 bytes.
    let triple = one("f@arg2/t12:triple%RSI+RDX,arg4");
    let regs = Registers {
        int: [0, 0x2_0000_0001, 0x3, 9, 0, 0],
        ..Registers::default()
    };
    let mut out = [0u8; DATA_MAX + 4];
    let len = encode(&triple, false, &regs, &mut |_, _| None, &mut out);
    assert_eq!(len, 24);
    assert_eq!(out[..12], [1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
    assert_eq!(
        show(&triple, false, &out[..len]).unwrap(),
        "(triple{...}, 9)"
    );
    // In vector registers (`struct { double x, y; }`), or named by its
    // first register only (uftrace's `-a` at -O2): from the next ones too.
    let fp = one("f@fparg1/t16:fp%XMM0+XMM1,arg2/t16:big%rsi");
    assert_eq!((fp[0].slot, fp[1].slot), (ArgSlot::Fp(1), ArgSlot::Int(2)));
    assert_eq!(one("f@fparg2/t8:two")[0].slot, ArgSlot::Fp(2));
    let regs = Registers {
        int: [0, 4, 5, 0, 0, 0],
        float: [0.5f64.to_bits(), 0.25f64.to_bits(), 0, 0, 0, 0, 0, 0],
        ..Registers::default()
    };
    let len = encode(&fp, false, &regs, &mut |_, _| None, &mut out);
    assert_eq!(len, 32);
    assert_eq!(out[..8], 0.5f64.to_le_bytes());
    assert_eq!(out[8..16], 0.25f64.to_le_bytes());
    assert_eq!(
        out[16..32],
        [4, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]
    );
    // Returned: rax's 8 bytes, zeros after them.
    let ret = parse("f@retval/t16:big", SpecKind::Retval).unwrap();
    let regs = Registers {
        rax: 9,
        ..Registers::default()
    };
    assert_eq!(
        encode(&ret[0].values, true, &regs, &mut |_, _| None, &mut out),
        16
    );
    assert_eq!(out[..16], [9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(one("f@arg1/t0:empty")[0].size, 0);
    assert_eq!(
        show(
            &one("f@arg1/t0:empty,arg2"),
            false,
            &[7, 0, 0, 0, 0, 0, 0, 0]
        )
        .unwrap(),
        "(empty{}, 7)"
    );
    for (bad, why) in [
        (
            "f@arg1/t16:big",
            "a structure over 8 bytes needs its registers",
        ),
        (
            "f@arg1/t24:big%stack+1",
            "a structure passed on the stack is not supported yet",
        ),
        (
            "f@arg1/t16:two%RDI+XMM0",
            "a structure in registers other than consecutive ones of one kind",
        ),
        (
            "f@arg1/t16:two%RDI+RDX",
            "a structure in registers other than consecutive ones",
        ),
        ("f@arg1/t8:two%RAX", "`%RAX` are not argument registers"),
        ("f@arg1/t24:big%RDI+RSI+RDX", "a structure over 16 bytes"),
        ("f@arg1/e", "an enum is given as `e:NAME`"),
        (
            "f@fparg1/e:color",
            "a floating-point argument is not an enum",
        ),
    ] {
        let said = err(bad, SpecKind::Arguments);
        assert!(said.contains(why), "{bad}: {said}");
    }
}

#[test]
fn enum_values_by_name_flags_or_number() {
    let defs = parse_enum(
        "enum uft_mmap_prot { PROT_NONE, PROT_READ, PROT_WRITE, PROT_EXEC = 4, };\
         enum o {O_RDONLY = 00,O_WRONLY = 01,O_CREAT = 0100,}",
    )
    .unwrap();
    assert_eq!(defs[0].name, "uft_mmap_prot");
    assert_eq!(defs[0].show(2), "PROT_WRITE");
    assert_eq!(defs[0].show(3), "PROT_WRITE|PROT_READ");
    // uftrace's walk, largest first, each once (PROT_NONE's 0 too).
    assert_eq!(
        defs[0].show(11),
        "PROT_EXEC|PROT_WRITE|PROT_READ|PROT_NONE+0x4"
    );
    assert_eq!(defs[1].show(0o101), "O_CREAT|O_WRONLY");
    assert_eq!(defs[1].show(-3), "-3");
    assert!(parse_enum("color {A}").is_err());
}

#[test]
fn registers_as_uftrace_autoargs_names_them() {
    // uftrace's `.dbg` lines at -O2 (`A: @fparg1/64%xmm0,arg1%rdi`).
    let values = one("f@fparg1/64%xmm0,arg1%rdi,arg2/e:color%RSI,arg3%rcx");
    let slots: Vec<_> = values.iter().map(|v| v.slot).collect();
    use ArgSlot::*;
    assert_eq!(slots, [Fp(1), Int(1), Int(2), Int(4)]);
    assert_eq!(values[0].size, 8);
    assert!(err("f@arg1%xmm0", SpecKind::Arguments).contains("not a register of such"));
    assert!(err("f@fparg1%rdi", SpecKind::Arguments).contains("not a register of such"));
}
