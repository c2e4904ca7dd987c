//! Unit tests of a block: the path table with many siblings and a full
//! trie, the histogram's groups.

use super::*;

/// One call of `site` at `depth` that took `duration_ns`, with no
/// children; `ticks` is its entry time, advanced.
fn leaf_call(block: &Block, site: usize, depth: u32, ticks: &mut u64, duration_ns: u64) {
    *ticks += 1;
    block.enter(site, depth, *ticks);
    block.exit(depth, *ticks, duration_ns);
}

/// Completed calls of node `node`.
fn node_calls(block: &Block, node: usize) -> u64 {
    block.nodes[node].calls.load(Ordering::Relaxed)
}

/// A caller of 3,000 distinct functions, three times over: each call
/// finds its path under the caller (made once, found after), counted
/// exactly. (Blocks are never unmapped; a test's is left mapped too.)
#[test]
fn every_child_of_a_node_of_many_is_found() {
    let block = Block::map().expect("a block");
    let (root, callee) = (0x10_0000, |i: usize| 0x20_0000 + 16 * i);
    let mut ticks = 0;
    for pass in 1..=3 {
        ticks += 1;
        let root_ticks = ticks;
        block.enter(root, 0, root_ticks);
        for i in 0..3000 {
            leaf_call(block, callee(i), 1, &mut ticks, 5);
        }
        block.exit(0, root_ticks, 1_000_000);
        assert_eq!(load(&block.header.nodes), 3001);
        assert_eq!(node_calls(block, 0), pass);
        for i in 0..3000 {
            let node = &block.nodes[i + 1];
            assert_eq!(load(&node.parent), 1, "the root's child");
            assert_eq!(load(&node.row), i as u32 + 1);
            assert_eq!(node_calls(block, i + 1), pass, "f{i}");
        }
    }
    assert_eq!(block.header.paths_not_kept.load(Ordering::Relaxed), 0);
    assert_eq!(block.header.functions_not_kept.load(Ordering::Relaxed), 0);
}

/// More call paths than the trie has nodes: the path table fills to
/// half, every lookup still ends, and the calls whose path has no node
/// are counted in `paths_not_kept` (and in their functions' rows),
/// each time they are made.
#[test]
fn a_full_trie_counts_the_paths_it_cannot_keep() {
    const ROOTS: usize = 5;
    const CALLEES: usize = 4000;
    let block = Block::map().expect("a block");
    let (root, callee) = (|j: usize| 0x10_0000 + 16 * j, |i: usize| 0x20_0000 + 16 * i);
    let made = ROOTS * (1 + CALLEES);
    let mut ticks = 0;
    for pass in 1..=2u64 {
        for j in 0..ROOTS {
            ticks += 1;
            let root_ticks = ticks;
            block.enter(root(j), 0, root_ticks);
            for i in 0..CALLEES {
                leaf_call(block, callee(i), 1, &mut ticks, 5);
            }
            block.exit(0, root_ticks, 1_000_000);
        }
        let h = &block.header;
        assert_eq!(load(&h.nodes) as usize, PATHS);
        let kept: u64 = (0..PATHS).map(|n| node_calls(block, n)).sum();
        assert_eq!(kept, pass * PATHS as u64);
        let not_kept = h.paths_not_kept.load(Ordering::Relaxed);
        assert_eq!(not_kept, pass * (made - PATHS) as u64);
        // Every call is in its function's row all the same.
        assert_eq!(load(&h.rows) as usize, ROOTS + CALLEES);
        let sums: u64 = block.rows[..ROOTS + CALLEES]
            .iter()
            .map(|r| r.sum.load(Ordering::Relaxed))
            .sum();
        assert_eq!(
            sums,
            pass * (ROOTS as u64 * 1_000_000 + (ROOTS * CALLEES) as u64 * 5)
        );
        assert_eq!(h.functions_not_kept.load(Ordering::Relaxed), 0);
    }
}

/// A function's chunks cover the whole histogram: the last bucket is
/// in the last group.
#[test]
fn groups_cover_every_bucket() {
    assert_eq!(Histogram::bucket_of(u64::MAX) / CHUNK_BUCKETS, GROUPS - 1);
    assert_eq!(Histogram::bucket_of(0), 0);
}
