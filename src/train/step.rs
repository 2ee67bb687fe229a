//! One optimiser step of a [`Trainer`] ([`Trainer::step`]): the target's outputs for a batch of
//! sequences side by side (kept after their first reading), the head unrolled over them, the
//! loss of each chain step through the LM head with its gradient, and the figures the step
//! reports (evaluating, also the walk of greedy chains over each answer, [`super::walk`]).

use super::targets::SequenceTargets;
use super::{loss, Example, StepReport, Trainer, Walk};
use crate::error::{Error, Result};
use crate::model::decoder::Decoder;
use candle_core::{DType, Device, Tensor};
use candle_nn::Optimizer;
use std::sync::Arc;

/// The rows `first..end` of sequence `seq` that a chain step counts.
struct Counted {
    seq: usize,
    first: usize,
    end: usize,
}

impl Counted {
    fn len(&self) -> usize {
        self.end - self.first
    }
}

/// Which rows of a batch's unrolled outputs count.
struct Rows {
    /// Per chain step, each sequence's counted rows.
    counted: Vec<Vec<Counted>>,
    /// Per chain step, the rows counted.
    counts: Vec<usize>,
    /// The batch's longest sequence: sequence s's row p is row `s * t + p` of a step's outputs.
    t: usize,
}

/// What the chain steps' losses give: the surrogate whose gradient is the loss's, and per chain
/// step that counted rows its cross-entropy (scaled) and agreed rows, and (evaluating) its hits.
struct Losses {
    surrogate: Option<Tensor>,
    figures: Vec<(Tensor, Tensor)>,
    hit_rows: Vec<(usize, Tensor)>,
}

