//! Stop-the-world patching: park every other thread in a signal handler,
//! write the text, resume everyone.
//!
//! # Protocol of one [`Patcher::apply`]
//! 1. Take the process-wide patch lock: one operation at a time. A second
//!    caller waits on it (and is stopped like any thread meanwhile; its
//!    futex wait is interrupted and restarted).
//! 2. Prepare everything that allocates or locks while the world still runs:
//!    validate the writes, open `/proc/self/task` and the `mem` file, record
//!    page protections ([`TextWriter::prepare`]), check the `old` bytes,
//!    (re)install the signal handler (refusing if the program installed
//!    its own), and before each attempt size the tid list and the
//!    acknowledgement table generously. Once a thread is stopped it may
//!    hold the malloc lock or any other lock, so from step 3 to step 6 the
//!    patcher makes only system calls, atomic operations and in-place
//!    slice work, and cannot panic.
//! 3. Publish a new operation epoch, then `tgkill` the stop signal to every
//!    thread in `/proc/self/task` except the caller and wait (futex on the
//!    acknowledgement counter) until each one acknowledged. Re-read the
//!    directory with raw `getdents64`: threads created meanwhile were not in
//!    the first listing, so signal and wait for them too, until a listing
//!    shows no new thread. That listing is complete: every other thread is
//!    parked, and a `clone` interrupted by our signal is either restarted
//!    after the handler or had already made the child visible. Whenever no
//!    acknowledgement came for a slice (1 ms, doubling to 16 ms), the
//!    patcher reads each silent thread's `/proc/self/task/<tid>/status`:
//!    a thread that is gone (`tgkill(.., 0)` fails with ESRCH, or its state
//!    is zombie/dead, e.g. a main thread that called `pthread_exit`) leaves
//!    the expected set; a thread asleep with the signal blocked ends the
//!    attempt at once. Such a thread may be waiting for a lock held by a
//!    thread we stopped (glibc's thread exit blocks all signals, then takes
//!    the stack-cache lock that `pthread_create` holds), so the patcher
//!    releases everyone, sleeps (1 ms, doubling to 32 ms) and starts over
//!    with a fresh epoch. Only when the ack timeout (for the whole
//!    operation) runs out does it fail with
//!    [`Error::ThreadDidNotAcknowledge`], naming the silent thread; nothing
//!    is written.
//! 4. The handler (async-signal-safe: atomics, futex, gettid; errno
//!    preserved) acknowledges only if an operation with its signal is active,
//!    so a stale delivery (a thread that unblocks the signal after an earlier
//!    timeout) returns at once. It records its tid in a slot of a
//!    preallocated table (so a silent thread can be named), bumps the
//!    counter, wakes the patcher, and parks on a futex until the epoch it
//!    saw is withdrawn, as a `SCHED_BATCH` thread if it was `SCHED_OTHER`
//!    (so that, woken all at once, the parked threads do not preempt the
//!    patcher on its way out: with 16 busy threads on 2 CPUs that cost
//!    26–66 ms per release; see [`crate::sys::sched`]). The patcher decides completeness by the tids in the
//!    table, not by the count, so a stray acknowledgement cannot stand in
//!    for a missing one.
//!    Before acknowledging, a thread interrupted strictly inside the bytes
//!    of a write that replaces several one-byte NOPs (a patchable entry's
//!    first write, see `sites::patchable`) has its program counter moved
//!    past them in its signal context; the counter it resumes at is
//!    recorded with its tid, and the patcher refuses to write (releases and
//!    retries) while one lies strictly inside a write.
//! 5. Write: re-read the text and re-check the `old` bytes, put each `new`
//!    in the [`TextWriter`]'s image and store it (a few `pwrite`s for the
//!    whole batch; rolling back on error), execute `cpuid`.
//! 6. Release: withdraw the epoch and wake all parked threads; each runs
//!    `cpuid` before returning (returning from a syscall with `sysret` is not
//!    serializing, and a resumed thread must not execute bytes it fetched
//!    before the write). The patcher waits until no thread is between its
//!    epoch check and the end of recording its tid in the table, the only
//!    writes the handler makes that the next operation relies on, so the
//!    next operation starts clean. It does not wait for released threads to
//!    get the CPU back: a thread still in the handler sees its epoch
//!    withdrawn whenever it runs and leaves. Waiting for all of them costs a
//!    scheduler slice per runnable thread beyond the core count (measured:
//!    23 ms instead of 1.6 ms per operation with 8 spinning threads on 2
//!    cores), because a woken thread that resumes spinning keeps its CPU.
//!
//! Every wait of the patcher (acknowledgements, release, the pause
//! between attempts) sleeps in the kernel (futex, `nanosleep`), never
//! spins: a patcher running `SCHED_FIFO` (see [`crate::patch::priority`])
//! would keep a spinning CPU from the very threads it waits for. Under
//! `SCHED_FIFO` each wake-up runs at once, so the ack timeout holds within
//! about a millisecond with busy threads on every CPU.
//!
//! # Hazards left to the user
//! Even with `SA_RESTART`, some blocking calls fail with EINTR when the
//! handler runs (`poll`, `epoll_wait`, `select`, `nanosleep`, `sigtimedwait`,
//! sockets with timeouts; see signal(7)); code that does not retry them sees
//! the EINTR. fntrace never takes over a signal the program handles:
//! [`set_stop_signal`] accepts only signals without a standard meaning,
//! and every operation checks the stop signal's disposition first; if the
//! program installed a handler for it (at any time, also after fntrace's),
//! the operation fails with [`Error::StopSignalInUse`] and writes nothing.
//! fntrace's handler stays installed on a signal after [`set_stop_signal`]
//! moves to another one, so a late delivery of the old signal is ignored
//! instead of running its default action; a stop signal that someone else
//! sends while no operation runs is ignored too. A thread stopped by a debugger, or in
//! uninterruptible sleep for longer than the ack timeout, fails the
//! operation.
//!
//! # Files
//! This file holds the protocol (steps 2, 3 and 5); [`handshake`] the
//! state shared with the signal handler, the handler and its installation
//! (steps 4 and 6); [`settings`] the stop signal and the ack timeout. The
//! thread listing and futexes are in [`crate::sys`].

