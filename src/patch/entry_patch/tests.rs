//! The entry patcher's plans and stubs, on hand-assembled functions.
use super::*;

const AT: usize = 0x40_1000;

/// [`plan`] of code whose indirect jumps read nothing.
fn plan_of(code: &[u8], start: usize) -> Result<Plan, Refusal> {
    plan(code, start, &FixedMemory::default())
}

#[test]
fn moves_whole_instructions_of_at_least_five_bytes() {
    // xor %eax,%eax; add %esi,%eax; add $1,%eax; ret: nothing kept (the
    // xor sets flags).
    let code = [0x31, 0xc0, 0x01, 0xf0, 0x83, 0xc0, 0x01, 0xc3];
    let plan = plan_of(&code, AT).unwrap();
    assert_eq!((plan.at, plan.len, plan.site_offset()), (AT, 7, 0));
    // After endbr64.
    let mut cet = ENDBR64.to_vec();
    cet.extend_from_slice(&code);
    let plan2 = plan_of(&cet, AT).unwrap();
    assert_eq!((plan2.at, plan2.len), (AT + 4, 7));
    let stub = 0x40_8000;
    let bytes = stub_bytes(&plan, stub).unwrap();
    assert_eq!(&bytes[..5], &NOP5);
    assert_eq!(&bytes[5..12], &code[..7]);
    assert_eq!(bytes[12], JMP_REL32);
    let back = i32::from_le_bytes(bytes[13..17].try_into().unwrap());
    assert_eq!((stub + 17).wrapping_add_signed(back as isize), AT + 7);
    assert!(bytes[17..].iter().all(|&b| b == 0xcc));
}

/// The stub of `code` at `stub`, with its plan checked: the jump after
/// the first `kept` bytes, `moved` bytes moved.
fn kept_stub(code: &[u8], kept: usize, moved: usize, stub: usize) -> Vec<u8> {
    let plan = plan_of(code, AT).unwrap();
    assert_eq!((plan.at, plan.len), (AT + kept, moved), "{code:x?}");
    let bytes = stub_bytes(&plan, stub).unwrap();
    let site = plan.site_offset();
    assert_eq!(&bytes[site..site + 5], &NOP5);
    bytes
}

