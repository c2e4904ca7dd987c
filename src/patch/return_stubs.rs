//! Return stubs: a small piece of code per site and fast entry, which the
//! site jumps to instead of calling the entry, so that the CPU predicts
//! the hooked function's return and the trampoline's (see
//! `docs/journal/return-prediction-2026-11-26.md`).
//!
//! A site that calls the fast entry and has its return address replaced by
//! the one return trampoline costs two mispredicted branches a call: the
//! function's `ret` goes to the trampoline while the return-stack buffer
//! holds the caller, and the trampoline's indirect jump back goes to a
//! different caller every time. A site sent to its stub instead (`e9 rel32`,
//! or `2e e9 rel32` over six bytes) runs:
//!
//! ```text
//! S+0:  call *S+40(%rip)     the fast entry (*_stubbed): pushes S+6, which
//!                            tells the entry its stub; the function's slot
//!                            gets the hook S+11
//! S+6:  call S+23            puts S+11 on the return-stack buffer
//! S+11: lea -8(%rsp), %rsp   the hook: the function returns here, as the
//! S+16: call *S+48(%rip)       buffer predicted; room for the real return
//! S+22: ret                    address, and the trampoline (its balanced
//!                              variant) returns here, then here to the
//!                              real caller, the buffer's next entry
//! S+23: lea 8(%rsp), %rsp    drops what S+6 pushed (the buffer keeps it)
//! S+28: jmp site_end         the function's body
//! S+33: int3 x 7
//! S+40: the fast entry   S+48: fntrace_return_balanced   S+56: site_end
//! ```
//!
//! Every branch is then direct or predicted by the return-stack buffer.
//! A fast entry that gives up hands the generic path the site's own return
//! address, so it sees an ordinary call and hooks with the one trampoline.
//!
//! Stubs live in arenas (at most [`ARENAS`], each reserved near the code
//! whose sites use it, within a `rel32` of it), 64 bytes each, so that the
//! fast entries tell a stub's hook from other return addresses with a few
//! compares (`JUMP_IF_STUB_HOOK`, asm/x86_64/layout.h). A page of stubs is
//! written while it is not executable and sealed (read-execute) by
//! [`seal`] before any site jumps into it. The rest of a sealed page is
//! filled later through `/proc/self/mem` (the page stays read-execute;
//! no thread runs the bytes written, as no site jumps there yet), or, where
//! that is refused, left unused. No stub or arena is ever unmapped (hooked
//! frames may return into one until the process ends). A stub is found
//! again for the same site, length and entry. Only control operations,
//! under the operation lock, come here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::arch::x86_64::{SiteForm, CS_PREFIX, JMP_REL32};
use crate::error::Error;

/// Bytes of one stub.
const STUB_SIZE: usize = 64;
/// Bytes reserved for one arena: 1,048,576 stubs.
const ARENA_SIZE: usize = 64 << 20;
/// Arenas at most (`STUB_ARENAS` in layout.h).
pub(crate) const ARENAS: usize = 4;
const PAGE: usize = 4096;
/// Where in a stub its hook is (`STUB_HOOK_IN_LINE` in layout.h), and the
/// hook's and the site end's distance from the return address the fast
/// entry sees (`STUB_HOOK_FROM_RETURN`, `STUB_SITE_END_FROM_RETURN`).
const HOOK_AT: usize = 11;
const ENTRY_RETURN_AT: usize = 6;
const SITE_END_AT: usize = 56;
const HOOK_FROM_RETURN: usize = 5;
const SITE_END_FROM_RETURN: usize = 50;
const _: () = {
    assert!(HOOK_AT - ENTRY_RETURN_AT == HOOK_FROM_RETURN);
    assert!(SITE_END_AT - ENTRY_RETURN_AT == SITE_END_FROM_RETURN);
    assert!(STUB_SIZE == 64 && PAGE.is_multiple_of(STUB_SIZE));
};

extern "C" {
    /// (first byte, length) of each arena, (0, 0) while unused; read by
    /// the fast entries.
    static fntrace_return_stub_arenas: [AtomicU64; 2 * ARENAS];
    /// The return trampoline's variant that leaves with `ret` (return.S).
    fn fntrace_return_balanced();
}

/// One reserved arena: stubs at `base..base + used`; pages below
/// `base + sealed` read-execute, the others (from `used` on) writable.
struct Arena {
    base: usize,
    used: usize,
    sealed: usize,
}

struct Stubs {
    arenas: Vec<Arena>,
    /// (site, instruction length, entry) → its stub, or `None` where none
    /// could be placed (the site then calls the entry directly, every time:
    /// the text written must be found again).
    made: HashMap<(usize, usize, usize), Option<usize>>,
}

static STUBS: Mutex<Option<Stubs>> = Mutex::new(None);

