//! A causal-LM drafter: its own decoder and KV cache, kept a prefix of the committed sequence.

use super::{Committed, DraftRequest, Drafter, Proposal};
use crate::engine::Mode;
use crate::error::{Error, Result};
use crate::gpu::row_top_k;
use crate::model::decoder::{Batch, Decoder};
use crate::sampling::{distribution, draw, SamplingParams};
use crate::tree::{DepthTopK, DraftTree};
use crate::verify::SampledDraft;
use candle_core::Tensor;
use rand::rngs::StdRng;
use rand::Rng;

/// How the chain's tokens are picked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ChainPick {
    /// The drafter's argmax at each depth.
    Greedy,
    /// A draw from the drafter's processed distribution (for rejection sampling).
    Sample(SamplingParams),
}

/// One depth of a drafted chain.
#[derive(Debug, Clone)]
pub struct ChainStep {
    /// The drafted token.
    pub token: u32,
    /// The drafter's most probable tokens at this depth with their log-probabilities (the tree
    /// builder's q_d; greedy chains only).
    pub top: Option<DepthTopK>,
    /// The processed distribution the token was drawn from (sampled chains only).
    pub q: Option<Vec<(u32, f32)>>,
}

/// A drafted chain, depth 1 first.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    /// The steps.
    pub steps: Vec<ChainStep>,
}

impl Chain {
    /// The drafted tokens.
    pub fn tokens(&self) -> Vec<u32> {
        self.steps.iter().map(|s| s.token).collect()
    }

    /// Draft up to `depth` tokens from the logits `first` (`[1, vocab]`) of depth 1, `next`
    /// giving the logits after each token taken; a greedy chain stops early once its own
    /// probability falls below `min_chain_prob` (see [`CausalDrafter::draft`]). At least one
    /// token is drafted when `depth` > 0.
    pub fn draft(
        first: Tensor,
        depth: usize,
        top_k: usize,
        pick: ChainPick,
        min_chain_prob: f32,
        rng: &mut impl Rng,
        mut next: impl FnMut(u32) -> Result<Tensor>,
    ) -> Result<Chain> {
        let mut chain = Chain::default();
        let mut logits = first;
        let mut chain_prob = 1.0f64;
        for d in 0..depth {
            let (step, p) = pick_step(&logits, pick, top_k, rng)?;
            chain_prob *= p;
            let token = step.token;
            chain.steps.push(step);
            let confident = pick != ChainPick::Greedy || (chain_prob as f32) >= min_chain_prob;
            if d + 1 >= depth || !confident {
                break;
            }
            logits = next(token)?;
        }
        Ok(chain)
    }

    /// The proposal this chain makes after `root` in a step of `mode`: per-depth distributions
    /// for a tree, the drawn tokens with their q for a sampled chain, else the greedy chain.
    pub fn into_proposal(self, mode: Mode, root: u32) -> Proposal {
        let sampled = self.steps.iter().any(|c| c.q.is_some());
        match mode {
            Mode::Tree => Proposal::Depths(self.steps.into_iter().filter_map(|c| c.top).collect()),
            _ if sampled => Proposal::SampledChain(
                self.steps
                    .into_iter()
                    .map(|c| SampledDraft {
                        token: c.token,
                        q: c.q.unwrap_or_default(),
                    })
                    .collect(),
            ),
            _ => Proposal::Tree(DraftTree::chain(root, &self.tokens())),
        }
    }
}

/// One depth of a chain from a `[1, vocab]` logits row: the token picked and, for a greedy pick,
/// the `top_k` most probable tokens (read on the device where the row lives); with the
/// probability of the token taken (1 for a draw).
fn pick_step(
    logits: &Tensor,
    pick: ChainPick,
    top_k: usize,
    rng: &mut impl Rng,
) -> Result<(ChainStep, f64)> {
    let _span = crate::profile::span("drafter top-k / draw", logits.device());
    Ok(match pick {
        ChainPick::Greedy => {
            let top = row_top_k(logits, top_k.max(1))?
                .pop()
                .ok_or_else(|| Error::InvalidArgument("no drafter logits".into()))?;
            let p = top.log_probs.first().map_or(0.0, |&lp| (lp as f64).exp());
            let token = top.tokens.first().copied().unwrap_or(0);
            (
                ChainStep {
                    token,
                    top: Some(top),
                    q: None,
                },
                p,
            )
        }
        ChainPick::Sample(params) => {
            let q = distribution(&logits.squeeze(0)?.to_vec1::<f32>()?, &params);
            let token = draw(&q, rng).unwrap_or(0);
            (
                ChainStep {
                    token,
                    top: None,
                    q: Some(q),
                },
                1.0,
            )
        }
    })
}

/// A small causal LM used as a drafter.
pub struct CausalDrafter {
    pub(super) model: Decoder,
    name: String,
    /// What the last proposal left in the cache, for [`Drafter::commit`].
    last: Fed,
}

/// What the last proposal fed the drafter's cache beyond the committed sequence.
#[derive(Debug, Clone, Default)]
enum Fed {
    /// Nothing beyond it.
    #[default]
    Nothing,
    /// A chain's tokens (all but the last fed).
    Chain(Vec<u32>),
    /// A grown tree: the cache row of each node.
    Tree(Vec<Option<usize>>),
}

impl CausalDrafter {
    /// Wrap a loaded decoder.
    pub fn new(model: Decoder, name: impl Into<String>) -> Self {
        CausalDrafter {
            model,
            name: name.into(),
            last: Fed::Nothing,
        }
    }