#[test]
fn a_first_push_sub_or_register_copy_stays_in_place() {
    let stub = 0x40_8000;
    // push %rbp; mov %rsp,%rbp; push %r13; ...: the push stays; the stub
    // undoes it (lea 8(%rsp),%rsp), has its site, pushes again, moves the
    // next 5 bytes and jumps back after them.
    let code = [0x55, 0x48, 0x89, 0xe5, 0x41, 0x55, 0x5d, 0xc3];
    let bytes = kept_stub(&code, 1, 5, stub);
    assert_eq!(&bytes[..5], &[0x48, 0x8d, 0x64, 0x24, 0x08]);
    assert_eq!(&bytes[10..11], &[0x55]);
    assert_eq!(&bytes[11..16], &code[1..6]);
    assert_eq!(bytes[16], JMP_REL32);
    let back = i32::from_le_bytes(bytes[17..21].try_into().unwrap());
    assert_eq!((stub + 21).wrapping_add_signed(back as isize), AT + 6);
    // After endbr64, push %r15 (41 57).
    let mut cet = ENDBR64.to_vec();
    cet.extend_from_slice(&[0x41, 0x57, 0x48, 0x89, 0xe5, 0x41, 0x55, 0x5d, 0xc3]);
    let bytes = kept_stub(&cet, 4 + 2, 5, stub);
    assert_eq!(&bytes[5..12], &[0x0f, 0x1f, 0x44, 0, 0, 0x41, 0x57]);
    // sub $0x18,%rsp: lea 0x18(%rsp),%rsp before the site.
    let code = [
        0x48, 0x83, 0xec, 0x18, 0x89, 0xf8, 0x01, 0xf0, 0x01, 0xd0, 0xc3,
    ];
    let bytes = kept_stub(&code, 4, 6, stub);
    assert_eq!(&bytes[..5], &[0x48, 0x8d, 0x64, 0x24, 0x18]);
    assert_eq!(&bytes[10..14], &code[..4]);
    // sub $0x1000,%rsp: a 32-bit displacement.
    let code = [
        0x48, 0x81, 0xec, 0x00, 0x10, 0, 0, 0x89, 0xf8, 0x01, 0xf0, 0x01, 0xd0, 0xc3,
    ];
    let bytes = kept_stub(&code, 7, 6, stub);
    assert_eq!(&bytes[..8], &[0x48, 0x8d, 0xa4, 0x24, 0x00, 0x10, 0, 0]);
    // mov %rdi,%rbx: nothing to undo or redo.
    let code = [0x48, 0x89, 0xfb, 0x89, 0xf8, 0x01, 0xf0, 0x01, 0xd0, 0xc3];
    let bytes = kept_stub(&code, 3, 6, stub);
    assert_eq!(&bytes[..5], &NOP5);
    assert_eq!(&bytes[5..11], &code[3..9]);
    // Loads into rax: mov %rdi,%rax; mov 8(%rsi),%eax.
    for (load, len) in [(&[0x48, 0x89, 0xf8][..], 3), (&[0x8b, 0x46, 0x08][..], 3)] {
        let mut code = load.to_vec();
        code.extend_from_slice(&[0x89, 0xf8, 0x01, 0xf0, 0x01, 0xd0, 0xc3]);
        let bytes = kept_stub(&code, len, 6, stub);
        assert_eq!(&bytes[..5], &NOP5);
    }
    // Not kept: a copy into an argument register, or of the stack
    // pointer; a push whose function has under 5 bytes after it; a load
    // into an argument register, or RIP-relative.
    for code in [
        &[0x48, 0x8b, 0x3f, 0x89, 0xf8, 0x01, 0xf0, 0x01, 0xd0, 0xc3][..],
        &[
            0x48, 0x8b, 0x05, 0x10, 0, 0, 0, 0x89, 0xf8, 0x01, 0xf0, 0xc3,
        ][..],
        &[0x48, 0x89, 0xdf, 0x89, 0xf8, 0x01, 0xf0, 0x01, 0xd0, 0xc3][..],
        &[0x48, 0x89, 0xe3, 0x89, 0xf8, 0x01, 0xf0, 0x01, 0xd0, 0xc3][..],
        &[0x53, 0x89, 0xf8, 0x01, 0xf0, 0xc3][..],
    ] {
        let plan = plan_of(code, AT).unwrap();
        assert_eq!((plan.at, plan.site_offset()), (AT, 0), "{code:x?}");
    }
}

#[test]
fn relocates_rip_relative_operands() {
    // mov 0x100(%rip),%eax (6 bytes); ret
    let code = [0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0xc3];
    let plan = plan_of(&code, AT).unwrap();
    assert_eq!(plan.len, 6);
    let stub = AT + 0x10_0000;
    let bytes = stub_bytes(&plan, stub).unwrap();
    let disp = i32::from_le_bytes(bytes[7..11].try_into().unwrap());
    assert_eq!(
        (stub + 11).wrapping_add_signed(disp as isize),
        AT + 6 + 0x100,
        "same operand address from the stub"
    );
    // Out of reach from a stub 3 GiB away.
    assert_eq!(
        stub_bytes(&plan, AT + (3 << 30)).unwrap_err(),
        Refusal::NotRelocatable
    );
}

