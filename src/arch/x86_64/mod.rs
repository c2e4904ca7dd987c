//! x86-64 call-site encodings and the trampolines' register save area.
//!
//! A call site is the instruction a compiler places in each instrumented
//! function to call `mcount` or `__fentry__`. The forms seen on this
//! platform (`tests/sites.rs` checks each one's bytes):
//!
//! | form              | bytes               | emitted by                                   |
//! |-------------------|---------------------|----------------------------------------------|
//! | `CallRel32`       | `e8 rel32`          | rustc; gcc non-PIE                           |
//! | `Addr32CallRel32` | `67 e8 rel32`       | gcc PIE after the linker relaxed `ff 15`     |
//! | `CallGotRip`      | `ff 15 rel32`       | gcc PIE (mcount in a shared object); rustc in a crate declaring `mcount` |
//!
//! A site is only ever rewritten between its original bytes and the NOP of
//! the same length; bytes that decode as none of these forms are never
//! written.

/// Opcode of `call rel32`.
pub(crate) const CALL_REL32: u8 = 0xe8;
/// The address-size prefix the linker puts before a relaxed `call`.
pub(crate) const ADDR32_PREFIX: u8 = 0x67;
/// `jmp rel32`'s opcode: a site sent to its return stub
/// (`patch::return_stubs`).
pub(crate) const JMP_REL32: u8 = 0xe9;
/// The CS segment prefix, which pads a six-byte site's `jmp rel32` (a
/// prefix the CPU ignores on a direct jump; the assembler pads branches
/// with it too).
pub(crate) const CS_PREFIX: u8 = 0x2e;
/// Opcode and ModRM of `call *rel32(%rip)`.
pub(crate) const CALL_RIP_INDIRECT: [u8; 2] = [0xff, 0x15];
/// `nopl 0x0(%rax,%rax,1)`: the 5-byte NOP.
pub(crate) const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
/// `nopw 0x0(%rax,%rax,1)`: the 6-byte NOP.
pub(crate) const NOP6: [u8; 6] = [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00];

/// `push %r10` and `pop %r10`: gcc wraps the `__fentry__` call of a GNU C
/// nested function in them (r10 holds the function's static chain, which the
/// call may clobber), so at the call the return address into the parent is
/// one slot further up than at an ordinary fentry site.
pub(crate) const PUSH_R10: [u8; 2] = [0x41, 0x52];
/// See [`PUSH_R10`].
pub(crate) const POP_R10: [u8; 2] = [0x41, 0x5a];
/// `endbr64`, which `-fcf-protection` puts at every function's entry.
pub(crate) const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Where a function's `__fentry__` call may lie: at `offset` of the
/// function's first bytes `head`, either first (after an optional
/// `endbr64`), or wrapped in `push %r10` / `pop %r10` (a nested function).
/// `Some(true)` for the wrapped form, `Some(false)` for the plain one,
/// `None` elsewhere. `after` holds the bytes right after the call.
pub(crate) fn fentry_placement(head: &[u8], offset: usize, after: &[u8]) -> Option<bool> {
    let before = head.get(..offset)?;
    let before = before.strip_prefix(&ENDBR64[..]).unwrap_or(before);
    if before.is_empty() {
        Some(false)
    } else {
        (before == PUSH_R10 && after.starts_with(&POP_R10)).then_some(true)
    }
}

/// The encoding of one call site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteForm {
    /// `e8 rel32` (5 bytes).
    CallRel32,
    /// `67 e8 rel32` (6 bytes).
    Addr32CallRel32,
    /// `ff 15 rel32`: call through a pointer slot (6 bytes).
    CallGotRip,
}

impl SiteForm {
    /// Length of the instruction in bytes.
    pub fn instruction_len(self) -> usize {
        match self {
            SiteForm::CallRel32 => 5,
            SiteForm::Addr32CallRel32 | SiteForm::CallGotRip => 6,
        }
    }

    /// The NOP of the same length.
    pub fn nop(self) -> &'static [u8] {
        match self.instruction_len() {
            5 => &NOP5,
            _ => &NOP6,
        }
    }
}

/// A decoded call instruction: its form and where it calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DecodedCall {
    pub form: SiteForm,
    pub target: usize,
}

fn rel32(bytes: &[u8]) -> i64 {
    i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as i64
}

