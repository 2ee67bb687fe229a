//! Training an MTP head for a target (`treespec train-drafter`): the frozen target reads each
//! training sequence with the quantised kernels the runtime uses and gives its pre-norm last hidden
//! states and its distributions; the head ([`head::TrainableHead`]) is unrolled for k chain steps
//! over the sequence with the attention of inference, and trained (AdamW) on the cross-entropy to
//! the target's distributions (soft targets, as in FastMTP / EAGLE-3's use of the target's own
//! outputs) through the target's LM head, held in f32.
//!
//! The data are the target's own greedy answers to prompts ([`answers_batched`]), so that the head learns
//! what the target says, with no dataset needed.

pub mod head;
pub mod run;

use crate::error::{Error, Result};
use crate::model::decoder::{rope_tables, Batch, Decoder};
use candle_core::{DType, Tensor, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use head::TrainableHead;

/// How a run trains.
#[derive(Debug, Clone, Copy)]
pub struct TrainOptions {
    /// Chain steps the head is unrolled for.
    pub k: usize,
    /// AdamW's learning rate.
    pub lr: f64,
    /// Longest training sequence (longer ones are cut).
    pub max_len: usize,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            k: 3,
            lr: 2e-4,
            max_len: 512,
        }
    }
}

/// What one optimiser step saw.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// Mean cross-entropy over the chain steps.
    pub loss: f32,
    /// Per chain step, the share of rows where the head's argmax is the target's.
    pub agreement: Vec<f32>,
    /// Positions of the sequence.
    pub tokens: usize,
    /// Predictions counted, over all chain steps.
    pub predicted: usize,
}

