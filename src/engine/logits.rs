//! Logits of the verified tree's nodes, computed and moved only as far as the walk needs them.
//!
//! - On the CPU the LM head's cost grows with every row, so only the hidden states come out of
//!   the verify pass: the drafter's first-child chain gets its logits in one batch up front, any
//!   other node on demand.
//! - On a GPU the pass computes every row's logits, which stay on the device: a greedy walk reads
//!   one argmax per node (computed there, a few bytes back), a sampling walk copies back only the
//!   rows of the nodes it visits.

use crate::error::{Error, Result};
use crate::model::decoder::{argmax_rows, Decoder};
use candle_core::Tensor;
use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;

pub(super) struct NodeLogits<'a> {
    model: &'a Decoder,
    /// Rows already on the host.
    rows: RefCell<HashMap<usize, Vec<f32>>>,
    /// `[nodes, vocab]` logits on the device, when the pass computed them.
    logits: Option<Tensor>,
    /// Every node's argmax, computed on the device at the first greedy choice.
    argmax: OnceCell<Vec<u32>>,
    /// Final hidden states, when the pass left the LM head to the walk.
    hidden: Option<Tensor>,
}

impl<'a> NodeLogits<'a> {
    pub(super) fn new(model: &'a Decoder, logits: Option<Tensor>, hidden: Option<Tensor>) -> Self {
        NodeLogits {
            model,
            rows: RefCell::new(HashMap::new()),
            logits,
            argmax: OnceCell::new(),
            hidden,
        }
    }

    /// Compute the logits of `nodes` in one batch (a lazy LM head only).
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

    /// The logits row of `node`, on the host.
    pub(super) fn row(&self, node: usize) -> Result<Vec<f32>> {
        if let Some(r) = self.rows.borrow().get(&node) {
            return Ok(r.clone());
        }
        let row = match (&self.logits, &self.hidden) {
            (Some(l), _) => l.narrow(0, node, 1)?.squeeze(0)?.to_vec1::<f32>()?,
            (None, Some(h)) => self
                .model
                .logits_from_hidden(&h.narrow(0, node, 1)?)?
                .squeeze(0)?
                .to_vec1::<f32>()?,
            (None, None) => {
                return Err(Error::InvalidArgument(format!("no logits for node {node}")))
            }
        };
        self.rows.borrow_mut().insert(node, row.clone());
        Ok(row)
    }

    /// The target's greedy token at `node` (the lowest id among equal maxima).
    pub(super) fn argmax(&self, node: usize) -> Result<u32> {
        if let Some(l) = &self.logits {
            if self.argmax.get().is_none() {
                let _ = self.argmax.set(argmax_rows(l)?);
            }
            if let Some(&a) = self.argmax.get().and_then(|a| a.get(node)) {
                return Ok(a);
            }
        }
        let row = self.row(node)?;
        crate::sampling::argmax(&row)
            .ok_or_else(|| Error::InvalidArgument(format!("node {node} has no finite logit")))
    }
}
