//! The head's loss through the frozen LM head, with its gradient written out.
//!
//! The loss of a counted row is the cross-entropy of the head's distribution
//! `softmax(o W^T)` against the target's, kept as its top [`TARGET_TOP_K`] tokens with their
//! probabilities renormalised (sparse soft targets). Autograd through `o W^T` would keep the
//! `[rows, vocab]` logits and their softmax in the graph and, as candle's matmul backward
//! always does, also compute the gradient of the frozen `[vocab, hidden]` matrix: a second
//! product as large as the forward one, and a gigabyte of zeros to add it to. Instead the
//! gradient with respect to `o` is computed here directly, `(softmax(o W^T) - w) W`, in pieces of
//! rows, and the caller back-propagates it from `o` on through a surrogate `sum(o * G)`, whose
//! gradient with respect to `o` is `G`.

use crate::error::Result;
use candle_core::{DType, Tensor, D};

/// Tokens of the target's distribution a counted row keeps (the most likely, renormalised).
pub const TARGET_TOP_K: usize = crate::gpu::TOP_K_MAX;

/// Rows of the `[rows, vocab]` logits computed at once.
const LOGIT_ROWS: usize = 1024;

/// What [`soft_cross_entropy`] gives for rows `o`.
pub struct RowsLoss {
    /// Sum over the rows of the cross-entropy (a scalar on the device).
    pub ce_sum: Tensor,
    /// Rows whose argmax is the target's most likely token (a scalar f32 on the device).
    pub agreed: Tensor,
    /// Per row, 1 where it is and 0 where not (`[rows]` f32 on the device).
    pub hits: Tensor,
    /// `scale` times the gradient of `ce_sum` with respect to `o` (`[rows, hidden]`, detached).
    pub grad: Tensor,
}

/// The rows' targets as [`soft_cross_entropy`] reads them.
pub struct RowTargets<'a> {
    /// `[rows, K]` u32: the target's likeliest tokens, as rows of the LM head trained through.
    pub ids: &'a Tensor,
    /// `[rows, K]` f32: their probabilities, summing to one in a row, or all zero where none of
    /// the row's tokens is in a reduced vocabulary (such a row adds no loss).
    pub weights: &'a Tensor,
    /// `[rows]` u32: the target's likeliest token, a whole-vocabulary id.
    pub best: &'a Tensor,
    /// With a reduced vocabulary, its ids `[m]` u32 (the LM head's rows): what the head's argmax
    /// means.
    pub vocab: Option<&'a Tensor>,
}

/// The cross-entropy of `softmax(o lm_head^T)` against sparse soft targets `targets`, with its
/// gradient with respect to `o` `[rows, hidden]` times `scale`. `o` is read detached;
/// `lm_head` is `[vocab, hidden]` (a reduced vocabulary's rows, or all).
pub fn soft_cross_entropy(
    o: &Tensor,
    lm_head: &Tensor,
    targets: &RowTargets<'_>,
    scale: f64,
) -> Result<RowsLoss> {
    let rows = o.dim(0)?;
    let o = o.detach();
    let w_t = lm_head.t()?;
    let (mut ce, mut agreed, mut grads) = (vec![], vec![], vec![]);
    for at in (0..rows).step_by(LOGIT_ROWS) {
        let n = LOGIT_ROWS.min(rows - at);
        let ids = targets.ids.narrow(0, at, n)?;
        let w = targets.weights.narrow(0, at, n)?;
        let logits = o.narrow(0, at, n)?.matmul(&w_t)?;
        let logp = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
        ce.push((w.mul(&logp.gather(&ids, 1)?)?.sum_all()?.neg())?);
        let top = logits.argmax(D::Minus1)?;
        let top = match targets.vocab {
            Some(v) => v.index_select(&top, 0)?,
            None => top,
        };
        let best = targets.best.narrow(0, at, n)?;
        agreed.push(top.eq(&best)?.to_dtype(DType::F32)?);
        // d ce / d logits = softmax - w where w sums to one, 0 in a row without targets.
        let has = w.sum_keepdim(1)?.gt(0.0)?.to_dtype(DType::F32)?;
        let d = logp
            .exp()?
            .broadcast_mul(&has)?
            .scatter_add(&ids, &w.neg()?, 1)?;
        grads.push((d.matmul(lm_head)? * scale)?);
    }
    let hits = Tensor::cat(&agreed, 0)?;
    Ok(RowsLoss {
        ce_sum: Tensor::stack(&ce, 0)?.sum_all()?,
        agreed: hits.sum_all()?,
        hits,
        grad: Tensor::cat(&grads, 0)?,
    })
}

/// The target's sparse soft targets from its log-probabilities' top entries, as `[rows, K]`
/// tensors on `device`: token ids (with a reduced vocabulary, `index` maps a token to its row
/// there, and tokens outside it are left out) and probabilities renormalised over those kept;
/// and `[rows]` the likeliest token (a whole-vocabulary id).
pub fn sparse_targets(
    top: &[crate::tree::DepthTopK],
    index: Option<&[Option<u32>]>,
    device: &candle_core::Device,
) -> Result<(Tensor, Tensor, Tensor)> {
    let k = TARGET_TOP_K;
    let rows = top.len();
    let (mut ids, mut ws) = (Vec::with_capacity(rows * k), Vec::with_capacity(rows * k));
    let mut best = Vec::with_capacity(rows);
    for row in top {
        best.push(row.tokens.first().copied().unwrap_or(0));
        let most = row.log_probs.first().copied().unwrap_or(0.0);
        let kept: Vec<(u32, f32)> = row
            .tokens
            .iter()
            .zip(&row.log_probs)
            .filter_map(|(&t, &l)| {
                let at = match index {
                    Some(index) => index.get(t as usize).copied().flatten()?,
                    None => t,
                };
                Some((at, (l - most).exp()))
            })
            .collect();
        let sum: f32 = kept.iter().map(|(_, p)| p).sum();
        for i in 0..k {
            // Fewer than K kept: the missing entries point at row 0 with weight 0.
            let (at, p) = kept.get(i).copied().unwrap_or((0, 0.0));
            ids.push(at);
            ws.push(if sum > 0.0 { p / sum } else { 0.0 });
        }
    }
    Ok((
        Tensor::from_vec(ids, (rows, k), device)?,
        Tensor::from_vec(ws, (rows, k), device)?,
        Tensor::from_vec(best, rows, device)?,
    ))
}