/// Decodes the call instruction that starts at `code[0]`, located at
/// address `addr`. `load_slot` reads the pointer slot of a `ff 15` call and
/// returns `None` when the slot is not readable memory.
///
/// `addr32_is_ours` says whether a `67` byte at `code[0]` may belong to the
/// call (see [`decode_site_at`]); when it is false a `67 e8` sequence is not
/// decoded here (the caller tries `code[1..]` as `e8`).
pub(crate) fn decode_call(
    code: &[u8],
    addr: usize,
    load_slot: impl Fn(usize) -> Option<usize>,
) -> Option<DecodedCall> {
    if code.len() >= 5 && code[0] == CALL_REL32 {
        let target = (addr as i64 + 5 + rel32(&code[1..5])) as usize;
        return Some(DecodedCall {
            form: SiteForm::CallRel32,
            target,
        });
    }
    if code.len() >= 6 && code[0] == ADDR32_PREFIX && code[1] == CALL_REL32 {
        let target = (addr as i64 + 6 + rel32(&code[2..6])) as usize;
        return Some(DecodedCall {
            form: SiteForm::Addr32CallRel32,
            target,
        });
    }
    if code.len() >= 6 && code[..2] == CALL_RIP_INDIRECT {
        let slot = (addr as i64 + 6 + rel32(&code[2..6])) as usize;
        let target = load_slot(slot)?;
        return Some(DecodedCall {
            form: SiteForm::CallGotRip,
            target,
        });
    }
    None
}

/// `jmp *rel32(%rip)`: a PLT entry's jump through its GOT slot.
const JMP_RIP_INDIRECT: [u8; 2] = [0xff, 0x25];
/// `bnd` prefix of an MPX-era PLT entry's jump.
const BND_PREFIX: u8 = 0xf2;

/// The GOT slot a PLT entry at `addr` (its first bytes `code`) jumps
/// through: `jmp *slot(%rip)`, optionally after `endbr64` and with a `bnd`
/// prefix (`.plt.sec` entries). A call to a function in another object
/// from an executable that is not linked with `-fno-plt` goes through one
/// (`call mcount@plt`, as rustc emits for `-Zinstrument-mcount`).
pub(crate) fn plt_slot(code: &[u8], addr: usize) -> Option<usize> {
    let skip_endbr = if code.starts_with(&ENDBR64) { 4 } else { 0 };
    let rest = &code[skip_endbr.min(code.len())..];
    let skip_bnd = usize::from(rest.first() == Some(&BND_PREFIX));
    let jump = &rest[skip_bnd.min(rest.len())..];
    if jump.len() < 6 || jump[..2] != JMP_RIP_INDIRECT {
        return None;
    }
    let end = addr + skip_endbr + skip_bnd + 6;
    Some((end as i64 + rel32(&jump[2..6])) as usize)
}

/// What an instruction written at a call site does when executed: all a
/// patch protocol needs to emulate it (a breakpoint protocol's trap handler
/// runs it on behalf of a thread that hit the half-written site).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Instruction {
    /// A NOP ([`NOP5`] or [`NOP6`]): execution continues after it.
    Nop,
    /// `e8 rel32` or `67 e8 rel32`: pushes the next address, jumps to
    /// `target`.
    Call {
        /// The absolute address called.
        target: usize,
    },
    /// `ff 15 rel32`: pushes the next address, jumps to the address stored
    /// in the pointer at `slot` (read when the call executes).
    CallIndirect {
        /// The absolute address of the pointer slot.
        slot: usize,
    },
    /// `e9 rel32` or `2e e9 rel32`: jumps to `target` (a return stub).
    Jump {
        /// The absolute address jumped to.
        target: usize,
    },
}

/// Decodes `code` as exactly one instruction of the kinds fntrace writes at
/// a call site (the NOPs and the three call forms), located at `addr`.
/// `None` for anything else, including trailing bytes: fntrace never writes
/// bytes it does not recognise.
pub(crate) fn decode_site_instruction(code: &[u8], addr: usize) -> Option<Instruction> {
    let after = |len: usize, rel: &[u8]| {
        let rel = i32::from_le_bytes(rel.try_into().ok()?);
        Some(addr.wrapping_add(len).wrapping_add_signed(rel as isize))
    };
    match code {
        _ if code == NOP5 || code == NOP6 => Some(Instruction::Nop),
        [CALL_REL32, rel @ ..] if rel.len() == 4 => Some(Instruction::Call {
            target: after(5, rel)?,
        }),
        [ADDR32_PREFIX, CALL_REL32, rel @ ..] if rel.len() == 4 => Some(Instruction::Call {
            target: after(6, rel)?,
        }),
        [0xff, 0x15, rel @ ..] if rel.len() == 4 => Some(Instruction::CallIndirect {
            slot: after(6, rel)?,
        }),
        [JMP_REL32, rel @ ..] if rel.len() == 4 => Some(Instruction::Jump {
            target: after(5, rel)?,
        }),
        [CS_PREFIX, JMP_REL32, rel @ ..] if rel.len() == 4 => Some(Instruction::Jump {
            target: after(6, rel)?,
        }),
        _ => None,
    }
}

