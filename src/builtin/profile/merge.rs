//! Merging threads' profiles: [`Aggregate`] adds up blocks (read while
//! their threads run, or left by threads that exited) by function and by
//! call path, and names the result as a [`ProfileSnapshot`]. Off the
//! traced path (it allocates).

use std::collections::HashMap;
use std::sync::atomic::{fence, Ordering};

use super::block::{Block, CHUNKS, CHUNK_BUCKETS, FUNCTIONS, GROUPS, PATHS};
use crate::sites::function_of_site;
use crate::symbols;
use fntrace_format::analysis::{FunctionProfile, Histogram, NotKept, PathProfile, ProfileSnapshot};

/// One function's counters, all threads merged.
#[derive(Clone, Debug, Default)]
struct FunctionSum {
    function: usize,
    /// Per power of two, its [`CHUNK_BUCKETS`] counters (allocated when
    /// first non-zero).
    groups: Vec<Option<Box<[u64; CHUNK_BUCKETS]>>>,
    sum: u64,
    min: u64,
    max: u64,
    total: u64,
    self_ns: u64,
    running: u64,
}

/// One call path's counters, all threads merged.
#[derive(Clone, Copy, Debug, Default)]
struct PathSum {
    parent: Option<usize>,
    function: usize,
    calls: u64,
    total: u64,
    self_ns: u64,
}

/// Profiles of several threads added up.
#[derive(Clone, Debug, Default)]
pub(crate) struct Aggregate {
    functions: Vec<FunctionSum>,
    by_function: HashMap<usize, usize>,
    paths: Vec<PathSum>,
    by_path: HashMap<(Option<usize>, usize), usize>,
    /// Threads whose calls it holds.
    pub threads: u64,
    /// What did not fit.
    pub not_kept: NotKept,
}

/// One thread's block as read: what [`Aggregate::add`] takes.
struct Read {
    /// Per row: function address, sum, min, max, total, self, active, and
    /// the non-empty groups' counters.
    rows: Vec<RowRead>,
    /// Per node: parent node (None: outermost), row, calls, total, self.
    nodes: Vec<(Option<usize>, usize, u64, u64, u64)>,
    paths_not_kept: u64,
    functions_not_kept: u64,
}

struct RowRead {
    function: usize,
    sum: u64,
    min: u64,
    max: u64,
    total: u64,
    self_ns: u64,
    active: u64,
    groups: Vec<(usize, Box<[u64; CHUNK_BUCKETS]>)>,
}

