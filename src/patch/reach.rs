//! Calls from a site to any target: the bytes of a direct call of the
//! site's own length, and jump stubs for targets out of a `rel32`'s reach.
//!
//! A site is rewritten to `e8 rel32` (5-byte forms) or `67 e8 rel32`
//! (6-byte forms: the encoding the linker itself relaxes `ff 15` GOT calls
//! to), so the instruction keeps its length. Code mapped more than ±2 GiB
//! from the target (a shared object far from the executable) calls a jump
//! stub (`jmp *0(%rip)` followed by the target's absolute address) on a
//! page mapped near that code instead. Stub pages are made read-only
//! executable before any site can call them and never unmapped (sites may
//! point at them until the process ends). Only control operations, under
//! the operation lock, come here.

use parking_lot::Mutex;

use crate::arch::x86_64::SiteForm;

/// The bytes of a site at `addr` in `form` calling `target`, directly or
/// through a stub near the site. `None` when no stub can be placed.
pub(crate) fn call_bytes(addr: usize, form: SiteForm, target: usize) -> Option<[u8; 8]> {
    let next = addr.checked_add(form.instruction_len())?;
    encode_call(addr, form, target_near(next, target)?)
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

/// A page holding one stub, and the target it jumps to.
#[derive(Clone, Copy)]
struct StubPage {
    page: usize,
    target: usize,
}

static STUB_PAGES: Mutex<Vec<StubPage>> = Mutex::new(Vec::new());
const PAGE: usize = 4096;
/// `jmp *0(%rip)`: an indirect jump through the 8 bytes that follow it.
const JMP_RIP_INDIRECT: [u8; 6] = [0xff, 0x25, 0, 0, 0, 0];

/// Where a call ending at `next` reaches `target`: the target itself, else
/// the first stub for it in reach (the same one for the same site every
/// time: pages are only appended), else a new stub.
fn target_near(next: usize, target: usize) -> Option<usize> {
    if rel32(next, target).is_some() {
        return Some(target);
    }
    let mut pages = STUB_PAGES.lock();
    let usable = |stub: &&StubPage| stub.target == target && rel32(next, stub.page).is_some();
    if let Some(stub) = pages.iter().find(usable) {
        return Some(stub.page);
    }
    let page = map_stub_near(next, target)?;
    pages.push(StubPage { page, target });
    Some(page)
}

/// Maps a page with a stub jumping to `target`, within ±1.9 GiB of `near`,
/// at the first free address tried, and makes it read-only executable
/// before any site can call it.
fn map_stub_near(near: usize, target: usize) -> Option<usize> {
    let page = map_writable_page_near(near)?;
    let mem = page as *mut libc::c_void;
    let mut stub = [0u8; 14];
    stub[..6].copy_from_slice(&JMP_RIP_INDIRECT);
    stub[6..].copy_from_slice(&(target as u64).to_le_bytes());
    // SAFETY: 14 bytes at the start of the writable page just mapped.
    unsafe { std::ptr::copy_nonoverlapping(stub.as_ptr(), mem.cast::<u8>(), stub.len()) };
    // SAFETY: the same page, now complete; no site calls it yet.
    let sealed = unsafe { libc::mprotect(mem, PAGE, libc::PROT_READ | libc::PROT_EXEC) };
    if sealed != 0 {
        // SAFETY: as above: unused.
        unsafe { libc::munmap(mem, PAGE) };
        return None;
    }
    Some(page)
}

/// Maps a fresh read-write (not executable) page within ±1.9 GiB of
/// `near`, at the first free address tried. Also used for run-time entry
/// patches' stubs (`super::entry_patch`), which seal it themselves.
pub(crate) fn map_writable_page_near(near: usize) -> Option<usize> {
    map_near(near, PAGE, libc::PROT_READ | libc::PROT_WRITE)
}

/// Maps `len` bytes (a multiple of the page size) of fresh anonymous
/// memory with `prot` within ±1.9 GiB of `near` (the whole range), at the
/// first free address tried.
pub(crate) fn map_near(near: usize, len: usize, prot: i32) -> Option<usize> {
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
                len,
                prot,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_FIXED_NOREPLACE
                    | libc::MAP_NORESERVE,
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
            unsafe { libc::munmap(mem, len) };
            continue;
        }
        return Some(hint);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real function of this crate: the target the tests call.
    fn target() -> usize {
        call_bytes as *const () as usize
    }

    #[test]
    fn direct_calls_of_the_site_length() {
        let target = target();
        let addr = target - 0x1000;
        let five = call_bytes(addr, SiteForm::CallRel32, target).unwrap();
        let rel: i32 = 0x1000 - 5;
        assert_eq!(five[0], 0xe8);
        assert_eq!(five[1..5], rel.to_le_bytes());
        assert_eq!(five[5..], [0, 0, 0]);
        let six = call_bytes(addr, SiteForm::CallGotRip, target).unwrap();
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
    fn far_code_calls_a_stub_in_reach_that_jumps_to_the_target() {
        for target in [target(), encode_call as *const () as usize] {
            let far = target + (6 << 30);
            let bytes = call_bytes(far, SiteForm::CallRel32, target).unwrap();
            assert_eq!(bytes[0], 0xe8);
            let rel = i32::from_le_bytes(bytes[1..5].try_into().unwrap());
            let stub = (far as i64 + 5 + rel as i64) as usize;
            assert_ne!(stub, target);
            // SAFETY: the stub page is mapped readable for the process's life.
            let code = unsafe { std::slice::from_raw_parts(stub as *const u8, 14) };
            assert_eq!(code[..6], JMP_RIP_INDIRECT, "jmp *0(%rip)");
            assert_eq!(code[6..], (target as u64).to_le_bytes());
            // The same site finds the same stub again; a neighbour shares it.
            assert_eq!(call_bytes(far, SiteForm::CallRel32, target), Some(bytes));
            let neighbour = call_bytes(far + 4096, SiteForm::CallRel32, target).unwrap();
            let rel = i32::from_le_bytes(neighbour[1..5].try_into().unwrap());
            assert_eq!((far as i64 + 4096 + 5 + rel as i64) as usize, stub);
        }
    }
}
