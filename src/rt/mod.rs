//! The per-call runtime: what the trampolines call, and what tracers use on
//! the traced-call path (thread ids, clock, per-thread buffers). Nothing here
//! takes a lock or allocates with `malloc` on that path.

pub(crate) mod clock;
mod entry;
pub(crate) mod fast;
pub mod ring;
pub(crate) mod shadow;
pub(crate) mod thread;
mod unwind;

pub(crate) use unwind::prepare as prepare_unwinding;
