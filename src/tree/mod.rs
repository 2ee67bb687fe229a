//! Draft trees: the DDTree builder (the B most probable prefixes under per-depth drafter
//! distributions), the tree's layout for one verification pass, and the walk that accepts the
//! longest path the target agrees with.
//!
//! Reference: Ringel and Romano, "Accelerating Speculative Decoding with Block Diffusion Draft
//! Trees" (DDTree), arXiv:2604.12989; reference code `build_ddtree_tree` / `follow_verified_tree`
//! in github.com/liranringel/ddtree. The golden cases in `tests/data/ddtree-reference.json` come from that code.

pub mod builder;
pub mod walk;

pub use builder::{build_ddtree, top_k_indices, top_k_log_probs, top_k_rows, DepthTopK};
pub use walk::walk;

use crate::arch::batch::BlockMask;

/// A draft tree. Node 0 is the root: the last committed token, which the target still has to
/// read; nodes 1.. are drafted tokens, numbered so that a parent always comes before its children.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftTree {
    /// Token of each node (`tokens[0]` is the root token).
    pub tokens: Vec<u32>,
    /// Parent of each node (`None` for the root).
    pub parents: Vec<Option<usize>>,
    /// Depth of each node (0 for the root).
    pub depths: Vec<usize>,
    /// The drafter's log-probability of each node's path from the root (0 for the root; 0 for
    /// nodes of trees built without scores, such as chains).
    pub log_weights: Vec<f32>,
}

impl DraftTree {
    /// A tree of the root alone.
    pub fn root(token: u32) -> Self {
        DraftTree {
            tokens: vec![token],
            parents: vec![None],
            depths: vec![0],
            log_weights: vec![0.0],
        }
    }

    /// A chain: root, then `draft[0]` as its child, `draft[1]` as the grandchild, ...
    pub fn chain(root: u32, draft: &[u32]) -> Self {
        let mut t = Self::root(root);
        for (i, &tok) in draft.iter().enumerate() {
            t.push(tok, i);
        }
        t
    }

    /// Append a node under `parent`; returns its index.
    pub fn push(&mut self, token: u32, parent: usize) -> usize {
        self.push_scored(token, parent, 0.0)
    }

    /// Append a node under `parent` with its path log-probability; returns its index.
    pub fn push_scored(&mut self, token: u32, parent: usize, log_weight: f32) -> usize {
        let depth = self.depths[parent] + 1;
        self.tokens.push(token);
        self.parents.push(Some(parent));
        self.depths.push(depth);
        self.log_weights.push(log_weight);
        self.tokens.len() - 1
    }

    /// Nodes including the root.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True for a tree of the root alone... never empty: it always has its root.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Drafted nodes (the root not counted).
    pub fn num_drafted(&self) -> usize {
        self.tokens.len().saturating_sub(1)
    }

    /// Deepest node's depth.
    pub fn max_depth(&self) -> usize {
        self.depths.iter().copied().max().unwrap_or(0)
    }

    /// The child of `node` carrying `token`, if any.
    pub fn child(&self, node: usize, token: u32) -> Option<usize> {
        (node + 1..self.tokens.len())
            .find(|&i| self.parents[i] == Some(node) && self.tokens[i] == token)
    }

    /// Child lists, by node.
    pub fn children(&self) -> Vec<Vec<usize>> {
        let mut c = vec![vec![]; self.len()];
        for (i, p) in self.parents.iter().enumerate() {
            if let Some(p) = p {
                c[*p].push(i);
            }
        }
        c
    }

    /// Node indices from the root to `node`, inclusive.
    pub fn path_to(&self, node: usize) -> Vec<usize> {
        let mut path = vec![node];
        let mut cur = node;
        while let Some(p) = self.parents[cur] {
            path.push(p);
            cur = p;
        }
        path.reverse();
        path
    }

    /// The ancestor-or-self attention mask of the verification block (row i sees column j).
    pub fn mask(&self) -> BlockMask {
        // Parents come first by construction, so this cannot fail.
        BlockMask::from_parents(&self.parents).unwrap_or_else(|_| BlockMask::causal(self.len()))
    }

    /// RoPE positions of the nodes when the root sits at `start`.
    pub fn positions(&self, start: usize) -> Vec<usize> {
        self.depths.iter().map(|d| start + d).collect()
    }

    /// True when every node but the root has the previous node as parent.
    pub fn is_chain(&self) -> bool {
        self.parents
            .iter()
            .enumerate()
            .skip(1)
            .all(|(i, p)| *p == Some(i - 1))
    }
}
