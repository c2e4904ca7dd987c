//! Unit tests of the patch seam: the old-bytes rule, batches, entry jumps.

use super::*;

#[test]
fn an_entry_jump_is_several_instructions_never_skipped() {
    let at = 0x40_1000;
    // push %rbp; mov %rsp,%rbp; (mov %edi,-4(%rbp)'s first byte)
    let old = [0x55, 0x48, 0x89, 0xe5, 0x89];
    let jump = [0xe9, 0x00, 0x10, 0x00, 0x00];
    let write = TextWrite::entry_jump(at, &old, &jump).unwrap();
    assert!(write.replaces_several_instructions(), "stop-the-world only");
    assert!(
        !write.skippable(),
        "a thread inside real instructions is not moved past them"
    );
    assert!(write.splits(at + 1) && write.splits(at + 4));
    assert!(!write.splits(at) && !write.splits(at + 5));
    assert_eq!(write.old_bytes(), &old);
    assert_eq!(write.new_bytes(), &jump);
    // Only `e9 rel32` over five bytes.
    assert!(TextWrite::entry_jump(at, &old, &[0xe8, 0, 0x10, 0, 0]).is_err());
    assert!(TextWrite::entry_jump(at, &old[..4], &jump[..4]).is_err());
    // gcc's one-byte NOPs stay skippable.
    let nops = TextWrite::new(at, &[0x90; 5], &[0xe8, 0, 0, 0, 0]).unwrap();
    assert!(nops.replaces_several_instructions() && nops.skippable());
}

#[test]
fn an_entry_restore_writes_the_first_bytes_back_over_the_jump() {
    let at = 0x40_1000;
    let old = [0x55, 0x48, 0x89, 0xe5, 0x89];
    let jump = [0xe9, 0x00, 0x10, 0x00, 0x00];
    let write = TextWrite::entry_restore(at, &jump, &old).unwrap();
    assert_eq!(write.old_bytes(), &jump, "checked against the jump");
    assert_eq!(write.new_bytes(), &old);
    assert!(write.replaces_several_instructions() && !write.skippable());
    // What it replaces must be the jump.
    assert!(TextWrite::entry_restore(at, &old, &old).is_err());
}

#[test]
fn new_describes_what_each_write_installs() {
    let at = 0x4000;
    let call = [0xe8, 0x0b, 0, 0, 0];
    assert_eq!(
        TextWrite::new(at, &call, &NOP5).unwrap().installs(),
        Instruction::Nop
    );
    let write = TextWrite::new(at, &NOP5, &call).unwrap();
    assert_eq!(write.installs(), Instruction::Call { target: at + 16 });
    assert_eq!((write.addr(), write.len()), (at, 5));
    assert_eq!(
        (write.old_bytes(), write.new_bytes()),
        (&NOP5[..], &call[..])
    );

    let relaxed = [0x67, 0xe8, 0xfa, 0xff, 0xff, 0xff];
    assert_eq!(
        TextWrite::new(at, &NOP6, &relaxed).unwrap().installs(),
        Instruction::Call { target: at }
    );
    let got = [0xff, 0x15, 0x10, 0, 0, 0];
    assert_eq!(
        TextWrite::new(at, &NOP6, &got).unwrap().installs(),
        Instruction::CallIndirect { slot: at + 22 }
    );
    assert_eq!(
        TextWrite::new(at, &got, &NOP6).unwrap().installs(),
        Instruction::Nop
    );
}