#[test]
fn refuses_what_is_not_safe() {
    // xor %eax,%eax; ret: 3 bytes.
    assert_eq!(
        plan_of(&[0x31, 0xc0, 0xc3], AT).unwrap_err(),
        Refusal::TooShort
    );
    // ret in the first five bytes.
    assert_eq!(
        plan_of(&[0x31, 0xc0, 0xc3, 0x90, 0x90, 0x90], AT).unwrap_err(),
        Refusal::EndsInEntry
    );
    // A uprobe's int3 over `imul $0x9e3779b1,%rdi,%rax` (rustc's first
    // instruction of a hash function), and after an endbr64.
    let probed = [0xcc, 0x69, 0xc7, 0xb1, 0x79, 0x37, 0x9e, 0xc3];
    assert_eq!(plan_of(&probed, AT).unwrap_err(), Refusal::Breakpoint);
    let probed_after_endbr = [0xf3, 0x0f, 0x1e, 0xfa, 0xcc, 0x89, 0xe5, 0x90, 0x90, 0xc3];
    assert_eq!(
        plan_of(&probed_after_endbr, AT).unwrap_err(),
        Refusal::Breakpoint
    );
    // A call that is not the last moved instruction: call *%rax.
    assert_eq!(
        plan_of(&[0xff, 0xd0, 0x90, 0x90, 0x90, 0xc3], AT).unwrap_err(),
        Refusal::CallInEntry
    );
    // A loop back to the second instruction: 1: nop; 2: dec %edi;
    // jne 2b; ret.
    let looped = [0x90, 0xff, 0xcf, 0x75, 0xfc, 0xc3];
    assert_eq!(plan_of(&looped, AT).unwrap_err(), Refusal::BranchIntoEntry);
    // A loop back to the entry itself.
    let to_entry = [0xff, 0xcf, 0x0f, 0x1f, 0x00, 0x75, 0xf9, 0xc3];
    assert_eq!(
        plan_of(&to_entry, AT).unwrap_err(),
        Refusal::BranchIntoEntry
    );
    // jmp *%rax anywhere.
    let indirect = [0x48, 0x89, 0xf8, 0x90, 0x90, 0xff, 0xe0];
    assert_eq!(plan_of(&indirect, AT).unwrap_err(), Refusal::IndirectJump);
    // Bytes that decode as nothing.
    assert_eq!(
        plan_of(&[0x48, 0x89, 0xf8, 0x90, 0x90, 0x06], AT).unwrap_err(),
        Refusal::Undecodable
    );
    // A call ending the moved bytes moves (gcc -O2: `call w_leaf`
    // first), re-aimed at its target from the stub.
    let first = [0xe8, 0x10, 0, 0, 0, 0xc3];
    let p = plan_of(&first, AT).unwrap();
    assert_eq!(p.len, 5);
    let bytes = stub_bytes(&p, AT + 0x1000).unwrap();
    let call = Decoder::with_ip(64, &bytes[5..], AT as u64 + 0x1005, DecoderOptions::NONE).decode();
    assert_eq!(call.near_branch_target() as usize, AT + 0x15);
    // A recursive call of the start is fine.
    let recursive = [
        0x55, 0x48, 0x89, 0xe5, 0x90, 0xe8, 0xf6, 0xff, 0xff, 0xff, 0x5d, 0xc3,
    ];
    assert!(plan_of(&recursive, AT).is_ok());
    // A conditional branch out of the moved bytes is re-aimed.
    let early = [0x85, 0xff, 0x74, 0x03, 0x90, 0x90, 0x90, 0xc3];
    let p = plan_of(&early, AT).unwrap();
    assert_eq!(p.len, 5);
    let stub = AT + 0x1000;
    let bytes = stub_bytes(&p, stub).unwrap();
    let mut decoder = Decoder::with_ip(64, &bytes[5..], stub as u64 + 5, DecoderOptions::NONE);
    let test = decoder.decode();
    let branch = decoder.decode();
    assert_eq!(test.len(), 2);
    assert_eq!(branch.flow_control(), FlowControl::ConditionalBranch);
    assert_eq!(branch.near_branch_target() as usize, AT + 7);
}

/// `[addr, addr + len)` as a range.
fn span(addr: usize, len: usize) -> std::ops::Range<usize> {
    addr..addr + len
}

#[test]
fn tail_calls_through_a_read_only_slot_are_followed() {
    // push %rbx; mov %rdi,%rbx; pop %rbx; jmp *slot(%rip): rustc's
    // `jmp *__rust_dealloc@GOTPCREL(%rip)` at the end of a function.
    let slot = std::cell::Cell::new(0u64);
    let slot_at = slot.as_ptr() as usize;
    let start = slot_at - 0x1000;
    let disp = (slot_at as i64 - (start + 11) as i64) as i32;
    let mut code = vec![0x53, 0x48, 0x89, 0xfb, 0x5b, 0xff, 0x25];
    code.extend_from_slice(&disp.to_le_bytes());
    let fixed = FixedMemory::with(vec![span(slot_at, 8)], vec![]);
    let with_target = |target: usize| {
        slot.set(target as u64);
        plan(&code, start, &fixed)
    };
    // The push stays (see `a_first_push_sub_or_register_copy_stays_in_place`).
    let followed = with_target(0x7000_0000).unwrap();
    assert_eq!((followed.at, followed.len), (start + 1, 10));
    // A slot holding an address in the moved bytes, or the start (a
    // tail call of itself would count as a call).
    assert_eq!(
        with_target(start + 1).unwrap_err(),
        Refusal::BranchIntoEntry
    );
    assert_eq!(with_target(start).unwrap_err(), Refusal::BranchIntoEntry);
    // A slot in writable memory (a hook set at run time): a tail call
    // to whatever function it holds then.
    assert_eq!(plan_of(&code, start).unwrap().len, 10);
}

