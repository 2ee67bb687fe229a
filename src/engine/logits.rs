//! Logits of the verified tree's nodes.

use crate::error::{Error, Result};
use crate::model::decoder::Decoder;
use candle_core::Tensor;

/// Logits of verified nodes: all computed in the pass (GPU), or computed from the final hidden
/// states for just the nodes the walk needs (CPU, where the LM head's cost grows with every row):
/// the drafter's greedy chain in one batch up front, any other node on demand.
pub(super) struct NodeLogits<'a> {
    model: &'a Decoder,
    rows: std::cell::RefCell<std::collections::HashMap<usize, Vec<f32>>>,
    hidden: Option<Tensor>,
}

impl<'a> NodeLogits<'a> {
    pub(super) fn new(
        model: &'a Decoder,
        logits: Option<Tensor>,
        hidden: Option<Tensor>,
    ) -> Result<Self> {
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
    pub(super) fn prefetch(&self, nodes: &[usize]) -> Result<()> {
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

    pub(super) fn row(&self, node: usize) -> Result<Vec<f32>> {
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
