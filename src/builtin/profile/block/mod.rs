//! One thread's profile: a fixed-size block of counters that its thread
//! alone writes (on the traced path: loads and stores, no lock, no
//! allocation, no system call) and that readers merge while it runs.
//!
//! # Layout and budget
//!
//! A block is one anonymous mapping (`MAP_NORESERVE`: pages count only once
//! touched) holding, after a one-page header:
//!
//! | part | entries | bytes each | what |
//! |------|---------|------------|------|
//! | open calls | [`MAX_HOOKED_DEPTH`] | 32 | the thread's calls entered and not returned |
//! | site table | [`TABLE_SLOTS`] | 16 | call site → function row (open addressing) |
//! | path table | [`PATH_SLOTS`] | 16 | (call site, parent node) → function row and node (open addressing) |
//! | function rows | [`FUNCTIONS`] | 192 | count, total, self, sum, min, max, histogram chunk numbers |
//! | call paths | [`PATHS`] | 32 | the call trie's nodes |
//! | histogram chunks | [`CHUNKS`] | 1024 | 128 counters: one power of two of a function's [`Histogram`] |
//!
//! about 5.9 MiB of address space per thread, of which only the pages
//! touched are memory. What does not fit is counted ([`NotKept`]): a call
//! whose function has no row (rows full, or no chunk for its duration's
//! power of two) is counted in `functions` and nowhere else; a call whose
//! path has no node (the trie is full, or its parent call had none) still
//! counts in its function's row and in `paths`.
//!
//! # Finding a call's node
//!
//! A call's node is the child of its parent call's node for the call's
//! function. Children are found through one hash table per block, keyed
//! by (call site, parent node), open addressing with linear probes, not by
//! walking a list of each node's children: a dispatcher or interpreter
//! loop calls hundreds of distinct functions from one caller, and the walk
//! cost a step per child it passed (4.8 µs a call with 1,000
//! callees, against 25-45 ns for the graph tracer). With the table a
//! lookup costs the same whatever the number of siblings: one multiply
//! and, the table at most half full, 1.5 probes on average for a path
//! seen before.
//!
//! Keyed by the site rather than by the function's row, a slot gives the
//! row with the node: a call seen before on its path costs one probe of
//! this table and no probe of the site table (which only a new path
//! needs). With many callees each probe is a cache miss, and the traced
//! path's cost is mostly its misses; for the same reason a row is padded
//! to three whole cache lines (its counters the exit writes in its
//! first).
//!
//! One table for the block rather than a small one per node: a node's
//! children number anything from none to thousands, which a per-node table
//! would have to size (or grow: an allocation) for each. Its room is twice
//! the trie's nodes ([`PATH_SLOTS`] = 2 × [`PATHS`]), mapped with the
//! block; in use are the fewest slots, a power of two, that keep it at
//! most half full (the header's `path_mask`): a new node that would fill
//! it past half first doubles the slots in use and enters every node
//! again (in place: only the owner reads the table; at most 15 times per
//! block, the last re-entering 8,192 nodes, bounded work on the traced
//! path, without lock, allocation or system call). Spread over the whole room, a
//! thousand paths would take a cache line and a page each (128 pages, for
//! 8 in use at 2,048 slots), and with many callees the traced path's cost
//! is mostly its cache and TLB misses. A slot is filled only when a node
//! is made: the table is never more than half full, so a probe always
//! ends at its key or at an empty slot, and it cannot run out of room
//! before the trie does. The trie's running out of room stays the one
//! case: the path is not kept, counted in `paths` ([`NotKept`]), as before.
//! A slot's key is `site | (parent + 1) << 48` (0: empty; a site at or
//! above 2^48, which no 4-level page table maps, has no key: its calls'
//! paths are not kept), its value `row | node << 32`, the layout of
//! [`Open`]'s first word.
//!
//! # The pending sample
//!
//! The fast exit (`asm/x86_64/profile.S`) counts a call everywhere but in
//! its histogram bucket, and leaves the call in the header's `pending`
//! word instead; the next exit of the thread (fast or generic) counts it
//! in its bucket first. Why: the bucket of a duration is a chain of
//! dependent steps (the duration, its top bit, the chunk number, the
//! counter) that starts at the exit's TSC read, and on this host `rdtsc`
//! does not complete before the instructions ahead of it have: the whole
//! chain would be waited for at the next timestamp. Deferred, it starts
//! from a load and overlaps the next exit's own TSC read.
//!
//! A reader adds the pending call to its bucket (see
//! [`Block::pending_sample`]): a quiescent snapshot is exact. The owner
//! replaces the pending word before it counts the replaced call in its
//! bucket, and a reader loads the buckets before the pending word, so a
//! live reader counts a call in its bucket at most once (never ahead).
//! A call whose bucket needs a chunk no longer to be had when it is
//! counted from `pending` is counted in `functions_not_kept`; its
//! duration stays in its row's sum, total and self time and its path's.
//!
//! # Readers
//!
//! Every field is an atomic; the owner writes with plain stores (one
//! writer), readers load. Rows, nodes and chunks are published by Release
//! stores of the counts and chunk numbers that make them reachable. The
//! block's `epoch` is a sequence word: the owner sets it to 0 before it
//! zeroes the block after a reset, and to the new epoch after; a reader
//! checks it before and after it reads (see [`Block::read`]).
//!
//! [`NotKept`]: fntrace_format::analysis::NotKept

