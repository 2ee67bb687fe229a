//! The decode loop: one engine, four ways to propose (`ar`, `linear`, `tree`, `mtp`), and one
//! `StepEvent` per target forward pass.
//!
//! Invariants between steps: `seq` holds every committed token (prompt and answer); the target's
//! KV cache holds `seq[..len - 1]` (the last token, the root, is fed by the next step); the
//! drafter's cache holds some prefix of `seq` shorter than `seq`, or, after a step whose whole
//! chain the target took, `seq` and the next chain drafted ahead but its last token (which the
//! drafter checks before using). So the mode, budget, depth and temperature can change between
//! any two steps without touching the caches.

pub mod auto;
mod events;
mod logits;
mod stats;
pub mod thread;

pub use crate::settings::{
    Mode, Settings, BUDGET_STEPS, DEFAULT_BUDGET, DEFAULT_DEPTH, DEFAULT_EXPAND, DEFAULT_GAMMA,
    DEFAULT_MIN_CHAIN_PROB, DEFAULT_MTP_K, MAX_BUDGET, MAX_DEPTH, MAX_EXPAND,
};
pub use events::{Outcome, Prefill, StageTimes, StepEvent, StopReason};
pub use stats::AnswerStats;

use logits::NodeLogits;

use crate::draft::mtp::KIND as MTP_KIND;
use crate::draft::{Committed, DraftRequest, Drafter, Proposal};
use crate::error::{Error, Result};
use crate::model::decoder::{Batch, Decoder, ForwardOutput};
use crate::tree::{build_ddtree, walk, DraftTree};
use crate::verify::{
    target_choice, target_distribution, verify_sampled_chain, SampledDraft, Verification,
};
use candle_core::Tensor;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::BTreeSet;
use std::time::Instant;

/// A loaded target, its drafters, and the state of the current answer.
pub struct Engine {
    target: Decoder,
    /// The drafter given first (a causal LM, a DFlash checkpoint or an MTP head: `linear` and
    /// `tree` draft with it), then an MTP head beside it ([`Engine::add_head`]: `mtp` drafts
    /// with the first MTP head of the list).
    drafters: Vec<Box<dyn Drafter>>,
    /// Target layers whose hidden states feed the drafters (each drafter's in turn, without
    /// repeats), empty where every drafter keeps its own context.
    feature_layers: Vec<usize>,
    stop_ids: BTreeSet<u32>,
    settings: Settings,
    seq: Vec<u32>,
    answer_start: usize,
    rng: StdRng,
    lazy_logits: bool,
    /// The chooser of `auto`, with what it has measured (kept across answers).
    planner: Option<auto::Planner>,
    /// Whether the drafter drafts on while the target verifies.
    draft_ahead: DraftAhead,
}

/// When a drafter drafts on past its proposal while the target verifies it (for the next step,
/// should the target take the whole proposal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftAhead {
    /// Never.
    Off,
    /// While the target's pass is still running: the default where the drafter runs beside the
    /// target (its own GPU or stream; `TREESPEC_DRAFT_AHEAD=0` turns it off).
    WhileTargetBusy,
    /// This many drafter steps every verify pass, after any greedy chain, on any device (on one
    /// device they run after the pass; for tests).
    Steps(usize),
}

/// The drafter's own probability of a chain below which it does not draft on past it while the
/// target verifies: elsewhere the drafted steps are thrown away, and running beside the target
/// they slow its pass. On the H200, drafting ahead after every chain made chat prompts (tau 3.5)
/// 7% slower while HumanEval (tau 7.3) ran 7% faster (BENCHMARKS.md, section 16).
pub const AHEAD_MIN_CHAIN_PROB: f32 = 0.5;

impl DraftAhead {
    /// The least probability of a chain to draft on from.
    fn min_chain_prob(self) -> f32 {
        match self {
            DraftAhead::WhileTargetBusy => AHEAD_MIN_CHAIN_PROB,
            DraftAhead::Off | DraftAhead::Steps(_) => 0.0,
        }
    }
}

/// Rows of the prompt read per target pass.
const PREFILL_CHUNK: usize = 512;

