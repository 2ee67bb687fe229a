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
    let idx = top_k_indices(logits, k);
    let log_z = crate::sampling::log_sum_exp(logits) as f32;
    DepthTopK {
        log_probs: idx.iter().map(|&i| logits[i as usize] - log_z).collect(),
        tokens: idx,
    }
}

/// [`top_k_log_probs`] of several rows (a tree's depths, or the nodes of one grown depth). The
/// rows run in parallel; each is still summed serially, so the result does not depend on the
/// thread count.
pub fn top_k_rows(rows: &[Vec<f32>], k: usize) -> Vec<DepthTopK> {
    use rayon::prelude::*;
    rows.par_iter().map(|row| top_k_log_probs(row, k)).collect()
}

/// Indices of the `k` largest logits, largest first, ties to the lower index (the order of
/// `total_cmp`, descending). One pass with a sorted buffer of `k`: a logit is compared with the
/// buffer's smallest and inserted only when larger, so the cost is one comparison per logit for
/// the small `k` a tree uses (a full selection over a 150k vocabulary costs ten times more).
pub fn top_k_indices(logits: &[f32], k: usize) -> Vec<u32> {
    let k = k.min(logits.len());
    if k == 0 {
        return vec![];
    }
    let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
    for (i, &x) in logits.iter().enumerate() {
        if best.len() == k && x.total_cmp(&best[k - 1].0) != Ordering::Greater {
            continue;
        }
        // After every kept logit at least as large: equal logits keep the lower index first.
        let pos = best.partition_point(|&(v, _)| v.total_cmp(&x) != Ordering::Less);
        best.insert(pos, (x, i as u32));
        best.truncate(k);
    }
    best.into_iter().map(|(_, i)| i).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass selection agrees with a full sort (descending `total_cmp`, ties to the lower
    /// index) on random rows full of ties, for every k.
    #[test]
    fn top_k_indices_equals_a_full_sort() {
        let mut s = 7u64;
        for len in [1usize, 2, 5, 17, 300] {
            let row: Vec<f32> = (0..len)
                .map(|_| {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                    ((s >> 40) % 23) as f32 * 0.5 - 4.0
                })
                .collect();
            let mut sorted: Vec<u32> = (0..len as u32).collect();
            sorted.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
            for k in 0..=len + 2 {
                let want = &sorted[..k.min(len)];
                assert_eq!(top_k_indices(&row, k), want, "len {len} k {k}");
            }
        }
    }
}
