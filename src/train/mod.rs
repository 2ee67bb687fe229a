//! Training an MTP head for a target (`treespec train-drafter`): the frozen target reads each
//! training sequence once with the quantised kernels the runtime uses and gives its pre-norm last
//! hidden states and its distributions ([`targets`], kept on the device); the head
//! ([`head::TrainableHead`]) is unrolled for k chain steps over batches of sequences side by
//! side with the attention of inference, and trained (AdamW) on the cross-entropy to the
//! target's distributions (sparse soft targets, as in FastMTP / EAGLE-3's use of the target's
//! own outputs) through the target's LM head, held in f32, its gradient written out
//! ([`loss`]).
//!
//! The data are the target's own greedy answers to prompts ([`answers_batched`]), so that the head learns
//! what the target says, with no dataset needed.

mod data;
pub mod dflash;
mod dflash_record;
pub mod dflash_run;
mod figures;
pub mod head;
mod layer_ops;
pub mod loss;
pub mod run;
mod step;
pub mod targets;
mod turns;

use crate::error::{Error, Result};
use crate::model::decoder::{rope_tables, Batch, Decoder};
use candle_core::Tensor;
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use head::TrainableHead;
use targets::TargetCache;

/// How the learning rate moves over a run's optimiser steps ([`LrSchedule::at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LrSchedule {
    /// The options' rate throughout.
    Constant,
    /// A linear warm-up from a tenth of the rate over the first twentieth of the run (at most
    /// [`LrSchedule::MAX_WARMUP`] steps: AdamW starts from empty moments, also when the run
    /// starts from an exported head), then a cosine down to a tenth of the rate at the last step.
    Cosine,
}

impl LrSchedule {
    /// The floor (and warm-up start) as a share of the rate.
    pub const FLOOR: f64 = 0.1;
    /// Longest warm-up, in optimiser steps.
    pub const MAX_WARMUP: usize = 100;

    /// The rate for optimiser step `step` (0-based) of a run of `steps`, peak rate `lr`.
    pub fn at(self, lr: f64, step: usize, steps: usize) -> f64 {
        match self {
            LrSchedule::Constant => lr,
            LrSchedule::Cosine => {
                let warmup = (steps / 20).min(Self::MAX_WARMUP);
                let floor = lr * Self::FLOOR;
                if step < warmup {
                    return floor + (lr - floor) * step as f64 / warmup as f64;
                }
                let span = steps.saturating_sub(warmup + 1).max(1);
                let done = (step - warmup).min(span) as f64 / span as f64;
                floor + (lr - floor) * 0.5 * (1.0 + (std::f64::consts::PI * done).cos())
            }
        }
    }

    /// Parse `constant` or `cosine`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "constant" => Some(LrSchedule::Constant),
            "cosine" => Some(LrSchedule::Cosine),
            _ => None,
        }
    }

    /// The name [`LrSchedule::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            LrSchedule::Constant => "constant",
            LrSchedule::Cosine => "cosine",
        }
    }
}

/// How a run trains.
#[derive(Debug, Clone, Copy)]
pub struct TrainOptions {
    /// Chain steps the head is unrolled for.
    pub k: usize,
    /// AdamW's (peak) learning rate.
    pub lr: f64,
    /// How a run moves the rate over its steps (a [`Trainer`] driven step by step keeps `lr`
    /// unless told otherwise: [`Trainer::set_lr`]).
    pub schedule: LrSchedule,
    /// Longest training sequence (longer ones are cut).
    pub max_len: usize,
    /// Most positions (sequences times the longest one's length) an optimiser step reads.
    pub batch_tokens: usize,
    /// Bytes of the target's outputs kept on the device ([`targets::TargetCache`]).
    pub cache_bytes: usize,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            k: 3,
            lr: 2e-4,
            schedule: LrSchedule::Constant,
            max_len: 512,
            batch_tokens: 4096,
            cache_bytes: 8 << 30,
        }
    }
}

/// One training sequence: its tokens, and where its answer starts (only the predictions of
/// tokens after the answer's first count; 0: every prediction).
#[derive(Debug, Clone, Copy)]
pub struct Example<'a> {
    /// Token ids (cut to the options' `max_len`).
    pub seq: &'a [u32],
    /// The answer's first position.
    pub answer_from: usize,
}

impl Example<'_> {
    /// The answer's tokens (none where it starts past the sequence).
    pub fn answer(&self) -> &[u32] {
        &self.seq[self.answer_from.min(self.seq.len())..]
    }
}