/// The bytes of a site at `addr` in `form` that jump to its stub for the
/// fast entry `entry` (one of the `*_stubbed` entries), making the stub if
/// there is none yet. `None` when no stub can be placed in reach: the
/// caller then writes a direct call of the entry's plain variant.
pub(crate) fn jump_bytes(addr: usize, form: SiteForm, entry: usize) -> Option<[u8; 8]> {
    let len = form.instruction_len();
    let mut guard = STUBS.lock();
    let stubs = guard.get_or_insert_with(|| Stubs {
        arenas: Vec::new(),
        made: HashMap::new(),
    });
    let stub = *stubs
        .made
        .entry((addr, len, entry))
        .or_insert_with(|| make_stub(&mut stubs.arenas, addr, len, entry));
    encode_jump(addr, len, stub?)
}

/// `e9 rel32`, or `2e e9 rel32` for a six-byte site, from `addr` to `target`.
fn encode_jump(addr: usize, len: usize, target: usize) -> Option<[u8; 8]> {
    let rel = rel32(addr.checked_add(len)?, target)?;
    let mut bytes = [0u8; 8];
    let opcode_at = len - 5;
    if opcode_at == 1 {
        bytes[0] = CS_PREFIX;
    }
    bytes[opcode_at] = JMP_REL32;
    bytes[opcode_at + 1..len].copy_from_slice(&rel.to_le_bytes());
    Some(bytes)
}

fn rel32(next_instruction: usize, target: usize) -> Option<i32> {
    (target as i128 - next_instruction as i128).try_into().ok()
}

/// Writes a new stub for the site `addr` (`len` bytes) and `entry` into an
/// arena within reach (reserving one if there is room for another).
fn make_stub(arenas: &mut Vec<Arena>, addr: usize, len: usize, entry: usize) -> Option<usize> {
    let site_end = addr.checked_add(len)?;
    // The stub's whole range within a rel32 of the site, both ways.
    let in_reach = |base: usize| {
        rel32(site_end, base).is_some() && rel32(base + ARENA_SIZE, site_end).is_some()
    };
    let index = match arenas
        .iter()
        .position(|arena| in_reach(arena.base) && arena.used < ARENA_SIZE)
    {
        Some(index) => index,
        None => reserve_arena(arenas, site_end, in_reach)?,
    };
    let arena = &mut arenas[index];
    if arena.used < arena.sealed {
        // The rest of a sealed page.
        let stub = arena.base + arena.used;
        let code = stub_code(stub, site_end, entry)?;
        let written = super::proc_mem::open_proc_mem()
            .is_some_and(|mem| super::proc_mem::pwrite_all(&mem, stub, &code).is_ok());
        if written {
            arena.used += STUB_SIZE;
            return Some(stub);
        }
        arena.used = arena.sealed;
    }
    if arena.used >= ARENA_SIZE {
        return None;
    }
    let stub = arena.base + arena.used;
    let code = stub_code(stub, site_end, entry)?;
    if arena.used.is_multiple_of(PAGE) {
        // SAFETY: a page of the arena reserved by `reserve_arena`, past
        // every stub written so far: no site jumps into it yet.
        let opened = unsafe {
            libc::mprotect(
                stub as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if opened != 0 {
            return None;
        }
    }
    // SAFETY: 64 bytes of a page of the arena made writable above (or by
    // an earlier stub of this batch: `seal` has not run since), which no
    // site jumps to until `seal` made it executable.
    unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), stub as *mut u8, STUB_SIZE) };
    arena.used += STUB_SIZE;
    Some(stub)
}

/// The 64 bytes of the stub at `stub` (drawn in the module docs).
fn stub_code(stub: usize, site_end: usize, entry: usize) -> Option<[u8; STUB_SIZE]> {
    let mut code = [0xcc_u8; STUB_SIZE];
    // call *S+40(%rip): rel32 from S+6.
    code[0..6].copy_from_slice(&[0xff, 0x15, 34, 0, 0, 0]);
    // call S+23: rel32 from S+11.
    code[6..11].copy_from_slice(&[0xe8, 12, 0, 0, 0]);
    // The hook: lea -8(%rsp), %rsp; call *S+48(%rip) (rel32 from S+22); ret.
    code[11..16].copy_from_slice(&[0x48, 0x8d, 0x64, 0x24, 0xf8]);
    code[16..22].copy_from_slice(&[0xff, 0x15, 26, 0, 0, 0]);
    code[22] = 0xc3;
    // lea 8(%rsp), %rsp; jmp site_end.
    code[23..28].copy_from_slice(&[0x48, 0x8d, 0x64, 0x24, 0x08]);
    code[28] = JMP_REL32;
    code[29..33].copy_from_slice(&rel32(stub + 33, site_end)?.to_le_bytes());
    code[40..48].copy_from_slice(&(entry as u64).to_le_bytes());
    let exit = fntrace_return_balanced as *const () as usize;
    code[48..56].copy_from_slice(&(exit as u64).to_le_bytes());
    code[SITE_END_AT..].copy_from_slice(&(site_end as u64).to_le_bytes());
    Some(code)
}