impl Engine {
    /// An engine over `target` and an optional drafter (a causal drafter's vocabulary is checked
    /// by [`crate::draft::check_same_vocabulary`] when loading; [`Drafter::check_target`] here).
    pub fn new(
        target: Decoder,
        drafter: Option<Box<dyn Drafter>>,
        stop_ids: BTreeSet<u32>,
        settings: Settings,
        seed: u64,
    ) -> Result<Self> {
        let lazy_logits = target.device().is_cpu();
        let beside = drafter
            .as_deref()
            .and_then(|d| d.decoder())
            .is_some_and(|d| crate::gpu::side_by_side(target.device(), d.device()));
        let draft_ahead = if beside && std::env::var("TREESPEC_DRAFT_AHEAD").as_deref() != Ok("0") {
            DraftAhead::WhileTargetBusy
        } else {
            DraftAhead::Off
        };
        if let Some(d) = &drafter {
            d.check_target(target.config())?;
        }
        let mut e = Engine {
            target,
            drafters: vec![],
            feature_layers: vec![],
            stop_ids,
            settings: Settings {
                mode: Mode::Ar,
                ..settings
            },
            seq: vec![],
            answer_start: 0,
            rng: StdRng::seed_from_u64(seed),
            lazy_logits,
            planner: None,
            draft_ahead,
        };
        if let Some(d) = drafter {
            e.push_drafter(d);
        }
        e.set_settings(settings)?;
        Ok(e)
    }

    /// The engine with `head`, an MTP head on the target, beside its drafter: `mtp` drafts
    /// with it while `linear` and `tree` keep the drafter given first. An engine without a
    /// drafter takes the head as its only one; one that already has an MTP head refuses another.
    pub fn add_head(mut self, head: Box<dyn Drafter>) -> Result<Self> {
        if head.kind() != MTP_KIND {
            return Err(Error::Config(format!(
                "{} is a {}, not an MTP head",
                head.name(),
                head.kind()
            )));
        }
        if let Some(had) = self.drafter_for(Mode::Mtp) {
            return Err(Error::Config(format!(
                "the engine already drafts `mtp` with {}",
                had.name()
            )));
        }
        head.check_target(self.target.config())?;
        if !self.seq.is_empty() {
            return Err(Error::Config(
                "an MTP head must be added before the first answer".into(),
            ));
        }
        self.push_drafter(head);
        // `auto`'s arms now include `mtp`.
        self.planner = None;
        let s = self.settings;
        self.set_settings(s)?;
        Ok(self)
    }

    /// Add a drafter (its target checked by the caller) and the target layers it reads.
    fn push_drafter(&mut self, d: Box<dyn Drafter>) {
        // Ascending, as the GPU step's graphs key them ([`Engine::features`] finds each by
        // value).
        self.feature_layers.extend(d.feature_layers());
        self.feature_layers.sort_unstable();
        self.feature_layers.dedup();
        self.drafters.push(d);
    }

    /// Which drafter drafts for `mode`: an MTP head for `mtp`, the first drafter for every
    /// other drafting mode.
    fn drafter_index(&self, mode: Mode) -> Option<usize> {
        match mode {
            Mode::Ar => None,
            Mode::Mtp => self.drafters.iter().position(|d| d.kind() == MTP_KIND),
            Mode::Linear | Mode::Tree | Mode::Auto => (!self.drafters.is_empty()).then_some(0),
        }
    }

    /// Set when the drafter drafts ahead during verify passes (see [`DraftAhead`]).
    pub fn set_draft_ahead(&mut self, ahead: DraftAhead) {
        self.draft_ahead = ahead;
    }

    /// The current settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Why `mode` cannot run with this engine, if it cannot.
    pub fn mode_unavailable(&self, mode: Mode) -> Option<String> {
        match mode {
            Mode::Ar => None,
            Mode::Linear | Mode::Tree if self.drafters.is_empty() => {
                Some(format!("`{mode}` needs a drafter model (--drafter)"))
            }
            Mode::Linear | Mode::Tree => None,
            Mode::Mtp if self.drafter_index(mode).is_some() => None,
            Mode::Mtp => Some("the target has no multi-token-prediction head".into()),
            Mode::Auto => None,
        }
    }

    /// Change settings (takes effect at the next step).
    pub fn set_settings(&mut self, s: Settings) -> Result<()> {
        if let Some(why) = self.mode_unavailable(s.mode) {
            return Err(Error::Config(why));
        }
        s.validate()?;
        // What `auto` has measured stays while its settings do, whatever modes ran in between.
        if s.mode == Mode::Auto && self.planner.as_ref().is_none_or(|p| p.base() != &s) {
            let has_head = self.head().is_some();
            self.planner = Some(auto::Planner::new(&s, !self.drafters.is_empty(), has_head));
        }
        self.settings = s;
        Ok(())
    }

