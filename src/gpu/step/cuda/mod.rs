//! The step on a CUDA device: its state and buffers here; building it (`load`), running a pass
//! (`pass`), a layer's launches (`layers`), the products' kernels (`dispatch`), its switches
//! (`settings`), an MTP head's greedy chain (`head_chain`) and the stage clock of a profiled
//! run (`clock`).

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
use crate::arch::config::RopeStyle;
use crate::arch::weights::Embedding;
use crate::gpu::wide::{Out, WideProducts};
use candle_core::Storage;
use cudarc::driver::{
    result, sys, CudaEvent, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr,
    DevicePtrMut, LaunchConfig, PushKernelArg,
};
use std::collections::{HashMap, HashSet};

mod clock;
mod dispatch;
mod gdn;
mod head_chain;
mod layers;
mod load;
mod pass;
mod settings;
use load::{get_rows_shape, graphs_allowed, profile_replays, weights};

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
    /// Projections writing columns `offset..offset + rows` of the q/k/v row (a Gated DeltaNet's
    /// `[c | z | b | a]` row).
    qkv: Vec<(Mat, usize)>,
    /// Width of that row.
    width: usize,
    /// Each query head is followed by its output gate (Qwen3.5's gated attention).
    q_gated: bool,
    /// A Gated DeltaNet layer's own (no K/V cache then).
    gdn: Option<GdnLayer>,
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

/// A Gated DeltaNet layer in the step: its small weights, and its committed state (the
/// recurrence `[hv, dk, dv]` and the convolution window `[K-1, C]`), which passes read and
/// `gdn_commit` updates in place.
struct GdnLayer {
    conv: u64,
    a_neg: u64,
    dt_bias: u64,
    norm: u64,
    s: CudaSlice<f32>,
    window: CudaSlice<f32>,
}

/// Per Gated DeltaNet layer what its last block left for a fold of any path of it: the inputs
/// `[rows, C]`, the convolution's outputs `[rows, C]`, the gates `[rows, 2 hv]`; and the table
/// `gdn_commit` reads (per layer the state's, the stash's and the gates' weights' addresses).
struct GdnStash {
    rows: usize,
    bufs: Vec<[CudaSlice<f32>; 3]>,
    table: CudaSlice<u64>,
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
    /// Convolution outputs of a Gated DeltaNet block too long for the stash (`rows x C`).
    gdn_u: Option<CudaSlice<f32>>,
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
    /// f32 rows to Q8_1 (a Gated DeltaNet's output before its out projection).
    quant_rows: CudaFunction,
    /// `kernels/gdn.cu`, where the model has Gated DeltaNet layers.
    gdn: Option<GdnFuncs>,
}

struct GdnFuncs {
    conv: CudaFunction,
    /// `gdn_tree{cols}` by name, every width built.
    trees: Vec<(&'static str, CudaFunction)>,
    norm: CudaFunction,
    window: CudaFunction,
    commit: CudaFunction,
}

impl GdnFuncs {
    /// The `gdn_tree` width `name` ([`crate::gpu::gdn::TreeLaunch::kernel`]).
    fn tree(&self, name: &str) -> Result<&CudaFunction> {
        self.trees
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, f)| f)
            .ok_or_else(|| Error::Device(format!("no Gated DeltaNet kernel {name}")))
    }
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
    /// Whether a hybrid's Gated DeltaNet walk saves and restores states (a tree): only then do
    /// its recurrence launches reserve shared memory for the saved states.
    branching: bool,
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
    /// The Gated DeltaNet fold (`[rows, restart, path[GDN_STASH_ROWS]]`), then each row's parent
    /// (`u32::MAX`: none), then the rows' walk (`gpu::gdn_walk`, n + 1 entries).
    gdn: usize,
    len: usize,
}

/// u32 entries of the fold before the parents ([`Meta::gdn`]).
const GDN_FOLD: usize = 2 + GDN_STASH_ROWS;

impl Meta {
    fn new(n: usize, width: usize) -> Self {
        let gdn = 4 * n + n * width;
        Meta {
            ids: 0,
            pos: n,
            slots: 2 * n,
            out_slots: 3 * n,
            table: 4 * n,
            width,
            gdn,
            len: gdn + GDN_FOLD + 2 * n + 1,
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
    /// The fold, then the parents ([`Meta::gdn`]).
    gdn: u64,
    parents: u64,
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
    /// The widest projection row of a layer (q/k/v, a Gated DeltaNet's).
    qkv_width: usize,
    eps: f32,
    interleaved: i32,
    /// Dimensions RoPE turns of a head (all, or Qwen3.5's first quarter).
    rot: i32,
    /// The Gated DeltaNet layers' shape and their norm's epsilon, where the model has them.
    linear: Option<(crate::arch::config::LinearAttention, f32)>,
    /// Their stash, grown to the largest block kept.
    stash: Option<GdnStash>,
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
    /// Those products in the K-quant family (`kernels/mmq.cu`, [`super::mmq_wanted`] and
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
    /// Whether the pass being launched is a tree over Gated DeltaNet layers ([`GraphKey::branching`]).
    branching_now: bool,
    /// The K/V caches' f16 shadows (K and V of each layer), kept beside them where the step
    /// has wide products: written by every pass, compacted with the caches ([`Self::keep`]).
    shadow: Vec<CudaSlice<u16>>,
    /// Cache rows were written elsewhere (candle's ops) since the cache was last empty: the
    /// shadows may be behind, and wide passes attend the f32 caches row by row.
    shadow_stale: bool,
    /// Per layer the K and V caches and their shadows, `[layers][4]` addresses, for the
    /// compaction of all layers in one launch (`kv_keep`).
    kv_table: CudaSlice<u64>,
    /// Stage timings of eager passes where profiling is on ([`clock`]).
    clock: Option<clock::StageClock>,
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
