//! The stop-the-world handshake: the state the patcher shares with the
//! stop signal's handler, the handler itself (async-signal-safe: atomics,
//! futex, gettid, sched_setscheduler; no allocation, no lock), and its
//! installation.

use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use super::{MAX_LIVENESS_SLICE, STOP_THE_WORLD};
use crate::error::Error;
use crate::patch::{serialize_instruction_fetch, TextWrite};
use crate::sys::futex::{futex_wait, futex_wake};
use crate::sys::{gettid, last_errno, sched, set_errno, signal};

/// One slot per acknowledging thread, holding its tid (0 = empty).
pub(super) struct AckTable {
    /// Filled in acknowledgement order; reset by `Handshake::begin`.
    pub(super) slots: Box<[AtomicI32]>,
    /// The program counter each thread was stopped at (from its signal
    /// context; 0 if unknown), at the index of its tid in `slots`: no
    /// thread may be stopped strictly inside bytes being written.
    pub(super) pcs: Box<[AtomicUsize]>,
}

/// The atomics the signal handler reads and writes. Only these, and only
/// with atomic operations and futex calls.
pub(super) struct Handshake {
    /// Epoch of the operation collecting acknowledgements, 0 when none.
    /// Parked threads wait on this futex word until it changes.
    pub(super) active_epoch: AtomicU32,
    /// The signal the active operation sends; other signals are not ours.
    pub(super) active_signal: AtomicI32,
    /// The patching thread, which must never park itself.
    pub(super) patcher_tid: AtomicI32,
    /// The active operation's table.
    pub(super) ack_table: AtomicPtr<AckTable>,
    /// Next free slot of `ack_table`.
    pub(super) ack_slots_claimed: AtomicUsize,
    /// Acknowledgements so far; the patcher waits on this futex word.
    pub(super) ack_count: AtomicU32,
    /// Threads between their epoch check and the end of recording their
    /// tid (the handler's only writes to operation state); the patcher waits
    /// on this futex word for it to reach 0 at release.
    pub(super) threads_recording: AtomicU32,
    /// The active operation's batch, in address order (with
    /// `writes_len`): a thread stopped between two of the one-byte NOPs a
    /// write replaces is moved past them. Read by a handler only while it
    /// is counted in `threads_recording`, which `release` waits for, so
    /// the batch outlives every read.
    pub(super) writes: AtomicPtr<TextWrite>,
    /// The number of writes at `writes`.
    pub(super) writes_len: AtomicUsize,
}

