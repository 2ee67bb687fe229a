//! Draft trees grown by the drafter itself (a causal drafter, or an MTP head: `grow`), for
//! `tree` mode with `expand` > 0.
//!
//! DDTree (arXiv:2604.12989) builds its tree from one distribution per depth. A drafter's depth-d
//! distribution comes from its greedy chain, so a subtree grown under any other token at an
//! earlier depth is drawn from a distribution conditioned on a different prefix. Here the
//! drafter instead expands, one forward pass per depth, the `width` most probable nodes of the
//! newest depth (all of them in one batch under a tree mask), so that every node's children come
//! from the drafter's distribution given that node's own path; then the `budget` most probable
//! nodes of everything proposed are kept. This is the dynamic draft tree of EAGLE-2 (Li et al.,
//! arXiv:2406.16858, "EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees"),
//! with the same scoring (path log-probability) DDTree's heap uses.
//!
//! Verification is unchanged (one target pass, walk, sample-and-match at temperature > 0), so the
//! output stays lossless whatever tree is drafted.

use super::causal::CausalDrafter;
use crate::error::Result;
use crate::gpu::row_top_k;
use crate::model::decoder::{Batch, BlockMask, PastMask};
use crate::model::draft_vocab::token_of;
use crate::tree::DraftTree;
use candle_core::Tensor;

/// A tree grown by the drafter, with the drafter cache row of every node it fed.
#[derive(Debug, Clone)]
pub struct GrownTree {
    /// The tree (root = the last committed token).
    pub tree: DraftTree,
    /// For each tree node, the drafter cache row holding it (the root's row is the last row of
    /// the committed sequence; leaves of the last depth were never fed).
    pub rows: Vec<Option<usize>>,
}

/// One proposed node.
#[derive(Debug, Clone)]
struct Proposal {
    token: u32,
    parent: usize,
    depth: usize,
    logw: f64,
    row: Option<usize>,
}

/// Expansion order: the higher path log-probability first; ties to the shallower node, then to
/// the earlier proposal (so a parent always precedes its children, even at a log-probability of 0).
fn better(a: &Proposal, ai: usize, b: &Proposal, bi: usize) -> std::cmp::Ordering {
    b.logw
        .total_cmp(&a.logw)
        .then(a.depth.cmp(&b.depth))
        .then(ai.cmp(&bi))
}

/// A node of the newest depth to feed through the drafter ([`grow`]'s `feed`).
#[derive(Debug, Clone)]
pub(super) struct Feed {
    /// The node's index among everything proposed (0: the root).
    pub node: usize,
    /// Its parent's index.
    pub parent: usize,
    /// Its token.
    pub token: u32,
    /// The drafter rows of its fed ancestors (the root's excluded), nearest first.
    pub ancestors: Vec<usize>,
}

/// Grow a draft tree after `root` (fed at drafter row `root_row`) whose children's logits are
/// `first` (`[1, vocab]`): at most `budget` nodes, `depth` deep, the `width` most probable nodes
/// of each depth fed through `feed` in one pass (which gives their logits, one row each in order,
/// and the drafter row of the first; it may feed at most `room` nodes in all). With
/// `min_chain_prob` > 0 growth stops once the most probable node of the newest depth has a path
/// probability below it. `vocab` maps logits columns to token ids where the drafter drafts among
/// fewer tokens than the target.
#[allow(clippy::too_many_arguments)]
pub(super) fn grow(
    (root, root_row): (u32, usize),
    first: Tensor,
    (budget, depth, width): (usize, usize, usize),
    min_chain_prob: f32,
    vocab: Option<&[u32]>,
    mut room: usize,
    mut feed: impl FnMut(&[Feed]) -> Result<(Tensor, usize)>,
) -> Result<GrownTree> {
    let mut logits = first;
    let width = width.max(1);
    let mut pool = vec![Proposal {
        token: root,
        parent: 0,
        depth: 0,
        logw: 0.0,
        row: Some(root_row),
    }];
    let mut frontier = vec![0usize];
    let min_logw = if min_chain_prob > 0.0 {
        (min_chain_prob as f64).ln()
    } else {
        f64::NEG_INFINITY
    };
    for d in 1..=depth {
        // Children of the frontier, from each frontier node's own distribution.
        let first_new = pool.len();
        for (&node, top) in frontier.iter().zip(row_top_k(&logits, budget)?) {
            let base = pool[node].logw;
            for (&token, &lp) in top.tokens.iter().zip(&top.log_probs) {
                pool.push(Proposal {
                    token: token_of(vocab, token),
                    parent: node,
                    depth: d,
                    logw: base + lp as f64,
                    row: None,
                });
            }
        }
        if d == depth || budget == 0 {
            break;
        }
        let mut newest: Vec<usize> = (first_new..pool.len()).collect();
        newest.sort_by(|&a, &b| better(&pool[a], a, &pool[b], b));
        newest.truncate(width);
        if newest.len() > room || newest.first().is_none_or(|&n| pool[n].logw < min_logw) {
            break;
        }
        room -= newest.len();
        // Each fed node sees the prefix, its own fed ancestors and itself.
        let nodes: Vec<Feed> = newest
            .iter()
            .map(|&n| {
                let mut ancestors = vec![];
                let mut cur = pool[n].parent;
                while cur != 0 {
                    ancestors.extend(pool[cur].row);
                    cur = pool[cur].parent;
                }
                Feed {
                    node: n,
                    parent: pool[n].parent,
                    token: pool[n].token,
                    ancestors,
                }
            })
            .collect();
        let (next, first_row) = feed(&nodes)?;
        logits = next;
        for (i, &n) in newest.iter().enumerate() {
            pool[n].row = Some(first_row + i);
        }
        frontier = newest;
    }

    // Keep the `budget` most probable proposals; parents come first in this order, so the
    // kept set is a tree. Number them by depth so that parents precede children.
    let mut order: Vec<usize> = (1..pool.len()).collect();
    order.sort_by(|&a, &b| better(&pool[a], a, &pool[b], b));
    order.truncate(budget);
    order.sort_by_key(|&n| (pool[n].depth, n));
    let mut index = vec![None; pool.len()];
    index[0] = Some(0);
    let mut tree = DraftTree::root(root);
    let mut rows = vec![pool[0].row];
    for n in order {
        let Some(parent) = index[pool[n].parent] else {
            continue;
        };
        index[n] = Some(tree.push_scored(pool[n].token, parent, pool[n].logw as f32));
        rows.push(pool[n].row);
    }
    Ok(GrownTree { tree, rows })
}