#[test]
fn site_toggles_are_the_writes_new_would_make() {
    let at = 0x4000;
    let forms = [
        (SiteForm::CallRel32, [0xe8, 0x0b, 0, 0, 0, 0, 0, 0]),
        (
            SiteForm::Addr32CallRel32,
            [0x67, 0xe8, 0xfa, 0xff, 0xff, 0xff, 0, 0],
        ),
        (SiteForm::CallGotRip, [0xff, 0x15, 0x10, 0, 0, 0, 0, 0]),
    ];
    for (form, call) in forms {
        let call = &call[..form.instruction_len()];
        let mut original = [0u8; 8];
        original[..call.len()].copy_from_slice(call);
        // Bytes past the instruction are not part of the write.
        original[7] = 0x99;
        let mut writes = Vec::new();
        TextWrite::push_site_toggle(&mut writes, at, form, original, true).unwrap();
        TextWrite::push_site_toggle(&mut writes, at, form, original, false).unwrap();
        let expected = [
            TextWrite::new(at, form.nop(), call).unwrap(),
            TextWrite::new(at, call, form.nop()).unwrap(),
        ];
        assert_eq!(writes, expected, "{form:?}");
        assert_eq!(
            writes[0].installs(),
            decode_site_instruction(call, at).unwrap()
        );
        assert_eq!(writes[1].installs(), Instruction::Nop);
    }
    // A recorded call whose opcode is not its form's is refused.
    let mut writes = Vec::new();
    let e8 = [0xe8, 0x0b, 0, 0, 0, 0, 0, 0];
    assert!(matches!(
        TextWrite::push_site_toggle(&mut writes, at, SiteForm::CallGotRip, e8, true),
        Err(Error::TextWrite { addr: 0x4000, .. })
    ));
    assert!(writes.is_empty());
}

#[test]
fn new_refuses_unknown_bytes_and_bad_lengths() {
    let at = 0x4000;
    for garbage in [
        &[0xcc, 0, 0, 0, 0][..],
        &[0x90, 0x90, 0x90, 0x90, 0x90],
        &[0xff, 0x25, 0, 0, 0, 0],
        &[0xe8, 0, 0, 0, 0, 0],
    ] {
        let old = vec![0u8; garbage.len()];
        assert!(
            matches!(
                TextWrite::new(at, &old, garbage),
                Err(Error::TextWrite { addr: 0x4000, .. })
            ),
            "{garbage:02x?}"
        );
    }
    assert!(TextWrite::new(at, &NOP6, &NOP5).is_err());
    assert!(TextWrite::new(at, &[], &[]).is_err());
    assert!(TextWrite::new(at, &[0; 9], &[0; 9]).is_err());
}

#[test]
fn patchable_entry_nops_may_be_replaced_and_one_byte_ones_are_marked() {
    let at = 0x4000;
    let call = [0xe8, 0x0b, 0, 0, 0];
    // gcc's five one-byte NOPs: five instructions.
    let write = TextWrite::new(at, &[0x90; 5], &call).unwrap();
    assert!(write.replaces_several_instructions());
    assert_eq!(write.installs(), Instruction::Call { target: at + 16 });
    let write = TextWrite::new(at, &[0x90; 5], &NOP5).unwrap();
    assert!(write.replaces_several_instructions());
    // A thread stopped after the first NOP is inside; at it, or after
    // the fifth, it is not.
    assert!(!write.splits(at));
    assert!((1..5).all(|offset| write.splits(at + offset)));
    assert!(!write.splits(at + 5));
    // LLVM's five-byte NOP is one instruction; so are the site forms.
    let llvm = TextWrite::new(at, &[0x0f, 0x1f, 0x44, 0x00, 0x08], &call).unwrap();
    assert!(!llvm.replaces_several_instructions());
    assert!(!TextWrite::new(at, &NOP5, &call)
        .unwrap()
        .replaces_several_instructions());
    let mut writes = Vec::new();
    let mut original = [0u8; 8];
    original[..5].copy_from_slice(&call);
    TextWrite::push_site_toggle(&mut writes, at, SiteForm::CallRel32, original, true).unwrap();
    assert!(!writes[0].replaces_several_instructions());
    // Anything else is not replaced: four NOPs and a push, a 5-byte
    // NOP with another ModRM, bytes of no instruction.
    for old in [
        &[0x90, 0x90, 0x90, 0x90, 0x55][..],
        &[0x0f, 0x1f, 0x40, 0x00, 0x00],
        &[0xcc, 0, 0, 0, 0],
    ] {
        assert!(
            matches!(
                TextWrite::new(at, old, &call),
                Err(Error::TextWrite { addr: 0x4000, .. })
            ),
            "{old:02x?}"
        );
    }
}

