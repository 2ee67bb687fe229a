//! A causal-LM drafter: its own decoder and KV cache, kept a prefix of the committed sequence.

use super::{Committed, DraftRequest, Drafter, Proposal};
use crate::error::{Error, Result};
use crate::gpu::row_top_k;
use crate::model::decoder::{Batch, Decoder};
use crate::model::draft_vocab::{token_of, tokens_of};
use crate::sampling::{distribution, draw, SamplingParams};
use crate::settings::Mode;
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

/// The confidence stop, in one place: a sampled chain always goes on; a greedy one while its
/// probability so far `p` (the drafter's own) is at least `min_chain_prob`.
fn confident(p: f64, pick: ChainPick, min_chain_prob: f32) -> bool {
    pick != ChainPick::Greedy || p as f32 >= min_chain_prob
}

impl ChainStep {
    /// The drafter's probability of the token taken (its top log-probability; 1 for a draw).
    fn prob(&self) -> f64 {
        self.top
            .as_ref()
            .and_then(|t| t.log_probs.first())
            .map_or(1.0, |&lp| (lp as f64).exp())
    }
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
        next: impl FnMut(u32) -> Result<Tensor>,
    ) -> Result<Chain> {
        let among = Among::every_token(top_k, pick);
        Chain::draft_among(first, depth, among, min_chain_prob, rng, next)
    }

    /// [`Chain::draft`] over logits whose columns are `among.vocab`'s tokens (a drafter's
    /// reduced vocabulary; the drafted tokens are those ids) or the whole vocabulary.
    pub fn draft_among(
        first: Tensor,
        depth: usize,
        among: Among,
        min_chain_prob: f32,
        rng: &mut impl Rng,
        next: impl FnMut(u32) -> Result<Tensor>,
    ) -> Result<Chain> {
        if depth == 0 {
            return Ok(Chain::default());
        }
        let step = among.pick_step(&first, rng)?;
        Chain { steps: vec![step] }.extend_among(depth, among, min_chain_prob, rng, next)
    }

    /// Draft on after the last token (fed through `next`) until the chain holds `depth` tokens
    /// or a greedy chain's probability falls below `min_chain_prob`.
    pub fn extend(
        self,
        depth: usize,
        top_k: usize,
        pick: ChainPick,
        min_chain_prob: f32,
        rng: &mut impl Rng,
        next: impl FnMut(u32) -> Result<Tensor>,
    ) -> Result<Chain> {
        let among = Among::every_token(top_k, pick);
        self.extend_among(depth, among, min_chain_prob, rng, next)
    }

    /// [`Chain::extend`] over logits whose columns are `among.vocab`'s tokens.
    fn extend_among(
        mut self,
        depth: usize,
        among: Among,
        min_chain_prob: f32,
        rng: &mut impl Rng,
        mut next: impl FnMut(u32) -> Result<Tensor>,
    ) -> Result<Chain> {
        while self.steps.len() < depth && self.confident(0, among.pick, min_chain_prob) {
            let Some(last) = self.steps.last() else {
                break;
            };
            let logits = next(last.token)?;
            let step = among.pick_step(&logits, rng)?;
            self.steps.push(step);
        }
        Ok(self)
    }

    /// The drafter's own probability of the greedy chain's steps from `from` on (1 for a
    /// sampled chain, whose steps carry no top-k).
    fn prob(&self, from: usize) -> f64 {
        self.steps.iter().skip(from).map(ChainStep::prob).product()
    }

    /// True while drafting on after the steps from `from` on is worth it (see [`confident`]).
    fn confident(&self, from: usize, pick: ChainPick, min_chain_prob: f32) -> bool {
        confident(self.prob(from), pick, min_chain_prob)
    }

    /// A greedy chain from each depth's most probable tokens (depth 1 first): each step takes
    /// its depth's first token.
    pub fn greedy(tops: Vec<DepthTopK>) -> Chain {
        Chain {
            steps: tops
                .into_iter()
                .map(|top| ChainStep {
                    token: top.tokens.first().copied().unwrap_or(0),
                    top: Some(top),
                    q: None,
                })
                .collect(),
        }
    }

    /// The longest prefix of at most `depth` steps that [`Chain::draft`] would have drafted: it
    /// stops after the first step at which the chain is no longer confident.
    pub fn cut(mut self, depth: usize, pick: ChainPick, min_chain_prob: f32) -> Chain {
        let (mut keep, mut p) = (0, 1.0f64);
        for step in self.steps.iter().take(depth) {
            keep += 1;
            p *= step.prob();
            if !confident(p, pick, min_chain_prob) {
                break;
            }
        }
        self.steps.truncate(keep);
        self
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

/// How a chain's steps are picked from a drafter's logits rows.
#[derive(Debug, Clone, Copy)]
pub struct Among<'a> {
    /// Most probable tokens a greedy step keeps (a tree's q_d).
    pub top_k: usize,
    /// Greedy or drawn.
    pub pick: ChainPick,
    /// The token id of each column, where the drafter drafts among fewer tokens than the
    /// target's (ascending, so that ties still go to the lower id); `None`: column = id.
    pub vocab: Option<&'a [u32]>,
}

