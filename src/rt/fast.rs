//! The graph tracer's fast paths (`asm/x86_64/graph.S` for entries, the
//! start of `asm/x86_64/return.S` for exits): their entry points, how a site
//! calls them, and the flag that lets exits use them.
//!
//! A site selected by the graph tracer alone, while the graph tracer has no
//! duration limit (the fast paths apply its depth limit), is patched to call `fntrace_graph_mcount` /
//! `fntrace_graph_fentry` instead of the generic trampoline: no site-table
//! probe, no register save area, no call into Rust. Anything unusual falls
//! back to the generic path, which stays the reference behaviour.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::arch::x86_64::SiteForm;
use crate::sites::SiteKind;

extern "C" {
    fn fntrace_graph_mcount();
    fn fntrace_graph_fentry();
    /// The graph tracer's bit while exits may take the fast path, else 0.
    static fntrace_graph_fast_bit: AtomicU64;
    /// The graph tracer's depth limit for the fast paths.
    static fntrace_graph_max_depth: AtomicU64;
}

/// The fast entry for sites of `kind`.
pub(crate) fn entry_address(kind: SiteKind) -> usize {
    match kind {
        SiteKind::Mcount => fntrace_graph_mcount as *const () as usize,
        SiteKind::Fentry => fntrace_graph_fentry as *const () as usize,
    }
}

/// Sets the mask that frames pushed by the fast entry carry, and that the
/// fast exit requires (0 turns the fast exit off), and the deepest depth
/// whose events the fast paths record. The limit is stored first: no fast
/// path runs with the new bit and the old limit.
pub(crate) fn set_exit_bit(bit: u64, max_depth: usize) {
    // SAFETY: plain atomics defined in graph.S, valid for the whole process.
    unsafe {
        fntrace_graph_max_depth.store(max_depth as u64, Ordering::Release);
        fntrace_graph_fast_bit.store(bit, Ordering::Release);
    }
}

/// The bytes of a site at `addr` in `form` calling the fast entry for
/// `kind`: `e8 rel32` (5-byte forms) or `67 e8 rel32` (6-byte forms, the
/// encoding the linker itself relaxes `ff 15` GOT calls to). The call goes
/// to the entry itself, or, from code out of a rel32's reach of it (a
/// shared object mapped far away), to a jump stub near that code. `None`
/// when no stub can be placed.
pub(crate) fn call_bytes(addr: usize, form: SiteForm, kind: SiteKind) -> Option<[u8; 8]> {
    let next = addr.checked_add(form.instruction_len())?;
    encode_call(addr, form, target_near(next, kind)?)
}

/// `e8 rel32` / `67 e8 rel32` from `addr` to `target`, if in reach.
fn encode_call(addr: usize, form: SiteForm, target: usize) -> Option<[u8; 8]> {
    let len = form.instruction_len();
    let rel = rel32(addr.checked_add(len)?, target)?;
    let mut bytes = [0u8; 8];
    let opcode_at = len - 5;
    if opcode_at == 1 {
        bytes[0] = 0x67;
    }
    bytes[opcode_at] = 0xe8;
    bytes[opcode_at + 1..len].copy_from_slice(&rel.to_le_bytes());
    Some(bytes)
}

fn rel32(next_instruction: usize, target: usize) -> Option<i32> {
    (target as i128 - next_instruction as i128).try_into().ok()
}

/// Pages of jump stubs, one per far region, never unmapped (sites may point
/// at them until the process ends). Only control operations touch this.
static STUB_PAGES: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// Each page holds one stub per kind, this far apart.
const STUB_SPACING: usize = 16;
const PAGE: usize = 4096;

fn stub_address(page: usize, kind: SiteKind) -> usize {
    match kind {
        SiteKind::Mcount => page,
        SiteKind::Fentry => page + STUB_SPACING,
    }
}