mod handshake;
mod settings;

use std::io;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use self::handshake::{install_handler, AckTable, Handshake};
pub use self::settings::{set_ack_timeout, set_stop_signal};
use super::text::{TextWriter, WriterMemory};
use super::{
    check_old_bytes, ranges, serialize_instruction_fetch, stage, validate, AddressOrder, Patcher,
    TextWrite,
};
use crate::error::Error;
use crate::sys::futex::{futex_wait, WaitOutcome};
use crate::sys::task::{ListingFailed, TaskDir, TaskStatus};
use crate::sys::{getpid, gettid, tgkill};

/// The protocol instance [`super::for_batch`] hands out.
pub(crate) static STOP_THE_WORLD: StopTheWorld = StopTheWorld {
    patch_lock: Mutex::new(PatcherState {
        last_epoch: 0,
        ack_table: None,
        order: AddressOrder::new(),
        writer: WriterMemory::new(),
    }),
    handshake: Handshake {
        active_epoch: AtomicU32::new(0),
        active_signal: AtomicI32::new(0),
        patcher_tid: AtomicI32::new(0),
        ack_table: AtomicPtr::new(std::ptr::null_mut()),
        ack_slots_claimed: AtomicUsize::new(0),
        ack_count: AtomicU32::new(0),
        threads_recording: AtomicU32::new(0),
        writes: AtomicPtr::new(std::ptr::null_mut()),
        writes_len: AtomicUsize::new(0),
    },
};

