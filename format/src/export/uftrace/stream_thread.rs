//! One thread's part of a [`UftraceStream`](super::UftraceStream): its
//! open calls, and the encoding of its events into `.dat` records made
//! consistent as they arrive (see the stream's documentation), with a
//! short cut for the usual events that keeps the writer's cost per event
//! low; and the thread's file.

use std::fs::File;
use std::io::{self, Write};

use rustix::io::Errno;

use super::super::dirfd::TraceDir;
use super::super::ExportError;
use super::format::{
    encode, lost_record, record, ADDR_BITS, MAX_DEPTH, MORE_BIT, RECORD_SIZE, TYPE_ENTRY, TYPE_EXIT,
};
use super::stream::StreamTotals;
use crate::argspec;
use crate::trace::{EventKind, GraphEvent};

/// One thread of the stream.
pub(super) struct StreamThread {
    pub(super) name: Option<String>,
    /// Open calls: depth and function, outermost first.
    pub(super) open: Vec<(u16, usize)>,
    /// Entry and exit records written (the indices `fntrace.txt` uses).
    pub(super) records: usize,
    /// Indices of the records added for consistency.
    pub(super) added: Vec<usize>,
    /// Time of the last record written (lost records take it).
    pub(super) last_time: u64,
    /// Records held until the thread is listed (see `flush`).
    pub(super) held: Vec<u8>,
    /// Whether the session files do not list the thread yet.
    pub(super) unlisted: bool,
    /// The thread's `.dat` file, open from its first write while the
    /// thread keeps appending (see `UftraceStream::flush`).
    pub(super) file: Option<File>,
    /// Whether the thread appended records since the last flush.
    pub(super) appended: bool,
    /// The smallest depth of an entry seen: in a forked child's session, an
    /// exit shallower than it, with no open call, ends a call the child
    /// inherited from its parent (returning through the parent's frames,
    /// `fork` first): written as it is, as uftrace does.
    pub(super) entry_floor: u16,
    /// In a forked child's session: the smallest depth of a record
    /// written (see `UftraceStream::finish`).
    pub(super) min_depth: u16,
    /// Entry and exit records written before the last lost record, if any:
    /// when records follow it, uftrace holds frames for the calls above
    /// the first of them (entered before the gap, their exits left out),
    /// which only a lost record with nothing open clears (see
    /// [`StreamThread::end_gap`]).
    pub(super) records_at_gap: Option<usize>,
    /// Exits left out since the last lost record (their entry was lost):
    /// counted by the lost record that ends the thread (see
    /// [`StreamThread::end_gap`]).
    pub(super) left_out_since_gap: u64,
    /// Whether a full file system cut off records this thread had made
    /// (its open calls are not those of its file any more: no lost record
    /// can close them).
    pub(super) cut: bool,
    /// Whether the last record written takes argument data after it (see
    /// [`push_event`]).
    pub(super) data_open: bool,
}

impl StreamThread {
    /// Writes a lost record for `count` events into `out` at the gap, as
    /// uftrace 0.13 reads one sanely: every open call first gets an exit at
    /// the time of the last record, and none stays open, so the exits after
    /// the gap of calls entered before it are left out (counted). Measured
    /// on hand-written `.dat` files: with any call open at a lost record,
    /// `uftrace graph` may crash (SIGSEGV), `uftrace report` counts the open
    /// calls erratically (some twice, some never), and the frames uftrace
    /// keeps for them give self times of hours. The exits are not listed in
    /// `added`: fntrace's reader, like uftrace's, counts these calls up to
    /// the gap (the most that is known of them), so that both give the same
    /// figures. The lost record is uftrace's own (see [`lost_record`]).
    /// Returns how many calls it closed.
    pub(super) fn write_gap(&mut self, count: u64, out: &mut Vec<u8>) -> u64 {
        let mut closed = 0;
        while let Some((depth, function)) = self.open.pop() {
            let exit = GraphEvent {
                time_ns: self.last_time,
                function,
                depth,
                kind: EventKind::Exit,
            };
            // An entry that could not be written has no exit either.
            if let Some(bytes) = record(&exit) {
                out.extend_from_slice(&bytes);
                self.records += 1;
                closed += 1;
            }
        }
        out.extend_from_slice(&lost_record(count));
        self.records_at_gap = Some(self.records);
        self.left_out_since_gap = 0;
        closed
    }

