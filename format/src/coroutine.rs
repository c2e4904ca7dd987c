//! The one rule by which polls of rustc's async state machines are linked
//! into futures (docs/async.md), shared by the offline linker
//! (`fntrace_tools::analysis::futures_of`) and the runtime's
//! (`fntrace`'s `builtin::futures`): which functions `fntrace record
//! --async` records the states of, where a poll's values are, and what
//! rustc's coroutine states say.
//!
//! Each poll of such a function records, at its entry, the future's
//! address then its state (`F@arg1/x,pin1[OFF]/u8`) and, at its exit, its
//! state again (`F@pin1[OFF]/u8`); `info` spells `pin1[OFF]` as
//! `arg1[OFF]`, and either reads the same. A poll that begins [`UNRESUMED`] is a
//! new future's first; one after which the state is [`RETURNED`] returned
//! `Ready`, [`PANICKED`] panicked. A future's drop function
//! ([`drop_function_name`]), where it is a function of its own, records
//! the same values as a poll's entry (`D@arg1/x,arg1[OFF]/u8`): a future
//! it finds pending was dropped before `Ready`.
//!
//! A hand-written `Future::poll` has no such state: it records the
//! future's address at its entry (`F@arg1/x`) and, at its exit, the
//! discriminant of the `Poll<T>` it returns (`F@poll1(V)/uN`, V being
//! `Pending`'s; [`Linking::Returns`]). A poll that returns anything but V
//! returned `Ready`; a poll of an address with no pending future of its
//! function begins one (nothing tells a first poll apart: a future first
//! polled before the recording is taken to begin at its first poll seen).
//! Its drop function, `core::ptr::drop_in_place::<T>` where it is a
//! function of its own, records the future's address (`D@arg1/x`).

use crate::argspec::{ArgFormat, ArgSlot, ArgSpec};

/// rustc's state of a coroutine not polled yet.
pub const UNRESUMED: u64 = 0;
/// Its state once its body has returned: the poll returned `Ready`.
pub const RETURNED: u64 = 1;
/// Its state after a panic in its body.
pub const PANICKED: u64 = 2;
/// Its state at its first suspend point: what a hand-written poll that
/// returned `Pending` is taken to leave its future in.
pub const SUSPENDED: u64 = 3;

/// How the polls of a function are linked into futures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linking {
    /// rustc's state machine: its state read at each poll's entry and
    /// exit (`argN[OFFSET]` given with `-R`).
    States,
    /// A hand-written `Future::poll`: the `Poll` it returns, `Pending`
    /// when its discriminant is `pending` (`pollN(V)`).
    Returns {
        /// `Pending`'s discriminant.
        pending: u64,
    },
}

/// How the polls of a function recording `values` are linked, if it is
/// one whose polls are: it reads a state at the exit (`argN[OFFSET]`
/// given with `-R`) or its `Poll`'s discriminant (`pollN(V)`), which only
/// `--async` asks for.
pub fn linking(values: &[ArgSpec]) -> Option<Linking> {
    values.iter().find_map(|v| match v.slot {
        ArgSlot::Deref { at_exit: true, .. } => Some(Linking::States),
        ArgSlot::Poll { pending, .. } => Some(Linking::Returns { pending }),
        _ => None,
    })
}

impl Linking {
    /// The state a poll's exit value (`value`: the state, or the `Poll`'s
    /// discriminant) leaves its future in, as rustc's states say it.
    pub fn state_out(self, value: u64) -> u64 {
        match self {
            Linking::States => value,
            Linking::Returns { pending } if value == pending => SUSPENDED,
            Linking::Returns { .. } => RETURNED,
        }
    }
}

/// How one poll left its future.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollEnd {
    /// Suspended at an await: polled again later.
    Pending,
    /// Its body returned.
    Ready,
    /// Its body panicked.
    Panicked,
}

/// How a poll after which the state is `state_out` left its future.
pub fn poll_end(state_out: u64) -> PollEnd {
    match state_out {
        RETURNED => PollEnd::Ready,
        PANICKED => PollEnd::Panicked,
        _ => PollEnd::Pending,
    }
}

/// Whether a poll that began in `state_in` is a new future's first (a
/// future left pending at the same address was dropped).
pub fn first_poll(state_in: u64) -> bool {
    state_in == UNRESUMED
}

/// Whether a function recording `values` is one whose polls are linked
/// ([`linking`]).
pub fn links_polls(values: &[ArgSpec]) -> bool {
    linking(values).is_some()
}

/// The future's address at a poll's entry (or a drop's), from the data
/// recorded after the entry (`data`, as `argspec::encode` wrote it for
/// `values`): its first value. `None` if it is not an integer or `data`
/// is too short.
pub fn entry_address(values: &[ArgSpec], data: &[u8]) -> Option<u64> {
    let [address] = integers(values, false, data)?;
    Some(address)
}

