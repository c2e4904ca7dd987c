//! The calls each profiled thread has open now (entered, not returned),
//! read from the threads' blocks by another thread: what a live view
//! (`fntrace top`) needs to count, in an interval, the part of a long
//! call that lies inside it instead of its whole life in the interval it
//! returns in.
//!
//! Read-only, and racy by design: the owner thread keeps pushing and
//! popping its open calls (plain stores, no lock) while this reads them.
//! Blocks are never unmapped, so every load is of mapped memory, and a
//! row number read torn indexes a row of the block all the same (one not
//! yet published names no function, and the call is left out). Only the
//! frames below the open count read first are read, and a frame is kept
//! only if its entry time reads the same before and after its other
//! fields and it is still below the open count read after them: the
//! owner writes a call's function row and depth before its entry time,
//! and x86-64 keeps stores, and loads, in order, so a kept frame's
//! function, depth and entry are one call's. Its completed callees' time,
//! written after the entry, may still be the previous call's at that
//! depth when the call was entered during the read: that call is then
//! nanoseconds old, its self time so far counted as 0 in that one
//! reading (the next counts it). A call that returns or starts while the
//! frames are read may be left out or listed: the reader (the socket's
//! `profile` reply) reads twice around the snapshot for that.

use std::sync::atomic::Ordering;

use super::block::{NONE, OWNED};
use super::{fast, ProfileTracer};
use crate::rt::shadow::MAX_HOOKED_DEPTH;
use crate::sites::function_of_site;
use crate::sys::clock::TickScale;

/// One call open on a profiled thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpenCall {
    /// The thread's kernel id.
    pub tid: u32,
    /// Its depth among the thread's hooked calls.
    pub depth: u32,
    /// The function's entry address (as in the snapshot's rows).
    pub function: usize,
    /// The call's entry, on the monotonic clock (ns).
    pub entry_ns: u64,
    /// The summed durations of its completed direct children (ns).
    pub children_ns: u64,
}

impl ProfileTracer {
    /// The calls open now on every thread whose block is in the current
    /// era (the others' open calls are forgotten at their next call), each
    /// thread's outermost first; none while the tracer is off. See the
    /// module docs for what a racing read may miss.
    pub(crate) fn open_calls(&self) -> Vec<OpenCall> {
        let mut calls = Vec::new();
        if !self.is_enabled() {
            return calls;
        }
        let era = fast::era().load(Ordering::Acquire);
        let scale = TickScale::current();
        for block in self.blocks() {
            let h = &block.header;
            if h.state.load(Ordering::Acquire) != OWNED || h.era.load(Ordering::Acquire) != era {
                continue;
            }
            let tid = h.tid.load(Ordering::Relaxed);
            let open = (h.open.load(Ordering::Acquire) as usize).min(MAX_HOOKED_DEPTH);
            let mut read = Vec::with_capacity(open);
            for (index, frame) in block.open[..open].iter().enumerate() {
                let entry = frame.entry_ticks.load(Ordering::Acquire);
                let row = frame.row.load(Ordering::Acquire);
                let depth = frame.depth.load(Ordering::Acquire);
                let children_ns = frame.children_ns.load(Ordering::Acquire);
                if frame.entry_ticks.load(Ordering::Acquire) != entry || row == NONE {
                    continue;
                }
                let Some(r) = block.rows.get(row as usize) else {
                    continue;
                };
                let site = r.site.load(Ordering::Acquire);
                let function = match function_of_site(site) {
                    0 => site,
                    f => f,
                };
                let call = OpenCall {
                    tid,
                    depth,
                    function,
                    entry_ns: scale.ns(entry),
                    children_ns,
                };
                read.push((index, call));
            }
            // Frames at or above the count read now were popped meanwhile.
            let now = h.open.load(Ordering::Acquire) as usize;
            calls.extend(
                read.into_iter()
                    .filter(|&(index, _)| index < now)
                    .map(|(_, c)| c),
            );
        }
        calls
    }
}
