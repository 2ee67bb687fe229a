//! The decoder's forward pass on a GPU as a fixed sequence of treespec's own launches over
//! buffers allocated once, in place of candle's ops: per layer a fused norm-and-quantise, the
//! q/k/v product, a fused bias + q/k norm + RoPE + KV-cache write, the two attention launches,
//! the output product, a fused residual + norm + quantise, the gate/up product, a fused SwiGLU +
//! quantise and the down product (9 to 13 launches a layer, against ~30 through candle, each
//! without candle's allocation and layout work).
//!
//! Every kernel of the default path is batch-invariant (`kernels/rows.cu`, `kernels/mmvq.cu`,
//! `kernels/mmtc.cu`, `kernels/mmq.cu`, `kernels/attention.cu`; not the wide passes' cuBLAS products and
//! tensor-core attention over the caches' f16 shadows, [`crate::gpu::wide`], which take a
//! prompt's passes of many rows, and verify passes only with `--wide-verify`): a row's values
//! never depend on how many rows the pass holds, so a verify pass of any size gives each row bit
//! for bit what a one-row decoding step gives it, and the quantised products take all rows in
//! one launch (chunks of four activation rows, or 8-row tensor-core tiles, along the grid)
//! instead of one launch per four rows. A target's Q4_K / Q6_K products run on tensor cores
//! (`kernels/mmtc.cu`) for passes of several rows and on a one-row kernel that sums in the same
//! order ([`tensor_cores_for`]), or (models that verify drafts, and hybrid models;
//! `TREESPEC_MMQ`) in the K-quant family of one summation contract ([`crate::gpu::mmq`],
//! [`mmq_wanted`]), whose activations the quantisers then write with one scale a super-block of
//! 256 values; the rest on dp4a. q/k/v and gate/up run
//! stacked in one launch where they share a format and kernel. On sm_90 and later (with a build
//! for it) the step's row, attention and tensor-core kernels are programmatic dependent launches
//! (`gpu::launch`): their blocks start while the kernel before them finishes, the products'
//! with their weights on the way; of the dp4a products only the one-row-a-warp kernel's launches
//! of up to 2048 blocks are (a wait in each of thousands of one-row blocks costs more than it
//! saves: `gpu::products::Dp4a`).
//!
//! Per-step values (token ids, positions, cache slots, the key lists) live in one device buffer
//! the kernels read, so a pass is captured once per shape (rows, logits rows, key-table width
//! rounded up to a power of two, attention-length bucket) as a CUDA graph and replayed: one
//! launch for the whole pass instead of ~300. That covers the one-row decoding step, the
//! drafter's catch-up passes and verify passes up to [`GRAPH_MAX_ROWS`] rows, those that copy
//! out hidden states for a drafter that reads them (MTP, DFlash) included (the graph copies them
//! into buffers of the step's own; the key names the layers)
//! (`TREESPEC_CUDA_GRAPHS=0` runs every pass eagerly). A capture failure turns graphs off with
//! one log line and the pass runs eagerly (only for passes that copy hidden states out, or only
//! for wide passes, where one of those failed).
//!
//! Built when the decoder runs on a GPU with quantised GGUF weights of types the product kernel
//! reads and heads the attention kernel takes ([`GpuStep::new`] says why not otherwise;
//! `TREESPEC_GPU_STEP=0` turns it off); every other decoder runs candle's ops.

use crate::arch::config::ModelConfig;
use crate::arch::visible::VisibleKeys;
use crate::error::{Error, Result};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::sync::Arc;

/// Weights, caches and tables of a decoder as the step reads them.
pub struct StepWeights<'a> {
    /// The model's shape.
    pub cfg: &'a ModelConfig,
    /// Token embedding table.
    pub embed: &'a crate::arch::weights::Embedding,
    /// Per layer.
    pub layers: Vec<LayerWeights<'a>>,
    /// Final norm weight.
    pub norm: &'a Tensor,
    /// LM head.
    pub lm_head: &'a crate::arch::weights::Linear,
    /// RoPE tables `[context, head_dim / 2]`.
    pub cos: &'a Tensor,
    /// See `cos`.
    pub sin: &'a Tensor,
    /// Per layer: the K and V cache tensors `[kv_heads, capacity, head_dim]`.
    pub caches: Vec<(&'a Tensor, &'a Tensor)>,
}