/// The future's address and its state at a poll's entry: its first two
/// values (a hand-written poll's entry records no state: `None`).
pub fn entry_values(values: &[ArgSpec], data: &[u8]) -> Option<(u64, u64)> {
    let [address, state] = integers(values, false, data)?;
    Some((address, state))
}

/// The state a poll's exit leaves its future in (see
/// [`Linking::state_out`]), from the data recorded after the exit: its
/// first value.
pub fn exit_state(values: &[ArgSpec], data: &[u8]) -> Option<u64> {
    let [value] = integers(values, true, data)?;
    Some(linking(values)?.state_out(value))
}

/// The first `N` values (the entry's, or the exit's if `retval`) of
/// `data` as unsigned integers, read as `argspec::show` reads them.
fn integers<const N: usize>(values: &[ArgSpec], retval: bool, data: &[u8]) -> Option<[u64; N]> {
    let mut out = [0u64; N];
    let mut at = 0;
    let mut taken = values.iter().filter(|v| v.slot.at_exit() == retval);
    for slot in &mut out {
        let value = taken.next()?;
        let integer = matches!(
            value.format,
            ArgFormat::Auto | ArgFormat::Signed | ArgFormat::Unsigned | ArgFormat::Hex
        );
        if !integer || value.size > 8 {
            return None;
        }
        let size = usize::from(value.size);
        let bytes = data.get(at..at + size)?;
        let mut word = [0u8; 8];
        word[..size].copy_from_slice(bytes);
        *slot = u64::from_le_bytes(word);
        at += size.next_multiple_of(4);
    }
    Some(out)
}

/// The async fn a resume function belongs to, as a user names it: its
/// demangled name without the `::{closure#N}` rustc gives the state
/// machine (`kv::serve::{closure#0}` → `kv::serve`); the name itself if
/// it has none.
pub fn async_fn_name(resume: &str) -> &str {
    match resume.rsplit_once("::{closure#") {
        Some((name, rest)) if rest.ends_with('}') && !name.is_empty() => name,
        _ => resume,
    }
}

/// How the symbol of a hand-written future's poll ends (demangled).
const FUTURE_POLL: &str = " as core::future::future::Future>::poll";

/// The future type whose polls `poll` (a demangled name) makes, as its
/// drop function names it: a hand-written `<T as
/// core::future::future::Future>::poll`'s T; a resume function's own
/// name (rustc names the state machine's type so).
pub fn future_type(poll: &str) -> &str {
    match poll
        .strip_prefix('<')
        .and_then(|p| p.strip_suffix(FUTURE_POLL))
    {
        Some(ty) if !ty.is_empty() => ty,
        _ => poll,
    }
}

/// The drop function of the future of resume function `resume` (its
/// demangled name): `core::ptr::drop_in_place::<RESUME>`, rustc's drop
/// glue for the state machine, whose type it names as the resume
/// function's symbol does.
pub fn drop_function_name(resume: &str) -> String {
    format!("core::ptr::drop_in_place::<{resume}>")
}

