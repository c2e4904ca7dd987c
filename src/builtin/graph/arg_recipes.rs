//! The graph tracer's fast path for functions that record integer
//! arguments and an integer return value (`-A 'f@arg1,arg2/d32' -R
//! 'f@retval'`): a recipe per call site, which the argument entries
//! (`fntrace_graph_args_*`, `asm/x86_64/graph.S` with `args = 1`) and the
//! fast exit (`asm/x86_64/return.S`) follow without calling into Rust.
//!
//! A function whose values are all `argN` (N = 1-6) and at most one
//! `retval`, each an integer (`d`, `i`, `u`, `x`, `c`, any size), is
//! [`eligible`]: its sites get `sites::flag::ARGS_FAST`, and the control
//! path sends them to the argument entries (fast path
//! `tracer::GRAPH_ARGS_FAST_PATH`) while the graph tracer's fast path is on.
//! So is an async function's poll as `fntrace record --async` gives it
//! (`arg1/x,pin1[OFF]/u8` at the entry, `pin1[OFF]/u8` at the exit;
//! [`eligible_poll`]): its entry loads the state byte through the
//! `Pin<&mut Self>` (`Recipe::pin`) and keeps the future in the frame
//! (`args::Kept`); its frame's marks ([`PollLink`]: the state's offset at
//! the exit, the key of its function's futures) send its exit to the
//! fast exit's poll case, which records the state and calls the runtime
//! future linker (`args::fntrace_poll_exited`).
//! Anything else (strings, floats, `argN[OFFSET]`, several return
//! values) keeps the generic path, which reads `args::ArgTable`.
//!
//! What the assembly does with a [`Recipe`], found by its site's end in a
//! hash table ([`Recipes`]):
//!
//! - at the entry, the usual frame and entry event, the event with
//!   `args::MORE` set and followed by `events - 1` data slots: the
//!   argument registers, each masked to its size and stored at its offset
//!   ([`RecipeOp`]), as `argspec::encode` lays them out (sizes padded to
//!   4 bytes, the whole to 8). Room for all of them is checked first
//!   (fast limit and capacity); without it the call goes to the generic
//!   path, which writes the event alone and counts it, or waits
//!   (lossless), as for any recorded call;
//! - the frame gets the recipe's `marks`: `ARGS_MARK` (a slow exit reads
//!   the return value, as for the generic path's frames),
//!   `MARK_FAST_RETVAL_BIT`, and the value's shift; the fast exit writes
//!   the exit event with `MORE` and one data slot, rax masked, or takes
//!   the slow path without room for both. Without a return value the
//!   marks are 0 and the exit is the graph tracer's usual one.
//!
//! Concurrency: a table is built whole, under the control lock, when the
//! specs are set (`control::args`), kept in its `ArgTable` (never freed:
//! see `args::MAX_TABLES`) and published with one release store of its
//! header's address. An entry loads that address once (x86 loads are
//! acquires) and reads only that table, old or new: both stay valid and
//! unchanged. A site missing from the table it reads (specs being
//! replaced) goes to the generic path, which reads the current specs.

use std::sync::atomic::{AtomicPtr, Ordering};

use fntrace_format::argspec::{ArgFormat, ArgSlot, ArgSpec};

use crate::rt::shadow::ARGS_MARK;
use crate::tracer::FastEntries;

extern "C" {
    fn fntrace_graph_args_mcount();
    fn fntrace_graph_args_fentry();
    fn fntrace_graph_args_mcount_stubbed();
    fn fntrace_graph_args_fentry_stubbed();
    /// The current table's header, null without one (graph.S).
    static fntrace_graph_arg_recipes: AtomicPtr<Recipes>;
}

/// Integer arguments in registers: `arg1`-`arg6`.
const MAX_OPS: usize = 6;

/// The bucket of a key: `(key * HASH_MULTIPLIER) >> HASH_SHIFT & mask`
/// (layout.h's `RECIPE_HASH_*`).
const HASH_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;
const HASH_SHIFT: u32 = 32;

