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
//!    (re)install the signal handler, and before each attempt size the tid
//!    list and the acknowledgement table generously. Once a thread is stopped it may hold the
//!    malloc lock or any other lock, so from step 3 to step 6 the patcher
//!    makes only system calls, atomic operations and in-place slice work,
//!    and cannot panic.
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
//!    saw is withdrawn. The patcher decides completeness by the tids in the
//!    table, not by the count, so a stray acknowledgement cannot stand in
//!    for a missing one.
//! 5. Write: re-check the `old` bytes, write each `new` through the
//!    [`TextWriter`] (rolling back on error), execute `cpuid`.
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
//! # Hazards left to the user
//! Even with `SA_RESTART`, some blocking calls fail with EINTR when the
//! handler runs (`poll`, `epoll_wait`, `select`, `nanosleep`, `sigtimedwait`,
//! sockets with timeouts; see signal(7)); code that does not retry them sees
//! the EINTR. fntrace owns the stop signal: its handler replaces any other
//! (choose a free signal with [`set_stop_signal`]). The handler stays
//! installed on a signal after [`set_stop_signal`] moves to another one,
//! so a late delivery of the old signal is ignored instead of running its
//! default action; a stop signal that someone else sends while no
//! operation runs is ignored too. A thread stopped by a debugger, or in
//! uninterruptible sleep for longer than the ack timeout, fails the
//! operation.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::text::TextWriter;
use super::{Patcher, TextWrite};
use crate::error::Error;

/// The protocol instance [`super::active`] hands out.
pub(crate) static STOP_THE_WORLD: StopTheWorld = StopTheWorld {
    patch_lock: Mutex::new(PatcherState {
        last_epoch: 0,
        ack_table: None,
    }),
    handshake: Handshake {
        active_epoch: AtomicU32::new(0),
        active_signal: AtomicI32::new(0),
        patcher_tid: AtomicI32::new(0),
        ack_table: AtomicPtr::new(std::ptr::null_mut()),
        ack_slots_claimed: AtomicUsize::new(0),
        ack_count: AtomicU32::new(0),
        threads_recording: AtomicU32::new(0),
    },
};

/// Signal used by the next operation (see [`set_stop_signal`]).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(libc::SIGUSR2);

/// Ack timeout of the next operation, in nanoseconds (see [`set_ack_timeout`]).
static ACK_TIMEOUT_NANOS: AtomicU64 = AtomicU64::new(2_000_000_000);

/// The shortest ack timeout [`set_ack_timeout`] accepts.
const MIN_ACK_TIMEOUT: Duration = Duration::from_millis(1);
/// The longest ack timeout [`set_ack_timeout`] accepts.
const MAX_ACK_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// First wait without any acknowledgement before the patcher looks at the
/// silent threads (exited? blocking the signal?); doubles each time.
const FIRST_LIVENESS_SLICE: Duration = Duration::from_millis(1);
/// Longest such wait.
const MAX_LIVENESS_SLICE: Duration = Duration::from_millis(16);

/// First pause between two attempts to stop the world; doubles each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(1);
/// Longest such pause.
const MAX_BACKOFF: Duration = Duration::from_millis(32);

/// Size of the `getdents64` buffer (about 1,000 entries per system call).
const DIRENT_BUFFER_BYTES: usize = 32 * 1024;

