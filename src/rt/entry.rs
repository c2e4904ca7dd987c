//! The Rust side of the entry trampolines (`asm/x86_64/entry.S`).
//!
//! The trampoline has already saved the caller's registers and set the
//! thread's recursion guard, so nothing called from here is traced. The fast
//! path is one lock-free table probe and one mask test; dispatch to tracers
//! is out of line.

use std::sync::atomic::Ordering;

use crate::arch::x86_64::SavedRegs;
use crate::sites::{self, SiteKind, SITES};
use crate::tracer::{self, Call};

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
    // Tracers may set errno (write, mmap, ...); the traced code must not see it.
    // SAFETY: __errno_location returns this thread's errno, always valid.
    let errno = unsafe { *libc::__errno_location() };
    match SITES.find(site_return) {
        Some(site) => {
            let wanted = site.tracers.load(Ordering::Relaxed) & tracer::enabled_mask();
            if wanted != 0 {
                // SAFETY: forwarded from this function's contract.
                unsafe { dispatch(site, wanted, parent_slot, regs) };
            }
        }
        None => {
            sites::on_unknown_site(site_return, kind);
            crate::control::nop_pending_from_hot_path();
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

#[cold]
#[inline(never)]
unsafe fn dispatch(
    site: &sites::Site,
    mut wanted: u64,
    parent_slot: *mut usize,
    regs: *mut SavedRegs,
) {
    let call = Call {
        function: site.function.load(Ordering::Relaxed),
        // SAFETY: the trampoline passes the slot holding the traced
        // function's return address; it is on this thread's stack.
        parent: unsafe { *parent_slot },
        site_return: site.return_address(),
        // SAFETY: the save area lives on the trampoline's frame for this call.
        regs: unsafe { &*regs },
    };
    while wanted != 0 {
        let index = wanted.trailing_zeros() as usize;
        wanted &= wanted - 1;
        let Some(tracer) = tracer::tracer_at(index) else {
            continue;
        };
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tracer.entry(&call)));
        if outcome.is_err() {
            tracer::TRACER_PANICS.fetch_add(1, Ordering::Relaxed);
            tracer::set_enabled(index, false);
        }
    }
}