    /// Ends a thread that wrote records after a gap (see
    /// [`StreamThread::records_at_gap`]) with a last lost record (its count: the
    /// exits left out since the gap, whose entries were lost), the open
    /// calls closed before it as at a gap. Without it, uftrace 0.13 counts
    /// the frames it made up for the calls above the first record after the
    /// gap once more at the end of the file, each under the name of the
    /// last call it saw at that depth before the gap. Returns whether it
    /// wrote anything.
    /// Returns how many calls it closed, `None` if it wrote nothing.
    pub(super) fn end_gap(&mut self, out: &mut Vec<u8>) -> Option<u64> {
        if self
            .records_at_gap
            .is_none_or(|at_gap| at_gap == self.records)
        {
            return None;
        }
        let count = self.left_out_since_gap;
        Some(self.write_gap(count, out))
    }
}

/// Events a listed thread's `append` encodes before it writes their
/// records: 128 KiB of records (more with records added for consistency),
/// few enough to stay in the caches until the kernel copies them, many
/// enough that the system calls cost little.
pub(super) const CHUNK_EVENTS: usize = 8 << 10;

impl StreamThread {
    /// Appends `bytes` to the thread's `.dat` file in `dir` (opened, and
    /// created, at the first write).
    pub(super) fn write(
        &mut self,
        dir: &TraceDir,
        tid: u32,
        bytes: &[u8],
    ) -> Result<(), ExportError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let path = || dir.path().join(format!("{tid}.dat"));
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(dir.append_open(&format!("{tid}.dat"))?),
        };
        // In pieces of a chunk at most: when the file system fills, the
        // reserve's space finishes the piece being written (whole records),
        // and nothing after it is written.
        for (index, piece) in bytes.chunks(WRITE_PIECE).enumerate() {
            let mut rest = piece;
            let mut full = None;
            while !rest.is_empty() {
                match file.write(rest) {
                    Ok(0) => {
                        let e = io::ErrorKind::WriteZero.into();
                        return Err(ExportError::io(path(), "writing", e));
                    }
                    Ok(written) => rest = &rest[written..],
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if is_full(&e) && full.is_none() && free_reserve(dir) => full = Some(e),
                    Err(e) => {
                        // Whole records only: what this piece wrote of a
                        // record is cut off again.
                        let written = piece.len() - rest.len();
                        let kept = written - written % RECORD_SIZE;
                        let cut = (bytes.len() - index * WRITE_PIECE - kept) / RECORD_SIZE;
                        if let Ok(len) = file.metadata().map(|m| m.len()) {
                            let _ = file.set_len(len - (written - kept) as u64);
                        }
                        self.cut = cut != 0;
                        return Err(if is_full(&e) {
                            ExportError::Full {
                                path: path(),
                                unwritten: cut as u64,
                                source: e,
                            }
                        } else {
                            ExportError::io(path(), "writing", e)
                        });
                    }
                }
            }
            if let Some(source) = full {
                let done = ((index + 1) * WRITE_PIECE).min(bytes.len());
                let cut = (bytes.len() - done) / RECORD_SIZE;
                self.cut = cut != 0;
                return Err(ExportError::Full {
                    path: path(),
                    unwritten: cut as u64,
                    source,
                });
            }
        }
        Ok(())
    }
}

/// The most one `write` of a thread's records hands to the kernel: what
/// the reserve finishes when the file system fills (see [`RESERVE_FILE`]).
const WRITE_PIECE: usize = CHUNK_EVENTS * RECORD_SIZE;

/// A file the first session of a recording fills with [`RESERVE_BYTES`],
/// removed when the file system is full: with its space the stream finishes
/// the write it was making, and then marks the gap, its note and the
/// session files (see [`UftraceStream::finish_incomplete`]).
///
/// [`UftraceStream::finish_incomplete`]: super::UftraceStream::finish_incomplete
pub(super) const RESERVE_FILE: &str = ".fntrace-reserve";
/// The reserve's size: a chunk of records (128 KiB) and the files that
/// finish a session, many times over.
pub(super) const RESERVE_BYTES: usize = 1 << 20;