/// The event word's bit for "data slots follow" (`args::MORE`), and a
/// data slot's depth field (layout.h's `EVENT_MORE_BIT`,
/// `EVENT_DATA_DEPTH`).
pub(super) const EVENT_MORE_BIT: u64 = 1 << 62;
const EVENT_DATA_DEPTH: u64 = 32767;

/// A frame's marks for the fast exit's return value: `ARGS_MARK`, this
/// bit, and the shift at `MARK_RETVAL_SHIFT_AT` (layout.h).
const MARK_ARGS_BIT: u64 = 1 << 63;
const MARK_FAST_RETVAL_BIT: u64 = 1 << 62;
const MARK_RETVAL_SHIFT_AT: u32 = 56;

/// A poll's frame's marks, for the fast exit that records its state and
/// links it (layout.h's `MARK_POLL_*`): `ARGS_MARK`, the table's index of
/// its function's futures plus one at this bit, the state's offset at
/// [`MARK_POLL_OFFSET_AT`], the bits of [`MARK_POLL_CLEAR`] clear.
pub(super) const MARK_POLL_KEY_AT: u32 = 16;
/// Where a poll frame's state offset is (24 bits).
const MARK_POLL_OFFSET_AT: u32 = 32;
/// Bits a poll frame's marks leave clear: `MARK_FAST_RETVAL_BIT` and the
/// tracers' own marks (bits 0-15). (The shift's bits are a hand-written
/// poll's: [`POLL_FROM_RAX`].)
const MARK_POLL_CLEAR: u64 = 0x4000_0000_0000_ffff;
const _: () = assert!(
    MARK_POLL_CLEAR == (MARK_FAST_RETVAL_BIT | 0xffff)
        && MARK_POLL_OFFSET_AT + 24 == MARK_RETVAL_SHIFT_AT
        && MARK_POLL_KEY_AT + 16 == MARK_POLL_OFFSET_AT
);

/// A poll frame's state offset that says there is no state: the exit
/// records rax masked by the shift at `MARK_RETVAL_SHIFT_AT` (a
/// hand-written poll's `Poll` discriminant, `pollN(V)`) and hands it to
/// the linker as it is (layout.h).
pub(super) const POLL_FROM_RAX: u32 = (1 << 24) - 1;

/// A `Recipe::pin` offset that says: keep the argument for the exit, load
/// nothing through it (a hand-written poll's future; layout.h).
const PIN_KEEP_ONLY: u32 = (1 << 24) - 1;
const _: () = assert!(PIN_KEEP_ONLY == POLL_FROM_RAX);

const _: () = {
    assert!(EVENT_DATA_DEPTH == super::DATA_DEPTH);
    assert!(MARK_ARGS_BIT == ARGS_MARK);
};

/// One argument's value: its register, masked, at its offset in the data.
#[derive(Clone, Copy, Default)]
#[repr(C)]
pub(crate) struct RecipeOp {
    /// All ones over the value's size.
    mask: u64,
    /// The argument, 0-based (its saved register in the entry's frame), or
    /// [`PINNED_STATE_FROM`]: the state read through `Recipe::pin`.
    from: i32,
    /// Its byte offset in the data.
    to: u32,
}

/// One site's values.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
pub(crate) struct Recipe {
    /// The site's end (its return address, as the site table's key); 0:
    /// an empty entry.
    key: u64,
    /// The frame's marks: 0 without a return value.
    marks: u64,
    /// The entry event and its data slots.
    events: u64,
    /// Values recorded at the entry (`op[..ops]`).
    ops: u32,
    /// A poll's future (`pinN[OFFSET]/u8` at the entry): N (1-6) | OFFSET
    /// << 8, the state the entry reads through argument N; 0: none.
    pin: u32,
    op: [RecipeOp; MAX_OPS],
}

/// A table's header: what the assembly loads first.
#[repr(C)]
pub(crate) struct Recipes {
    /// Buckets - 1 (a power of two less one).
    mask: u64,
    /// The entries: the buckets, then room for every key to probe past
    /// the last bucket, and an empty entry: no probe wraps.
    entries: *const Recipe,
}

