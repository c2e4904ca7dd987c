//! Patchable function entries: sites the compiler left as NOPs at each
//! function's entry and listed in the section `__patchable_function_entries`
//! (gcc and clang `-fpatchable-function-entry=N[,M]`, rustc
//! `-Zpatchable-function-entry=N,M`). No call is compiled in: fntrace
//! writes a `call` to the `__fentry__` trampoline (or the graph tracer's
//! fast fentry entry) over the first five NOP bytes at the entry, so such
//! a site is an fentry site (`SiteKind::Fentry`, form `CallRel32`) whose
//! call fntrace makes rather than the compiler.
//!
//! # What the section says
//! Each entry is the address of the first NOP. With `M > 0` the first `M`
//! NOPs lie *before* the function's symbol and never run on a call; the
//! function's entry is the symbol, and its `N - M` NOPs follow (after an
//! `endbr64` under `-fcf-protection`). So the site is the first NOP at or
//! after the symbol (after its `endbr64`), the site table's key is that
//! address + 5 (the return address of the call written there), and the
//! site's function is the symbol. The entry is read in memory, after the
//! loader relocated it (lld leaves the file's copy zero); an entry not yet
//! relocated (an object being loaded) is its link-time address, and the
//! object's load bias is added.
//!
//! # Forms, and what is refused
//! The five bytes at the site must be one of:
//! - `90 90 90 90 90` (gcc): five one-byte NOPs, five instructions;
//! - `0f 1f 44 00 XX` (LLVM: clang, rustc): one five-byte NOP.
//!
//! Anything else is refused and counted ([`super::ScanReport`]'s
//! `patchable_refused`): fewer than five NOPs at the entry (`N - M < 5`),
//! a longer LLVM NOP the first five bytes of which are not an instruction
//! (`N > 5` with clang), an entry that points at no function, and a
//! function that also has an `mcount`/`__fentry__` call (its calls would
//! be counted twice).
//!
//! # Why five one-byte NOPs need care, and how it is safe
//! A thread may be executing the second to fifth of five one-byte NOPs
//! when five bytes are written over them: it would resume in the middle of
//! the new instruction. So the first write to such a site (from the
//! compiler's NOPs to a call) is never made while a thread can be inside
//! them. [`crate::patch`] marks a write whose old bytes are several
//! instructions; the breakpoint protocol, which cannot know where threads
//! are, hands any batch holding one to the stop-the-world protocol. That
//! one stops every other thread with a signal; its handler reads the
//! interrupted program counter from the signal context and, when it lies
//! strictly inside such a write's bytes, moves it past them (the NOPs it
//! skips do nothing), before the thread acknowledges. Only then is
//! anything written; the patcher also checks every recorded program
//! counter and retries (until its ack timeout) if one is still inside.
//! After that first write the site holds fntrace's call or the five-byte
//! NOP (`0f 1f 44 00 00`), one instruction, and is toggled like any fentry
//! site under either protocol. A site no tracer ever selected keeps the
//! compiler's NOPs (no write at `init`). Not covered: a thread that was
//! interrupted by another signal while inside the NOPs and is still in
//! that signal's handler when the write is made (the interrupted program
//! counter is in that handler's signal frame, which fntrace does not
//! read): the window is the few cycles of executing four NOPs, times the
//! chance that a signal lands in them and its handler is still running at
//! the first enable.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::table::{flag, Inserted, NewSite, SiteKind};
use super::{exclusion_flag, trampoline, ScanReport, SITES};
use crate::arch::x86_64::{SiteForm, CALL_REL32, ENDBR64};
use crate::symbols::{Function, LoadedObject};

/// The compiler's NOPs at a patchable entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EntryNops {
    /// gcc: `90 90 90 90 90`, five instructions.
    OneByte,
    /// LLVM: `0f 1f 44 00 XX`, one instruction (`XX` its displacement).
    Nopl(u8),
}

/// `0f 1f 44 00`: the first bytes of `nopl XX(%rax,%rax,1)`.
const NOPL_HEAD: [u8; 4] = [0x0f, 0x1f, 0x44, 0x00];

/// Which compiler NOPs `bytes` (exactly five) are, if any.
pub(crate) fn entry_nops(bytes: &[u8]) -> Option<EntryNops> {
    match bytes {
        [0x90, 0x90, 0x90, 0x90, 0x90] => Some(EntryNops::OneByte),
        [a, b, c, d, displacement] if [*a, *b, *c, *d] == NOPL_HEAD => {
            Some(EntryNops::Nopl(*displacement))
        }
        _ => None,
    }
}

