//! The decoder's forward pass on a GPU as a fixed sequence of treespec's own launches over
//! buffers allocated once, in place of candle's ops: per layer a fused norm-and-quantise, the
//! q/k/v product, a fused bias + q/k norm + RoPE + KV-cache write, the two attention launches,
//! the output product, a fused residual + norm + quantise, the gate/up product, a fused SwiGLU +
//! quantise and the down product (9 to 13 launches a layer, against ~30 through candle, each
//! without candle's allocation and layout work).
//!
//! Every kernel of the default path is batch-invariant (`kernels/step.cu`, `kernels/mmvq.cu`,
//! `kernels/mmtc.cu`, `kernels/mmq.cu`, `kernels/attention.cu`; not the wide passes' cuBLAS products and
//! tensor-core attention over the caches' f16 shadows, [`crate::gpu::wide`], which take a
//! prompt's passes of many rows, and verify passes only with `--wide-verify`): a row's values
//! never depend on how many rows the pass holds, so a verify pass of any size gives each row bit
//! for bit what a one-row decoding step gives it, and the quantised products take all rows in
//! one launch (chunks of four activation rows, or 8-row tensor-core tiles, along the grid)
//! instead of one launch per four rows. A target's Q4_K / Q6_K products run on tensor cores
//! (`kernels/mmtc.cu`) for passes of several rows and on a one-row kernel that sums in the same
//! order ([`tensor_cores_for`]), or with `TREESPEC_MMQ=1` in the K-quant family of one summation
//! contract ([`crate::gpu::mmq`], [`mmq_requested`]), whose activations the quantisers then write
//! with one scale a super-block of 256 values; the rest on dp4a. q/k/v and gate/up run
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

use crate::error::{Error, Result};
use crate::model::config::ModelConfig;
use crate::model::visibility::VisibleKeys;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::sync::Arc;

/// Weights, caches and tables of a decoder as the step reads them.
pub struct StepWeights<'a> {
    /// The model's shape.
    pub cfg: &'a ModelConfig,
    /// Token embedding table.
    pub embed: &'a crate::model::weights::Embedding,
    /// Per layer.
    pub layers: Vec<LayerWeights<'a>>,
    /// Final norm weight.
    pub norm: &'a Tensor,
    /// LM head.
    pub lm_head: &'a crate::model::weights::Linear,
    /// RoPE tables `[context, head_dim / 2]`.
    pub cos: &'a Tensor,
    /// See `cos`.
    pub sin: &'a Tensor,
    /// Per layer: the K and V cache tensors `[kv_heads, capacity, head_dim]`.
    pub caches: Vec<(&'a Tensor, &'a Tensor)>,
}

/// One layer's weights as the step reads them.
pub struct LayerWeights<'a> {
    /// Attention norm.
    pub attn_norm: &'a Tensor,
    /// q, k, v projections: one fused linear or three.
    pub qkv: Vec<&'a crate::model::weights::Linear>,
    /// Qwen3's per-head norms.
    pub q_norm: Option<&'a Tensor>,
    /// See `q_norm`.
    pub k_norm: Option<&'a Tensor>,
    /// Output projection.
    pub o: &'a crate::model::weights::Linear,
    /// MLP norm.
    pub ffn_norm: &'a Tensor,
    /// gate and up projections: one fused linear or two.
    pub gate_up: Vec<&'a crate::model::weights::Linear>,
    /// Down projection.
    pub down: &'a crate::model::weights::Linear,
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
    pub input_proj: &'a crate::model::weights::Linear,
    /// The concatenation's order: hidden state first (MiMo) or embedding first.
    pub hidden_first: bool,
    /// The LM head rows the head drafts among (the target's LM head, or its rows of a reduced
    /// vocabulary).
    pub lm_head: &'a crate::model::weights::Linear,
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
/// family of [`crate::gpu::mmq`] where [`mmq_requested`]; GPUs from sm_80 on): a target's do (on
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