// The assembly reads these (layout.h).
const _: () = {
    assert!(std::mem::size_of::<Recipe>() == 128);
    assert!(std::mem::offset_of!(Recipe, key) == 0);
    assert!(std::mem::offset_of!(Recipe, marks) == 8);
    assert!(std::mem::offset_of!(Recipe, events) == 16);
    assert!(std::mem::offset_of!(Recipe, ops) == 24);
    assert!(std::mem::offset_of!(Recipe, pin) == 28);
    assert!(std::mem::offset_of!(Recipe, op) == 32);
    assert!(std::mem::size_of::<RecipeOp>() == 16);
    assert!(std::mem::offset_of!(RecipeOp, mask) == 0);
    assert!(std::mem::offset_of!(RecipeOp, from) == 8);
    assert!(std::mem::offset_of!(RecipeOp, to) == 12);
    assert!(std::mem::offset_of!(Recipes, mask) == 0);
    assert!(std::mem::offset_of!(Recipes, entries) == 8);
};

/// A table of recipes, owned by its `ArgTable` (never dropped while
/// published: tables are never freed).
pub(crate) struct RecipeTable {
    header: Recipes,
    _entries: Box<[Recipe]>,
}

// SAFETY: the header's pointer is into `_entries`, owned alongside it and
// never written after construction: shared reads only.
unsafe impl Send for RecipeTable {}
// SAFETY: as above.
unsafe impl Sync for RecipeTable {}

/// A [`RecipeOp::from`] that is no argument: the state of a poll's
/// future, which the entry reads through `Recipe::pin` and keeps at
/// `8 * PINNED_STATE_FROM` below its saved registers (layout.h).
const PINNED_STATE_FROM: i32 = -9;

/// A `Recipe::pin` offset at most (it has 24 bits; the last is
/// [`PIN_KEEP_ONLY`]).
const MAX_PIN_OFFSET: u32 = PIN_KEEP_ONLY - 1;

/// All ones over `size` bytes.
fn size_mask(size: u8) -> u64 {
    match size {
        8 => u64::MAX,
        n => (1u64 << (8 * u32::from(n))) - 1,
    }
}

/// An integer value the fast path writes as `argspec::encode` does.
pub(super) fn integer(value: &ArgSpec) -> bool {
    matches!(
        value.format,
        ArgFormat::Auto
            | ArgFormat::Signed
            | ArgFormat::Unsigned
            | ArgFormat::Hex
            | ArgFormat::Char
    ) && matches!(value.size, 1 | 2 | 4 | 8)
}

/// Whether the fast path can record `values` (see the module's docs).
pub(crate) fn eligible(values: &[ArgSpec]) -> bool {
    if let Some(pin) = poll_pin(values) {
        return eligible_poll(values, pin);
    }
    if let Some((arg, _)) = poll_return(values) {
        return eligible_hand_poll(values, arg);
    }
    let retvals = values.iter().filter(|v| v.slot == ArgSlot::Retval).count();
    retvals <= 1
        && values.iter().all(|v| {
            integer(v)
                && match v.slot {
                    ArgSlot::Int(n) => (1..=MAX_OPS as u8).contains(&n),
                    ArgSlot::Retval => true,
                    _ => false,
                }
        })
}

/// A poll's future: the `pinN[OFFSET]` of one byte that `values` read at
/// the entry, (N, OFFSET), if there is one.
fn poll_pin(values: &[ArgSpec]) -> Option<(u8, u32)> {
    values.iter().find_map(|v| match v.slot {
        ArgSlot::Deref {
            arg,
            offset,
            at_exit: false,
            pinned: true,
        } if v.size == 1 && integer(v) => Some((arg, offset)),
        _ => None,
    })
}

