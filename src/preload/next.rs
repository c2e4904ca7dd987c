//! The C library's definitions of the functions fntrace defines in its
//! place (the exec family, `sigaction`, `signal`): looked up with
//! `dlsym(RTLD_NEXT)` by each wrapping module's constructor, before `main`,
//! because `dlsym` is not for every context a wrapper runs in (the child
//! of a `fork`, a signal handler).

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The next definitions of `N` functions, found once.
pub(super) struct NextSymbols<const N: usize> {
    names: [&'static CStr; N],
    found: [AtomicPtr<c_void>; N],
}

impl<const N: usize> NextSymbols<N> {
    /// Nothing found yet.
    pub(super) const fn new(names: [&'static CStr; N]) -> NextSymbols<N> {
        NextSymbols {
            names,
            found: [const { AtomicPtr::new(std::ptr::null_mut()) }; N],
        }
    }

    /// Looks every name up: called by the wrapping module's constructor.
    pub(super) fn find_all(&self) {
        // A constructor may run after the environment's start-up has
        // patched the C library (`-P '*'`): its calls are fntrace's.
        let _untraced = crate::rt::thread::Untraced::begin();
        for (slot, name) in self.found.iter().zip(self.names) {
            // SAFETY: `name` is a C string; RTLD_NEXT looks the symbol up
            // in the objects loaded after this one (the C library).
            let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
            slot.store(found, Ordering::Release);
        }
    }

    /// The next definition of `name`, one of the names given to
    /// [`NextSymbols::new`]; null if there is none. Looked up now if the
    /// constructors have not run yet (another library's constructor
    /// called the wrapper).
    pub(super) fn get(&self, name: &CStr) -> *mut c_void {
        let index = self
            .names
            .iter()
            .position(|wrapped| *wrapped == name)
            .expect("a wrapped function");
        let found = self.found[index].load(Ordering::Acquire);
        if found.is_null() {
            self.find_all();
            return self.found[index].load(Ordering::Acquire);
        }
        found
    }
}
