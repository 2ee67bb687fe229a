//! The decode loop: one engine, four ways to propose (`ar`, `linear`, `tree`, `mtp`), and one
//! `StepEvent` per target forward pass.
//!
//! Invariants between steps: `seq` holds every committed token (prompt and answer); the target's
//! KV cache holds `seq[..len - 1]` (the last token, the root, is fed by the next step); the
//! drafter's cache holds some prefix of `seq` shorter than `seq`. So the mode, budget, depth and
//! temperature can change between any two steps without touching the caches.

mod events;
mod logits;
mod settings;
mod stats;
pub mod thread;

pub use events::{Outcome, StageTimes, StepEvent, StopReason};
pub use settings::{
    Mode, Settings, BUDGET_STEPS, DEFAULT_BUDGET, DEFAULT_DEPTH, DEFAULT_EXPAND, DEFAULT_GAMMA,
    DEFAULT_MIN_CHAIN_PROB, MAX_BUDGET, MAX_DEPTH, MAX_EXPAND,
};
pub use stats::AnswerStats;

use logits::NodeLogits;

use crate::draft::causal::ChainPick;
use crate::draft::Drafter;
use crate::error::{Error, Result};
use crate::model::decoder::{Batch, Decoder};
use crate::tree::{build_ddtree, top_k_rows, walk, DraftTree};
use crate::verify::{target_choice, verify_sampled_chain, SampledDraft, Verification};
use candle_core::Tensor;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

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
        s.validate()?;
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
        let mut stats = AnswerStats {
            prompt_tokens: prompt.len(),
            ..AnswerStats::default()
        };
        let mut stop = StopReason::MaxTokens;
        while self.answer().len() < max_tokens {
            let ev = self.step(max_tokens - self.answer().len())?;
            stats.add_step(&ev);
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
        stats.decode = t0.elapsed();
        Ok(Outcome {
            tokens: self.answer().to_vec(),
            prefill,
            stats,
            stop,
        })
    }
}
