//! The graph tracer's argument and return-value recording (uftrace's `-A`
//! and `-R`): which functions record what ([`ArgTable`], set before
//! tracing starts or replaced while no recorder runs, at most
//! [`MAX_TABLES`] times a process), and the capture on the traced path.
//!
//! A recorded entry (exit) goes into the ring as its usual event with
//! [`MORE`] set, followed by slots of data ([`RawEvent::data`]): the
//! bytes uftrace writes after the record ([`fntrace_format::argspec`]),
//! 8 per slot, all published together or none (then the event goes alone,
//! without its values, counted: `GraphTracer::values_left_out`). Only the
//! streaming recorder's writer and the flight recorder's drain read the
//! data; every other reader of the rings skips it. Sites of these functions never call a fast entry (see
//! `sites::flag::WITH_ARGS`).
//!
//! Strings and `argN[OFFSET]` are read with `process_vm_readv` on the
//! process itself: an unreadable address is an error, never a fault in the
//! traced program. `pinN[OFFSET]` alone (what `fntrace record --async`
//! hands over for a poll's own future) is read with a plain load
//! ([`read_pinned`]): no system call on a poll.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use fntrace_format::argspec::{self, ArgSlot, ArgSpec, Registers, DATA_MAX};

use super::arg_recipes::RecipeTable;
use super::RawEvent;
use crate::arch::x86_64::SavedRegs;
use crate::builtin::futures;

/// The depth field's top bit: data slots follow this event.
pub(super) const MORE: u64 = 1 << 62;

// The argument entries set it too.
const _: () = assert!(MORE == super::arg_recipes::EVENT_MORE_BIT);

/// Slots of data one event carries at most.
const DATA_SLOTS: usize = (DATA_MAX + 4) / 8;

/// Which functions record which values, and the specs as given.
pub(crate) struct ArgTable {
    /// Function addresses, sorted, with their values (arguments and return
    /// value, merged as uftrace merges specs).
    functions: Vec<(usize, Vec<ArgSpec>)>,
    /// The `-A` specs, joined by `;` (uftrace's `argspec` line).
    pub(crate) arguments: String,
    /// The `-R` specs, joined by `;` (uftrace's `retspec` line).
    pub(crate) retval: String,
    /// The specs as uftrace's `info` spells them.
    pub(crate) info: Box<InfoSpecs>,
    /// The argument entries' recipes, by site.
    recipes: RecipeTable,
    /// The async functions among them (`fntrace record --async`), whose
    /// polls the runtime links into futures.
    pub(crate) futures: Box<futures::Functions>,
}

/// The specs as uftrace's `info` spells them
/// ([`argspec::uftrace_spelling`]): the `argspec` and `retspec` lines.
pub(crate) struct InfoSpecs {
    /// The `-A` specs.
    pub(crate) arguments: String,
    /// The `-R` specs.
    pub(crate) retval: String,
}

/// How many tables a process may set: a table a traced thread may be
/// reading is never freed, so each is kept in a slot of its own.
pub(crate) const MAX_TABLES: usize = 64;

static TABLES: [OnceLock<ArgTable>; MAX_TABLES] = [const { OnceLock::new() }; MAX_TABLES];

/// Slots taken so far: the current table is the last one.
static SET: AtomicUsize = AtomicUsize::new(0);

