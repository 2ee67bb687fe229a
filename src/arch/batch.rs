//! What a forward pass takes and gives: the new tokens of a block with their positions, what
//! each may see (a draft tree's mask over the block, over earlier passes' rows), which rows'
//! logits and which layers' hidden states to return ([`Batch`], [`ForwardOutput`]); and the
//! block's tree as a hybrid model's recurrent layers read it (`block_parents`), and what of the
//! last block such a layer folds into its state ([`Fold`]).

use crate::error::{Error, Result};
use candle_core::Tensor;

/// Additive value for masked attention entries: large and finite, so that no row is all -inf.
pub const MASKED: f32 = -1.0e9;

/// Which tokens of a new block each new token may attend to. Every new token always attends to
/// the whole committed prefix; this mask governs only the block itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockMask {
    n: usize,
    allowed: Vec<bool>,
}

impl BlockMask {
    /// Each token sees itself and every earlier token of the block.
    pub fn causal(n: usize) -> Self {
        let mut allowed = vec![false; n * n];
        for i in 0..n {
            for j in 0..=i {
                allowed[i * n + j] = true;
            }
        }
        BlockMask { n, allowed }
    }

    /// A tree: `parents[i]` is the block index of token i's parent, or `None` for a root (a token
    /// whose parent is the last committed token). Each token sees itself and its ancestors.
    /// Parents must come before their children.
    pub fn from_parents(parents: &[Option<usize>]) -> Result<Self> {
        let n = parents.len();
        let mut allowed = vec![false; n * n];
        for i in 0..n {
            allowed[i * n + i] = true;
            if let Some(p) = parents[i] {
                if p >= i {
                    return Err(Error::InvalidArgument(format!(
                        "tree node {i} has parent {p}, which does not come before it"
                    )));
                }
                for j in 0..n {
                    if allowed[p * n + j] {
                        allowed[i * n + j] = true;
                    }
                }
            }
        }
        Ok(BlockMask { n, allowed })
    }

    /// Block size.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True for an empty block.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// May token `i` attend to token `j` of the block?
    pub fn allows(&self, i: usize, j: usize) -> bool {
        self.allowed[i * self.n + j]
    }

    /// Allow or forbid token `i` to attend to token `j`.
    pub fn set(&mut self, i: usize, j: usize, allowed: bool) {
        self.allowed[i * self.n + j] = allowed;
    }

    /// True when this is exactly the causal mask.
    pub fn is_causal(&self) -> bool {
        (0..self.n).all(|i| (0..self.n).all(|j| self.allows(i, j) == (j <= i)))
    }
}

/// One forward call: new tokens, where they sit, what they may see, and what to return.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Token ids of the new block.
    pub tokens: Vec<u32>,
    /// RoPE position of each new token.
    pub positions: Vec<usize>,
    /// Visibility inside the block (`None`: causal).
    pub mask: Option<BlockMask>,
    /// Block rows whose logits are wanted, in the order wanted.
    pub logits_rows: Vec<usize>,
    /// Layers whose output hidden states are wanted (0-based layer indices).
    pub hidden_layers: Vec<usize>,
    /// Visibility of cached rows (`None`: every cached row is visible to every new token).
    pub past: Option<PastMask>,
}

/// Which cached rows the new tokens of a block may see, for a draft tree fed over several passes:
/// cached rows from `start` on are other branches' tokens, hidden from a new token unless listed
/// as one of its ancestors. Rows before `start` (the committed prefix) stay visible to all.
#[derive(Debug, Clone, PartialEq)]
pub struct PastMask {
    /// First cached row that is hidden unless listed.
    pub start: usize,
    /// For each new token, the cached rows (absolute, `>= start`) it may see.
    pub visible: Vec<Vec<usize>>,
}

impl Batch {
    /// A causal block at consecutive positions from `start`, asking for the last row's logits.
    pub fn causal(tokens: &[u32], start: usize) -> Self {
        let n = tokens.len();
        Batch {
            tokens: tokens.to_vec(),
            positions: (start..start + n).collect(),
            mask: None,
            logits_rows: if n == 0 { vec![] } else { vec![n - 1] },
            hidden_layers: vec![],
            past: None,
        }
    }

