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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use fntrace_format::argspec::{self, ArgSlot, ArgSpec, Registers, DATA_MAX};

use super::arg_recipes::{self, PollLink, RecipeTable, MARK_POLL_KEY_AT};
use super::RawEvent;
use crate::builtin::futures;
use crate::tracer::{Call, Return};

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
    functions: Box<[FunctionValues]>,
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
/// reading is never freed, so each is kept in a slot of its own (unused
/// slots are zeroed memory never touched). `fntrace top --async` sets
/// four a run (its specs, then none).
pub(crate) const MAX_TABLES: usize = 1024;

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
        functions.sort_by_key(|(function, _)| *function);
        functions.dedup_by_key(|&mut (function, _)| function);
        let futures = futures::Functions::new(functions.iter().map(|(f, v)| (*f, &v[..])));
        // Boxed: the table is moved whole (`set_table`'s error returns it).
        let futures = Box::new(futures);
        let poll_exit = |function: usize, values: &[ArgSpec]| {
            futures
                .contains(function)
                .then(|| PollExit::of(values))
                .flatten()
        };
        let mut sites = Vec::with_capacity(fast_sites.len());
        for &(site_end, function) in fast_sites {
            let at = functions.binary_search_by_key(&function, |&(f, _)| f);
            if let Ok(at) = at {
                let values = &functions[at].1[..];
                // A poll whose exit records its state alone: the fast
                // exit records it and links the poll.
                let link = poll_exit(function, values).and_then(|exit| {
                    Some(PollLink {
                        key: futures.key_of(function)?,
                        offset: u32::try_from(exit.offset).ok()?,
                    })
                });
                // A hand-written poll: its exit records rax, linked alike.
                let hand_written = || {
                    let returns = values
                        .iter()
                        .any(|v| matches!(v.slot, ArgSlot::Poll { at: None, .. }));
                    Some(PollLink {
                        key: futures.key_of(function).filter(|_| returns)?,
                        offset: arg_recipes::POLL_FROM_RAX,
                    })
                };
                let link = link.or_else(hand_written);
                sites.push((site_end, values, link));
            }
        }
        let recipes = RecipeTable::new(&sites);
        let functions = (functions.into_iter())
            .map(|(function, values)| FunctionValues {
                poll_exit: poll_exit(function, &values),
                function,
                values: values.into_boxed_slice(),
            })
            .collect();
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
        Some(&self.function(function)?.values)
    }

    /// The values of `function`, if it records any.
    fn function(&self, function: usize) -> Option<&FunctionValues> {
        let at = self
            .functions
            .binary_search_by_key(&function, |f| f.function)
            .ok()?;
        Some(&self.functions[at])
    }
}

/// One function's values.
struct FunctionValues {
    /// Its entry address.
    function: usize,
    values: Box<[ArgSpec]>,
    /// For an async function's poll whose exit records its state alone
    /// (what `--async` asks): the exit reads and links it without encoding.
    poll_exit: Option<PollExit>,
}

/// The exit of a poll that records its future's state alone:
/// `pinN[OFFSET]` of one byte, in an integer format.
#[derive(Clone, Copy)]
struct PollExit {
    /// N.
    arg: u8,
    /// OFFSET.
    offset: u64,
}