#[test]
fn address_order_sorts_any_batch_and_reuses_the_last_order() {
    let at = |addr| TextWrite::new(addr, &[0xe8, 0, 0, 0, 0], &NOP5).unwrap();
    let addrs = |writes: &[TextWrite]| writes.iter().map(|w| w.addr()).collect::<Vec<_>>();
    let mut order = AddressOrder::new();
    let near = [at(0x4010), at(0x4000), at(0x4020), at(0x4008)];
    assert_eq!(addrs(order.sort(&near)), [0x4000, 0x4008, 0x4010, 0x4020]);
    assert_eq!(order.order, [1, 3, 0, 2]);
    // The same sites again: the last order fits.
    assert!(order.gather_in_last_order(&near));
    assert_eq!(addrs(order.sort(&near)), [0x4000, 0x4008, 0x4010, 0x4020]);
    // Other sites in the same order of indices: it does not.
    let other = [at(0x4010), at(0x4000), at(0x4020), at(0x4030)];
    assert!(!order.gather_in_last_order(&other));
    assert_eq!(addrs(order.sort(&other)), [0x4000, 0x4010, 0x4020, 0x4030]);
    // A repeated address never passes for sorted.
    let twice = [at(0x4000), at(0x4020), at(0x4010), at(0x4000)];
    order.order = vec![0, 0, 2, 1];
    assert!(!order.gather_in_last_order(&twice));
    assert_eq!(addrs(order.sort(&twice)), [0x4000, 0x4000, 0x4010, 0x4020]);
    // Too far apart to pack address and index in 64 bits.
    let far = [at(usize::MAX - 8), at(0x10), at(1 << 62)];
    assert_eq!(addrs(order.sort(&far)), [0x10, 1 << 62, usize::MAX - 8]);
    // Already sorted: borrowed as it is.
    let one = &near[1..2];
    assert!(std::ptr::eq(order.sort(one), one));
}

#[test]
fn validate_refuses_overlapping_writes() {
    let first = TextWrite::new(0x4000, &[0xe8, 0, 0, 0, 0], &NOP5).unwrap();
    let overlapping = TextWrite::new(0x4004, &[0xe8, 0, 0, 0, 0], &NOP5).unwrap();
    let apart = TextWrite::new(0x4005, &[0xe8, 0, 0, 0, 0], &NOP5).unwrap();
    assert!(validate(&[first, apart]).is_ok());
    assert!(validate(&[first, overlapping]).is_err());
    assert!(validate(&[first, first]).is_err());
}

#[test]
fn protocols_round_trip_through_the_setting() {
    assert_eq!(patch_protocol(), DEFAULT_PROTOCOL);
    set_patch_protocol(PatchProtocol::StopTheWorld).unwrap();
    assert_eq!(patch_protocol(), PatchProtocol::StopTheWorld);
    set_patch_protocol(PatchProtocol::Breakpoint).unwrap();
    assert_eq!(patch_protocol(), PatchProtocol::Breakpoint);
    set_patch_protocol(DEFAULT_PROTOCOL).unwrap();
}

/// The protocol of a batch is chosen in one place: with the breakpoint
/// protocol set, a write over several instructions goes to the
/// stop-the-world protocol, and the breakpoint protocol, given it anyway,
/// refuses it (it does not fall back by itself) before writing anything.
#[test]
fn a_batch_an_int3_cannot_guard_goes_to_stop_the_world() {
    let is = |chosen: &'static dyn Patcher, protocol: &'static dyn Patcher| {
        std::ptr::addr_eq(chosen as *const dyn Patcher, protocol as *const dyn Patcher)
    };
    let at = 0x40_1000;
    let jump =
        TextWrite::entry_jump(at, &[0x55, 0x48, 0x89, 0xe5, 0x89], &[0xe9, 0, 0x10, 0, 0]).unwrap();
    let stop: &'static dyn Patcher = &stop_world::STOP_THE_WORLD;
    assert!(is(choose(PatchProtocol::Breakpoint, &[jump]), stop));
    assert!(is(choose(PatchProtocol::StopTheWorld, &[jump]), stop));
    // Not mapped here: an error that says why, not a write attempted.
    let refused = breakpoint::BREAKPOINT.apply(&[jump]).unwrap_err();
    assert!(
        refused.to_string().contains("several instructions"),
        "{refused}"
    );
}
