//! The decode loop: one engine, four ways to propose (`ar`, `linear`, `tree`, `mtp`), and one
//! `StepEvent` per target forward pass.
//!
//! Invariants between steps: `seq` holds every committed token (prompt and answer); the target's
//! KV cache holds `seq[..len - 1]` (the last token, the root, is fed by the next step); the
//! drafter's cache holds some prefix of `seq` shorter than `seq`. So the mode, budget, depth and
//! temperature can change between any two steps without touching the caches.

pub mod thread;

use crate::draft::causal::ChainPick;
use crate::draft::Drafter;
use crate::error::{Error, Result};
use crate::model::decoder::{Batch, Decoder};
use crate::sampling::SamplingParams;
use crate::tree::{build_ddtree, top_k_rows, walk, DraftTree};
use crate::verify::{target_choice, verify_sampled_chain, SampledDraft, Verification};
use candle_core::Tensor;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How tokens are proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Plain decoding: one target token per step.
    Ar,
    /// A drafter chain verified linearly.
    Linear,
    /// A DDTree verified in one pass under a tree mask, then walked.
    Tree,
    /// The target's own multi-token-prediction head as drafter.
    Mtp,
}

impl Mode {
    /// All modes, in the order a user cycles through them.
    pub const ALL: [Mode; 4] = [Mode::Ar, Mode::Linear, Mode::Tree, Mode::Mtp];

    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ar => "ar",
            Mode::Linear => "linear",
            Mode::Tree => "tree",
            Mode::Mtp => "mtp",
        }
    }

    /// Parse a mode name.
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s.trim().to_ascii_lowercase())
    }

    /// True when the mode needs a separate drafter model.
    pub fn needs_drafter(self) -> bool {
        matches!(self, Mode::Linear | Mode::Tree)
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Decoding settings; any of them may change between steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// How tokens are proposed.
    pub mode: Mode,
    /// Tree nodes (the root not counted) for `tree`.
    pub budget: usize,
    /// Tree depth for `tree`.
    pub depth: usize,
    /// Chain length for `linear`.
    pub gamma: usize,
    /// The target's sampler (and the drafter's, for sampled chains).
    pub sampling: SamplingParams,
    /// A causal drafter stops its greedy chain once its own probability of the chain falls
    /// below this (0: always draft the full depth); see [`crate::draft::CausalDrafter::draft`].
    pub min_chain_prob: f32,
    /// `tree` with a causal drafter: 0 builds the DDTree from the per-depth distributions of the
    /// drafter's greedy chain; W > 0 lets the drafter grow the tree itself, expanding the W most
    /// probable nodes of each depth in one pass (see [`crate::draft::expand`]).
    pub expand: usize,
    /// The acceptance rule (always lossless outside the tests).
    pub verification: Verification,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Tree,
            budget: DEFAULT_BUDGET,
            depth: DEFAULT_DEPTH,
            gamma: DEFAULT_GAMMA,
            sampling: SamplingParams::greedy(),
            min_chain_prob: DEFAULT_MIN_CHAIN_PROB,
            expand: DEFAULT_EXPAND,
            verification: Verification::Lossless,
        }
    }
}

/// Default tree budget. Chosen on the CPU from measurement (BENCHMARKS.md): a drafter step costs
/// about 0.4 of a target step there and each extra verified row about 0.1, so small trees over
/// deep, confidence-stopped chains win.
pub const DEFAULT_BUDGET: usize = 8;
/// Default (largest) tree depth; the chain usually stops earlier (see `DEFAULT_MIN_CHAIN_PROB`).
pub const DEFAULT_DEPTH: usize = 8;
/// Default (largest) chain length for `linear`.
pub const DEFAULT_GAMMA: usize = 8;
/// Default confidence below which a causal drafter's chain stops: deep chains where the drafter
/// is sure (code), short ones where it is not (open chat).
pub const DEFAULT_MIN_CHAIN_PROB: f32 = 0.4;

/// Default expansion width of a grown tree (0: the DDTree over the greedy chain's per-depth
/// distributions).
pub const DEFAULT_EXPAND: usize = 0;