/// One layer's weights as the step reads them.
pub struct LayerWeights<'a> {
    /// Attention norm (the mixer's input norm).
    pub attn_norm: &'a Tensor,
    /// The projections of the normed input: q, k, v (one fused linear or three); a Gated
    /// DeltaNet's convolution input, output gate, beta and alpha, in that order.
    pub qkv: Vec<&'a crate::arch::weights::Linear>,
    /// Qwen3's per-head norms.
    pub q_norm: Option<&'a Tensor>,
    /// See `q_norm`.
    pub k_norm: Option<&'a Tensor>,
    /// Output projection (a Gated DeltaNet's out projection).
    pub o: &'a crate::arch::weights::Linear,
    /// What mixes the rows: attention (Qwen3.5's with its output gate) or a Gated DeltaNet.
    pub mixer: MixerKind<'a>,
    /// MLP norm.
    pub ffn_norm: &'a Tensor,
    /// gate and up projections: one fused linear or two.
    pub gate_up: Vec<&'a crate::arch::weights::Linear>,
    /// Down projection.
    pub down: &'a crate::arch::weights::Linear,
}

impl LayerWeights<'_> {
    /// A Gated DeltaNet layer's small weights on the GPU.
    pub fn gdn_weights(&self) -> Option<&crate::gpu::gdn::Weights> {
        match self.mixer {
            MixerKind::GatedDelta(g) => Some(g),
            MixerKind::Attention { .. } => None,
        }
    }
}

/// What mixes a layer's rows in the step.
#[derive(Clone, Copy)]
pub enum MixerKind<'a> {
    /// Attention over the K/V cache; `gated`: each query head is followed by its output gate in
    /// the q projection (Qwen3.5).
    Attention {
        /// See above.
        gated: bool,
    },
    /// A Gated DeltaNet layer (its small weights on the GPU).
    GatedDelta(&'a crate::gpu::gdn::Weights),
}

/// Most rows of a block whose Gated DeltaNet inputs the step keeps, so that any path of it can be
/// folded into the state after the walk (a verify pass's chain or tree); a longer chain (a
/// prompt) is folded whole as it runs, and a longer tree is refused.
pub const GDN_STASH_ROWS: usize = 64;

/// Whether the step takes a hybrid's block of rows continuing `parents`: a chain of any length
/// (folded as it runs past [`GDN_STASH_ROWS`]), or a tree of at most that many rows.
pub fn gdn_block_fits(parents: &[Option<usize>]) -> Result<()> {
    let n = parents.len();
    if n > GDN_STASH_ROWS && !crate::arch::batch::is_chain(parents) {
        return Err(Error::InvalidArgument(format!(
            "a draft tree of {n} rows over a hybrid model's GPU step (at most {GDN_STASH_ROWS})"
        )));
    }
    Ok(())
}

/// A hybrid model's Gated DeltaNet rows in a pass ([`StepInput::gdn`]).
pub struct GdnPass<'a> {
    /// Each row's parent in the block (`None`: it follows the committed rows).
    pub parents: &'a [Option<usize>],
    /// What to fold into the committed state first: the last block's kept path.
    pub fold: &'a crate::arch::batch::Fold,
}

/// Whether the step is wanted at all (`TREESPEC_GPU_STEP=0` turns it off).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TREESPEC_GPU_STEP").as_deref() != Ok("0"))
}

/// Kernel-name stem of a weight format the product kernel reads.
pub fn format_tag(dtype: GgmlDType) -> Option<&'static str> {
    Some(match dtype {
        GgmlDType::Q4_0 => "q4_0",
        GgmlDType::Q4_1 => "q4_1",
        GgmlDType::Q5_0 => "q5_0",
        GgmlDType::Q5_1 => "q5_1",
        GgmlDType::Q8_0 => "q8_0",
        GgmlDType::Q2K => "q2_k",
        GgmlDType::Q3K => "q3_k",
        GgmlDType::Q4K => "q4_k",
        GgmlDType::Q5K => "q5_k",
        GgmlDType::Q6K => "q6_k",
        _ => return None,
    })
}

/// Widest pass (rows) captured as a CUDA graph; wider passes launch eagerly (their launches cost
/// little beside their work).
pub const GRAPH_MAX_ROWS: usize = 64;

/// Inputs of one pass, as [`GpuStep::forward`] takes them.
pub struct StepInput<'a> {
    /// Token ids of the new rows.
    pub tokens: &'a [u32],
    /// Their RoPE positions.
    pub positions: &'a [usize],
    /// Cached rows before the block (the block's K/V go to `prefix..prefix + n`).
    pub prefix: usize,
    /// What each row attends to.
    pub keys: &'a VisibleKeys,
    /// Rows whose logits are wanted, in order (distinct).
    pub logits_rows: &'a [usize],
    /// Layers whose output hidden states are wanted.
    pub hidden_layers: &'a [usize],
    /// Rows fed to the first layer in place of the tokens' embeddings (`[n, hidden]` f32 on the
    /// step's GPU): an MTP head's input projection. `tokens` are then not read.
    pub inputs: Option<&'a Tensor>,
    /// A hybrid model's block shape and the fold before it (`None` without Gated DeltaNet
    /// layers).
    pub gdn: Option<GdnPass<'a>>,
}

