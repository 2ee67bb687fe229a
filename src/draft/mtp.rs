//! The MTP drafter: the target's own multi-token-prediction head ([`MtpHead`]) drafts a chain,
//! one cheap block per drafted token instead of a whole drafter model.
//!
//! State: the head's cache covers context positions `0..head.len()`, position `p` paired with
//! the target's pre-norm hidden state `h_p` and the token `x_{p+1}`; hidden states of positions
//! the target has run since wait in `pending`. A proposal first runs the pending positions (the
//! last of them, paired with the root, gives depth 1), then feeds each drafted token back with the
//! head's own output; those chain positions are dropped again afterwards, so the next proposal
//! overwrites them with the target's hidden states of what was accepted (as vLLM does). On a GPU a
//! greedy chain is drafted in one launch of the head's step ([`MtpHead::greedy_chain`]), the
//! pending positions' pass in the same launch.

use super::causal::{Among, Chain, ChainPick};
use super::expand::grow;
use super::{Committed, DraftRequest, Drafter, Proposal};
use crate::arch::config::ModelConfig;
use crate::error::{Error, Result};
use crate::gpu::step::ChainStart;
use crate::model::decoder::PastMask;
use crate::model::mtp::MtpHead;
use crate::settings::Mode;
use crate::tree::DraftTree;
use candle_core::Tensor;
use rand::rngs::StdRng;
use std::collections::HashMap;

/// What [`Drafter::kind`] says of an MTP drafter (the engine offers the `mtp` mode for it).
pub const KIND: &str = "MTP head";

/// A drafter made of the target's MTP head.
pub struct MtpDrafter {
    head: MtpHead,
    name: String,
    /// The target layers whose outputs feed the head (through [`MtpHead::target_hidden`]): its
    /// last, or those the head fuses ([`MtpHead::feature_layers`]).
    layers: Vec<usize>,
    /// The shape of the target the drafter was made for: width and layers.
    hidden: usize,
    target_layers: usize,
    /// Target hidden states of positions `head.len()..`, not yet run through the head, in the
    /// pieces they came in (joined once, when the head next drafts: while another drafter
    /// drafts, a step adds a piece without copying the rest).
    pending: Vec<Tensor>,
    /// The tokens the head drafts among, when fewer than the target's: the columns of its
    /// logits ([`MtpHead::logits`]).
    vocab: Option<Vec<u32>>,
}

impl MtpDrafter {
    /// A drafter from `head`, for a target shaped as `target`.
    pub fn new(head: MtpHead, target: &ModelConfig, name: impl Into<String>) -> Self {
        let mut name = name.into();
        let vocab = head.draft_vocab().map(<[u32]>::to_vec);
        if let Some(v) = &vocab {
            name = format!("{name}, drafting among {} tokens", v.len());
        }
        let layers = head.feature_layers();
        if layers.len() > 1 {
            name = format!("{name}, reading target layers {layers:?}");
        }
        MtpDrafter {
            layers,
            head,
            name,
            hidden: target.hidden,
            target_layers: target.n_layers,
            pending: vec![],
            vocab,
        }
    }

    fn pending_rows(&self) -> usize {
        self.pending.iter().map(|p| p.dim(0).unwrap_or(0)).sum()
    }
}

