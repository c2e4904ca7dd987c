//! Where the reports and exports read a trace from: [`EventSource`], which
//! hands out one thread's events at a time as an iterator. A [`Trace`] in
//! memory is one; so is a uftrace data directory read record by record
//! ([`UftraceReader`](crate::export::UftraceReader)), whose threads are read
//! from their files each time, so that nothing proportional to the number of
//! events is ever held.

use std::convert::Infallible;

use crate::trace::{GraphEvent, Trace};

/// A thread of a trace, as listed before its events are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Kernel thread id.
    pub tid: u32,
    /// The thread's name, when known.
    pub name: Option<String>,
}

/// Where a thread lost events: `count` events were lost after the first
/// `after` of the events [`EventSource::read_thread`] gives (a gap in the
/// events: calls open before it may end after it, and exits after it may
/// belong to calls entered in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    /// Events read before the gap.
    pub after: usize,
    /// Events lost there.
    pub count: u64,
}

/// A trace whose threads' events can be read, one thread at a time, as many
/// times as a report needs.
pub trait EventSource {
    /// What can go wrong while reading events ([`Infallible`] for a trace in
    /// memory).
    type Error;

    /// Process id of the traced process.
    fn pid(&self) -> u32;

    /// Path of its executable.
    fn exe(&self) -> &str;

    /// The threads, in the trace's order; `read_thread`'s `index` counts in
    /// this list.
    fn threads(&self) -> Vec<ThreadInfo>;

    /// The readable name of `function` (an address as events carry it), or
    /// the address in hex.
    fn name_of(&self, function: usize) -> String;

    /// Calls `read` with an iterator of the events of thread `index`, in time
    /// order, and returns what it returned with the thread's count of lost
    /// events: all of them for a trace in memory; for a trace read from
    /// files, those among the records read, which is all of them once
    /// `read` has read the iterator to its end. Reading stops at the first
    /// error, which is returned instead.
    fn read_thread<R>(
        &self,
        index: usize,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), Self::Error>;

    /// How much there is to read of thread `index`, in any unit common to
    /// the source's threads (0 if unknown): readers that read threads side
    /// by side start with the largest.
    fn size_hint(&self, index: usize) -> u64 {
        let _ = index;
        0
    }

    /// Where thread `index` lost events, in order, if the source knows
    /// (their counts add up to at most its lost count; the rest were lost
    /// at places not known). The default: not known, none listed.
    fn gaps(&self, index: usize) -> Vec<Gap> {
        let _ = index;
        Vec::new()
    }

    /// Whether thread `index` is the thread of a forked child that
    /// continues its parent's calls (the thread that called `fork`, in a
    /// process whose parent was tracing): the exits at its start whose
    /// entries it lacks end calls its parent entered. A uftrace directory
    /// written from it continues in the parent's frames as uftrace's own
    /// recordings of a child do, instead of giving those calls entries of
    /// the child's (see [`write_uftrace_dir_of`]). The default: no.
    ///
    /// [`write_uftrace_dir_of`]: crate::export::write_uftrace_dir_of
    fn continues_parent_frames(&self, index: usize) -> bool {
        let _ = index;
        false
    }

    /// What the recorder that made these events says of them, as
    /// `key=value` words (a flight recorder's totals over its life): the
    /// trace directory keeps it as a recorder note in `fntrace.txt`, which
    /// `recorder_notes` reads back. The default: nothing.
    fn recorder_note(&self) -> Option<String> {
        None
    }

    /// The argument and return values recorded with thread `index`'s
    /// events (`-A`, `-R`), as uftrace's `replay` shows them (see
    /// [`argspec::show`](crate::argspec::show)). The default: none.
    fn values_of(&self, index: usize) -> Result<Values, Self::Error> {
        let _ = index;
        Ok(Values::default())
    }
}