#[test]
fn functions_made_of_a_tail_call_move_whole() {
    // sqlite3_bind_int at -O2: movslq %edx,%rdx; jmp sqlite3_bind_int64.
    let bind = [0x48, 0x63, 0xd2, 0xe9, 0x10, 0x00, 0x00, 0x00];
    let p = plan_of(&bind, AT).unwrap();
    assert_eq!(p.len, 8);
    let stub = AT + 0x1000;
    let bytes = stub_bytes(&p, stub).unwrap();
    let mut decoder = Decoder::with_ip(64, &bytes[5..], stub as u64 + 5, DecoderOptions::NONE);
    assert_eq!(decoder.decode().len(), 3);
    let jump = decoder.decode();
    assert_eq!(jump.flow_control(), FlowControl::UnconditionalBranch);
    assert_eq!(jump.near_branch_target() as usize, AT + 8 + 0x10);
    // sqlite3_free at -O2: jmp *hook(%rip), the hook in writable data.
    let free = [0xff, 0x25, 0x00, 0x01, 0x00, 0x00];
    let p = plan_of(&free, AT).unwrap();
    assert_eq!(p.len, 6);
    let bytes = stub_bytes(&p, stub).unwrap();
    let jump = Decoder::with_ip(64, &bytes[5..], stub as u64 + 5, DecoderOptions::NONE).decode();
    assert_eq!(jump.flow_control(), FlowControl::IndirectBranch);
    assert_eq!(jump.ip_rel_memory_address() as usize, AT + 6 + 0x100);
    // A jump that ends before five bytes, over padding: gcc -O2's loop
    // that starts with its test (sqlite3ExprCanBeNull: `jmp TEST; nopw`).
    // The padding moves too; the stub runs the jump, re-aimed.
    let rotated = [
        0xeb, 0x0a, 0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x48, 0x8b, 0x7f, 0x08, 0x0f, 0xb6, 0x07,
        0xc3,
    ];
    let p = plan_of(&rotated, AT).unwrap();
    assert_eq!(p.len, 8);
    let bytes = stub_bytes(&p, stub).unwrap();
    let jump = Decoder::with_ip(64, &bytes[5..], stub as u64 + 5, DecoderOptions::NONE).decode();
    assert_eq!(jump.flow_control(), FlowControl::UnconditionalBranch);
    assert_eq!(jump.near_branch_target() as usize, AT + 0x0c);
    // Its target inside the moved bytes: refused.
    let into = [0xeb, 0x01, 0x90, 0x90, 0x90, 0x90, 0xc3];
    assert_eq!(plan_of(&into, AT).unwrap_err(), Refusal::BranchIntoEntry);
    // ret within them.
    let short = [0xc3, 0x90, 0x90, 0x90, 0x90, 0xc3];
    assert_eq!(plan_of(&short, AT).unwrap_err(), Refusal::EndsInEntry);
}

/// nop5; lea T(%rip),%rcx; movslq (%rcx,%rax,4),%rax; add %rcx,%rax;
/// jmp *%rax; then three `ret`s (the cases, at 21, 22, 23), at
/// `start`, with a table at `table`.
fn switch(start: usize, table: usize) -> Vec<u8> {
    let mut code = NOP5.to_vec();
    code.extend_from_slice(&[0x48, 0x8d, 0x0d]);
    let disp = (table as i64 - (start + 12) as i64) as i32;
    code.extend_from_slice(&disp.to_le_bytes());
    code.extend_from_slice(&[0x48, 0x63, 0x04, 0x81, 0x48, 0x01, 0xc8, 0xff, 0xe0]);
    code.extend_from_slice(&[0xc3, 0xc3, 0xc3]);
    code
}