/// First wait without any acknowledgement before the patcher looks at the
/// silent threads (exited? blocking the signal?); doubles each time.
const FIRST_LIVENESS_SLICE: Duration = Duration::from_millis(1);
/// Longest such wait.
const MAX_LIVENESS_SLICE: Duration = Duration::from_millis(16);

/// First pause between two attempts to stop the world; doubles each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(1);
/// Longest such pause.
const MAX_BACKOFF: Duration = Duration::from_millis(32);

/// The stop-the-world [`Patcher`]; the one instance is [`STOP_THE_WORLD`].
pub(crate) struct StopTheWorld {
    /// Serializes operations; guards what only the patcher touches.
    patch_lock: Mutex<PatcherState>,
    /// What the patcher and the signal handler share.
    handshake: Handshake,
}

/// State owned by the thread holding the patch lock.
struct PatcherState {
    /// Epoch of the previous operation (epochs are never 0).
    last_epoch: u32,
    /// The acknowledgement table, grown (and the old one leaked, so a
    /// handler can never see a freed table) when the process has more
    /// threads than it has slots.
    ack_table: Option<&'static AckTable>,
    /// Sorting memory, and the last batch's order.
    order: AddressOrder,
    /// The text writer's memory, kept from operation to operation.
    writer: WriterMemory,
}

impl Patcher for StopTheWorld {
    fn apply(&self, writes: &[TextWrite]) -> Result<(), Error> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut state = self.patch_lock.lock();
        // Out of the state while its sorted batch is borrowed.
        let mut order = std::mem::replace(&mut state.order, AddressOrder::new());
        let outcome = self.apply_in_order(&mut state, order.sort(writes));
        state.order = order;
        outcome
    }
}

impl StopTheWorld {
    /// [`Patcher::apply`] of a batch in address order.
    fn apply_in_order(&self, state: &mut PatcherState, writes: &[TextWrite]) -> Result<(), Error> {
        // Step 2: everything that allocates or locks, while nothing is stopped.
        validate(writes)?;
        let memory = std::mem::take(&mut state.writer);
        let mut writer = TextWriter::prepare(ranges(writes), memory)?;
        if let Err(error) = writer
            .load()
            .and_then(|()| check_old_bytes(&writer, writes))
        {
            state.writer = writer.into_memory();
            return Err(error);
        }
        let signo = settings::stop_signal();
        install_handler(signo)?;
        let mut task_dir = TaskDir::open().map_err(|source| Error::Io {
            what: "opening /proc/self/task".to_string(),
            source,
        })?;
        let pid = getpid();
        let own_tid = gettid();

        let started = Instant::now();
        let ack_timeout = settings::ack_timeout();
        let deadline = started.checked_add(ack_timeout).unwrap_or(started);
        let mut backoff = FIRST_BACKOFF;
        let mut min_capacity = 0;
        loop {
            let thread_count = task_dir
                .count_threads()
                .map_err(|failure| Failure::from(failure).into_error(started.elapsed()))?;
            let capacity = thread_count
                .saturating_mul(2)
                .saturating_add(1024)
                .max(min_capacity);
            let mut targets = Vec::with_capacity(capacity);
            let table = state.ack_table_with(capacity);
            let epoch = state.next_epoch();

            // Steps 3 to 6: no allocation, no lock, no panic until `stopped`
            // is dropped (its drop releases the threads on every path).
            let outcome = {
                let stopped = self.handshake.begin(epoch, signo, own_tid, table, writes);
                let mut stopper = Stopper {
                    handshake: &self.handshake,
                    task_dir: &mut task_dir,
                    targets: &mut targets,
                    table,
                    pid,
                    own_tid,
                    signo,
                    deadline,
                };
                let result = stopper
                    .stop_all_other_threads()
                    .and_then(|()| stopper.none_inside(writes))
                    .and_then(|()| write_while_stopped(&mut writer, writes));
                drop(stopped);
                result
            };

            // The world runs again: back off and retry when that can help.
            let retry = match &outcome {
                Err(Failure::SignalBlocked { .. } | Failure::ThreadInside { .. }) => true,
                Err(Failure::TooManyNewThreads { capacity }) => {
                    min_capacity = capacity.saturating_mul(2);
                    true
                }
                _ => false,
            };
            let now = Instant::now();
            if retry && now < deadline {
                std::thread::sleep(backoff.min(deadline - now));
                backoff = (backoff * 2).min(MAX_BACKOFF);
                // Woken at or after the deadline (with busy threads on
                // every CPU, waking costs a `SCHED_OTHER` patcher a round
                // of time slices; a `SCHED_FIFO` one, see
                // `patch::priority`, runs at once): another attempt would
                // only add its own time to the overshoot.
                if Instant::now() < deadline {
                    continue;
                }
            }
            state.writer = writer.into_memory();
            return outcome.map_err(|failure| failure.into_error(started.elapsed()));
        }
    }
}