/// Time spent in each stage of one step.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct StageTimes {
    /// Drafting (drafter forward passes).
    pub draft: Duration,
    /// Building the tree from the drafter's distributions.
    pub build: Duration,
    /// The target's verification forward pass.
    pub verify: Duration,
    /// Logits of visited nodes, the target's choices and the walk.
    pub walk: Duration,
    /// Cache compaction in the target and the drafter.
    pub commit: Duration,
}

impl StageTimes {
    /// Sum of the stages.
    pub fn total(&self) -> Duration {
        self.draft + self.build + self.verify + self.walk + self.commit
    }

    /// Add another step's times.
    pub fn add(&mut self, o: &StageTimes) {
        self.draft += o.draft;
        self.build += o.build;
        self.verify += o.verify;
        self.walk += o.walk;
        self.commit += o.commit;
    }
}

/// Why an answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model produced a stop token.
    StopToken,
    /// The token limit was reached.
    MaxTokens,
    /// The context is full.
    ContextFull,
    /// The user stopped it.
    Cancelled,
}

/// What one step did: the draft, what the target accepted, what was emitted, and the timings.
#[derive(Debug, Clone, PartialEq)]
pub struct StepEvent {
    /// The mode this step ran in.
    pub mode: Mode,
    /// The verified tree: node 0 is the root; a chain for `linear`, the root alone for `ar`.
    pub tree: DraftTree,
    /// Accepted node indices, starting with the root (0).
    pub accepted: Vec<usize>,
    /// Tokens emitted by this step: the accepted drafted tokens, then the target's own token
    /// (bonus or correction), cut at a stop token or the token limit.
    pub emitted: Vec<u32>,
    /// The target's own token after the accepted path (before any cut).
    pub next: u32,
    /// Time per stage.
    pub times: StageTimes,
    /// Set when the answer ended with this step.
    pub finished: Option<StopReason>,
}

impl StepEvent {
    /// Drafted tokens accepted (the root not counted).
    pub fn accepted_drafts(&self) -> usize {
        self.accepted.len().saturating_sub(1)
    }

    /// Depth in the tree of each emitted token that came from the draft (`Some(depth)`), or
    /// `None` for the target's own token.
    pub fn origins(&self) -> Vec<Option<usize>> {
        (0..self.emitted.len())
            .map(|i| self.accepted.get(i + 1).map(|&node| self.tree.depths[node]))
            .collect()
    }
}

/// A loaded target, an optional drafter, and the state of the current answer.
pub struct Engine {
    target: Decoder,
    drafter: Option<Drafter>,
    /// Target layers whose hidden states feed the drafter (DFlash), empty otherwise.
    feature_layers: Vec<usize>,
    stop_ids: BTreeSet<u32>,
    settings: Settings,
    seq: Vec<u32>,
    answer_start: usize,
    rng: StdRng,
    lazy_logits: bool,
}

impl Engine {
    /// An engine over `target` and an optional drafter (a causal drafter's vocabulary is checked
    /// by [`crate::draft::check_same_vocabulary`] when loading; a DFlash drafter's fit to the
    /// target is checked here).
    pub fn new(
        target: Decoder,
        drafter: Option<Drafter>,
        stop_ids: BTreeSet<u32>,
        settings: Settings,
        seed: u64,
    ) -> Result<Self> {
        let lazy_logits = target.device().is_cpu();
        let feature_layers = match &drafter {
            Some(Drafter::DFlash(d)) => {
                d.check_target(target.config())?;
                d.config().target_layer_ids.clone()
            }
            _ => vec![],
        };
        let mut e = Engine {
            target,
            drafter,
            feature_layers,
            stop_ids,
            settings: Settings {
                mode: Mode::Ar,
                ..settings
            },
            seq: vec![],
            answer_start: 0,
            rng: StdRng::seed_from_u64(seed),
            lazy_logits,
        };
        e.set_settings(settings)?;
        Ok(e)
    }

    /// The current settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Why `mode` cannot run with this engine, if it cannot.
    pub fn mode_unavailable(&self, mode: Mode) -> Option<String> {
        match mode {
            Mode::Ar => None,
            Mode::Linear | Mode::Tree if self.drafter.is_none() => {
                Some(format!("`{mode}` needs a drafter model (--drafter)"))
            }
            Mode::Linear | Mode::Tree => None,
            Mode::Mtp => Some("the target has no multi-token-prediction head".into()),
        }
    }