/// Whether the argument entries record a poll's `values` (what `fntrace
/// record --async` gives a resume function): at the entry integer
/// arguments and one `pinN[OFFSET]/u8`, its state (the frame keeps
/// argument N, and whether the state was Unresumed); at the exit values
/// read through argument N, which the slow exit (Rust) reads and links.
fn eligible_poll(values: &[ArgSpec], (pin_arg, offset): (u8, u32)) -> bool {
    let mut pins = 0;
    let fits = (1..=MAX_OPS as u8).contains(&pin_arg) && offset <= MAX_PIN_OFFSET;
    fits && values.len() - values.iter().filter(|v| v.slot.at_exit()).count() <= MAX_OPS
        && values.iter().all(|v| match v.slot {
            ArgSlot::Int(n) => integer(v) && (1..=MAX_OPS as u8).contains(&n),
            ArgSlot::Deref {
                at_exit: false,
                pinned: true,
                ..
            } => {
                pins += 1;
                pins == 1
            }
            ArgSlot::Deref {
                arg, at_exit: true, ..
            } => arg == pin_arg,
            ArgSlot::Retval => true,
            _ => false,
        })
}

/// A hand-written poll's `pollN(V)` (its `Poll` discriminant at the
/// exit, in rax, in an integer format): (N, the value's size), if
/// `values` have one. (`pollN(V)[OFFSET]`, read through memory, is the
/// generic path's.)
fn poll_return(values: &[ArgSpec]) -> Option<(u8, u8)> {
    values.iter().find_map(|v| match v.slot {
        ArgSlot::Poll { arg, at: None, .. } if integer(v) => Some((arg, v.size)),
        _ => None,
    })
}

/// Whether the argument entries record a hand-written poll's `values`
/// (what `fntrace record --async` gives one): integer arguments at the
/// entry (the frame keeps argument N, the future), its `pollN(V)` alone
/// at the exit.
fn eligible_hand_poll(values: &[ArgSpec], arg: u8) -> bool {
    let at_exit = values.iter().filter(|v| v.slot.at_exit()).count();
    (1..=MAX_OPS as u8).contains(&arg)
        && at_exit == 1
        && values.len() - at_exit <= MAX_OPS
        && values.iter().all(|v| match v.slot {
            ArgSlot::Int(n) => integer(v) && (1..=MAX_OPS as u8).contains(&n),
            ArgSlot::Poll { at: None, .. } => true,
            _ => false,
        })
}

/// How a poll's exit links it: the table's index of its function's
/// futures (`futures::Functions::key_of`) and the offset of the state its
/// exit records (`pinN[OFFSET]/u8` alone, N the entry's), or
/// [`POLL_FROM_RAX`] (a hand-written poll's `pollN(V)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PollLink {
    /// The futures' index in the table.
    pub(crate) key: u16,
    /// The state's offset at the exit.
    pub(crate) offset: u32,
}