/// The resume function whose future `name` (a demangled function name)
/// drops, if it is a [`drop_function_name`].
pub fn dropped_by(name: &str) -> Option<&str> {
    let inner = name.strip_prefix("core::ptr::drop_in_place::<")?;
    inner.strip_suffix('>').filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argspec::{encode, parse, Registers, SpecKind};

    /// What `--async` records, encoded as the runtime does and read back.
    #[test]
    fn values_round_trip_through_the_encoding() {
        let entry = &parse("f@arg1/x,arg1[0x10]/u8", SpecKind::Arguments).unwrap()[0].values;
        let exit = &parse("f@arg1[0x10]/u8", SpecKind::Retval).unwrap()[0].values;
        let mut values = entry.clone();
        values.extend(exit.iter().copied());
        assert!(links_polls(&values) && !links_polls(entry));
        let regs = Registers {
            int: [0x7f00_1234_5678, 0, 0, 0, 0, 0],
            ..Registers::default()
        };
        let mut state = 3u8;
        let mut read = |addr: u64, buf: &mut [u8]| {
            assert_eq!(addr, 0x7f00_1234_5688);
            buf[0] = state;
            Some(1)
        };
        let mut out = [0u8; 64];
        let len = encode(&values, false, &regs, &mut read, &mut out);
        assert_eq!(
            entry_values(&values, &out[..len]),
            Some((0x7f00_1234_5678, 3))
        );
        state = 1;
        let mut read = |_: u64, buf: &mut [u8]| {
            buf[0] = state;
            Some(1)
        };
        let len = encode(&values, true, &regs, &mut read, &mut out);
        assert_eq!(exit_state(&values, &out[..len]), Some(RETURNED));
        assert_eq!(poll_end(RETURNED), PollEnd::Ready);
        assert_eq!(poll_end(PANICKED), PollEnd::Panicked);
        assert_eq!(poll_end(4), PollEnd::Pending);
        assert!(first_poll(0) && !first_poll(3));
    }

    /// What `--async` records for a hand-written `Future::poll` returning
    /// `Poll<()>` in `al` (Pending 1): the discriminant's byte alone is
    /// read, whatever rax's other bytes hold.
    #[test]
    fn a_hand_written_poll_ends_by_its_discriminant() {
        let entry = &parse("f@arg1/x", SpecKind::Arguments).unwrap()[0].values;
        let exit = &parse("f@poll1(1)/u8", SpecKind::Retval).unwrap()[0].values;
        let mut values = entry.clone();
        values.extend(exit.iter().copied());
        assert_eq!(linking(&values), Some(Linking::Returns { pending: 1 }));
        assert_eq!(linking(entry), None);
        let mut regs = Registers {
            int: [0x7f00_1234_5678, 0, 0, 0, 0, 0],
            ..Registers::default()
        };
        let mut no_reads = |_: u64, _: &mut [u8]| -> Option<usize> { panic!("nothing is read") };
        let mut out = [0u8; 64];
        let len = encode(&values, false, &regs, &mut no_reads, &mut out);
        assert_eq!(entry_address(&values, &out[..len]), Some(0x7f00_1234_5678));
        assert_eq!(entry_values(&values, &out[..len]), None);
        for (rax, state) in [(0x5e00_0001, SUSPENDED), (0x5e00_0000, RETURNED)] {
            regs.rax = rax;
            let len = encode(&values, true, &regs, &mut no_reads, &mut out);
            assert_eq!(exit_state(&values, &out[..len]), Some(state));
        }
        assert_eq!(poll_end(SUSPENDED), PollEnd::Pending);
        // Returned through memory: read where rax points, at the offset.
        let exit = &parse("f@poll2(2)[0x8]/u32", SpecKind::Retval).unwrap()[0].values;
        let expected = ArgSlot::Poll {
            arg: 2,
            pending: 2,
            at: Some(8),
        };
        assert_eq!((exit[0].slot, exit[0].size), (expected, 4));
        regs.rax = 0x7ffd_0000_1000;
        let mut tag = |addr: u64, buf: &mut [u8]| {
            assert_eq!(addr, 0x7ffd_0000_1008);
            buf.copy_from_slice(&2u32.to_le_bytes());
            Some(4)
        };
        let len = encode(exit, true, &regs, &mut tag, &mut out);
        assert_eq!(exit_state(exit, &out[..len]), Some(SUSPENDED));
        // Given with -A, or in a format that is not an integer: refused.
        assert!(parse("f@poll1(1)/u8", SpecKind::Arguments).is_err());
        assert!(parse("f@poll1(1)/s", SpecKind::Retval).is_err());
        assert!(parse("f@poll7(1)/u8", SpecKind::Retval).is_err());
    }

    #[test]
    fn async_fn_names() {
        assert_eq!(async_fn_name("kv::serve::{closure#0}"), "kv::serve");
        assert_eq!(
            async_fn_name("a::b::{closure#0}::{closure#1}"),
            "a::b::{closure#0}"
        );
        assert_eq!(async_fn_name("kv::serve"), "kv::serve");
    }

    #[test]
    fn hand_written_polls_name_their_future_type() {
        let poll = "<kv::Timer<u8> as core::future::future::Future>::poll";
        assert_eq!(future_type(poll), "kv::Timer<u8>");
        assert_eq!(
            dropped_by(&drop_function_name(future_type(poll))),
            Some("kv::Timer<u8>")
        );
        assert_eq!(
            future_type("kv::serve::{closure#0}"),
            "kv::serve::{closure#0}"
        );
        assert_eq!(
            future_type("<kv::Timer as kv::Other>::poll"),
            "<kv::Timer as kv::Other>::poll"
        );
    }

    #[test]
    fn drop_functions_name_their_futures() {
        let name = drop_function_name("kv::serve::{closure#0}");
        assert_eq!(name, "core::ptr::drop_in_place::<kv::serve::{closure#0}>");
        assert_eq!(dropped_by(&name), Some("kv::serve::{closure#0}"));
        assert_eq!(dropped_by("core::ptr::drop_in_place::<>"), None);
        assert_eq!(dropped_by("kv::serve::{closure#0}"), None);
    }
}