    /// Change settings (takes effect at the next step).
    pub fn set_settings(&mut self, s: Settings) -> Result<()> {
        if let Some(why) = self.mode_unavailable(s.mode) {
            return Err(Error::Config(why));
        }
        if s.budget == 0 || s.depth == 0 || s.gamma == 0 {
            return Err(Error::Config(
                "budget, depth and gamma must be at least 1".into(),
            ));
        }
        if !(s.sampling.temperature >= 0.0 && s.sampling.temperature.is_finite()) {
            return Err(Error::Config(
                "temperature must be a finite number >= 0".into(),
            ));
        }
        if !(s.sampling.top_p > 0.0 && s.sampling.top_p <= 1.0) {
            return Err(Error::Config("top-p must be in (0, 1]".into()));
        }
        if !(0.0..=1.0).contains(&s.min_chain_prob) {
            return Err(Error::Config("min-chain-prob must be in [0, 1]".into()));
        }
        self.settings = s;
        Ok(())
    }

    /// Reseed the sampler.
    pub fn reseed(&mut self, seed: u64) {
        self.rng = StdRng::seed_from_u64(seed);
    }

    /// The target model.
    pub fn target(&self) -> &Decoder {
        &self.target
    }

    /// The drafter, if any.
    pub fn drafter(&self) -> Option<&Drafter> {
        self.drafter.as_ref()
    }

    /// Hidden states of the feature layers for the given block rows, concatenated per row
    /// (`[rows, layers x hidden]`), from a forward's output (feature layers come first in it).
    fn features(&self, hidden: &[Tensor], rows: Option<&[usize]>) -> Result<Option<Tensor>> {
        if self.feature_layers.is_empty() {
            return Ok(None);
        }
        let parts = &hidden[..self.feature_layers.len()];
        let cat = Tensor::cat(parts, 1)?;
        Ok(Some(match rows {
            Some(r) => {
                let idx = Tensor::from_vec(
                    r.iter().map(|&i| i as u32).collect::<Vec<_>>(),
                    r.len(),
                    cat.device(),
                )?;
                cat.index_select(&idx, 0)?
            }
            None => cat,
        }))
    }

    fn push_features(&mut self, features: Option<Tensor>) -> Result<()> {
        if let (Some(f), Some(Drafter::DFlash(d))) = (features, self.drafter.as_mut()) {
            d.push_features(f)?;
        }
        Ok(())
    }

    /// Every committed token.
    pub fn sequence(&self) -> &[u32] {
        &self.seq
    }

    /// Tokens of the answer in progress.
    pub fn answer(&self) -> &[u32] {
        &self.seq[self.answer_start.min(self.seq.len())..]
    }

    /// Forget the conversation (empty both caches).
    pub fn reset(&mut self) {
        self.target.reset();
        if let Some(d) = &mut self.drafter {
            d.truncate(0);
        }
        self.seq.clear();
        self.answer_start = 0;
    }

    /// Start an answer to `prompt` (the whole rendered conversation). Cached rows shared with the
    /// previous sequence are kept; the rest is read in chunks. Returns the time it took.
    pub fn begin(&mut self, prompt: &[u32]) -> Result<Duration> {
        if prompt.is_empty() {
            return Err(Error::InvalidArgument("empty prompt".into()));
        }
        if prompt.len() >= self.target.context() {
            return Err(Error::ContextOverflow {
                prompt: prompt.len(),
                context: self.target.context(),
            });
        }
        let t0 = Instant::now();
        let common = self
            .seq
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        let mut keep = common.min(prompt.len() - 1).min(self.target.len());
        if let Some(d @ Drafter::DFlash(_)) = &self.drafter {
            // The drafter's context must follow the target's exactly.
            keep = keep.min(d.len());
        }
        self.target.truncate(keep);
        if let Some(d) = &mut self.drafter {
            d.truncate(keep);
        }
        let rest = &prompt[keep..prompt.len() - 1];
        let layers = self.feature_layers.clone();
        for piece in rest.chunks(512) {
            let pos = self.target.len();
            let out = self.target.forward(
                &Batch::causal(piece, pos)
                    .with_logits_rows(vec![])
                    .with_hidden_layers(layers.clone()),
            )?;
            let f = self.features(&out.hidden, None)?;
            self.push_features(f)?;
        }
        // A causal drafter reads the prompt now too, so that a step is charged only for drafting.
        if let (true, Some(Drafter::Causal(d))) =
            (self.settings.mode.needs_drafter(), self.drafter.as_mut())
        {
            d.catch_up(prompt)?;
        }
        self.seq = prompt.to_vec();
        self.answer_start = prompt.len();
        Ok(t0.elapsed())
    }

