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

/// The cross-entropy of `softmax(o lm_head^T)` against sparse soft targets (`ids` `[rows, K]`
/// u32, the target's tokens, most likely first; `weights` `[rows, K]` f32, their probabilities
/// summing to one), with its gradient with respect to `o` `[rows, hidden]` times `scale`. `o`
/// is read detached; `lm_head` is `[vocab, hidden]`.
pub fn soft_cross_entropy(
    o: &Tensor,
    lm_head: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    scale: f64,
) -> Result<RowsLoss> {
    let rows = o.dim(0)?;
    let o = o.detach();
    let w_t = lm_head.t()?;
    let (mut ce, mut agreed, mut grads) = (vec![], vec![], vec![]);
    for at in (0..rows).step_by(LOGIT_ROWS) {
        let n = LOGIT_ROWS.min(rows - at);
        let (ids, w) = (ids.narrow(0, at, n)?, weights.narrow(0, at, n)?);
        let logits = o.narrow(0, at, n)?.matmul(&w_t)?;
        let logp = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
        ce.push((w.mul(&logp.gather(&ids, 1)?)?.sum_all()?.neg())?);
        let best = ids.narrow(1, 0, 1)?.squeeze(1)?;
        agreed.push(logits.argmax(D::Minus1)?.eq(&best)?.to_dtype(DType::F32)?);
        // d ce / d logits = softmax - w (w sums to one per row).
        let d = logp.exp()?.scatter_add(&ids, &w.neg()?, 1)?;
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

/// The target's sparse soft targets from its log-probabilities' top entries: token ids and
/// probabilities renormalised over them, as `[rows, K]` tensors on `device`.
pub fn sparse_targets(
    top: &[crate::tree::DepthTopK],
    device: &candle_core::Device,
) -> Result<(Tensor, Tensor)> {
    let k = TARGET_TOP_K;
    let (mut ids, mut ws) = (Vec::with_capacity(top.len() * k), Vec::with_capacity(top.len() * k));
    for row in top {
        let best = row.log_probs.first().copied().unwrap_or(0.0);
        let p: Vec<f32> = row.log_probs.iter().map(|l| (l - best).exp()).collect();
        let sum: f32 = p.iter().sum();
        for i in 0..k {
            // A vocabulary smaller than K: the missing entries repeat the best token at weight 0.
            ids.push(row.tokens.get(i).or(row.tokens.first()).copied().unwrap_or(0));
            ws.push(p.get(i).map_or(0.0, |x| x / sum));
        }
    }
    let rows = top.len();
    Ok((
        Tensor::from_vec(ids, (rows, k), device)?,
        Tensor::from_vec(ws, (rows, k), device)?,
    ))
}
