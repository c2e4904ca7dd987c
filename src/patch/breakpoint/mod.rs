//! Breakpoint patching, as the Linux kernel patches its own live text
//! (`text_poke_bp`): no thread is ever asked to stop, so no blocked system
//! call of the program is interrupted (no EINTR), and no thread has to be
//! scheduled for a batch to finish.
//!
//! # Protocol of one [`Patcher::apply`]
//! 1. Register for `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)`
//!    (once per process); without it, print one line saying so: the batch
//!    goes to the stop-the-world protocol. Likewise while a thread blocks
//!    SIGTRAP (see Hazards), and for a write over several instructions.
//!    [`can_write`] checks this; [`super::for_batch`] makes the choice.
//!    Take the protocol's lock (one batch at a time).
//! 2. Validate the batch, read the text it covers ([`TextWriter::load`]),
//!    check every `old` while building the batch's table, install the
//!    SIGTRAP handler ([`trap`]) and publish the table for it.
//! 3. Write `int3` on the first byte of every site; serialize every CPU
//!    (`membarrier`). From now on a thread reaching a site traps, and the
//!    handler runs the *new* instruction on its behalf.
//! 4. Write every byte but the first of each new instruction; serialize.
//!    No thread can execute those bytes: they sit behind an `int3`.
//! 5. Write the first bytes; serialize. Every site now holds its whole new
//!    instruction, and every CPU fetches it.
//! 6. Withdraw the table and free it once no handler uses it.
//!
//! Each write step is one walk of the batch: byte stores into the
//! writable view of the text ([`super::alias`]), or into the text image
//! then a few `pwrite`s on `/proc/self/mem` for the whole batch (text
//! stays R-X either way).
//! Each step changes one byte of an instruction a thread may execute (the
//! first, to or from `int3`) or bytes behind an `int3`, so a thread always
//! sees the old instruction, an `int3`, or the new instruction, each of
//! which is correct: emulating the new instruction early is the same as
//! the batch having been applied an instant sooner. On a failed write the batch is
//! rolled back the same way (`int3`, old tails, old first bytes) and the
//! error returned.
//!
//! # Hazards
//! - A thread that blocks SIGTRAP and hits an `int3` is killed (the kernel
//!   forces the default action of a blocked synchronous signal). Before
//!   each batch the patcher reads every thread's blocked mask
//!   (`/proc/self/task/*/status`) and uses the stop-the-world protocol for
//!   that batch if one blocks SIGTRAP; a thread that blocks it in the
//!   microseconds of a batch is not caught.
//! - A program's own SIGTRAP handler is chained behind ours (it gets every
//!   trap that is not ours, with SIGTRAP unblocked: ours is installed with
//!   `SA_NODEFER`, and the program's own `sa_mask` is not applied); one
//!   installed *after* ours receives our traps too until the next batch
//!   reinstalls ours in front of it, so during one batch it could see a
//!   trap it does not expect.
//! - With CET shadow stacks enabled, an emulated call's return would not
//!   match the shadow stack (the graph tracer's return hooking has the same
//!   limit).
//! - Under a debugger, the debugger sees our SIGTRAPs first (`handle
//!   SIGTRAP nostop noprint pass` in gdb lets them through).

pub(crate) mod trap;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use self::trap::{Lingering, TrapSite, TrapTable, INT3};
use super::text::{TextWriter, WriterMemory};
use super::TextWrite;
use super::{
    check_old, ranges, serialize_instruction_fetch, stage, validate, AddressOrder, Patcher, Pick,
};
use crate::error::Error;
use crate::sys::membarrier::{register_sync_core, sync_core};
use crate::sys::task::{ListingFailed, TaskDir, TaskStatus};
use crate::sys::{getpid, gettid};

/// The protocol instance [`super::for_batch`] hands out.
pub(crate) static BREAKPOINT: Breakpoint = Breakpoint {
    lock: Mutex::new(BreakpointState {
        lingering: Vec::new(),
        order: AddressOrder::new(),
        writer: WriterMemory::new(),
        trap_sites: Vec::new(),
    }),
};