impl Trainer {
    /// One optimiser step on the sequences of `batch` side by side (each cut to `max_len`); with
    /// `learn` false, only the loss and agreement (held-out evaluation). The head reads whole
    /// sequences, but only the predictions of tokens after each one's `answer_from` count: a
    /// draft is only ever asked for past the answer's first token, and the chat template's fixed
    /// text, which every sequence repeats, would otherwise inflate the agreement and take the
    /// head's capacity.
    pub fn step(
        &mut self,
        target: &mut Decoder,
        batch: &[Example<'_>],
        learn: bool,
    ) -> Result<StepReport> {
        let k = self.opts.k;
        let (seqs, t) = self.cut(batch)?;
        // Where a step's time goes, with TREESPEC_PROFILE=1 (`crate::profile`).
        let device = target.device().clone();
        let span = crate::profile::span("train: target's outputs (kept after the first)", &device);
        let outs = seqs
            .iter()
            .map(|s| self.cache.get(target, s))
            .collect::<Result<Vec<_>>>()?;
        let (hidden, embeds) = side_by_side(target, &seqs, &outs, t, k)?;
        drop(span);
        let span = crate::profile::span("train: head's unrolled forward", &device);
        let unrolled = self
            .head
            .forward(&hidden, &embeds, &self.cos, &self.sin, k)?;
        drop(span);
        let span = crate::profile::span("train: LM head, loss and its gradient", &device);
        let rows = counted_rows(&seqs, batch, k, t);
        let losses = self.losses(&rows, &unrolled.outputs, &outs, &device, learn)?;
        drop(span);
        if learn {
            if let Some(s) = &losses.surrogate {
                let _span = crate::profile::span("train: backward and AdamW", &device);
                self.opt.backward_step(s)?;
            }
        }
        let (ce, agreement) = figures(losses.figures, &rows.counts)?;
        // Evaluation: each answer walked as greedy chains would walk it.
        let walk = if learn {
            None
        } else {
            Some(walked(&seqs, batch, &rows.counted, losses.hit_rows, k)?)
        };
        Ok(StepReport {
            loss: ce,
            agreement,
            tokens: seqs.iter().map(|s| s.len()).sum(),
            predicted: rows.counts.iter().sum(),
            counted: rows.counts,
            walk,
        })
    }

    /// The sequences of `batch`, each cut to `max_len`, and the longest's length; an error for a
    /// sequence too short to train on or an empty batch.
    fn cut<'a>(&self, batch: &[Example<'a>]) -> Result<(Vec<&'a [u32]>, usize)> {
        let seqs: Vec<&[u32]> = batch
            .iter()
            .map(|e| &e.seq[..e.seq.len().min(self.opts.max_len)])
            .collect();
        if let Some(s) = seqs.iter().find(|s| s.len() < 3) {
            return Err(Error::InvalidArgument(format!(
                "a training sequence of {} tokens is too short",
                s.len()
            )));
        }
        let Some(t) = seqs.iter().map(|s| s.len()).max() else {
            return Err(Error::InvalidArgument("an empty training batch".into()));
        };
        Ok((seqs, t))
    }

    /// The loss of every chain step that counts rows, through the LM head: each step's counted
    /// rows of `outputs` (the unrolled head's) against the target's distributions `outs` there,
    /// the losses scaled to a mean over the steps, and the surrogate `sum(output * grad)` whose
    /// gradient is the loss's.
    fn losses(
        &self,
        rows: &Rows,
        outputs: &[Tensor],
        outs: &[Arc<SequenceTargets>],
        device: &Device,
        learn: bool,
    ) -> Result<Losses> {
        let steps = rows.counts.iter().filter(|&&n| n > 0).count().max(1);
        let t = rows.t;
        let mut surrogate: Option<Tensor> = None;
        let mut figures = vec![];
        let mut hit_rows = vec![];
        for (j, (spans, &n)) in rows.counted.iter().zip(&rows.counts).enumerate() {
            if n == 0 {
                continue;
            }
            let at: Vec<u32> = spans
                .iter()
                .flat_map(|c| (c.first..c.end).map(move |p| (c.seq * t + p) as u32))
                .collect();
            let at = Tensor::from_vec(at, n, device)?;
            let o = outputs[j].index_select(&at, 0)?;
            // Row p's target is the sequence's position p + j + 1.
            let target_rows = |of: fn(&SequenceTargets) -> &Tensor| -> Result<Tensor> {
                let parts = spans
                    .iter()
                    .map(|c| of(&outs[c.seq]).narrow(0, c.first + j + 1, c.len()))
                    .collect::<candle_core::Result<Vec<_>>>()?;
                Ok(Tensor::cat(&parts, 0)?)
            };
            let scale = 1.0 / (n * steps) as f64;
            let r = loss::soft_cross_entropy(
                &o,
                &self.lm_head,
                &loss::RowTargets {
                    ids: &target_rows(|o| &o.ids)?,
                    weights: &target_rows(|o| &o.weights)?,
                    best: &target_rows(|o| &o.best)?,
                    vocab: self.vocab.as_ref().map(|(_, v)| v),
                },
                scale,
            )?;
            let part = (o * &r.grad)?.sum_all()?;
            surrogate = Some(match surrogate {
                Some(s) => (s + part)?,
                None => part,
            });
            figures.push(((r.ce_sum * scale)?, r.agreed));
            if !learn {
                hit_rows.push((j, r.hits));
            }
        }
        Ok(Losses {
            surrogate,
            figures,
            hit_rows,
        })
    }
}

/// The head's inputs for `seqs` side by side: the target's hidden states (`outs`) padded to `t`
/// rows (the longest sequence's length), and the sequences' embeddings (f32) padded to `t + k`.
fn side_by_side(
    target: &Decoder,
    seqs: &[&[u32]],
    outs: &[Arc<SequenceTargets>],
    t: usize,
    k: usize,
) -> Result<(Tensor, Tensor)> {
    let device = target.device();
    let padded = |x: &Tensor, to: usize| -> Result<Tensor> {
        let (n, width) = x.dims2()?;
        Ok(if n == to {
            x.clone()
        } else {
            Tensor::cat(
                &[x, &Tensor::zeros((to - n, width), DType::F32, device)?],
                0,
            )?
        })
    };
    let hidden = Tensor::stack(
        &outs
            .iter()
            .map(|o| padded(&o.hidden, t))
            .collect::<Result<Vec<_>>>()?,
        0,
    )?;
    let embeds = Tensor::stack(
        &seqs
            .iter()
            .map(|s| padded(&target.embed(s)?.to_dtype(DType::F32)?, t + k))
            .collect::<Result<Vec<_>>>()?,
        0,
    )?
    .detach();
    Ok((hidden, embeds))
}