/// The recipe of an [`eligible`] function's site ending at `key`; `link`:
/// a poll's, which the fast exit records and links.
fn recipe(key: usize, values: &[ArgSpec], link: Option<PollLink>) -> Recipe {
    let mut recipe = Recipe {
        key: key as u64,
        ..Recipe::default()
    };
    let mut at = 0u32;
    let mut op = |recipe: &mut Recipe, from: i32, size: u8| {
        recipe.op[recipe.ops as usize] = RecipeOp {
            mask: size_mask(size),
            from,
            to: at,
        };
        recipe.ops += 1;
        at += u32::from(size).next_multiple_of(4);
    };
    let pin = poll_pin(values);
    for value in values {
        match value.slot {
            ArgSlot::Int(n) => op(&mut recipe, i32::from(n - 1), value.size),
            ArgSlot::Deref { at_exit: false, .. } => op(&mut recipe, PINNED_STATE_FROM, 1),
            ArgSlot::Retval if pin.is_none() => {
                let shift = 64 - 8 * u64::from(value.size);
                recipe.marks = MARK_ARGS_BIT | MARK_FAST_RETVAL_BIT | shift << MARK_RETVAL_SHIFT_AT;
            }
            _ => {}
        }
    }
    if let Some((arg, size)) = poll_return(values) {
        // Kept for the exit, nothing loaded; the exit records rax and,
        // with a link, links the poll (else the slow exit does).
        recipe.pin = u32::from(arg) | PIN_KEEP_ONLY << 8;
        recipe.marks = MARK_ARGS_BIT;
        if let Some(link) = link.filter(|l| l.key < u16::MAX && l.offset == POLL_FROM_RAX) {
            let shift = 64 - 8 * u64::from(size);
            recipe.marks |= u64::from(link.key + 1) << MARK_POLL_KEY_AT
                | u64::from(POLL_FROM_RAX) << MARK_POLL_OFFSET_AT
                | shift << MARK_RETVAL_SHIFT_AT;
        }
    }
    if let Some((arg, offset)) = pin {
        recipe.pin = u32::from(arg) | offset << 8;
        // The fast exit records the state and links the poll; without a
        // link the exit is the slow one, which reads what it records.
        recipe.marks = MARK_ARGS_BIT;
        if let Some(link) = link.filter(|l| l.key < u16::MAX && l.offset <= MAX_PIN_OFFSET) {
            recipe.marks |= u64::from(link.key + 1) << MARK_POLL_KEY_AT
                | u64::from(link.offset) << MARK_POLL_OFFSET_AT;
        }
    }
    recipe.events = 1 + u64::from(at.div_ceil(8));
    recipe
}

impl RecipeTable {
    /// The table of `sites`: (site end, its function's values, each
    /// [`eligible`], and a poll's link).
    pub(crate) fn new(sites: &[(usize, &[ArgSpec], Option<PollLink>)]) -> RecipeTable {
        let buckets = (2 * sites.len()).next_power_of_two().max(8);
        let mask = buckets as u64 - 1;
        let mut entries = vec![Recipe::default(); buckets + sites.len() + 1].into_boxed_slice();
        for &(key, values, link) in sites {
            let mut at = bucket(key as u64, mask);
            while entries[at].key != 0 && entries[at].key != key as u64 {
                at += 1;
            }
            entries[at] = recipe(key, values, link);
        }
        RecipeTable {
            header: Recipes {
                mask,
                entries: entries.as_ptr(),
            },
            _entries: entries,
        }
    }

    /// Makes this table the one the argument entries read.
    pub(crate) fn publish(&'static self) {
        let header = &self.header as *const Recipes as *mut Recipes;
        // SAFETY: a plain atomic defined in graph.S; the table is 'static.
        unsafe { fntrace_graph_arg_recipes.store(header, Ordering::Release) };
    }
}

/// A key's bucket (as the assembly computes it).
fn bucket(key: u64, mask: u64) -> usize {
    (key.wrapping_mul(HASH_MULTIPLIER) >> HASH_SHIFT & mask) as usize
}

