//! A drafter's reduced vocabulary, after FR-Spec (Zhao et al., "FR-Spec: Accelerating
//! Large-Vocabulary Language Models via Frequency-Ranked Speculative Sampling",
//! arXiv:2502.14856): the head drafts only among the tokens the target writes most often, so
//! that its LM head, most of a draft step's work for a vocabulary of 150k, reads a fifth of the
//! rows. Verification still uses the target's whole vocabulary: a token outside the set is never
//! drafted, never wrongly accepted, and decoding stays lossless.
//!
//! A head file keeps the set as the vector `mtp.{i}.draft_vocab.weight` (token ids as f32, exact
//! below 2^24, ascending); the head's logits have one column per token of the set, in that order
//! ([`token_of`] maps a column back to its token).

use crate::error::Result;
use candle_core::{DType, Device, Tensor};
use std::collections::BTreeSet;

/// The token of logits column `column` of a drafter drafting among `vocab` (ascending ids), or
/// `column` itself where it drafts among the whole vocabulary (`None`).
pub fn token_of(vocab: Option<&[u32]>, column: u32) -> u32 {
    match vocab {
        None => column,
        Some(ids) => {
            debug_assert!(
                (column as usize) < ids.len(),
                "a column past the vocabulary"
            );
            ids.get(column as usize).copied().unwrap_or(0)
        }
    }
}

/// [`token_of`] for each of `columns`, in place.
pub fn tokens_of(vocab: Option<&[u32]>, columns: &mut [u32]) {
    if vocab.is_some() {
        for c in columns {
            *c = token_of(vocab, *c);
        }
    }
}

/// GGUF-style stem of the set's tensor within a head (`mtp.{i}.` before it).
pub const STEM: &str = "draft_vocab.weight";

/// The `size` tokens that occur most often in `seqs` (ties to the lower id), with every token
/// of `always` (stop tokens: a draft must be able to end an answer) in place of the least
/// frequent; ascending ids. The whole vocabulary (`None`) when `size` reaches `vocab`.
pub fn most_frequent<'a>(
    seqs: impl IntoIterator<Item = &'a [u32]>,
    size: usize,
    vocab: usize,
    always: &BTreeSet<u32>,
) -> Option<Vec<u32>> {
    if size == 0 || size >= vocab {
        return None;
    }
    let mut count = vec![0u64; vocab];
    for s in seqs {
        for &t in s {
            if let Some(c) = count.get_mut(t as usize) {
                *c += 1;
            }
        }
    }
    let mut order: Vec<u32> = (0..vocab as u32).collect();
    order.sort_by_key(|&t| (std::cmp::Reverse(count[t as usize]), t));
    let always: Vec<u32> = always
        .iter()
        .copied()
        .filter(|&t| (t as usize) < vocab)
        .collect();
    let mut chosen: BTreeSet<u32> = always.iter().copied().collect();
    for t in order {
        if chosen.len() >= size.max(always.len()) {
            break;
        }
        chosen.insert(t);
    }
    Some(chosen.into_iter().collect())
}

/// True when `ids` is a draft vocabulary for a vocabulary of `vocab`: not empty, ascending, each
/// id in it.
pub fn is_set_of(ids: &[u32], vocab: usize) -> bool {
    !ids.is_empty()
        && ids.windows(2).all(|w| w[0] < w[1])
        && ids.iter().all(|&t| (t as usize) < vocab)
}

/// The set as a head file keeps it: its ids as an f32 vector on the host.
pub fn to_tensor(ids: &[u32]) -> Result<Tensor> {
    let as_f32: Vec<f32> = ids.iter().map(|&t| t as f32).collect();
    Ok(Tensor::from_vec(as_f32, ids.len(), &Device::Cpu)?)
}

/// The set from the vector a head file keeps ([`to_tensor`]); refused where an entry is no
/// index (negative, fractional or past u32). Also how a head keeps its fused target layers
/// ([`crate::model::mtp::fusion`]).
pub fn from_tensor(t: &Tensor) -> Result<Vec<u32>> {
    t.to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?
        .into_iter()
        .map(|x| {
            if x >= 0.0 && x.fract() == 0.0 && x <= u32::MAX as f32 {
                Ok(x as u32)
            } else {
                Err(crate::error::Error::InvalidArgument(format!(
                    "a head file's index vector holds {x}, not an index"
                )))
            }
        })
        .collect()
}

/// For each token of a vocabulary of `vocab`, its index in the set `ids` (ascending), if it is
/// in it.
pub fn index_of(ids: &[u32], vocab: usize) -> Vec<Option<u32>> {
    let mut at = vec![None; vocab];
    for (i, &t) in ids.iter().enumerate() {
        if let Some(slot) = at.get_mut(t as usize) {
            *slot = Some(i as u32);
        }
    }
    at
}