/// Chooses the signal fntrace sends to stop threads while it patches code
/// (default `SIGUSR2`). Takes effect at the next patch operation, which
/// installs fntrace's handler for it, replacing any other handler. Pick a
/// signal the program neither uses nor blocks: a thread blocking it makes
/// every patch fail with [`Error::ThreadDidNotAcknowledge`].
///
/// Rejected with [`Error::Signal`]: numbers outside `1..=SIGRTMAX`,
/// `SIGKILL` and `SIGSTOP` (cannot be caught), the signals the kernel or
/// libc raise synchronously in a faulting thread (`SIGSEGV`, `SIGBUS`,
/// `SIGILL`, `SIGFPE`, `SIGTRAP`, `SIGSYS`, `SIGABRT`), and the realtime
/// signals below `SIGRTMIN` that the C library keeps for itself.
pub fn set_stop_signal(signo: i32) -> Result<(), Error> {
    let rejected = |what: &'static str| Error::Signal {
        what,
        source: io::Error::from_raw_os_error(libc::EINVAL),
    };
    if signo < 1 || signo > libc::SIGRTMAX() {
        return Err(rejected("choosing the stop signal: no such signal number"));
    }
    match signo {
        libc::SIGKILL | libc::SIGSTOP => Err(rejected(
            "choosing the stop signal: SIGKILL and SIGSTOP cannot be caught",
        )),
        libc::SIGSEGV
        | libc::SIGBUS
        | libc::SIGILL
        | libc::SIGFPE
        | libc::SIGTRAP
        | libc::SIGSYS
        | libc::SIGABRT => Err(rejected(
            "choosing the stop signal: fault and abort signals cannot be used",
        )),
        _ if signo > 31 && signo < libc::SIGRTMIN() => Err(rejected(
            "choosing the stop signal: this realtime signal is reserved by the C library",
        )),
        _ => {
            STOP_SIGNAL.store(signo, Ordering::Relaxed);
            Ok(())
        }
    }
}

/// Sets how long one patch operation may spend, in total, stopping the
/// other threads before it gives up with [`Error::ThreadDidNotAcknowledge`]
/// (default 2 s; clamped to 1 ms ..= 1 day). Within that time a thread that
/// sleeps with the stop signal blocked makes fntrace resume everyone and
/// try again. Takes effect at the next operation.
pub fn set_ack_timeout(timeout: Duration) {
    let nanos = timeout.clamp(MIN_ACK_TIMEOUT, MAX_ACK_TIMEOUT).as_nanos();
    ACK_TIMEOUT_NANOS.store(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Relaxed);
}

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
}

/// One slot per acknowledging thread, holding its tid (0 = empty).
struct AckTable {
    /// Filled in acknowledgement order; reset by `Handshake::begin`.
    slots: Box<[AtomicI32]>,
}

/// The atomics the signal handler reads and writes. Only these, and only
/// with atomic operations and futex calls.
struct Handshake {
    /// Epoch of the operation collecting acknowledgements, 0 when none.
    /// Parked threads wait on this futex word until it changes.
    active_epoch: AtomicU32,
    /// The signal the active operation sends; other signals are not ours.
    active_signal: AtomicI32,
    /// The patching thread, which must never park itself.
    patcher_tid: AtomicI32,
    /// The active operation's table.
    ack_table: AtomicPtr<AckTable>,
    /// Next free slot of `ack_table`.
    ack_slots_claimed: AtomicUsize,
    /// Acknowledgements so far; the patcher waits on this futex word.
    ack_count: AtomicU32,
    /// Threads between their epoch check and the end of recording their
    /// tid (the handler's only writes to operation state); the patcher waits
    /// on this futex word for it to reach 0 at release.
    threads_recording: AtomicU32,
}

impl Patcher for StopTheWorld {
    fn apply(&self, writes: &[TextWrite]) -> Result<(), Error> {
        if writes.is_empty() {
            return Ok(());
        }
        if !cfg!(target_arch = "x86_64") {
            return Err(Error::Unsupported);
        }
        let mut state = self.patch_lock.lock();

        // Step 2: everything that allocates or locks, while nothing is stopped.
        validate(writes)?;
        let ranges: Vec<(usize, usize)> = writes
            .iter()
            .map(|write| (write.addr, usize::from(write.len)))
            .collect();
        let mut writer = TextWriter::prepare(&ranges)?;
        check_old_bytes_before_stop(&writer, writes)?;
        let signo = STOP_SIGNAL.load(Ordering::Relaxed);
        install_handler(signo)?;
        let mut task_dir = TaskDir::open()?;
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let own_tid = gettid();

        let started = Instant::now();
        let ack_timeout = Duration::from_nanos(ACK_TIMEOUT_NANOS.load(Ordering::Relaxed));
        let deadline = started.checked_add(ack_timeout).unwrap_or(started);
        let mut backoff = FIRST_BACKOFF;
        let mut min_capacity = 0;
        loop {
            let thread_count = task_dir
                .count_threads()
                .map_err(|failure| failure.into_error(started.elapsed()))?;
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
                let stopped = self.handshake.begin(epoch, signo, own_tid, table);
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
                    .and_then(|()| write_while_stopped(&mut writer, writes));
                drop(stopped);
                result
            };

            // The world runs again: back off and retry when that can help.
            let retry = match &outcome {
                Err(Failure::SignalBlocked { .. }) => true,
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
                continue;
            }
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
                let table: &'static AckTable = Box::leak(Box::new(AckTable { slots }));
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
            Failure::Text(error) => error,
        }
    }
}