/// The breakpoint [`Patcher`]; the one instance is [`BREAKPOINT`].
pub(crate) struct Breakpoint {
    /// One batch at a time; guards what only the patcher touches.
    lock: Mutex<BreakpointState>,
}

/// What the thread holding the lock owns.
struct BreakpointState {
    /// Withdrawn tables a handler was still using; freed by a later batch.
    lingering: Vec<Lingering>,
    /// Sorting memory, and the last batch's order.
    order: AddressOrder,
    /// The text writer's memory, kept from batch to batch.
    writer: WriterMemory,
    /// The trap table's memory, back from the last table freed.
    trap_sites: Vec<TrapSite>,
}

/// Whether the "no membarrier" line was printed.
static WARNED: AtomicBool = AtomicBool::new(false);
/// Whether the "a thread blocks SIGTRAP" line was printed.
static WARNED_BLOCKED: AtomicBool = AtomicBool::new(false);

/// Whether this kernel supports the protocol (registers for `membarrier`
/// on the first call). The error says what is missing.
pub(crate) fn supported() -> Result<(), Error> {
    register_sync_core().map_err(|source| Error::Io {
        what: "the breakpoint patch protocol needs \
               membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) (Linux 4.16 or later)"
            .to_string(),
        source,
    })
}

/// Whether this protocol can write `writes` now (step 1 and the first
/// hazard above); where it cannot, [`super::for_batch`] (the one place a
/// batch's protocol is chosen) hands the batch to the stop-the-world
/// protocol. Prints one line the first time membarrier is missing, and
/// the first time a thread blocks SIGTRAP.
pub(crate) fn can_write(writes: &[TextWrite]) -> bool {
    if writes.is_empty() {
        return true;
    }
    // A write over several instructions (a patchable entry's one-byte
    // NOPs, the first time): an `int3` on the first cannot keep out a
    // thread already past it, and nothing here knows where threads
    // are. The stop-the-world protocol does (see `sites::patchable`).
    if writes.iter().any(TextWrite::replaces_several_instructions) {
        return false;
    }
    if let Err(error) = supported() {
        if !WARNED.swap(true, Ordering::Relaxed) {
            eprintln!("fntrace: {error}; patching with the stop-the-world protocol instead");
        }
        return false;
    }
    if let Some(tid) = thread_blocking_sigtrap() {
        if !WARNED_BLOCKED.swap(true, Ordering::Relaxed) {
            eprintln!(
                "fntrace: thread {tid} blocks SIGTRAP, so an int3 would kill the process; \
                 patching with the stop-the-world protocol while a thread does"
            );
        }
        return false;
    }
    true
}

impl Patcher for Breakpoint {
    /// Applies a batch [`can_write`] accepted; a write over several
    /// instructions is refused (an error, nothing written), since an
    /// `int3` cannot keep threads out of it.
    fn apply(&self, writes: &[TextWrite]) -> Result<(), Error> {
        if writes.is_empty() {
            return Ok(());
        }
        if let Some(write) = writes.iter().find(|w| w.replaces_several_instructions()) {
            return Err(Error::TextWrite {
                addr: write.addr,
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the breakpoint protocol cannot replace several instructions in one write",
                ),
            });
        }
        let mut guard = self.lock.lock();
        let state = &mut *guard;
        for lingering in std::mem::take(&mut state.lingering) {
            match lingering.try_free() {
                Ok(sites) => state.trap_sites = sites,
                Err(lingering) => state.lingering.push(lingering),
            }
        }
        // Control hands batches in address order: `validate` (which also
        // refuses a batch out of order) then passes at once, and no sort
        // pass is needed.
        let writes = match validate(writes) {
            Ok(()) => writes,
            Err(_) => {
                let sorted = state.order.sort(writes);
                validate(sorted)?;
                sorted
            }
        };
        let memory = std::mem::take(&mut state.writer);
        let mut writer = TextWriter::prepare(ranges(writes), memory)?;
        // Every `old` is checked in the walk that builds the trap table
        // (one pass over the batch instead of two).
        let table = writer.load().and_then(|()| {
            TrapTable::of_checked(writes, std::mem::take(&mut state.trap_sites), |write| {
                check_old(&writer, write)
            })
        });
        let outcome = table.and_then(|table| match trap::install_handler() {
            Ok(()) => Ok(table),
            Err(error) => {
                state.trap_sites = table.free();
                Err(error)
            }
        });
        let table = match outcome {
            Ok(table) => table,
            Err(error) => {
                state.writer = writer.into_memory();
                return Err(error);
            }
        };
        let published = trap::publish(table);
        let outcome = write_in_three_steps(&mut writer, writes);
        match published.withdraw().try_free() {
            Ok(sites) => state.trap_sites = sites,
            Err(lingering) => state.lingering.push(lingering),
        }
        state.writer = writer.into_memory();
        outcome
    }
}