impl PatcherState {
    /// A fresh epoch (never 0, which means "no operation").
    fn next_epoch(&mut self) -> u32 {
        self.last_epoch = match self.last_epoch.wrapping_add(1) {
            0 => 1,
            epoch => epoch,
        };
        self.last_epoch
    }

    /// The acknowledgement table, grown to at least `capacity` slots.
    fn ack_table_with(&mut self, capacity: usize) -> &'static AckTable {
        match self.ack_table {
            Some(table) if table.slots.len() >= capacity => table,
            _ => {
                let slots = (0..capacity).map(|_| AtomicI32::new(0)).collect();
                let pcs = (0..capacity).map(|_| AtomicUsize::new(0)).collect();
                let table: &'static AckTable = Box::leak(Box::new(AckTable { slots, pcs }));
                self.ack_table = Some(table);
                table
            }
        }
    }
}

/// Why an attempt failed while threads were stopped. Carries no heap
/// data, so it can be built before the threads are released; it becomes an
/// [`Error`] afterwards.
enum Failure {
    /// A thread stayed silent until the deadline without blocking the
    /// signal (stopped by a debugger, stuck in the kernel...).
    NoAcknowledgement { tid: i32 },
    /// A silent thread sleeps with the stop signal blocked. It may be
    /// waiting for a lock that a stopped thread holds (glibc blocks all
    /// signals in a thread that exits, then takes the stack-cache lock), so
    /// holding the world stopped cannot help: release and retry.
    SignalBlocked { tid: i32 },
    /// A system call for signalling or listing threads failed.
    Signal { what: &'static str, errno: i32 },
    /// More threads appeared than the preallocated list holds.
    TooManyNewThreads { capacity: usize },
    /// A stopped thread's program counter lies strictly inside the bytes
    /// of a write (between a patchable entry's one-byte NOPs): release,
    /// let it run past them, and retry.
    ThreadInside { tid: i32, addr: usize },
    /// A write's site no longer holds its `old` bytes.
    SiteChanged {
        addr: usize,
        expected: [u8; 8],
        found: [u8; 8],
        len: usize,
    },
    /// Reading or writing text failed (already an allocation-free `Error`).
    Text(Error),
}

impl From<ListingFailed> for Failure {
    fn from(failed: ListingFailed) -> Failure {
        Failure::Signal {
            what: "listing /proc/self/task",
            errno: failed.errno,
        }
    }
}

impl Failure {
    /// The error to report; `waited` is how long the operation tried.
    fn into_error(self, waited: Duration) -> Error {
        match self {
            Failure::NoAcknowledgement { tid } | Failure::SignalBlocked { tid } => {
                Error::ThreadDidNotAcknowledge { tid, waited }
            }
            Failure::Signal { what, errno } => Error::Signal {
                what,
                source: io::Error::from_raw_os_error(errno),
            },
            Failure::TooManyNewThreads { capacity } => Error::Io {
                what: format!(
                    "stopping threads: more than {capacity} threads appeared while stopping them"
                ),
                source: io::Error::from(io::ErrorKind::OutOfMemory),
            },
            Failure::SiteChanged {
                addr,
                expected,
                found,
                len,
            } => Error::SiteBytesChanged {
                addr,
                expected: expected.get(..len).unwrap_or(&[]).to_vec(),
                found: found.get(..len).unwrap_or(&[]).to_vec(),
            },
            Failure::ThreadInside { tid, addr } => Error::TextWrite {
                addr,
                source: io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "thread {tid} was stopped inside these bytes at every attempt \
                         for {waited:?}; nothing written"
                    ),
                ),
            },
            Failure::Text(error) => error,
        }
    }
}