impl Among<'_> {
    /// Picking among the whole vocabulary (column = token id).
    pub fn every_token(top_k: usize, pick: ChainPick) -> Self {
        Among {
            top_k,
            pick,
            vocab: None,
        }
    }

    /// One depth from a logits row over the columns: [`pick_step`], its ids mapped.
    fn pick_step(&self, logits: &Tensor, rng: &mut impl Rng) -> Result<ChainStep> {
        let mut step = pick_step(logits, self.pick, self.top_k, rng)?;
        if self.vocab.is_some() {
            step.token = token_of(self.vocab, step.token);
            if let Some(top) = &mut step.top {
                tokens_of(self.vocab, &mut top.tokens);
            }
            for (t, _) in step.q.iter_mut().flatten() {
                *t = token_of(self.vocab, *t);
            }
        }
        Ok(step)
    }
}

/// One depth of a chain from a `[1, vocab]` logits row: the token picked and, for a greedy pick,
/// the `top_k` most probable tokens (read on the device where the row lives).
fn pick_step(
    logits: &Tensor,
    pick: ChainPick,
    top_k: usize,
    rng: &mut impl Rng,
) -> Result<ChainStep> {
    let _span = crate::profile::span("drafter top-k / draw", logits.device());
    Ok(match pick {
        ChainPick::Greedy => greedy_step(logits, top_k)?,
        ChainPick::Sample(params) => {
            let q = distribution(&logits.squeeze(0)?.to_vec1::<f32>()?, &params);
            let token = draw(&q, rng).unwrap_or(0);
            ChainStep {
                token,
                top: None,
                q: Some(q),
            }
        }
    })
}

/// A greedy chain's step: the argmax and the `top_k` most probable tokens of a `[1, vocab]`
/// logits row.
fn greedy_step(logits: &Tensor, top_k: usize) -> Result<ChainStep> {
    let top = row_top_k(logits, top_k.max(1))?
        .pop()
        .ok_or_else(|| Error::InvalidArgument("no drafter logits".into()))?;
    Ok(Chain::greedy(vec![top]).steps.remove(0))
}

/// A small causal LM used as a drafter.
pub struct CausalDrafter {
    pub(super) model: Decoder,
    name: String,
    /// What the last proposal left in the cache, for [`Drafter::commit`].
    last: Fed,
    /// The next step's chain, drafted ahead while the target verified the last one (the target
    /// took the whole chain and its own next token was the drafter's).
    pending: Option<Pending>,
    /// Tokens of the last proposal that came from a chain drafted ahead.
    ahead_used: usize,
}

