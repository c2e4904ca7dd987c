//! Argument and return-value data among the events an [`EventSource`]
//! gives the whole-trace writer (as the runtime hands them to the
//! streaming writer: see [`argspec::FOLLOWED_BY_DATA`]): taken out before
//! the events are made consistent, and put back after the record of the
//! event they came with, with its `more` bit.
//!
//! [`EventSource`]: crate::source::EventSource

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::Write;

use super::format::{MORE_BIT, RECORD_SIZE};
use crate::argspec;
use crate::trace::GraphEvent;

/// The events read with data, each with its bytes, until their records
/// are written.
#[derive(Default)]
pub(super) struct Pending(RefCell<VecDeque<(GraphEvent, Vec<u8>)>>);

impl Pending {
    /// Writes the record `bytes` of `event` to `out`; if `recorded` (an
    /// event of the thread, not one made up) and it was read with data,
    /// with the `more` bit and the data after it (the data of events read
    /// before it, whose records were never written, is dropped).
    pub(super) fn write(
        &self,
        event: &GraphEvent,
        mut bytes: [u8; RECORD_SIZE],
        recorded: bool,
        out: &mut impl Write,
    ) -> std::io::Result<()> {
        let mut pending = self.0.borrow_mut();
        let same = |(e, _): &(GraphEvent, Vec<u8>)| {
            (e.time_ns, e.function, e.kind) == (event.time_ns, event.function, event.kind)
        };
        let at = pending.iter().position(same).filter(|_| recorded);
        let Some(at) = at else {
            return out.write_all(&bytes);
        };
        let data = pending.drain(..=at).next_back().map(|(_, data)| data);
        bytes[8] |= MORE_BIT;
        out.write_all(&bytes)?;
        out.write_all(&data.unwrap_or_default())
    }
}

/// `events` without their data, the flag taken off their depth; the data
/// kept in `pending` (if given) for [`Pending::record_with_data`]. Data
/// without its event is dropped.
pub(super) fn without_data<'a>(
    events: &'a mut dyn Iterator<Item = GraphEvent>,
    pending: Option<&'a Pending>,
) -> impl Iterator<Item = GraphEvent> + 'a {
    let mut events = events.peekable();
    std::iter::from_fn(move || loop {
        let event = events.next()?;
        if event.depth == argspec::DATA_DEPTH {
            continue;
        }
        if event.depth & argspec::FOLLOWED_BY_DATA == 0 {
            return Some(event);
        }
        let event = GraphEvent {
            depth: event.depth & !argspec::FOLLOWED_BY_DATA,
            ..event
        };
        let mut data = Vec::new();
        while let Some(slot) = events.next_if(|e| e.depth == argspec::DATA_DEPTH) {
            data.extend_from_slice(&slot.time_ns.to_le_bytes());
        }
        if let Some(pending) = pending {
            pending.0.borrow_mut().push_back((event, data));
        }
        return Some(event);
    })
}
