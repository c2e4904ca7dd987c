//! Where an indirect jump of a function can go, for run-time entry
//! patching (`patch::entry_patch`): a function is patched only if no
//! branch of it targets the bytes moved out of its entry, and an indirect
//! jump was refused outright. Two forms are read instead, because the
//! memory that decides their targets cannot change:
//!
//! - **A tail call through a GOT slot**, `jmp *foo@GOTPCREL(%rip)`
//!   (`ff 25 disp32`): rustc compiles calls to functions outside the
//!   crate without a PLT (a `cargo build --release` binary of the tests
//!   has 113 functions whose only indirect jumps are these, most of them
//!   `drop_in_place` instances ending in `jmp *__rust_dealloc@GOTPCREL`),
//!   and so does gcc `-fno-plt`. The target is the slot's value.
//! - **A switch's jump table**, LLVM's and gcc's position-independent
//!   form, four instructions:
//!
//!   ```text
//!   lea    T(%rip),%rA
//!   movslq (%rA,%rI,4),%rB
//!   add    %rA,%rB
//!   jmp    *%rB
//!   ```
//!
//!   (up to three instructions that neither branch nor write `%rA` may
//!   stand between the `lea` and the `movslq`: gcc's `mov %edx,%eax`),
//!   and gcc's `-fno-pie` form `jmp *T(,%rI,8)`. The targets are the
//!   table's entries (`T + entry`, or the entry itself). The table's
//!   length is not known (the bound check precedes it somewhere): entries
//!   are read while they lie in read-only memory and target executable
//!   memory. Every real entry targets code (the function, or its `.cold`
//!   part), so the real table is read whole; what follows it is read too
//!   until a value does not target code (a zero entry targets the table
//!   itself), which can only refuse more.
//!
//! Both are trusted only when the slot or the table lies in memory that is
//! mapped read-only when the function is patched (the GOT after RELRO,
//! `.rodata`): a writable slot (lazy binding, a function pointer in
//! `.data`) could later hold anything. Other indirect jumps (`jmp *%rax`
//! after a vtable load: a virtual tail call) stay refused.

use std::ops::Range;

use iced_x86::{
    Code, FlowControl, Instruction, InstructionInfoFactory, OpAccess, OpKind, Register,
};

use crate::sys::maps;

/// Most entries read from one jump table; a longer run refuses the
/// function.
const MAX_ENTRIES: usize = 1 << 16;

/// The process's memory that does not change while it is read here
/// (private mappings readable and not writable), and its code (every
/// executable mapping).
#[derive(Debug, Default)]
pub(crate) struct FixedMemory {
    read_only: Vec<Range<usize>>,
    text: Vec<Range<usize>>,
}

impl FixedMemory {
    /// The calling process's, from `/proc/thread-self/maps` (none if it
    /// cannot be read: every indirect jump is then refused).
    pub(crate) fn of_process() -> FixedMemory {
        let mut memory = FixedMemory::default();
        for mapping in maps::thread_self().unwrap_or_default() {
            // Text already patched is a shared R-X mapping of a memfd
            // (`patch::alias`): still code. Its bytes change through the
            // alias's writable view, so a shared mapping is never taken
            // for memory whose contents are fixed.
            if mapping.execute {
                memory.text.push(mapping.start..mapping.end);
            }
            if mapping.read && !mapping.write && !mapping.shared {
                memory.read_only.push(mapping.start..mapping.end);
            }
        }
        memory
    }

    /// `read_only` ranges, the executable ones also in `text` (tests).
    #[cfg(test)]
    pub(crate) fn with(read_only: Vec<Range<usize>>, text: Vec<Range<usize>>) -> FixedMemory {
        FixedMemory { read_only, text }
    }

    /// The `N` bytes at `addr`, if they lie in one read-only mapping.
    fn read<const N: usize>(&self, addr: usize) -> Option<[u8; N]> {
        let end = addr.checked_add(N)?;
        self.read_only
            .iter()
            .any(|r| r.start <= addr && end <= r.end)
            .then(|| {
                // SAFETY: `[addr, addr + N)` lies inside a readable mapping
                // (checked above), which this process does not unmap while
                // it patches (the loader's lock is held: no `dlclose`).
                unsafe { std::ptr::read_unaligned(addr as *const [u8; N]) }
            })
    }

    fn is_text(&self, addr: usize) -> bool {
        self.text.iter().any(|r| r.contains(&addr))
    }
}

/// Instructions allowed between a jump table's `lea` and its `movslq`
/// (gcc puts the index's zero extension there, `mov %edx,%eax`).
const MAX_BETWEEN: usize = 3;

/// Where the indirect jump `all[at]` (the function's instructions, in
/// order) can go, or `None` if that cannot be known.
pub(crate) struct Reached {
    /// Its targets.
    pub targets: Vec<usize>,
    /// For a jump table, the instructions after the `lea` up to the jump
    /// (their addresses): a branch landing there could arrive with another
    /// table address in the register, so none may (the caller checks).
    pub tail: Option<Range<usize>>,
}