/// An MTP head's own weights beside its block (which its step runs as the one layer, with the
/// head's final norm as the step's), for greedy chains drafted in one launch
/// ([`GpuStep::greedy_chain`]).
pub struct HeadStage<'a> {
    /// Norm of the hidden state fed in.
    pub hidden_norm: &'a Tensor,
    /// Norm of the token's embedding.
    pub token_norm: &'a Tensor,
    /// `[hidden, 2 * hidden]` over the two normed halves.
    pub input_proj: &'a crate::arch::weights::Linear,
    /// The concatenation's order: hidden state first (MiMo) or embedding first.
    pub hidden_first: bool,
    /// The LM head rows the head drafts among (the target's LM head, or its rows of a reduced
    /// vocabulary).
    pub lm_head: &'a crate::arch::weights::Linear,
    /// The target's token id of each row of `lm_head` (u32 on the step's GPU), when reduced.
    pub vocab: Option<&'a Tensor>,
}

/// Where a greedy chain of an MTP head ([`GpuStep::greedy_chain`]) starts.
#[derive(Clone, Copy)]
pub enum ChainStart<'a> {
    /// The block's output (`[1, hidden]`, before the final norm) at the position before
    /// `start`: depth 1 reads it.
    Row(&'a Tensor),
    /// A catch-up pass first: the target's hidden states `[n, hidden]` of positions
    /// `start..start + n`, each paired with the token after it (`tokens`), their K/V written to
    /// the head's cache (the caller counts them); the last row's output starts the chain.
    /// Not at position 0 (whose embedding the head zeroes).
    CatchUp {
        /// The target's hidden states.
        hidden: &'a Tensor,
        /// The token paired with each row.
        tokens: &'a [u32],
    },
}

#[cfg(feature = "cuda")]
pub use cuda::GpuStep;

/// Whether a model's Q4_K / Q6_K products run on tensor cores (`kernels/mmtc.cu`, or the K-quant
/// family of [`crate::gpu::mmq`] where [`mmq_wanted`]; GPUs from sm_80 on): a target's do (on
/// the H200 a verify pass of 2-8 rows then costs 1.35-1.5 one-row steps against 1.5-2.1, and its
/// one-row steps take a dp4a kernel that sums in the same order), a drafter's do not (its passes
/// are mostly one row). `TREESPEC_TENSOR_CORES=1` or `=0` sets both.
pub fn tensor_cores_for(drafter: bool) -> bool {
    match std::env::var("TREESPEC_TENSOR_CORES").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => !drafter,
    }
}

/// Whether a model whose products run on tensor cores ([`tensor_cores_for`]) takes the K-quant
/// family of one summation contract ([`crate::gpu::mmq`]: int8 tensor cores with a float term a
/// super-block, one order for every row count) instead of `kernels/mmtc.cu`: `TREESPEC_MMQ=1`
/// always, `0` never; unset, a model that `verifies` drafts (a drafter or an MTP head is loaded
/// beside it) and every hybrid (Gated DeltaNet) model. The family's verify passes of the sizes
/// chains and small trees use are cheaper at every shape (at 17-32 rows on the 1.5B `mmtc` is
/// ahead) for a one-row step as fast or a little slower: on the 1.5B shape (H100, section
/// 52) a 4-row pass 1.32 steps against 1.40, 5-8 rows 1.36-1.38 against 1.56-1.60, the step
/// within 2%; on the 8B shape 8 rows 1.34 against 2.65 for a step 5% slower (section 48); on the
/// 27B hybrid 4 rows 12.4 ms against 20.9 for a step 7% slower (section 44). A dense model loaded
/// for plain decoding alone keeps the faster step.
pub fn mmq_wanted(hybrid: bool, verifies: bool) -> bool {
    match std::env::var("TREESPEC_MMQ").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => hybrid || verifies,
    }
}

/// A step's wide products ([`crate::gpu::wide`]), for its runtime line and its callers.
#[derive(Debug, Clone, Copy)]
pub struct WideInfo {
    /// Rows from which passes go through them.
    pub from: usize,
    /// Bytes of their f16 copies.
    pub bytes: usize,
    /// Whether verify passes go through them too (`--wide-verify`).
    pub verify: bool,
    /// Where `from` came from.
    pub source: crate::gpu::wide::WideSource,
}

/// Without CUDA there is no step: [`GpuStep::new`] always declines.
#[cfg(not(feature = "cuda"))]
pub struct GpuStep;