impl ArgTable {
    /// A table of `functions` (any order) for the specs `arguments` and
    /// `retval`, with recipes for the sites `fast_sites` (site end,
    /// function) of functions whose values the argument entries record
    /// (`arg_recipes::eligible`).
    pub(crate) fn new(
        mut functions: Vec<(usize, Vec<ArgSpec>)>,
        fast_sites: &[(usize, usize)],
        arguments: String,
        retval: String,
    ) -> ArgTable {
        functions.sort_by_key(|&(function, _)| function);
        functions.dedup_by_key(|&mut (function, _)| function);
        let mut sites = Vec::with_capacity(fast_sites.len());
        for &(site_end, function) in fast_sites {
            let at = functions.binary_search_by_key(&function, |&(f, _)| f);
            if let Ok(at) = at {
                sites.push((site_end, &functions[at].1[..]));
            }
        }
        let recipes = RecipeTable::new(&sites);
        let futures = futures::Functions::new(functions.iter().map(|(f, v)| (*f, &v[..])));
        // Boxed: the table is moved whole (`set_table`'s error returns it).
        let futures = Box::new(futures);
        ArgTable {
            info: Box::new(InfoSpecs {
                arguments: argspec::uftrace_spelling(&arguments, argspec::SpecKind::Arguments),
                retval: argspec::uftrace_spelling(&retval, argspec::SpecKind::Retval),
            }),
            functions,
            arguments,
            retval,
            recipes,
            futures,
        }
    }

    /// The values recorded for `function` (at its entry address), if any.
    pub(crate) fn values_of(&self, function: usize) -> Option<&[ArgSpec]> {
        let at = self
            .functions
            .binary_search_by_key(&function, |&(f, _)| f)
            .ok()?;
        Some(&self.functions[at].1)
    }
}

/// Installs the process's table in place of the current one (refused,
/// returned, after [`MAX_TABLES`]). The control path's, under its lock:
/// one caller at a time.
pub(crate) fn set_table(table: ArgTable) -> Result<(), ArgTable> {
    let next = SET.load(Ordering::Acquire);
    let Some(slot) = TABLES.get(next) else {
        return Err(table);
    };
    slot.set(table)?;
    SET.store(next + 1, Ordering::Release);
    if let Some(table) = slot.get() {
        table.recipes.publish();
    }
    Ok(())
}

/// The process's table, if specs were given.
pub(crate) fn table() -> Option<&'static ArgTable> {
    let set = SET.load(Ordering::Acquire);
    TABLES.get(set.checked_sub(1)?)?.get()
}

/// Bytes of data a call without strings needs at most: 6 integer and 8
/// floating-point arguments of 8 bytes, with [`argspec::encode`]'s room.
const SMALL_DATA: usize = 128;

/// Hands `push` the events for `event` of `function` with its values
/// (`retval`: the return value's, from `returned`; else the arguments',
/// from `regs`): whether there were any (`false`: the function records
/// none of them, `push` not called).
pub(super) fn with_values(
    event: RawEvent,
    function: usize,
    call_key: CallKey,
    retval: bool,
    regs: Option<&SavedRegs>,
    returned: Option<[u64; 3]>,
    push: &mut dyn FnMut(&[RawEvent]),
) -> bool {
    let Some(table) = table() else {
        return false;
    };
    let Some(values) = table.values_of(function) else {
        return false;
    };
    if !values.iter().any(|v| v.slot.at_exit() == retval) && exit_deref_arg(values).is_none() {
        return false;
    }
    let mut registers = Registers::default();
    if let Some(regs) = regs {
        registers.int = [regs.rdi, regs.rsi, regs.rdx, regs.rcx, regs.r8, regs.r9];
        for (to, from) in registers.float.iter_mut().zip(&regs.xmm) {
            *to = *from as u64;
        }
    }
    // The argument a `pinN[OFFSET]` may be loaded through: at the entry
    // any (the registers are the call's own), at the exit the one the
    // entry kept for this very call, else none (0).
    let mut loads_through = match regs {
        Some(_) if !retval => u8::MAX,
        _ => 0,
    };
    // `argN[OFFSET]` read at the exit: the argument the entry kept.
    if let Some(arg) = exit_deref_arg(values) {
        match (retval, regs) {
            (false, Some(_)) => keep_argument(call_key, arg, registers.int[usize::from(arg - 1)]),
            (true, _) => {
                let kept = kept_argument(call_key, arg);
                registers.int[usize::from(arg - 1)] = kept.unwrap_or(0);
                if kept.is_some() {
                    loads_through = arg;
                }
            }
            _ => {}
        }
        if !retval && !values.iter().any(|v| !v.slot.at_exit()) {
            return false;
        }
    }
    if let Some([rax, xmm0, rdx]) = returned {
        registers.rax = rax;
        registers.xmm0 = xmm0;
        registers.rdx = rdx;
    }
    // An async function's poll: linked into its future once its event is
    // in the ring (a slow future's Ready exit is then drained before the
    // writer sees it queued).
    // The future's address at the exit: the argument the entry kept.
    let kept = exit_deref_arg(values).map_or(0, |arg| registers.int[usize::from(arg - 1)]);
    let mut link = |data: &[u8]| match retval {
        false => table
            .futures
            .entered(function, call_key.entry_ticks, values, data),
        true => {
            let ticks = (call_key.entry_ticks, event.ticks);
            table.futures.exited(function, kept, ticks, values, data)
        }
    };
    // Buffers on the stack, cleared on every call: the small ones unless
    // a string is recorded (a kilobyte cleared each call was a quarter of
    // an integer-only call's time).
    if argspec::encoded_bound(values, retval) <= SMALL_DATA {
        encode_events::<SMALL_DATA, { 1 + SMALL_DATA / 8 }>(
            event,
            values,
            retval,
            (&registers, loads_through),
            push,
            &mut link,
        )
    } else {
        encode_events::<{ DATA_MAX + 4 }, { 1 + DATA_SLOTS }>(
            event,
            values,
            retval,
            (&registers, loads_through),
            push,
            &mut link,
        )
    }
}

