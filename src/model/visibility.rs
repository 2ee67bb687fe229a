//! A pass's visibility ([`VisibleKeys`], in `crate::arch::visible`) in the form its attention
//! path takes: the key lists of the batch-invariant kernel (`gpu::attention`) or a dense additive
//! mask for candle's ops.

use crate::arch::config::ModelConfig;
pub use crate::arch::visible::VisibleKeys;
use crate::error::Result;
use crate::gpu::attention::KeyTable;
use candle_core::{Device, Tensor};

/// A pass's visibility in the form its attention path takes, built once for all its layers.
pub enum Visibility {
    /// An additive mask for candle's ops (`None`: nothing masked).
    Dense(Option<Tensor>),
    /// Per-row key lists for the batch-invariant kernel.
    Listed(KeyTable),
}

impl Visibility {
    /// Whether models shaped as `cfg` on `device` take the kernel: for head shapes it supports,
    /// on the host always (its other path, candle's matmuls, sums in an order that depends on
    /// the pass's rows), on a GPU unless batch invariance is turned off
    /// (`TREESPEC_GPU_BATCH_INVARIANT=0`).
    pub fn listed_for(cfg: &ModelConfig, device: &Device) -> bool {
        (!device.is_cuda() || crate::arch::weights::gpu_batch_invariant())
            && crate::gpu::attention::supports(cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, device)
    }

    /// `keys` for the kernel (`listed`) or as a dense mask for heads shaped as in `cfg`.
    pub fn new(
        keys: &VisibleKeys,
        listed: bool,
        cfg: &ModelConfig,
        device: &Device,
    ) -> Result<Self> {
        Ok(if listed {
            Visibility::Listed(KeyTable::new(keys, device)?)
        } else {
            Visibility::Dense(keys.dense_mask(cfg.n_heads / cfg.n_kv_heads, device)?)
        })
    }
}