/// Whether `error` says the file system (or the quota) is full.
pub(super) fn is_full(error: &io::Error) -> bool {
    let code = error.raw_os_error();
    code == Some(Errno::NOSPC.raw_os_error()) || code == Some(Errno::DQUOT.raw_os_error())
}

/// Zeros the reserve is written from, a piece at a time: a megabyte on
/// the heap, once freed, makes glibc's malloc serve blocks that size from
/// its arenas from then on, where one stays resident per arena a
/// recording starts on (in a program fntrace attached to, whose VmRSS
/// grew by that much per arena over attach/detach cycles).
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// Makes the recording's reserve, [`RESERVE_BYTES`] of zeros.
pub(super) fn make_reserve(dir: &TraceDir) -> Result<(), ExportError> {
    let mut file = dir.create_new(RESERVE_FILE)?;
    (0..RESERVE_BYTES / ZEROS.len())
        .try_for_each(|_| file.write_all(&ZEROS))
        .map_err(|e| ExportError::io(dir.path().join(RESERVE_FILE), "writing", e))
}

/// Removes the recording's reserve: whether it was there (another session
/// of the recording may have taken it).
pub(super) fn free_reserve(dir: &TraceDir) -> bool {
    dir.remove(RESERVE_FILE).unwrap_or(false)
}

/// Events an [`encode_run`] takes at most.
pub(super) const RUN_MAX: usize = 1 << 10;
/// Events an [`encode_run`] makes room for at least.
const RUN_MIN: usize = 16;
/// Open calls an [`encode_run`] may add before it stops.
const OPEN_ROOM: usize = 64;

/// Encodes thread `thread`'s next events (at most `room`) into `out` as
/// [`consistent_push`] does, taking a short cut for the usual events (see
/// [`usual_events`]) up to the first other one, which goes the general way.
/// Returns the room for the next run: twice the usual events taken, so
/// that a stretch of unusual events does not make room it does not use.
pub(super) fn encode_run(
    thread: &mut StreamThread,
    events: &mut impl ExactSizeIterator<Item = GraphEvent>,
    room: usize,
    out: &mut Vec<u8>,
    totals: &mut StreamTotals,
) -> usize {
    let room = room.min(events.len());
    let start = out.len();
    out.resize(start + room * RECORD_SIZE, 0);
    let open_before = thread.open.len();
    thread.open.resize(open_before + OPEN_ROOM, (0, 0));
    let (records, _) = out[start..].as_chunks_mut::<RECORD_SIZE>();
    let usual = usual_events(events, records, &mut thread.open, open_before);
    thread.open.truncate(usual.open);
    out.truncate(start + usual.taken * RECORD_SIZE);
    if usual.taken > 0 {
        thread.records += usual.taken;
        thread.last_time = usual.last_time;
        totals.events += usual.taken as u64;
    }
    if let Some(event) = usual.stopped_at {
        push_event(thread, &event, out, totals, false);
    }
    (2 * usual.taken).clamp(RUN_MIN, RUN_MAX)
}

/// What [`usual_events`] did.
struct Usual {
    /// Events taken and encoded.
    taken: usize,
    /// The time of the last of them.
    last_time: u64,
    /// Open calls after them.
    open: usize,
    /// The event it stopped at (taken from the events, not encoded).
    stopped_at: Option<GraphEvent>,
}