impl PollExit {
    /// The poll exit of an async function recording `values`, if they are
    /// that.
    fn of(values: &[ArgSpec]) -> Option<PollExit> {
        let mut at_exit = values.iter().filter(|v| v.slot.at_exit());
        let (Some(state), None) = (at_exit.next(), at_exit.next()) else {
            return None;
        };
        match state.slot {
            ArgSlot::Deref {
                arg,
                offset,
                pinned: true,
                ..
            } if state.size == 1 && arg_recipes::integer(state) => Some(PollExit {
                arg,
                offset: u64::from(offset),
            }),
            _ => None,
        }
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

/// Which end of a call values are recorded at.
#[derive(Clone, Copy)]
pub(super) enum Side<'a> {
    /// Its entry: the arguments, from its registers.
    Entry(&'a Call<'a>),
    /// Its exit: the return value, and what the entry kept.
    Exit(&'a Return),
}

/// Hands `push` the events for `event` of `function` with its values
/// (the arguments' at the entry, the return value's at the exit): whether
/// there were any (`false`: the function records none there, `push` not
/// called). An entry whose function reads a value at the exit through an
/// argument keeps that argument in its frame ([`Kept`]).
pub(super) fn with_values(
    event: RawEvent,
    function: usize,
    side: Side<'_>,
    push: &mut dyn FnMut(&[RawEvent]),
) -> bool {
    let Some(table) = table() else {
        return false;
    };
    let Some(FunctionValues {
        values, poll_exit, ..
    }) = table.function(function)
    else {
        return false;
    };
    if let (Side::Exit(ret), Some(poll_exit)) = (side, poll_exit) {
        if let Some(kept) = Kept::unpack(ret.kept, poll_exit.arg) {
            return poll_returned(event, function, ret, (kept, poll_exit.offset), push);
        }
    }
    let retval = matches!(side, Side::Exit(_));
    let exit_arg = exit_deref_arg(values);
    if !values.iter().any(|v| v.slot.at_exit() == retval) && exit_arg.is_none() {
        return false;
    }
    let mut registers = Registers::default();
    // The argument a `pinN[OFFSET]` may be loaded through: at the entry
    // any (the registers are the call's own), at the exit the one the
    // entry kept for this very call, else none (0).
    let mut loads_through = 0;
    // At the exit: whether the call began a future, as its entry kept it.
    let mut began_future = false;
    match side {
        Side::Entry(call) => {
            let regs = call.regs;
            registers.int = [regs.rdi, regs.rsi, regs.rdx, regs.rcx, regs.r8, regs.r9];
            for (to, from) in registers.float.iter_mut().zip(&regs.xmm) {
                *to = *from as u64;
            }
            loads_through = u8::MAX;
            if let Some(arg) = exit_arg {
                let value = registers.int[usize::from(arg - 1)];
                call.keep_for_exit(Kept::pack(arg, value, false));
                if !values.iter().any(|v| !v.slot.at_exit()) {
                    return false;
                }
            }
        }
        Side::Exit(ret) => {
            if let Some([rax, xmm0, rdx]) = ret.returned {
                registers.rax = rax;
                registers.xmm0 = xmm0;
                registers.rdx = rdx;
            }
            if let Some(arg) = exit_arg {
                let kept = Kept::unpack(ret.kept, arg);
                registers.int[usize::from(arg - 1)] = kept.map_or(0, |k| k.value);
                if let Some(kept) = kept {
                    loads_through = arg;
                    began_future = kept.began_future;
                }
            }
        }
    }
    // An async function's poll is linked into its future at its exit, once
    // its event is in the ring (a slow future's Ready exit is then drained
    // before the writer sees it queued); a drop function's entry frees its
    // future. The future's address at the exit: the argument the entry kept.
    let kept = exit_arg.map_or(0, |arg| registers.int[usize::from(arg - 1)]);
    let mut link = |data: &[u8]| match side {
        Side::Entry(call) => {
            if let (Some(arg), true) = (exit_arg, table.futures.begins(function, values, data)) {
                call.keep_for_exit(Kept::pack(arg, kept, true));
            }
            table.futures.entered(function, values, data);
        }
        Side::Exit(ret) => {
            let ticks = (ret.entry_ticks, event.ticks);
            let poll = (kept, began_future);
            table.futures.exited(function, poll, ticks, values, data)
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

/// The exit of an async function's poll whose exit records its state
/// alone, read through the future the entry kept (`kept`, and the state's
/// `offset`): the exit event with its one data slot, as
/// `argspec::encode` writes a byte (the byte, then zeros), then the poll
/// linked into its future.
fn poll_returned(
    event: RawEvent,
    function: usize,
    ret: &Return,
    (kept, offset): (Kept, u64),
    push: &mut dyn FnMut(&[RawEvent]),
) -> bool {
    let Some(table) = table() else {
        return false;
    };
    let mut state = [0u8];
    read_pinned(kept.value, kept.value.wrapping_add(offset), &mut state);
    let events = [
        RawEvent {
            ticks: event.ticks,
            word: event.word | MORE,
        },
        RawEvent::data(u64::from(state[0])),
    ];
    push(&events);
    let ticks = (ret.entry_ticks, event.ticks);
    let poll = (kept.value, kept.began_future);
    table
        .futures
        .returned(function, poll, ticks, u64::from(state[0]));
    true
}

/// Links a poll whose fast exit (`asm/x86_64/return.S`, `.Lpoll`) wrote
/// its exit event and state: `marks`, its frame's (the key of its
/// function's futures, `arg_recipes::PollLink`), `kept` what its entry
/// kept (the future's address, and whether the poll began it), its entry
/// and exit ticks and the value its exit recorded (the future's state, or
/// a hand-written poll's `Poll` discriminant). Called with the recursion
/// guard set; what [`poll_returned`] does after its push.
#[no_mangle]
pub extern "C" fn fntrace_poll_exited(
    marks: u64,
    kept: u64,
    entry_ticks: u64,
    exit_ticks: u64,
    state: u64,
) {
    let Some(table) = table() else {
        return;
    };
    let key = ((marks >> MARK_POLL_KEY_AT) as u16).wrapping_sub(1);
    let arg = (kept >> KEPT_ARG_SHIFT & 7) as u8 + 1;
    let Some(kept) = Kept::unpack(kept, arg) else {
        return;
    };
    let poll = (kept.value, kept.began_future);
    let link = || {
        table
            .futures
            .returned_by_key(key, poll, (entry_ticks, exit_ticks), state)
    };
    // Nothing in the linker panics; were it to, unwinding out of an
    // `extern "C"` function would abort the program.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(link));
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

/// The argument an `argN[OFFSET]` read at the exit uses, if `values` has
/// one (one argument a function: the first such value's).
fn exit_deref_arg(values: &[ArgSpec]) -> Option<u8> {
    values.iter().find_map(|v| match v.slot {
        ArgSlot::Deref {
            arg, at_exit: true, ..
        }
        | ArgSlot::Poll { arg, .. } => Some(arg),
        _ => None,
    })
}

/// What a call's entry keeps in its frame (`rt::shadow::Frame::kept`) for
/// its exit: argument N's value, through which a value is read at the exit
/// (`argN[OFFSET]` or `pinN[OFFSET]` given with `-R`), and whether the
/// call began a future (an async function's poll that found its state
/// Unresumed). Packed in a word, as the argument entries write it too
/// (`KEPT_*` in layout.h): the value in bits 0-46, the future bit 47, N - 1
/// in bits 48-50, bit 63 set. A value that is not a user-space address
/// (0, or 2^47 and above) is not kept: nothing is read through it, as
/// nothing could be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Kept {
    /// The argument's value.
    pub value: u64,
    /// The call began a future.
    pub began_future: bool,
}

/// The bits of a kept value.
const KEPT_VALUE_BITS: u32 = 47;
/// The bit of a call that began a future.
pub(super) const KEPT_FUTURE_BIT: u64 = 1 << 47;
/// Where N - 1 is.
pub(super) const KEPT_ARG_SHIFT: u32 = 48;
/// Set in every kept word (0: nothing kept).
pub(super) const KEPT_SET_BIT: u64 = 1 << 63;

impl Kept {
    /// The word for argument `arg` (1-6) of `value`: 0 if it is not a
    /// user-space address.
    pub(super) fn pack(arg: u8, value: u64, began_future: bool) -> u64 {
        if value == 0 || value >> KEPT_VALUE_BITS != 0 || !(1..=6).contains(&arg) {
            return 0;
        }
        let future = if began_future { KEPT_FUTURE_BIT } else { 0 };
        value | future | u64::from(arg - 1) << KEPT_ARG_SHIFT | KEPT_SET_BIT
    }

    /// What `word` keeps of argument `arg`: `None` if nothing is kept, or
    /// another argument (specs replaced between the entry and the exit:
    /// only the call's own argument N is ever loaded through as `pinN`).
    pub(super) fn unpack(word: u64, arg: u8) -> Option<Kept> {
        let set = word & KEPT_SET_BIT != 0;
        let kept_arg = (word >> KEPT_ARG_SHIFT & 7) as u8 + 1;
        (set && kept_arg == arg).then_some(Kept {
            value: word & ((1 << KEPT_VALUE_BITS) - 1),
            began_future: word & KEPT_FUTURE_BIT != 0,
        })
    }
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
    // in this very call's frame for that argument (`Kept`: the argument
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_argument_comes_back_only_for_its_own_argument() {
        for arg in 1..=6u8 {
            for began_future in [false, true] {
                for value in [1u64, 0x5555_5555_0000, (1 << 47) - 1] {
                    let word = Kept::pack(arg, value, began_future);
                    assert_ne!(word & KEPT_SET_BIT, 0);
                    let kept = Kept::unpack(word, arg);
                    assert_eq!(
                        kept,
                        Some(Kept {
                            value,
                            began_future
                        })
                    );
                    for other in (1..=6).filter(|&o| o != arg) {
                        assert_eq!(Kept::unpack(word, other), None);
                    }
                }
            }
        }
        // No user address: nothing kept, nothing read.
        for value in [0, 1 << 47, u64::MAX] {
            assert_eq!(Kept::pack(1, value, true), 0);
        }
        assert_eq!(Kept::unpack(0, 1), None);
        assert_eq!(Kept::pack(7, 0x1000, false), 0);
    }
}
