//! The decode loop: one engine, four ways to propose (`ar`, `linear`, `tree`, `mtp`), and one
//! `StepEvent` per target forward pass.
//!
//! Invariants between steps: `seq` holds every committed token (prompt and answer); the target's
//! KV cache holds `seq[..len - 1]` (the last token, the root, is fed by the next step); the
//! drafter's cache holds some prefix of `seq` shorter than `seq`. So the mode, budget, depth and
//! temperature can change between any two steps without touching the caches.

pub mod thread;

use crate::draft::causal::ChainPick;
use crate::draft::CausalDrafter;
use crate::error::{Error, Result};
use crate::model::decoder::{Batch, Decoder};
use crate::sampling::SamplingParams;
use crate::tree::{build_ddtree, top_k_log_probs, walk, DraftTree};
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
            verification: Verification::Lossless,
        }
    }
}

/// Default tree budget on the CPU (see BENCHMARKS.md for the sweep that chose it).
pub const DEFAULT_BUDGET: usize = 8;
/// Default tree depth on the CPU.
pub const DEFAULT_DEPTH: usize = 4;
/// Default chain length for `linear`.
pub const DEFAULT_GAMMA: usize = 4;

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
    drafter: Option<CausalDrafter>,
    stop_ids: BTreeSet<u32>,
    settings: Settings,
    seq: Vec<u32>,
    answer_start: usize,
    rng: StdRng,
    lazy_logits: bool,
}

impl Engine {
    /// An engine over `target` and an optional drafter (check their vocabularies first with
    /// [`crate::draft::check_same_vocabulary`]).
    pub fn new(
        target: Decoder,
        drafter: Option<CausalDrafter>,
        stop_ids: BTreeSet<u32>,
        settings: Settings,
        seed: u64,
    ) -> Result<Self> {
        let lazy_logits = target.device().is_cpu();
        let mut e = Engine {
            target,
            drafter,
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
    pub fn drafter(&self) -> Option<&CausalDrafter> {
        self.drafter.as_ref()
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
        let keep = common.min(prompt.len() - 1).min(self.target.len());
        self.target.truncate(keep);
        if let Some(d) = &mut self.drafter {
            d.truncate(keep.min(d.len()));
        }
        let rest = &prompt[keep..prompt.len() - 1];
        for piece in rest.chunks(512) {
            let pos = self.target.len();
            self.target
                .forward(&Batch::causal(piece, pos).with_logits_rows(vec![]))?;
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
        // Drafted tokens beyond what may still be emitted, or beyond the context, are wasted.
        let cap = room.min(remaining) - 1;
        let params = self.settings.sampling;
        let mut times = StageTimes::default();

        // Draft.
        let t = Instant::now();
        let mut sampled: Option<Vec<SampledDraft>> = None;
        let mut chain_tokens: Vec<u32> = vec![];
        let mut tree = DraftTree::root(root);
        let effective = if cap == 0 || mode == Mode::Ar || self.drafter.is_none() {
            Mode::Ar
        } else {
            mode
        };
        let mut per_depth_logits = vec![];
        if let Some(drafter) = self.drafter.as_mut().filter(|_| effective != Mode::Ar) {
            let (depth, pick) = match effective {
                Mode::Linear if !params.is_greedy() => {
                    (self.settings.gamma.min(cap), ChainPick::Sample(params))
                }
                Mode::Linear => (self.settings.gamma.min(cap), ChainPick::Greedy),
                _ => (self.settings.depth.min(cap), ChainPick::Greedy),
            };
            let chain = drafter.draft(&self.seq, depth, pick, &mut self.rng)?;
            chain_tokens = chain.tokens();
            if effective == Mode::Linear {
                tree = DraftTree::chain(root, &chain_tokens);
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
        times.draft = t.elapsed();

        // Build.
        if effective == Mode::Tree {
            let t = Instant::now();
            let budget = self.settings.budget.min(cap);
            let vocab = per_depth_logits.first().map_or(0, |l| l.len());
            let depths: Vec<_> = per_depth_logits
                .iter()
                .map(|l| top_k_log_probs(l, budget.min(vocab)))
                .collect();
            tree = build_ddtree(&depths, budget, root);
            times.build = t.elapsed();
        }

        // Verify: one target pass over the whole tree.
        let t = Instant::now();
        let n = tree.len();
        let last_layer = self.target.config().n_layers - 1;
        let mut batch = Batch::causal(&tree.tokens, base).with_positions(tree.positions(base));
        if !tree.is_chain() {
            batch = batch.with_mask(tree.mask());
        }
        batch = if self.lazy_logits && n > 1 {
            batch
                .with_logits_rows(vec![])
                .with_hidden_layers(vec![last_layer])
        } else {
            batch.all_logits()
        };
        let out = self.target.forward(&batch)?;
        times.verify = t.elapsed();

        // Walk.
        let t = Instant::now();
        let rows = NodeLogits::new(&self.target, out.logits, out.hidden.into_iter().next())?;
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
        let before = self.seq.len();
        self.seq.extend_from_slice(&emitted);
        if finished.is_none() && self.seq.len() >= self.target.context() {
            finished = Some(StopReason::ContextFull);
        }
        self.target.truncate(self.seq.len().saturating_sub(1));
        if let Some(d) = &mut self.drafter {
            d.rollback(before, &chain_tokens, &emitted);
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