/// See [`Reached`].
pub(crate) fn targets(all: &[Instruction], at: usize, memory: &FixedMemory) -> Option<Reached> {
    let jump = &all[at];
    match jump.code() {
        Code::Jmp_rm64 if jump.op0_kind() == OpKind::Memory => {
            let targets = if jump.is_ip_rel_memory_operand() {
                // jmp *slot(%rip): a tail call through the GOT.
                let slot = jump.ip_rel_memory_address() as usize;
                vec![u64::from_le_bytes(memory.read(slot)?) as usize]
            } else if jump.memory_base() == Register::None
                && jump.memory_index() != Register::None
                && jump.memory_index_scale() == 8
            {
                // jmp *T(,%rI,8): gcc's absolute table (-fno-pie).
                let table = jump.memory_displacement64() as usize;
                read_table(memory, table, 8, |bytes| {
                    u64::from_le_bytes(bytes.try_into().unwrap()) as usize
                })?
            } else {
                return None;
            };
            Some(Reached {
                targets,
                tail: None,
            })
        }
        Code::Jmp_rm64 if jump.op0_kind() == OpKind::Register => {
            let [load, add] = all.get(at.checked_sub(2)?..at)? else {
                return None;
            };
            let base = load.memory_base();
            let entry = load.op0_register();
            // `add %rA,%rB` (LLVM, gcc) or `add %rB,%rA`; the jump goes
            // through the sum.
            let (sum, addend) = (add.op0_register(), add.op1_register());
            let is_table = load.code() == Code::Movsxd_r64_rm32
                && load.op1_kind() == OpKind::Memory
                && base != Register::None
                && load.memory_index_scale() == 4
                && load.memory_displacement64() == 0
                && entry != base
                && matches!(add.code(), Code::Add_rm64_r64 | Code::Add_r64_rm64)
                && add.op0_kind() == OpKind::Register
                && add.op1_kind() == OpKind::Register
                && ((sum, addend) == (entry, base) || (sum, addend) == (base, entry))
                && jump.op0_register() == sum;
            if !is_table {
                return None;
            }
            let lea = table_lea(all, at - 2, base)?;
            let table = lea.ip_rel_memory_address() as usize;
            let targets = read_table(memory, table, 4, |bytes| {
                table.wrapping_add_signed(i32::from_le_bytes(bytes.try_into().unwrap()) as isize)
            })?;
            Some(Reached {
                targets,
                tail: Some(lea.next_ip() as usize..jump.next_ip() as usize),
            })
        }
        _ => None,
    }
}

/// The `lea T(%rip),%base` at most [`MAX_BETWEEN`] instructions before
/// `all[load]`, with nothing between that writes `base` or branches.
fn table_lea(all: &[Instruction], load: usize, base: Register) -> Option<&Instruction> {
    let mut info = InstructionInfoFactory::new();
    for index in (load.saturating_sub(MAX_BETWEEN + 1)..load).rev() {
        let instruction = &all[index];
        if instruction.code() == Code::Lea_r64_m && instruction.op0_register() == base {
            return instruction
                .is_ip_rel_memory_operand()
                .then_some(instruction);
        }
        if instruction.flow_control() != FlowControl::Next {
            return None;
        }
        let writes_base = info.info(instruction).used_registers().iter().any(|used| {
            used.register().full_register() == base.full_register()
                && !matches!(used.access(), OpAccess::Read | OpAccess::CondRead)
        });
        if writes_base {
            return None;
        }
    }
    None
}

/// The addresses a jump table at `table` holds: entries of `size` bytes
/// decoded by `target`, read while they lie in read-only memory and target
/// executable memory.
fn read_table(
    memory: &FixedMemory,
    table: usize,
    size: usize,
    target: impl Fn(&[u8]) -> usize,
) -> Option<Vec<usize>> {
    let mut targets = Vec::new();
    for k in 0..MAX_ENTRIES {
        let addr = table.checked_add(k * size)?;
        let value = match size {
            4 => memory.read::<4>(addr).map(|b| target(&b)),
            _ => memory.read::<8>(addr).map(|b| target(&b)),
        };
        match value {
            Some(to) if memory.is_text(to) => targets.push(to),
            // The first entry must be code: else this is no table.
            _ if targets.is_empty() => return None,
            _ => return Some(targets),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patched_text_is_still_code() {
        // Text fntrace has written is a shared R-X mapping of a memfd
        // (`patch::alias`). Before, only private mappings were looked at:
        // a jump table's targets there were taken for no code, and every
        // function with a switch on a page already written was refused.
        const LEN: usize = 4096;
        // SAFETY: a new memfd of our own, sized, mapped shared R-X at an
        // address the kernel picks, unmapped and closed below.
        let (fd, page) = unsafe {
            let fd = libc::memfd_create(c"fntrace-indirect-test".as_ptr(), 0);
            assert!(fd >= 0, "memfd_create");
            assert_eq!(libc::ftruncate(fd, LEN as libc::off_t), 0);
            let page = libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_SHARED,
                fd,
                0,
            );
            assert_ne!(page, libc::MAP_FAILED, "a shared R-X mapping");
            (fd, page as usize)
        };
        let memory = FixedMemory::of_process();
        assert!(memory.is_text(page + 16), "shared text is code");
        // Its bytes can change (through the alias's writable view): never
        // read as a GOT slot or a table.
        assert_eq!(memory.read::<8>(page + 16), None);
        // SAFETY: the mapping and descriptor made above; nothing uses them.
        unsafe {
            libc::munmap(page as *mut libc::c_void, LEN);
            libc::close(fd);
        }
    }
}