impl Drafter for MtpDrafter {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        KIND
    }

    fn len(&self) -> usize {
        self.head.len() + self.pending_rows()
    }

    fn lag(&self, seq_len: usize) -> usize {
        // The pending positions, and any the target has that were never pushed.
        self.pending_rows() + seq_len.saturating_sub(self.len() + 1)
    }

    fn truncate(&mut self, len: usize) {
        let base = self.head.len();
        if len <= base {
            self.head.truncate(len);
            self.pending.clear();
            return;
        }
        // Keep the pieces that end by `len`, and the part of the next one before it.
        let mut left = len - base;
        let mut kept = vec![];
        for p in std::mem::take(&mut self.pending) {
            let rows = p.dim(0).unwrap_or(0);
            if left == 0 {
                break;
            }
            if rows <= left {
                left -= rows;
                kept.push(p);
            } else {
                if let Ok(p) = p.narrow(0, 0, left) {
                    kept.push(p);
                }
                break;
            }
        }
        self.pending = kept;
    }

    fn check_target(&self, target: &ModelConfig) -> Result<()> {
        if target.hidden != self.hidden || target.n_layers != self.target_layers {
            return Err(Error::Config(format!(
                "the MTP head {} was made for another target (hidden {}, {} layers)",
                self.name, self.hidden, self.target_layers
            )));
        }
        Ok(())
    }

    fn feature_layers(&self) -> &[usize] {
        &self.layers
    }

    fn push_features(&mut self, features: Tensor) -> Result<()> {
        self.pending.push(features);
        Ok(())
    }

    /// Depth 1 pairs the last hidden state the target produced with the root: the head needs
    /// every committed position but the root run by the target, and at least one.
    fn ready(&self, seq_len: usize, _answer_len: usize) -> bool {
        self.len() + 1 == seq_len && self.pending_rows() > 0
    }

    fn propose(&mut self, req: &DraftRequest<'_>, rng: &mut StdRng) -> Result<Proposal> {
        let seq = req.seq;
        let root = *seq.last().unwrap_or(&0);
        let start = self.head.len();
        let pending = match std::mem::take(&mut self.pending) {
            pieces if pieces.is_empty() => {
                return Err(Error::InvalidArgument(
                    "MTP head: no target hidden states".into(),
                ))
            }
            mut pieces if pieces.len() == 1 => pieces.remove(0),
            pieces => Tensor::cat(&pieces, 0)?,
        };
        let pending = self.head.target_hidden(req.target, &pending)?;
        let rows = pending.dim(0)?;
        if start + rows + 1 != seq.len() {
            return Err(Error::InvalidArgument(format!(
                "MTP head: {} positions known for a sequence of {}",
                start + rows,
                seq.len()
            )));
        }
        // Position p pairs h_p with x_{p+1}: the tokens after the pending positions.
        let tokens = &seq[start + 1..];
        let depth = req.depth().min(self.room_after(rows));
        let s = req.settings;
        // A tree the head grows itself (`tree` with expand > 0), from the pending positions'
        // outputs.
        let grown = req.mode == Mode::Tree && s.expand > 0;
        // The pending positions and the whole chain in one launch, where the head's GPU step
        // can; else the pending positions first and the chain in one launch.
        let from = ChainStart::CatchUp {
            hidden: &pending,
            tokens,
        };
        if !grown {
            if let Some(p) = self.one_launch(req, from, depth, root)? {
                return Ok(p);
            }
        }
        let y = self.head.block_forward(req.target, &pending, tokens)?;
        let committed = self.head.len();
        let y = y.narrow(0, rows - 1, 1)?;
        if grown {
            let tree = self.grow_tree(req, &y, root);
            // The tree's positions are rewritten from the target's states of what is accepted.
            self.head.truncate(committed);
            return Ok(Proposal::Tree(tree?));
        }
        if let Some(p) = self.one_launch(req, ChainStart::Row(&y), depth, root)? {
            return Ok(p);
        }
        // Depth by depth (a sampled chain, or no GPU step), over the head's draft vocabulary's
        // columns when it has one.
        let mut o = self.head.final_norm(&y)?;
        let first = self.head.logits(req.target, &o)?;
        let among = Among {
            top_k: req.top_k(),
            pick: req.chain_pick(),
            vocab: self.vocab.as_deref(),
        };
        let head = &mut self.head;
        let chain = Chain::draft_among(first, depth, among, s.min_chain_prob, rng, |token| {
            o = head.forward(req.target, &o, &[token])?;
            head.logits(req.target, &o)
        })?;
        // The chain's positions are rewritten from the target's states of what is accepted.
        self.head.truncate(committed);
        Ok(chain.into_proposal(req.mode, root))
    }

    fn commit(&mut self, c: &Committed<'_>) -> Result<()> {
        if let Some(f) = &c.features {
            self.push_features(f.clone())?;
        }
        self.truncate((c.before + c.emitted.len()).saturating_sub(1));
        Ok(())
    }
}

