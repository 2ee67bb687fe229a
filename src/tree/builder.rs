//! The DDTree builder: a best-first heap over prefixes, scored by the sum of per-depth
//! log-probabilities, popping exactly the `budget` most probable prefixes.

use super::DraftTree;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// The K most probable tokens of one depth's distribution, most probable first.
#[derive(Debug, Clone, PartialEq)]
pub struct DepthTopK {
    /// Token ids, most probable first.
    pub tokens: Vec<u32>,
    /// Their log-probabilities (float32, `logit - logsumexp(logits)`).
    pub log_probs: Vec<f32>,
}

/// Top-`k` log-probabilities of a logits row as the reference computes them, `logit - log_z` in
/// float32, with `log_z = logsumexp(logits)` correctly rounded to float32 (accumulated in f64: a
/// plain f32 running sum is off by an ulp often enough to reorder near-tied prefixes in large
/// trees). Ties in logits go to the lower token id.
pub fn top_k_log_probs(logits: &[f32], k: usize) -> DepthTopK {
    let k = k.min(logits.len());
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    let log_z = (max + sum.ln()) as f32;
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let cmp = |a: &u32, b: &u32| {
        logits[*b as usize]
            .total_cmp(&logits[*a as usize])
            .then(a.cmp(b))
    };
    if k > 0 && k < idx.len() {
        idx.select_nth_unstable_by(k - 1, cmp);
        idx.truncate(k);
    }
    idx.sort_unstable_by(cmp);
    idx.truncate(k);
    DepthTopK {
        log_probs: idx.iter().map(|&i| logits[i as usize] - log_z).collect(),
        tokens: idx,
    }
}

/// A heap entry: a candidate prefix, identified by the ranks chosen at each depth.
struct Candidate {
    logw: f64,
    ranks: Vec<u16>,
    parent: usize,
    depth: usize,
    rank: usize,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    /// Max-heap order: higher log-weight first; among equal weights the lexicographically
    /// smaller rank tuple first (the reference's heap of `(-logw, ranks, ...)` tuples).
    fn cmp(&self, other: &Self) -> Ordering {
        self.logw
            .total_cmp(&other.logw)
            .then_with(|| other.ranks.cmp(&self.ranks))
    }
}

/// Build the DDTree of `budget` nodes under `root` from per-depth top-K lists (depth 1 first).
///
/// Each pop appends a node and pushes at most two candidates: its next sibling (same parent, next
/// rank at the same depth) and its first child (rank 0 at the next depth). Weights are summed in
/// f64 from the f32 log-probabilities, as the reference does with Python floats.
pub fn build_ddtree(depths: &[DepthTopK], budget: usize, root: u32) -> DraftTree {
    let mut tree = DraftTree::root(root);
    let Some(first) = depths.first() else {
        return tree;
    };
    if budget == 0 || first.tokens.is_empty() {
        return tree;
    }
    let mut heap = BinaryHeap::new();
    heap.push(Candidate {
        logw: first.log_probs[0] as f64,
        ranks: vec![0],
        parent: 0,
        depth: 1,
        rank: 0,
    });
    while let Some(c) = heap.pop() {
        if tree.num_drafted() >= budget {
            break;
        }
        let level = &depths[c.depth - 1];
        let index = tree.push_scored(level.tokens[c.rank], c.parent, c.logw as f32);
        if c.rank + 1 < level.tokens.len() {
            let mut ranks = c.ranks.clone();
            if let Some(last) = ranks.last_mut() {
                *last = (c.rank + 1) as u16;
            }
            heap.push(Candidate {
                logw: c.logw - level.log_probs[c.rank] as f64 + level.log_probs[c.rank + 1] as f64,
                ranks,
                parent: c.parent,
                depth: c.depth,
                rank: c.rank + 1,
            });
        }
        if c.depth < depths.len() && !depths[c.depth].tokens.is_empty() {
            let mut ranks = c.ranks;
            ranks.push(0);
            heap.push(Candidate {
                logw: c.logw + depths[c.depth].log_probs[0] as f64,
                ranks,
                parent: index,
                depth: c.depth + 1,
                rank: 0,
            });
        }
    }
    tree
}