/// [`with_values`]'s work with buffers of `BYTES` and `EVENTS` (`1 +
/// BYTES / 8`), the registers and the argument a `pinN[OFFSET]` may be
/// loaded through (1-6, `u8::MAX` any, 0 none: [`read_pinned`]); `after`
/// is handed the data once the events are pushed.
fn encode_events<const BYTES: usize, const EVENTS: usize>(
    event: RawEvent,
    values: &[ArgSpec],
    retval: bool,
    (registers, loads_through): (&Registers, u8),
    push: &mut dyn FnMut(&[RawEvent]),
    after: &mut dyn FnMut(&[u8]),
) -> bool {
    let mut bytes = [0u8; BYTES];
    let mut read = |pinned: Option<u8>, addr: u64, buf: &mut [u8]| match pinned {
        Some(arg) if loads_through == u8::MAX || loads_through == arg => {
            let base = registers.int[usize::from(arg - 1)];
            read_pinned(base, addr, buf)
        }
        _ => read_own(addr, buf),
    };
    let len = argspec::encode_with(values, retval, registers, &mut read, &mut bytes);
    if len == 0 {
        return false;
    }
    let mut out = [RawEvent { ticks: 0, word: 0 }; EVENTS];
    out[0] = RawEvent {
        ticks: event.ticks,
        word: event.word | MORE,
    };
    for (slot, chunk) in out[1..].iter_mut().zip(bytes[..len].chunks_exact(8)) {
        *slot = RawEvent::data(u64::from_le_bytes(chunk.try_into().unwrap_or_default()));
    }
    push(&out[..1 + len / 8]);
    after(&bytes[..len]);
    true
}

/// Identifies one call on its thread for [`keep_argument`]: its depth and
/// entry time (both known at its exit).
#[derive(Clone, Copy)]
pub(super) struct CallKey {
    /// The call's depth on its thread.
    pub depth: usize,
    /// Its entry time (ticks).
    pub entry_ticks: u64,
}

/// The argument an `argN[OFFSET]` read at the exit uses, if `values` has
/// one (one argument a function: the first such value's).
fn exit_deref_arg(values: &[ArgSpec]) -> Option<u8> {
    values.iter().find_map(|v| match v.slot {
        ArgSlot::Deref {
            arg, at_exit: true, ..
        } => Some(arg),
        _ => None,
    })
}

/// Calls deep that [`KEPT`] tells apart: a call this many levels above
/// another of the same thread takes its place, and the lower one's exit
/// then reads an address of 0 (all ones bytes, an unreadable value). 40
/// places of 24 bytes: 960 bytes of static TLS. `fntrace attach` loads
/// libfntrace.so with dlopen, where glibc has only a small surplus of
/// static TLS for it; 64 places (1,536 bytes) made that dlopen fail
/// ("cannot allocate memory in static TLS block", tests/programs/attach.rs).
const KEPT_DEPTHS: usize = 40;