    /// `auto`'s candidates, best first, with their measured tokens per second (empty unless the
    /// mode has been `auto`).
    pub fn auto_rates(&self) -> Vec<(Settings, f64)> {
        self.planner.as_ref().map_or(vec![], |p| p.rates())
    }

    /// Reseed the sampler.
    pub fn reseed(&mut self, seed: u64) {
        self.rng = StdRng::seed_from_u64(seed);
    }

    /// The target model.
    pub fn target(&self) -> &Decoder {
        &self.target
    }

    /// The drafter given first, if any (`linear` and `tree` draft with it).
    pub fn drafter(&self) -> Option<&dyn Drafter> {
        self.drafters.first().map(|d| d.as_ref())
    }

    /// The drafter `mode` drafts with, if it drafts.
    pub fn drafter_for(&self, mode: Mode) -> Option<&dyn Drafter> {
        self.drafter_index(mode).map(|i| self.drafters[i].as_ref())
    }

    /// The MTP head `mtp` drafts with when it is not the drafter given first (one added with
    /// [`Engine::add_head`]).
    pub fn head(&self) -> Option<&dyn Drafter> {
        self.drafter_index(Mode::Mtp)
            .filter(|&i| i > 0)
            .map(|i| self.drafters[i].as_ref())
    }

    /// Each drafter's hidden states of its feature layers for the given block rows,
    /// concatenated per row (`[rows, layers x hidden]`), from a forward's output (feature
    /// layers come first in it): `None` for a drafter that reads none.
    fn features(&self, hidden: &[Tensor], rows: Option<&[usize]>) -> Result<Vec<Option<Tensor>>> {
        let ids = match rows {
            Some(r) if !self.feature_layers.is_empty() => {
                let ids: Vec<u32> = r.iter().map(|&i| i as u32).collect();
                Some(Tensor::from_vec(ids, r.len(), self.target.device())?)
            }
            _ => None,
        };
        let of = |d: &dyn Drafter| -> Result<Option<Tensor>> {
            let layers = d.feature_layers();
            if layers.is_empty() {
                return Ok(None);
            }
            let at = |l: &usize| {
                let i = self.feature_layers.iter().position(|f| f == l);
                i.and_then(|i| hidden.get(i)).ok_or_else(|| {
                    Error::InvalidArgument(format!("no hidden state of layer {l} for {}", d.name()))
                })
            };
            let parts = layers.iter().map(at).collect::<Result<Vec<&Tensor>>>()?;
            let cat = Tensor::cat(&parts, 1)?;
            Ok(Some(match &ids {
                Some(ids) => cat.index_select(ids, 0)?,
                None => cat,
            }))
        };
        self.drafters.iter().map(|d| of(d.as_ref())).collect()
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
        for d in &mut self.drafters {
            d.truncate(0);
        }
        self.seq.clear();
        self.answer_start = 0;
    }

    /// Start an answer to `prompt` (the whole rendered conversation). Cached rows shared with the
    /// previous sequence are kept; the rest is read in chunks, by the target and (for a mode that
    /// drafts) by the drafter. Returns the time it took and the rows it kept.
    pub fn begin(&mut self, prompt: &[u32]) -> Result<Prefill> {
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
        for d in &self.drafters {
            if !d.feature_layers().is_empty() {
                // A drafter that reads the target's hidden states follows it row for row.
                keep = keep.min(d.len());
            }
        }
        // A hybrid target keeps fewer rows where its recurrent state cannot be had at `keep`.
        self.target.truncate(keep);
        let keep = self.target.len();
        for d in &mut self.drafters {
            d.truncate(keep);
        }
        for piece in prompt[keep..prompt.len() - 1].chunks(PREFILL_CHUNK) {
            let pos = self.target.len();
            let out = self.target.forward(
                &Batch::causal(piece, pos)
                    .with_logits_rows(vec![])
                    .with_hidden_layers(self.feature_layers.clone()),
            )?;
            let features = self.features(&out.hidden, None)?;
            for (d, f) in self.drafters.iter_mut().zip(features) {
                if let Some(f) = f {
                    d.push_features(f)?;
                }
            }
        }
        if self.settings.mode.uses_drafter() {
            if let Some(i) = self.drafter_index(self.settings.mode) {
                self.drafters[i].prefill(prompt)?;
            }
        }
        // On a GPU the prompt's passes run asynchronously: wait for them, so that they count as
        // the prompt's time and not as the first step's (which skewed `auto`'s measurement of
        // whichever arm ran first, and every mode's decoding speed, by the prefill).
        self.target.device().synchronize()?;
        for dec in self.drafters.iter().filter_map(|d| d.decoder()) {
            dec.device().synchronize()?;
        }
        self.seq = prompt.to_vec();
        self.answer_start = prompt.len();
        if let Some(p) = &mut self.planner {
            p.begin_answer();
        }
        Ok(Prefill {
            time: t0.elapsed(),
            cached: keep,
        })
    }