/// Step 5, with every other thread parked: re-read the text and re-check
/// the `old` bytes (text is not ours alone), write the batch, roll back on
/// error, serialize.
fn write_while_stopped(writer: &mut TextWriter, writes: &[TextWrite]) -> Result<(), Failure> {
    writer.load().map_err(Failure::Text)?;
    for write in writes {
        let len = usize::from(write.len);
        let found_bytes = writer.bytes(write.addr, len).unwrap_or(&[]);
        if found_bytes != write.old_bytes() {
            let mut found = [0u8; 8];
            if let Some(into) = found.get_mut(..found_bytes.len()) {
                into.copy_from_slice(found_bytes);
            }
            return Err(Failure::SiteChanged {
                addr: write.addr,
                expected: write.old,
                found,
                len,
            });
        }
    }
    stage(writer, writes, |write| (0, write.new_bytes()));
    if let Err(error) = writer.store() {
        // All or nothing: put the old bytes back (a store can half
        // succeed). A failure here is dropped: the first one is reported,
        // and dropping it frees nothing (raw OS errors only).
        stage(writer, writes, |write| (0, write.old_bytes()));
        let _ = writer.store();
        serialize_instruction_fetch();
        return Err(Failure::Text(error));
    }
    serialize_instruction_fetch();
    Ok(())
}

/// One thread the current operation deals with.
#[derive(Clone, Copy)]
struct Target {
    /// Kernel thread id.
    tid: i32,
    /// Where the thread is in the stop protocol.
    state: TargetState,
    /// Seen asleep with the stop signal blocked at the last inspection.
    blocks_signal: bool,
}

/// Where a [`Target`] is in the stop protocol.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TargetState {
    /// Listed in this round, not yet signalled.
    New,
    /// Signalled, no acknowledgement seen yet.
    Signalled,
    /// Parked in the handler.
    Acknowledged,
    /// Exited (or a zombie) before acknowledging: no longer waited for.
    Gone,
}

/// Signals threads and waits for them during one attempt; lives between
/// `begin` and release.
struct Stopper<'a> {
    /// Shared with the signal handler.
    handshake: &'a Handshake,
    /// Listed once per round.
    task_dir: &'a mut TaskDir,
    /// The threads of this attempt, sorted by tid between rounds; never
    /// grows past its preallocated capacity.
    targets: &'a mut Vec<Target>,
    /// Where the handlers record their tids.
    table: &'static AckTable,
    /// This process.
    pid: i32,
    /// The patching thread, never signalled.
    own_tid: i32,
    /// The stop signal of this operation.
    signo: i32,
    /// When the whole operation gives up waiting.
    deadline: Instant,
}