/// The argument entries, for sites of each kind.
pub(crate) fn entries() -> FastEntries {
    FastEntries {
        mcount: fntrace_graph_args_mcount as *const () as usize,
        fentry: fntrace_graph_args_fentry as *const () as usize,
        mcount_stubbed: fntrace_graph_args_mcount_stubbed as *const () as usize,
        fentry_stubbed: fntrace_graph_args_fentry_stubbed as *const () as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fntrace_format::argspec::{self, Registers};

    fn spec(slot: ArgSlot, format: ArgFormat, size: u8) -> ArgSpec {
        ArgSpec { slot, format, size }
    }

    /// The data the assembly assembles from a recipe (its word stores,
    /// the last word cleared first), as bytes.
    fn assembled(recipe: &Recipe, regs: &[u64; 6]) -> Vec<u8> {
        let mut buf = [0xaau8; 56];
        let slots = recipe.events as usize - 1;
        if slots > 0 {
            buf[8 * (slots - 1)..8 * slots].fill(0);
        }
        for op in &recipe.op[..recipe.ops as usize] {
            let value = regs[op.from as usize] & op.mask;
            buf[op.to as usize..op.to as usize + 8].copy_from_slice(&value.to_le_bytes());
        }
        buf[..8 * slots].to_vec()
    }

    /// The same for a poll's recipe, whose future (argument N of `regs`)
    /// holds `state` at the recipe's offset.
    fn assembled_poll(recipe: &Recipe, regs: &[u64; 6], state: u8) -> Vec<u8> {
        let mut buf = [0xaau8; 56];
        let slots = recipe.events as usize - 1;
        buf[8 * (slots - 1)..8 * slots].fill(0);
        for op in &recipe.op[..recipe.ops as usize] {
            let value = match op.from {
                PINNED_STATE_FROM => u64::from(state),
                from => regs[from as usize],
            } & op.mask;
            buf[op.to as usize..op.to as usize + 8].copy_from_slice(&value.to_le_bytes());
        }
        buf[..8 * slots].to_vec()
    }

    #[test]
    fn recipes_write_what_encode_writes() {
        let regs = [
            0x1122_3344_5566_7788,
            0xfedc_ba98_7654_3210,
            0x8000_0000_0000_00ff,
            7,
            0xffff_ffff_ffff_fffe,
            0x0102_0304_0506_0708,
        ];
        let formats = [ArgFormat::Auto, ArgFormat::Hex, ArgFormat::Char];
        let sizes = [1u8, 2, 4, 8];
        let mut cases = 0;
        for n in 0..=6u8 {
            for pick in 0..16usize {
                let values: Vec<ArgSpec> = (1..=n)
                    .map(|i| {
                        let size = sizes[(pick + usize::from(i) * 3) % 4];
                        let arg = 1 + (usize::from(i) * 5 + pick) % 6;
                        spec(ArgSlot::Int(arg as u8), formats[pick % 3], size)
                    })
                    .collect();
                assert!(eligible(&values));
                let recipe = recipe(0x1000, &values, None);
                let registers = Registers {
                    int: regs,
                    ..Registers::default()
                };
                let mut out = [0u8; 128];
                let len = argspec::encode(&values, false, &registers, &mut |_, _| None, &mut out);
                assert_eq!(assembled(&recipe, &regs), out[..len].to_vec(), "{values:?}");
                assert_eq!(recipe.marks, 0);
                cases += 1;
            }
        }
        assert_eq!(cases, 7 * 16);
    }

    #[test]
    fn return_values_are_marked_with_their_shift() {
        let rax: u64 = 0x8877_6655_4433_2211;
        for size in [1u8, 2, 4, 8] {
            let values = [spec(ArgSlot::Retval, ArgFormat::Auto, size)];
            assert!(eligible(&values));
            let recipe = recipe(0x1000, &values, None);
            assert_eq!(recipe.events, 1);
            assert_eq!(recipe.marks & !(63 << MARK_RETVAL_SHIFT_AT), 3 << 62);
            let shift = (recipe.marks >> MARK_RETVAL_SHIFT_AT) & 63;
            let value = rax << shift >> shift;
            let registers = Registers {
                rax,
                ..Registers::default()
            };
            let mut out = [0u8; 16];
            let len = argspec::encode(&values, true, &registers, &mut |_, _| None, &mut out);
            assert_eq!(len, 8);
            assert_eq!(
                value.to_le_bytes().to_vec(),
                out[..8].to_vec(),
                "size {size}"
            );
        }
    }

    fn pinned(arg: u8, offset: u32, at_exit: bool) -> ArgSlot {
        ArgSlot::Deref {
            arg,
            offset,
            at_exit,
            pinned: true,
        }
    }

    #[test]
    fn a_poll_s_recipe_reads_its_state_and_keeps_its_future() {
        let regs = [0x5555_0000_1000, 7, 8, 9, 10, 11];
        let state = 3u8;
        for offset in [0u32, 24, 4095, MAX_PIN_OFFSET] {
            // What `fntrace record --async` gives a resume function.
            let values = [
                spec(ArgSlot::Int(1), ArgFormat::Hex, 8),
                spec(pinned(1, offset, false), ArgFormat::Unsigned, 1),
                spec(pinned(1, offset, true), ArgFormat::Unsigned, 1),
            ];
            assert!(eligible(&values));
            let recipe = recipe(0x1000, &values, None);
            assert_eq!(recipe.pin, 1 | offset << 8);
            assert_eq!(
                recipe.marks, MARK_ARGS_BIT,
                "no link: the exit is the slow one"
            );
            assert_eq!((recipe.ops, recipe.events), (2, 3));
            // Linked: the fast exit's marks hold the key and the offset,
            // and nothing the other fast exits or the tracers read.
            for key in [0u16, 7, u16::MAX - 1] {
                let link = PollLink { key, offset };
                let marks = super::recipe(0x1000, &values, Some(link)).marks;
                assert_eq!(marks & MARK_POLL_CLEAR, 0);
                assert_eq!(marks & MARK_ARGS_BIT, MARK_ARGS_BIT);
                assert_eq!((marks >> MARK_POLL_KEY_AT) as u16, key + 1);
                assert_eq!((marks >> MARK_POLL_OFFSET_AT) as u32 & 0xff_ffff, offset);
            }
            let unkeyed = PollLink {
                key: u16::MAX,
                offset,
            };
            assert_eq!(
                super::recipe(0x1000, &values, Some(unkeyed)).marks,
                MARK_ARGS_BIT
            );
            let registers = Registers {
                int: regs,
                ..Registers::default()
            };
            let mut read = |_: Option<u8>, addr: u64, buf: &mut [u8]| {
                assert_eq!(addr, regs[0] + u64::from(offset));
                buf[0] = state;
                Some(1)
            };
            let mut out = [0u8; 128];
            let len = argspec::encode_with(&values, false, &registers, &mut read, &mut out);
            assert_eq!(assembled_poll(&recipe, &regs, state), out[..len].to_vec());
        }
        // Read through argument 2, with an argument after it.
        let values = [
            spec(pinned(2, 16, false), ArgFormat::Unsigned, 1),
            spec(ArgSlot::Int(3), ArgFormat::Auto, 4),
            spec(pinned(2, 16, true), ArgFormat::Unsigned, 1),
        ];
        assert!(eligible(&values));
        assert_eq!(recipe(0x1000, &values, None).pin, 2 | 16 << 8);
    }

    #[test]
    fn polls_the_entries_cannot_record_take_the_generic_path() {
        let address = spec(ArgSlot::Int(1), ArgFormat::Hex, 8);
        let state = spec(pinned(1, 8, false), ArgFormat::Unsigned, 1);
        let at_exit = spec(pinned(1, 8, true), ArgFormat::Unsigned, 1);
        assert!(eligible(&[address, state, at_exit]));
        // The exit reads through another argument than the one kept.
        let other = spec(pinned(2, 8, true), ArgFormat::Unsigned, 1);
        assert!(!eligible(&[address, state, other]));
        // Two states, a state of two bytes, an offset past 24 bits.
        assert!(!eligible(&[address, state, state, at_exit]));
        let wide = spec(pinned(1, 8, false), ArgFormat::Unsigned, 2);
        assert!(!eligible(&[address, wide, at_exit]));
        let far = spec(pinned(1, MAX_PIN_OFFSET + 1, false), ArgFormat::Unsigned, 1);
        assert!(!eligible(&[address, far, at_exit]));
        // A string beside it.
        let string = spec(ArgSlot::Int(2), ArgFormat::Str, 8);
        assert!(!eligible(&[address, state, string, at_exit]));
    }

    /// A hand-written poll (`F@arg1/x`, `F@poll1(V)/uN`): the entry
    /// records the address and keeps argument 1, loading nothing; linked,
    /// the fast exit takes rax masked to N bits; without a link, or with
    /// other values at the exit, not so.
    #[test]
    fn hand_written_polls_keep_their_future_and_record_rax() {
        let address = spec(ArgSlot::Int(1), ArgFormat::Hex, 8);
        for size in [1u8, 2, 4, 8] {
            let poll = spec(
                ArgSlot::Poll {
                    arg: 1,
                    pending: 1,
                    at: None,
                },
                ArgFormat::Unsigned,
                size,
            );
            let values = [address, poll];
            assert!(eligible(&values));
            let unlinked = recipe(0x1000, &values, None);
            assert_eq!(unlinked.pin, 1 | PIN_KEEP_ONLY << 8);
            assert_eq!(
                (unlinked.marks, unlinked.ops, unlinked.events),
                (MARK_ARGS_BIT, 1, 2)
            );
            let link = PollLink {
                key: 9,
                offset: POLL_FROM_RAX,
            };
            let marks = recipe(0x1000, &values, Some(link)).marks;
            assert_eq!(marks & MARK_POLL_CLEAR, 0);
            assert_eq!((marks >> MARK_POLL_KEY_AT) as u16, 10);
            assert_eq!(
                (marks >> MARK_POLL_OFFSET_AT) as u32 & 0xff_ffff,
                POLL_FROM_RAX
            );
            let shift = (marks >> MARK_RETVAL_SHIFT_AT) & 63;
            assert_eq!(u64::MAX << shift >> shift, size_mask(size));
            // A state machine's link (an offset) is not this exit's.
            let state_link = PollLink { key: 9, offset: 8 };
            assert_eq!(
                recipe(0x1000, &values, Some(state_link)).marks,
                MARK_ARGS_BIT
            );
        }
        let poll = spec(
            ArgSlot::Poll {
                arg: 1,
                pending: 2,
                at: None,
            },
            ArgFormat::Unsigned,
            1,
        );
        let retval = spec(ArgSlot::Retval, ArgFormat::Auto, 8);
        assert!(!eligible(&[address, poll, retval]));
        assert!(!eligible(&[
            address,
            spec(
                ArgSlot::Poll {
                    arg: 7,
                    pending: 2,
                    at: None
                },
                ArgFormat::Unsigned,
                1
            )
        ]));
        assert!(!eligible(&[
            address,
            spec(
                ArgSlot::Poll {
                    arg: 1,
                    pending: 2,
                    at: None
                },
                ArgFormat::Str,
                8
            )
        ]));
    }

    #[test]
    fn only_integer_registers_are_eligible() {
        let int = spec(ArgSlot::Int(1), ArgFormat::Auto, 8);
        let retval = spec(ArgSlot::Retval, ArgFormat::Auto, 8);
        assert!(eligible(&[int, retval]));
        assert!(!eligible(&[int, retval, retval]));
        assert!(!eligible(&[spec(ArgSlot::Int(1), ArgFormat::Str, 8)]));
        assert!(!eligible(&[spec(ArgSlot::Fp(1), ArgFormat::Float, 8)]));
        assert!(!eligible(&[spec(ArgSlot::Retval, ArgFormat::Float, 8)]));
        assert!(!eligible(&[spec(ArgSlot::Int(7), ArgFormat::Auto, 8)]));
        let deref = ArgSlot::Deref {
            arg: 1,
            offset: 8,
            at_exit: false,
            pinned: false,
        };
        assert!(!eligible(&[spec(deref, ArgFormat::Auto, 4)]));
    }

    #[test]
    fn every_key_is_found_by_the_assembly_s_probe() {
        let values = [spec(ArgSlot::Int(1), ArgFormat::Auto, 8)];
        let keys: Vec<usize> = (0..300).map(|i| 0x40_1000 + i * 0x40).collect();
        let sites: Vec<_> = keys.iter().map(|&k| (k, &values[..], None)).collect();
        let table = RecipeTable::new(&sites);
        let entries = &table._entries;
        for &key in &keys {
            let mut at = bucket(key as u64, table.header.mask);
            while entries[at].key != key as u64 {
                assert_ne!(entries[at].key, 0, "{key:#x} not found");
                at += 1;
            }
        }
        let mut at = bucket(0x12345, table.header.mask);
        while entries[at].key != 0 {
            at += 1;
        }
    }
}