use std::sync::atomic::{fence, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::rt::shadow::MAX_HOOKED_DEPTH;
use fntrace_format::analysis::Histogram;

mod paths;

/// Function rows per thread.
pub(crate) const FUNCTIONS: usize = 4096;
/// Site-table slots per thread (twice the rows: probes stay short).
pub(crate) const TABLE_SLOTS: usize = 2 * FUNCTIONS;
/// Call-trie nodes per thread.
pub(crate) const PATHS: usize = 16384;
/// Path-table slots per thread (twice the nodes: never more than half
/// full, see "Finding a call's node").
pub(crate) const PATH_SLOTS: usize = 2 * PATHS;
/// Histogram chunks per thread.
pub(crate) const CHUNKS: usize = 4096;
/// Counters per chunk: the buckets of one power of two.
pub(crate) const CHUNK_BUCKETS: usize = 128;
/// Chunks a function's histogram can have: the [`Histogram`] layout's
/// 7424 buckets in groups of [`CHUNK_BUCKETS`].
pub(crate) const GROUPS: usize = 58;

/// "None" for row and node numbers.
pub(crate) const NONE: u32 = u32::MAX;

/// A block no thread owns: its counters are zero.
pub(crate) const FREE: u32 = 0;
/// A block a thread is making its own.
pub(crate) const CLAIMING: u32 = 1;
/// A block a live thread writes.
pub(crate) const OWNED: u32 = 2;
/// A block whose owner is gone without folding it (the child of `fork`):
/// the next reader folds and frees it.
pub(crate) const ORPHANED: u32 = 3;

/// One call entered and not returned yet (owner only).
#[repr(C)]
pub(crate) struct Open {
    /// Function row (or [`NONE`]).
    pub row: AtomicU32,
    /// Trie node (or [`NONE`]).
    pub node: AtomicU32,
    /// The call's depth among hooked calls ([`crate::tracer::Call::depth`]).
    pub depth: AtomicU32,
    /// Its entry time (ticks): with the depth, what identifies its exit.
    pub entry_ticks: AtomicU64,
    /// Summed durations of its completed direct children (ns).
    pub children_ns: AtomicU64,
}

/// A path-table slot (see "Finding a call's node"; owner only).
#[repr(C)]
pub(crate) struct PathSlot {
    /// `site | (parent node + 1) << 48` (0: empty).
    pub key: AtomicU64,
    /// `row | node << 32`.
    pub value: AtomicU64,
}

/// A site-table slot.
#[repr(C)]
pub(crate) struct TableSlot {
    /// The call site's return address (0: empty).
    pub site: AtomicUsize,
    /// Its function row.
    pub row: AtomicU32,
}

/// One function's counters on this thread.
#[repr(C)]
pub(crate) struct Row {
    /// The call site's return address.
    pub site: AtomicUsize,
    /// Durations of calls not nested in another call of the function (ns).
    pub total: AtomicU64,
    /// Durations minus direct children's (ns).
    pub self_ns: AtomicU64,
    /// All durations (ns).
    pub sum: AtomicU64,
    /// The smallest duration, bit-inverted (zeroed memory: none yet).
    pub min_inverted: AtomicU64,
    /// The largest duration.
    pub max: AtomicU64,
    /// Calls entered and not returned.
    pub active: AtomicU32,
    /// Per power of two, the chunk holding its buckets, plus one (0: none).
    pub chunks: [AtomicU16; GROUPS],
    /// To three cache lines: rows aligned to them (see "Finding a call's
    /// node").
    _pad: [u8; 24],
}

/// A call-trie node: a function called from a parent node (found through
/// the path table: see "Finding a call's node").
#[repr(C)]
pub(crate) struct Node {
    /// Function row.
    pub row: AtomicU32,
    /// Parent node plus one (0: an outermost call).
    pub parent: AtomicU32,
    /// Completed calls.
    pub calls: AtomicU64,
    /// Their durations (ns).
    pub total: AtomicU64,
    /// Their durations minus direct children's (ns).
    pub self_ns: AtomicU64,
}

/// The header: the first page of a block.
#[repr(C)]
pub(crate) struct Header {
    /// [`FREE`], [`CLAIMING`], [`OWNED`] or [`ORPHANED`].
    pub state: AtomicU32,
    /// The owner's kernel thread id.
    pub tid: AtomicU32,
    /// The block made before this one (the pool's list).
    pub next: AtomicUsize,
    /// The reset epoch the counters belong to; 0 while being zeroed.
    pub epoch: AtomicU64,
    /// The era (enables and resets) the open calls belong to.
    pub era: AtomicU64,
    /// Rows in use.
    pub rows: AtomicU32,
    /// Nodes in use.
    pub nodes: AtomicU32,
    /// Chunks in use.
    pub chunks: AtomicU32,
    /// Open calls.
    pub open: AtomicU32,
    /// Completed calls not in the trie.
    pub paths_not_kept: AtomicU64,
    /// Completed calls not counted at all.
    pub functions_not_kept: AtomicU64,
    /// The last call the fast exit completed whose histogram bucket is
    /// not counted yet: `(row + 1) << PENDING_ROW_SHIFT | duration_ns`
    /// (0: none). See "The pending sample" in the module docs.
    pub pending: AtomicU64,
    /// The path table's slots in use, minus one, times a slot's 16 bytes:
    /// the mask of a slot's offset (0: one slot). See "Finding a call's
    /// node".
    pub path_mask: AtomicU64,
}

/// One thread's profile (see the module docs).
#[repr(C)]
pub(crate) struct Block {
    pub header: Header,
    _pad: [u8; PAGE - std::mem::size_of::<Header>()],
    pub open: [Open; MAX_HOOKED_DEPTH],
    pub table: [TableSlot; TABLE_SLOTS],
    /// (site, parent node) → (row, node) (see "Finding a call's node").
    pub paths: [PathSlot; PATH_SLOTS],
    pub rows: [Row; FUNCTIONS],
    pub nodes: [Node; PATHS],
    pub chunks: [[AtomicU64; CHUNK_BUCKETS]; CHUNKS],
}

const PAGE: usize = 4096;

const _: () = {
    assert!(std::mem::size_of::<Header>() <= PAGE);
    assert!(std::mem::size_of::<Open>() == 32);
    assert!(std::mem::size_of::<Row>() == 192);
    assert!(std::mem::size_of::<Node>() == 32);
    assert!(TABLE_SLOTS.is_power_of_two());
    assert!(PATH_SLOTS.is_power_of_two());
    // A path-table key holds a node plus one in its top 16 bits.
    assert!(PATHS < 1 << 16);
    assert!(CHUNKS < u16::MAX as usize);
    // The budget the docs state: about 5.9 MiB of address space.
    assert!(BLOCK_BYTES < 6 << 20);
};

/// log2 of [`TABLE_SLOTS`], for the assembly (layout.h's
/// `PROFILE_TABLE_BITS`).
const TABLE_BITS: u32 = 13;
/// log2 of [`PATH_SLOTS`], for the assembly (layout.h's
/// `PROFILE_PATH_TABLE_BITS`).
const PATH_TABLE_BITS: u32 = 15;
/// log2 of a path-table slot's bytes (layout.h's `PATH_SLOT_SIZE_SHIFT`).
const PATH_SLOT_SHIFT: u32 = 4;
const _: () = assert!(std::mem::size_of::<PathSlot>() == 1 << PATH_SLOT_SHIFT);
/// log2 of a histogram chunk's bytes, for the assembly (layout.h's
/// `CHUNK_SHIFT`).
const CHUNK_SHIFT: u32 = 10;

// The profile tracer's fast paths in asm/x86_64/profile.S use these
// (layout.h: PB_*, BLOCK_*, OPEN_*, TABLE_*, ROW_*, NODE_*, CHUNK_*;
// tests/programs/layers.rs compares the two).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(Header, era) == 24);
    assert!(offset_of!(Header, open) == 44);
    assert!(offset_of!(Header, paths_not_kept) == 48);
    assert!(offset_of!(Header, pending) == 64);
    assert!(offset_of!(Header, path_mask) == 72);
    // The pending word holds a row plus one above the duration's bits.
    assert!(FUNCTIONS < 1 << (64 - PENDING_ROW_SHIFT));
    assert!(offset_of!(Block, open) == 4096);
    assert!(offset_of!(Block, table) == 36864);
    assert!(offset_of!(Block, paths) == 167936);
    assert!(offset_of!(Block, rows) == 692224);
    assert!(offset_of!(Block, nodes) == 1478656);
    assert!(offset_of!(Block, chunks) == 2002944);
    assert!(size_of::<Open>() == 1 << 5);
    assert!(offset_of!(Open, row) == 0);
    assert!(offset_of!(Open, node) == 4);
    assert!(offset_of!(Open, depth) == 8);
    assert!(offset_of!(Open, entry_ticks) == 16);
    assert!(offset_of!(Open, children_ns) == 24);
    assert!(size_of::<TableSlot>() == 1 << 4);
    assert!(offset_of!(TableSlot, site) == 0);
    assert!(offset_of!(TableSlot, row) == 8);
    assert!(TABLE_SLOTS == 1 << TABLE_BITS);
    assert!(PATH_SLOTS == 1 << PATH_TABLE_BITS);
    assert!(size_of::<PathSlot>() == 1 << 4);
    assert!(offset_of!(PathSlot, key) == 0);
    assert!(offset_of!(PathSlot, value) == 8);
    // The value is an open call's first word: Open's row at 0, node at 4
    // (above). Rows are on whole cache lines: 192 bytes each (above),
    // from an offset that is a multiple of 64 (692224).
    assert!(offset_of!(Row, total) == 8);
    assert!(offset_of!(Row, self_ns) == 16);
    assert!(offset_of!(Row, sum) == 24);
    assert!(offset_of!(Row, min_inverted) == 32);
    assert!(offset_of!(Row, max) == 40);
    assert!(offset_of!(Row, active) == 48);
    assert!(offset_of!(Row, chunks) == 52);
    assert!(size_of::<Node>() == 1 << 5);
    assert!(offset_of!(Node, row) == 0);
    assert!(offset_of!(Node, calls) == 8);
    assert!(offset_of!(Node, total) == 16);
    assert!(offset_of!(Node, self_ns) == 24);
    assert!(CHUNK_BUCKETS == 128);
    assert!(size_of::<[AtomicU64; CHUNK_BUCKETS]>() == 1 << CHUNK_SHIFT);
    assert!(NONE == 0xffff_ffff);
    // The hash multiplier of `hash` and `path_hash` is
    // PROFILE_HASH_MULTIPLIER.
    assert!(HASH_MULTIPLIER == 0x9E37_79B9_7F4A_7C15);
    // Histogram::bucket_of, which the fast exit computes: 128 buckets per
    // power of two (and 256 exact ones below 256).
    assert!(fntrace_format::analysis::SUB_BUCKETS == CHUNK_BUCKETS);
};

