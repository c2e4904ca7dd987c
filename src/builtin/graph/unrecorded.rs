//! The polls of async functions (and their futures' drops) that the graph
//! tracer does not record, linked all the same: with a minimum duration a
//! call's entry is written only at its exit, and without its values, so
//! the runtime future linker (`builtin::futures`) would see none of them
//! (no future counted, and one pending when the limit was set would keep
//! its slot). Here such a call's values are read as `args` reads them and
//! handed to the linker, with nothing written to the ring.

use super::args::{self, Side};
use super::RawEvent;
use crate::tracer::{Call, Return};
use fntrace_format::EventKind;

/// A call's entry that is not written: its values linked, if its
/// function's are linked.
#[inline]
pub(super) fn entry(call: &Call<'_>) {
    if !call.records_args() || !is_linked(call.function) {
        return;
    }
    let event = RawEvent::new(
        call.time_ticks,
        call.site_return,
        call.depth(),
        EventKind::Entry,
    );
    args::with_values(event, call.function, Side::Entry(call), &mut |_| {});
}

/// A call's exit whose values are not written: linked, if its function's
/// are.
#[inline]
pub(super) fn exit(ret: &Return) {
    let function = ret.function();
    if ret.returned.is_none() || !is_linked(function) {
        return;
    }
    let event = RawEvent::new(ret.exit_ticks, ret.site, ret.depth(), EventKind::Exit);
    args::with_values(event, function, Side::Exit(ret), &mut |_| {});
}

/// Whether the linker takes `function`'s values: an async function's
/// poll, or a drop function of their futures.
fn is_linked(function: usize) -> bool {
    args::table().is_some_and(|table| table.futures.links(function))
}
