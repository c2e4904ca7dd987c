//! The graph tracer's fast paths (`asm/x86_64/graph.S` for entries, the
//! start of `asm/x86_64/return.S` for exits): their entry points, and the
//! flag that lets exits use them. (How a site reaches an entry, directly or
//! through a jump stub, is the patch layer's `reach`.)
//!
//! A site selected by the graph tracer alone, while the graph tracer has no
//! duration limit (the fast paths apply its depth limit), is patched to call `fntrace_graph_mcount` /
//! `fntrace_graph_fentry` instead of the generic trampoline: no site-table
//! probe, no register save area, no call into Rust. Anything unusual falls
//! back to the generic path, which stays the reference behaviour.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::tracer::FastEntries;

extern "C" {
    fn fntrace_graph_mcount();
    fn fntrace_graph_fentry();
    fn fntrace_graph_mcount_stubbed();
    fn fntrace_graph_fentry_stubbed();
    /// The graph tracer's bit while exits may take the fast path, else 0.
    static fntrace_graph_fast_bit: AtomicU64;
    /// The graph tracer's depth limit for the fast paths.
    static fntrace_graph_max_depth: AtomicU64;
}

/// The fast entries, for sites of each kind.
pub(crate) fn entries() -> FastEntries {
    FastEntries {
        mcount: fntrace_graph_mcount as *const () as usize,
        fentry: fntrace_graph_fentry as *const () as usize,
        mcount_stubbed: fntrace_graph_mcount_stubbed as *const () as usize,
        fentry_stubbed: fntrace_graph_fentry_stubbed as *const () as usize,
    }
}

/// Sets the mask that frames pushed by the fast entry carry, and that the
/// fast exit requires (0 turns the fast exit off), and the deepest depth
/// whose events the fast paths record. The limit is stored first: no fast
/// path runs with the new bit and the old limit.
pub(crate) fn set_exit_bit(bit: u64, max_depth: usize) {
    // SAFETY: plain atomics defined in graph.S, valid for the whole process.
    unsafe {
        fntrace_graph_max_depth.store(max_depth as u64, Ordering::Release);
        fntrace_graph_fast_bit.store(bit, Ordering::Release);
    }
}

/// The mask the fast paths currently use (0: they write no event).
pub(crate) fn exit_bit() -> u64 {
    // SAFETY: a plain atomic defined in graph.S, valid for the whole process.
    unsafe { fntrace_graph_fast_bit.load(Ordering::Acquire) }
}