/// Reads `block`'s counters of reset epoch `epoch` (None: they belong to
/// an earlier epoch, or were being zeroed). `running`: read the calls in
/// progress too (the tracer is on and the block in the current era).
fn read(block: &Block, epoch: u64, running: bool) -> Option<Read> {
    let h = &block.header;
    if h.epoch.load(Ordering::Acquire) != epoch {
        return None;
    }
    let rows = (h.rows.load(Ordering::Acquire) as usize).min(FUNCTIONS);
    let mut read = Read {
        rows: Vec::with_capacity(rows),
        nodes: Vec::new(),
        paths_not_kept: h.paths_not_kept.load(Ordering::Relaxed),
        functions_not_kept: h.functions_not_kept.load(Ordering::Relaxed),
    };
    for row in &block.rows[..rows] {
        let site = row.site.load(Ordering::Relaxed);
        let function = match function_of_site(site) {
            0 => site,
            f => f,
        };
        let mut groups = Vec::new();
        for (group, number) in row.chunks.iter().enumerate() {
            let number = number.load(Ordering::Acquire) as usize;
            if number == 0 || number > CHUNKS {
                continue;
            }
            let chunk = &block.chunks[number - 1];
            let counters: [u64; CHUNK_BUCKETS] =
                std::array::from_fn(|i| chunk[i].load(Ordering::Relaxed));
            groups.push((group, Box::new(counters)));
        }
        read.rows.push(RowRead {
            function,
            sum: row.sum.load(Ordering::Relaxed),
            min: !row.min_inverted.load(Ordering::Relaxed),
            max: row.max.load(Ordering::Relaxed),
            total: row.total.load(Ordering::Relaxed),
            self_ns: row.self_ns.load(Ordering::Relaxed),
            active: if running {
                u64::from(row.active.load(Ordering::Relaxed))
            } else {
                0
            },
            groups,
        });
    }
    // The call the fast exit left pending (block.rs: "The pending
    // sample"): loaded after every bucket, counted in its bucket here.
    fence(Ordering::Acquire);
    if let Some((row, duration)) = block.pending_sample() {
        if let Some(r) = read.rows.get_mut(row) {
            let bucket = Histogram::bucket_of(duration);
            let group = bucket / CHUNK_BUCKETS;
            let at = match r.groups.iter().position(|(g, _)| *g == group) {
                Some(at) => at,
                None => {
                    r.groups.push((group, Box::new([0; CHUNK_BUCKETS])));
                    r.groups.len() - 1
                }
            };
            r.groups[at].1[bucket % CHUNK_BUCKETS] += 1;
        }
    }
    let nodes = (h.nodes.load(Ordering::Acquire) as usize).min(PATHS);
    read.nodes.reserve(nodes);
    for node in &block.nodes[..nodes] {
        let parent = node.parent.load(Ordering::Relaxed) as usize;
        read.nodes.push((
            parent.checked_sub(1),
            node.row.load(Ordering::Relaxed) as usize,
            node.calls.load(Ordering::Relaxed),
            node.total.load(Ordering::Relaxed),
            node.self_ns.load(Ordering::Relaxed),
        ));
    }
    // The sequence check: had the owner begun zeroing the block (epoch 0)
    // before any of the loads above saw a zeroed counter, this sees it.
    fence(Ordering::Acquire);
    (h.epoch.load(Ordering::Relaxed) == epoch).then_some(read)
}

impl Aggregate {
    /// Adds `block`'s counters of reset epoch `epoch`; false if it holds
    /// none (an earlier epoch, or being zeroed while read).
    pub(crate) fn add_block(&mut self, block: &Block, epoch: u64, running: bool) -> bool {
        match read(block, epoch, running) {
            Some(read) => {
                self.add(read);
                true
            }
            None => false,
        }
    }

    fn add(&mut self, read: Read) {
        self.threads += 1;
        self.not_kept.paths += read.paths_not_kept;
        self.not_kept.functions += read.functions_not_kept;
        let mut row_index = Vec::with_capacity(read.rows.len());
        for row in read.rows {
            let index = *self.by_function.entry(row.function).or_insert_with(|| {
                self.functions.push(FunctionSum {
                    function: row.function,
                    groups: vec![None; GROUPS],
                    min: u64::MAX,
                    ..FunctionSum::default()
                });
                self.functions.len() - 1
            });
            row_index.push(index);
            let sum = &mut self.functions[index];
            sum.sum = sum.sum.wrapping_add(row.sum);
            sum.total = sum.total.wrapping_add(row.total);
            sum.self_ns = sum.self_ns.wrapping_add(row.self_ns);
            sum.running += row.active;
            let mut any = false;
            for (group, counters) in row.groups {
                let slot = sum.groups[group].get_or_insert_with(|| Box::new([0; CHUNK_BUCKETS]));
                for (into, from) in slot.iter_mut().zip(counters.iter()) {
                    *into += from;
                    any |= *from != 0;
                }
            }
            if any {
                sum.min = sum.min.min(row.min);
                sum.max = sum.max.max(row.max);
            }
        }
        let mut node_index: Vec<Option<usize>> = Vec::with_capacity(read.nodes.len());
        for (parent, row, calls, total, self_ns) in read.nodes {
            // Parents come first; a node whose parent or row is unknown
            // (never, for a block read whole) is left out.
            let parent = match parent {
                None => None,
                Some(p) => match node_index.get(p).copied().flatten() {
                    Some(merged) => Some(merged),
                    None => {
                        node_index.push(None);
                        continue;
                    }
                },
            };
            let Some(&function) = row_index.get(row) else {
                node_index.push(None);
                continue;
            };
            let index = *self.by_path.entry((parent, function)).or_insert_with(|| {
                self.paths.push(PathSum {
                    parent,
                    function,
                    ..PathSum::default()
                });
                self.paths.len() - 1
            });
            let path = &mut self.paths[index];
            path.calls += calls;
            path.total = path.total.wrapping_add(total);
            path.self_ns = path.self_ns.wrapping_add(self_ns);
            node_index.push(Some(index));
        }
    }