/// What one optimiser step saw.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// Mean cross-entropy over the chain steps (each the mean over its counted rows).
    pub loss: f32,
    /// Per chain step, the share of counted rows where the head's argmax is the target's (0
    /// where none counted).
    pub agreement: Vec<f32>,
    /// Per chain step, the rows counted.
    pub counted: Vec<usize>,
    /// Positions of the sequences.
    pub tokens: usize,
    /// Predictions counted, over all chain steps.
    pub predicted: usize,
    /// Evaluation only: the greedy chain of k drafts walked over each answer as decoding would
    /// walk it ([`walk`]), summed over the batch's sequences.
    pub walk: Option<Walk>,
}

/// Target passes and tokens of a walk of greedy chains over answers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Walk {
    /// Verification steps (target passes).
    pub steps: usize,
    /// Tokens they emit (accepted drafts and the target's own token of each step).
    pub emitted: usize,
}

impl Walk {
    /// Tokens a target pass: the tau a chain of k would measure.
    pub fn tau(&self) -> f32 {
        if self.steps == 0 {
            1.0
        } else {
            self.emitted as f32 / self.steps as f32
        }
    }
}

/// The walk of greedy chains over one answer, from teacher-forced hits: `hits[j][p]` says
/// whether chain step j + 1 drafted from the root at position p + 1 (row p of step 1 pairs
/// `h_p` with the root `x_{p+1}`) is the target's token, with the earlier steps' tokens right.
/// Roots run over rows `first..end` (from the answer's first token to its last but one); a step
/// accepts the leading hits, emits them and the target's own token, and the next root is that
/// token, at row p + accepted + 1. This is what decoding with a chain of k and no threshold does
/// (a drafted token that is right is the token teacher forcing feeds the next step), so its tau
/// is the one `bench` measures for `mtp:k@0`, where per-row agreement counts every position
/// once, easy stretches (which a step crosses in one go) as often as hard ones. Rows past a
/// step's end are misses (drafts the answer has no room for).
pub fn walk(hits: &[Vec<bool>], first: usize, end: usize) -> Walk {
    let mut w = Walk::default();
    let mut p = first;
    while p < end {
        let accepted = hits
            .iter()
            .take_while(|h| h.get(p).copied().unwrap_or(false))
            .count();
        w.steps += 1;
        w.emitted += accepted + 1;
        p += accepted + 1;
    }
    w
}

/// A training run over a frozen target.
pub struct Trainer {
    head: TrainableHead,
    opt: AdamW,
    /// The LM head trained through: the target's (f32), or its rows of the draft vocabulary.
    lm_head: Tensor,
    /// The draft vocabulary's ids, ascending (host and device), when there is one.
    vocab: Option<(Vec<u32>, Tensor)>,
    cos: Tensor,
    sin: Tensor,
    opts: TrainOptions,
    cache: TargetCache,
}

impl Trainer {
    /// Train `head` for `target` with `opts`.
    pub fn new(target: &Decoder, head: TrainableHead, opts: TrainOptions) -> Result<Self> {
        if opts.k == 0 || opts.max_len < 3 {
            return Err(Error::InvalidArgument(
                "training needs k >= 1 and sequences of at least 3 tokens".into(),
            ));
        }
        let opt = AdamW::new(
            head.vars().all_vars(),
            ParamsAdamW {
                lr: opts.lr,
                weight_decay: 0.0,
                ..Default::default()
            },
        )?;
        let cfg = target.config();
        let (cos, sin) = rope_tables(cfg, opts.max_len + opts.k, None, target.device())?;
        let layers = head.feature_layers();
        Ok(Trainer {
            head,
            opt,
            lm_head: target.lm_head_dense()?,
            vocab: None,
            cos,
            sin,
            opts,
            cache: TargetCache::new(opts.cache_bytes, layers),
        })
    }

    /// The head being trained.
    pub fn head(&self) -> &TrainableHead {
        &self.head
    }

    /// The head, to load a checkpoint into.
    pub fn head_mut(&mut self) -> &mut TrainableHead {
        &mut self.head
    }

    /// Draft among the tokens `ids` only (ascending, the target's ids; a reduced vocabulary,
    /// [`crate::model::draft_vocab`]): the head's loss and agreement through the LM head's rows
    /// of them, the target's probability of other tokens left out of its soft targets. Saved
    /// with the head ([`Trainer::save`]).
    pub fn with_draft_vocab(mut self, target: &Decoder, ids: Vec<u32>) -> Result<Self> {
        let vocab = target.config().vocab_size;
        if !crate::model::draft_vocab::is_set_of(&ids, vocab) {
            return Err(Error::InvalidArgument(format!(
                "a draft vocabulary must be a set of the target's {vocab} tokens in ascending order"
            )));
        }
        let device = target.device();
        let on_device = Tensor::from_vec(ids.clone(), ids.len(), device)?;
        self.lm_head = target.lm_head_dense()?.index_select(&on_device, 0)?;
        self.cache
            .set_index(Some(crate::model::draft_vocab::index_of(&ids, vocab)));
        self.vocab = Some((ids, on_device));
        Ok(self)
    }

