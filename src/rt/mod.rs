//! The per-call runtime: what the trampolines call, and what tracers use on
//! the traced-call path (thread ids, clock, per-thread buffers, the shadow
//! stack). Knows tracers only through the interface in `crate::tracer`.
//! Nothing here patches text, takes a lock or allocates with `malloc` on
//! the traced path; the operation lock ([`ops`]) is for control and
//! draining only.

pub(crate) mod contexts;
mod entry;
mod exported;
pub(crate) mod ops;
pub(crate) mod own_threads;
pub mod ring;
pub(crate) mod shadow;
pub(crate) mod spawn;
pub(crate) mod thread;
mod unwind;

/// Prepares what the traced path must find ready (and must not make
/// itself): the thread-exit key of shadow stacks, the real unwinder
/// functions and `makecontext`, the fork handlers, the clock's calibration.
pub(crate) fn prepare() {
    shadow::prepare();
    thread::prepare_exit_hook();
    std::hint::black_box(unwind::prepare());
    std::hint::black_box(contexts::prepare());
    // First: in the parent, the alias must count the fork before the
    // operation lock is released (see `install_fork_handlers`).
    crate::patch::alias::install_fork_handlers();
    ops::prepare_for_fork();
    crate::sys::clock::calibrate(std::time::Duration::from_millis(10));
}
