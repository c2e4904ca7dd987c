//! Names for the executable's PLT entries whose library calls are traced
//! (`patch::libcall`): a PLT entry has no symbol of its own, and uftrace
//! names it after its import. Kept apart from the objects' function
//! lists, so that nothing scans or patches a PLT entry as a function.

use std::sync::OnceLock;

use super::Function;

/// The PLT entries named after their imports, sorted by address (set
/// once).
static NAMES: OnceLock<Vec<Function>> = OnceLock::new();

/// Sets the names (sorted by address); only the first call counts.
pub(crate) fn set_names(names: Vec<Function>) {
    let _ = NAMES.set(names);
}

/// The named PLT entry containing `addr`.
pub(crate) fn function_at(addr: usize) -> Option<&'static Function> {
    let entries = NAMES.get()?;
    let idx = entries.partition_point(|f| f.start <= addr);
    let candidate = entries.get(idx.checked_sub(1)?)?;
    candidate.contains(addr).then_some(candidate)
}