#[cfg(not(feature = "cuda"))]
impl GpuStep {
    /// Never built without the `cuda` feature.
    pub fn new(
        _w: &StepWeights,
        _device: &Device,
        _family: bool,
    ) -> std::result::Result<Self, String> {
        Err("built without CUDA".into())
    }

    /// Unreachable: no step exists without CUDA.
    pub fn forward(&mut self, _input: &StepInput) -> Result<(Option<Tensor>, Vec<Tensor>)> {
        Err(Error::Device("no GPU step without CUDA".into()))
    }

    /// Nothing to turn on or off without CUDA.
    pub fn set_graphs(&mut self, _on: bool) {}

    /// No graphs without CUDA.
    pub fn graphs_on(&self) -> bool {
        false
    }

    /// No graphs without CUDA.
    pub fn hidden_graphs_on(&self) -> bool {
        false
    }

    /// Passes that did not replay a captured graph because their shape was new (see the CUDA
    /// build): always 0 here.
    pub fn cold_passes(&self) -> u64 {
        0
    }

    /// No streams without CUDA.
    pub fn set_high_priority(&mut self) -> Result<()> {
        Ok(())
    }

    /// No tensor cores without CUDA: always `false`.
    pub fn set_tensor_cores(&mut self, _on: bool) -> bool {
        false
    }

    /// No dependent launches without CUDA: always `false`.
    pub fn dependent_launches(&self) -> bool {
        false
    }

    /// No products without CUDA.
    pub fn products_name(&self) -> &'static str {
        "no products"
    }

    /// No products without CUDA.
    pub fn family(&self) -> bool {
        false
    }

    /// Unreachable: no step exists without CUDA.
    pub fn keep(&mut self, _base: usize, _rows: &[usize]) -> Result<()> {
        Err(Error::Device("no GPU step without CUDA".into()))
    }

    /// Nothing to mark without CUDA.
    pub fn mark_shadow_stale(&mut self) {}

    /// Nothing to mark without CUDA.
    pub fn shadow_fresh(&mut self) {}

    /// The row count from which passes use cuBLAS products, the bytes of their weight copies
    /// and whether verify passes do too (CUDA builds only).
    pub fn wide_products(&self) -> Option<WideInfo> {
        None
    }

    /// Nothing to set without CUDA.
    pub fn set_wide_from(&mut self, _from: usize) -> bool {
        false
    }

    /// No f16 copy of the LM head without CUDA.
    pub fn lm_head_copy(&self, _normed: &Tensor) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// Nothing to set without CUDA.
    pub fn set_wide_verify(&mut self, _on: bool) {}

    /// Never set without CUDA.
    pub fn set_head_stage(&mut self, _s: &HeadStage) -> std::result::Result<(), String> {
        Err("built without CUDA".into())
    }

    /// Unreachable: no step exists without CUDA.
    pub fn greedy_chain(
        &mut self,
        _from: ChainStart,
        _start: usize,
        _depth: usize,
        _k: usize,
    ) -> Result<Vec<crate::tree::DepthTopK>> {
        Err(Error::Device("no GPU step without CUDA".into()))
    }
}

/// A weight as the product kernels (`gpu::products`) read it.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(super) struct Mat {
    pub(super) ptr: u64,
    pub(super) tag: &'static str,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) _keep: Arc<QTensor>,
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn mat(
    l: &crate::arch::weights::Linear,
    what: &str,
) -> std::result::Result<(Mat, Option<Tensor>), String> {
    let (q, bias) = l
        .device_quantized()
        .ok_or_else(|| format!("{what} is not a quantised GPU weight"))?;
    let tag = format_tag(q.dtype()).ok_or_else(|| format!("{what} is {:?}", q.dtype()))?;
    let (rows, cols) = q.shape().dims2().map_err(|e| e.to_string())?;
    let ptr = q.device_ptr().map_err(|e| e.to_string())? as u64;
    Ok((
        Mat {
            ptr,
            tag,
            rows,
            cols,
            _keep: q.clone(),
        },
        bias.cloned(),
    ))
}

#[cfg(feature = "cuda")]
mod cuda;

#[cfg(test)]
mod tests {
    use super::mmq_wanted;

    /// The K-quant family where passes verify drafts or the model is a hybrid; the one-row
    /// products for a dense model decoding alone (unless `TREESPEC_MMQ` says otherwise).
    #[test]
    fn the_family_goes_where_passes_verify() {
        if std::env::var_os("TREESPEC_MMQ").is_some() {
            return;
        }
        assert!(!mmq_wanted(false, false));
        assert!(mmq_wanted(false, true));
        assert!(mmq_wanted(true, false));
        assert!(mmq_wanted(true, true));
    }
}