/// Bits of a pending sample's duration; the row plus one is above them.
/// A longer duration (over three days) is not left pending.
pub(crate) const PENDING_ROW_SHIFT: u32 = 48;

/// The site table's hash multiplier (PROFILE_HASH_MULTIPLIER in layout.h).
const HASH_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// Bytes of a block's mapping.
pub(crate) const BLOCK_BYTES: usize = std::mem::size_of::<Block>().next_multiple_of(PAGE);

/// Adds `value` to a counter only its owner writes: a load and a store.
#[inline(always)]
fn add(counter: &AtomicU64, value: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(value),
        Ordering::Relaxed,
    );
}

#[inline(always)]
fn load(word: &AtomicU32) -> u32 {
    word.load(Ordering::Relaxed)
}

#[inline(always)]
fn set(word: &AtomicU32, value: u32) {
    word.store(value, Ordering::Relaxed)
}

/// The site table's first slot for `site`.
#[inline(always)]
fn hash(site: usize) -> usize {
    ((site as u64).wrapping_mul(HASH_MULTIPLIER) >> (64 - TABLE_SLOTS.trailing_zeros())) as usize
}

impl Block {
    /// Maps a zeroed block; `None` if the kernel has no memory.
    pub(crate) fn map() -> Option<&'static Block> {
        // SAFETY: anonymous private mapping, result checked.
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BLOCK_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: the mapping is page-aligned, BLOCK_BYTES long, zero-filled
        // and never unmapped; every field is an atomic (or padding), for
        // which all-zero bytes are a valid value.
        Some(unsafe { &*(mem as *const Block) })
    }

    /// Gives the counters' pages back to the kernel (zero-filled when next
    /// touched) and clears the header's counts: the block is as new. Only
    /// with no writer and no reader (the caller holds the operation lock
    /// and the owner is gone).
    pub(crate) fn wipe(&self) {
        let start = (self as *const Block as usize) + PAGE;
        // SAFETY: whole pages of this block's mapping after the header;
        // nobody reads or writes them meanwhile (the caller's contract).
        let rc = unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                BLOCK_BYTES - PAGE,
                libc::MADV_DONTNEED,
            )
        };
        if rc != 0 {
            // Cannot happen for an anonymous private mapping; zero by hand.
            self.zero();
        }
        self.clear_header();
    }

    fn clear_header(&self) {
        let h = &self.header;
        for word in [&h.rows, &h.nodes, &h.chunks, &h.open] {
            set(word, 0);
        }
        for word in [
            &h.epoch,
            &h.era,
            &h.paths_not_kept,
            &h.functions_not_kept,
            &h.pending,
            &h.path_mask,
        ] {
            word.store(0, Ordering::Relaxed);
        }
    }

    /// Zeroes what the counters use (owner, after a reset; or a wipe that
    /// could not give pages back). Readers skip the block meanwhile: its
    /// epoch is 0.
    pub(crate) fn zero(&self) {
        for slot in &self.table {
            if slot.site.load(Ordering::Relaxed) != 0 {
                slot.site.store(0, Ordering::Relaxed);
                set(&slot.row, 0);
            }
        }
        let rows = (load(&self.header.rows) as usize).min(FUNCTIONS);
        for row in &self.rows[..rows] {
            row.site.store(0, Ordering::Relaxed);
            for word in [
                &row.total,
                &row.self_ns,
                &row.sum,
                &row.min_inverted,
                &row.max,
            ] {
                word.store(0, Ordering::Relaxed);
            }
            set(&row.active, 0);
            for chunk in &row.chunks {
                chunk.store(0, Ordering::Relaxed);
            }
        }
        for slot in &self.paths[..self.path_slots()] {
            slot.key.store(0, Ordering::Relaxed);
            slot.value.store(0, Ordering::Relaxed);
        }
        self.header.path_mask.store(0, Ordering::Relaxed);
        let nodes = (load(&self.header.nodes) as usize).min(PATHS);
        for node in &self.nodes[..nodes] {
            for word in [&node.row, &node.parent] {
                set(word, 0);
            }
            for word in [&node.calls, &node.total, &node.self_ns] {
                word.store(0, Ordering::Relaxed);
            }
        }
        let chunks = (load(&self.header.chunks) as usize).min(CHUNKS);
        for chunk in &self.chunks[..chunks] {
            for counter in chunk {
                counter.store(0, Ordering::Relaxed);
            }
        }
        let h = &self.header;
        for word in [&h.rows, &h.nodes, &h.chunks, &h.open] {
            set(word, 0);
        }
        h.paths_not_kept.store(0, Ordering::Relaxed);
        h.functions_not_kept.store(0, Ordering::Relaxed);
        h.pending.store(0, Ordering::Relaxed);
    }

    /// Brings the block to the current era (owner, on the traced path, the
    /// first time it runs after an enable or a reset): after a reset
    /// (`epoch` changed) the counters are zeroed; in any case the open
    /// calls are forgotten (their exits were not all seen while the tracer
    /// was off), and with them the rows' active counts.
    #[cold]
    pub(crate) fn catch_up(&self, era: u64, epoch: u64) {
        let h = &self.header;
        if h.epoch.load(Ordering::Relaxed) != epoch {
            h.epoch.store(0, Ordering::Relaxed);
            // Readers that see any zeroed counter see the epoch 0 after it.
            fence(Ordering::Release);
            self.zero();
            h.epoch.store(epoch, Ordering::Release);
        } else {
            self.count_pending();
            let rows = (load(&h.rows) as usize).min(FUNCTIONS);
            for row in &self.rows[..rows] {
                set(&row.active, 0);
            }
        }
        set(&h.open, 0);
        h.era.store(era, Ordering::Relaxed);
    }

    /// The row of the function whose call site returns to `site`, made if
    /// new; [`NONE`] when the rows are full.
    #[inline]
    fn row_of(&self, site: usize) -> u32 {
        let mask = TABLE_SLOTS - 1;
        let mut at = hash(site);
        loop {
            let slot = &self.table[at];
            let key = slot.site.load(Ordering::Relaxed);
            if key == site {
                return load(&slot.row);
            }
            if key == 0 {
                return self.new_row(slot, site);
            }
            at = (at + 1) & mask;
        }
    }

    #[cold]
    fn new_row(&self, slot: &TableSlot, site: usize) -> u32 {
        let rows = load(&self.header.rows);
        if rows as usize >= FUNCTIONS {
            return NONE;
        }
        self.rows[rows as usize].site.store(site, Ordering::Relaxed);
        set(&slot.row, rows);
        slot.site.store(site, Ordering::Relaxed);
        // Publishes the row's site to readers.
        self.header.rows.store(rows + 1, Ordering::Release);
        rows
    }

    /// A call of the function whose site returns to `site` entered at
    /// `depth` (owner only, block in the current era).
    #[inline]
    pub(crate) fn enter(&self, site: usize, depth: u32, entry_ticks: u64) {
        let h = &self.header;
        let mut open = load(&h.open) as usize;
        // Open calls at this depth or deeper never returned (their exits
        // were given up: an unwind, or not reported to this tracer).
        while open > 0 && load(&self.open[open - 1].depth) >= depth {
            open -= 1;
            self.forget(&self.open[open]);
        }
        if open >= MAX_HOOKED_DEPTH {
            return; // depths grow by one at least: not reached
        }
        // The parent call's node plus one (0: an outermost call).
        let parent = match open {
            0 => 0,
            _ => match load(&self.open[open - 1].node) {
                NONE => NONE,
                node => node + 1,
            },
        };
        let (row, node) = match parent {
            NONE => (self.row_of(site), NONE),
            parent => self.path_of(site, parent),
        };
        if row != NONE {
            let active = &self.rows[row as usize].active;
            set(active, load(active) + 1);
        }
        let frame = &self.open[open];
        set(&frame.row, row);
        set(&frame.node, node);
        set(&frame.depth, depth);
        frame.entry_ticks.store(entry_ticks, Ordering::Relaxed);
        frame.children_ns.store(0, Ordering::Relaxed);
        set(&h.open, open as u32 + 1);
    }

    /// An open call whose exit will not come.
    fn forget(&self, frame: &Open) {
        let row = load(&frame.row);
        if row != NONE {
            let active = &self.rows[row as usize].active;
            set(active, load(active).saturating_sub(1));
        }
    }

    /// The call entered at `depth` at `entry_ticks` returned after
    /// `duration_ns` (owner only, block in the current era). An exit whose
    /// entry is not the open call at its depth is ignored (its entry was
    /// before the tracer's era).
    #[inline]
    pub(crate) fn exit(&self, depth: u32, entry_ticks: u64, duration_ns: u64) {
        self.count_pending();
        let h = &self.header;
        let mut open = load(&h.open) as usize;
        while open > 0 && load(&self.open[open - 1].depth) > depth {
            open -= 1;
            self.forget(&self.open[open]);
        }
        let top = match open.checked_sub(1) {
            Some(top) => &self.open[top],
            None => return set(&h.open, 0),
        };
        if load(&top.depth) != depth || top.entry_ticks.load(Ordering::Relaxed) != entry_ticks {
            return set(&h.open, open as u32);
        }
        open -= 1;
        set(&h.open, open as u32);
        if let Some(parent) = open.checked_sub(1) {
            add(&self.open[parent].children_ns, duration_ns);
        }
        let self_ns = duration_ns.saturating_sub(top.children_ns.load(Ordering::Relaxed));
        let row = load(&top.row);
        if row == NONE {
            return add(&h.functions_not_kept, 1);
        }
        let r = &self.rows[row as usize];
        let active = load(&r.active).saturating_sub(1);
        set(&r.active, active);
        if !self.count_in_bucket(r, duration_ns) {
            return add(&h.functions_not_kept, 1);
        }
        add(&r.sum, duration_ns);
        add(&r.self_ns, self_ns);
        if active == 0 {
            add(&r.total, duration_ns);
        }
        if !duration_ns > r.min_inverted.load(Ordering::Relaxed) {
            r.min_inverted.store(!duration_ns, Ordering::Relaxed);
        }
        if duration_ns > r.max.load(Ordering::Relaxed) {
            r.max.store(duration_ns, Ordering::Relaxed);
        }
        match load(&top.node) {
            NONE => add(&h.paths_not_kept, 1),
            node => {
                let n = &self.nodes[node as usize];
                add(&n.calls, 1);
                add(&n.total, duration_ns);
                add(&n.self_ns, self_ns);
            }
        }
    }

    /// Counts a call of `row` that took `duration_ns` in its histogram
    /// bucket; false if its bucket has no chunk and none is left.
    #[inline]
    fn count_in_bucket(&self, row: &Row, duration_ns: u64) -> bool {
        let bucket = Histogram::bucket_of(duration_ns);
        let group = &row.chunks[bucket / CHUNK_BUCKETS];
        let mut chunk = group.load(Ordering::Relaxed);
        if chunk == 0 {
            chunk = self.new_chunk(group);
            if chunk == 0 {
                return false;
            }
        }
        add(&self.chunks[chunk as usize - 1][bucket % CHUNK_BUCKETS], 1);
        true
    }

    /// Counts the pending call (the fast exit's last: see the module
    /// docs) in its bucket, and clears it (owner only).
    #[inline]
    pub(crate) fn count_pending(&self) {
        let h = &self.header;
        let pending = h.pending.load(Ordering::Relaxed);
        if pending == 0 {
            return;
        }
        // Cleared before its bucket counts it: a reader that sees the
        // bucket's new count sees the pending word cleared (it loads the
        // buckets first), so it never counts the call twice.
        h.pending.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        let Some((row, duration_ns)) = Self::decode_pending(pending) else {
            return;
        };
        if row >= (load(&h.rows) as usize).min(FUNCTIONS)
            || !self.count_in_bucket(&self.rows[row], duration_ns)
        {
            add(&h.functions_not_kept, 1);
        }
    }

    /// The pending call, for a reader: its row and duration. Load it after
    /// the buckets (with an acquire fence between): then a call is in its
    /// bucket or here, never in both.
    pub(crate) fn pending_sample(&self) -> Option<(usize, u64)> {
        Self::decode_pending(self.header.pending.load(Ordering::Relaxed))
    }

    fn decode_pending(pending: u64) -> Option<(usize, u64)> {
        let row = (pending >> PENDING_ROW_SHIFT) as usize;
        let duration_ns = pending & ((1 << PENDING_ROW_SHIFT) - 1);
        row.checked_sub(1).map(|row| (row, duration_ns))
    }

    /// A new (zeroed) chunk for `group`, its number plus one; 0 if none.
    #[cold]
    fn new_chunk(&self, group: &AtomicU16) -> u16 {
        let chunks = load(&self.header.chunks);
        if chunks as usize >= CHUNKS {
            return 0;
        }
        set(&self.header.chunks, chunks + 1);
        let number = chunks as u16 + 1;
        // Release: a reader that finds the number finds the chunk zeroed
        // (it always was: chunks are zeroed before they are reused).
        group.store(number, Ordering::Release);
        number
    }
}

#[cfg(test)]
mod tests;