impl CausalDrafter {
    /// Grow a draft tree after `seq`: at most `budget` nodes, `depth` deep, expanding the `width`
    /// most probable nodes of each depth with one drafter pass per depth (`grow`).
    ///
    /// With `min_chain_prob` > 0, growth stops once the most probable node of the newest depth
    /// has a path probability below it (as [`CausalDrafter::draft`] stops its chain). The cache
    /// ends holding `seq` plus every fed node; [`CausalDrafter::keep_path`] cuts it back after
    /// verification.
    pub fn grow_tree(
        &mut self,
        seq: &[u32],
        budget: usize,
        depth: usize,
        width: usize,
        min_chain_prob: f32,
    ) -> Result<GrownTree> {
        let root = *seq.last().unwrap_or(&0);
        let first = self.sync(seq)?;
        let start = self.model.len();
        let room = self.model.context().saturating_sub(start);
        let model = &mut self.model;
        let mut d = 0;
        let shape = (budget, depth, width);
        grow(
            (root, start - 1),
            first,
            shape,
            min_chain_prob,
            None,
            room,
            |nodes| {
                d += 1;
                let visible: Vec<Vec<usize>> = nodes.iter().map(|n| n.ancestors.clone()).collect();
                let tokens: Vec<u32> = nodes.iter().map(|n| n.token).collect();
                let first_row = model.len();
                let batch = Batch::causal(&tokens, first_row)
                    .with_positions(vec![start - 1 + d; tokens.len()])
                    .with_mask(BlockMask::from_parents(&vec![None; tokens.len()])?)
                    .with_past_mask(PastMask { start, visible })
                    .all_logits();
                let logits = model.forward(&batch)?.logits.ok_or_else(|| {
                    crate::error::Error::InvalidArgument("no drafter logits".into())
                })?;
                Ok((logits, first_row))
            },
        )
    }

    /// After verifying a grown tree (`rows`: its [`GrownTree::rows`]), keep in the cache the
    /// committed prefix (`seq_before_len` rows) and the fed rows of the accepted path (`accepted` tree nodes, root first), in order,
    /// as if the accepted tokens had been fed one by one; never more than `emitted_len - 1` of
    /// them (a stop token or the token limit may cut the path, and the last emitted token is the
    /// next root, which drafting feeds).
    pub fn keep_path(
        &mut self,
        seq_before_len: usize,
        rows: &[Option<usize>],
        accepted: &[usize],
        emitted_len: usize,
    ) -> Result<()> {
        let kept: Vec<usize> = accepted
            .iter()
            .skip(1)
            .take(emitted_len.saturating_sub(1))
            .map_while(|&n| rows.get(n).copied().flatten())
            .map(|r| r - seq_before_len)
            .collect();
        if self.model.len() < seq_before_len {
            // Nothing was grown from this prefix: what the cache holds is still a valid prefix.
            return Ok(());
        }
        self.model.keep(seq_before_len, &kept)?;
        // Nothing emitted (a stop token first): not even the old root stays a row to feed from.
        let limit = (seq_before_len + emitted_len).saturating_sub(1);
        if self.model.len() > limit {
            self.model.truncate(limit);
        }
        Ok(())
    }
}
