//! Drafters: models that propose tokens for the target to verify, behind one interface.
//!
//! Each step the engine asks the drafter for a [`Proposal`] (a deterministic tree or chain, a
//! sampled chain, or per-depth distributions the engine builds a DDTree from), verifies it in one
//! target pass, walks it, and tells the drafter what was [`Committed`] so it keeps only what is
//! still valid. The engine knows nothing else of the drafter's kind.
//!
//! - [`CausalDrafter`]: a small causal LM sharing the target's tokenizer; one forward pass per
//!   drafted depth (a chain), or a tree it grows itself ([`expand`]).
//! - [`DFlashDrafter`]: a block-diffusion drafter reading the target's hidden states; one pass for
//!   the whole block.
//! - [`MtpDrafter`]: the target's own multi-token-prediction head; one small block per drafted
//!   depth, reading the target's last hidden state.

pub mod causal;
pub mod dflash;
pub mod expand;
pub mod mtp;

pub use causal::{CausalDrafter, Chain, ChainPick, ChainStep};
pub use dflash::{DFlashConfig, DFlashDrafter};
pub use expand::GrownTree;
pub use mtp::MtpDrafter;

use crate::arch::config::ModelConfig;
use crate::error::{Error, Result};
use crate::model::decoder::Decoder;
use crate::model::tokenizer::TextTokenizer;
use crate::settings::{Mode, Settings};
use crate::tree::{DepthTopK, DraftTree};
use crate::verify::SampledDraft;
use candle_core::Tensor;
use rand::rngs::StdRng;

/// What the engine asks of a drafter for one step.
pub struct DraftRequest<'a> {
    /// Every committed token; the last is the root the draft continues.
    pub seq: &'a [u32],
    /// `Linear` (a chain) or `Tree`.
    pub mode: Mode,
    /// The settings in force (shape, sampler, confidence stop).
    pub settings: &'a Settings,
    /// Most drafted depth that can still be verified and emitted.
    pub cap: usize,
    /// The target (a DFlash drafter uses its embeddings and LM head).
    pub target: &'a Decoder,
}

impl DraftRequest<'_> {
    /// The chain length or tree depth asked for, within the cap.
    pub fn depth(&self) -> usize {
        match self.mode {
            Mode::Linear => self.settings.gamma.min(self.cap),
            Mode::Mtp => self.settings.mtp_k.min(self.cap),
            _ => self.settings.depth.min(self.cap),
        }
    }

    /// Tokens per depth a tree needs (its budget, within the cap): what a drafter proposing
    /// [`Proposal::Depths`] keeps of each depth's distribution.
    pub fn top_k(&self) -> usize {
        self.settings.budget.min(self.cap).max(1)
    }

    /// True when a chain's tokens are to be drawn from the drafter's distribution (linear
    /// verification by rejection sampling) rather than picked greedily.
    pub fn sampled_chain(&self) -> bool {
        matches!(self.mode, Mode::Linear | Mode::Mtp) && !self.settings.sampling.is_greedy()
    }

    /// How a drafted chain's tokens are picked: drawn for a sampled chain, else greedily.
    pub fn chain_pick(&self) -> ChainPick {
        if self.sampled_chain() {
            ChainPick::Sample(self.settings.sampling)
        } else {
            ChainPick::Greedy
        }
    }
}

/// A drafter's proposal for one step.
#[derive(Debug, Clone)]
pub enum Proposal {
    /// A tree of fixed children (a greedy chain is a tree with one child per node), verified by
    /// the walk: greedy, or sample-and-match at temperature > 0.
    Tree(DraftTree),
    /// A chain whose tokens were drawn from the drafter's distribution q at each position,
    /// verified by rejection sampling with the residual.
    SampledChain(Vec<SampledDraft>),
    /// The [`DraftRequest::top_k`] most probable tokens of each depth with their
    /// log-probabilities (depth 1 first), from which the engine builds the DDTree of the budget's
    /// most probable prefixes.
    Depths(Vec<DepthTopK>),
}

