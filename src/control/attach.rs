//! Attach and detach, from the control layer: the sites of a process
//! that loaded `libfntrace.so` with `dlopen` (`fntrace attach`) are found
//! and adopted, and `detach` gives back the text they held before.

use std::sync::atomic::Ordering;

use super::{
    absorb_panics, control, holds_its_text, init_locked, rescan_and_select, sync_text, SiteText,
};
use crate::error::Error;
use crate::patch::{self, priority, TextWrite};
use crate::rt::thread::Untraced;
use crate::sites::{self, flag};
use crate::{symbols, tracer};

/// What attach sets before anything else, on the thread `fntrace attach`
/// borrowed (cheap: that thread is stopped meanwhile): the scans from now
/// on adopt sites bound to glibc's `mcount`, and text is written through
/// `/proc/self/mem` (the executable stays mapped from its file), whichever
/// operation comes first, [`attach_sites`] or a client's `enable`.
pub(crate) fn prepare_attach() {
    sites::ADOPT_FOREIGN.store(true, Ordering::Relaxed);
    let state = control();
    if !state.initialized {
        patch::alias::write_through_proc_mem();
    }
}

/// Attach (`fntrace_attach_start`, in a process that loaded
/// `libfntrace.so` with `dlopen`): finds the call sites of every loaded
/// object, adopting those that call glibc's `mcount`/`__fentry__` (bound
/// before fntrace was loaded), and makes each a NOP, as [`init`] does in a
/// process started with `FNTRACE_CONTROL`. Again after a detach: the
/// sites it gave back are NOPs again.
pub(crate) fn attach_sites() -> Result<(), Error> {
    let _untraced = Untraced::begin();
    let _priority = priority::boost_for_text_change();
    prepare_attach();
    let mut state = control();
    if !state.initialized {
        init_locked(&mut state)?;
        // In a process that had the library loaded already (preloaded
        // without FNTRACE_CONTROL), the sites found now held their calls
        // of fntrace's `mcount` until this made them NOPs: detach gives
        // those back too.
        for sites::Listed { site, .. } in sites::in_order(state.sites.current()) {
            let flags = site.flags.load(Ordering::Relaxed);
            if site.form().is_some() && flags & (flag::ADOPTED | flag::PATCHABLE) == 0 {
                site.set_flag(flag::CALL_BEFORE_ATTACH, true);
            }
        }
        return Ok(());
    }
    absorb_panics(&mut state);
    rescan_and_select(&mut state, &symbols::current());
    sync_text(&mut state.sites, |_| {})
}

/// Detach: writes back the text every adopted site held before attach
/// (the compiler's call of glibc's `mcount`), and the call of a site that
/// attach found holding its call of fntrace's `mcount` (a process that
/// preloaded the library; such a site then holds its call with no tracer,
/// which the next operation makes a NOP, as at start-up), once no tracer
/// is enabled.
/// The entry jumps of run-time entry patches (`patch`, `-P`) are given
/// back too (their stubs stay mapped, unreachable, for a thread still in
/// one and for the next `patch`). Refused, changing nothing, while a
/// tracer is enabled or when fntrace hooked library calls or patchable
/// entries, whose text this does not restore. Returns the number of sites
/// and entries written back.
pub(crate) fn detach_text() -> Result<usize, Error> {
    let _untraced = Untraced::begin();
    let _priority = priority::boost_for_text_change();
    let mut state = control();
    absorb_panics(&mut state);
    if tracer::enabled_mask() != 0 {
        return Err(Error::Attach(
            "a tracer is still enabled (detach disables every tracer first)".to_string(),
        ));
    }
    // Every selected site is a NOP now (no tracer is enabled).
    sync_text(&mut state.sites, |_| {})?;
    sites::loader::hold(|loaded| {
        sites::loader::drop_gone(loaded, holds_its_text);
        let entry_stub = |addr: usize, flags: u32| {
            flags & flag::ENTRY_STUB != 0 && patch::entry_patch::is_entry_patch_site(addr)
        };
        // Checked before anything is written: refused, nothing changes.
        for sites::Listed { addr, site } in sites::in_order(state.sites.current()) {
            let flags = site.flags.load(Ordering::Relaxed);
            let hooked = flags & flag::PATCHABLE != 0 && flags & flag::RAW == 0;
            if site.form().is_some() && hooked && !entry_stub(addr, flags) {
                return Err(Error::Attach(
                    "library calls or patchable entries were hooked: their text cannot be \
                     given back yet; the process stays attached"
                        .to_string(),
                ));
            }
        }
        let entries =
            patch::entry_patch::restore_entries(|function| loaded.holds_text(function, 1))?;
        let mut writes = Vec::new();
        let mut changed = Vec::new();
        for sites::Listed { addr, site } in sites::in_order(state.sites.current()) {
            let flags = site.flags.load(Ordering::Relaxed);
            let Some(form) = site.form() else {
                continue;
            };
            if entry_stub(addr, flags) {
                // Unreachable now; a NOP (no tracer is enabled).
                continue;
            }
            // What the site held before attach: the foreign call of an
            // adopted site, the call of fntrace's `mcount` of one found
            // holding it at attach; else (NOP then too) nothing to do.
            let (held, restores) = if flags & flag::ADOPTED != 0 {
                if flags & flag::FOREIGN_TEXT != 0 {
                    continue;
                }
                match sites::foreign_text(addr) {
                    Some(held) => (held, flag::FOREIGN_TEXT),
                    None => continue,
                }
            } else if flags & flag::CALL_BEFORE_ATTACH != 0 && flags & flag::TEXT_IS_CALL == 0 {
                (site.original_bytes(), flag::TEXT_IS_CALL)
            } else {
                continue;
            };
            if SiteText::from_flags(flags) != SiteText::Nop {
                return Err(Error::Attach(format!(
                    "the site at {addr:#x} still holds a call of fntrace's"
                )));
            }
            let len = form.instruction_len();
            writes.push(TextWrite::new(
                addr,
                &site.nop_text(form)[..len],
                &held[..len],
            )?);
            changed.push((site, restores));
        }
        for &(site, restores) in &changed {
            site.set_flag(restores, true);
        }
        if writes.is_empty() {
            return Ok(entries);
        }
        if let Err(err) = patch::apply(&writes) {
            for &(site, restores) in &changed {
                site.set_flag(restores, false);
            }
            return Err(err);
        }
        Ok(entries + writes.len())
    })
}
