//! What the frozen target gives each training sequence (the hidden states the head reads and its
//! distribution at every position, as sparse soft targets), computed by one pass of the
//! target's own kernels the first time the sequence is trained on or evaluated, and kept on the
//! device up to a budget: later epochs and held-out records then cost the head alone.

use crate::error::{Error, Result};
use crate::model::decoder::{Batch, Decoder};
use candle_core::Tensor;
use std::collections::HashMap;
use std::sync::Arc;

/// The target's outputs for one sequence.
pub struct SequenceTargets {
    /// The outputs of the layers the head reads (its last, or those it fuses), side by side,
    /// `[t, layers * hidden]` f32.
    pub hidden: Tensor,
    /// Per position, the target's most likely tokens `[t, K]` (u32, most likely first), as rows
    /// of the LM head trained through (with a reduced vocabulary, those in it).
    pub ids: Tensor,
    /// Their probabilities, renormalised over them `[t, K]` (f32).
    pub weights: Tensor,
    /// Per position, the target's likeliest token `[t]` (u32, a whole-vocabulary id).
    pub best: Tensor,
}

impl SequenceTargets {
    /// The target's pass over `seq` (from an empty cache, which it leaves empty), with the
    /// outputs of `layers`; with a reduced vocabulary, `index` maps a token to its row there.
    pub fn compute(
        target: &mut Decoder,
        seq: &[u32],
        index: Option<&[Option<u32>]>,
        layers: &[usize],
    ) -> Result<Self> {
        target.reset();
        let out = target.forward(
            &Batch::causal(seq, 0)
                .all_logits()
                .with_hidden_layers(layers.to_vec()),
        );
        target.reset();
        let out = out?;
        let logits = out
            .logits
            .ok_or_else(|| Error::InvalidArgument("the target gave no logits".into()))?;
        let top = crate::gpu::row_top_k(&logits, super::loss::TARGET_TOP_K)?;
        let (ids, weights, best) = super::loss::sparse_targets(&top, index, target.device())?;
        let hidden = crate::model::mtp::fusion::side_by_side(&out.hidden, layers.len())?.detach();
        Ok(SequenceTargets {
            hidden,
            ids,
            weights,
            best,
        })
    }

    /// Bytes held on the device.
    fn bytes(&self) -> usize {
        [&self.hidden, &self.ids, &self.weights, &self.best]
            .iter()
            .map(|t| t.elem_count() * t.dtype().size_in_bytes())
            .sum()
    }
}

/// Sequences' targets, kept (by their tokens) while they fit a budget of bytes; past it they
/// are computed each time they are asked for.
pub struct TargetCache {
    kept: HashMap<Vec<u32>, Arc<SequenceTargets>>,
    bytes: usize,
    budget: usize,
    /// A reduced vocabulary's rows by token ([`SequenceTargets::compute`]).
    index: Option<Vec<Option<u32>>>,
    /// The target layers whose outputs are kept (the head's [`super::head::TrainableHead::feature_layers`]).
    layers: Vec<usize>,
}

impl TargetCache {
    /// An empty cache of the outputs of target layers `layers` that keeps up to `budget` bytes.
    pub fn new(budget: usize, layers: Vec<usize>) -> Self {
        TargetCache {
            kept: HashMap::new(),
            bytes: 0,
            budget,
            index: None,
            layers,
        }
    }

    /// Targets as rows of a reduced vocabulary (`index`: a token's row there), forgetting those
    /// kept.
    pub fn set_index(&mut self, index: Option<Vec<Option<u32>>>) {
        self.kept.clear();
        self.bytes = 0;
        self.index = index;
    }

    /// The targets of `seq`: kept ones, or the target's pass (kept if it fits).
    pub fn get(&mut self, target: &mut Decoder, seq: &[u32]) -> Result<Arc<SequenceTargets>> {
        if let Some(t) = self.kept.get(seq) {
            return Ok(t.clone());
        }
        let t = Arc::new(SequenceTargets::compute(
            target,
            seq,
            self.index.as_deref(),
            &self.layers,
        )?);
        let size = t.bytes();
        if self.bytes + size <= self.budget {
            self.bytes += size;
            self.kept.insert(seq.to_vec(), t.clone());
        }
        Ok(t)
    }

    /// Sequences kept, and their bytes.
    pub fn usage(&self) -> (usize, usize) {
        (self.kept.len(), self.bytes)
    }
}
