//! `fntrace_attach_start` and `fntrace_attach_start_here`: what `fntrace
//! attach PID` calls in a running process after loading `libfntrace.so`
//! into it with `dlopen` (the first on one of its threads, borrowed with
//! ptrace; the second on a thread it started there to load the library,
//! the borrowed thread let go meanwhile). In such a process the library's
//! constructor ran inside `dlopen` and, with no `FNTRACE_*` variable set,
//! did nothing; this does what start-up does for `FNTRACE_CONTROL=1`:
//! finds the call sites of every loaded object (adopting those bound to
//! glibc's `mcount`, see `crate::sites`), makes them NOPs, and serves the
//! default control socket (`/tmp/fntrace-UID/PID.sock`). Top layer: it
//! uses live control.

use std::ffi::c_int;

use crate::capi::run;
use crate::session::Failure;

/// `int fntrace_attach_start(void)`: attach (see the module's comment).
/// 0, or a negative errno-style code with the message for
/// `fntrace_last_error` (on the calling thread). Calling it again in a
/// process that serves its control socket changes nothing; after a
/// `detach` it attaches again.
#[unsafe(no_mangle)]
pub extern "C" fn fntrace_attach_start() -> c_int {
    run("fntrace_attach_start", || {
        crate::socket::live::attach(false).map_err(Failure::from)
    })
}

/// `int fntrace_attach_start_here(void)`: [`fntrace_attach_start`] for a
/// thread `fntrace attach` started to load the library, not one it
/// borrowed: finds the call sites and makes them NOPs on the calling
/// thread before it returns, instead of on a thread of fntrace's.
#[unsafe(no_mangle)]
pub extern "C" fn fntrace_attach_start_here() -> c_int {
    run("fntrace_attach_start_here", || {
        crate::socket::live::attach(true).map_err(Failure::from)
    })
}