/// Where a call ending at `next` reaches the fast entry for `kind`: the
/// entry itself, else the first stub page in reach (the same one for the
/// same site every time: pages are only appended), else a new page.
fn target_near(next: usize, kind: SiteKind) -> Option<usize> {
    let entry = entry_address(kind);
    if rel32(next, entry).is_some() {
        return Some(entry);
    }
    let mut pages = STUB_PAGES.lock();
    let in_reach = |page: &usize| rel32(next, stub_address(*page, kind)).is_some();
    if let Some(page) = pages.iter().find(|page| in_reach(page)) {
        return Some(stub_address(*page, kind));
    }
    let page = map_stub_page_near(next)?;
    pages.push(page);
    Some(stub_address(page, kind))
}

/// Maps a page of stubs (`jmp *0(%rip)` followed by the entry's absolute
/// address, one per kind) within ±1.9 GiB of `near`, at the first free
/// address tried, and makes it read-only executable before any site can
/// call it.
fn map_stub_page_near(near: usize) -> Option<usize> {
    const STEP: usize = 16 << 20;
    const STEPS: usize = 120; // 1.875 GiB: well inside a rel32's reach
    let near = near & !(PAGE - 1);
    let candidates = (1..=STEPS)
        .flat_map(|i| [near.checked_add(i * STEP), near.checked_sub(i * STEP)])
        .flatten()
        .filter(|&hint| hint >= 1 << 20);
    for hint in candidates {
        // SAFETY: a fresh anonymous mapping at a hint; MAP_FIXED_NOREPLACE
        // never replaces an existing mapping.
        let mem = unsafe {
            libc::mmap(
                hint as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            continue;
        }
        if mem as usize != hint {
            // A kernel without MAP_FIXED_NOREPLACE took it as a hint only.
            // SAFETY: the mapping just made, unused.
            unsafe { libc::munmap(mem, PAGE) };
            continue;
        }
        let page = mem as *mut u8;
        for kind in [SiteKind::Mcount, SiteKind::Fentry] {
            let mut stub = [0u8; 14];
            stub[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
            stub[6..].copy_from_slice(&(entry_address(kind) as u64).to_le_bytes());
            let offset = stub_address(0, kind);
            // SAFETY: offset + 14 bytes lie inside the writable page above.
            unsafe { std::ptr::copy_nonoverlapping(stub.as_ptr(), page.add(offset), stub.len()) };
        }
        // SAFETY: the same page, now complete; no site calls it yet.
        let sealed = unsafe { libc::mprotect(mem, PAGE, libc::PROT_READ | libc::PROT_EXEC) };
        if sealed != 0 {
            // SAFETY: as above: unused.
            unsafe { libc::munmap(mem, PAGE) };
            return None;
        }
        return Some(hint);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_calls_of_the_site_length() {
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
    fn encode_call_refuses_targets_beyond_rel32() {
        let addr = 0x7f00_0000_0000;
        assert_eq!(
            encode_call(addr, SiteForm::CallRel32, addr + (3 << 30)),
            None
        );
        assert!(encode_call(addr, SiteForm::CallRel32, addr + (1 << 30)).is_some());
    }

    #[test]
    fn far_code_calls_a_stub_in_reach_that_jumps_to_the_entry() {
        for kind in [SiteKind::Mcount, SiteKind::Fentry] {
            let entry = entry_address(kind);
            let far = entry + (6 << 30);
            let bytes = call_bytes(far, SiteForm::CallRel32, kind).unwrap();
            assert_eq!(bytes[0], 0xe8);
            let rel = i32::from_le_bytes(bytes[1..5].try_into().unwrap());
            let stub = (far as i64 + 5 + rel as i64) as usize;
            assert_ne!(stub, entry);
            // SAFETY: the stub page is mapped readable for the process's life.
            let code = unsafe { std::slice::from_raw_parts(stub as *const u8, 14) };
            assert_eq!(code[..6], [0xff, 0x25, 0, 0, 0, 0], "jmp *0(%rip)");
            assert_eq!(code[6..], (entry as u64).to_le_bytes());
            // The same site finds the same stub again; a neighbour shares it.
            assert_eq!(call_bytes(far, SiteForm::CallRel32, kind), Some(bytes));
            let neighbour = call_bytes(far + 4096, SiteForm::CallRel32, kind).unwrap();
            let rel = i32::from_le_bytes(neighbour[1..5].try_into().unwrap());
            assert_eq!((far as i64 + 4096 + 5 + rel as i64) as usize, stub);
        }
    }
}