    /// Run one step, emitting at most `remaining` tokens: draft, build, verify, walk, commit. In
    /// `auto` the step runs with the settings the planner picks, and its speed is reported back.
    pub fn step(&mut self, remaining: usize) -> Result<StepEvent> {
        let cold_before = self.cold_passes();
        // (Outside auto the planner stays where it is, with what it measured.)
        let Some(mut planner) = self.planner.take_if(|_| self.settings.mode == Mode::Auto) else {
            let mut ev = self.step_with_settings(remaining)?;
            ev.cold = self.cold_passes() > cold_before;
            return Ok(ev);
        };
        let (arm, chosen) = planner.choose();
        let saved = std::mem::replace(&mut self.settings, chosen);
        // A drafter further behind than a round leaves it (other arms' steps, ar's above all,
        // do not feed it) catches up in this step: a one-off cost, like a new graph shape.
        let lag = self
            .drafter_index(chosen.mode)
            .map_or(0, |i| self.drafters[i].lag(self.seq.len()));
        let catching_up = chosen.mode != Mode::Ar && lag > 2 * chosen.gamma.max(chosen.depth) + 2;
        let mut ev = self.step_with_settings(remaining);
        self.settings = saved;
        if let Ok(ev) = &mut ev {
            // A step the drafter could not draft for ran as ar: ar's measurement.
            let arm = if ev.mode == Mode::Ar { 0 } else { arm };
            ev.cold = catching_up || self.cold_passes() > cold_before;
            planner.observe(
                arm,
                ev.emitted.len(),
                ev.times.total().as_secs_f64(),
                ev.cold,
            );
        }
        self.planner = Some(planner);
        ev
    }

    /// Passes of both models so far whose shape was new to their CUDA graphs (0 on the CPU).
    fn cold_passes(&self) -> u64 {
        let drafters = self.drafters.iter().filter_map(|d| d.decoder());
        self.target.cold_passes() + drafters.map(|d| d.cold_passes()).sum::<u64>()
    }

    fn step_with_settings(&mut self, remaining: usize) -> Result<StepEvent> {
        let root = *self
            .seq
            .last()
            .ok_or_else(|| Error::InvalidArgument("step before begin".into()))?;
        let base = self.seq.len() - 1;
        let room = self.target.context().saturating_sub(self.seq.len());
        if room == 0 || remaining == 0 {
            let why = if remaining == 0 {
                StopReason::MaxTokens
            } else {
                StopReason::ContextFull
            };
            return Ok(StepEvent {
                mode: self.settings.mode,
                tree: DraftTree::root(root),
                accepted: vec![0],
                emitted: vec![],
                next: root,
                drafted_ahead: 0,
                times: StageTimes::default(),
                finished: Some(why),
                cold: false,
            });
        }
        let mut times = StageTimes::default();

        let t = Instant::now();
        let span = crate::profile::span("draft (all of it)", self.target.device());
        let (mode, proposal, cap) = self.draft(remaining, room)?;
        let drafted_ahead = match (&proposal, self.drafter_index(mode)) {
            (Some(_), Some(i)) => self.drafters[i].drafted_ahead(),
            _ => 0,
        };
        drop(span);
        times.draft = t.elapsed();

        let t = Instant::now();
        let (tree, sampled) = match proposal {
            None => (DraftTree::root(root), None),
            Some(Proposal::Tree(tree)) => (tree, None),
            Some(Proposal::SampledChain(drafts)) => {
                let tokens: Vec<u32> = drafts.iter().map(|d| d.token).collect();
                (DraftTree::chain(root, &tokens), Some(drafts))
            }
            Some(Proposal::Depths(depths)) => (
                build_ddtree(&depths, self.settings.budget.min(cap), root),
                None,
            ),
        };
        times.build = t.elapsed();

        let t = Instant::now();
        let span = crate::profile::span("target verify pass", self.target.device());
        let out = self.verify(&tree, base)?;
        drop(span);
        times.verify = t.elapsed();

        let t = Instant::now();
        let span = crate::profile::span("walk", self.target.device());
        let (accepted, next) = self.walk(&tree, sampled.as_deref(), &out)?;
        drop(span);
        times.walk = t.elapsed();

        let t = Instant::now();
        let span = crate::profile::span("commit", self.target.device());
        let (emitted, finished) = self.commit(base, &tree, &accepted, next, remaining, &out)?;
        drop(span);
        times.commit = t.elapsed();

        Ok(StepEvent {
            mode,
            // (A tree may use fewer depths than the drafter's chain offered.)
            drafted_ahead: drafted_ahead.min(tree.max_depth()),
            tree,
            accepted,
            emitted,
            next,
            times,
            finished,
            cold: false,
        })
    }