/// Rejects lengths outside 1..=8, ranges that wrap, and overlapping writes
/// (their order would matter, and their `old` bytes could not all hold).
fn validate(writes: &[TextWrite]) -> Result<(), Error> {
    let invalid = |addr: usize, why: &'static str| Error::TextWrite {
        addr,
        source: io::Error::new(io::ErrorKind::InvalidInput, why),
    };
    let mut ranges = Vec::with_capacity(writes.len());
    for write in writes {
        if !(1..=8).contains(&write.len) {
            return Err(invalid(
                write.addr,
                "a text write must be 1 to 8 bytes long",
            ));
        }
        let end = write
            .addr
            .checked_add(usize::from(write.len))
            .ok_or_else(|| invalid(write.addr, "text write wraps the address space"))?;
        ranges.push((write.addr, end));
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        if let [(_, first_end), (second_start, _)] = pair {
            if second_start < first_end {
                return Err(invalid(
                    *second_start,
                    "two text writes of one batch overlap",
                ));
            }
        }
    }
    Ok(())
}

/// Step 2's check of every `old` against memory; nothing is stopped yet.
fn check_old_bytes_before_stop(writer: &TextWriter, writes: &[TextWrite]) -> Result<(), Error> {
    for write in writes {
        let mut found = [0u8; 8];
        let found = &mut found[..usize::from(write.len)];
        writer.read(write.addr, found).map_err(|source| Error::Io {
            what: format!("reading program text at {:#x}", write.addr),
            source,
        })?;
        if found != write.old_bytes() {
            return Err(Error::SiteBytesChanged {
                addr: write.addr,
                expected: write.old_bytes().to_vec(),
                found: found.to_vec(),
            });
        }
    }
    Ok(())
}