/// A greedy chain as drafted, with what drafting it further needs.
#[derive(Debug, Clone)]
struct Drafted {
    /// Length of the committed sequence the chain follows.
    seq_len: usize,
    /// The chain: the proposed tokens, then any drafted ahead.
    chain: Chain,
    /// How many of its tokens were proposed.
    proposed: usize,
    /// The depth asked for.
    depth: usize,
    /// Tokens kept per depth.
    top_k: usize,
    /// The confidence stop.
    min_chain_prob: f32,
}

/// A chain drafted ahead for the step after the committed sequence of `seq_len` tokens ending
/// in `root`; the cache holds that sequence and all the chain's tokens but the last.
#[derive(Debug, Clone)]
struct Pending {
    seq_len: usize,
    root: u32,
    chain: Chain,
    top_k: usize,
}

impl Pending {
    /// The chain drafted ahead that the step `c` leaves for the next one: there is one when
    /// the step emitted a prefix of the chain, cut nowhere, and the chain goes on past it.
    fn after(c: &Committed<'_>, d: &Drafted) -> Option<Pending> {
        let n = c.emitted.len();
        let root = *c.emitted.last()?;
        let whole = n == c.accepted.len() && d.chain.steps.len() > n && c.before == d.seq_len;
        let follows = d
            .chain
            .steps
            .iter()
            .zip(c.emitted)
            .all(|(s, &t)| s.token == t);
        (whole && follows).then(|| Pending {
            seq_len: c.before + n,
            root,
            chain: Chain {
                steps: d.chain.steps[n..].to_vec(),
            },
            top_k: d.top_k,
        })
    }
}