    /// Ask for logits of every row.
    pub fn all_logits(mut self) -> Self {
        self.logits_rows = (0..self.tokens.len()).collect();
        self
    }

    /// Ask for logits of these rows.
    pub fn with_logits_rows(mut self, rows: Vec<usize>) -> Self {
        self.logits_rows = rows;
        self
    }

    /// Use these positions instead of consecutive ones.
    pub fn with_positions(mut self, positions: Vec<usize>) -> Self {
        self.positions = positions;
        self
    }

    /// Use this mask instead of the causal one.
    pub fn with_mask(mut self, mask: BlockMask) -> Self {
        self.mask = Some(mask);
        self
    }

    /// Hide cached rows from `past.start` on, except each token's listed ancestors.
    pub fn with_past_mask(mut self, past: PastMask) -> Self {
        self.past = Some(past);
        self
    }

    /// Return the hidden states after these layers.
    pub fn with_hidden_layers(mut self, layers: Vec<usize>) -> Self {
        self.hidden_layers = layers;
        self
    }
}

/// What a forward call returns.
#[derive(Debug, Clone)]
pub struct ForwardOutput {
    /// `[logits_rows.len(), vocab]` f32 logits, in the order asked for (absent when none asked).
    pub logits: Option<Tensor>,
    /// One `[block, hidden]` tensor per requested layer, in the order asked for.
    pub hidden: Vec<Tensor>,
}

impl ForwardOutput {
    /// The logits as host rows.
    pub fn logits_rows(&self) -> Result<Vec<Vec<f32>>> {
        match &self.logits {
            Some(t) => Ok(t.to_vec2::<f32>()?),
            None => Ok(vec![]),
        }
    }
}

/// Whether each row of a block continues the row before it (the first the cached rows): a chain,
/// not a tree.
pub fn is_chain(parents: &[Option<usize>]) -> bool {
    parents
        .iter()
        .enumerate()
        .all(|(i, p)| *p == i.checked_sub(1))
}

/// Each row's parent in a block for a hybrid model's Gated DeltaNet layers: the previous row of
/// a causal block, a tree's parent node (the deepest ancestor its mask grants), `None` for a row
/// that follows the cached rows. The recurrence reads the whole path of a row, so a mask must
/// be a tree's (each row sees its parent and exactly its parent's ancestors), and no row may see
/// a cached row past the committed prefix (a tree grown over several passes).
pub(crate) fn block_parents(batch: &Batch) -> Result<Vec<Option<usize>>> {
    let n = batch.tokens.len();
    if batch.past.is_some() {
        return Err(Error::InvalidArgument(
            "a hybrid model's recurrent layers take a block's parents within the block (no past \
             mask)"
                .into(),
        ));
    }
    let Some(m) = &batch.mask else {
        return Ok((0..n).map(|i| i.checked_sub(1)).collect());
    };
    let mut parents = Vec::with_capacity(n);
    for i in 0..n {
        let parent = (0..i).rev().find(|&j| m.allows(i, j));
        let tree = (0..i).all(|j| {
            let want = Some(j) == parent || parent.is_some_and(|p| m.allows(p, j));
            m.allows(i, j) == want
        });
        if !tree {
            return Err(Error::InvalidArgument(format!(
                "row {i} of the block does not see exactly its parent and the parent's \
                 ancestors: a hybrid model verifies trees and chains only"
            )));
        }
        parents.push(parent);
    }
    Ok(parents)
}

/// What to fold into a recurrent layer's state before its next block (`model::gated_delta::BlockLedger::take_fold`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fold {
    /// Start from the empty state (the sequence was dropped).
    pub restart: bool,
    /// Rows of the last block, in order (its block rows): every row where `whole`.
    pub path: Vec<usize>,
    /// The whole block as it ran, no path of it kept.
    pub whole: bool,
    /// `path` is a chain from a root (each row the previous one's child): a path the kernels fold.
    pub chain: bool,
    /// The rows' inputs were kept (they can be replayed).
    pub replayable: bool,
}

impl Fold {
    /// Whether the kernels can fold it: nothing, or a chain from a root whose inputs were kept.
    pub fn foldable(&self) -> bool {
        self.path.is_empty() || (self.chain && self.replayable)
    }
}
