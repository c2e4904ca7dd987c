//! Tracing code built without instrumentation, from the control layer:
//! run-time entry patching (uftrace's `-P`) and library calls through
//! PLTs (uftrace's default libcalls), both under the control lock, the
//! text written the way every enable writes it.

use super::{control, init_locked, rescan, select_by_filters, sync_text, Control};
use crate::error::Error;
use crate::filter::Filter;
use crate::patch::entry_patch::EntryPatchReport;
pub(crate) use crate::patch::libcall::LibcallScope;
use crate::patch::{self, priority};
use crate::rt::thread::Untraced;
use crate::{sites, symbols};

/// Run-time entry patching (uftrace's `-P`): gives every function of the
/// executable and its loaded libraries whose demangled name matches one of
/// `globs` (`*` and `?`, as in [`Filter::include`]) and that has no call
/// site of its own a site fntrace makes: its first instructions are moved
/// into a stub near it, whose NOP is an fentry site, and a `jmp` to the
/// stub is written over its entry (once, by the stop-the-world protocol).
/// The functions are then traced like any other by `enable`/`enable_with`
/// (tracers already enabled select them through their filters at once).
/// Functions that cannot be patched safely are refused with a reason; the
/// report returned covers every call so far (see
/// `docs/runtime-patching.md`). Functions looked at once (patched or
/// refused) are not looked at again.
pub fn patch_functions(globs: &[&str]) -> Result<EntryPatchReport, Error> {
    let _untraced = Untraced::begin();
    let _priority = priority::boost_for_text_change();
    let mut state = control();
    init_locked(&mut state)?;
    patch_locked(&mut state, globs)?;
    Ok(patch::entry_patch::report())
}

/// [`patch_functions`]'s work, under the control lock.
pub(super) fn patch_locked(state: &mut Control, globs: &[impl AsRef<str>]) -> Result<(), Error> {
    let filter = globs
        .iter()
        .fold(Filter::new(), |filter, glob| filter.include(glob.as_ref()));
    if !filter.has_name_rules() {
        return Ok(());
    }
    let index = symbols::current();
    let writes = sites::loader::hold(|loaded| {
        patch::entry_patch::prepare(&index, |object| loaded.lists(object), &filter)
    })?;
    select_by_filters(state, &index);
    sync_text(&mut state.sites, |_| {})?;
    sites::loader::hold(|_| patch::entry_patch::write_entries(&writes))?;
    Ok(())
}

/// Library calls (uftrace's default libcall tracing): the executable's
/// calls into shared libraries through its PLT become sites named after
/// the imported functions, selected by the enabled tracers' filters like
/// any (see `patch::libcall`). Once per process; the error says why
/// nothing was hooked (a program linked with `libfntrace.a`).
pub(crate) fn trace_library_calls(
    scope: LibcallScope,
) -> Result<patch::libcall::LibcallReport, String> {
    let _untraced = Untraced::begin();
    let _priority = priority::boost_for_text_change();
    let mut state = control();
    init_locked(&mut state).map_err(|e| e.to_string())?;
    let index = symbols::current();
    let report = patch::libcall::hook(&index, scope)?;
    if report.bound_profiling != 0 {
        // The objects are the same, but `mcount@plt`'s slot is bound now:
        // scanned again, the executable's `-pg` sites are found (lazy
        // binding left them to their first call, too late to be named in
        // a recording's header).
        state.scanned_generation = index.generation.wrapping_add(1);
        rescan(&mut state, &index);
    }
    select_by_filters(&mut state, &index);
    sync_text(&mut state.sites, |_| {}).map_err(|e| e.to_string())?;
    Ok(report)
}

/// What [`patch_functions`] patched and refused so far.
pub fn patch_report() -> EntryPatchReport {
    patch::entry_patch::report()
}