/// The rows each of `k` chain steps counts over `seqs` (`batch`'s sequences, cut; the longest
/// `t` long). Chain step j + 1's row p of a sequence of t_s positions predicts the token after
/// position p + j + 1 (the target's distribution there), for rows p < t_s - j - 1 from the first
/// past the answer's start: per step, each sequence's counted rows.
fn counted_rows(seqs: &[&[u32]], batch: &[Example<'_>], k: usize, t: usize) -> Rows {
    let counted: Vec<Vec<Counted>> = (0..k)
        .map(|j| {
            seqs.iter()
                .zip(batch)
                .enumerate()
                .filter_map(|(seq, (s, e))| {
                    let end = s.len().checked_sub(j + 1)?;
                    // None when the answer starts past the (cut) sequence: only prompt left.
                    let first = (e.answer_from + 1).saturating_sub(j + 2);
                    (first < end).then_some(Counted { seq, first, end })
                })
                .collect()
        })
        .collect();
    let counts: Vec<usize> = counted
        .iter()
        .map(|c| c.iter().map(Counted::len).sum())
        .collect();
    Rows { counted, counts, t }
}

/// The step's mean cross-entropy and its per-step agreement (0 for a step that counted no rows)
/// from each counting step's `(scaled cross-entropy, agreed rows)`, read back in one wait.
fn figures(figures: Vec<(Tensor, Tensor)>, counts: &[usize]) -> Result<(f32, Vec<f32>)> {
    let (ce, agreed): (Vec<Tensor>, Vec<Tensor>) = figures.into_iter().unzip();
    let ce: f32 = if ce.is_empty() {
        0.0
    } else {
        Tensor::stack(&ce, 0)?.sum_all()?.to_scalar::<f32>()?
    };
    let agreed = if agreed.is_empty() {
        vec![]
    } else {
        Tensor::stack(&agreed, 0)?.to_vec1::<f32>()?
    };
    let mut agreed = agreed.into_iter();
    let agreement = counts
        .iter()
        .map(|&n| {
            if n == 0 {
                0.0
            } else {
                agreed.next().unwrap_or(0.0) / n as f32
            }
        })
        .collect();
    Ok((ce, agreement))
}

/// The walk of greedy chains of `k` over each answer of `batch` (its sequences `seqs`, cut),
/// summed: from each counting chain step's hits (`hit_rows`, over its `counted` rows).
fn walked(
    seqs: &[&[u32]],
    batch: &[Example<'_>],
    counted: &[Vec<Counted>],
    hit_rows: Vec<(usize, Tensor)>,
    k: usize,
) -> Result<Walk> {
    let mut hits: Vec<Vec<Vec<bool>>> =
        seqs.iter().map(|s| vec![vec![false; s.len()]; k]).collect();
    for (j, h) in hit_rows {
        let mut h = h.to_vec1::<f32>()?.into_iter();
        for c in &counted[j] {
            for (p, x) in (c.first..c.end).zip(h.by_ref()) {
                hits[c.seq][j][p] = x > 0.5;
            }
        }
    }
    let mut total = Walk::default();
    for ((h, s), e) in hits.iter_mut().zip(seqs).zip(batch) {
        // Step j's row p drafts token p + j + 2: rows while the sequence holds it and the
        // target's token after it (a step's drafts leave room for that).
        for (j, row) in h.iter_mut().enumerate() {
            row.truncate(s.len().saturating_sub(j + 3));
        }
        let w = super::walk(
            h,
            e.answer_from.saturating_sub(1),
            s.len().saturating_sub(2),
        );
        total.steps += w.steps;
        total.emitted += w.emitted;
    }
    Ok(total)
}