    /// Ask the drafter for this step's proposal, or nothing (then the step is plain decoding);
    /// with the mode the step runs in and the most drafted tokens it may verify.
    fn draft(&mut self, remaining: usize, room: usize) -> Result<(Mode, Option<Proposal>, usize)> {
        let mode = self.settings.mode;
        let index = self.drafter_index(mode).filter(|_| mode.needs_drafter());
        let Some(d) = index.map(|i| self.drafters[i].as_mut()) else {
            return Ok((Mode::Ar, None, 0));
        };
        let tree_rows = self.target.tree_rows_limit();
        let cap = draft_cap(room, remaining, d.drafts_whole_block(), tree_rows);
        let answer_len = self.seq.len() - self.answer_start;
        if cap == 0 || !d.ready(self.seq.len(), answer_len) {
            return Ok((Mode::Ar, None, 0));
        }
        let req = DraftRequest {
            seq: &self.seq,
            mode,
            settings: &self.settings,
            cap,
            target: &self.target,
        };
        Ok((mode, Some(d.propose(&req, &mut self.rng)?), cap))
    }

    /// One target pass over the whole tree: positions by depth, the ancestor mask, and the
    /// hidden states the drafter and the lazy LM head need.
    fn verify(&mut self, tree: &DraftTree, base: usize) -> Result<ForwardOutput> {
        let lazy = self.lazy_logits && tree.len() > 1;
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
        // On a GPU the pass runs asynchronously: a drafter running beside the target drafts on
        // meanwhile; then wait for the pass, so that it is timed as verify.
        let ahead = self.draft_ahead;
        let drafter = self
            .drafter_index(self.settings.mode)
            .map(|i| self.drafters[i].as_mut());
        if let (true, Some(d)) = (ahead != DraftAhead::Off && tree.len() > 1, drafter) {
            let target = self.target.device();
            let steps = std::cell::Cell::new(0);
            let busy = || match ahead {
                DraftAhead::Steps(n) => {
                    steps.set(steps.get() + 1);
                    steps.get() <= n
                }
                _ => crate::gpu::busy(target),
            };
            // (Profiling spans wait for their device: the drafter's steps carry their own.)
            d.draft_ahead(&busy, ahead.min_chain_prob())?;
        }
        self.target.device().synchronize()?;
        Ok(out)
    }