    /// Write the head to `path` (safetensors, MiMo names: it loads as a drafter), its draft
    /// vocabulary beside its parameters.
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        let mut tensors = self.head.tensors()?;
        if let Some((ids, _)) = &self.vocab {
            tensors.insert(
                head::saved_name(crate::model::draft_vocab::STEM),
                crate::model::draft_vocab::to_tensor(ids)?,
            );
        }
        candle_core::safetensors::save(&tensors, path)
            .map_err(|e| Error::InvalidArgument(format!("{}: {e}", path.display())))
    }

    /// Sequences whose target outputs are kept, and their bytes.
    pub fn cache_usage(&self) -> (usize, usize) {
        self.cache.usage()
    }

    /// Set AdamW's learning rate for the steps that follow.
    pub fn set_lr(&mut self, lr: f64) {
        self.opt.set_learning_rate(lr);
    }
}

/// [`batches`] of `examples` (those `order` names) as [`Trainer::step`] reads them: each cut to
/// `opts.max_len`, up to `opts.batch_tokens` positions a batch.
pub fn batches_of(
    examples: &[Example<'_>],
    order: &[usize],
    opts: &TrainOptions,
) -> Vec<Vec<usize>> {
    batches(
        order,
        |i| examples[i].seq.len().min(opts.max_len),
        opts.batch_tokens,
    )
}

/// Batches of the sequences `order` names (their lengths `len`) for steps that read up to
/// `budget` positions each (sequences times the longest's length; one sequence at least): the
/// order taken in pools of 64, each sorted by length so that a batch's sequences are of like
/// lengths and little of it is padding.
pub fn batches(order: &[usize], len: impl Fn(usize) -> usize, budget: usize) -> Vec<Vec<usize>> {
    let mut out = vec![];
    for pool in order.chunks(64) {
        let mut pool = pool.to_vec();
        pool.sort_by_key(|&i| std::cmp::Reverse(len(i)));
        let mut cur: Vec<usize> = vec![];
        for i in pool {
            // Sorted longest first: the batch's first sequence is its longest.
            let longest = cur.first().map_or(len(i), |&f| len(f));
            if !cur.is_empty() && (cur.len() + 1) * longest > budget {
                out.push(std::mem::take(&mut cur));
            }
            cur.push(i);
        }
        if !cur.is_empty() {
            out.push(cur);
        }
    }
    out
}

/// Candidates a self-written prompt's token is drawn from: the target's top [`crate::gpu::TOP_K_MAX`]
/// (found on the device, so that a step of 32 rows brings back 32 short lists, not 32 whole
/// vocabularies to sort on the host).
const SELF_PROMPT_TOP_K: usize = crate::gpu::TOP_K_MAX;

/// Prompts the target writes itself (as in Magpie): after `prefix` (the chat template up to an
/// open user turn), `count` user messages sampled from the target ([`user_turns`]), each
/// returned as its content's token ids; fewer where draws stay empty or repetitive.
/// Deterministic for a `seed` on one device.
pub fn self_prompts(
    target: &mut Decoder,
    prefix: &[u32],
    count: usize,
    max_len: usize,
    stops: &std::collections::BTreeSet<u32>,
    seed: u64,
    progress: impl FnMut(usize),
) -> Result<Vec<Vec<u32>>> {
    if prefix.is_empty() {
        return Err(Error::InvalidArgument(
            "self-written prompts need the chat template's opening of a user turn".into(),
        ));
    }
    let prefixes = vec![prefix.to_vec(); count];
    let written = user_turns(target, &prefixes, max_len, stops, seed, progress)?;
    Ok(written.into_iter().flatten().collect())
}

/// User messages the target writes itself, one after each of `prefixes` (each the chat
/// template up to an open user turn: a new conversation's, or one that goes on): sampled at
/// temperature 1 over the target's top `SELF_PROMPT_TOP_K` tokens with top-p 0.95, up to a stop
/// token or `max_len` tokens, as their contents' token ids. Empty and repetitive draws are drawn
/// again (up to three more rounds); `None` where every draw was. Decoded side by side as
/// [`answers_batched`] does. Deterministic for a `seed` on one device.
pub fn user_turns(
    target: &mut Decoder,
    prefixes: &[Vec<u32>],
    max_len: usize,
    stops: &std::collections::BTreeSet<u32>,
    seed: u64,
    mut progress: impl FnMut(usize),
) -> Result<Vec<Option<Vec<u32>>>> {
    use rand::SeedableRng;
    if prefixes.iter().any(Vec::is_empty) {
        return Err(Error::InvalidArgument(
            "a user turn written by the target needs the chat template's opening of it".into(),
        ));
    }
    let params = crate::sampling::SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 0.95,
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // Each row of a step's logits: one draw among its top candidates, rows in order.
    let mut draw = |logits: &Tensor| -> Result<Vec<u32>> {
        Ok(crate::gpu::row_top_k(logits, SELF_PROMPT_TOP_K)?
            .iter()
            .map(|top| {
                let q = crate::sampling::distribution(&top.log_probs, &params);
                crate::sampling::draw(&q, &mut rng)
                    .and_then(|i| top.tokens.get(i as usize).copied())
                    .unwrap_or(0)
            })
            .collect())
    };
    let mut out: Vec<Option<Vec<u32>>> = vec![None; prefixes.len()];
    let mut done = 0;
    // Empty (a stop token first) and repetitive draws are drawn again, up to three more rounds.
    for _ in 0..4 {
        let missing: Vec<usize> = (0..out.len()).filter(|&i| out[i].is_none()).collect();
        if missing.is_empty() {
            break;
        }
        let asked: Vec<Vec<u32>> = missing.iter().map(|&i| prefixes[i].clone()).collect();
        let written = side_by_side(target, &asked, max_len, stops, &mut draw, |i| {
            progress(done + i)
        })?;
        for (&i, seq) in missing.iter().zip(written) {
            let mut content = seq[prefixes[i].len()..].to_vec();
            if content.last().is_some_and(|t| stops.contains(t)) {
                content.pop();
            }
            if !content.is_empty() && !degenerate(&content) {
                out[i] = Some(content);
                done += 1;
            }
        }
    }
    Ok(out)
}

/// True for a self-written prompt that is mostly repetition (`/ / / / ...`): of 16 tokens or
/// more, fewer than a quarter distinct.
fn degenerate(content: &[u32]) -> bool {
    let distinct: std::collections::BTreeSet<&u32> = content.iter().collect();
    content.len() >= 16 && distinct.len() * 4 < content.len()
}

/// Most sequences [`answers_batched`] decodes side by side.
pub const ANSWER_BATCH: usize = 32;

/// The target's own greedy answers: for each prompt (token ids, already templated), the prompt
/// followed by up to `max_new` tokens the target writes after it (up to a stop token, which is
/// kept). Several sequences are decoded a pass: the prompts of a group are packed into the cache side by
/// side, each row seeing only its own sequence's rows (as a draft tree's rows see only their
/// ancestors), so that a step decodes one token of every unfinished sequence in one pass. Groups
/// hold up to [`ANSWER_BATCH`] sequences whose prompts and answers fit the context together. On the
/// CPU and on the GPU step (whose kernels are batch-invariant) a row's logits do not depend on the
/// other rows of its pass, so the answers are those of decoding one sequence at a time (the
/// reference in `tests/train.rs`).
pub fn answers_batched(
    target: &mut Decoder,
    prompts: &[Vec<u32>],
    max_new: usize,
    stops: &std::collections::BTreeSet<u32>,
    progress: impl FnMut(usize),
) -> Result<Vec<Vec<u32>>> {
    side_by_side(
        target,
        prompts,
        max_new,
        stops,
        crate::model::decoder::argmax_rows,
        progress,
    )
}

/// The decoding loop of [`answers_batched`], each step's tokens chosen by `pick` from the
/// `[rows, vocab]` logits of the sequences that go on (in group order).
fn side_by_side(
    target: &mut Decoder,
    prompts: &[Vec<u32>],
    max_new: usize,
    stops: &std::collections::BTreeSet<u32>,
    mut pick: impl FnMut(&Tensor) -> Result<Vec<u32>>,
    mut progress: impl FnMut(usize),
) -> Result<Vec<Vec<u32>>> {
    use crate::arch::batch::{BlockMask, PastMask};
    /// One sequence of a group: its tokens, its cache rows, and the answer tokens it may still add.
    struct Seq {
        tokens: Vec<u32>,
        rows: Vec<usize>,
        left: usize,
        next: u32,
    }
    let context = target.context();
    let no_logits = || Error::InvalidArgument("the target gave no logits".into());
    let live: Vec<&Vec<u32>> = prompts.iter().filter(|p| !p.is_empty()).collect();
    let mut out = Vec::with_capacity(live.len());
    let mut at = 0;
    while at < live.len() {
        // A group: as many prompts as fit the context with their longest answers.
        let mut group: Vec<Seq> = vec![];
        let mut need = 0;
        while at < live.len() && group.len() < ANSWER_BATCH {
            let p = live[at];
            let fit = context.saturating_sub(p.len() + 1).min(max_new);
            if !group.is_empty() && need + p.len() + fit > context {
                break;
            }
            need += p.len() + fit;
            group.push(Seq {
                tokens: p.clone(),
                rows: vec![],
                left: fit,
                next: 0,
            });
            at += 1;
        }
        // Each prompt after the others', seeing only itself.
        target.reset();
        for s in &mut group {
            let (base, n) = (target.len(), s.tokens.len());
            let out = target.forward(
                &Batch::causal(&s.tokens, base)
                    .with_positions((0..n).collect())
                    .with_past_mask(PastMask {
                        start: 0,
                        visible: vec![vec![]; n],
                    })
                    .with_logits_rows(vec![n - 1]),
            )?;
            s.rows = (base..base + n).collect();
            s.next = pick(&out.logits.ok_or_else(no_logits)?)?
                .first()
                .copied()
                .ok_or_else(no_logits)?;
        }
        // Steps: every unfinished sequence takes its token, and those that go on are fed together.
        loop {
            let mut fed: Vec<usize> = vec![];
            for (i, s) in group.iter_mut().enumerate() {
                if s.left == 0 {
                    continue;
                }
                s.tokens.push(s.next);
                s.left -= 1;
                if stops.contains(&s.next) {
                    s.left = 0;
                }
                if s.left > 0 {
                    fed.push(i);
                }
            }
            if fed.is_empty() {
                break;
            }
            let base = target.len();
            let tokens: Vec<u32> = fed.iter().map(|&i| group[i].next).collect();
            let positions: Vec<usize> = fed.iter().map(|&i| group[i].tokens.len() - 1).collect();
            let visible: Vec<Vec<usize>> = fed.iter().map(|&i| group[i].rows.clone()).collect();
            let logits = target
                .forward(
                    &Batch::causal(&tokens, base)
                        .with_positions(positions)
                        .with_mask(BlockMask::from_parents(&vec![None; fed.len()])?)
                        .with_past_mask(PastMask { start: 0, visible })
                        .all_logits(),
                )?
                .logits
                .ok_or_else(no_logits)?;
            for (j, (&i, next)) in fed.iter().zip(pick(&logits)?).enumerate() {
                group[i].rows.push(base + j);
                group[i].next = next;
            }
        }
        target.reset();
        out.extend(group.into_iter().map(|s| s.tokens));
        progress(out.len());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::LrSchedule;

    #[test]
    fn the_cosine_schedule_warms_up_then_falls_to_its_floor() {
        let (lr, steps) = (1e-3, 1000);
        let at = |s| LrSchedule::Cosine.at(lr, s, steps);
        assert!((at(0) - lr * LrSchedule::FLOOR).abs() < 1e-12);
        // The warm-up is a twentieth of the run here (50 steps): the peak right after it.
        assert!((at(50) - lr).abs() < 1e-12);
        assert!(at(25) > at(0) && at(25) < lr);
        assert!((at(steps - 1) - lr * LrSchedule::FLOOR).abs() < 1e-12);
        let after: Vec<f64> = (50..steps).map(at).collect();
        assert!(
            after.windows(2).all(|w| w[1] <= w[0]),
            "falls after the warm-up"
        );
        // Past the end (a run resumed with fewer --steps) it stays at the floor.
        assert!((at(steps + 10) - lr * LrSchedule::FLOOR).abs() < 1e-12);
        // A long run's warm-up stops at MAX_WARMUP steps; a tiny run still works.
        let long = |s| LrSchedule::Cosine.at(lr, s, 100_000);
        assert!((long(LrSchedule::MAX_WARMUP) - lr).abs() < 1e-12);
        assert!(LrSchedule::Cosine.at(lr, 0, 1).is_finite());
        assert_eq!(LrSchedule::Constant.at(lr, 7, steps), lr);
        for s in [LrSchedule::Constant, LrSchedule::Cosine] {
            assert_eq!(LrSchedule::parse(s.name()), Some(s));
        }
    }
}
