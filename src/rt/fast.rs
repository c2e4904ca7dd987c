//! The graph tracer's fast paths (`asm/x86_64/graph.S` for entries, the
//! start of `asm/x86_64/return.S` for exits): their entry points, how a site
//! calls them, and the flag that lets exits use them.
//!
//! A site selected by the graph tracer alone, while the graph tracer has no
//! run-time limits, is patched to call `fntrace_graph_mcount` /
//! `fntrace_graph_fentry` instead of the generic trampoline: no site-table
//! probe, no register save area, no call into Rust. Anything unusual falls
//! back to the generic path, which stays the reference behaviour.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::arch::x86_64::SiteForm;
use crate::sites::SiteKind;

extern "C" {
    fn fntrace_graph_mcount();
    fn fntrace_graph_fentry();
    /// The graph tracer's bit while exits may take the fast path, else 0.
    static fntrace_graph_fast_bit: AtomicU64;
}

/// The fast entry for sites of `kind`.
pub(crate) fn entry_address(kind: SiteKind) -> usize {
    match kind {
        SiteKind::Mcount => fntrace_graph_mcount as *const () as usize,
        SiteKind::Fentry => fntrace_graph_fentry as *const () as usize,
    }
}

/// Sets the mask that frames pushed by the fast entry carry, and that the
/// fast exit requires (0 turns the fast exit off).
pub(crate) fn set_exit_bit(bit: u64) {
    // SAFETY: a plain atomic defined in graph.S, valid for the whole process.
    unsafe { fntrace_graph_fast_bit.store(bit, Ordering::Release) };
}

/// The bytes of a site at `addr` in `form` calling the fast entry for
/// `kind`: `e8 rel32` (5-byte forms) or `67 e8 rel32` (6-byte forms, the
/// encoding the linker itself relaxes `ff 15` GOT calls to). `None` when
/// the fast entry is out of a rel32's reach.
pub(crate) fn call_bytes(addr: usize, form: SiteForm, kind: SiteKind) -> Option<[u8; 8]> {
    let len = form.instruction_len();
    let next = addr.checked_add(len)?;
    let rel = (entry_address(kind) as i128 - next as i128)
        .try_into()
        .ok()?;
    let rel: i32 = rel;
    let mut bytes = [0u8; 8];
    let opcode_at = len - 5;
    if opcode_at == 1 {
        bytes[0] = 0x67;
    }
    bytes[opcode_at] = 0xe8;
    bytes[opcode_at + 1..len].copy_from_slice(&rel.to_le_bytes());
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_bytes_encode_a_direct_call_of_the_site_length() {
        let target = entry_address(SiteKind::Mcount);
        let addr = target - 0x1000;
        let five = call_bytes(addr, SiteForm::CallRel32, SiteKind::Mcount).unwrap();
        let rel: i32 = 0x1000 - 5;
        assert_eq!(five[0], 0xe8);
        assert_eq!(five[1..5], rel.to_le_bytes());
        assert_eq!(five[5..], [0, 0, 0]);
        let six = call_bytes(addr, SiteForm::CallGotRip, SiteKind::Mcount).unwrap();
        let rel: i32 = 0x1000 - 6;
        assert_eq!(six[..2], [0x67, 0xe8]);
        assert_eq!(six[2..6], rel.to_le_bytes());
    }

    #[test]
    fn call_bytes_refuse_targets_beyond_rel32() {
        let target = entry_address(SiteKind::Fentry);
        let far = target.wrapping_add(3 << 30);
        assert_eq!(call_bytes(far, SiteForm::CallRel32, SiteKind::Fentry), None);
    }
}