    /// The accepted nodes (root first) and the target's own token after them.
    fn walk(
        &mut self,
        tree: &DraftTree,
        sampled: Option<&[SampledDraft]>,
        out: &ForwardOutput,
    ) -> Result<(Vec<usize>, u32)> {
        let lazy = self.lazy_logits && tree.len() > 1;
        let last_hidden = if lazy {
            out.hidden.last().cloned()
        } else {
            None
        };
        let rows = NodeLogits::new(&self.target, out.logits.clone(), last_hidden);
        // The walk most often follows the drafter's first children.
        let children = tree.children();
        let mut chain = vec![0];
        while let Some(&c) = children[*chain.last().unwrap_or(&0)].first() {
            chain.push(c);
        }
        rows.prefetch(&chain)?;
        let params = self.settings.sampling;
        let rule = self.settings.verification;
        let rng = &mut self.rng;
        let err = std::cell::RefCell::new(None);
        let keep = |r: Result<u32>| {
            r.unwrap_or_else(|e| {
                *err.borrow_mut() = Some(e);
                u32::MAX
            })
        };
        // The target's own token at a node: its argmax, or a draw from its distribution.
        let choose = |node: usize, rng: &mut StdRng| -> u32 {
            if params.is_greedy() {
                keep(rows.argmax(node))
            } else {
                keep(rows.row(node).map(|r| target_choice(&r, &params, rng)))
            }
        };
        let res = match (sampled, rule) {
            (_, Verification::LossyUncheckedFirstChild) => {
                let node = *chain.last().unwrap_or(&0);
                (chain.clone(), choose(node, rng))
            }
            (Some(drafts), _) => {
                let p = |i: usize| match rows.row(i) {
                    Ok(r) => target_distribution(&r, &params, rule),
                    Err(e) => {
                        *err.borrow_mut() = Some(e);
                        vec![]
                    }
                };
                let (k, y) = verify_sampled_chain(drafts, p, rule, rng);
                ((0..=k).collect(), y)
            }
            (None, Verification::LossyArgmaxMatch) => walk(tree, |node| {
                let a = keep(rows.argmax(node));
                if children[node].iter().any(|&c| tree.tokens[c] == a) {
                    a
                } else {
                    choose(node, rng)
                }
            }),
            (None, _) => walk(tree, |node| choose(node, rng)),
        };
        match err.into_inner() {
            Some(e) => Err(e),
            None => Ok(res),
        }
    }

    /// Emit the accepted tokens and the target's own, cut at a stop token or the token limit;
    /// keep the accepted rows in the target's cache and tell the drafter what was committed.
    fn commit(
        &mut self,
        base: usize,
        tree: &DraftTree,
        accepted: &[usize],
        next: u32,
        remaining: usize,
        out: &ForwardOutput,
    ) -> Result<(Vec<u32>, Option<StopReason>)> {
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
        self.target.keep(base, accepted)?;
        let before = self.seq.len();
        self.seq.extend_from_slice(&emitted);
        if finished.is_none() && self.seq.len() >= self.target.context() {
            finished = Some(StopReason::ContextFull);
        }
        self.target.truncate(self.seq.len().saturating_sub(1));
        let features = self.features(&out.hidden, Some(accepted))?;
        for (d, features) in self.drafters.iter_mut().zip(features) {
            d.commit(&Committed {
                before,
                tree,
                accepted,
                emitted: &emitted,
                features,
            })?;
        }
        Ok((emitted, finished))
    }

    /// Answer `prompt`, calling `on_step` after every step; at most `max_tokens` new tokens.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        mut on_step: impl FnMut(&StepEvent) -> bool,
    ) -> Result<Outcome> {
        let begun = self.begin(prompt)?;
        let prefill = begun.time;
        let t0 = Instant::now();
        let mut stats = AnswerStats {
            prompt_tokens: prompt.len(),
            cached_tokens: begun.cached,
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

/// The most drafted tokens a step may verify: none beyond the context (`room` rows left, the
/// root one of them); none beyond what may still be emitted (`remaining`), unless the drafter
/// drafts its whole block in one pass anyway; and a tree no larger than the target verifies in
/// one pass (`tree_rows`, the root included: a hybrid model on the GPU step), so that a large
/// budget on such a model drafts smaller trees instead of failing.
fn draft_cap(room: usize, remaining: usize, whole_block: bool, tree_rows: Option<usize>) -> usize {
    let cap = match whole_block {
        true => room,
        false => room.min(remaining),
    }
    .saturating_sub(1);
    tree_rows.map_or(cap, |rows| cap.min(rows.saturating_sub(1)))
}

#[cfg(test)]
mod tests {
    use super::draft_cap;

    #[test]
    fn a_hybrid_on_the_gpu_step_drafts_trees_it_can_verify() {
        // Room and tokens left for 200 drafts; the target takes trees of up to 64 rows.
        assert_eq!(draft_cap(201, 500, false, Some(64)), 63);
        assert_eq!(draft_cap(201, 500, false, None), 200);
        // The context and the answer's end bound it first where they are nearer.
        assert_eq!(draft_cap(10, 500, false, Some(64)), 9);
        assert_eq!(draft_cap(201, 5, false, Some(64)), 4);
        // A drafter that drafts its whole block anyway is bounded by the context only.
        assert_eq!(draft_cap(201, 5, true, None), 200);
        assert_eq!(draft_cap(0, 5, false, None), 0);
    }
}