/// What the last proposal fed the drafter's cache beyond the committed sequence.
#[derive(Debug, Clone, Default)]
enum Fed {
    /// Nothing beyond it.
    #[default]
    Nothing,
    /// A sampled chain's tokens (all but the last fed).
    Chain(Vec<u32>),
    /// A greedy chain (all but its last token fed), with what drafting ahead needs.
    Greedy(Drafted),
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
            pending: None,
            ahead_used: 0,
        }
    }

    /// The drafter's decoder.
    pub fn model(&self) -> &Decoder {
        &self.model
    }

    /// Bring the cache up to `seq` (whose prefix it must already hold) and return the logits for
    /// the token after it (`[1, vocab]`, on the model's device). The cache then holds all of `seq`.
    pub(super) fn sync(&mut self, seq: &[u32]) -> Result<Tensor> {
        self.pending = None;
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
        self.pending = None;
        self.last = Fed::Nothing;
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
        if let Some(chain) = self.take_pending(seq, pick, top_k) {
            // Drafted ahead: keep what the confidence stop keeps, draft on if it is short.
            let chain = chain.cut(depth, pick, min_chain_prob);
            self.ahead_used = chain.steps.len();
            self.model.truncate(seq.len() + chain.steps.len() - 1);
            return chain.extend(depth, top_k, pick, min_chain_prob, rng, |token| {
                self.step(token, "drafter step")
            });
        }
        let first = self.sync(seq)?;
        Chain::draft(first, depth, top_k, pick, min_chain_prob, rng, |token| {
            self.step(token, "drafter step")
        })
    }

    /// Feed one token after the cache and return the logits after it.
    fn step(&mut self, token: u32, span: &'static str) -> Result<Tensor> {
        let pos = self.model.len();
        let _span = crate::profile::span(span, self.model.device());
        self.model
            .forward(&Batch::causal(&[token], pos))?
            .logits
            .ok_or_else(|| Error::InvalidArgument("the drafter returned no logits".into()))
    }

    /// The chain drafted ahead for this step, when it still follows `seq` and was drafted the way
    /// this step asks (greedy, with as many tokens kept per depth); else forget it.
    fn take_pending(&mut self, seq: &[u32], pick: ChainPick, top_k: usize) -> Option<Chain> {
        let p = self.pending.take()?;
        let fits = pick == ChainPick::Greedy
            && p.top_k == top_k
            && p.seq_len == seq.len()
            && seq.last() == Some(&p.root)
            && !p.chain.steps.is_empty()
            && self.model.len() == seq.len() + p.chain.steps.len() - 1;
        fits.then_some(p.chain)
    }

    /// While `busy` (the target still verifying the chain just proposed), draft on past its end:
    /// first the token the drafter expects the target to add, then the next step's chain after
    /// it, at most its depth and while confident. Only a greedy chain is drafted on, and only
    /// one whose probability (the drafter's own) is at least `min_chain_prob`.
    fn draft_on(&mut self, busy: &dyn Fn() -> bool, min_chain_prob: f32) -> Result<()> {
        let Fed::Greedy(mut d) = std::mem::take(&mut self.last) else {
            return Ok(());
        };
        // Only a chain the target likely takes whole is worth drafting on from: elsewhere the
        // drafted steps are thrown away, and running beside the target they slow its pass. And
        // only the chain of this step (the cache holding its sequence and all its tokens but the
        // last), not one left by a step that failed before its commit.
        let current = self.model.len() + 1 == d.seq_len + d.chain.steps.len();
        if !current || !d.chain.confident(0, ChainPick::Greedy, min_chain_prob) {
            self.last = Fed::Greedy(d);
            return Ok(());
        }
        let result = (|| {
            while busy()
                && d.chain.steps.len() < d.proposed + 1 + d.depth
                && d.chain
                    .confident(d.proposed + 1, ChainPick::Greedy, d.min_chain_prob)
                && self.model.len() + 1 < self.model.context()
            {
                let Some(last) = d.chain.steps.last() else {
                    break;
                };
                let logits = self.step(last.token, "drafter step ahead")?;
                d.chain.steps.push(greedy_step(&logits, d.top_k)?);
            }
            Ok(())
        })();
        self.last = Fed::Greedy(d);
        result
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
        self.pending = None;
        self.last = Fed::Nothing;
        self.model.truncate(len.min(self.model.len()));
    }

    fn decoder(&self) -> Option<&Decoder> {
        Some(&self.model)
    }

    fn prefill(&mut self, seq: &[u32]) -> Result<()> {
        self.catch_up(seq)
    }

    fn propose(&mut self, req: &DraftRequest<'_>, rng: &mut StdRng) -> Result<Proposal> {
        self.ahead_used = 0;
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
        self.last = if req.chain_pick() == ChainPick::Greedy {
            Fed::Greedy(Drafted {
                seq_len: req.seq.len(),
                chain: chain.clone(),
                proposed: chain.steps.len(),
                depth: req.depth(),
                top_k: req.top_k(),
                min_chain_prob: s.min_chain_prob,
            })
        } else {
            Fed::Chain(chain.tokens())
        };
        Ok(chain.into_proposal(req.mode, root))
    }

    fn draft_ahead(&mut self, busy: &dyn Fn() -> bool, min_chain_prob: f32) -> Result<()> {
        self.draft_on(busy, min_chain_prob)
    }

    fn drafted_ahead(&self) -> usize {
        self.ahead_used
    }

    fn commit(&mut self, c: &Committed<'_>) -> Result<()> {
        self.pending = None;
        match std::mem::take(&mut self.last) {
            Fed::Tree(rows) => self.keep_path(c.before, &rows, c.accepted, c.emitted.len()),
            Fed::Chain(chain) => {
                self.rollback(c.before, &chain, c.emitted);
                Ok(())
            }
            Fed::Greedy(d) => {
                match Pending::after(c, &d) {
                    // The cache holds the new sequence and the pending chain but its last token.
                    Some(p) => self.pending = Some(p),
                    None => self.rollback(c.before, &d.chain.tokens(), c.emitted),
                }
                Ok(())
            }
            Fed::Nothing => {
                self.rollback(c.before, &[], c.emitted);
                Ok(())
            }
        }
    }
}
