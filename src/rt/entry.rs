//! The Rust side of the entry trampolines (`asm/x86_64/entry.S`).
//!
//! The trampoline has already saved the caller's registers and set the
//! thread's recursion guard, so nothing called from here is traced. The fast
//! path is one lock-free table probe and one mask test; dispatch to tracers
//! is out of line.

use std::sync::atomic::Ordering;

use crate::arch::x86_64::SavedRegs;
use crate::rt::clock;
use crate::rt::shadow::{return_trampoline, Frame, ShadowStack};
use crate::rt::thread::{thread_block, PreservedErrno};
use crate::sites::{self, SiteKind, SITES};
use crate::tracer::{self, Call, Return, Tracer};
use crate::GRAPH_TRACER;

/// Entry from `mcount` (site after the prologue).
///
/// # Safety
/// Called only by the `mcount` trampoline, with the arguments it documents.
#[no_mangle]
pub unsafe extern "C" fn fntrace_mcount_entry(
    site_return: usize,
    parent_slot: *mut usize,
    regs: *mut SavedRegs,
) {
    // SAFETY: forwarded from the trampoline's contract.
    unsafe { on_entry(site_return, parent_slot, regs, SiteKind::Mcount) }
}

/// Entry from `__fentry__` (site at the function's first byte).
///
/// # Safety
/// Called only by the `__fentry__` trampoline, with the arguments it documents.
#[no_mangle]
pub unsafe extern "C" fn fntrace_fentry_entry(
    site_return: usize,
    parent_slot: *mut usize,
    regs: *mut SavedRegs,
) {
    // SAFETY: forwarded from the trampoline's contract.
    unsafe { on_entry(site_return, parent_slot, regs, SiteKind::Fentry) }
}

/// # Safety
/// `parent_slot` points at the traced function's return address and `regs`
/// at the trampoline's save area, both valid for this call.
#[inline(always)]
unsafe fn on_entry(
    site_return: usize,
    parent_slot: *mut usize,
    regs: *mut SavedRegs,
    kind: SiteKind,
) {
    let block = thread_block();
    block
        .generic_entries
        .set(block.generic_entries.get().wrapping_add(1));
    match SITES.find(site_return) {
        Some(site) => {
            let wanted = site.tracers.load(Ordering::Relaxed) & tracer::enabled_mask();
            if wanted != 0 {
                // SAFETY: forwarded from this function's contract.
                unsafe { dispatch(site, wanted, parent_slot, regs) };
            }
        }
        None => {
            let _errno = PreservedErrno::save();
            sites::on_unknown_site(site_return, kind);
            crate::control::nop_pending_from_hot_path();
        }
    }
}

/// Calls the tracers in `wanted` for an entry, hooking the exit when one of
/// them wants it.
///
/// errno: the traced code must not see tracers' errno. The built-in graph
/// tracer's fast path makes system calls only on rare paths that restore
/// errno themselves; other tracers run under [`for_each_tracer`], which
/// saves it.
#[inline]
unsafe fn dispatch(site: &sites::Site, wanted: u64, parent_slot: *mut usize, regs: *mut SavedRegs) {
    let now = clock::now_ticks();
    let function = site.function.load(Ordering::Relaxed);
    let site_return = site.return_address();
    let slot = parent_slot as usize;
    let exit_tracers = wanted & tracer::exit_mask();
    let stack = match ShadowStack::current() {
        Some(stack) => Some(stack),
        None if exit_tracers != 0 => ShadowStack::create(),
        None => None,
    };
    // SAFETY: the trampoline passes the slot holding the traced function's
    // return address, on this thread's stack.
    let mut real_return = unsafe { *parent_slot };
    let mut depth = 0;
    let mut hooked = false;
    if let Some(stack) = stack {
        // Frames at or below this slot are gone (longjmp) or are the caller
        // this function was tail-called from: its real return becomes ours.
        if let Some(reused) = stack.pop_dead_below(slot, |dead, d| report_exit(dead, d, now, true))
        {
            if real_return == return_trampoline() {
                real_return = reused;
            }
        }
        depth = stack.depth();
        hooked = exit_tracers != 0
            && stack.push(Frame {
                slot,
                real_return,
                site: site_return,
                entry_ticks: now,
                exit_tracers,
                marks: 0,
            });
        // SAFETY: as above; the slot is written on this thread only.
        unsafe {
            if hooked {
                *parent_slot = return_trampoline();
            } else if *parent_slot == return_trampoline() {
                // A tail call took over a hooked frame, but this call is
                // not hooked: hand the real return address back.
                *parent_slot = real_return;
            }
        }
    }
    let call = Call {
        function,
        parent: real_return,
        site_return,
        depth,
        time_ticks: now,
        exit_hooked: hooked,
        // SAFETY: the save area lives on the trampoline's frame for this call.
        regs: unsafe { &*regs },
    };
    if wanted == GRAPH_TRACER.bit() {
        GRAPH_TRACER.entry(&call);
    } else {
        for_each_tracer(wanted, |tracer| tracer.entry(&call));
    }
}

/// Runs `f` for each tracer in `mask`; a panicking tracer is switched off.
#[inline(never)]
fn for_each_tracer(mut mask: u64, f: impl Fn(&dyn tracer::Tracer)) {
    let _errno = PreservedErrno::save();
    while mask != 0 {
        let index = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        let Some(tracer) = tracer::tracer_at(index) else {
            continue;
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(tracer)));
        if outcome.is_err() {
            tracer::TRACER_PANICS.fetch_add(1, Ordering::Relaxed);
            tracer::set_enabled(index, false);
        }
    }
}

/// Reports the exit of `frame`, found gone (unwound) at `now`.
pub(crate) fn report_vanished(frame: &Frame, depth: usize, now: u64) {
    report_exit(frame, depth, now, true);
}

#[inline]
fn report_exit(frame: &Frame, depth: usize, now: u64, vanished: bool) {
    let wanted = frame.exit_tracers & tracer::enabled_mask();
    if wanted == 0 {
        return;
    }
    let ret = Return {
        site: frame.site,
        depth,
        entry_ticks: frame.entry_ticks,
        exit_ticks: now,
        vanished,
        marks: frame.marks,
    };
    if wanted == GRAPH_TRACER.bit() {
        GRAPH_TRACER.exit(&ret);
    } else {
        for_each_tracer(wanted, |tracer| tracer.exit(&ret));
    }
}

/// Called by `fntrace_return_trampoline` when a hooked function returns.
/// Returns the address to return to.
///
/// # Safety
/// Called only by the return trampoline, with the slot it documents.
#[no_mangle]
pub unsafe extern "C" fn fntrace_exit_entry(slot: *mut usize, tsc: u64) -> usize {
    // The fast path's reading, when it took one and the clock is the TSC.
    let now = if tsc != 0 && clock::uses_tsc() {
        tsc
    } else {
        clock::now_ticks()
    };
    let popped = ShadowStack::current().and_then(|stack| {
        stack.pop_returning(slot as usize, |dead, d| report_exit(dead, d, now, true))
    });
    let Some((frame, depth)) = popped else {
        fatal(b"fntrace: a hooked function returned, but its frame is not on the shadow stack\n");
    };
    report_exit(&frame, depth, now, false);
    frame.real_return
}

/// Reports on stderr and aborts: the real return address is unknown, so no
/// way forward exists. Allocates nothing.
fn fatal(message: &[u8]) -> ! {
    // SAFETY: write(2) of a static buffer; abort has no preconditions.
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
        libc::abort()
    }
}
