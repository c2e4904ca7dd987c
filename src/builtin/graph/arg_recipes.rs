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
    /// The argument, 0-based (its saved register in the entry's frame).
    from: u32,
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
    /// Arguments recorded (`op[..ops]`).
    ops: u64,
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

/// All ones over `size` bytes.
fn size_mask(size: u8) -> u64 {
    match size {
        8 => u64::MAX,
        n => (1u64 << (8 * u32::from(n))) - 1,
    }
}

/// An integer value the fast path writes as `argspec::encode` does.
fn integer(value: &ArgSpec) -> bool {
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

/// The recipe of an [`eligible`] function's site ending at `key`.
fn recipe(key: usize, values: &[ArgSpec]) -> Recipe {
    let mut recipe = Recipe {
        key: key as u64,
        ..Recipe::default()
    };
    let mut at = 0u32;
    for value in values {
        match value.slot {
            ArgSlot::Int(n) => {
                recipe.op[recipe.ops as usize] = RecipeOp {
                    mask: size_mask(value.size),
                    from: u32::from(n - 1),
                    to: at,
                };
                recipe.ops += 1;
                at += u32::from(value.size).next_multiple_of(4);
            }
            _ => {
                let shift = 64 - 8 * u64::from(value.size);
                recipe.marks = MARK_ARGS_BIT | MARK_FAST_RETVAL_BIT | shift << MARK_RETVAL_SHIFT_AT;
            }
        }
    }
    recipe.events = 1 + u64::from(at.div_ceil(8));
    recipe
}

impl RecipeTable {
    /// The table of `sites`: (site end, its function's values), each
    /// [`eligible`].
    pub(crate) fn new(sites: &[(usize, &[ArgSpec])]) -> RecipeTable {
        let buckets = (2 * sites.len()).next_power_of_two().max(8);
        let mask = buckets as u64 - 1;
        let mut entries = vec![Recipe::default(); buckets + sites.len() + 1].into_boxed_slice();
        for &(key, values) in sites {
            let mut at = bucket(key as u64, mask);
            while entries[at].key != 0 && entries[at].key != key as u64 {
                at += 1;
            }
            entries[at] = recipe(key, values);
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
                let recipe = recipe(0x1000, &values);
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
            let recipe = recipe(0x1000, &values);
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
        let sites: Vec<(usize, &[ArgSpec])> = keys.iter().map(|&k| (k, &values[..])).collect();
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
