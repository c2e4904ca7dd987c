//! Names for the PLT entries whose library calls are traced
//! (`patch::libcall`: the executable's, and with `--nest-libcall` the
//! libraries'): a PLT entry has no symbol of its own, and uftrace names it
//! after its import. Kept apart from the objects' function lists, so that
//! nothing scans or patches a PLT entry as a function.

use std::sync::atomic::{AtomicPtr, Ordering};

use super::Function;

/// The PLT entries named after their imports, sorted by address. Set once
/// per object hooked (all of them at start-up), each time as a whole: a
/// list once published is never freed, so that a name read from it stays
/// valid (a few lists per process).
static NAMES: AtomicPtr<Vec<Function>> = AtomicPtr::new(std::ptr::null_mut());

/// Sets the names (sorted by address), replacing those set before.
pub(crate) fn set_names(names: Vec<Function>) {
    let list = Box::into_raw(Box::new(names));
    NAMES.store(list, Ordering::Release);
}

/// The named PLT entry containing `addr`.
pub(crate) fn function_at(addr: usize) -> Option<&'static Function> {
    let list = NAMES.load(Ordering::Acquire);
    // SAFETY: non-null lists were leaked by `set_names` (Release, paired
    // with the Acquire above) and are never freed or changed.
    let entries: &'static Vec<Function> = unsafe { list.as_ref() }?;
    let idx = entries.partition_point(|f| f.start <= addr);
    let candidate = entries.get(idx.checked_sub(1)?)?;
    candidate.contains(addr).then_some(candidate)
}