    /// Run one step, emitting at most `remaining` tokens.
    pub fn step(&mut self, remaining: usize) -> Result<StepEvent> {
        let root = *self
            .seq
            .last()
            .ok_or_else(|| Error::InvalidArgument("step before begin".into()))?;
        let mode = self.settings.mode;
        let base = self.seq.len() - 1;
        debug_assert_eq!(self.target.len(), base);
        let room = self.target.context().saturating_sub(self.seq.len());
        if room == 0 || remaining == 0 {
            let why = if remaining == 0 {
                StopReason::MaxTokens
            } else {
                StopReason::ContextFull
            };
            return Ok(StepEvent {
                mode,
                tree: DraftTree::root(root),
                accepted: vec![0],
                emitted: vec![],
                next: root,
                times: StageTimes::default(),
                finished: Some(why),
            });
        }
        // Drafted tokens beyond the context cannot be verified; beyond what may still be emitted
        // they are wasted. A causal drafter pays per drafted token, so it stops there; a DFlash
        // drafter drafts its whole block in one pass anyway (and its trees then match the
        // reference implementation's to the last round).
        let is_dflash = matches!(self.drafter, Some(Drafter::DFlash(_)));
        let cap = if is_dflash {
            room - 1
        } else {
            room.min(remaining) - 1
        };
        let params = self.settings.sampling;
        let mut times = StageTimes::default();
        let dflash_ready = match &self.drafter {
            // As in the reference, the first token of an answer comes from the target alone.
            Some(d @ Drafter::DFlash(_)) => d.len() == base && self.seq.len() > self.answer_start,
            _ => true,
        };
        let effective = if cap == 0 || mode == Mode::Ar || self.drafter.is_none() || !dflash_ready {
            Mode::Ar
        } else {
            mode
        };

        // Draft.
        let t = Instant::now();
        let mut sampled: Option<Vec<SampledDraft>> = None;
        let mut chain_tokens: Vec<u32> = vec![];
        let mut tree = DraftTree::root(root);
        let mut per_depth_logits = vec![];
        // The drafter cache row of each node of a grown tree (`None` for other trees).
        let mut grown_rows = None;
        let chain_len = match effective {
            Mode::Linear => self.settings.gamma.min(cap),
            _ => self.settings.depth.min(cap),
        };
        match self.drafter.as_mut() {
            Some(Drafter::Causal(drafter))
                if effective == Mode::Tree && self.settings.expand > 0 =>
            {
                let g = drafter.grow_tree(
                    &self.seq,
                    self.settings.budget.min(cap),
                    chain_len,
                    self.settings.expand,
                    self.settings.min_chain_prob,
                )?;
                tree = g.tree;
                grown_rows = Some(g.rows);
            }
            Some(Drafter::Causal(drafter)) if effective != Mode::Ar => {
                let pick = if effective == Mode::Linear && !params.is_greedy() {
                    ChainPick::Sample(params)
                } else {
                    ChainPick::Greedy
                };
                let chain = drafter.draft(
                    &self.seq,
                    chain_len,
                    pick,
                    self.settings.min_chain_prob,
                    &mut self.rng,
                )?;
                chain_tokens = chain.tokens();
                if effective == Mode::Linear {
                    if let ChainPick::Sample(_) = pick {
                        sampled = Some(
                            chain
                                .steps
                                .iter()
                                .map(|s| SampledDraft {
                                    token: s.token,
                                    q: s.q.clone().unwrap_or_default(),
                                })
                                .collect(),
                        );
                    }
                } else {
                    per_depth_logits = chain.steps.into_iter().map(|s| s.logits).collect();
                }
            }
            Some(Drafter::DFlash(drafter)) if effective != Mode::Ar => {
                let mut rows = drafter.draft(root, &self.target)?.to_vec2::<f32>()?;
                rows.truncate(chain_len);
                if effective == Mode::Linear && !params.is_greedy() {
                    // Each depth's token drawn from that depth's distribution: the drafter's
                    // q for rejection sampling (it need not depend on the earlier drafts).
                    let drafts: Vec<SampledDraft> = rows
                        .iter()
                        .map(|r| {
                            let q = crate::sampling::distribution(r, &params);
                            let token = crate::sampling::draw(&q, &mut self.rng).unwrap_or(0);
                            SampledDraft { token, q }
                        })
                        .collect();
                    chain_tokens = drafts.iter().map(|d| d.token).collect();
                    sampled = Some(drafts);
                } else if effective == Mode::Linear {
                    chain_tokens = rows
                        .iter()
                        .map(|r| crate::sampling::argmax(r).unwrap_or(0))
                        .collect();
                } else {
                    per_depth_logits = rows;
                }
            }
            _ => {}
        }
        if effective == Mode::Linear {
            tree = DraftTree::chain(root, &chain_tokens);
        }
        times.draft = t.elapsed();

        // Build.
        if effective == Mode::Tree && grown_rows.is_none() {
            let t = Instant::now();
            let budget = self.settings.budget.min(cap);
            let vocab = per_depth_logits.first().map_or(0, |l| l.len());
            let depths = top_k_rows(&per_depth_logits, budget.min(vocab));
            tree = build_ddtree(&depths, budget, root);
            times.build = t.elapsed();
        }

        // Verify: one target pass over the whole tree.
        let t = Instant::now();
        let n = tree.len();
        let lazy = self.lazy_logits && n > 1;
        let mut layers = self.feature_layers.clone();
        if lazy {
            layers.push(self.target.config().n_layers - 1);
        }
        let mut batch = Batch::causal(&tree.tokens, base)
            .with_positions(tree.positions(base))
            .with_hidden_layers(layers);
        if !tree.is_chain() {
            batch = batch.with_mask(tree.mask());
        }
        batch = if lazy {
            batch.with_logits_rows(vec![])
        } else {
            batch.all_logits()
        };
        let out = self.target.forward(&batch)?;
        // On a GPU the pass runs asynchronously: wait for it, so that it is timed as verify.
        self.target.device().synchronize()?;
        times.verify = t.elapsed();

        // Walk.
        let t = Instant::now();
        let last_hidden = if lazy {
            out.hidden.last().cloned()
        } else {
            None
        };
        let rows = NodeLogits::new(&self.target, out.logits, last_hidden)?;
        // The walk most often follows the drafter's greedy chain (each node's first child).
        let children = tree.children();
        let mut chain = vec![0];
        while let Some(&c) = children[*chain.last().unwrap_or(&0)].first() {
            chain.push(c);
        }
        rows.prefetch(&chain)?;
        let verification = self.settings.verification;
        let (accepted, next) = match (&sampled, verification) {
            (_, Verification::UncheckedFirstChild) => {
                let node = *chain.last().unwrap_or(&0);
                let row = rows.row(node)?;
                let y = target_choice(&row, &params, &mut self.rng);
                (chain.clone(), y)
            }
            (Some(drafts), Verification::Lossless) => {
                let mut err = None;
                let rng = &mut self.rng;
                let (k, y) = verify_sampled_chain(
                    drafts,
                    |i| match rows.row(i) {
                        Ok(r) => crate::sampling::distribution(&r, &params),
                        Err(e) => {
                            err = Some(e);
                            vec![]
                        }
                    },
                    rng,
                );
                if let Some(e) = err {
                    return Err(e);
                }
                ((0..=k).collect(), y)
            }
            (None, Verification::Lossless) => {
                let mut err = None;
                let rng = &mut self.rng;
                let res = walk(&tree, |node| match rows.row(node) {
                    Ok(r) => target_choice(&r, &params, rng),
                    Err(e) => {
                        err = Some(e);
                        u32::MAX
                    }
                });
                if let Some(e) = err {
                    return Err(e);
                }
                res
            }
        };
        times.walk = t.elapsed();

        // Commit.
        let t = Instant::now();
        let mut emitted: Vec<u32> = accepted[1..].iter().map(|&i| tree.tokens[i]).collect();
        emitted.push(next);
        let mut finished = None;
        if let Some(i) = emitted.iter().position(|t| self.stop_ids.contains(t)) {
            emitted.truncate(i);
            finished = Some(StopReason::StopToken);
        }
        if emitted.len() >= remaining {
            emitted.truncate(remaining);
            finished.get_or_insert(StopReason::MaxTokens);
        }
        self.target.keep(base, &accepted)?;
        let features = self.features(&out.hidden, Some(&accepted))?;
        self.push_features(features)?;
        let before = self.seq.len();
        self.seq.extend_from_slice(&emitted);
        if finished.is_none() && self.seq.len() >= self.target.context() {
            finished = Some(StopReason::ContextFull);
        }
        let committed = self.seq.len().saturating_sub(1);
        self.target.truncate(committed);
        match &mut self.drafter {
            Some(Drafter::Causal(d)) => match &grown_rows {
                Some(rows) => d.keep_path(before, rows, &accepted, emitted.len())?,
                None => d.rollback(before, &chain_tokens, &emitted),
            },
            Some(d) => d.truncate(committed),
            None => {}
        }
        times.commit = t.elapsed();

        Ok(StepEvent {
            mode: effective,
            tree,
            accepted,
            emitted,
            next,
            times,
            finished,
        })
    }