    /// Adds calls that had no block to go to (counted, not kept).
    pub(crate) fn add_unkept(&mut self, calls: u64) {
        self.not_kept.functions += calls;
    }

    /// The snapshot, functions named from the symbol tables; taken at
    /// `taken_ns`.
    pub(crate) fn snapshot(&self, taken_ns: u64) -> ProfileSnapshot {
        let index = symbols::current();
        let functions = self
            .functions
            .iter()
            .map(|f| {
                let buckets = f.groups.iter().enumerate().flat_map(|(group, counters)| {
                    counters.iter().flat_map(move |counters| {
                        counters
                            .iter()
                            .enumerate()
                            .map(move |(i, &count)| (group * CHUNK_BUCKETS + i, count))
                    })
                });
                let durations = Histogram::from_buckets(buckets, f.sum, f.min, f.max);
                let name = index.function_at(f.function).map_or_else(
                    || format!("{:#x}", f.function),
                    |s| symbols::demangle(&s.name),
                );
                FunctionProfile {
                    function: f.function,
                    name,
                    durations,
                    total_ns: f.total,
                    self_ns: f.self_ns,
                    running: f.running,
                }
            })
            .collect();
        let paths = self
            .paths
            .iter()
            .map(|p| PathProfile {
                parent: p.parent,
                function: p.function,
                calls: p.calls,
                total_ns: p.total,
                self_ns: p.self_ns,
            })
            .collect();
        ProfileSnapshot {
            taken_ns,
            threads: self.threads,
            functions,
            paths,
            not_kept: self.not_kept,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::profile::block::PENDING_ROW_SHIFT;

    /// Calls of the block's first row counted in its buckets, as a
    /// reader sees them.
    fn counted(block: &Block) -> u64 {
        let read = read(block, 1, false).expect("the block's epoch");
        read.rows[0]
            .groups
            .iter()
            .map(|(_, counters)| counters.iter().sum::<u64>())
            .sum()
    }

    /// A call the fast exit left pending (block.rs: "The pending sample")
    /// is in a snapshot once: while pending (the reader adds it to its
    /// bucket) and after the owner counted it in its bucket (the pending
    /// word cleared), in the bucket of its duration.
    #[test]
    fn a_pending_call_is_counted_once() {
        let block = Block::map().expect("a block");
        block.header.epoch.store(1, Ordering::Relaxed);
        // One call through the Rust path: the row, its node and a bucket.
        block.enter(0x1234, 0, 100);
        block.exit(0, 100, 50);
        assert_eq!(counted(block), 1);
        // A second one as the fast exit leaves it: 700 ns, row 0, pending.
        block
            .header
            .pending
            .store(1 << PENDING_ROW_SHIFT | 700, Ordering::Relaxed);
        assert_eq!(counted(block), 2);
        block.count_pending();
        assert_eq!(block.header.pending.load(Ordering::Relaxed), 0);
        assert_eq!(counted(block), 2);
        let bucket = Histogram::bucket_of(700);
        let read = read(block, 1, false).expect("the block's epoch");
        let (_, counters) = read.rows[0]
            .groups
            .iter()
            .find(|(group, _)| *group == bucket / CHUNK_BUCKETS)
            .expect("the pending call's chunk");
        assert_eq!(counters[bucket % CHUNK_BUCKETS], 1);
        // The next exit counts the pending call before its own.
        block
            .header
            .pending
            .store(1 << PENDING_ROW_SHIFT | 700, Ordering::Relaxed);
        block.enter(0x1234, 0, 200);
        block.exit(0, 200, 50);
        assert_eq!(block.header.pending.load(Ordering::Relaxed), 0);
        assert_eq!(counted(block), 4);
    }
}