/// Reserves an arena near `near` (inaccessible until its pages are used)
/// and publishes it to the fast entries. Its index, or `None` when all
/// [`ARENAS`] are in use or nothing in reach is free.
fn reserve_arena(
    arenas: &mut Vec<Arena>,
    near: usize,
    in_reach: impl Fn(usize) -> bool,
) -> Option<usize> {
    if arenas.len() == ARENAS {
        return None;
    }
    let base = super::reach::map_near(near, ARENA_SIZE, libc::PROT_NONE)?;
    if !in_reach(base) {
        // SAFETY: the reservation just made, unused.
        unsafe { libc::munmap(base as *mut libc::c_void, ARENA_SIZE) };
        return None;
    }
    let index = arenas.len();
    // SAFETY: plain atomics defined in return.S, valid for the process.
    let published = unsafe { &fntrace_return_stub_arenas };
    published[2 * index].store(base as u64, Ordering::Release);
    published[2 * index + 1].store(ARENA_SIZE as u64, Ordering::Release);
    arenas.push(Arena {
        base,
        used: 0,
        sealed: 0,
    });
    Some(index)
}

/// Makes every page of stubs written since the last call read-execute,
/// before any site jumps into them.
pub(crate) fn seal() -> Result<(), Error> {
    let mut guard = STUBS.lock();
    let Some(stubs) = guard.as_mut() else {
        return Ok(());
    };
    for arena in &mut stubs.arenas {
        let end = arena.used.next_multiple_of(PAGE);
        if end > arena.sealed && arena.used > arena.sealed {
            let from = arena.base + arena.sealed;
            // SAFETY: pages of the arena holding complete stubs, written
            // since the last seal; nothing executes them yet.
            let sealed = unsafe {
                libc::mprotect(
                    from as *mut libc::c_void,
                    end - arena.sealed,
                    libc::PROT_READ | libc::PROT_EXEC,
                )
            };
            if sealed != 0 {
                return Err(Error::TextWrite {
                    addr: from,
                    source: std::io::Error::last_os_error(),
                });
            }
        }
        arena.sealed = arena.sealed.max(end);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86_64::{decode_site_instruction, Instruction};

    #[test]
    fn a_site_jumps_to_its_stub_which_returns_to_the_site_end() {
        // A site in this crate's text (never executed: only its address is
        // used), and a made-up entry.
        let site = a_site_jumps_to_its_stub_which_returns_to_the_site_end as *const () as usize;
        let entry = 0x1234_5678_9abc;
        for form in [SiteForm::CallRel32, SiteForm::Addr32CallRel32] {
            let len = form.instruction_len();
            let bytes = jump_bytes(site, form, entry).expect("a stub in reach");
            let Some(Instruction::Jump { target: stub }) =
                decode_site_instruction(&bytes[..len], site)
            else {
                panic!("not a jump: {bytes:x?}");
            };
            assert_eq!(stub % STUB_SIZE, 0);
            assert_eq!(jump_bytes(site, form, entry), Some(bytes), "found again");
            seal().unwrap();
            // SAFETY: the stub's page is mapped readable once sealed.
            let code = unsafe { std::slice::from_raw_parts(stub as *const u8, STUB_SIZE) };
            let word = |at: usize| u64::from_le_bytes(code[at..at + 8].try_into().unwrap());
            assert_eq!(word(40), entry as u64);
            assert_eq!(word(48), fntrace_return_balanced as *const () as u64);
            assert_eq!(word(SITE_END_AT), (site + len) as u64);
            assert_eq!(
                decode_site_instruction(&code[28..33], stub + 28),
                Some(Instruction::Jump { target: site + len })
            );
            // The hook is where the fast entries look for one.
            // SAFETY: plain atomics defined in return.S.
            let arenas = unsafe { &fntrace_return_stub_arenas };
            let hook = stub + HOOK_AT;
            assert!((0..ARENAS).any(|i| {
                let base = arenas[2 * i].load(Ordering::Acquire) as usize;
                let size = arenas[2 * i + 1].load(Ordering::Acquire) as usize;
                hook.wrapping_sub(base) < size
            }));
        }
        // Another entry, another stub, written after the seal: into the
        // sealed page through /proc/self/mem, which stays read-execute.
        let other = jump_bytes(site, SiteForm::CallRel32, entry + 1).unwrap();
        let first = jump_bytes(site, SiteForm::CallRel32, entry).unwrap();
        let target = |bytes: [u8; 8]| match decode_site_instruction(&bytes[..5], site) {
            Some(Instruction::Jump { target }) => target,
            _ => unreachable!(),
        };
        assert_ne!(target(other), target(first));
        // (No other unit test makes stubs: the first ones lie in this page.)
        assert_eq!(
            target(other) / PAGE,
            target(first) / PAGE,
            "the sealed page filled on"
        );
        seal().unwrap();
        // SAFETY: the stub's page is mapped readable once sealed.
        let code = unsafe { std::slice::from_raw_parts(target(other) as *const u8, STUB_SIZE) };
        assert_eq!(code[40..48], (entry as u64 + 1).to_le_bytes());
    }
}