    /// Answer `prompt`, calling `on_step` after every step; at most `max_tokens` new tokens.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        mut on_step: impl FnMut(&StepEvent) -> bool,
    ) -> Result<Outcome> {
        let prefill = self.begin(prompt)?;
        let t0 = Instant::now();
        let mut steps = 0;
        let mut stop = StopReason::MaxTokens;
        while self.answer().len() < max_tokens {
            let ev = self.step(max_tokens - self.answer().len())?;
            steps += 1;
            let go_on = on_step(&ev);
            if let Some(s) = ev.finished {
                stop = s;
                break;
            }
            if !go_on {
                stop = StopReason::Cancelled;
                break;
            }
        }
        Ok(Outcome {
            tokens: self.answer().to_vec(),
            prefill,
            decode: t0.elapsed(),
            steps,
            stop,
        })
    }
}

/// The result of [`Engine::generate`].
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The answer's tokens (without the stop token).
    pub tokens: Vec<u32>,
    /// Time to read the prompt.
    pub prefill: Duration,
    /// Time of all steps.
    pub decode: Duration,
    /// Steps (target forward passes after the prompt).
    pub steps: usize,
    /// Why it ended.
    pub stop: StopReason,
}

/// Logits of verified nodes: all computed in the pass (GPU), or computed from the final hidden
/// states for just the nodes the walk needs (CPU, where the LM head's cost grows with every row):
/// the drafter's greedy chain in one batch up front, any other node on demand.
struct NodeLogits<'a> {
    model: &'a Decoder,
    rows: std::cell::RefCell<std::collections::HashMap<usize, Vec<f32>>>,
    hidden: Option<Tensor>,
}