/// `TREESPEC_MMQ=1`: a model whose products run on tensor cores ([`tensor_cores_for`]) takes the
/// K-quant family of one summation contract ([`crate::gpu::mmq`]: int8 tensor cores with a float
/// term a super-block, one order for every row count) instead of `kernels/mmtc.cu`. Opt-in
/// while its one-row step is slower (BENCHMARKS.md section 35: on the H200 the 8B shape's step
/// 3.80 ms against 3.33, its verify pass of 64 rows 18.4 ms against 24.7).
pub fn mmq_requested() -> bool {
    std::env::var("TREESPEC_MMQ").as_deref() == Ok("1")
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
    pub fn new(_w: &StepWeights, _device: &Device) -> std::result::Result<Self, String> {
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
    l: &crate::model::weights::Linear,
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
mod cuda {
    use super::*;
    use crate::gpu::launch::{Launch, LaunchOn};
    use crate::gpu::mmq::{launch_mmq, mmq_func, mmq_kernel, Mmq, MmqScratch, ACT_GROUP};
    use crate::gpu::products::{
        capture, driver, launch_mmtc, launch_mmvq, mmtc_func, mmtc_kernel, mmvq_func, qblocks,
        replay_micros, Dp4a, Mmtc, Stack, Q8_BYTES,
    };

    /// A tensor-core product's kernel: of `kernels/mmtc.cu`, or of the K-quant family.
    #[derive(Clone, Copy)]
    enum TcKernel {
        Mmtc(Mmtc),
        Mmq(Mmq),
    }
    use crate::gpu::wide::{Out, WideProducts};
    use crate::model::config::RopeStyle;
    use crate::model::weights::Embedding;
    use candle_core::Storage;
    use cudarc::driver::{
        result, sys, CudaEvent, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr,
        DevicePtrMut, LaunchConfig, PushKernelArg,
    };
    use std::collections::{HashMap, HashSet};

    mod head_chain;

    use crate::gpu::modules::Module;
    /// Threads of the row kernels (`STEP_THREADS`).
    const THREADS: u32 = 256;
    /// Threads of the norm kernel: one row a block, 32 warps quantising its Q8_1 blocks side by
    /// side (a row of 1536 is two blocks a warp; with 8 warps the chain of warp reductions made
    /// it the second-slowest kernel of a step).
    const NORM_THREADS: u32 = 1024;

    /// The device address of a contiguous f32 tensor's first element.
    fn tensor_ptr(t: &Tensor, stream: &Arc<CudaStream>) -> std::result::Result<u64, String> {
        crate::gpu::tensor_ptr::<f32>(t, stream)
    }

    struct Layer {
        attn_norm: u64,
        /// Projections writing columns `offset..offset + rows` of the q/k/v row.
        qkv: Vec<(Mat, usize)>,
        qkv_bias: u64,
        q_norm: u64,
        k_norm: u64,
        o: Mat,
        ffn_norm: u64,
        gate_up: Vec<(Mat, usize)>,
        down: Mat,
        k_cache: u64,
        v_cache: u64,
        /// The caches' f16 shadows, which a wide pass's attention reads (0: none).
        k16: u64,
        v16: u64,
    }

    enum Embed {
        Quantized {
            _keep: Arc<QTensor>,
            ptr: u64,
            dtype: GgmlDType,
            row_bytes: usize,
        },
        Dense(u64),
    }

    /// Buffers sized for `rows` rows (a multiple of 4) and `chunks` attention chunks.
    struct Buffers {
        rows: usize,
        chunks: usize,
        meta_len: usize,
        meta: CudaSlice<u32>,
        x: CudaSlice<f32>,
        q8: CudaSlice<u8>,
        proj: CudaSlice<f32>,
        q: CudaSlice<f32>,
        att: CudaSlice<f32>,
        part: CudaSlice<f32>,
        logits: CudaSlice<f32>,
        /// Graphs copy the hidden states a pass wants here, one buffer per slot (`rows x h`).
        hidden: Vec<CudaSlice<f32>>,
        /// A wide pass's activation rows in f16 (`rows x` the widest product input), where the
        /// step has wide products ([`crate::gpu::wide`]) and `rows` reaches them.
        half: Option<CudaSlice<u16>>,
        /// The K-quant products' workspace for passes split over chunks (with tensor cores).
        mmq: Option<MmqScratch>,
    }

    struct Funcs {
        norm_q8: CudaFunction,
        qkv_rope: CudaFunction,
        silu_mul_q8: CudaFunction,
        gather_rows: CudaFunction,
        kv_keep: CudaFunction,
        att_chunk: CudaFunction,
        att_combine: CudaFunction,
        /// `attention_wide_mma_<hd>_<warps>` for the model's head size, where there is one (64,
        /// 128) and the GPU has f16 MMA (sm_80): a wide pass's attention.
        att_wide: Option<CudaFunction>,
        /// The dp4a products (`kernels/mmvq.cu`) by (format, kernel).
        mmvq: HashMap<(&'static str, Dp4a), CudaFunction>,
        /// The dp4a product of up to three stacked matrices in one launch (`mmvq_<tag>_<kernel>_
        /// stacked`), for the formats of the q/k/v and gate/up projections.
        mmvq_stacked: HashMap<(&'static str, Dp4a), CudaFunction>,
        /// Tensor-core products (`kernels/mmtc.cu`) by (format, kernel).
        mmtc: HashMap<(&'static str, Mmtc), CudaFunction>,
        /// The K-quant family (`kernels/mmq.cu`) by (format, kernel).
        mmq: HashMap<(&'static str, Mmq), CudaFunction>,
        get_rows: Option<CudaFunction>,
    }

    /// A captured step. cudarc's graph holds raw driver handles and so is not `Send`; the
    /// decoder that owns it moves to the engine thread once, before any capture, and the driver
    /// API may be called from any thread of the process.
    struct Graph(CudaGraph);

    // SAFETY: see above; the handles are used by one thread at a time (the decoder's owner).
    unsafe impl Send for Graph {}

    /// Captured graphs kept per decoder; past this the cache starts again (shapes seen long ago,
    /// e.g. in shorter attention buckets, are dropped).
    const GRAPH_CACHE: usize = 64;

    /// The shape a captured pass replays.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
    struct GraphKey {
        n: usize,
        m: usize,
        width: usize,
        chunks: usize,
        /// The layers whose hidden states the pass copies out, one bit each.
        hidden: u64,
        /// Whether the pass gathers its input rows from the embedding (else they are copied
        /// into place before it: [`StepInput::inputs`]).
        embed: bool,
        /// An MTP head's greedy chain of this many depths (`head_chain`; `m` is then its top-k),
        /// or 0 for a pass.
        chain: usize,
    }

    /// The layers of `layers` as bits of a graph key (whose replays fill the slots in the
    /// order captured); `None` for layers out of ascending order or past the 64th (such passes
    /// run eagerly).
    fn layer_bits(layers: &[usize]) -> Option<u64> {
        let ascending = layers.windows(2).all(|w| w[0] < w[1]);
        layers.iter().try_fold(0u64, |bits, &l| {
            (ascending && l < 64).then(|| bits | 1 << l)
        })
    }

    /// Where a pass's hidden states go: fresh tensors, one per wanted layer (eager passes), or
    /// the step's own buffers by slot (a pass captured as a graph, which must not allocate;
    /// copied out after each replay).
    enum HiddenOut {
        Fresh(Vec<Option<Tensor>>),
        Buffers(Vec<u64>),
    }

    /// Offsets into the per-pass metadata buffer (u32 elements).
    #[derive(Clone, Copy)]
    struct Meta {
        ids: usize,
        pos: usize,
        slots: usize,
        out_slots: usize,
        table: usize,
        width: usize,
        len: usize,
    }

    impl Meta {
        fn new(n: usize, width: usize) -> Self {
            Meta {
                ids: 0,
                pos: n,
                slots: 2 * n,
                out_slots: 3 * n,
                table: 4 * n,
                width,
                len: 4 * n + n * width,
            }
        }
    }

    /// Device addresses of one pass's per-pass values (a [`Meta`] block in the buffer).
    #[derive(Clone, Copy)]
    struct MetaAt {
        ids: u64,
        pos: u64,
        slots: u64,
        out_slots: u64,
        table: u64,
        width: usize,
    }

    /// The decoder step (see the module documentation).
    pub struct GpuStep {
        dev: candle_core::CudaDevice,
        stream: Arc<CudaStream>,
        f: Funcs,
        layers: Vec<Layer>,
        embed: Embed,
        norm: u64,
        lm_head: Mat,
        cos: u64,
        sin: u64,
        kv_stride: i64,
        h: usize,
        nh: usize,
        nkv: usize,
        hd: usize,
        ffn: usize,
        vocab: usize,
        qkv_width: usize,
        eps: f32,
        interleaved: i32,
        bufs: Option<Buffers>,
        graphs: HashMap<GraphKey, Graph>,
        /// Shapes seen once: a shape is captured the second time it runs (a prompt's one-off
        /// prefill length is not worth a capture).
        seen: HashSet<GraphKey>,
        graphs_on: bool,
        /// A capture failed: graphs stay off for this decoder.
        graphs_failed: bool,
        /// A pass copying hidden states out failed to capture: such passes run eagerly.
        hidden_graphs_failed: bool,
        /// A pass through the cuBLAS products failed to capture: such passes run eagerly.
        wide_graphs_failed: bool,
        /// Passes run eagerly on a shape's first sight or captured on its second (see
        /// [`Self::cold_passes`]).
        cold: u64,
        /// Q4_K / Q6_K products on tensor cores rather than on the dp4a kernel.
        tensor_cores: bool,
        /// Those products in the K-quant family (`kernels/mmq.cu`, [`super::mmq_requested`] and
        /// a model shape it fits: the hidden size and the attention output, whose combine kernel
        /// quantises whole heads, in super-blocks) rather than `kernels/mmtc.cu`; the
        /// activations then share a scale a super-block ([`Self::act_group`]).
        mmq: bool,
        /// Where graphs replay when not on candle's stream (see [`GpuStep::set_high_priority`]).
        replay_on: Option<ReplayStream>,
        /// The step's kernels launch with PDL (`gpu::launch`; of the dp4a products only those
        /// whose kernel waits, [`Dp4a::dependent`]).
        pdl: bool,
        /// An MTP head's input stage and LM head rows, for greedy chains in one launch
        /// ([`GpuStep::set_head_stage`]).
        head: Option<head_chain::HeadChain>,
        /// f16 copies of the weights for passes of many rows (cuBLAS), where the GPU has room.
        wide: Option<WideProducts>,
        /// Verify passes go through `wide` too ([`GpuStep::set_wide_verify`]).
        wide_verify: bool,
        /// Where `wide`'s crossover came from.
        wide_source: crate::gpu::wide::WideSource,
        /// The pass being launched goes through `wide` (set by `forward` for its launches).
        wide_now: bool,
        /// The K/V caches' f16 shadows (K and V of each layer), kept beside them where the step
        /// has wide products: written by every pass, compacted with the caches ([`Self::keep`]).
        shadow: Vec<CudaSlice<u16>>,
        /// Cache rows were written elsewhere (candle's ops) since the cache was last empty: the
        /// shadows may be behind, and wide passes attend the f32 caches row by row.
        shadow_stale: bool,
        /// Per layer the K and V caches and their shadows, `[layers][4]` addresses, for the
        /// compaction of all layers in one launch (`kv_keep`).
        kv_table: CudaSlice<u64>,
        _keep: Vec<Tensor>,
    }

    /// A stream of its own that captured passes replay on, fenced to candle's stream by two
    /// events: the replay starts after everything queued on candle's stream (the pass's
    /// metadata, any cache compaction) and candle's later work waits for it.
    struct ReplayStream {
        stream: Arc<CudaStream>,
        ready: CudaEvent,
        done: CudaEvent,
    }

    impl GpuStep {
        /// Build the step over a decoder's weights, or say why it cannot run them.
        pub fn new(w: &StepWeights, device: &Device) -> std::result::Result<Self, String> {
            let Device::Cuda(dev) = device else {
                return Err("not a GPU".into());
            };
            let cfg = w.cfg;
            let (nh, nkv) = (cfg.n_heads, cfg.n_kv_heads);
            if !crate::gpu::attention::supports(nh, nkv, cfg.head_dim, device) {
                return Err("head shape the attention kernel does not take".into());
            }
            let stream = dev.cuda_stream();
            let mut keep = vec![];
            let mut ptr = |t: &Tensor| -> std::result::Result<u64, String> {
                let t = t
                    .to_dtype(candle_core::DType::F32)
                    .map_err(|e| e.to_string())?;
                let t = t.contiguous().map_err(|e| e.to_string())?;
                let p = tensor_ptr(&t, &stream)?;
                keep.push(t);
                Ok(p)
            };
            let (h, hd) = (cfg.hidden, cfg.head_dim);
            let qkv_width = (cfg.n_heads + 2 * cfg.n_kv_heads) * hd;
            let mut layers = Vec::with_capacity(w.layers.len());
            for (i, (l, (kc, vc))) in w.layers.iter().zip(&w.caches).enumerate() {
                let mut qkv = vec![];
                let mut biases = vec![];
                let mut off = 0;
                for p in &l.qkv {
                    let (m, b) = mat(p, &format!("layer {i} q/k/v"))?;
                    let rows = m.rows;
                    if let Some(b) = b {
                        biases.push(b);
                    }
                    qkv.push((m, off));
                    off += rows;
                }
                if off != qkv_width || (!biases.is_empty() && biases.len() != l.qkv.len()) {
                    return Err(format!("layer {i}: unexpected q/k/v layout"));
                }
                let qkv_bias = if biases.is_empty() {
                    0
                } else {
                    ptr(&Tensor::cat(&biases, 0).map_err(|e| e.to_string())?)?
                };
                let mut gate_up = vec![];
                let mut off = 0;
                for p in &l.gate_up {
                    let (m, _) = mat(p, &format!("layer {i} gate/up"))?;
                    let rows = m.rows;
                    gate_up.push((m, off));
                    off += rows;
                }
                if off != 2 * cfg.ffn {
                    return Err(format!("layer {i}: unexpected gate/up layout"));
                }
                let (o, ob) = mat(l.o, &format!("layer {i} output"))?;
                let (down, db) = mat(l.down, &format!("layer {i} down"))?;
                if ob.is_some() || db.is_some() {
                    return Err(format!("layer {i}: biases outside q/k/v"));
                }
                if kc.dims3().map_err(|e| e.to_string())?.1
                    != vc.dims3().map_err(|e| e.to_string())?.1
                {
                    return Err("K and V caches of different sizes".into());
                }
                layers.push(Layer {
                    attn_norm: ptr(l.attn_norm)?,
                    qkv,
                    qkv_bias,
                    q_norm: l.q_norm.map(&mut ptr).transpose()?.unwrap_or(0),
                    k_norm: l.k_norm.map(&mut ptr).transpose()?.unwrap_or(0),
                    o,
                    ffn_norm: ptr(l.ffn_norm)?,
                    gate_up,
                    down,
                    k_cache: 0,
                    v_cache: 0,
                    k16: 0,
                    v16: 0,
                });
            }
            // The caches are written in place: their own storage, never a copy.
            for (layer, (kc, vc)) in layers.iter_mut().zip(&w.caches) {
                if !kc.is_contiguous()
                    || !vc.is_contiguous()
                    || kc.dtype() != candle_core::DType::F32
                {
                    return Err("KV cache not contiguous f32".into());
                }
                layer.k_cache = tensor_ptr(kc, &stream)?;
                layer.v_cache = tensor_ptr(vc, &stream)?;
            }
            let capacity = w
                .caches
                .first()
                .map(|(k, _)| k.dim(1).unwrap_or(0))
                .unwrap_or(0);
            let embed = match w.embed {
                Embedding::Quantized(q) => Embed::Quantized {
                    _keep: q.clone(),
                    ptr: q.device_ptr().map_err(|e| e.to_string())? as u64,
                    dtype: q.dtype(),
                    row_bytes: h / q.dtype().block_size() * q.dtype().type_size(),
                },
                Embedding::Dense(t) => Embed::Dense(ptr(t)?),
                Embedding::Blocks(_) => return Err("embedding on the host".into()),
            };
            let (lm_head, lb) = mat(w.lm_head, "LM head")?;
            if lb.is_some() {
                return Err("LM head with a bias".into());
            }
            let norm = ptr(w.norm)?;
            let cos = ptr(w.cos)?;
            let sin = ptr(w.sin)?;
            // The int8 MMA needs sm_80: on an older GPU the module is not loaded at all (one that
            // failed to load would take the whole step down).
            let (major, _) = stream
                .context()
                .compute_capability()
                .map_err(|e| e.to_string())?;
            let group = cfg.n_heads / cfg.n_kv_heads;
            let f = load_funcs(dev, &layers, &lm_head, &embed, major >= 8, (hd, group))
                .map_err(|e| e.to_string())?;
            let pdl = LaunchOn::new(&stream).pdl;
            let gpu = crate::device::gpu_name(device).unwrap_or_else(|| "GPU".into());
            let (wide_from, wide_source) = crate::gpu::wide::wide_rows_for(&gpu, cfg);
            let wide = match wide_from {
                Some(from) => {
                    // The matrices that share an input copied back to back: one GEMM each.
                    fn group<'a>(ms: &[&'a Mat]) -> Vec<(u64, &'a Arc<QTensor>)> {
                        ms.iter().map(|m| (m.ptr, &m._keep)).collect()
                    }
                    let mut groups: Vec<Vec<_>> = vec![];
                    for l in &layers {
                        groups.push(group(&l.qkv.iter().map(|(m, _)| m).collect::<Vec<_>>()));
                        groups.push(group(&[&l.o]));
                        groups.push(group(&l.gate_up.iter().map(|(m, _)| m).collect::<Vec<_>>()));
                        groups.push(group(&[&l.down]));
                    }
                    groups.push(group(&[&lm_head]));
                    match WideProducts::new(dev, groups, from) {
                        Ok(w) => w,
                        Err(e) => {
                            eprintln!("treespec: no cuBLAS products for wide passes: {e}");
                            None
                        }
                    }
                }
                None => None,
            };
            // The caches' f16 shadows, for the wide passes' attention on tensor cores.
            let mut shadow = vec![];
            if wide.is_some() && f.att_wide.is_some() {
                let size = cfg.n_kv_heads * capacity * hd;
                let made: std::result::Result<Vec<_>, _> = (0..2 * layers.len())
                    .map(|_| stream.alloc_zeros::<u16>(size))
                    .collect();
                match made {
                    Ok(made) => {
                        for (l, kv) in layers.iter_mut().zip(made.chunks(2)) {
                            l.k16 = kv[0].device_ptr(&stream).0;
                            l.v16 = kv[1].device_ptr(&stream).0;
                        }
                        shadow = made;
                    }
                    Err(e) => eprintln!(
                        "treespec: no f16 copy of the K/V cache ({e:?}): wide passes attend row by row"
                    ),
                }
            }
            let table: Vec<u64> = layers
                .iter()
                .flat_map(|l| [l.k_cache, l.v_cache, l.k16, l.v16])
                .collect();
            let kv_table = stream.clone_htod(&table).map_err(|e| format!("{e:?}"))?;
            Ok(GpuStep {
                dev: dev.clone(),
                stream,
                f,
                layers,
                embed,
                norm,
                lm_head,
                cos,
                sin,
                kv_stride: (capacity * hd) as i64,
                h,
                nh: cfg.n_heads,
                nkv: cfg.n_kv_heads,
                hd,
                ffn: cfg.ffn,
                vocab: cfg.vocab_size,
                qkv_width,
                eps: cfg.rms_eps as f32,
                interleaved: matches!(cfg.rope_style, RopeStyle::Interleaved) as i32,
                bufs: None,
                graphs: HashMap::new(),
                seen: HashSet::new(),
                graphs_on: graphs_allowed(),
                graphs_failed: false,
                hidden_graphs_failed: false,
                wide_graphs_failed: false,
                cold: 0,
                tensor_cores: false,
                mmq: super::mmq_requested()
                    && h.is_multiple_of(ACT_GROUP)
                    && ACT_GROUP.is_multiple_of(hd)
                    && (cfg.n_heads * hd).is_multiple_of(ACT_GROUP),
                replay_on: None,
                pdl,
                head: None,
                wide,
                wide_verify: false,
                wide_source,
                wide_now: false,
                shadow,
                shadow_stale: false,
                kv_table,
                _keep: keep,
            })
        }

        /// Run one pass: the block's K/V written to the cache rows `prefix..prefix + n` (the
        /// caller advances the cache), logits of `logits_rows` `[m, vocab]`, hidden states of
        /// `hidden_layers` `[n, hidden]` each.
        pub fn forward(&mut self, input: &StepInput) -> Result<(Option<Tensor>, Vec<Tensor>)> {
            let n = input.tokens.len();
            let m = input.logits_rows.len();
            // Key tables rounded up to a power of two wide, so that trees share graphs.
            let width = input.keys.width().next_power_of_two().max(2);
            let max_count = (0..n).map(|i| input.keys.count(i)).max().unwrap_or(0);
            let wide = self.wide_pass(n, m);
            // Attention chunks: by rank on the batch-invariant path, by cache row on the wide one.
            let chunks = match wide && self.wide_attention() {
                true => crate::gpu::attention::wide_chunks(input.keys),
                false => crate::gpu::attention::chunks_upto(max_count),
            }
            .next_power_of_two();
            let meta = Meta::new(n, width);
            let mut host = vec![0u32; meta.len];
            host[meta.ids..meta.ids + n].copy_from_slice(input.tokens);
            for (i, &p) in input.positions.iter().enumerate() {
                host[meta.pos + i] = p as u32;
                host[meta.slots + i] = (input.prefix + i) as u32;
                host[meta.out_slots + i] = u32::MAX; // -1: no logits
            }
            for (slot, &r) in input.logits_rows.iter().enumerate() {
                host[meta.out_slots + r] = slot as u32;
            }
            host[meta.table..].copy_from_slice(&input.keys.packed_to(width));
            self.ensure(n.max(m), chunks, meta.len, input.hidden_layers.len())?;
            let bufs = self.bufs.as_mut().expect("ensured");
            self.stream
                .memcpy_htod(&host, &mut bufs.meta.slice_mut(..meta.len))
                .map_err(driver)?;
            let rows = match input.inputs {
                Some(rows) => {
                    let rows = rows.to_dtype(candle_core::DType::F32)?.contiguous()?;
                    if rows.dims() != [n, self.h] {
                        return Err(Error::InvalidArgument(format!(
                            "GPU step: input rows {:?} for a pass of {n} rows of {}",
                            rows.dims(),
                            self.h
                        )));
                    }
                    self.place_inputs(&rows)?;
                    Some(rows)
                }
                None => None,
            };

            let bits = layer_bits(input.hidden_layers);
            let key = GraphKey {
                n,
                m,
                width,
                chunks,
                hidden: bits.unwrap_or(0),
                embed: input.inputs.is_none(),
                chain: 0,
            };
            self.wide_now = wide;
            let graphed = self.graphs_on
                && n <= GRAPH_MAX_ROWS
                && !(wide && self.wide_graphs_failed)
                && bits.is_some_and(|b| b == 0 || !self.hidden_graphs_failed);
            // A shape runs eagerly the first time it is seen, from a graph after that.
            let first_sight = graphed && self.seen.insert(key);
            if graphed && (first_sight || !self.graphs.contains_key(&key)) {
                self.cold += 1;
            }
            if graphed && !first_sight {
                match self.replay(key, meta, input.hidden_layers) {
                    Ok(out) => return Ok(out),
                    Err(e) if wide => {
                        // Passes through cuBLAS run eagerly; the others keep their graphs.
                        self.wide_graphs_failed = true;
                        self.graphs.remove(&key);
                        eprintln!(
                            "treespec: CUDA graph capture of a pass through cuBLAS failed, running those eagerly: {e}"
                        );
                    }
                    Err(e) if key.hidden != 0 => {
                        // Passes that copy hidden states out run eagerly; the others keep
                        // their graphs.
                        self.hidden_graphs_failed = true;
                        self.graphs.remove(&key);
                        eprintln!(
                            "treespec: CUDA graph capture of a pass with hidden states failed, running those eagerly: {e}"
                        );
                    }
                    Err(e) => self.graphs_failed(&e),
                }
                // A replay that failed after its graph ran has written over the input rows:
                // back into place for the eager pass.
                if let Some(rows) = &rows {
                    self.place_inputs(rows)?;
                }
            }
            let mut hidden = HiddenOut::Fresh(vec![None; input.hidden_layers.len()]);
            let logits = if m > 0 {
                let mut out = self
                    .stream
                    .alloc_zeros::<f32>(m.div_ceil(4) * 4 * self.vocab)
                    .map_err(driver)?;
                let out_ptr = out.device_ptr_mut(&self.stream).0;
                self.launch_all(key, meta, out_ptr, input.hidden_layers, &mut hidden)?;
                Some(self.wrap(out, m)?)
            } else {
                self.launch_all(key, meta, 0, input.hidden_layers, &mut hidden)?;
                None
            };
            let hidden = match hidden {
                HiddenOut::Fresh(slots) => slots.into_iter().flatten().collect(),
                HiddenOut::Buffers(_) => vec![],
            };
            Ok((logits, hidden))
        }

        /// A capture failed: graphs off for good (every pass and chain runs eagerly), one line
        /// saying why.
        fn graphs_failed(&mut self, e: &Error) {
            self.graphs_on = false;
            self.graphs_failed = true;
            self.graphs.clear();
            eprintln!("treespec: CUDA graph capture failed, running passes eagerly: {e}");
        }

        /// Whether the step's kernels launch with PDL (`gpu::launch`: sm_90 or later, a build
        /// for it, `TREESPEC_PDL` not `0`): its row, attention and tensor-core kernels, and the
        /// dp4a products whose kernel waits ([`Dp4a::dependent`]).
        pub fn dependent_launches(&self) -> bool {
            self.pdl
        }

        /// The row count from which passes multiply through cuBLAS with f16 copies of the
        /// weights ([`crate::gpu::wide`]), the bytes the copies take, and whether verify passes
        /// do too; `None` where they are off or did not fit.
        pub fn wide_products(&self) -> Option<WideInfo> {
            self.wide.as_ref().map(|w| WideInfo {
                from: w.from,
                bytes: w.bytes(),
                verify: self.wide_verify,
                source: self.wide_source,
            })
        }

        /// Logits of `normed` (`[m, h]` f32 rows, already through the final norm) from the f16
        /// copy of the LM head (one cuBLAS GEMM: a drafter's block of rows, which need not be
        /// bit-exact); `None` where the step has no copy of it.
        pub fn lm_head_copy(&self, normed: &Tensor) -> Result<Option<Tensor>> {
            let lm = &self.lm_head;
            let Some(wide) = self.wide.as_ref().filter(|w| w.has(lm.ptr)) else {
                return Ok(None);
            };
            let (m, h) = normed.dims2()?;
            if h != lm.cols || m == 0 {
                return Err(Error::InvalidArgument(format!(
                    "LM head of rows of {}: input [{m}, {h}]",
                    lm.cols
                )));
            }
            let x16 = normed.to_dtype(candle_core::DType::F16)?.contiguous()?;
            let x =
                crate::gpu::tensor_ptr::<half::f16>(&x16, &self.stream).map_err(Error::Device)?;
            let mut out = self
                .stream
                .alloc_zeros::<f32>(m * lm.rows)
                .map_err(driver)?;
            let dst = (out.device_ptr_mut(&self.stream).0, lm.rows);
            let stack = [(lm.ptr, lm.rows, lm.cols)];
            wide.product(&self.stream, &stack, (0, 0), (x, true), dst, m, Out::Set)?;
            Ok(Some(crate::gpu::tensor_from_slice(
                &self.dev,
                out,
                (m, lm.rows),
            )))
        }

        /// Send passes of `from` rows and more through the wide products (a calibration's
        /// measurements: `bench --costs --calibrate`); false where the step has none. Captured
        /// graphs are dropped.
        pub fn set_wide_from(&mut self, from: usize) -> bool {
            match self.wide.as_mut() {
                Some(w) => {
                    w.from = from;
                    self.graphs.clear();
                    true
                }
                None => false,
            }
        }

        /// Let verify passes (those reading more than one row's logits) of many rows through
        /// the cuBLAS products too (`on`), or only passes that read at most one row's logits
        /// (a prompt's, the default: verify passes stay batch-invariant, bit-exact to `ar`).
        /// Captured graphs are dropped.
        pub fn set_wide_verify(&mut self, on: bool) {
            if on != self.wide_verify {
                self.wide_verify = on;
                self.graphs.clear();
            }
        }

        /// Of the cache rows from `base` on, keep those at offsets `rows` (strictly ascending),
        /// moved to `base, base + 1, ...`: K and V of every layer and their f16 shadows, in one
        /// launch (`kv_keep`) on candle's stream. The caller sets the caches' lengths.
        pub fn keep(&mut self, base: usize, rows: &[usize]) -> Result<()> {
            if crate::model::kv_cache::KvCache::in_place(rows) {
                return Ok(());
            }
            if rows.windows(2).any(|w| w[0] >= w[1]) {
                return Err(Error::InvalidArgument("keep: rows must ascend".into()));
            }
            let idx = rows
                .iter()
                .map(|&r| u32::try_from(r))
                .collect::<std::result::Result<Vec<u32>, _>>()
                .map_err(|_| Error::InvalidArgument("keep: a row past any cache".into()))?;
            let idx = self.stream.clone_htod(&idx).map_err(driver)?;
            let idx_ptr = idx.device_ptr(&self.stream).0;
            let table = self.kv_table.device_ptr(&self.stream).0;
            let (count, base_i, hd_i) = (rows.len() as i32, base as i32, self.hd as i32);
            let mut b = Launch::new(&self.f.kv_keep);
            b.arg(&table)
                .arg(&idx_ptr)
                .arg(&count)
                .arg(&base_i)
                .arg(&self.kv_stride)
                .arg(&hd_i);
            let cfg = LaunchConfig {
                grid_dim: (self.layers.len() as u32, 2, self.nkv as u32),
                block_dim: (self.hd as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the table holds every layer's caches (shadows or null); the rows ascend,
            // so each thread's moves read before they overwrite; base + row lies inside the
            // caches (the decoder checked it against the valid rows).
            unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
            // The index buffer is freed in stream order after the launch.
            drop(idx);
            Ok(())
        }

        /// Cache rows were written outside the step (candle's ops): until the cache is emptied
        /// ([`Self::shadow_fresh`]), wide passes attend the f32 caches, as the shadows may be
        /// behind. Captured graphs are dropped.
        pub fn mark_shadow_stale(&mut self) {
            if !self.shadow_stale && !self.shadow.is_empty() {
                self.shadow_stale = true;
                self.graphs.clear();
            }
        }

        /// The cache was emptied: the shadows hold every row written from now on.
        pub fn shadow_fresh(&mut self) {
            if self.shadow_stale {
                self.shadow_stale = false;
                self.graphs.clear();
            }
        }

        /// Whether the pass being launched (of `n` rows) multiplies `mats` through the wide
        /// products: it goes wide ([`Self::wide_pass`]) and they have copies.
        fn goes_wide<'a>(&self, n: usize, mats: impl Iterator<Item = &'a Mat>) -> bool {
            self.wide_now
                && self
                    .wide
                    .as_ref()
                    .is_some_and(|w| w.takes(n, mats.map(|m| m.ptr)))
        }

        /// Whether a wide pass's attention runs on tensor cores (`attention_wide_mma`, over the
        /// caches' f16 shadows): the kernel loaded and the shadows there and current.
        fn wide_attention(&self) -> bool {
            self.f.att_wide.is_some() && !self.shadow.is_empty() && !self.shadow_stale
        }

        /// Whether a pass of `n` rows reading `m` rows' logits multiplies through the wide
        /// products ([`crate::gpu::wide::takes_pass`]).
        fn wide_pass(&self, n: usize, m: usize) -> bool {
            self.wide
                .as_ref()
                .is_some_and(|w| crate::gpu::wide::takes_pass(w.from, self.wide_verify, n, m))
        }

        /// Where this step's launches go.
        fn on(&self) -> LaunchOn<'_> {
            LaunchOn {
                stream: &self.stream,
                pdl: self.pdl,
            }
        }

        /// Turn graph capture on (unless `TREESPEC_CUDA_GRAPHS=0` or a capture failed) or off
        /// (every pass eagerly); captured graphs are dropped.
        pub fn set_graphs(&mut self, on: bool) {
            self.graphs_on = on && graphs_allowed() && !self.graphs_failed;
            self.graphs.clear();
            self.seen.clear();
        }

        /// Whether passes replay from CUDA graphs.
        pub fn graphs_on(&self) -> bool {
            self.graphs_on
        }

        /// Whether passes that copy hidden states out replay from CUDA graphs too (off when
        /// graphs are, or after such a pass failed to capture).
        pub fn hidden_graphs_on(&self) -> bool {
            self.graphs_on && !self.hidden_graphs_failed
        }

        /// Queue the copy of a pass's input rows (`[n, h]` f32, contiguous) into place.
        fn place_inputs(&self, rows: &Tensor) -> Result<()> {
            let bufs = self.bufs.as_ref().expect("ensured");
            let src = tensor_ptr(rows, &self.stream).map_err(Error::Device)?;
            let dst = bufs.x.device_ptr(&self.stream).0;
            // SAFETY: x holds at least n rows of h f32 (ensured); rows is n x h f32 on candle's
            // stream, this one, whose memory is freed in stream order (cudarc frees
            // asynchronously on the slice's stream), so after the copy.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(
                    dst,
                    src,
                    rows.elem_count() * 4,
                    self.stream.cu_stream(),
                )
            }
            .map_err(driver)?;
            Ok(())
        }

        /// Run Q4_K / Q6_K products on tensor cores (`kernels/mmtc.cu` or the K-quant family,
        /// see [`super::tensor_cores_for`]) or on the dp4a kernel; captured graphs and the
        /// buffers are dropped (the quantisers' scale groups and the family's workspace change).
        /// Returns whether any now runs on tensor cores (none on a GPU older than sm_80, none
        /// where no weight has a format and shape the kernels take).
        pub fn set_tensor_cores(&mut self, on: bool) -> bool {
            let mut mats = weights(&self.layers, &self.lm_head);
            let on = on && mats.any(|w| self.has_tensor_core_kernel(w));
            if on != self.tensor_cores {
                // Graphs hold the kernels they were captured with; the shapes seen stay seen.
                self.tensor_cores = on;
                self.graphs.clear();
                self.bufs = None;
            }
            on
        }

        /// Values of a quantised activation row that share a scale: a super-block where the
        /// K-quant family takes the products (its contract), else a Q8_1 block.
        fn act_group(&self) -> i32 {
            if self.tensor_cores && self.mmq {
                ACT_GROUP as i32
            } else {
                32
            }
        }

        /// Replay captured passes on a stream of the GPU's highest priority: where another
        /// model's work runs beside this one (a drafter drafting while the target verifies),
        /// the GPU schedules this one's blocks first. (Eager passes stay on candle's stream.)
        pub fn set_high_priority(&mut self) -> Result<()> {
            if self.replay_on.is_some() {
                return Ok(());
            }
            let ctx = self.stream.context();
            let (_, greatest) = result::stream::get_priority_range().map_err(driver)?;
            let flags = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
            self.replay_on = Some(ReplayStream {
                stream: ctx.new_stream_with_priority(greatest).map_err(driver)?,
                ready: ctx.new_event(flags).map_err(driver)?,
                done: ctx.new_event(flags).map_err(driver)?,
            });
            Ok(())
        }

        /// Passes so far that did not replay a captured graph because their shape was new: run
        /// eagerly on its first sight, captured on its second. Such a pass costs several
        /// replayed ones, so a step that ran one says little about what the step costs from
        /// then on (`auto` leaves it out of its estimates).
        pub fn cold_passes(&self) -> u64 {
            self.cold
        }

        /// Replay (capturing first if needed) the pass of shape `key`; its logits (`[m, vocab]`,
        /// copied out of the graph's buffer) unless `m` is 0.
        /// Replay the pass of shape `key` (capturing it first if it is not yet), its hidden
        /// states of `hidden_layers` (the layers `key.hidden` holds) copied out after it.
        fn replay(
            &mut self,
            key: GraphKey,
            meta: Meta,
            hidden_layers: &[usize],
        ) -> Result<(Option<Tensor>, Vec<Tensor>)> {
            let (logits_ptr, hidden_ptrs) = {
                let bufs = self.bufs.as_ref().expect("ensured");
                let s = &self.stream;
                (
                    bufs.logits.device_ptr(s).0,
                    bufs.hidden[..hidden_layers.len()]
                        .iter()
                        .map(|b| b.device_ptr(s).0)
                        .collect::<Vec<_>>(),
                )
            };
            if !self.graphs.contains_key(&key) {
                if self.graphs.len() >= GRAPH_CACHE {
                    self.graphs.clear();
                }
                let graph = capture(&self.stream, || {
                    let mut into = HiddenOut::Buffers(hidden_ptrs.clone());
                    self.launch_all(key, meta, logits_ptr, hidden_layers, &mut into)
                })?;
                // (A pass fed input rows accumulates into them: not replayed to profile.)
                if let Some(times) = profile_replays().filter(|_| key.embed) {
                    // TREESPEC_STEP_PROFILE=N: the graph alone, N replays back to back.
                    eprintln!(
                        "treespec: graph of {} rows ({} logits rows, {} attention chunks): {:.1} us a replay on the GPU",
                        key.n,
                        key.m,
                        key.chunks,
                        replay_micros(&self.stream, &graph, times)?
                    );
                }
                self.graphs.insert(key, Graph(graph));
            }
            let graph = &self.graphs[&key].0;
            match &self.replay_on {
                Some(r) => {
                    r.ready.record(&self.stream).map_err(driver)?;
                    r.stream.wait(&r.ready).map_err(driver)?;
                    // SAFETY: the graph is alive (owned by self.graphs) and belongs to this
                    // context, as does the stream.
                    unsafe { result::graph::launch(graph.cu_graph_exec(), r.stream.cu_stream()) }
                        .map_err(driver)?;
                    r.done.record(&r.stream).map_err(driver)?;
                    self.stream.wait(&r.done).map_err(driver)?;
                }
                None => graph.launch().map_err(driver)?,
            }
            let bufs = self.bufs.as_ref().expect("ensured");
            let mut hidden = Vec::with_capacity(hidden_layers.len());
            for b in &bufs.hidden[..hidden_layers.len()] {
                let copy = self
                    .stream
                    .clone_dtod(&b.slice(..key.n * self.h))
                    .map_err(driver)?;
                hidden.push(crate::gpu::tensor_from_slice(
                    &self.dev,
                    copy,
                    (key.n, self.h),
                ));
            }
            if key.m == 0 {
                return Ok((None, hidden));
            }
            let out = self
                .stream
                .clone_dtod(&bufs.logits.slice(..key.m * self.vocab))
                .map_err(driver)?;
            Ok((Some(self.wrap(out, key.m)?), hidden))
        }

        fn wrap(&self, out: CudaSlice<f32>, m: usize) -> Result<Tensor> {
            let rows = out.len() / self.vocab;
            let t = crate::gpu::tensor_from_slice(&self.dev, out, (rows, self.vocab));
            Ok(if rows == m { t } else { t.narrow(0, 0, m)? })
        }

        /// Grow the buffers to `n` rows, `chunks` attention chunks, `meta_len` metadata
        /// entries and `hidden` hidden-state slots (dropping captured graphs, whose addresses
        /// change).
        fn ensure(
            &mut self,
            n: usize,
            chunks: usize,
            meta_len: usize,
            hidden: usize,
        ) -> Result<()> {
            let rows = n.div_ceil(4) * 4;
            // Buffers made before the crossover moved down (`set_wide_from`) may lack the f16
            // rows a wide pass of their size needs.
            let wants_half = |rows: usize| self.wide.as_ref().is_some_and(|w| rows >= w.from);
            if let Some(b) = &self.bufs {
                if b.rows >= rows
                    && b.chunks >= chunks
                    && b.meta_len >= meta_len
                    && b.hidden.len() >= hidden
                    && (b.half.is_some() || !wants_half(b.rows))
                {
                    return Ok(());
                }
            }
            let (rows, chunks, meta_len, hidden) = match &self.bufs {
                Some(b) => (
                    b.rows.max(rows),
                    b.chunks.max(chunks),
                    b.meta_len.max(meta_len),
                    b.hidden.len().max(hidden),
                ),
                None => (rows.max(4), chunks.max(8), meta_len.max(64), hidden),
            };
            self.graphs.clear();
            self.bufs = None;
            let s = &self.stream;
            let qb = qblocks(self.h.max(self.ffn).max(self.nh * self.hd));
            let proj = self.qkv_width.max(2 * self.ffn).max(self.h);
            let alloc = |len: usize| s.alloc_zeros::<f32>(len).map_err(driver);
            self.bufs = Some(Buffers {
                rows,
                chunks,
                meta_len,
                meta: s.alloc_zeros::<u32>(meta_len).map_err(driver)?,
                x: alloc(rows * self.h)?,
                q8: s.alloc_zeros::<u8>(rows * qb * Q8_BYTES).map_err(driver)?,
                proj: alloc(rows * proj)?,
                q: alloc(self.nh * rows * self.hd)?,
                att: alloc(rows * self.nh * self.hd)?,
                part: alloc(rows * self.nh * chunks * (self.hd + 2))?,
                // Graphs write their logits here: up to GRAPH_MAX_ROWS rows, padded to four.
                logits: alloc(rows.min(GRAPH_MAX_ROWS) * self.vocab)?,
                // And their hidden states here.
                hidden: (0..hidden)
                    .map(|_| alloc(rows.min(GRAPH_MAX_ROWS) * self.h))
                    .collect::<Result<_>>()?,
                half: match wants_half(rows) {
                    true => Some(s.alloc_zeros::<u16>(rows * qb * 32).map_err(driver)?),
                    false => None,
                },
                mmq: match self.tensor_cores && self.mmq {
                    true => Some(self.mmq_scratch(rows)?),
                    false => None,
                },
            });
            Ok(())
        }

        /// The K-quant family's workspace for passes of up to `rows` rows: room for the
        /// largest split pass of any product of the step.
        fn mmq_scratch(&self, rows: usize) -> Result<MmqScratch> {
            let probe = MmqScratch::new(&self.stream, 0)?;
            let sms = probe.sms();
            let mut shapes = HashSet::new();
            for l in &self.layers {
                for group in [&l.qkv, &l.gate_up] {
                    let cols = group[0].0.cols;
                    shapes.insert((group.iter().map(|(m, _)| m.rows).sum::<usize>(), cols));
                    shapes.extend(group.iter().map(|(m, _)| (m.rows, m.cols)));
                }
                shapes.insert((l.o.rows, l.o.cols));
                shapes.insert((l.down.rows, l.down.cols));
            }
            shapes.insert((self.lm_head.rows, self.lm_head.cols));
            let need = shapes
                .iter()
                .flat_map(|&(r, c)| (1..=rows).map(move |n| MmqScratch::need(r, c, n, sms)))
                .max()
                .unwrap_or(0);
            drop(probe);
            MmqScratch::new(&self.stream, need)
        }

        /// Every launch of a pass of shape `key`: `key.n` rows, `key.m` of them to `logits` (a
        /// `[m, vocab]` buffer, rows padded to four), from the embedding or from rows already in
        /// place (`key.embed`); hidden states of `hidden_layers` copied out to `hidden`.
        fn launch_all(
            &self,
            key: GraphKey,
            meta: Meta,
            logits: u64,
            hidden_layers: &[usize],
            hidden: &mut HiddenOut,
        ) -> Result<()> {
            let (n, m) = (key.n, key.m);
            let b = self.bufs.as_ref().expect("ensured");
            let x = b.x.device_ptr(&self.stream).0;
            let q8 = b.q8.device_ptr(&self.stream).0;
            let at = self.meta_at(meta, 0);
            if key.embed {
                self.embed(n, at.ids, x)?;
            }
            let (pending_hidden, delta) =
                self.launch_layers(n, key.chunks, at, hidden_layers, hidden)?;
            // x += last down output (unless its product added it); final norm of the logits rows
            // into their slots, as f16 rows too where the LM head goes wide.
            let (q8, f16) = self.rows_for(m, std::iter::once(&self.lm_head), q8);
            self.norm_q8(n, x, delta, self.norm, at.out_slots, (q8, f16), self.h)?;
            if let Some(prev) = pending_hidden {
                self.copy_hidden(n, x, prev, hidden_layers, hidden)?;
            }
            if m > 0 {
                self.matmul(
                    &[&self.lm_head],
                    (q8, qblocks(self.h), f16 != 0),
                    (logits, self.vocab),
                    m,
                )?;
            }
            Ok(())
        }

        /// Device addresses of the per-pass values of a metadata block laid out as `meta`,
        /// starting `first` u32 entries into the metadata buffer.
        fn meta_at(&self, meta: Meta, first: usize) -> MetaAt {
            let base = self
                .bufs
                .as_ref()
                .expect("ensured")
                .meta
                .device_ptr(&self.stream)
                .0;
            let at = |off: usize| base + ((first + off) * 4) as u64;
            MetaAt {
                ids: at(meta.ids),
                pos: at(meta.pos),
                slots: at(meta.slots),
                out_slots: at(meta.out_slots),
                table: at(meta.table),
                width: meta.width,
            }
        }

        /// Every layer of a pass of `n` rows whose inputs are in `x` (`chunks` attention
        /// chunks, per-pass values at `meta`). Returns the last layer if its hidden state is
        /// wanted (copied out once the residual is added), and what the final norm adds to `x`:
        /// the last layer's down output left in `proj`, or nothing (0) where its product added
        /// it to `x` itself (a wide pass).
        fn launch_layers(
            &self,
            n: usize,
            chunks: usize,
            meta: MetaAt,
            hidden_layers: &[usize],
            hidden: &mut HiddenOut,
        ) -> Result<(Option<usize>, u64)> {
            let b = self.bufs.as_ref().expect("ensured");
            let s = &self.stream;
            let p = |x: &CudaSlice<f32>| x.device_ptr(s).0;
            let (x, proj, q, att, part) = (p(&b.x), p(&b.proj), p(&b.q), p(&b.att), p(&b.part));
            let q8 = b.q8.device_ptr(s).0;
            let (pos, slots, table) = (meta.pos, meta.slots, meta.table);
            let (h, nh, nkv, hd, ffn) = (self.h, self.nh, self.nkv, self.hd, self.ffn);
            let n_i = n as i32;
            let mut pending_hidden: Option<usize> = None;
            // What the next norm adds to x: the previous product's output, or nothing where
            // that product added into x itself.
            let mut delta = 0u64;
            for (li, l) in self.layers.iter().enumerate() {
                // x += previous layer's down output (its residual), norm, quantise (Q8_1 rows
                // only where the product reading them does not go wide).
                let qkv_mats = l.qkv.iter().map(|(m, _)| m);
                let (q8_in, f16_in) = self.rows_for(n, qkv_mats, q8);
                self.norm_q8(n, x, delta, l.attn_norm, 0, (q8_in, f16_in), h)?;
                if let Some(prev) = pending_hidden.take() {
                    self.copy_hidden(n, x, prev, hidden_layers, hidden)?;
                }
                // Each product reads f16 rows exactly where the kernel before it wrote them.
                self.matmul_stacked(
                    &l.qkv,
                    (q8, qblocks(h), f16_in != 0),
                    (proj, self.qkv_width),
                    n,
                    Out::Set,
                )?;
                let mut bld = Launch::new(&self.f.qkv_rope);
                let (qkv_w, nh_i, nkv_i, hd_i) =
                    (self.qkv_width as i32, nh as i32, nkv as i32, hd as i32);
                bld.arg(&proj)
                    .arg(&qkv_w)
                    .arg(&l.qkv_bias)
                    .arg(&l.q_norm)
                    .arg(&l.k_norm)
                    .arg(&self.cos)
                    .arg(&self.sin)
                    .arg(&pos)
                    .arg(&slots)
                    .arg(&q)
                    .arg(&l.k_cache)
                    .arg(&l.v_cache)
                    .arg(&self.kv_stride)
                    .arg(&n_i)
                    .arg(&nh_i)
                    .arg(&nkv_i)
                    .arg(&hd_i)
                    .arg(&self.eps)
                    .arg(&self.interleaved)
                    .arg(&l.k16)
                    .arg(&l.v16);
                let cfg = LaunchConfig {
                    grid_dim: (n as u32, (nh + 2 * nkv) as u32, 1),
                    block_dim: ((hd / 2) as u32, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: arguments in the kernel's order; proj holds n rows of qkv_width, the
                // caches hold every slot (the caller checked the context), q holds nh x n x hd.
                unsafe { bld.launch(self.on(), cfg) }.map_err(driver)?;
                // Attention, its output quantised for the output projection by the combine
                // kernel (in a wide pass: f16 rows only).
                let kv = (l.k_cache, l.v_cache, l.k16, l.v16);
                let (q8_in, f16_in) = self.rows_for(n, std::iter::once(&l.o), q8);
                let att_out = if q8_in == 0 { 0 } else { att };
                let outs = (att_out, q8_in, f16_in);
                self.attention(n, chunks, meta.width, q, kv, table, part, outs)?;
                delta = self.residual(&l.o, (q8, qblocks(nh * hd), f16_in != 0), (x, proj), n)?;
                // x += attention output; norm; quantise.
                let (q8_in, f16_in) = self.rows_for(n, l.gate_up.iter().map(|(m, _)| m), q8);
                self.norm_q8(n, x, delta, l.ffn_norm, 0, (q8_in, f16_in), h)?;
                // Through cuBLAS, gate and up come back as f16 rows (half the bytes to read).
                let gu = self.matmul_stacked(
                    &l.gate_up,
                    (q8, qblocks(h), f16_in != 0),
                    (proj, 2 * ffn),
                    n,
                    Out::Half,
                )?;
                let gu16 = if gu == Out::Half { proj } else { 0 };
                let (q8_in, f16_in) = self.rows_for(n, std::iter::once(&l.down), q8);
                let qb = qblocks(ffn);
                let mut bld = Launch::new(&self.f.silu_mul_q8);
                let (stride, ffn_i, qb_i) = ((2 * ffn) as i32, ffn as i32, qb as i32);
                let group = self.act_group();
                bld.arg(&proj)
                    .arg(&stride)
                    .arg(&ffn_i)
                    .arg(&q8_in)
                    .arg(&qb_i)
                    .arg(&f16_in)
                    .arg(&gu16)
                    .arg(&group);
                let cfg = LaunchConfig {
                    // 8 warps of SILU_BLOCKS (8) Q8_1 blocks each (`kernels/step.cu`).
                    grid_dim: (n as u32, qb.div_ceil(8 * 8) as u32, 1),
                    block_dim: (THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: proj holds n rows of 2 x ffn (floats, or halves from the wide
                // product), q8 n rows of qb blocks.
                unsafe { bld.launch(self.on(), cfg) }.map_err(driver)?;
                delta = self.residual(&l.down, (q8, qb, f16_in != 0), (x, proj), n)?;
                if hidden_layers.contains(&li) {
                    pending_hidden = Some(li);
                }
            }
            Ok((pending_hidden, delta))
        }

        /// The rows a kernel (a norm, the attention combine, SwiGLU) writes for the product over
        /// `mats` after it, in a pass of `n` rows: `(q8, 0)`, Q8_1 rows; or where that product
        /// goes wide `(0, f16)`, f16 rows only, which it reads instead of converting Q8_1 ones.
        fn rows_for<'a>(
            &self,
            n: usize,
            mats: impl Iterator<Item = &'a Mat>,
            q8: u64,
        ) -> (u64, u64) {
            let half = self.bufs.as_ref().and_then(|b| b.half.as_ref());
            match half {
                Some(half) if self.goes_wide(n, mats) => (0, half.device_ptr(&self.stream).0),
                _ => (q8, 0),
            }
        }

        /// The residual branch's product `W . y` for the `n` rows at `y`: added to `x` by the
        /// GEMM itself where it goes wide (returns 0: nothing left to add), else written to
        /// `proj` for the next norm to add (returns `proj`).
        fn residual(
            &self,
            w: &Mat,
            y: (u64, usize, bool),
            (x, proj): (u64, u64),
            n: usize,
        ) -> Result<u64> {
            if self.wide_product(&[w], y, (x, self.h), n, Out::Add)? {
                return Ok(0);
            }
            self.matmul(&[w], y, (proj, self.h), n)?;
            Ok(proj)
        }

        /// Copy the `n x h` hidden states at `x` (layer `layer`'s output) to every slot of
        /// `wanted` that asks for that layer.
        fn copy_hidden(
            &self,
            n: usize,
            x: u64,
            layer: usize,
            wanted: &[usize],
            out: &mut HiddenOut,
        ) -> Result<()> {
            let copy = |dst: u64| {
                // SAFETY: both buffers hold at least n x hidden f32; same stream.
                unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        dst,
                        x,
                        n * self.h * 4,
                        self.stream.cu_stream(),
                    )
                }
                .map_err(driver)
            };
            let slots = wanted.iter().enumerate().filter(|(_, &w)| w == layer);
            match out {
                HiddenOut::Fresh(tensors) => {
                    let mut dst = self.stream.alloc_zeros::<f32>(n * self.h).map_err(driver)?;
                    copy(dst.device_ptr_mut(&self.stream).0)?;
                    let t = crate::gpu::tensor_from_slice(&self.dev, dst, (n, self.h));
                    for (slot, _) in slots {
                        tensors[slot] = Some(t.clone());
                    }
                }
                HiddenOut::Buffers(ptrs) => {
                    for (slot, _) in slots {
                        copy(ptrs[slot])?;
                    }
                }
            }
            Ok(())
        }

        fn embed(&self, n: usize, ids: u64, x: u64) -> Result<()> {
            let h = self.h;
            match &self.embed {
                Embed::Dense(table) => {
                    let mut b = Launch::new(&self.f.gather_rows);
                    let h_i = h as i32;
                    b.arg(table).arg(&ids).arg(&x).arg(&h_i);
                    let cfg = LaunchConfig {
                        grid_dim: (n as u32, (h as u32).div_ceil(THREADS), 1),
                        block_dim: (THREADS, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    // SAFETY: ids below the vocabulary (checked by the decoder), x holds n rows.
                    unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
                }
                Embed::Quantized {
                    ptr,
                    dtype,
                    row_bytes,
                    ..
                } => {
                    let f = self.f.get_rows.as_ref().expect("loaded with the embedding");
                    let (block, grid_y) = get_rows_shape(*dtype, h);
                    let mut b = self.stream.launch_builder(f);
                    let (ne00, nb01) = (h as i64, *row_bytes);
                    b.arg(ptr).arg(&ids).arg(&x).arg(&ne00).arg(&nb01);
                    let cfg = LaunchConfig {
                        grid_dim: (n as u32, grid_y as u32, 1),
                        block_dim: (block as u32, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    // SAFETY: candle's get_rows kernel with the arguments candle passes it.
                    unsafe { b.launch(cfg) }.map_err(driver)?;
                }
            }
            Ok(())
        }

        #[allow(clippy::too_many_arguments)]
        fn norm_q8(
            &self,
            n: usize,
            x: u64,
            delta: u64,
            w: u64,
            slots: u64,
            (q8, f16): (u64, u64),
            h: usize,
        ) -> Result<()> {
            let qb = qblocks(h);
            self.norm_q8_blocks(n, x, delta, w, slots, (q8, qb, qb), h, f16)
        }

        /// [`Self::norm_q8`] into `qb` Q8_1 blocks of rows `stride` blocks apart (part of a
        /// wider row: an MTP head's concatenated input).
        #[allow(clippy::too_many_arguments)]
        fn norm_q8_blocks(
            &self,
            n: usize,
            x: u64,
            delta: u64,
            w: u64,
            slots: u64,
            (q8, qb, stride): (u64, usize, usize),
            h: usize,
            f16: u64,
        ) -> Result<()> {
            let mut b = Launch::new(&self.f.norm_q8);
            let (h_i, qb_i, stride_i) = (h as i32, qb as i32, stride as i32);
            let group = self.act_group();
            b.arg(&x)
                .arg(&delta)
                .arg(&w)
                .arg(&slots)
                .arg(&q8)
                .arg(&h_i)
                .arg(&qb_i)
                .arg(&stride_i)
                .arg(&self.eps)
                .arg(&f16)
                .arg(&group);
            let cfg = LaunchConfig {
                grid_dim: (n as u32, 1, 1),
                block_dim: (NORM_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: x and delta hold n rows of h; q8 holds n rows (or slots) `stride` blocks
            // apart, of which the kernel writes the first `qb`; slots (when set) below n.
            unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
            Ok(())
        }

        /// `dst[c * dst_stride + r] = W[r] . y[c]` for the `n` activation rows `y` (Q8_1, `yq`
        /// blocks a row), `W` the stack of `mats` (one to three matrices that [`Self::stacks`]
        /// allows together): one launch, on tensor cores ([`launch_mmtc`], [`launch_mmq`]) or dp4a, the rows in
        /// chunks of four beyond the first.
        fn matmul(
            &self,
            mats: &[&Mat],
            (y, yq, ready): (u64, usize, bool),
            dst: (u64, usize),
            n: usize,
        ) -> Result<()> {
            let Some(first) = mats.first() else {
                return Ok(());
            };
            if self.wide_product(mats, (y, yq, ready), dst, n, Out::Set)? {
                return Ok(());
            }
            let stack = Stack::of(mats)?;
            // Chosen for the stack's rows (every kernel of a family sums a row alike).
            match self.tensor_core_kernel(first, n, stack.rows) {
                Some(TcKernel::Mmtc(kernel)) => {
                    let f = &self.f.mmtc[&(first.tag, kernel)];
                    launch_mmtc(self.on(), f, &stack, kernel, (y, yq), dst, n)
                }
                Some(TcKernel::Mmq(kernel)) => {
                    let f = &self.f.mmq[&(first.tag, kernel)];
                    let b = self.bufs.as_ref().expect("ensured");
                    let scratch = b.mmq.as_ref().expect("allocated with the family on");
                    launch_mmq(self.on(), f, &stack, kernel, (y, yq), dst, n, scratch)
                }
                None => {
                    let kernel = Dp4a::for_pass(first.tag, stack.rows, stack.cols, n);
                    let funcs = match stack.is_one() {
                        true => &self.f.mmvq,
                        false => &self.f.mmvq_stacked,
                    };
                    launch_mmvq(
                        self.on(),
                        &funcs[&(first.tag, kernel)],
                        kernel,
                        &stack,
                        (y, yq),
                        dst,
                        n,
                    )
                }
            }
        }

        /// [`Self::matmul`] through the wide products (cuBLAS) where the pass goes wide for
        /// `mats`, written as `out` says: `Ok(false)` (nothing done) where it does not.
        fn wide_product(
            &self,
            mats: &[&Mat],
            (y, yq, ready): (u64, usize, bool),
            dst: (u64, usize),
            n: usize,
            out: Out,
        ) -> Result<bool> {
            let half = self.bufs.as_ref().and_then(|b| b.half.as_ref());
            let (true, Some(wide), Some(half)) =
                (self.goes_wide(n, mats.iter().copied()), &self.wide, half)
            else {
                return Ok(false);
            };
            let stack: Vec<_> = mats.iter().map(|m| (m.ptr, m.rows, m.cols)).collect();
            let half = half.device_ptr(&self.stream).0;
            wide.product(&self.stream, &stack, (y, yq), (half, ready), dst, n, out)?;
            Ok(true)
        }

        /// [`Self::matmul`] of matrices that share their input (q, k and v; gate and up), each
        /// `(weight, first output column)`: runs of up to three that one launch takes
        /// ([`Self::stacks`]) go to one launch of the tensor-core kernel or of
        /// `mmvq_<tag>_<kernel>_stacked` (one launch instead of three; each row computed exactly as
        /// alone), the rest one launch each. Through the wide products, written as `out` says;
        /// returns how the results were written (f32 everywhere else).
        fn matmul_stacked(
            &self,
            ws: &[(Mat, usize)],
            (y, yq, ready): (u64, usize, bool),
            (dst, dst_stride): (u64, usize),
            n: usize,
            out: Out,
        ) -> Result<Out> {
            // Through the wide products all of them go in one call (one conversion of the
            // input, one GEMM for the copies that lie back to back).
            let back_to_back = ws.windows(2).all(|w| w[1].1 == w[0].1 + w[0].0.rows);
            if let (true, Some((_, first))) = (back_to_back, ws.first()) {
                let mats: Vec<&Mat> = ws.iter().map(|(m, _)| m).collect();
                let at = dst + (first * out.bytes()) as u64;
                if self.wide_product(&mats, (y, yq, ready), (at, dst_stride), n, out)? {
                    return Ok(out);
                }
            }
            let mut i = 0;
            while i < ws.len() {
                let mut j = i + 1;
                while j < ws.len() && j - i < 3 && self.stacks(&ws[j - 1], &ws[j], n) {
                    j += 1;
                }
                let at = dst + (ws[i].1 * 4) as u64;
                let mats: Vec<&Mat> = ws[i..j].iter().map(|(m, _)| m).collect();
                self.matmul(&mats, (y, yq, ready), (at, dst_stride), n)?;
                i = j;
            }
            Ok(Out::Set)
        }

        /// Whether `b` can follow `a` in one stacked launch: one format, row length and kernel
        /// (tensor cores, whose rows come in sixteens, or dp4a, with an even row count each: the
        /// chunked kernel takes rows in pairs), and `b`'s output columns right after `a`'s.
        fn stacks(&self, (a, a_off): &(Mat, usize), (b, b_off): &(Mat, usize), n: usize) -> bool {
            let tc = self.tensor_core_kernel(a, n, a.rows).is_some();
            let same = a.tag == b.tag
                && a.cols == b.cols
                && tc == self.tensor_core_kernel(b, n, b.rows).is_some();
            let even = a.rows.is_multiple_of(2) && b.rows.is_multiple_of(2);
            same && (tc || even) && *b_off == a_off + a.rows
        }

        /// The tensor-core product's kernel for `n` activation rows of `w` in a stack of `rows`
        /// rows ([`mmtc_kernel`], or [`mmq_kernel`] in the K-quant family), or `None` where `w`
        /// goes through the dp4a product: tensor cores off, a format without a tensor-core
        /// kernel, rows not a multiple of 16 or a row length not a multiple of 256.
        fn tensor_core_kernel(&self, w: &Mat, n: usize, rows: usize) -> Option<TcKernel> {
            if !(self.tensor_cores && self.has_tensor_core_kernel(w)) {
                return None;
            }
            Some(match self.mmq {
                true => TcKernel::Mmq(mmq_kernel(n, rows, w.cols)),
                false => TcKernel::Mmtc(mmtc_kernel(n, rows, w.cols)),
            })
        }

        /// Whether `w` has a tensor-core product: its format one with a kernel (loaded), rows a
        /// multiple of 16, a row length a multiple of 256.
        fn has_tensor_core_kernel(&self, w: &Mat) -> bool {
            let shape_fits = w.rows.is_multiple_of(16) && w.cols.is_multiple_of(256);
            let loaded = match self.mmq {
                true => self.f.mmq.contains_key(&(w.tag, Mmq::Rows(1))),
                false => self.f.mmtc.contains_key(&(w.tag, Mmtc::ROW)),
            };
            shape_fits && loaded
        }

        #[allow(clippy::too_many_arguments)]
        fn attention(
            &self,
            n: usize,
            chunks: usize,
            width: usize,
            q: u64,
            (k, v, k16, v16): (u64, u64, u64, u64),
            table: u64,
            part: u64,
            (out, q8, f16): (u64, u64, u64),
        ) -> Result<()> {
            let (n_i, nh_i, nkv_i, hd_i) =
                (n as i32, self.nh as i32, self.nkv as i32, self.hd as i32);
            let (width_i, chunks_i) = (width as i32, chunks as i32);
            let qb_i = qblocks(self.nh * self.hd) as i32;
            let scale = 1.0f32 / (self.hd as f32).sqrt();
            let wide = (self.wide_now && self.wide_attention())
                .then_some(self.f.att_wide.as_ref())
                .flatten();
            // Wide: one partial a span of chunks (`attention::wide_span`); else one a chunk.
            let (span, slots) = match wide {
                Some(_) => crate::gpu::attention::wide_span(n, self.nh, self.nkv, chunks),
                None => (1, chunks),
            };
            let (span_i, slots_i) = (span as i32, slots as i32);
            let csz_i = crate::gpu::attention::chunk_arg(
                wide.is_some(),
                crate::gpu::attention::fixed_chunk_ranks(),
            );
            if let Some(f) = wide {
                let mut b = Launch::new(f);
                b.arg(&q)
                    .arg(&k16)
                    .arg(&v16)
                    .arg(&table)
                    .arg(&part)
                    .arg(&n_i)
                    .arg(&nh_i)
                    .arg(&nkv_i)
                    .arg(&self.kv_stride)
                    .arg(&width_i)
                    .arg(&chunks_i)
                    .arg(&span_i)
                    .arg(&slots_i)
                    .arg(&scale);
                let cfg =
                    crate::gpu::attention::wide_launch(n, (self.nh, self.nkv, self.hd), slots);
                // SAFETY: hd is the kernel's; the shadows are laid out as the caches; the chunks
                // cover the highest cache row any row sees (`attention::wide_chunks`); part as
                // below.
                unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
            } else {
                let mut b = Launch::new(&self.f.att_chunk);
                b.arg(&q)
                    .arg(&k)
                    .arg(&v)
                    .arg(&table)
                    .arg(&part)
                    .arg(&n_i)
                    .arg(&nh_i)
                    .arg(&nkv_i)
                    .arg(&hd_i)
                    .arg(&self.kv_stride)
                    .arg(&width_i)
                    .arg(&chunks_i)
                    .arg(&csz_i)
                    .arg(&scale);
                let shape = (self.nh, self.nkv, self.hd);
                let cfg = crate::gpu::attention::chunk_launch(n, shape, chunks);
                // SAFETY: as in gpu::attention; the chunk count covers every row's key list.
                unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
            }
            let all_i = wide.is_some() as i32;
            // With a scale a super-block, a block takes the heads of one (`family_fits`).
            let group = if q8 != 0 { self.act_group() } else { 32 };
            let heads = (group as usize).div_ceil(self.hd);
            let mut b = Launch::new(&self.f.att_combine);
            b.arg(&part)
                .arg(&table)
                .arg(&out)
                .arg(&n_i)
                .arg(&nh_i)
                .arg(&hd_i)
                .arg(&width_i)
                .arg(&slots_i)
                .arg(&csz_i)
                .arg(&q8)
                .arg(&qb_i)
                .arg(&all_i)
                .arg(&f16)
                .arg(&group);
            let cfg = LaunchConfig {
                grid_dim: ((self.nh / heads) as u32, n as u32, 1),
                block_dim: ((self.hd * heads) as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: as above.
            unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
            Ok(())
        }
    }

    /// Graphs unless `TREESPEC_CUDA_GRAPHS=0`.
    fn graphs_allowed() -> bool {
        std::env::var("TREESPEC_CUDA_GRAPHS").as_deref() != Ok("0")
    }

    fn profile_replays() -> Option<usize> {
        std::env::var("TREESPEC_STEP_PROFILE").ok()?.parse().ok()
    }

    /// candle's launch shape for its `get_rows_*` kernels: (block size, grid rows).
    fn get_rows_shape(dtype: GgmlDType, h: usize) -> (usize, usize) {
        match dtype {
            GgmlDType::Q2K | GgmlDType::Q3K | GgmlDType::Q5K | GgmlDType::Q6K => {
                (64, h / dtype.block_size())
            }
            GgmlDType::Q4K => (32, h / dtype.block_size()),
            _ => (256, h.div_ceil(512).min(u16::MAX as usize)),
        }
    }

    fn get_rows_name(dtype: GgmlDType) -> Option<&'static str> {
        Some(match dtype {
            GgmlDType::Q4_0 => "get_rows_q4_0",
            GgmlDType::Q4_1 => "get_rows_q4_1",
            GgmlDType::Q5_0 => "get_rows_q5_0",
            GgmlDType::Q5_1 => "get_rows_q5_1",
            GgmlDType::Q8_0 => "get_rows_q8_0",
            GgmlDType::Q2K => "get_rows_q2_K",
            GgmlDType::Q3K => "get_rows_q3_K",
            GgmlDType::Q4K => "get_rows_q4_K",
            GgmlDType::Q5K => "get_rows_q5_K",
            GgmlDType::Q6K => "get_rows_q6_K",
            _ => return None,
        })
    }

    /// Every weight matrix of the step's products.
    fn weights<'a>(layers: &'a [Layer], lm_head: &'a Mat) -> impl Iterator<Item = &'a Mat> {
        layers
            .iter()
            .flat_map(|l| {
                l.qkv
                    .iter()
                    .map(|(m, _)| m)
                    .chain(l.gate_up.iter().map(|(m, _)| m))
                    .chain([&l.o, &l.down])
            })
            .chain([lm_head])
    }

    fn load_funcs(
        dev: &candle_core::CudaDevice,
        layers: &[Layer],
        lm_head: &Mat,
        embed: &Embed,
        tensor_cores: bool,
        (head_dim, group): (usize, usize),
    ) -> Result<Funcs> {
        let step = |name: &str| -> Result<CudaFunction> {
            crate::gpu::modules::func(dev, Module::Step, name)
        };
        // The dp4a kernels (single or stacked) for the formats of `mats`.
        let dp4a = |mats: &mut dyn Iterator<Item = &Mat>, stacked: bool| -> Result<_> {
            let mut funcs = HashMap::new();
            for m in mats {
                for kernel in Dp4a::ALL {
                    if let std::collections::hash_map::Entry::Vacant(slot) =
                        funcs.entry((m.tag, kernel))
                    {
                        slot.insert(mmvq_func(dev, m.tag, kernel, stacked)?);
                    }
                }
            }
            Ok(funcs)
        };
        let mmvq = dp4a(&mut weights(layers, lm_head), false)?;
        let mut stackable = layers
            .iter()
            .flat_map(|l| l.qkv.iter().chain(&l.gate_up))
            .map(|(m, _)| m);
        let mmvq_stacked = dp4a(&mut stackable, true)?;
        let (mut mmtc, mut mmq) = (HashMap::new(), HashMap::new());
        for tag in ["q4_k", "q6_k"].into_iter().filter(|_| tensor_cores) {
            for kernel in Mmtc::all() {
                mmtc.insert((tag, kernel), mmtc_func(dev, tag, kernel)?);
            }
            for kernel in Mmq::ALL.into_iter().filter(|_| super::mmq_requested()) {
                mmq.insert((tag, kernel), mmq_func(dev, tag, kernel)?);
            }
        }
        let get_rows = match embed {
            Embed::Quantized { dtype, .. } => {
                let name = get_rows_name(*dtype).ok_or_else(|| {
                    Error::Device(format!("no GPU row lookup for a {dtype:?} embedding"))
                })?;
                Some(
                    dev.get_or_load_func(name, &candle_kernels::QUANTIZED)?
                        .into_cuda_function(),
                )
            }
            Embed::Dense(_) => None,
        };
        Ok(Funcs {
            norm_q8: step("norm_q8")?,
            qkv_rope: step("qkv_rope")?,
            silu_mul_q8: step("silu_mul_q8")?,
            gather_rows: step("gather_rows")?,
            att_chunk: {
                let f = crate::gpu::modules::func(dev, Module::Attention, "attention_chunk_f32")?;
                crate::gpu::attention::allow_chunk_smem(&f, group, head_dim).map_err(driver)?;
                f
            },
            att_combine: crate::gpu::modules::func(
                dev,
                Module::Attention,
                "attention_combine_f32",
            )?,
            // f16 MMA: on GPUs of sm_80 on (`tensor_cores`) in a build for them.
            att_wide: match crate::gpu::attention::wide_kernel(head_dim) {
                Some(name) if tensor_cores => {
                    let f = crate::gpu::modules::func(dev, Module::Attention, &name)?;
                    // Without its shared memory the kernel cannot run: wide passes then attend
                    // row by row, the rest of the step unchanged.
                    match crate::gpu::attention::allow_wide_smem(&f, head_dim) {
                        Ok(()) => Some(f),
                        Err(e) => {
                            eprintln!("treespec: {name} cannot have its shared memory ({e:?})");
                            None
                        }
                    }
                }
                _ => None,
            },
            kv_keep: step("kv_keep")?,
            mmvq,
            mmvq_stacked,
            mmtc,
            mmq,
            get_rows,
        })
    }
}

/// Check the step on a real model against the CPU decoder (treespec's reference kernels), against
/// candle's GPU ops, and against itself: the logits of a prompt through each (the largest and the
/// median per-row difference, and how often the top token agrees), then batch invariance: a
/// chain of rows verified in one pass gives bit for bit the logits of one-row steps (CUDA-graph
/// replays) over the same tokens. Returns one line per check, or an error naming the first
/// failure.
pub fn check_model(
    decoder: &mut crate::model::decoder::Decoder,
    cpu: &mut crate::model::decoder::Decoder,
    tokens: &[u32],
) -> Result<Vec<String>> {
    use crate::model::decoder::{argmax_rows, Batch, Decoder};
    let n = tokens.len();
    if n < 24 {
        return Err(Error::InvalidArgument(
            "the step check needs at least 24 tokens".into(),
        ));
    }
    let mut report = vec![];
    let logits = |d: &mut Decoder, from: usize, toks: &[u32]| -> Result<Tensor> {
        let l = d
            .forward(&Batch::causal(toks, from).all_logits())?
            .logits
            .ok_or_else(|| Error::Device("no logits".into()))?;
        Ok(l.to_device(&Device::Cpu)?)
    };
    // (largest difference, its row, median row difference, rows whose top token agrees)
    let compare = |got: &Tensor, want: &Tensor| -> Result<(f32, usize, f32, usize)> {
        let row_diff = (got - want)?
            .abs()?
            .max_keepdim(1)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let diff = row_diff.iter().cloned().fold(0f32, f32::max);
        let worst = row_diff.iter().position(|&d| d == diff).unwrap_or(0);
        let mut sorted = row_diff.clone();
        sorted.sort_by(f32::total_cmp);
        let same = argmax_rows(got)?
            .iter()
            .zip(argmax_rows(want)?)
            .filter(|(a, b)| **a == *b)
            .count();
        Ok((diff, worst, sorted[sorted.len() / 2], same))
    };
    cpu.reset();
    let want = logits(cpu, 0, tokens)?;
    cpu.reset();
    let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
    decoder.set_gpu_step(false);
    decoder.reset();
    let candle = logits(decoder, 0, tokens)?;
    decoder.set_gpu_step(true);
    if !decoder.runtime().starts_with("treespec GPU step") {
        report.push(format!("GPU step not run: {}", decoder.runtime()));
        return Ok(report);
    }
    decoder.reset();
    let got = logits(decoder, 0, tokens)?;
    for (what, t) in [("GPU step", &got), ("candle's GPU ops", &candle)] {
        let (diff, row, median, same) = compare(t, &want)?;
        report.push(format!(
            "{what} vs the CPU, {n} prompt rows (largest logit {scale:.1}): max difference {diff:.3e} (row {row}), median row {median:.3e}, top token agrees on {same}/{n}"
        ));
        if what == "GPU step" && same * 10 < n * 9 {
            return Err(Error::Device(format!(
                "the GPU step disagrees with the CPU: {}",
                report.join("; ")
            )));
        }
    }
    // The wide path (cuBLAS on f16 copies, attention on tensor cores: `gpu::wide`), where the
    // step has copies and the prompt is wide enough: the same prompt as one verify-shaped pass.
    if decoder.runtime().contains("cuBLAS") && decoder.wide_from().is_some_and(|from| n >= from) {
        decoder.set_wide_verify(true);
        decoder.reset();
        let wide = logits(decoder, 0, tokens);
        decoder.set_wide_verify(false);
        let (diff, row, median, same) = compare(&wide?, &want)?;
        report.push(format!(
            "wide pass (cuBLAS f16, tensor-core attention) vs the CPU, {n} prompt rows: max difference {diff:.3e} (row {row}), median row {median:.3e}, top token agrees on {same}/{n}"
        ));
        if same * 10 < n * 9 {
            return Err(Error::Device(format!(
                "the wide pass disagrees with the CPU: {}",
                report.join("; ")
            )));
        }
    }
    // Compaction in one launch (`kv_keep`): of a block of 8 rows after the prompt, rows 1, 4 and
    // 6 kept. The caches then hold bit for bit the rows they held before, and a wide pass after
    // them (which reads the f16 shadows, compacted in the same launch) agrees with the CPU
    // decoder that kept the same rows.
    let split = n - 8;
    let kept = [1usize, 4, 6];
    let host_rows = |d: &Decoder| -> Result<Vec<Vec<f32>>> {
        let mut out = vec![];
        for (k, v) in d.kv_views()? {
            for t in [k, v] {
                out.push(
                    t.to_dtype(candle_core::DType::F32)?
                        .flatten_all()?
                        .to_vec1::<f32>()?,
                );
            }
        }
        Ok(out)
    };
    let mut moved = true;
    for d in [&mut *decoder, &mut *cpu] {
        d.reset();
        d.forward(&Batch::causal(&tokens[..split], 0).with_logits_rows(vec![]))?;
        d.forward(&Batch::causal(&tokens[split..], split).with_logits_rows(vec![]))?;
        let before = host_rows(d)?;
        d.keep(split, &kept)?;
        let after = host_rows(d)?;
        // Per cache, rows of [kv_heads * len] flattened: compare head by head.
        let len = split + 8;
        for (b, a) in before.iter().zip(&after) {
            let hd = b.len() / len / d.config().n_kv_heads;
            for g in 0..d.config().n_kv_heads {
                let row = |t: &[f32], heads_len: usize, r: usize| {
                    t[(g * heads_len + r) * hd..(g * heads_len + r + 1) * hd].to_vec()
                };
                let new_len = split + kept.len();
                for r in 0..new_len {
                    let src = if r < split {
                        r
                    } else {
                        split + kept[r - split]
                    };
                    if row(a, new_len, r) != row(b, len, src) {
                        moved = false;
                    }
                }
            }
        }
    }
    if !moved {
        return Err(Error::Device(
            "K/V compaction: the kept rows are not where they should be".into(),
        ));
    }
    let mut line = "K/V compaction of every layer in one launch: kept rows in place".to_string();
    let wide_rows = decoder.wide_from().unwrap_or(usize::MAX);
    if decoder.runtime().contains("cuBLAS") && wide_rows <= 64 {
        let next: Vec<u32> = tokens.iter().cycle().take(64).copied().collect();
        let from = split + kept.len();
        let want = logits(cpu, from, &next)?;
        decoder.set_wide_verify(true);
        let got = logits(decoder, from, &next);
        decoder.set_wide_verify(false);
        let (diff, _, _, same) = compare(&got?, &want)?;
        line += &format!(
            "; a wide pass of 64 rows after them against the CPU: max difference {diff:.3e}, top token agrees on {same}/64"
        );
        if same * 10 < 64 * 9 {
            return Err(Error::Device(format!("after a compaction, {line}")));
        }
    }
    report.push(line);
    cpu.reset();
    // Invariance: the last rows in one pass (one chunk of four rows with a tail; chunks plus a
    // tail; five chunks), replayed from a graph and launched eagerly, against one-row steps; the
    // pass also copies out two layers' hidden states (as a verify pass for a drafter that reads
    // them does), which must come out of the graph as they do eagerly.
    let same_bits = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    let layers = vec![0, decoder.config().n_layers - 1];
    for len in [3usize, 13, 20] {
        let split = n - len;
        let mut blocks = vec![];
        let mut states = vec![];
        for graphs in [true, false] {
            decoder.set_cuda_graphs(graphs);
            // With graphs, the second run of the shape replays one (the first runs eagerly).
            let runs = if graphs { 2 } else { 1 };
            let (mut block, mut state) = (vec![], vec![]);
            for _ in 0..runs {
                decoder.reset();
                logits(decoder, 0, &tokens[..split])?;
                let out = decoder.forward(
                    &Batch::causal(&tokens[split..], split)
                        .all_logits()
                        .with_hidden_layers(layers.clone()),
                )?;
                block = out
                    .logits
                    .ok_or_else(|| Error::Device("no logits".into()))?
                    .to_device(&Device::Cpu)?
                    .to_vec2::<f32>()?;
                state = out
                    .hidden
                    .iter()
                    .map(|h| h.to_device(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>())
                    .collect::<candle_core::Result<Vec<_>>>()?;
            }
            blocks.push(block);
            states.push(state);
        }
        if states[0].len() != layers.len()
            || !states[0]
                .iter()
                .zip(&states[1])
                .all(|(a, b)| a.len() == b.len() && same_bits(a, b))
        {
            return Err(Error::Device(format!(
                "the hidden states of a {len}-row pass replayed from a CUDA graph differ from the same pass launched eagerly"
            )));
        }
        decoder.set_cuda_graphs(true);
        let how = match (decoder.cuda_graphs_on(), decoder.hidden_graphs_on()) {
            (true, true) => "graph replay = eager launches, logits and two layers' hidden states",
            (true, false) => "graph replay = eager launches; passes with hidden states eager (their capture failed)",
            _ => "CUDA graphs off",
        };
        if !blocks[0]
            .iter()
            .zip(&blocks[1])
            .all(|(a, b)| same_bits(a, b))
        {
            return Err(Error::Device(format!(
                "a {len}-row pass replayed from a CUDA graph differs from the same pass launched eagerly"
            )));
        }
        decoder.reset();
        logits(decoder, 0, &tokens[..split])?;
        for (i, want_row) in blocks[0].iter().enumerate() {
            let one =
                logits(decoder, split + i, &tokens[split + i..split + i + 1])?.to_vec2::<f32>()?;
            if !same_bits(&one[0], want_row) {
                return Err(Error::Device(format!(
                    "the GPU step is not batch-invariant: row {i} of a {len}-row pass differs from its one-row step"
                )));
            }
        }
        report.push(format!(
            "{len}-row pass ({how}) = one-row steps, bit for bit"
        ));
    }
    decoder.reset();
    Ok(report)
}