/// Step 5, with every other thread parked: re-check the `old` bytes (text
/// is not ours alone), write, roll back on error, serialize.
fn write_while_stopped(writer: &mut TextWriter, writes: &[TextWrite]) -> Result<(), Failure> {
    for write in writes {
        let len = usize::from(write.len);
        let mut found = [0u8; 8];
        let found_bytes = found.get_mut(..len).unwrap_or(&mut []);
        writer.read(write.addr, found_bytes).map_err(|source| {
            Failure::Text(Error::TextWrite {
                addr: write.addr,
                source,
            })
        })?;
        if found_bytes != write.old_bytes() {
            return Err(Failure::SiteChanged {
                addr: write.addr,
                expected: write.old,
                found,
                len,
            });
        }
    }
    for (index, write) in writes.iter().enumerate() {
        if let Err(error) = writer.write(write.addr, write.new_bytes()) {
            // All or nothing: put back what was written, including any part
            // of the failed write (a write across two pages can half
            // succeed). A failure here is dropped: the first one is
            // reported, and dropping it frees nothing (raw OS errors only).
            for done in writes.iter().take(index + 1).rev() {
                let _ = writer.write(done.addr, done.old_bytes());
            }
            serialize_instruction_fetch();
            return Err(Failure::Text(error));
        }
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
            match self.task_dir.condition(self.pid, target.tid, self.signo) {
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

impl Handshake {
    /// Starts an operation: clears the acknowledgements and publishes
    /// `epoch`. From here on, threads receiving `signo` park. The returned
    /// guard releases them when dropped.
    fn begin(
        &self,
        epoch: u32,
        signo: i32,
        patcher_tid: i32,
        table: &'static AckTable,
    ) -> StoppedWorld<'_> {
        for slot in table.slots.iter() {
            slot.store(0, Ordering::Relaxed);
        }
        self.ack_slots_claimed.store(0, Ordering::Relaxed);
        self.ack_count.store(0, Ordering::Relaxed);
        self.active_signal.store(signo, Ordering::Relaxed);
        self.patcher_tid.store(patcher_tid, Ordering::Relaxed);
        self.ack_table
            .store(std::ptr::from_ref(table).cast_mut(), Ordering::Relaxed);
        // SeqCst: as a release, publishes the stores above to a handler
        // whose SeqCst load in `on_signal` reads this epoch.
        self.active_epoch.store(epoch, Ordering::SeqCst);
        StoppedWorld { handshake: self }
    }

    /// The handler's body. Async-signal-safe: atomics, futex, gettid.
    fn on_signal(&self, signo: i32) {
        // SeqCst increment, then SeqCst load of the epoch; pairs with the
        // patcher's SeqCst store of epoch 0, then SeqCst load of this
        // counter in `release`: either this thread sees the operation gone,
        // or the patcher sees it counted here and waits for it to finish
        // recording.
        self.threads_recording.fetch_add(1, Ordering::SeqCst);
        let epoch = self.active_epoch.load(Ordering::SeqCst);
        let mut joined_epoch = None;
        if epoch != 0 && self.active_signal.load(Ordering::Relaxed) == signo {
            let tid = gettid();
            if tid != self.patcher_tid.load(Ordering::Relaxed) {
                self.record_acknowledgement(tid);
                joined_epoch = Some(epoch);
            }
        }
        // Release: pairs with the patcher's SeqCst (acquiring) load in
        // `release`. After this the handler writes no operation state: the
        // count below is only a wake-up hint (a late increment landing in
        // the next operation costs that patcher one extra scan, no more).
        if self.threads_recording.fetch_sub(1, Ordering::Release) == 1 {
            futex_wake(&self.threads_recording, i32::MAX);
        }
        if let Some(epoch) = joined_epoch {
            // Release: pairs with the patcher's Acquire load of the count,
            // which then sees the slot stored by `record_acknowledgement`.
            self.ack_count.fetch_add(1, Ordering::Release);
            futex_wake(&self.ack_count, 1);
            self.park_while(epoch);
            serialize_instruction_fetch();
        }
    }

    /// Stores `tid` in a free slot of the active table.
    fn record_acknowledgement(&self, tid: i32) {
        let table = self.ack_table.load(Ordering::Relaxed);
        let index = self.ack_slots_claimed.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `table` was stored by `begin` before the epoch this thread
        // read (SeqCst load, so the store is visible); tables are leaked,
        // never freed, so the reference is valid forever.
        if let Some(slot) = unsafe { table.as_ref() }.and_then(|t| t.slots.get(index)) {
            slot.store(tid, Ordering::Relaxed);
        }
    }

    /// Parks until the patcher withdraws `epoch`.
    fn park_while(&self, epoch: u32) {
        // Acquire: pairs with the SeqCst store of 0 in `release`, so this
        // thread sees the written text once it leaves.
        while self.active_epoch.load(Ordering::Acquire) == epoch {
            futex_wait(&self.active_epoch, epoch, None);
        }
    }

    /// Step 6: lets every parked thread go, and waits until no thread is
    /// recording an acknowledgement (so none can write into the next
    /// operation's table).
    fn release(&self) {
        // SeqCst: see `on_signal`; as a release, publishes the text writes
        // to the threads leaving `park_while`.
        self.active_epoch.store(0, Ordering::SeqCst);
        futex_wake(&self.active_epoch, i32::MAX);
        loop {
            let recording = self.threads_recording.load(Ordering::SeqCst);
            if recording == 0 {
                return;
            }
            futex_wait(&self.threads_recording, recording, Some(MAX_LIVENESS_SLICE));
        }
    }
}

/// Threads are (being) stopped while this lives; dropping it releases them.
struct StoppedWorld<'a> {
    handshake: &'a Handshake,
}

impl Drop for StoppedWorld<'_> {
    fn drop(&mut self) {
        self.handshake.release();
    }
}