/// A training run over a frozen target.
pub struct Trainer {
    head: TrainableHead,
    opt: AdamW,
    lm_head: Tensor,
    cos: Tensor,
    sin: Tensor,
    opts: TrainOptions,
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
        Ok(Trainer {
            head,
            opt,
            lm_head: target.lm_head_dense()?,
            cos,
            sin,
            opts,
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

    /// One optimiser step on the sequence `seq` (cut to `max_len`); with `learn` false, only the
    /// loss and agreement (held-out evaluation). The head reads the whole sequence, but only the
    /// predictions of tokens after `answer_from` count (0: every prediction): a draft is only ever
    /// asked for past the answer's first token, and the chat template's fixed text, which every
    /// sequence repeats, would otherwise inflate the agreement and take the head's capacity.
    pub fn step(
        &mut self,
        target: &mut Decoder,
        seq: &[u32],
        answer_from: usize,
        learn: bool,
    ) -> Result<StepReport> {
        let seq = &seq[..seq.len().min(self.opts.max_len)];
        if seq.len() < 3 {
            return Err(Error::InvalidArgument(format!(
                "a training sequence of {} tokens is too short",
                seq.len()
            )));
        }
        let last = target.config().n_layers - 1;
        // Where a step's time goes, with TREESPEC_PROFILE=1 (`crate::profile`).
        let device = target.device().clone();
        let span = crate::profile::span("train: target pass", &device);
        target.reset();
        let out = target.forward(
            &Batch::causal(seq, 0)
                .all_logits()
                .with_hidden_layers(vec![last]),
        )?;
        target.reset();
        let logits = out
            .logits
            .ok_or_else(|| Error::InvalidArgument("the target gave no logits".into()))?;
        let t = seq.len();
        // Step j + 1's row p predicts the token after position p + j + 1 (the target's
        // distribution at p + j + 1), token p + j + 2: (j, the first row counted, rows counted).
        let counted_rows: Vec<(usize, usize, usize)> = (0..self.opts.k.min(t - 1))
            .map(|j| {
                let rows = t - j - 1;
                let first = (answer_from + 1).saturating_sub(j + 2).min(rows - 1);
                (j, first, rows - first)
            })
            .collect();
        // The target's distributions of the rows any step counts, from `lo` on.
        let lo = counted_rows
            .iter()
            .map(|&(j, first, _)| j + 1 + first)
            .min()
            .unwrap_or(1);
        let probs =
            candle_nn::ops::softmax_last_dim(&logits.narrow(0, lo, t - lo)?.to_dtype(DType::F32)?)?
                .detach();
        let hidden = out.hidden[0].to_dtype(DType::F32)?.detach();
        let embeds = target.embed(seq)?.to_dtype(DType::F32)?.detach();
        drop(span);
        let span = crate::profile::span("train: head's unrolled forward", &device);
        let unrolled = self
            .head
            .forward(&hidden, &embeds, &self.cos, &self.sin, self.opts.k)?;
        drop(span);
        let span = crate::profile::span("train: LM head, loss, agreement", &device);
        let mut losses = vec![];
        let mut agreement = vec![];
        let mut counted = 0;
        for (&(j, first, n), o) in counted_rows.iter().zip(&unrolled.outputs) {
            let want = probs.narrow(0, j + 1 + first - lo, n)?;
            let logits = o.narrow(0, first, n)?.matmul(&self.lm_head.t()?)?;
            counted += n;
            let logp = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
            let ce = (want.mul(&logp)?.sum(D::Minus1)?.neg()?).mean_all()?;
            losses.push(ce);
            // Kept on the device: one wait for all steps' figures, at the end.
            agreement.push(
                logits
                    .argmax(D::Minus1)?
                    .eq(&want.argmax(D::Minus1)?)?
                    .to_dtype(DType::F32)?
                    .mean_all()?,
            );
        }
        let agreement = Tensor::stack(&agreement, 0)?;
        let loss = (Tensor::stack(&losses, 0)?.mean_all())?;
        drop(span);
        if learn {
            let _span = crate::profile::span("train: backward and AdamW", &device);
            self.opt.backward_step(&loss)?;
        }
        Ok(StepReport {
            loss: loss.to_scalar::<f32>()?,
            agreement: agreement.to_vec1::<f32>()?,
            tokens: t,
            predicted: counted,
        })
    }
}

/// Candidates a self-written prompt's token is drawn from: the target's top [`crate::gpu::TOP_K_MAX`]
/// (found on the device, so that a step of 32 rows brings back 32 short lists, not 32 whole
/// vocabularies to sort on the host).
const SELF_PROMPT_TOP_K: usize = crate::gpu::TOP_K_MAX;

/// Prompts the target writes itself (as in Magpie): after `prefix` (the chat template up to an
/// open user turn), `count` user messages sampled from the target (temperature 1 over its top
/// [`SELF_PROMPT_TOP_K`] tokens, top-p 0.95) up to a stop token or `max_len` tokens, each
/// returned as its content's token ids; empty and repetitive draws are drawn again (up to three
/// more rounds). Decoded side by side as [`answers_batched`] does. Deterministic for a `seed` on one device.
pub fn self_prompts(
    target: &mut Decoder,
    prefix: &[u32],
    count: usize,
    max_len: usize,
    stops: &std::collections::BTreeSet<u32>,
    seed: u64,
    mut progress: impl FnMut(usize),
) -> Result<Vec<Vec<u32>>> {
    use rand::SeedableRng;
    if prefix.is_empty() {
        return Err(Error::InvalidArgument(
            "self-written prompts need the chat template's opening of a user turn".into(),
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
    let mut out: Vec<Vec<u32>> = Vec::with_capacity(count);
    // Empty (a stop token first) and repetitive draws are drawn again, up to three more rounds.
    for _ in 0..4 {
        let missing = count - out.len();
        if missing == 0 {
            break;
        }
        let done = out.len();
        let written = side_by_side(
            target,
            &vec![prefix.to_vec(); missing],
            max_len,
            stops,
            &mut draw,
            |i| progress(done + i),
        )?;
        for seq in written {
            let mut content = seq[prefix.len()..].to_vec();
            if content.last().is_some_and(|t| stops.contains(t)) {
                content.pop();
            }
            if !content.is_empty() && !degenerate(&content) {
                out.push(content);
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
    use crate::model::decoder::{BlockMask, PastMask};
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