impl Stopper<'_> {
    /// Step 3: rounds of list, signal, wait, until a listing shows no thread
    /// that has not been dealt with. No allocation: `targets` has its
    /// capacity already, and a listing that would exceed it fails.
    fn stop_all_other_threads(&mut self) -> Result<(), Failure> {
        loop {
            let known = self.targets.len();
            let own_tid = self.own_tid;
            let targets = &mut *self.targets;
            self.task_dir.for_each_tid(|tid| {
                let already_known = targets
                    .get(..known)
                    .is_some_and(|sorted| sorted.binary_search_by_key(&tid, |t| t.tid).is_ok());
                if tid == own_tid || already_known {
                    return Ok(());
                }
                if targets.len() == targets.capacity() {
                    return Err(Failure::TooManyNewThreads {
                        capacity: targets.capacity(),
                    });
                }
                targets.push(Target {
                    tid,
                    state: TargetState::New,
                    blocks_signal: false,
                });
                Ok(())
            })?;
            if self.targets.len() == known {
                return Ok(());
            }
            // In place (no allocation): sort, and drop a tid listed twice.
            self.targets.sort_unstable_by_key(|target| target.tid);
            self.targets.dedup_by_key(|target| target.tid);

            for target in self.targets.iter_mut() {
                if target.state != TargetState::New {
                    continue;
                }
                target.state = match tgkill(self.pid, target.tid, self.signo) {
                    Ok(()) => TargetState::Signalled,
                    Err(libc::ESRCH) => TargetState::Gone,
                    Err(errno) => {
                        return Err(Failure::Signal {
                            what: "sending the stop signal to a thread",
                            errno,
                        });
                    }
                };
            }
            self.wait_for_acknowledgements()?;
        }
    }

    /// With every other thread stopped: fails if one of them was stopped
    /// with its program counter strictly inside the bytes of a write
    /// (`writes` in address order). Only a write over several instructions
    /// (a patchable entry's one-byte NOPs) can have one there: a signal
    /// stops a thread between instructions.
    fn none_inside(&self, writes: &[TextWrite]) -> Result<(), Failure> {
        let claimed = self.handshake.ack_slots_claimed.load(Ordering::Relaxed);
        let count = claimed.min(self.table.slots.len());
        for (slot, pc) in self
            .table
            .slots
            .iter()
            .zip(self.table.pcs.iter())
            .take(count)
        {
            // Acquire: pairs with the handler's Release store of its tid,
            // made after its pc.
            let tid = slot.load(Ordering::Acquire);
            let pc = pc.load(Ordering::Relaxed);
            if tid == 0 || pc == 0 {
                continue;
            }
            let after = writes.partition_point(|write| write.addr() < pc);
            if let Some(write) = after.checked_sub(1).and_then(|i| writes.get(i)) {
                if write.splits(pc) {
                    return Err(Failure::ThreadInside {
                        tid,
                        addr: write.addr(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Waits until no target is `Signalled`: each acknowledged or is gone.
    /// Whenever nobody answered for a slice, looks at the silent threads:
    /// exited ones are dropped, and one that blocks the signal ends the
    /// attempt at once.
    fn wait_for_acknowledgements(&mut self) -> Result<(), Failure> {
        let mut slice = FIRST_LIVENESS_SLICE;
        loop {
            // Acquire: pairs with the handler's Release increment, so the
            // slots it filled before incrementing are visible to the scan.
            let count = self.handshake.ack_count.load(Ordering::Acquire);
            let expected = self
                .targets
                .iter()
                .filter(|t| matches!(t.state, TargetState::Signalled | TargetState::Acknowledged))
                .count();
            if count as usize >= expected && self.mark_acknowledged() == 0 {
                return Ok(());
            }
            let now = Instant::now();
            if now >= self.deadline {
                self.mark_acknowledged();
                self.inspect_silent_threads()?;
                return match self.first_silent() {
                    None => Ok(()),
                    Some(tid) => Err(Failure::NoAcknowledgement { tid }),
                };
            }
            let wait = slice.min(self.deadline - now);
            if futex_wait(&self.handshake.ack_count, count, Some(wait)) == WaitOutcome::TimedOut {
                if self.mark_acknowledged() == 0 {
                    return Ok(());
                }
                self.inspect_silent_threads()?;
                slice = (slice * 2).min(MAX_LIVENESS_SLICE);
            }
        }
    }

    /// Marks every target found in the ack table; returns how many targets
    /// are still `Signalled`.
    fn mark_acknowledged(&mut self) -> usize {
        let claimed = self.handshake.ack_slots_claimed.load(Ordering::Relaxed);
        let filled = self.table.slots.get(..claimed).unwrap_or(&self.table.slots);
        for slot in filled {
            let tid = slot.load(Ordering::Relaxed);
            if tid == 0 {
                continue; // claimed, tid not stored yet
            }
            if let Ok(index) = self.targets.binary_search_by_key(&tid, |t| t.tid) {
                if let Some(target) = self.targets.get_mut(index) {
                    if target.state == TargetState::Signalled {
                        target.state = TargetState::Acknowledged;
                    }
                }
            }
        }
        self.targets
            .iter()
            .filter(|t| t.state == TargetState::Signalled)
            .count()
    }

    /// Marks `Signalled` targets that exited (or are zombies) as `Gone`;
    /// fails with the first one that sleeps with the stop signal blocked.
    fn inspect_silent_threads(&mut self) -> Result<(), Failure> {
        let mut any_blocking = false;
        for target in self.targets.iter_mut() {
            if target.state != TargetState::Signalled {
                continue;
            }
            target.blocks_signal = false;
            match condition(self.task_dir, self.pid, target.tid, self.signo) {
                ThreadCondition::Gone => target.state = TargetState::Gone,
                ThreadCondition::BlocksSignal => {
                    target.blocks_signal = true;
                    any_blocking = true;
                }
                ThreadCondition::Running => {}
            }
        }
        if !any_blocking {
            return Ok(());
        }
        // A thread that has just parked in this attempt's handler also
        // sleeps with the signal blocked. It recorded its tid before going
        // to sleep, and we saw it asleep: scan the table again (after an
        // Acquire load pairing with the handler's Release increment) before
        // blaming it.
        let _ = self.handshake.ack_count.load(Ordering::Acquire);
        self.mark_acknowledged();
        match self
            .targets
            .iter()
            .find(|t| t.state == TargetState::Signalled && t.blocks_signal)
        {
            Some(target) => Err(Failure::SignalBlocked { tid: target.tid }),
            None => Ok(()),
        }
    }

    /// The first target still `Signalled`.
    fn first_silent(&self) -> Option<i32> {
        self.targets
            .iter()
            .find(|t| t.state == TargetState::Signalled)
            .map(|t| t.tid)
    }
}

/// What keeps silent thread `tid` from acknowledging, judged from what
/// `/proc` says about it. Only system calls.
fn condition(task_dir: &TaskDir, pid: i32, tid: i32, signo: i32) -> ThreadCondition {
    let TaskStatus::Live { state, blocked } = task_dir.status(pid, tid) else {
        return ThreadCondition::Gone;
    };
    let signal_bit = u32::try_from(signo - 1)
        .ok()
        .and_then(|bit| 1u64.checked_shl(bit))
        .unwrap_or(0);
    let blocks_signal = blocked.is_some_and(|mask| mask & signal_bit != 0);
    // Only a sleeping thread counts: a thread still leaving the handler
    // of an earlier attempt also has the signal blocked, but it is
    // runnable and acknowledges as soon as it gets the CPU.
    if blocks_signal && matches!(state, Some(b'S' | b'D')) {
        ThreadCondition::BlocksSignal
    } else {
        ThreadCondition::Running
    }
}

/// What [`condition`] found about a silent thread.
enum ThreadCondition {
    /// Exited, or a zombie: it will never answer and never run again.
    Gone,
    /// Sleeps with the stop signal blocked: it answers only once it
    /// unblocks it, and it may be waiting for a stopped thread.
    BlocksSignal,
    /// Neither: it will answer once it gets the CPU (or leaves the kernel).
    Running,
}