impl EntryNops {
    /// The site flags that record these NOPs as the site's text.
    fn flags(self) -> u32 {
        match self {
            EntryNops::OneByte => flag::RAW_ONE_BYTE_NOPS,
            EntryNops::Nopl(displacement) => {
                flag::RAW_NOPL | u32::from(displacement) << flag::RAW_NOPL_BYTE_SHIFT
            }
        }
    }
}

/// How far before its function's symbol an entry may point (`M`).
const MAX_NOPS_BEFORE: usize = 64;

/// Records the patchable entries of `object` not yet in the table, except
/// in functions listed in `with_call_site` (they have an `mcount` or
/// `__fentry__` call). Inside `loader::hold`, the object listed.
pub(super) fn scan(
    object: &LoadedObject,
    with_call_site: &HashSet<usize>,
    report: &mut ScanReport,
) {
    for range in &object.patchable_entries {
        let len = range.end.saturating_sub(range.start);
        if !object.maps(range.start, len) {
            continue;
        }
        for slot in (range.start..range.end).step_by(8) {
            if slot + 8 > range.end {
                break;
            }
            // SAFETY: the slot lies in a mapped segment of an object the
            // loader lists, which stays mapped while `loader::hold` runs
            // the scan (checked just above).
            let value = unsafe { std::ptr::read_unaligned(slot as *const usize) };
            match record(object, value, with_call_site) {
                Recorded::New => {
                    report.sites_found += 1;
                    report.patchable_found += 1;
                }
                Recorded::Known => {}
                Recorded::Refused => report.patchable_refused += 1,
            }
        }
    }
}

/// What [`record`] did with one entry.
enum Recorded {
    New,
    Known,
    Refused,
}

/// The text of `object` at `[addr, addr + len)`, if it lies in one of its
/// executable segments.
pub(crate) fn text_of(object: &LoadedObject, addr: usize, len: usize) -> Option<&'static [u8]> {
    let end = addr.checked_add(len)?;
    object
        .text
        .iter()
        .any(|t| addr >= t.start && end <= t.end)
        // SAFETY: inside an executable PT_LOAD segment of an object the
        // loader lists, mapped readable while `loader::hold` runs the scan
        // (the slice does not outlive it: callers only look at it).
        .then(|| unsafe { std::slice::from_raw_parts(addr as *const u8, len) })
}

/// Records the site of one section entry `value`.
fn record(object: &LoadedObject, value: usize, with_call_site: &HashSet<usize>) -> Recorded {
    let in_text = |addr: usize| text_of(object, addr, 1).is_some();
    let entry = if in_text(value) {
        value
    } else if in_text(object.bias.wrapping_add(value)) {
        object.bias.wrapping_add(value)
    } else {
        return Recorded::Refused;
    };
    let Some((site, function)) = site_of_entry(object, entry) else {
        return Recorded::Refused;
    };
    let key = site + 5;
    if SITES
        .find(key)
        .is_some_and(|known| !known.has_flag(flag::UNLOADED))
    {
        return Recorded::Known;
    }
    if with_call_site.contains(&function.start) {
        return Recorded::Refused;
    }
    let Some(nops) = text_of(object, site, 5).and_then(entry_nops) else {
        return Recorded::Refused;
    };
    let new = NewSite {
        addr: site,
        function: function.start,
        form: Some(SiteForm::CallRel32),
        kind: SiteKind::Fentry,
        original: direct_call(site),
        extra_flags: flag::PATCHABLE | nops.flags() | exclusion_flag(&function.name),
        tracers: 0,
    };
    match SITES.insert(key, &new) {
        Some(Inserted::New(_)) => Recorded::New,
        Some(Inserted::Existing(site)) if site.revive(&new) => {
            SITES.note_change();
            Recorded::New
        }
        Some(Inserted::Existing(_)) => Recorded::Known,
        None => Recorded::Refused,
    }
}