/// Whether a `67 e8` sequence at `site` is one instruction, that is
/// whether the `67` starts an instruction. `head` holds the function's first
/// bytes (from `function`). The prologue before the site is decoded
/// instruction by instruction; if that reaches `site` exactly, the `67` is
/// the call's prefix. If the prologue holds an instruction this small
/// decoder does not know, the answer is `false`: only the `e8` part is then
/// treated as the site, which is always safe, since `NOP5` after a stray `67`
/// still forms one valid instruction (`67 0f 1f 44 00 00`).
pub(crate) fn addr32_prefix_is_part_of_call(site: usize, function: usize, head: &[u8]) -> bool {
    let Some(target) = site.checked_sub(function) else {
        return false;
    };
    let mut offset = 0;
    while offset < target {
        match prologue_instruction_len(&head[offset.min(head.len())..]) {
            Some(len) => offset += len,
            None => return false,
        }
    }
    offset == target
}

/// Length of one instruction of the kinds compilers put in a prologue before
/// the mcount call: `push reg`, `mov`/`xor` between registers, `sub`/`and`
/// of an immediate from a register (each with an optional REX prefix).
fn prologue_instruction_len(code: &[u8]) -> Option<usize> {
    let rex = matches!(code.first()?, 0x40..=0x4f) as usize;
    let opcode = *code.get(rex)?;
    let register_operands = |i: usize| code.get(i).is_some_and(|modrm| modrm >> 6 == 0b11);
    let len = match opcode {
        0x50..=0x57 => 1,                                             // push reg
        0x89 | 0x8b | 0x31 | 0x33 if register_operands(rex + 1) => 2, // mov/xor reg, reg
        0x83 if register_operands(rex + 1) => 3,                      // op $imm8, reg
        0x81 if register_operands(rex + 1) => 6,                      // op $imm32, reg
        _ => return None,
    };
    Some(rex + len)
}

/// Registers saved by the entry trampolines, in the order
/// `asm/x86_64/entry.S` stores them (offsets asserted below; the assembly
/// names them `SAVED_*` in `asm/x86_64/layout.h`).
#[repr(C, align(16))]
#[derive(Debug)]
pub struct SavedRegs {
    /// First integer argument.
    pub rdi: u64,
    /// Second integer argument.
    pub rsi: u64,
    /// Third integer argument.
    pub rdx: u64,
    /// Fourth integer argument.
    pub rcx: u64,
    /// Fifth integer argument.
    pub r8: u64,
    /// Sixth integer argument.
    pub r9: u64,
    /// Vararg SSE register count / scratch.
    pub rax: u64,
    /// Static chain / scratch.
    pub r10: u64,
    /// Floating-point and vector arguments (low 128 bits).
    pub xmm: [u128; 8],
}