/// The values recorded with a thread's events (see
/// [`EventSource::values_of`]), keyed by the event's time and whether it
/// is an exit: `(1, "key")` for an entry, ` = 5` for an exit. Two events of
/// one kind at the same nanosecond share a key: the first one's values
/// stand.
pub type Values = std::collections::HashMap<(u64, bool), String>;

impl EventSource for Trace {
    type Error = Infallible;

    fn pid(&self) -> u32 {
        self.pid
    }

    fn exe(&self) -> &str {
        &self.exe
    }

    fn threads(&self) -> Vec<ThreadInfo> {
        self.threads
            .iter()
            .map(|thread| ThreadInfo {
                tid: thread.tid,
                name: thread.name.clone(),
            })
            .collect()
    }

    fn name_of(&self, function: usize) -> String {
        Trace::name_of(self, function)
    }

    fn read_thread<R>(
        &self,
        index: usize,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), Infallible> {
        let thread = &self.threads[index];
        Ok((read(&mut thread.events.iter().copied()), thread.lost))
    }

    fn size_hint(&self, index: usize) -> u64 {
        self.threads[index].events.len() as u64
    }
}

impl<S: EventSource> EventSource for &S {
    type Error = S::Error;

    fn pid(&self) -> u32 {
        (*self).pid()
    }

    fn exe(&self) -> &str {
        (*self).exe()
    }

    fn threads(&self) -> Vec<ThreadInfo> {
        (*self).threads()
    }

    fn name_of(&self, function: usize) -> String {
        (*self).name_of(function)
    }

    fn read_thread<R>(
        &self,
        index: usize,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), S::Error> {
        (*self).read_thread(index, read)
    }

    fn size_hint(&self, index: usize) -> u64 {
        (*self).size_hint(index)
    }

    fn gaps(&self, index: usize) -> Vec<Gap> {
        (*self).gaps(index)
    }

    fn continues_parent_frames(&self, index: usize) -> bool {
        (*self).continues_parent_frames(index)
    }

    fn recorder_note(&self) -> Option<String> {
        (*self).recorder_note()
    }

    fn values_of(&self, index: usize) -> Result<Values, S::Error> {
        (*self).values_of(index)
    }
}

/// An [`EventSource`] whose threads' gaps are given ([`EventSource::gaps`]
/// answers with them): for writing a trace, read from a source that does
/// not know where it lost events, with the places learned elsewhere.
#[derive(Debug)]
pub struct WithGaps<'a, S> {
    /// The events, threads and names.
    pub source: &'a S,
    /// Per thread, in the source's thread order, where it lost events.
    pub gaps: Vec<Vec<Gap>>,
}

impl<S: EventSource> EventSource for WithGaps<'_, S> {
    type Error = S::Error;

    fn pid(&self) -> u32 {
        self.source.pid()
    }

    fn exe(&self) -> &str {
        self.source.exe()
    }

    fn threads(&self) -> Vec<ThreadInfo> {
        self.source.threads()
    }

    fn name_of(&self, function: usize) -> String {
        self.source.name_of(function)
    }

    fn read_thread<R>(
        &self,
        index: usize,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), S::Error> {
        self.source.read_thread(index, read)
    }

    fn size_hint(&self, index: usize) -> u64 {
        self.source.size_hint(index)
    }

    fn gaps(&self, index: usize) -> Vec<Gap> {
        self.gaps.get(index).cloned().unwrap_or_default()
    }

    fn continues_parent_frames(&self, index: usize) -> bool {
        self.source.continues_parent_frames(index)
    }

    fn recorder_note(&self) -> Option<String> {
        self.source.recorder_note()
    }

    fn values_of(&self, index: usize) -> Result<Values, S::Error> {
        self.source.values_of(index)
    }
}

/// The value of a computation that cannot fail (one over a [`Trace`] in
/// memory).
pub fn infallible<T>(result: Result<T, Infallible>) -> T {
    match result {
        Ok(value) => value,
        Err(never) => match never {},
    }
}