#[test]
fn jump_tables_are_read_to_their_end() {
    let table: [std::cell::Cell<i32>; 4] = Default::default();
    let table_at = table.as_ptr() as usize;
    let start = table_at - 0x10000;
    let code = switch(start, table_at);
    let fixed = FixedMemory::with(
        vec![span(table_at, 16), span(start, code.len())],
        vec![span(start, code.len())],
    );
    let entry = |to: usize| (to as i64 - table_at as i64) as i32;
    let with_entries = |entries: [usize; 3]| {
        for (slot, to) in table.iter().zip(entries) {
            slot.set(entry(to));
        }
        // The fourth stays 0: it targets the table, not code (the end).
        plan(&code, start, &fixed)
    };
    assert_eq!(
        with_entries([start + 21, start + 22, start + 23])
            .unwrap()
            .len,
        5
    );
    // A case at the moved bytes.
    assert_eq!(
        with_entries([start + 21, start + 3, start + 23]).unwrap_err(),
        Refusal::BranchIntoEntry
    );
    // A case on the `add`: another path into the four instructions.
    assert_eq!(
        with_entries([start + 21, start + 16, start + 23]).unwrap_err(),
        Refusal::IndirectJump
    );
    // No read-only table: refused as any indirect jump.
    assert_eq!(plan_of(&code, start).unwrap_err(), Refusal::IndirectJump);
}

#[test]
fn absolute_jump_tables_are_read_too() {
    // gcc -fno-pie: `jmp *T(,%rax,8)`, T a 32-bit absolute address: a
    // table in a page mapped low, at a free address.
    const LOW: usize = 0x3f00_0000;
    // SAFETY: a new private anonymous page; MAP_FIXED_NOREPLACE fails
    // rather than replace a mapping. Unmapped below.
    let page = unsafe {
        libc::mmap(
            LOW as *mut libc::c_void,
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_eq!(page as usize, LOW, "a free page at {LOW:#x}");
    let start = LOW + 0x100;
    // nop5; jmp *LOW(,%rax,8); ret; ret
    let mut code = NOP5.to_vec();
    code.extend_from_slice(&[0xff, 0x24, 0xc5]);
    code.extend_from_slice(&(LOW as u32).to_le_bytes());
    code.extend_from_slice(&[0xc3, 0xc3]);
    let fixed = FixedMemory::with(vec![span(LOW, PAGE)], vec![span(start, code.len())]);
    let with_entries = |entries: &[usize]| {
        for (k, to) in entries.iter().enumerate() {
            // SAFETY: inside the page mapped read-write above.
            unsafe { ((LOW + 8 * k) as *mut u64).write(*to as u64) };
        }
        plan(&code, start, &fixed)
    };
    // Two cases, then a zero entry (not code): the end of the table.
    assert!(with_entries(&[start + 12, start + 13, 0]).is_ok());
    assert_eq!(
        with_entries(&[start + 12, start + 1, 0]).unwrap_err(),
        Refusal::BranchIntoEntry
    );
    // SAFETY: the page mapped above; nothing refers to it any more.
    unsafe { libc::munmap(page, PAGE) };
}

#[test]
fn a_table_lea_may_stand_a_little_before_its_load() {
    // gcc: lea T(%rip),%rcx; mov %edx,%eax; movslq ...; add; jmp *%rax.
    let table: [std::cell::Cell<i32>; 2] = Default::default();
    let table_at = table.as_ptr() as usize;
    let start = table_at - 0x10000;
    let between = |extra: &[u8]| {
        let mut code = switch(start, table_at);
        // The lea's displacement counts from its own end: unchanged.
        code.splice(12..12, extra.iter().copied());
        code
    };
    let fixed =
        |code: &[u8]| FixedMemory::with(vec![span(table_at, 8)], vec![span(start, code.len())]);
    let gcc = between(&[0x89, 0xd0]);
    table[0].set((start + 23) as i32 - table_at as i32);
    assert!(plan(&gcc, start, &fixed(&gcc)).is_ok());
    // `mov %edx,%ecx` overwrites the table's address: not a table.
    let clobbered = between(&[0x89, 0xd1]);
    assert_eq!(
        plan(&clobbered, start, &fixed(&clobbered)).unwrap_err(),
        Refusal::IndirectJump
    );
}