/// The signal handler installed for the stop signal.
extern "C" fn on_stop_signal(signo: i32, _info: *mut libc::siginfo_t, _context: *mut c_void) {
    // SAFETY: `__errno_location` returns this thread's errno slot, valid for
    // the thread's lifetime; restoring it keeps the interrupted code's errno.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved_errno = unsafe { *errno };
    STOP_THE_WORLD.handshake.on_signal(signo);
    // SAFETY: as above.
    unsafe { *errno = saved_errno };
}

/// Installs [`on_stop_signal`] for `signo` unless it is installed already
/// (someone may have replaced it since the last operation).
fn install_handler(signo: i32) -> Result<(), Error> {
    let handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) = on_stop_signal;
    let handler = handler as libc::sighandler_t;
    // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, no flags).
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `current` is a valid out-pointer; a null `act` only queries.
    if unsafe { libc::sigaction(signo, std::ptr::null(), &mut current) } != 0 {
        return Err(Error::Signal {
            what: "querying the stop signal's handler",
            source: io::Error::last_os_error(),
        });
    }
    if current.sa_sigaction == handler && current.sa_flags & libc::SA_SIGINFO != 0 {
        return Ok(());
    }
    // SAFETY: as above.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid sigset_t to initialize; an empty
    // mask blocks nothing beyond the signal itself during the handler.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is fully initialized and its handler is an
    // async-signal-safe `extern "C"` function with the SA_SIGINFO signature.
    if unsafe { libc::sigaction(signo, &action, std::ptr::null_mut()) } != 0 {
        return Err(Error::Signal {
            what: "installing the stop-signal handler",
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// `/proc/self/task`, listed with raw `getdents64` into a preallocated
/// buffer.
struct TaskDir {
    fd: OwnedFd,
    dirents: Vec<u8>,
}

impl TaskDir {
    /// Opens the directory and allocates the listing buffer.
    fn open() -> Result<TaskDir, Error> {
        // SAFETY: the path is a NUL-terminated literal.
        let fd = unsafe {
            libc::open(
                c"/proc/self/task".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(Error::Io {
                what: "opening /proc/self/task".to_string(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(TaskDir {
            // SAFETY: `fd` was just returned by `open` and has no other owner.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            dirents: vec![0; DIRENT_BUFFER_BYTES],
        })
    }

    /// Number of threads listed now.
    fn count_threads(&mut self) -> Result<usize, Failure> {
        let mut count = 0usize;
        self.for_each_tid(|_| {
            count += 1;
            Ok(())
        })?;
        Ok(count)
    }

    /// Calls `visit` with each tid in the directory, from the start. Only
    /// system calls; stops at the first error `visit` returns.
    fn for_each_tid(
        &mut self,
        mut visit: impl FnMut(i32) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let listing_failed = |errno| Failure::Signal {
            what: "listing /proc/self/task",
            errno,
        };
        // SAFETY: lseek on an owned, open fd.
        if unsafe { libc::lseek(self.fd.as_raw_fd(), 0, libc::SEEK_SET) } < 0 {
            return Err(listing_failed(last_errno()));
        }
        loop {
            // SAFETY: `dirents` is a writable buffer of the length passed;
            // the kernel writes at most that many bytes.
            let filled = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    self.fd.as_raw_fd(),
                    self.dirents.as_mut_ptr(),
                    self.dirents.len(),
                )
            };
            if filled < 0 {
                match last_errno() {
                    libc::EINTR => continue,
                    errno => return Err(listing_failed(errno)),
                }
            }
            if filled == 0 {
                return Ok(());
            }
            let filled = self.dirents.get(..filled as usize).unwrap_or(&[]);
            for tid in dirent_tids(filled) {
                visit(tid)?;
            }
        }
    }

    /// What keeps silent thread `tid` from acknowledging, judged from
    /// `tgkill(.., 0)` and `/proc/self/task/<tid>/status`. Only system calls.
    fn condition(&self, pid: i32, tid: i32, signo: i32) -> ThreadCondition {
        if tgkill(pid, tid, 0) == Err(libc::ESRCH) {
            return ThreadCondition::Gone;
        }
        let mut path = [0u8; 24];
        if write_tid_status_path(tid, &mut path).is_none() {
            return ThreadCondition::Running;
        }
        // SAFETY: `path` is NUL-terminated (written above) and the dir fd is
        // open.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                path.as_ptr().cast(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return match last_errno() {
                libc::ENOENT | libc::ESRCH => ThreadCondition::Gone,
                _ => ThreadCondition::Running,
            };
        }
        // SAFETY: `fd` was just returned by `openat` and has no other owner.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut status = [0u8; 4096];
        let mut filled = 0;
        while let Some(rest) = status.get_mut(filled..).filter(|rest| !rest.is_empty()) {
            // SAFETY: `rest` is a writable buffer of the length passed.
            let got = unsafe { libc::read(fd.as_raw_fd(), rest.as_mut_ptr().cast(), rest.len()) };
            match got {
                n if n > 0 => filled += n as usize,
                0 => break,
                _ if last_errno() == libc::EINTR => continue,
                _ if last_errno() == libc::ESRCH => return ThreadCondition::Gone,
                _ => break,
            }
        }
        let status = status.get(..filled).unwrap_or(&[]);
        // "State:\tS (sleeping)". Z: a main thread that called pthread_exit;
        // X: being reaped.
        let state = status_field(status, b"\nState:\t").and_then(|state| state.first().copied());
        if matches!(state, Some(b'Z' | b'X')) {
            return ThreadCondition::Gone;
        }
        let blocked_mask = status_field(status, b"\nSigBlk:\t").and_then(parse_hex_u64);
        let signal_bit = u32::try_from(signo - 1)
            .ok()
            .and_then(|bit| 1u64.checked_shl(bit))
            .unwrap_or(0);
        let blocks_signal = blocked_mask.is_some_and(|mask| mask & signal_bit != 0);
        // Only a sleeping thread counts: a thread still leaving the handler
        // of an earlier attempt also has the signal blocked, but it is
        // runnable and acknowledges as soon as it gets the CPU.
        if blocks_signal && matches!(state, Some(b'S' | b'D')) {
            ThreadCondition::BlocksSignal
        } else {
            ThreadCondition::Running
        }
    }
}

/// What [`TaskDir::condition`] found about a silent thread.
enum ThreadCondition {
    /// Exited, or a zombie: it will never answer and never run again.
    Gone,
    /// Sleeps with the stop signal blocked: it answers only once it
    /// unblocks it, and it may be waiting for a stopped thread.
    BlocksSignal,
    /// Neither: it will answer once it gets the CPU (or leaves the kernel).
    Running,
}

/// The value after `key` in a `/proc/.../status` text, up to the line end.
fn status_field<'a>(status: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let start = status.windows(key.len()).position(|window| window == key)? + key.len();
    let value = status.get(start..)?;
    let end = value
        .iter()
        .position(|&byte| byte == b'\n')
        .unwrap_or(value.len());
    value.get(..end)
}

/// Parses a hexadecimal mask such as `SigBlk`'s `0000000000000800`.
fn parse_hex_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    text.iter().try_fold(0u64, |value, &byte| {
        let digit = char::from(byte).to_digit(16)?;
        value.checked_mul(16)?.checked_add(u64::from(digit))
    })
}

/// Writes `"<tid>/status\0"` into `path`; `None` if `tid` is negative.
fn write_tid_status_path(tid: i32, path: &mut [u8; 24]) -> Option<()> {
    let mut digits = [0u8; 10];
    let mut value = u32::try_from(tid).ok()?;
    let mut count = 0;
    loop {
        *digits.get_mut(count)? = b'0' + (value % 10) as u8;
        count += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    let mut len = 0;
    for &digit in digits.get(..count)?.iter().rev() {
        *path.get_mut(len)? = digit;
        len += 1;
    }
    for &byte in b"/status\0" {
        *path.get_mut(len)? = byte;
        len += 1;
    }
    Some(())
}

/// The numeric names in a `getdents64` buffer (`.` and `..` skipped).
/// Record layout: u64 inode, i64 offset, u16 record length, u8 type, name.
fn dirent_tids(buffer: &[u8]) -> impl Iterator<Item = i32> + '_ {
    const NAME_OFFSET: usize = 19;
    let mut position = 0usize;
    std::iter::from_fn(move || loop {
        let record = buffer.get(position..)?;
        let record_len = match record.get(16..18) {
            Some(&[low, high]) => usize::from(u16::from_ne_bytes([low, high])),
            _ => return None,
        };
        if record_len <= NAME_OFFSET {
            return None;
        }
        position += record_len;
        let name = record.get(NAME_OFFSET..record_len.min(record.len()))?;
        let name = name.split(|&byte| byte == 0).next().unwrap_or(&[]);
        if let Some(tid) = parse_tid(name) {
            return Some(tid);
        }
    })
}

/// Parses a positive decimal tid; `None` for anything else.
fn parse_tid(name: &[u8]) -> Option<i32> {
    if name.is_empty() {
        return None;
    }
    name.iter().try_fold(0i32, |value, &byte| {
        if !byte.is_ascii_digit() {
            return None;
        }
        value.checked_mul(10)?.checked_add(i32::from(byte - b'0'))
    })
}

/// `tgkill(pid, tid, signo)`; signal 0 only checks that the thread exists.
fn tgkill(pid: i32, tid: i32, signo: i32) -> Result<(), i32> {
    // SAFETY: tgkill takes plain integers; it only affects threads of this
    // process (`pid` is our own).
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signo) };
    if rc == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// The calling thread's kernel thread id. Async-signal-safe.
fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

#[derive(PartialEq, Eq)]
enum WaitOutcome {
    /// Woken, the value differed, or interrupted: re-check.
    Woken,
    /// The timeout elapsed.
    TimedOut,
}

/// `FUTEX_WAIT_PRIVATE`: sleeps while `word` holds `expected`, at most
/// `timeout`. Async-signal-safe.
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> WaitOutcome {
    let timespec = timeout.map(|timeout| libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    });
    let timespec_ptr = timespec
        .as_ref()
        .map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: `word` is a live, aligned 32-bit atomic; `timespec_ptr` is null
    // or points to a timespec that outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            timespec_ptr,
        )
    };
    if rc != 0 && last_errno() == libc::ETIMEDOUT {
        WaitOutcome::TimedOut
    } else {
        WaitOutcome::Woken
    }
}

/// `FUTEX_WAKE_PRIVATE`: wakes up to `count` waiters on `word`.
/// Async-signal-safe.
fn futex_wake(word: &AtomicU32, count: i32) {
    // SAFETY: `word` is a live, aligned 32-bit atomic; waking has no other
    // precondition.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            count,
        );
    }
}

/// Makes the calling CPU discard instructions it fetched before the text
/// changed (Intel SDM, cross-modifying code). `cpuid` is serializing.
#[inline(always)]
fn serialize_instruction_fetch() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: cpuid exists on every x86-64 CPU; leaf 0 only writes the
        // four result registers the intrinsic declares.
        #[allow(unused_unsafe)]
        let _vendor_leaf = unsafe { std::arch::x86_64::__cpuid(0) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// The calling thread's `errno`.
fn last_errno() -> i32 {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's
    // errno.
    unsafe { *libc::__errno_location() }
}