/// Steps 3 to 5; on failure, rolls back and returns the first error.
fn write_in_three_steps(writer: &mut TextWriter, writes: &[TextWrite]) -> Result<(), Error> {
    // Written out (not a loop over the steps) so that each staging loop
    // has its step inlined: 100,000 sites go through each.
    write_step(writer, writes, |_| (0, &[INT3]))
        .and_then(|()| {
            write_step(writer, writes, |write| {
                (1, write.new_bytes().get(1..).unwrap_or(&[]))
            })
        })
        .and_then(|()| {
            write_step(writer, writes, |write| {
                (0, write.new_bytes().get(..1).unwrap_or(&[]))
            })
        })
        .inspect_err(|_| roll_back(writer, writes))
}

/// One step: stages what `pick` gives of every write, stores, serializes.
fn write_step<'w>(
    writer: &mut TextWriter,
    writes: &'w [TextWrite],
    pick: impl Fn(&'w TextWrite) -> (usize, &'w [u8]),
) -> Result<(), Error> {
    stage(writer, writes, pick);
    writer.store().and_then(|()| sync())
}

/// Puts every site back to its `old` bytes by the same three steps,
/// whatever state a failed batch left it in. Errors are dropped: the first
/// one is reported.
fn roll_back(writer: &mut TextWriter, writes: &[TextWrite]) {
    let steps: [Pick; 3] = [
        |_| (0, &[INT3]),
        |write| (1, write.old_bytes().get(1..).unwrap_or(&[])),
        |write| (0, write.old_bytes().get(..1).unwrap_or(&[])),
    ];
    for step in steps {
        stage(writer, writes, step);
        let _ = writer.store();
        let _ = sync();
    }
}

/// Serializes every CPU running a thread of the process, this one too.
fn sync() -> Result<(), Error> {
    serialize_instruction_fetch();
    sync_core().map_err(|errno| Error::Io {
        what: "membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)".to_string(),
        source: io::Error::from_raw_os_error(errno),
    })
}

/// A thread of the process (other than this one) that has SIGTRAP
/// blocked: hitting an `int3` would kill the process. A listing that fails
/// counts as such a thread (tid 0; the stop-the-world protocol then
/// reports the problem).
fn thread_blocking_sigtrap() -> Option<i32> {
    let Ok(mut task_dir) = TaskDir::open() else {
        return Some(0);
    };
    let (pid, own_tid) = (getpid(), gettid());
    let trap_bit = 1u64 << (libc::SIGTRAP - 1);
    let Ok(tids) = task_dir_tids(&mut task_dir) else {
        return Some(0);
    };
    tids.into_iter().filter(|&tid| tid != own_tid).find(|&tid| {
        matches!(
            task_dir.status(pid, tid),
            TaskStatus::Live { blocked: Some(mask), .. } if mask & trap_bit != 0
        )
    })
}

/// The tids listed in `/proc/self/task`.
fn task_dir_tids(task_dir: &mut TaskDir) -> Result<Vec<i32>, ListingFailed> {
    let mut tids = Vec::new();
    task_dir.for_each_tid(|tid| {
        tids.push(tid);
        Ok::<(), ListingFailed>(())
    })?;
    Ok(tids)
}