/// Encodes events into `records` (one each) while they are usual: an entry
/// deeper than every open call, an exit of the innermost open call, both
/// representable (depth ≤ 1023, a 48-bit address); `open[..open_len]`
/// holds the open calls, and the rest of `open` room for more. The state
/// stays in registers: no call, no growing vector.
#[inline(always)]
fn usual_events(
    events: &mut impl Iterator<Item = GraphEvent>,
    records: &mut [[u8; RECORD_SIZE]],
    open: &mut [(u16, usize)],
    mut open_len: usize,
) -> Usual {
    let mut taken = 0;
    let mut last_time = 0;
    for record in records.iter_mut() {
        let Some(event) = events.next() else {
            break;
        };
        let GraphEvent {
            time_ns,
            function,
            depth,
            kind,
        } = event;
        let addr = function as u64;
        let innermost = open_len.checked_sub(1).map(|i| open[i].0);
        let usual = depth <= MAX_DEPTH && addr >> ADDR_BITS == 0;
        let kind = match kind {
            // The open calls' depths rise from the outermost: none is
            // closed by this entry.
            EventKind::Entry
                if usual
                    && open_len < open.len()
                    && innermost.is_none_or(|open_depth| open_depth < depth) =>
            {
                open[open_len] = (depth, function);
                open_len += 1;
                TYPE_ENTRY
            }
            // Nothing deeper is open: only this call closes.
            EventKind::Exit if usual && innermost == Some(depth) => {
                open_len -= 1;
                TYPE_EXIT
            }
            _ => {
                return Usual {
                    taken,
                    last_time,
                    open: open_len,
                    stopped_at: Some(event),
                }
            }
        };
        *record = encode(time_ns, kind, depth, addr);
        taken += 1;
        last_time = time_ns;
    }
    Usual {
        taken,
        last_time,
        open: open_len,
        stopped_at: None,
    }
}

/// Pushes `event` as [`consistent_push`] (or, in a forked child's session,
/// [`push_forked`]) does, taking argument data among the events (see
/// [`argspec::FOLLOWED_BY_DATA`]): an event followed by data gets uftrace's
/// `more` bit in its record, if its record is written, and the data's
/// bytes go after it; data whose record was not written is left out.
pub(super) fn push_event(
    thread: &mut StreamThread,
    event: &GraphEvent,
    out: &mut Vec<u8>,
    totals: &mut StreamTotals,
    forked: bool,
) {
    if event.depth == argspec::DATA_DEPTH {
        if thread.data_open {
            out.extend_from_slice(&event.time_ns.to_le_bytes());
        }
        return;
    }
    thread.data_open = false;
    let followed = event.depth & argspec::FOLLOWED_BY_DATA != 0;
    let event = &GraphEvent {
        depth: event.depth & !argspec::FOLLOWED_BY_DATA,
        ..*event
    };
    if forked {
        push_forked(thread, event, out, totals);
    } else {
        consistent_push(
            &mut thread.open,
            &mut thread.added,
            &mut thread.records,
            &mut thread.last_time,
            event,
            out,
            totals,
        );
    }
    if !followed {
        return;
    }
    // The event's record, if written, is the last one.
    if let (Some(bytes), Some(last)) = (record(event), out.len().checked_sub(RECORD_SIZE)) {
        if out[last..] == bytes {
            out[last + 8] |= MORE_BIT;
            thread.data_open = true;
        }
    }
}

/// [`push`] in a forked child's session, where an exit may end a call the
/// child inherited (see `StreamThread::entry_floor`).
pub(super) fn push_forked(
    thread: &mut StreamThread,
    event: &GraphEvent,
    out: &mut Vec<u8>,
    totals: &mut StreamTotals,
) {
    thread.min_depth = thread.min_depth.min(event.depth);
    if event.kind == EventKind::Entry {
        thread.entry_floor = thread.entry_floor.min(event.depth);
    } else if event.depth < thread.entry_floor
        && !thread.open.iter().any(|&(depth, _)| depth == event.depth)
    {
        if let Some(bytes) = record(event) {
            out.extend_from_slice(&bytes);
            thread.records += 1;
            thread.last_time = event.time_ns;
            totals.events += 1;
        }
        return;
    }
    consistent_push(
        &mut thread.open,
        &mut thread.added,
        &mut thread.records,
        &mut thread.last_time,
        event,
        out,
        totals,
    );
}