impl<'a> NodeLogits<'a> {
    fn new(model: &'a Decoder, logits: Option<Tensor>, hidden: Option<Tensor>) -> Result<Self> {
        let mut rows = std::collections::HashMap::new();
        if let Some(t) = logits {
            rows.extend(t.to_vec2::<f32>()?.into_iter().enumerate());
        }
        Ok(NodeLogits {
            model,
            rows: std::cell::RefCell::new(rows),
            hidden,
        })
    }

    /// Compute the logits of `nodes` in one batch.
    fn prefetch(&self, nodes: &[usize]) -> Result<()> {
        let Some(h) = &self.hidden else {
            return Ok(());
        };
        let idx = Tensor::from_vec(
            nodes.iter().map(|&n| n as u32).collect::<Vec<_>>(),
            nodes.len(),
            h.device(),
        )?;
        let logits = self
            .model
            .logits_from_hidden(&h.index_select(&idx, 0)?)?
            .to_vec2::<f32>()?;
        self.rows
            .borrow_mut()
            .extend(nodes.iter().copied().zip(logits));
        Ok(())
    }

    fn row(&self, node: usize) -> Result<Vec<f32>> {
        if let Some(r) = self.rows.borrow().get(&node) {
            return Ok(r.clone());
        }
        let h = self
            .hidden
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument(format!("no logits for node {node}")))?;
        let row = self
            .model
            .logits_from_hidden(&h.narrow(0, node, 1)?)?
            .squeeze(0)?
            .to_vec1::<f32>()?;
        self.rows.borrow_mut().insert(node, row.clone());
        Ok(row)
    }
}