impl MtpDrafter {
    /// A draft tree grown by the head itself from `y` (the block output of the last committed
    /// position, whose token `root` is): each depth's `expand` most probable nodes run through
    /// the head in one pass under a tree mask, each fed its parent's output, so that every
    /// node's children come from the head's distribution given that node's own path (EAGLE-2's
    /// dynamic tree, [`super::expand::grow`]). The head's cache then holds the fed nodes past
    /// the committed positions; the caller cuts them.
    fn grow_tree(&mut self, req: &DraftRequest<'_>, y: &Tensor, root: u32) -> Result<DraftTree> {
        let s = req.settings;
        let committed = self.head.len();
        let o_root = self.head.final_norm(y)?;
        let first = self.head.logits(req.target, &o_root)?;
        let room = self.head.capacity().saturating_sub(committed);
        let mut outs: HashMap<usize, Tensor> = HashMap::from([(0, o_root)]);
        let vocab = self.vocab.as_deref();
        let head = &mut self.head;
        let shape = (req.top_k(), req.depth(), s.expand);
        let from = (root, committed.saturating_sub(1));
        let grown = grow(from, first, shape, s.min_chain_prob, vocab, room, |nodes| {
            let parents = nodes
                .iter()
                .map(|n| outs.get(&n.parent).cloned())
                .collect::<Option<Vec<Tensor>>>()
                .ok_or_else(|| {
                    Error::InvalidArgument("MTP tree: a node's parent was never run".into())
                })?;
            let hidden = Tensor::cat(&parents, 0)?;
            let tokens: Vec<u32> = nodes.iter().map(|n| n.token).collect();
            // A node of depth d sits where the chain's d-th drafted token would.
            let depth = nodes.first().map_or(1, |n| n.ancestors.len() + 1);
            let past = PastMask {
                start: committed,
                visible: nodes.iter().map(|n| n.ancestors.clone()).collect(),
            };
            let first_row = head.len();
            let position = committed + depth - 1;
            let o = head.forward_nodes(req.target, &hidden, &tokens, position, &past)?;
            for (i, n) in nodes.iter().enumerate() {
                outs.insert(n.node, o.narrow(0, i, 1)?);
            }
            Ok((head.logits(req.target, &o)?, first_row))
        })?;
        Ok(grown.tree)
    }

    /// A greedy chain's proposal drafted in one launch of the head's GPU step
    /// ([`MtpHead::greedy_chain`]) `from` a block output or a catch-up, cut where the chain's
    /// own probability falls below the settings' threshold; `None` where the chain is sampled
    /// or that launch cannot run.
    fn one_launch(
        &mut self,
        req: &DraftRequest<'_>,
        from: ChainStart,
        depth: usize,
        root: u32,
    ) -> Result<Option<Proposal>> {
        if req.chain_pick() != ChainPick::Greedy {
            return Ok(None);
        }
        let _span = crate::profile::span("MTP chain (one launch)", req.target.device());
        let Some(tops) = self
            .head
            .greedy_chain(req.target, from, depth, req.top_k())?
        else {
            return Ok(None);
        };
        let min_chain_prob = req.settings.min_chain_prob;
        let chain = Chain::greedy(tops).cut(depth, ChainPick::Greedy, min_chain_prob);
        Ok(Some(chain.into_proposal(req.mode, root)))
    }

    /// Chain positions the head's cache can hold once `rows` more positions are run.
    fn room_after(&self, rows: usize) -> usize {
        let used = self.head.len() + rows;
        self.head.capacity().saturating_sub(used).max(1)
    }
}
