//! `dlclose`, which keeps what names a library's functions before the
//! library goes: a library opened, called and closed between two drains
//! of a recording (or before a dump) is no longer listed by the loader
//! when its events are written, and its functions would be written as
//! addresses. Before glibc's `dlclose` runs, the object of the handle is
//! kept in `symbols::opened` (its path, bias and segments; its symbols
//! are read from its file later, as uftrace's reader does).
//!
//! Only `dlclose` is wrapped, not `dlopen`: glibc's `dlopen` resolves a
//! relative name with the run path and `$ORIGIN` of its caller, which a
//! wrapper would replace with its own. The loading of an object is seen
//! by the loader's listings (the symbol index, the recorder's drains).
//! Calls that do not bind to this definition (a library bound to glibc's
//! when fntrace is linked statically, glibc's own) are not seen: such a
//! library is named only if a listing saw it loaded.

use std::ffi::{c_int, c_void};

use super::next::NextSymbols;
use crate::symbols::opened;

type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// glibc's `dlclose`, looked up before `main`.
static REAL: NextSymbols<1> = NextSymbols::new([c"dlclose"]);

#[used]
#[unsafe(link_section = ".init_array")]
static FIND_REAL_FUNCTIONS: extern "C" fn() = find_real_functions;

extern "C" fn find_real_functions() {
    REAL.find_all();
}

/// `dlclose`, after keeping the handle's object (see the module's
/// documentation).
///
/// # Safety
/// As glibc's `dlclose`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    // Nothing to name in a process that traces nothing.
    if crate::sites::SITES.iter().next().is_some() {
        // No panic crosses into C: a failure here only loses names.
        let _ = std::panic::catch_unwind(|| opened::note_closing(handle));
    }
    let real = REAL.get(c"dlclose");
    if real.is_null() {
        return -1;
    }
    // SAFETY: `real` is glibc's `dlclose` (found by name), whose signature
    // this is; the handle is the caller's, as for glibc's.
    unsafe { std::mem::transmute::<*mut c_void, DlcloseFn>(real)(handle) }
}