const _: () = {
    assert!(std::mem::offset_of!(SavedRegs, rdi) == 0);
    assert!(std::mem::offset_of!(SavedRegs, rsi) == 8);
    assert!(std::mem::offset_of!(SavedRegs, rdx) == 16);
    assert!(std::mem::offset_of!(SavedRegs, rcx) == 24);
    assert!(std::mem::offset_of!(SavedRegs, r8) == 32);
    assert!(std::mem::offset_of!(SavedRegs, r9) == 40);
    assert!(std::mem::offset_of!(SavedRegs, rax) == 48);
    assert!(std::mem::offset_of!(SavedRegs, r10) == 56);
    assert!(std::mem::offset_of!(SavedRegs, xmm) == 64);
    assert!(std::mem::size_of::<SavedRegs>() == 192);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_form_with_its_target() {
        let addr = 0x1000;
        let call = decode_call(&[0xe8, 0x10, 0, 0, 0], addr, |_| None).unwrap();
        assert_eq!(call.form, SiteForm::CallRel32);
        assert_eq!(call.target, 0x1000 + 5 + 0x10);

        let call = decode_call(&[0x67, 0xe8, 0xf0, 0xff, 0xff, 0xff], addr, |_| None).unwrap();
        assert_eq!(call.form, SiteForm::Addr32CallRel32);
        assert_eq!(call.target, 0x1000 + 6 - 0x10);

        let call = decode_call(&[0xff, 0x15, 0x00, 0x01, 0, 0], addr, |slot| {
            assert_eq!(slot, 0x1000 + 6 + 0x100);
            Some(0xdead_beef)
        })
        .unwrap();
        assert_eq!(call.form, SiteForm::CallGotRip);
        assert_eq!(call.target, 0xdead_beef);
    }

    #[test]
    fn rejects_unknown_bytes_and_unreadable_slots() {
        assert_eq!(decode_call(&NOP5, 0x1000, |_| None), None);
        assert_eq!(decode_call(&[0xe8, 0, 0], 0x1000, |_| None), None);
        assert_eq!(
            decode_call(&[0xff, 0x15, 0, 0, 0, 0], 0x1000, |_| None),
            None
        );
        assert_eq!(
            decode_call(&[0xff, 0xd0, 0, 0, 0, 0], 0x1000, |_| Some(1)),
            None
        );
    }

    #[test]
    fn addr32_prefix_belongs_to_the_call_only_at_an_instruction_boundary() {
        // gcc -O2: push %rbp; mov %rsp,%rbp; push %r13; push %r12; push %rbx;
        // sub $8,%rsp; then the call at offset 13.
        let head = [
            0x55, 0x48, 0x89, 0xe5, 0x41, 0x55, 0x41, 0x54, 0x53, 0x48, 0x83, 0xec, 0x08, 0x67,
            0xe8,
        ];
        assert!(addr32_prefix_is_part_of_call(0x100d, 0x1000, &head));
        assert!(addr32_prefix_is_part_of_call(0x1000, 0x1000, &head));
        assert!(!addr32_prefix_is_part_of_call(0x100c, 0x1000, &head));
        // `mov $0x67e58948,%eax` ends in a 67 byte: unknown, so not ours.
        let imm = [0xb8, 0x48, 0x89, 0xe5, 0x67, 0xe8];
        assert!(!addr32_prefix_is_part_of_call(0x1004, 0x1000, &imm));
    }

    #[test]
    fn decodes_exactly_the_instructions_written_at_sites() {
        let at = 0x1000;
        assert_eq!(decode_site_instruction(&NOP5, at), Some(Instruction::Nop));
        assert_eq!(decode_site_instruction(&NOP6, at), Some(Instruction::Nop));
        assert_eq!(
            decode_site_instruction(&[0xe8, 0x10, 0, 0, 0], at),
            Some(Instruction::Call {
                target: 0x1000 + 5 + 0x10
            })
        );
        assert_eq!(
            decode_site_instruction(&[0x67, 0xe8, 0xf0, 0xff, 0xff, 0xff], at),
            Some(Instruction::Call {
                target: 0x1000 + 6 - 0x10
            })
        );
        assert_eq!(
            decode_site_instruction(&[0xff, 0x15, 0x00, 0x01, 0, 0], at),
            Some(Instruction::CallIndirect {
                slot: 0x1000 + 6 + 0x100
            })
        );
        for garbage in [
            &[][..],
            &[0x90],
            &[0xe8, 0, 0, 0],
            &[0xe8, 0, 0, 0, 0, 0x90],
            &[0xff, 0xd0, 0, 0, 0, 0],
            &[0x0f, 0x1f, 0x44, 0x00, 0x01],
            &[0xcc, 0, 0, 0, 0],
        ] {
            assert_eq!(decode_site_instruction(garbage, at), None, "{garbage:02x?}");
        }
    }

    #[test]
    fn fentry_calls_lie_first_or_wrapped_in_r10_saves() {
        // gcc 12 -pg -mfentry, a GNU C nested function (objdump):
        // 41 52 push %r10; ff 15 .. call *__fentry__@GOTPCREL(%rip);
        // 41 5a pop %r10.
        let nested = [0x41, 0x52, 0xff, 0x15, 0, 0, 0, 0, 0x41, 0x5a];
        assert_eq!(fentry_placement(&nested, 2, &nested[8..]), Some(true));
        let plain = [0xff, 0x15, 0, 0, 0, 0, 0x55];
        assert_eq!(fentry_placement(&plain, 0, &plain[6..]), Some(false));
        let cet = [0xf3, 0x0f, 0x1e, 0xfa, 0xe8, 0, 0, 0, 0, 0x55];
        assert_eq!(fentry_placement(&cet, 4, &cet[9..]), Some(false));
        // A push without its pop, or the call later in the function: no.
        assert_eq!(fentry_placement(&nested, 2, &[0x55]), None);
        let later = [0x55, 0x48, 0x89, 0xe5, 0xe8, 0, 0, 0, 0];
        assert_eq!(fentry_placement(&later, 4, &[]), None);
    }

    #[test]
    fn nops_match_form_lengths() {
        assert_eq!(SiteForm::CallRel32.nop(), &NOP5);
        assert_eq!(SiteForm::Addr32CallRel32.nop(), &NOP6);
        assert_eq!(SiteForm::CallGotRip.nop(), &NOP6);
    }
}