impl Handshake {
    /// Starts an operation: clears the acknowledgements and publishes
    /// `epoch`. From here on, threads receiving `signo` park. The returned
    /// guard releases them when dropped.
    pub(super) fn begin(
        &self,
        epoch: u32,
        signo: i32,
        patcher_tid: i32,
        table: &'static AckTable,
        writes: &[TextWrite],
    ) -> StoppedWorld<'_> {
        for slot in table.slots.iter() {
            slot.store(0, Ordering::Relaxed);
        }
        for pc in table.pcs.iter() {
            pc.store(0, Ordering::Relaxed);
        }
        self.ack_slots_claimed.store(0, Ordering::Relaxed);
        self.ack_count.store(0, Ordering::Relaxed);
        self.active_signal.store(signo, Ordering::Relaxed);
        self.patcher_tid.store(patcher_tid, Ordering::Relaxed);
        self.ack_table
            .store(std::ptr::from_ref(table).cast_mut(), Ordering::Relaxed);
        self.writes
            .store(writes.as_ptr().cast_mut(), Ordering::Relaxed);
        self.writes_len.store(writes.len(), Ordering::Relaxed);
        // SeqCst: as a release, publishes the stores above to a handler
        // whose SeqCst load in `on_signal` reads this epoch.
        self.active_epoch.store(epoch, Ordering::SeqCst);
        StoppedWorld { handshake: self }
    }

    /// The handler's body, for a thread interrupted at `pc`; returns where
    /// the thread is to resume (`pc`, or past the one-byte NOPs it was
    /// stopped among, see [`past_nops`]). Async-signal-safe: atomics,
    /// futex, gettid, sched_setscheduler.
    fn on_signal(&self, signo: i32, pc: usize) -> usize {
        // SeqCst increment, then SeqCst load of the epoch; pairs with the
        // patcher's SeqCst store of epoch 0, then SeqCst load of this
        // counter in `release`: either this thread sees the operation gone,
        // or the patcher sees it counted here and waits for it to finish
        // recording.
        self.threads_recording.fetch_add(1, Ordering::SeqCst);
        let epoch = self.active_epoch.load(Ordering::SeqCst);
        let mut joined_epoch = None;
        let mut resume_at = pc;
        if epoch != 0 && self.active_signal.load(Ordering::Relaxed) == signo {
            let tid = gettid();
            if tid != self.patcher_tid.load(Ordering::Relaxed) {
                resume_at = self.past_nops(pc);
                self.record_acknowledgement(tid, resume_at);
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
            // Woken together, the parked threads must not preempt the
            // patcher on its way out (see `sys::sched`).
            let demoted = sched::sleep_as_batch();
            self.park_while(epoch);
            sched::wake_as_before(demoted);
            serialize_instruction_fetch();
        }
        resume_at
    }

    /// Where a thread stopped at `pc` resumes: past the write whose old
    /// bytes are one-byte NOPs that `pc` lies strictly inside (the rest of
    /// them do nothing, and the write puts an instruction there that has
    /// no boundary at `pc`), else at `pc`. Skipping them is only right
    /// because they are NOPs: every `old` was checked against the text
    /// before any thread was stopped, and nothing but fntrace (under the
    /// patch lock, with the loader held off by `sites::loader::hold`)
    /// writes text meanwhile. Called while counted in
    /// `threads_recording`, with the epoch seen active (so `writes` is
    /// the live batch).
    fn past_nops(&self, pc: usize) -> usize {
        let writes = self.writes.load(Ordering::Relaxed);
        let len = self.writes_len.load(Ordering::Relaxed);
        if writes.is_null() || len == 0 {
            return pc;
        }
        // SAFETY: `begin` stored the batch of the operation whose epoch
        // this handler saw (SeqCst, after these stores); the patcher keeps
        // it alive until `release` has seen `threads_recording` at 0, and
        // this thread is counted there. Nobody writes the writes meanwhile.
        let writes = unsafe { std::slice::from_raw_parts(writes, len) };
        let after = writes.partition_point(|write| write.addr() < pc);
        match after.checked_sub(1).and_then(|i| writes.get(i)) {
            Some(write) if write.skippable() && write.splits(pc) => write.addr() + write.len(),
            _ => pc,
        }
    }

    /// Stores `tid` and the program counter `pc` it was stopped at in a
    /// free slot of the active table (the pc first: the patcher reads a
    /// slot's pc once it sees its tid).
    fn record_acknowledgement(&self, tid: i32, pc: usize) {
        let table = self.ack_table.load(Ordering::Relaxed);
        let index = self.ack_slots_claimed.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `table` was stored by `begin` before the epoch this thread
        // read (SeqCst load, so the store is visible); tables are leaked,
        // never freed, so the reference is valid forever.
        let Some(table) = (unsafe { table.as_ref() }) else {
            return;
        };
        if let Some(slot) = table.pcs.get(index) {
            slot.store(pc, Ordering::Relaxed);
        }
        if let Some(slot) = table.slots.get(index) {
            slot.store(tid, Ordering::Release);
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
pub(super) struct StoppedWorld<'a> {
    handshake: &'a Handshake,
}

impl Drop for StoppedWorld<'_> {
    fn drop(&mut self) {
        self.handshake.release();
    }
}

/// The signal handler installed for the stop signal.
extern "C" fn on_stop_signal(signo: i32, _info: *mut libc::siginfo_t, context: *mut c_void) {
    // Restoring errno keeps the interrupted code's value (futex calls in
    // the handler may set it).
    let saved_errno = last_errno();
    let context = context as *mut libc::ucontext_t;
    let pc = if context.is_null() {
        0
    } else {
        // SAFETY: the kernel passes an `SA_SIGINFO` handler the interrupted
        // thread's `ucontext_t`, valid while the handler runs.
        unsafe { (*context).uc_mcontext.gregs[libc::REG_RIP as usize] as usize }
    };
    let resume_at = STOP_THE_WORLD.handshake.on_signal(signo, pc);
    if resume_at != pc {
        // SAFETY: as above; the kernel restores the thread's registers
        // from this context when the handler returns, so the thread
        // resumes past the NOPs.
        unsafe { (*context).uc_mcontext.gregs[libc::REG_RIP as usize] = resume_at as i64 };
    }
    set_errno(saved_errno);
}

/// Makes sure [`on_stop_signal`] handles `signo`, without ever replacing a
/// handler the program installed: called by every operation, before
/// anything is written, so a handler the program (re)installed since the
/// last operation is noticed. The default action and "ignore" are taken
/// over (no handler of the program runs for them); our own handler is left
/// as it is.
pub(super) fn install_handler(signo: i32) -> Result<(), Error> {
    let current = signal::disposition(signo).map_err(|source| Error::Signal {
        what: "querying the stop signal's handler",
        source,
    })?;
    if current.is(on_stop_signal) {
        return Ok(());
    }
    let ours = current.handler == on_stop_signal as signal::SigInfoHandler as libc::sighandler_t;
    if !current.is_default_or_ignored() && !ours {
        return Err(Error::StopSignalInUse {
            signo,
            name: signal::name(signo),
        });
    }
    signal::install(signo, on_stop_signal).map_err(|source| Error::Signal {
        what: "installing the stop-signal handler",
        source,
    })
}
