//! The first instruction a run-time entry patch leaves in place, with
//! its jump after it (see the parent module and `docs/runtime-patching.md`,
//! "Layout"): which instructions qualify and how the stub undoes and
//! redoes each.

use iced_x86::Instruction;

/// A first instruction left in place before the jump, so that a uprobe
/// set on the function later works: the kernel runs the file's first
/// instruction out of line and resumes after it, which is then the jump,
/// not the middle of it. Only instructions whose effect the stub can undo
/// before the site and redo after it, so that the tracers see the entry's
/// registers and stack, and the function then runs as built:
/// `push REG` (undone by `lea 8(%rsp),%rsp`, redone as is), `sub $N,%rsp`
/// (`lea N(%rsp),%rsp`; the flags it sets are dead at an entry), a
/// `mov REG,REG` into a callee-saved register, and a load (`mov`, `movzx`,
/// `movsx`, `lea`, not RIP-relative) into rax (nothing to undo for either:
/// the tracers keep those registers, and the arguments are intact).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Kept {
    /// Its length.
    pub(super) len: usize,
    /// What the stub runs before the site.
    pub(super) undo: Vec<u8>,
    /// What the stub runs after it, before the moved instructions.
    pub(super) redo: Vec<u8>,
}

/// `lea DISP(%rsp),%rsp`: moves the stack pointer, flags untouched.
fn lea_rsp(displacement: i32) -> Vec<u8> {
    match i8::try_from(displacement) {
        Ok(small) => vec![0x48, 0x8d, 0x64, 0x24, small as u8],
        Err(_) => {
            let mut bytes = vec![0x48, 0x8d, 0xa4, 0x24];
            bytes.extend_from_slice(&displacement.to_le_bytes());
            bytes
        }
    }
}

/// Instructions that only write their first operand and no flag: kept
/// when that operand is rax (or eax, al).
const LOADS: &[iced_x86::Code] = {
    use iced_x86::Code::*;
    &[
        Mov_rm64_r64,
        Mov_r64_rm64,
        Mov_rm32_r32,
        Mov_r32_rm32,
        Mov_r32_imm32,
        Mov_rm64_imm32,
        Mov_r8_imm8,
        Movzx_r32_rm8,
        Movzx_r32_rm16,
        Movzx_r64_rm8,
        Movzx_r64_rm16,
        Movsx_r32_rm8,
        Movsx_r32_rm16,
        Movsx_r64_rm8,
        Movsx_r64_rm16,
        Movsxd_r64_rm32,
        Lea_r64_m,
        Lea_r32_m,
    ]
};

/// The [`Kept`] form of `first` (whose bytes are `bytes`), if it is one
/// the stub can undo and redo.
pub(super) fn kept_in_place(first: &Instruction, bytes: &[u8]) -> Option<Kept> {
    use iced_x86::{Code, OpKind, Register};
    let register = |n| (first.op_kind(n) == OpKind::Register).then(|| first.op_register(n));
    let callee_saved = |r: Register| {
        matches!(
            r,
            Register::RBX
                | Register::RBP
                | Register::R12
                | Register::R13
                | Register::R14
                | Register::R15
        )
    };
    let (undo, redo) = match first.code() {
        Code::Push_r64 if register(0) != Some(Register::RSP) => (lea_rsp(8), bytes.to_vec()),
        Code::Sub_rm64_imm8 | Code::Sub_rm64_imm32 if register(0) == Some(Register::RSP) => {
            let size = i32::try_from(first.immediate(1) as i64).ok()?;
            (lea_rsp(size), bytes.to_vec())
        }
        // A load into the return-value register (rdi, rsi… keep the
        // arguments the tracers read; rax is kept by every trampoline):
        // nothing to undo; it stands after the site.
        code if LOADS.contains(&code)
            && matches!(
                register(0),
                Some(Register::RAX | Register::EAX | Register::AL)
            )
            && !first.is_ip_rel_memory_operand() =>
        {
            (Vec::new(), Vec::new())
        }
        Code::Mov_rm64_r64 | Code::Mov_r64_rm64 => {
            let (to, from) = (register(0)?, register(1)?);
            if !callee_saved(to) || from == Register::RSP || from == to {
                return None;
            }
            (Vec::new(), Vec::new())
        }
        _ => return None,
    };
    Some(Kept {
        len: first.len(),
        undo,
        redo,
    })
}