/// The site (first NOP the function runs) and the function of the entry
/// at `entry`: the entry itself when it is the function's start (or right
/// after its `endbr64`); else the start of the next function (after its
/// `endbr64`) when only one-byte NOPs lie between (`M` of them).
fn site_of_entry(object: &LoadedObject, entry: usize) -> Option<(usize, &Function)> {
    let functions = &object.functions;
    let next = functions.partition_point(|f| f.start <= entry);
    let endbr_at = |addr: usize| text_of(object, addr, 4) == Some(&ENDBR64[..]);
    if let Some(function) = next.checked_sub(1).and_then(|i| functions.get(i)) {
        if entry == function.start || (entry == function.start + 4 && endbr_at(function.start)) {
            return Some((entry, function));
        }
    }
    let function = functions.get(next)?;
    let before = function.start - entry;
    if before > MAX_NOPS_BEFORE || !text_of(object, entry, before)?.iter().all(|&b| b == 0x90) {
        return None;
    }
    let site = if endbr_at(function.start) {
        function.start + 4
    } else {
        function.start
    };
    Some((site, function))
}

/// Whether the bytes before `offset` of a function's first bytes `head`
/// are, after an optional `endbr64`, one or more one-byte NOPs: where gcc
/// puts the `__fentry__` call of a function built with both `-pg -mfentry`
/// and `-fpatchable-function-entry` (the call is then the function's site,
/// and its patchable entry is refused).
pub(super) fn only_nops_before(head: &[u8], offset: usize) -> bool {
    let Some(before) = head.get(..offset) else {
        return false;
    };
    let before = before.strip_prefix(&ENDBR64[..]).unwrap_or(before);
    !before.is_empty() && before.iter().all(|&byte| byte == 0x90)
}

/// `e8 rel32` from `site` to the `__fentry__` trampoline, when in reach;
/// else zero (control makes the call through a jump stub before the first
/// write).
pub(crate) fn direct_call(site: usize) -> [u8; 8] {
    let target = trampoline(SiteKind::Fentry);
    let rel = (target as i128 - (site as i128 + 5)).try_into();
    let mut bytes = [0u8; 8];
    if let Ok(rel) = rel {
        let rel: i32 = rel;
        bytes[0] = CALL_REL32;
        bytes[1..5].copy_from_slice(&rel.to_le_bytes());
    }
    bytes
}

/// Whether `site`'s call bytes are still to be made (out of a direct
/// call's reach when it was found).
pub(crate) fn needs_call(flags: u32, original: u64) -> bool {
    flags & flag::PATCHABLE != 0 && original == 0
}

/// Stores `call` as the call of a patchable site found out of reach.
/// Caller holds the control lock.
pub(crate) fn set_call(site: &super::Site, call: [u8; 8]) {
    site.original
        .store(u64::from_le_bytes(call), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_the_compilers_entry_nops_and_nothing_else() {
        assert_eq!(entry_nops(&[0x90; 5]), Some(EntryNops::OneByte));
        assert_eq!(
            entry_nops(&[0x0f, 0x1f, 0x44, 0x00, 0x08]),
            Some(EntryNops::Nopl(8))
        );
        assert_eq!(
            entry_nops(&[0x0f, 0x1f, 0x44, 0x00, 0x00]),
            Some(EntryNops::Nopl(0))
        );
        for other in [
            &[0x90; 4][..],
            &[0x90; 6],
            &[0x90, 0x90, 0x90, 0x90, 0x55],
            &[0x0f, 0x1f, 0x80, 0x00, 0x00],
            &[0x66, 0x0f, 0x1f, 0x44, 0x00],
            &[0xe8, 0, 0, 0, 0],
        ] {
            assert_eq!(entry_nops(other), None, "{other:02x?}");
        }
        // gcc -pg -mfentry -fpatchable-function-entry=5: NOPs, then the call.
        let head = [0x90, 0x90, 0x90, 0x90, 0x90, 0xe8, 0, 0, 0, 0];
        assert!(only_nops_before(&head, 5));
        let cet = [0xf3, 0x0f, 0x1e, 0xfa, 0x90, 0x90, 0xe8];
        assert!(only_nops_before(&cet, 6));
        assert!(
            !only_nops_before(&cet, 4),
            "endbr64 alone is fentry_placement's"
        );
        assert!(!only_nops_before(&[0x55, 0x90, 0xe8], 2));
        assert!(!only_nops_before(&head, 11));
        // What the site flags record reads back as the same bytes.
        for nops in [EntryNops::OneByte, EntryNops::Nopl(8)] {
            let text = super::super::table::nop_text(nops.flags(), SiteForm::CallRel32);
            assert_eq!(entry_nops(&text[..5]), Some(nops));
        }
    }
}