    /// The drafter's decoder.
    pub fn model(&self) -> &Decoder {
        &self.model
    }

    /// Bring the cache up to `seq` (whose prefix it must already hold) and return the logits for
    /// the token after it (`[1, vocab]`, on the model's device). The cache then holds all of `seq`.
    pub(super) fn sync(&mut self, seq: &[u32]) -> Result<Tensor> {
        let have = self.model.len().min(seq.len().saturating_sub(1));
        self.model.truncate(have);
        let rest = &seq[have..];
        if rest.is_empty() {
            return Err(Error::InvalidArgument(
                "drafting from an empty sequence".into(),
            ));
        }
        let mut last = None;
        let _span = crate::profile::span("drafter catch-up pass", self.model.device());
        for piece in rest.chunks(512) {
            let out = self
                .model
                .forward(&Batch::causal(piece, self.model.len()))?;
            last = out.logits;
        }
        last.ok_or_else(|| Error::InvalidArgument("the drafter returned no logits".into()))
    }

    /// Read `seq` but its last token into the cache (the prompt, before the first step), so that
    /// the first draft feeds only the root.
    pub fn catch_up(&mut self, seq: &[u32]) -> Result<()> {
        let upto = seq.len().saturating_sub(1);
        let have = self.model.len().min(upto);
        self.model.truncate(have);
        for piece in seq[have..upto].chunks(512) {
            let pos = self.model.len();
            self.model
                .forward(&Batch::causal(piece, pos).with_logits_rows(vec![]))?;
        }
        Ok(())
    }

    /// Draft up to `depth` tokens after `seq`, keeping the `top_k` most probable tokens of each
    /// depth of a greedy chain (read on the device where the model runs on one). The cache ends
    /// holding `seq` plus all drafted tokens but the last (which is never fed).
    ///
    /// With `min_chain_prob` > 0 a greedy chain stops early once the drafter's own probability of
    /// the chain so far (the product of its top probabilities) falls below it: a drafter step costs
    /// a sizeable part of a target step, and a chain the drafter itself doubts is seldom accepted
    /// whole. At least one token is always drafted.
    pub fn draft(
        &mut self,
        seq: &[u32],
        depth: usize,
        top_k: usize,
        pick: ChainPick,
        min_chain_prob: f32,
        rng: &mut impl Rng,
    ) -> Result<Chain> {
        if depth == 0 {
            return Ok(Chain::default());
        }
        let room = self.model.context().saturating_sub(seq.len());
        let depth = depth.min(room + 1);
        let first = self.sync(seq)?;
        Chain::draft(first, depth, top_k, pick, min_chain_prob, rng, |token| {
            let pos = self.model.len();
            let _span = crate::profile::span("drafter step", self.model.device());
            self.model
                .forward(&Batch::causal(&[token], pos))?
                .logits
                .ok_or_else(|| Error::InvalidArgument("the drafter returned no logits".into()))
        })
    }

    /// After a step that committed `emitted` after `seq_before`, keep the cache rows still valid:
    /// `seq_before` plus the drafted tokens that match the start of `emitted`, and never all of
    /// the new sequence (its last token is the next root, which drafting feeds).
    pub fn rollback(&mut self, seq_before_len: usize, chain: &[u32], emitted: &[u32]) {
        let common = chain
            .iter()
            .zip(emitted)
            .take_while(|(a, b)| a == b)
            .count();
        let new_len = seq_before_len + emitted.len();
        let keep = (seq_before_len + common).min(new_len.saturating_sub(1));
        self.model.truncate(keep.min(self.model.len()));
    }
}

impl Drafter for CausalDrafter {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "causal LM"
    }

    fn len(&self) -> usize {
        self.model.len()
    }

    fn truncate(&mut self, len: usize) {
        self.model.truncate(len.min(self.model.len()));
    }

    fn decoder(&self) -> Option<&Decoder> {
        Some(&self.model)
    }

    fn prefill(&mut self, seq: &[u32]) -> Result<()> {
        self.catch_up(seq)
    }

    fn propose(&mut self, req: &DraftRequest<'_>, rng: &mut StdRng) -> Result<Proposal> {
        let s = req.settings;
        let root = *req.seq.last().unwrap_or(&0);
        if req.mode == Mode::Tree && s.expand > 0 {
            let g = self.grow_tree(
                req.seq,
                s.budget.min(req.cap),
                req.depth(),
                s.expand,
                s.min_chain_prob,
            )?;
            self.last = Fed::Tree(g.rows);
            return Ok(Proposal::Tree(g.tree));
        }
        let chain = self.draft(
            req.seq,
            req.depth(),
            req.top_k(),
            req.chain_pick(),
            s.min_chain_prob,
            rng,
        )?;
        self.last = Fed::Chain(chain.tokens());
        Ok(chain.into_proposal(req.mode, root))
    }

    fn commit(&mut self, c: &Committed<'_>) -> Result<()> {
        match std::mem::take(&mut self.last) {
            Fed::Tree(rows) => self.keep_path(c.before, &rows, c.accepted, c.emitted.len()),
            Fed::Chain(chain) => {
                self.rollback(c.before, &chain, c.emitted);
                Ok(())
            }
            Fed::Nothing => {
                self.rollback(c.before, &[], c.emitted);
                Ok(())
            }
        }
    }
}