/// What a step committed, for the drafter to keep what is still valid.
pub struct Committed<'a> {
    /// Length of the committed sequence before the step.
    pub before: usize,
    /// The verified tree.
    pub tree: &'a DraftTree,
    /// Accepted tree nodes, the root first.
    pub accepted: &'a [usize],
    /// Tokens the step emitted (cut at a stop token or the token limit).
    pub emitted: &'a [u32],
    /// The target's hidden states of [`Drafter::feature_layers`] for the accepted nodes
    /// (`[accepted, layers x hidden]`), when the drafter reads any.
    pub features: Option<Tensor>,
}

/// A model that proposes tokens for the target to verify.
pub trait Drafter: Send {
    /// Display name.
    fn name(&self) -> &str;

    /// What kind of drafter it is, for display ("causal LM", "DFlash", ...).
    fn kind(&self) -> &'static str;

    /// Positions its state covers: a prefix of the committed sequence, or beyond its end the
    /// tokens of a chain drafted ahead (see [`Drafter::draft_ahead`]).
    fn len(&self) -> usize;

    /// True when its state covers nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Positions of a committed sequence of `seq_len` it has yet to run before it can draft
    /// (what its next proposal catches up on).
    fn lag(&self, seq_len: usize) -> usize {
        seq_len.saturating_sub(self.len())
    }

    /// Forget everything from position `len` on.
    fn truncate(&mut self, len: usize);

    /// Its own decoder, if it has one (for inspection).
    fn decoder(&self) -> Option<&Decoder> {
        None
    }

    /// Refuse a target it cannot draft for.
    fn check_target(&self, _target: &ModelConfig) -> Result<()> {
        Ok(())
    }

    /// Target layers whose hidden states it reads (its state then follows the target's row for
    /// row); empty for a drafter with its own context.
    fn feature_layers(&self) -> &[usize] {
        &[]
    }

    /// Take the target's hidden states of [`Drafter::feature_layers`] for the next prompt rows.
    fn push_features(&mut self, _features: Tensor) -> Result<()> {
        Ok(())
    }

    /// Read the prompt `seq` (all but its last token, the first root) before the first step, so
    /// that a step is charged only for drafting.
    fn prefill(&mut self, _seq: &[u32]) -> Result<()> {
        Ok(())
    }

    /// True when it drafts a whole block in one pass whatever the depth asked (so the cap need
    /// not account for the tokens still to emit).
    fn drafts_whole_block(&self) -> bool {
        false
    }

    /// Draft on past the proposal just made while `busy` says the target is still verifying it
    /// (its own device or stream running beside the target's), for the next step to use when the
    /// target takes the whole proposal; only after a proposal the drafter itself gives at least
    /// `min_chain_prob`. Nothing by default.
    fn draft_ahead(&mut self, _busy: &dyn Fn() -> bool, _min_chain_prob: f32) -> Result<()> {
        Ok(())
    }

    /// How many tokens of its last proposal it had drafted before that step began (while the
    /// target verified the step before, or as its chain's unverified tail); 0 by default.
    fn drafted_ahead(&self) -> usize {
        0
    }

    /// Whether it can draft at this point of an answer (`answer_len` tokens emitted so far).
    fn ready(&self, _seq_len: usize, _answer_len: usize) -> bool {
        true
    }

    /// Propose this step's draft.
    fn propose(&mut self, req: &DraftRequest<'_>, rng: &mut StdRng) -> Result<Proposal>;

    /// Keep what the step committed (and drop what was rejected).
    fn commit(&mut self, c: &Committed<'_>) -> Result<()>;
}

/// Refuse a drafter whose vocabulary is not the target's, naming the first difference.
pub fn check_same_vocabulary(
    target_name: &str,
    target: &TextTokenizer,
    drafter_name: &str,
    drafter: &TextTokenizer,
) -> Result<()> {
    let (a, b) = (target.vocab(), drafter.vocab());
    if a == b {
        return Ok(());
    }
    let first = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let at = |v: &[String]| {
        v.get(first)
            .map_or("(none)".to_string(), |t| format!("{t:?}"))
    };
    Err(Error::Config(format!(
        "the drafter {drafter_name} does not share the target {target_name}'s vocabulary \
         ({} vs {} tokens; first difference at id {first}: {} vs {}); speculative decoding needs \
         a drafter with the target's tokenizer",
        b.len(),
        a.len(),
        at(b),
        at(a)
    )))
}