/// Encodes one thread's `event` into `out`, making the records consistent
/// (see the [stream's documentation](super::stream)): `open` holds the thread's open
/// calls, `added` the indices of records made up, `records` the count of
/// records so far, `last_time` the time of the last one.
pub(super) fn consistent_push(
    open: &mut Vec<(u16, usize)>,
    added: &mut Vec<usize>,
    records: &mut usize,
    last_time: &mut u64,
    event: &GraphEvent,
    out: &mut Vec<u8>,
    totals: &mut StreamTotals,
) {
    let mut emit = |event: &GraphEvent, made_up: bool| match record(event) {
        Some(bytes) => {
            out.extend_from_slice(&bytes);
            if made_up {
                added.push(*records);
            } else {
                totals.events += 1;
            }
            *records += 1;
            *last_time = event.time_ns;
        }
        None if !made_up => totals.left_out += 1,
        None => {}
    };
    // The open calls at `depth` or deeper were left (unwound): made-up
    // exits at this event's time close them.
    let close_from =
        |open: &mut Vec<(u16, usize)>, depth: u16, emit: &mut dyn FnMut(&GraphEvent, bool)| {
            while let Some(&(open_depth, function)) = open.last() {
                if open_depth < depth {
                    break;
                }
                open.pop();
                let exit = GraphEvent {
                    time_ns: event.time_ns,
                    function,
                    depth: open_depth,
                    kind: EventKind::Exit,
                };
                emit(&exit, true);
            }
        };
    match event.kind {
        EventKind::Entry => {
            close_from(open, event.depth, &mut emit);
            open.push((event.depth, event.function));
            emit(event, false);
        }
        EventKind::Exit => {
            if !open.iter().any(|&(depth, _)| depth == event.depth) {
                totals.left_out += 1;
                return;
            }
            close_from(open, event.depth + 1, &mut emit);
            open.pop();
            emit(event, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread() -> StreamThread {
        StreamThread {
            name: None,
            open: Vec::new(),
            records: 0,
            added: Vec::new(),
            last_time: 0,
            held: Vec::new(),
            unlisted: false,
            file: None,
            appended: false,
            entry_floor: u16::MAX,
            min_depth: u16::MAX,
            records_at_gap: None,
            left_out_since_gap: 0,
            cut: false,
            data_open: false,
        }
    }

    /// Events of a made-up thread: mostly well nested, up to 90 deep (more
    /// open calls than one run has room for), with unwound calls, exits
    /// whose entry was lost, events deeper than 1023 and addresses wider
    /// than 48 bits mixed in.
    fn events(seed: u64, count: usize) -> Vec<GraphEvent> {
        let mut state = seed;
        let mut random = move |below: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % below
        };
        let (mut events, mut depth, mut time) = (Vec::new(), 0u16, 1_000u64);
        let mut stack: Vec<usize> = Vec::new();
        while events.len() < count {
            time += 1 + random(50);
            let function = 0x40_0000 + 0x10 * random(40) as usize;
            let (kind, at, function) = match random(100) {
                // An unwound call: an entry at a depth still open.
                0..=1 => {
                    let at = random(u64::from(depth) + 1) as u16;
                    stack.truncate(usize::from(at));
                    (EventKind::Entry, at, function)
                }
                // An exit whose entry was lost.
                2 => (EventKind::Exit, random(100) as u16, function),
                3 => (EventKind::Entry, 1_020 + random(10) as u16, function),
                4 => (EventKind::Entry, depth, function | 1 << 50),
                n if (n < 55 && depth < 90) || stack.is_empty() => {
                    (EventKind::Entry, depth, function)
                }
                _ => {
                    let function = stack.pop().unwrap_or(function);
                    (EventKind::Exit, stack.len() as u16, function)
                }
            };
            if kind == EventKind::Entry && at == depth && at < 1_000 {
                stack.push(function);
            }
            depth = stack.len() as u16;
            events.push(GraphEvent {
                time_ns: time,
                function,
                depth: at,
                kind,
            });
        }
        events
    }

    /// At a gap every open call gets an exit (not listed as added) at the
    /// last record's time before the lost record (uftrace's: time 0, depth
    /// 0, the count as address), and nothing stays open;
    /// a thread ends with one more lost record only if records followed
    /// the gap, counting the exits left out since.
    #[test]
    fn gaps_close_every_open_call_before_the_lost_record() {
        use super::super::format::{decode, TYPE_LOST};
        let (mut thread, mut out) = (thread(), Vec::new());
        let mut totals = StreamTotals::default();
        let event = |time_ns, depth, kind| GraphEvent {
            time_ns,
            function: 0x40_1000 + usize::from(depth) * 0x10,
            depth,
            kind,
        };
        for depth in 0..3 {
            let entry = event(10 + u64::from(depth), depth, EventKind::Entry);
            encode_run(
                &mut thread,
                &mut [entry].into_iter(),
                RUN_MAX,
                &mut out,
                &mut totals,
            );
        }
        assert_eq!(thread.end_gap(&mut out), None, "no gap yet");
        assert_eq!(thread.write_gap(500, &mut out), 3);
        let records: Vec<_> = out
            .as_chunks::<RECORD_SIZE>()
            .0
            .iter()
            .map(|r| {
                let r = decode(r);
                (r.time, r.kind, r.depth, r.addr)
            })
            .collect();
        assert_eq!(
            records[3..],
            [
                (12, TYPE_EXIT, 2, 0x40_1020),
                (12, TYPE_EXIT, 1, 0x40_1010),
                (12, TYPE_EXIT, 0, 0x40_1000),
                (0, TYPE_LOST, 0, 500),
            ]
        );
        assert!(thread.open.is_empty());
        assert_eq!((thread.added.clone(), thread.records), (vec![], 6));
        assert_eq!(thread.end_gap(&mut out), None, "nothing after the gap");

        // After the gap: an exit whose entry was before it (left out), a
        // call at depth 2 still open at the end.
        out.clear();
        let after = [
            event(600, 1, EventKind::Exit),
            event(610, 2, EventKind::Entry),
        ];
        let left_out_before = totals.left_out;
        let mut after = after.into_iter();
        while after.len() != 0 {
            encode_run(&mut thread, &mut after, RUN_MAX, &mut out, &mut totals);
        }
        thread.left_out_since_gap += totals.left_out - left_out_before;
        assert_eq!(thread.end_gap(&mut out), Some(1));
        let records: Vec<_> = out
            .as_chunks::<RECORD_SIZE>()
            .0
            .iter()
            .map(|r| {
                let r = decode(r);
                (r.time, r.kind, r.depth)
            })
            .collect();
        assert_eq!(
            records,
            [(610, TYPE_ENTRY, 2), (610, TYPE_EXIT, 2), (0, TYPE_LOST, 0)]
        );
        assert_eq!(decode(&out.as_chunks::<RECORD_SIZE>().0[2]).addr, 1);
        assert_eq!(thread.end_gap(&mut out), None, "ended once");
    }

    /// The short cut writes every byte the general way writes, and leaves
    /// the thread and the totals as it does, whatever the events and
    /// however they are split.
    #[test]
    fn usual_events_short_cut_writes_what_the_general_way_writes() {
        for seed in 0..40 {
            let events = events(seed, 5_000);
            let (mut general, mut general_out) = (thread(), Vec::new());
            let mut general_totals = StreamTotals::default();
            for event in &events {
                consistent_push(
                    &mut general.open,
                    &mut general.added,
                    &mut general.records,
                    &mut general.last_time,
                    event,
                    &mut general_out,
                    &mut general_totals,
                );
            }
            let (mut fast, mut fast_out) = (thread(), Vec::new());
            let mut fast_totals = StreamTotals::default();
            let piece = 1 + seed as usize * 97;
            let mut run = RUN_MAX;
            for part in events.chunks(piece) {
                let mut part = part.iter().copied();
                while part.len() != 0 {
                    run = encode_run(&mut fast, &mut part, run, &mut fast_out, &mut fast_totals);
                }
            }
            assert_eq!(fast_out, general_out, "seed {seed}");
            assert_eq!(fast.open, general.open, "seed {seed}");
            assert_eq!(fast.added, general.added, "seed {seed}");
            assert_eq!(
                (fast.records, fast.last_time),
                (general.records, general.last_time)
            );
            assert_eq!(fast_totals, general_totals, "seed {seed}");
            // Every kind of event happened.
            assert!(general_totals.left_out > 0 && !general.added.is_empty());
            assert!(general_totals.events > 4_000, "{general_totals:?}");
        }
    }
}