thread_local! {
    // A const-initialised array of Cells without Drop: a plain TLS block,
    // no lazy registration and no allocation on the traced path.
    static KEPT: [Cell<(u64, u64, u8)>; KEPT_DEPTHS] = const { [const { Cell::new((0, 0, 0)) }; KEPT_DEPTHS] };
}

/// Keeps `value`, argument `arg`, for the exit of the call `key` (its
/// entry time, the value and which argument it is, at its depth's place).
fn keep_argument(key: CallKey, arg: u8, value: u64) {
    KEPT.with(|kept| kept[key.depth % KEPT_DEPTHS].set((key.entry_ticks, value, arg)));
}

/// Argument `arg` as [`keep_argument`] kept it for `key`; `None` if
/// another call took its place since, or the entry kept another argument
/// (specs replaced meanwhile): only the call's own argument N is ever
/// loaded through as `pinN`.
fn kept_argument(key: CallKey, arg: u8) -> Option<u64> {
    KEPT.with(|kept| {
        let (ticks, value, kept_arg) = kept[key.depth % KEPT_DEPTHS].get();
        (ticks == key.entry_ticks && kept_arg == arg).then_some(value)
    })
}

/// Copies the bytes at `addr` (`base`, the call's own pinned argument,
/// plus the value's offset) into `buf` with a plain load: `pinN[OFFSET]`,
/// what `fntrace record --async` hands over for a poll's future. A null
/// `base` (not a reference: no claim holds) goes to [`read_own`].
fn read_pinned(base: u64, addr: u64, buf: &mut [u8]) -> Option<usize> {
    if base == 0 {
        return read_own(addr, buf);
    }
    // SAFETY: the spec `pinN[OFFSET]` claims that argument N of this call
    // is its own `Pin<&mut Self>` and that OFFSET + size lies inside what
    // it points to; `fntrace record --async` makes it only for a resume
    // function whose DWARF says so (its first parameter `Pin<&mut ENV>`,
    // in the register the ABI gives it; the state a member of ENV), and
    // the CLI refuses it written by hand.
    // A `&mut` is valid and the pointee alive and unmoved (pinned) for the
    // whole call, and still when it returns: its caller, which owns the
    // future, has not run yet. `base` is that argument: at the entry the
    // register as the call made it; at the exit the value the entry kept
    // for this very call and argument (depth, entry time and argument
    // matched, else the read never comes here: `with_values`), and only
    // for a real return (a frame left by unwinding or longjmp records no
    // exit values). No other thread writes the future during its poll
    // (the `&mut` is exclusive), so the bytes are not raced. A byte copy:
    // no alignment is assumed.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
    Some(buf.len())
}

/// Copies what is readable of the bytes at `addr` into `buf`: how many,
/// `None` if none is (an unmapped or unreadable address). A system call
/// instead of a load, so that a bad pointer is an error, not a fault.
fn read_own(addr: u64, buf: &mut [u8]) -> Option<usize> {
    // Two pieces, split where the first page ends: a transfer stops at the
    // first piece it cannot read whole, so the bytes before an unmapped
    // page still come.
    let in_page = (4096 - (addr % 4096) as usize).min(buf.len());
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = [
        libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: in_page,
        },
        libc::iovec {
            iov_base: (addr as usize).wrapping_add(in_page) as *mut libc::c_void,
            iov_len: buf.len() - in_page,
        },
    ];
    let pieces = if in_page == buf.len() { 1 } else { 2 };
    // SAFETY: `local` describes `buf`, writable for its length; the kernel
    // checks `remote` and returns an error for what is not mapped readable.
    let n = unsafe {
        libc::process_vm_readv(crate::sys::getpid(), &local, 1, remote.as_ptr(), pieces, 0)
    };
    (n > 0).then_some(n as usize)
}
