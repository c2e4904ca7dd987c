//! The profile tracer's fast paths (`asm/x86_64/profile.S`: the entries,
//! and the exit the return trampoline jumps to): their entry points, and
//! the shared words they read (the fast bit, the era, the tick scale).
//!
//! A site selected by the profile tracer alone, while timestamps come from
//! the TSC, is patched to call `fntrace_profile_mcount` /
//! `fntrace_profile_fentry` instead of the generic trampoline: the shadow
//! frame and the block's counters are updated in assembly, as
//! [`super::block::Block::enter`] and [`super::block::Block::exit`] do,
//! and anything those would do beyond the common case (a new function,
//! path or histogram chunk, an era to catch up with, calls to forget, any
//! shadow-stack hazard) falls back to the generic path, which stays the
//! reference behaviour.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys::clock::TickScale;
use crate::tracer::FastEntries;

extern "C" {
    fn fntrace_profile_mcount();
    fn fntrace_profile_fentry();
    fn fntrace_profile_mcount_stubbed();
    fn fntrace_profile_fentry_stubbed();
    /// The profile tracer's bit while its fast paths may run, else 0.
    static fntrace_profile_fast_bit: AtomicU64;
    /// The profile tracer's era (see the module docs of `profile`).
    static fntrace_profile_era: AtomicU64;
    /// `TickScale::ns_per_tick_fp64` while the fast bit is set.
    static fntrace_profile_ns_per_tick: AtomicU64;
}

/// The fast entries, for sites of each kind.
pub(super) fn entries() -> FastEntries {
    FastEntries {
        mcount: fntrace_profile_mcount as *const () as usize,
        fentry: fntrace_profile_fentry as *const () as usize,
        mcount_stubbed: fntrace_profile_mcount_stubbed as *const () as usize,
        fentry_stubbed: fntrace_profile_fentry_stubbed as *const () as usize,
    }
}

/// The era: changes at every enable and reset. Kept in profile.S, where
/// the fast paths compare it with a block's.
pub(super) fn era() -> &'static AtomicU64 {
    // SAFETY: a plain atomic defined in profile.S, valid for the process.
    unsafe { &fntrace_profile_era }
}

/// Turns the fast paths on with `bit` (frames the fast entry pushes carry
/// it; the fast exit requires it) and `scale`, or off with a `bit` of 0.
/// Returns whether they are on: not while timestamps are not TSC ticks
/// (a factor of 0). The factor is stored before the bit: no fast exit
/// runs with the new bit and an old factor. Called under the control lock.
pub(super) fn set(bit: u64, scale: TickScale) -> bool {
    let factor = scale.ns_per_tick_fp64();
    let bit = if factor == 0 { 0 } else { bit };
    // SAFETY: plain atomics defined in profile.S, valid for the process.
    unsafe {
        if bit != 0 {
            fntrace_profile_ns_per_tick.store(factor, Ordering::Relaxed);
        }
        fntrace_profile_fast_bit.store(bit, Ordering::Release);
    }
    bit != 0
}
