//! The path table's lookups and growth: how a call finds its row and its
//! call-trie node in one probe (see "Finding a call's node" in the
//! module docs of [`super`]). Owner only: readers never read the table.

use std::sync::atomic::Ordering;

use super::{
    load, set, Block, PathSlot, HASH_MULTIPLIER, NONE, PATHS, PATH_SLOT_SHIFT, PATH_TABLE_BITS,
};

/// The path-table key of the call of `site` from `parent` (a node plus
/// one, 0: none); `None` for a site at or above 2^48.
#[inline(always)]
fn path_key(site: usize, parent: u32) -> Option<u64> {
    (site >> 48 == 0).then_some(site as u64 | u64::from(parent) << 48)
}

/// The path table's first slot for `key`.
#[inline(always)]
fn path_hash(key: u64) -> usize {
    (key.wrapping_mul(HASH_MULTIPLIER) >> (64 - PATH_TABLE_BITS)) as usize
}

impl Block {
    /// The path table's slots in use (a power of two).
    #[inline(always)]
    pub(super) fn path_slots(&self) -> usize {
        (self.header.path_mask.load(Ordering::Relaxed) >> PATH_SLOT_SHIFT) as usize + 1
    }

    /// The slot holding `key`, or the empty slot its probe ends at (the
    /// table is at most half full: it has one).
    #[inline]
    fn path_slot(&self, key: u64) -> &PathSlot {
        let mask = self.path_slots() - 1;
        let mut at = path_hash(key) & mask;
        loop {
            let slot = &self.paths[at];
            let found = slot.key.load(Ordering::Relaxed);
            if found == key || found == 0 {
                return slot;
            }
            at = (at + 1) & mask;
        }
    }

    /// The row of the function whose call site returns to `site` and the
    /// node of its call from `parent` (a node plus one, 0: none), each
    /// made if new; [`NONE`] for what has no room (no row: no node). A
    /// probe of the path table (see "Finding a call's node").
    #[inline]
    pub(super) fn path_of(&self, site: usize, parent: u32) -> (u32, u32) {
        let Some(key) = path_key(site, parent) else {
            return (self.row_of(site), NONE);
        };
        let slot = self.path_slot(key);
        if slot.key.load(Ordering::Relaxed) == key {
            let value = slot.value.load(Ordering::Relaxed);
            return (value as u32, (value >> 32) as u32);
        }
        let row = self.row_of(site);
        if row == NONE {
            return (NONE, NONE);
        }
        (row, self.new_node(key, parent, row))
    }

    /// A node for `row` called from `parent`, entered in the path table as
    /// `key` (not in it yet); [`NONE`] when the trie is full.
    #[cold]
    fn new_node(&self, key: u64, parent: u32, row: u32) -> u32 {
        let nodes = load(&self.header.nodes);
        if nodes as usize >= PATHS {
            return NONE;
        }
        // At most half full with this node too (PATH_SLOTS = 2 × PATHS:
        // the table never grows past its room).
        while 2 * (nodes as usize + 1) > self.path_slots() {
            self.grow_paths(nodes as usize);
        }
        let node = &self.nodes[nodes as usize];
        set(&node.row, row);
        set(&node.parent, parent);
        let slot = self.path_slot(key);
        slot.value
            .store(u64::from(row) | u64::from(nodes) << 32, Ordering::Relaxed);
        slot.key.store(key, Ordering::Relaxed);
        // Publishes the node's row and parent to readers.
        self.header.nodes.store(nodes + 1, Ordering::Release);
        nodes
    }

    /// Doubles the path table's slots in use and enters the first `nodes`
    /// nodes again (owner only: readers never read the table).
    #[cold]
    fn grow_paths(&self, nodes: usize) {
        let slots = 2 * self.path_slots();
        for slot in &self.paths[..slots] {
            slot.key.store(0, Ordering::Relaxed);
            slot.value.store(0, Ordering::Relaxed);
        }
        self.header
            .path_mask
            .store(((slots - 1) << PATH_SLOT_SHIFT) as u64, Ordering::Relaxed);
        for (number, node) in self.nodes[..nodes].iter().enumerate() {
            let row = load(&node.row);
            let site = self.rows[row as usize].site.load(Ordering::Relaxed);
            // Every node was made with a key (`path_of`).
            let Some(key) = path_key(site, load(&node.parent)) else {
                continue;
            };
            let slot = self.path_slot(key);
            slot.value
                .store(u64::from(row) | (number as u64) << 32, Ordering::Relaxed);
            slot.key.store(key, Ordering::Relaxed);
        }
    }
}
