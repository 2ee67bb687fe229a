//! One decoder for the Llama, Qwen2, Qwen3 and Qwen3.5 families, built for speculative decoding.
//!
//! Architecture: pre-norm transformer with RMSNorm, rotary position embeddings (RoPE, Su et al.,
//! arXiv:2104.09864), grouped-query attention (Ainslie et al., arXiv:2305.13245) and a SwiGLU MLP
//! (Shazeer, arXiv:2002.05202), as in Llama (Touvron et al., arXiv:2302.13971). The family switches
//! are Qwen2's q/k/v biases and Qwen3's per-head q/k RMSNorm (Qwen technical reports,
//! arXiv:2407.10671 and arXiv:2505.09388), and Qwen3.5's hybrid layers: Gated DeltaNet layers
//! between gated attention layers with partial RoPE ([`crate::model::gated_delta`]). Reference
//! implementations: Hugging Face transformers' `modeling_llama.py`, `modeling_qwen2.py`,
//! `modeling_qwen3.py`, `modeling_qwen3_5.py`; llama.cpp's `llama-model.cpp`, `models/qwen35.cpp`.
//!
//! A Gated DeltaNet layer keeps a recurrent state instead of K/V rows: a block's rows continue
//! their parents' states (a chain's predecessor, a draft tree's parent node), and what
//! [`Decoder::keep`] and [`Decoder::truncate`] keep of the block is folded into the state when the
//! sequence moves on. A length before the last block cannot be reached again: truncating there
//! starts the sequence over ([`Decoder::truncate`] says how many rows it kept).
//!
//! Unlike candle-transformers' model files, [`Decoder::forward`] takes explicit positions per
//! token, an optional mask over the new tokens (a draft tree's ancestor mask), computes logits only
//! for the rows asked for, can return hidden states of chosen layers, and keeps a preallocated KV
//! cache that can be truncated and compacted ([`Decoder::truncate`], [`Decoder::keep`]).

use crate::arch::config::ModelConfig;
use crate::arch::kv_cache::KvCache;
use crate::arch::weights::{Embedding, Linear, WeightStore};
use crate::error::{Error, Result};
use crate::gpu::step::{GdnPass, GpuStep, StepInput, StepWeights};
use crate::model::gated_delta::{BlockLedger, Fold, RecurrentCache};
use crate::model::layer::{DecoderLayer, Mixer};
use crate::model::visibility::{Visibility, VisibleKeys};
use candle_core::{DType, Device, Tensor};

use crate::arch::batch::block_parents;
pub use crate::arch::batch::{Batch, BlockMask, ForwardOutput, PastMask, MASKED};
pub use crate::model::rope::{apply_rope, rope_tables};

/// What runs a decoder whose GPU step is `step`, after setting its products ([`GpuStep::
/// set_tensor_cores`]) and giving it the GPU's highest stream priority when `high_priority` (a
/// failure to is said in the description, not fatal).
fn step_runtime(step: &mut GpuStep, high_priority: bool, tensor_cores: bool) -> String {
    step.set_tensor_cores(tensor_cores);
    let mut products = step.products_name().to_string();
    if step.dependent_launches() {
        products.push_str(", dependent launches");
    }
    if let Some(w) = step.wide_products() {
        let gb = w.bytes as f64 / 1e9;
        let passes = if w.verify { "passes" } else { "prompt passes" };
        products.push_str(&format!(
            ", cuBLAS f16 for {passes} of {}+ rows ({}; {gb:.1} GB of copies)",
            w.from, w.source
        ));
    }
    match high_priority.then(|| step.set_high_priority()) {
        Some(Err(e)) => format!("treespec GPU step, {products} (no high-priority stream: {e})"),
        _ => format!("treespec GPU step, {products}"),
    }
}

/// A loaded decoder with its KV cache.
pub struct Decoder {
    cfg: ModelConfig,
    embed: Embedding,
    layers: Vec<DecoderLayer>,
    norm: Tensor,
    lm_head: Linear,
    cos: Tensor,
    sin: Tensor,
    caches: Vec<KvCache>,
    /// Per layer, a Gated DeltaNet layer's recurrent state (through candle's ops).
    recurrent: Vec<Option<RecurrentCache>>,
    /// Which rows the GPU step's Gated DeltaNet states hold, where the step runs them (the
    /// states live in the step's buffers; `recurrent` is then unused).
    step_ledger: BlockLedger,
    device: Device,
    context: usize,
    /// Attention through treespec's batch-invariant kernel (`gpu::attention`), not candle's ops.
    listed_attention: bool,
    /// The GPU decoder step (`gpu::step`), when it runs this model.
    step: Option<GpuStep>,
    /// The GPU step replays its passes at the GPU's highest stream priority.
    high_priority: bool,
    /// Q4_K / Q6_K products on tensor cores where the GPU has them (`gpu::step::tensor_cores_for`).
    tensor_cores: bool,
    /// Its passes verify drafts: its tensor-core products are then the K-quant family's
    /// ([`crate::gpu::step::mmq_wanted`]).
    verifies: bool,
    /// Verify passes of many rows through cuBLAS ([`Decoder::set_wide_verify`]).
    wide_verify: bool,
    /// What runs the forward pass, for status lines and benchmarks.
    runtime: String,
}

impl Decoder {
    /// Build the decoder from a weight store, with a KV cache for `context` positions.
    pub fn load(store: &mut WeightStore, cfg: ModelConfig, context: usize) -> Result<Self> {
        Self::load_for(store, cfg, context, false)
    }

    /// [`Decoder::load`] for a model whose passes will verify drafts (`verifies`: a drafter or
    /// an MTP head is loaded beside it), which picks the GPU step's products for it
    /// ([`crate::gpu::step::mmq_wanted`]).
    pub fn load_for(
        store: &mut WeightStore,
        cfg: ModelConfig,
        context: usize,
        verifies: bool,
    ) -> Result<Self> {
        cfg.validate()?;
        if context == 0 {
            return Err(Error::Config("context must hold at least one token".into()));
        }
        let device = store.device().clone();
        let (h, hd) = (cfg.hidden, cfg.head_dim);
        let embed_w = store.get_checked("token_embd.weight", &[cfg.vocab_size, h])?;
        let embed = Embedding::new(embed_w)?;
        let layers = (0..cfg.n_layers)
            .map(|i| DecoderLayer::load_as(store, &format!("blk.{i}"), &cfg, cfg.is_linear(i)))
            .collect::<Result<Vec<_>>>()?;
        let norm = crate::model::layer::norm_weight(store, "output_norm.weight", &cfg)?;
        let lm_head = if cfg.tie_embeddings || !store.contains("output.weight") {
            embed.as_linear()?
        } else {
            Linear::new(
                store.get_checked("output.weight", &[cfg.vocab_size, h])?,
                None,
            )?
        };
        let freq_factors = if store.contains("rope_freqs.weight") {
            Some(store.get_dense("rope_freqs.weight")?.to_vec1::<f32>()?)
        } else {
            None
        };
        let (cos, sin) = rope_tables(&cfg, context, freq_factors.as_deref(), &device)?;
        // A Gated DeltaNet layer's cache holds no rows, only their count.
        let caches = (0..cfg.n_layers)
            .map(|i| {
                let heads = if cfg.is_linear(i) { 0 } else { cfg.n_kv_heads };
                KvCache::new(heads, hd, context, DType::F32, &device)
            })
            .collect::<Result<Vec<_>>>()?;
        let recurrent = layers
            .iter()
            .map(|l| match &l.mixer {
                Mixer::GatedDelta(g) => RecurrentCache::new(g).map(Some),
                Mixer::Attention(_) => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let listed_attention = Visibility::listed_for(&cfg, &device);
        let mut decoder = Decoder {
            step: None,
            high_priority: false,
            tensor_cores: crate::gpu::step::tensor_cores_for(false),
            verifies,
            wide_verify: false,
            runtime: String::new(),
            listed_attention,
            cfg,
            embed,
            layers,
            norm,
            lm_head,
            cos,
            sin,
            caches,
            recurrent,
            step_ledger: BlockLedger::default(),
            device,
            context,
        };
        decoder.set_gpu_step(crate::gpu::step::enabled());
        Ok(decoder)
    }

    /// Run forward passes through treespec's GPU decoder step (`on`, where it can run this
    /// model) or through candle's ops.
    pub fn set_gpu_step(&mut self, on: bool) {
        // A hybrid model's recurrent states live where the pass runs: they do not move.
        if self.cfg.linear.is_some() && !self.is_empty() {
            self.reset();
        }
        self.step = None;
        self.step_ledger = BlockLedger::default();
        self.runtime = if self.device.is_cpu() {
            "cpu kernels".into()
        } else if !on {
            "candle ops (GPU step off)".into()
        } else if !self.listed_attention {
            "candle ops (batch invariance off)".into()
        } else if let Some(weights) = self.step_weights() {
            let family = crate::gpu::step::mmq_wanted(self.cfg.linear.is_some(), self.verifies);
            match GpuStep::new(&weights, &self.device, family) {
                Ok(mut step) => {
                    step.set_wide_verify(self.wide_verify);
                    // Rows cached before the step existed are not in its shadows.
                    if self.caches.first().is_some_and(|c| !c.is_empty()) {
                        step.mark_shadow_stale();
                    }
                    let runtime = step_runtime(&mut step, self.high_priority, self.tensor_cores);
                    self.step = Some(step);
                    runtime
                }
                Err(why) => format!("candle ops ({why})"),
            }
        } else {
            "candle ops (a Gated DeltaNet layer runs on the host recurrence)".into()
        };
    }

    /// The most rows a draft tree verified in one pass may have on this model, where there is a
    /// bound: on the GPU step a hybrid model keeps each tree row's Gated DeltaNet inputs for the
    /// fold after the walk ([`crate::gpu::step::GDN_STASH_ROWS`]; chains of any length pass).
    pub fn tree_rows_limit(&self) -> Option<usize> {
        self.step_runs_gdn()
            .then_some(crate::gpu::step::GDN_STASH_ROWS)
    }

    /// The GPU step runs this model's Gated DeltaNet layers (their states are its).
    fn step_runs_gdn(&self) -> bool {
        self.step.is_some() && self.cfg.linear.is_some()
    }

    /// Give this model's GPU passes the GPU's highest stream priority (for a drafter that drafts
    /// while the target verifies on the same GPU: its blocks are scheduled first).
    pub fn set_high_priority(&mut self) {
        self.high_priority = true;
        if let Some(step) = self.step.as_mut() {
            self.runtime = step_runtime(step, true, self.tensor_cores);
        }
    }

    /// Say whether this model's passes verify drafts after all (`on`), before decoding: where
    /// that changes its GPU step's products ([`crate::gpu::step::mmq_wanted`]), the step is
    /// built again (a target loaded to verify for which no drafter came).
    pub fn set_verifies(&mut self, on: bool) {
        let hybrid = self.cfg.linear.is_some();
        let changes = crate::gpu::step::mmq_wanted(hybrid, on)
            != crate::gpu::step::mmq_wanted(hybrid, self.verifies);
        self.verifies = on;
        if changes && self.step.is_some() {
            self.set_gpu_step(true);
        }
    }

    /// The GPU step's products are the K-quant family's ([`crate::gpu::step::mmq_wanted`]).
    pub fn step_family(&self) -> bool {
        self.step.as_ref().is_some_and(|s| s.family())
    }

    /// Run the GPU step's Q4_K / Q6_K products on tensor cores (`on`, where the GPU has them) or
    /// on the dp4a kernel: a target's on tensor cores, a drafter's not
    /// ([`crate::gpu::step::tensor_cores_for`]). Set it before decoding: either way a pass is
    /// batch-invariant, but the two sum in different orders (captured graphs are dropped).
    pub fn set_tensor_cores(&mut self, on: bool) {
        self.tensor_cores = on;
        if let Some(step) = self.step.as_mut() {
            self.runtime = step_runtime(step, self.high_priority, on);
        }
    }

    /// Let the GPU step's verify passes of many rows multiply through cuBLAS with f16 copies of
    /// the weights (`on`: big trees verify several times faster, exact to `ar` only up to f16's
    /// rounding) or keep them on the batch-invariant quantised kernels (the default);
    /// [`crate::gpu::wide`].
    pub fn set_wide_verify(&mut self, on: bool) {
        self.wide_verify = on;
        if let Some(step) = self.step.as_mut() {
            step.set_wide_verify(on);
            self.runtime = step_runtime(step, self.high_priority, self.tensor_cores);
        }
    }

    /// Rows from which this decoder's GPU passes go through cuBLAS (`None`: no wide products).
    pub fn wide_from(&self) -> Option<usize> {
        self.step.as_ref()?.wide_products().map(|w| w.from)
    }

    /// Send passes of `from` rows and more through cuBLAS, for a calibration (`bench --costs
    /// --calibrate`); false where the decoder has no wide products.
    pub fn set_wide_from(&mut self, from: usize) -> bool {
        self.step.as_mut().is_some_and(|s| s.set_wide_from(from))
    }

    /// Let the GPU step replay passes from CUDA graphs (the default) or launch them eagerly.
    pub fn set_cuda_graphs(&mut self, on: bool) {
        if let Some(step) = self.step.as_mut() {
            step.set_graphs(on);
        }
    }

    /// Whether the GPU step replays passes from CUDA graphs.
    pub fn cuda_graphs_on(&self) -> bool {
        self.step.as_ref().is_some_and(|s| s.graphs_on())
    }

    /// Whether the GPU step's passes that copy hidden states out replay from CUDA graphs too.
    pub fn hidden_graphs_on(&self) -> bool {
        self.step.as_ref().is_some_and(|s| s.hidden_graphs_on())
    }

    /// Passes so far whose shape was new to the GPU step's CUDA graphs (run eagerly or
    /// captured; 0 without the GPU step): a step that ran one measured a one-off cost.
    pub fn cold_passes(&self) -> u64 {
        self.step.as_ref().map_or(0, |s| s.cold_passes())
    }

    /// What runs the forward pass ("treespec GPU step" and its products, or candle's ops and
    /// why).
    pub fn runtime(&self) -> &str {
        &self.runtime
    }

    /// The weights as the GPU step reads them (`None` where a layer cannot run there).
    fn step_weights(&self) -> Option<StepWeights<'_>> {
        Some(StepWeights {
            cfg: &self.cfg,
            embed: &self.embed,
            layers: self
                .layers
                .iter()
                .map(|l| l.step_weights())
                .collect::<Option<Vec<_>>>()?,
            norm: &self.norm,
            lm_head: &self.lm_head,
            cos: &self.cos,
            sin: &self.sin,
            caches: self.caches.iter().map(|c| c.storage()).collect(),
        })
    }

    /// The token embedding (what an MTP head's GPU step is built with).
    pub(crate) fn embedding(&self) -> &Embedding {
        &self.embed
    }

    /// The LM head (what an MTP head's GPU step is built with).
    pub(crate) fn lm_head_weights(&self) -> &Linear {
        &self.lm_head
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Tokens the KV cache can hold.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Committed tokens in the KV cache.
    pub fn len(&self) -> usize {
        self.caches.first().map_or(0, |c| c.len())
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drop every cached row from `len` on. A hybrid model keeps fewer where its recurrent
    /// state cannot be had at `len` (a length inside an earlier block): then none; [`Self::len`]
    /// says what was kept.
    pub fn truncate(&mut self, len: usize) {
        let len = match self.step_runs_gdn() {
            true => self.step_ledger.truncate(len),
            false => {
                let len = self
                    .recurrent
                    .iter_mut()
                    .flatten()
                    .fold(len, |len, r| len.min(r.truncate(len)));
                for r in self.recurrent.iter_mut().flatten() {
                    r.truncate(len);
                }
                len
            }
        };
        for c in &mut self.caches {
            c.truncate(len);
        }
        if let (0, Some(step)) = (len, self.step.as_mut()) {
            step.shadow_fresh();
        }
    }

    /// Forget the whole sequence.
    pub fn reset(&mut self) {
        self.truncate(0);
    }

    /// Of the rows from `base` on (the last block), keep those at offsets `rows` (ascending, as a
    /// tree's accepted path and a grown tree's rows come: the GPU step's compaction in one launch
    /// refuses any other order), moved to sit right after `base`.
    pub fn keep(&mut self, base: usize, rows: &[usize]) -> Result<()> {
        let lost = match self.step_runs_gdn() {
            true => {
                self.step_ledger.keep(base, rows)?;
                self.step_ledger.len() != base + rows.len()
            }
            false => {
                for r in self.recurrent.iter_mut().flatten() {
                    r.keep(base, rows)?;
                }
                let kept = base + rows.len();
                self.recurrent.iter().flatten().any(|r| r.len() != kept)
            }
        };
        if lost {
            // A block too long to keep its rows' inputs: the sequence starts over.
            self.reset();
            return Ok(());
        }
        // The GPU step moves every layer's rows (and their f16 shadows) in one launch.
        if let Some(step) = self.step.as_mut() {
            for c in &self.caches {
                c.check_keep(base, rows)?;
            }
            step.keep(base, rows)?;
            for c in &mut self.caches {
                c.kept(base, rows.len());
            }
            return Ok(());
        }
        // One gather index for every layer (one small copy to the device, not one a layer).
        let idx = KvCache::keep_index(base, rows, &self.device)?;
        for c in &mut self.caches {
            c.keep_indexed(base, rows, idx.as_ref())?;
        }
        Ok(())
    }

    /// Run one forward of each kernel shape (32, 4, 2 and 1 new tokens) and clear the cache.
    ///
    /// candle repacks quantised weights for its CPU kernels lazily, separately for one row, two
    /// rows, small blocks and blocks of 32 or more (AMX tiles where the CPU has them); doing it here keeps that one-time cost (seconds for a 1.5B model)
    /// out of the first answer and out of every timing.
    pub fn warm_up(&mut self) -> Result<()> {
        let saved = self.len();
        for n in [32usize, 4, 2, 1] {
            if saved + n > self.context {
                continue;
            }
            let toks = vec![0u32; n];
            self.forward(&Batch::causal(&toks, saved))?;
            self.truncate(saved);
        }
        Ok(())
    }

    /// The valid K and V rows of every layer (`[kv_heads, len, head_dim]` each), for inspection.
    pub fn kv_views(&self) -> Result<Vec<(Tensor, Tensor)>> {
        self.caches.iter().map(|c| c.view()).collect()
    }

    /// Embed token ids: `[n, hidden]`.
    pub fn embed(&self, tokens: &[u32]) -> Result<Tensor> {
        let ids = Tensor::from_vec(tokens.to_vec(), tokens.len(), &self.device)?;
        self.embed.forward(&ids)
    }

    /// The LM head alone over `[n, hidden]` (already normalised) states: `[n, vocab]` logits.
    pub fn lm_head(&self, normed: &Tensor) -> Result<Tensor> {
        self.lm_head.forward(normed)
    }

    /// The LM head for a drafter's rows `[n, hidden]` (already normed): through the GPU step's
    /// f16 copy of it in one cuBLAS GEMM where there is one (a drafter only proposes, so its
    /// logits need not be the target's bit for bit), else [`Self::lm_head`].
    pub fn draft_lm_head(&self, normed: &Tensor) -> Result<Tensor> {
        if let Some(step) = self.step.as_ref() {
            if let Some(logits) = step.lm_head_copy(normed)? {
                return Ok(logits);
            }
        }
        self.lm_head(normed)
    }

    /// The LM head's matrix `[vocab, hidden]` in f32, as the head computes with it (for training
    /// a drafter through it: quantised products have no gradient).
    pub fn lm_head_dense(&self) -> Result<Tensor> {
        let eye = Tensor::eye(self.cfg.hidden, DType::F32, &self.device)?;
        Ok(self.lm_head.forward(&eye)?.t()?.contiguous()?)
    }

    /// The final norm over hidden states `[n, hidden]` (the last layer's outputs): what the LM
    /// head reads.
    pub fn final_norm(&self, hidden: &Tensor) -> Result<Tensor> {
        let hidden = hidden.to_dtype(DType::F32)?;
        Ok(candle_nn::ops::rms_norm(
            &hidden,
            &self.norm,
            self.cfg.rms_eps as f32,
        )?)
    }

    /// Final norm and LM head over hidden states `[n, hidden]`: `[n, vocab]` logits.
    pub fn logits_from_hidden(&self, hidden: &Tensor) -> Result<Tensor> {
        self.lm_head.forward(&self.final_norm(hidden)?)
    }

    /// Run the new block through the model, appending its K/V to the cache.
    pub fn forward(&mut self, batch: &Batch) -> Result<ForwardOutput> {
        self.check_batch(batch)?;
        let n = batch.tokens.len();
        let prefix = self.len();
        let parents = match self.cfg.linear.is_some() {
            true => Some(block_parents(batch)?),
            false => None,
        };
        let visible = VisibleKeys::new(batch.mask.as_ref(), batch.past.as_ref(), n, prefix);
        let distinct = {
            let mut rows = batch.logits_rows.clone();
            rows.sort_unstable();
            rows.windows(2).all(|w| w[0] != w[1])
        };
        if self.step_runs_gdn() && !distinct {
            return Err(Error::InvalidArgument(
                "a hybrid model's GPU pass takes each logits row once".into(),
            ));
        }
        if let (Some(_), true) = (self.step.as_ref(), distinct) {
            return self.step_forward(batch, parents.as_deref(), &visible);
        }
        self.candle_forward(batch, parents.as_deref(), &visible)
    }

    /// An error where `batch` does not fit the decoder: an empty block, positions that do not
    /// match its tokens or lie past the context, a block that overflows the context, logits rows
    /// or hidden layers that do not exist, a mask or past mask of another block, or a token
    /// outside the vocabulary.
    fn check_batch(&self, batch: &Batch) -> Result<()> {
        let n = batch.tokens.len();
        if n == 0 {
            return Err(Error::InvalidArgument("forward of an empty block".into()));
        }
        if batch.positions.len() != n {
            return Err(Error::InvalidArgument(format!(
                "{} tokens but {} positions",
                n,
                batch.positions.len()
            )));
        }
        let prefix = self.len();
        if prefix + n > self.context {
            return Err(Error::ContextOverflow {
                prompt: prefix + n,
                context: self.context,
            });
        }
        if let Some(&p) = batch.positions.iter().find(|&&p| p >= self.context) {
            return Err(Error::InvalidArgument(format!(
                "position {p} is past the context of {}",
                self.context
            )));
        }
        if let Some(&r) = batch.logits_rows.iter().find(|&&r| r >= n) {
            return Err(Error::InvalidArgument(format!(
                "logits row {r} of a block of {n}"
            )));
        }
        if let Some(&l) = batch
            .hidden_layers
            .iter()
            .find(|&&l| l >= self.cfg.n_layers)
        {
            return Err(Error::InvalidArgument(format!(
                "hidden layer {l} of a model with {} layers",
                self.cfg.n_layers
            )));
        }
        if let Some(m) = &batch.mask {
            if m.len() != n {
                return Err(Error::InvalidArgument(format!(
                    "mask of {} rows for a block of {n}",
                    m.len()
                )));
            }
        }
        if let Some(past) = &batch.past {
            let bad = past.visible.len() != n
                || past
                    .visible
                    .iter()
                    .flatten()
                    .any(|&r| r < past.start || r >= prefix);
            if bad {
                return Err(Error::InvalidArgument(format!(
                    "past mask over rows {}..{prefix} does not fit a block of {n}",
                    past.start
                )));
            }
        }
        if let Some(&t) = batch
            .tokens
            .iter()
            .find(|&&t| t as usize >= self.cfg.vocab_size)
        {
            return Err(Error::InvalidArgument(format!(
                "token id {t} is outside the vocabulary of {}",
                self.cfg.vocab_size
            )));
        }
        Ok(())
    }

    /// The fold of the GPU step's Gated DeltaNet states that the next block continues from (a
    /// chain longer than the stash: folded as the step ran). Where it cannot be folded, the
    /// sequence is reset and the error says to read it again.
    fn step_fold(&mut self) -> Result<Fold> {
        let seen = self.step_ledger.len();
        let mut fold = self.step_ledger.take_fold();
        if fold.whole && !fold.replayable {
            // A chain longer than the stash: the step folded it as it ran.
            fold = Fold {
                restart: fold.restart,
                chain: true,
                ..Fold::default()
            };
        }
        if !fold.foldable() {
            self.reset();
            return Err(Error::InvalidArgument(format!(
                "the Gated DeltaNet state was lost (a tree after {seen} rows with no \
                 path kept): read the sequence again"
            )));
        }
        Ok(fold)
    }

    /// [`Decoder::forward`] through the GPU step (which runs this model; each logits row asked
    /// for once): the block's tree `parents` on a hybrid model, its keys `visible`. The block
    /// joins the Gated DeltaNet ledger; on an error after the fold began, the sequence starts
    /// over.
    fn step_forward(
        &mut self,
        batch: &Batch,
        parents: Option<&[Option<usize>]>,
        visible: &VisibleKeys,
    ) -> Result<ForwardOutput> {
        let (n, prefix) = (batch.tokens.len(), self.len());
        if let Some(parents) = parents {
            crate::gpu::step::gdn_block_fits(parents)?;
        }
        let fold = match parents {
            Some(_) => Some(self.step_fold()?),
            None => None,
        };
        let gdn = parents
            .zip(fold.as_ref())
            .map(|(parents, fold)| GdnPass { parents, fold });
        let input = StepInput {
            tokens: &batch.tokens,
            positions: &batch.positions,
            prefix,
            keys: visible,
            logits_rows: &batch.logits_rows,
            hidden_layers: &batch.hidden_layers,
            inputs: None,
            gdn,
        };
        let out = match self.step.as_mut() {
            Some(step) => step.forward(&input),
            None => Err(Error::InvalidArgument("no GPU step runs this model".into())),
        };
        let (logits, hidden) = match out {
            Ok(out) => out,
            Err(e) => {
                // The fold may or may not have reached the recurrent states: start over.
                if parents.is_some() {
                    self.reset();
                }
                return Err(e);
            }
        };
        if let Some(parents) = parents {
            // A block longer than the stash is folded as it runs: not replayable (a keep or
            // a cut inside it starts the sequence over, as on candle's path).
            self.step_ledger
                .push(parents, n <= crate::gpu::step::GDN_STASH_ROWS);
        }
        for c in &mut self.caches {
            c.advance(n)?;
        }
        Ok(ForwardOutput { logits, hidden })
    }

    /// [`Decoder::forward`] through candle's ops, layer by layer: the block's tree `parents` on a
    /// hybrid model, its keys `visible`.
    fn candle_forward(
        &mut self,
        batch: &Batch,
        parents: Option<&[Option<usize>]>,
        visible: &VisibleKeys,
    ) -> Result<ForwardOutput> {
        let n = batch.tokens.len();
        // K/V rows written here, not by the step: its f16 shadows fall behind.
        if let Some(step) = self.step.as_mut() {
            step.mark_shadow_stale();
        }
        let pos = Tensor::from_vec(
            batch
                .positions
                .iter()
                .map(|&p| p as u32)
                .collect::<Vec<_>>(),
            n,
            &self.device,
        )?;
        let cos = self.cos.index_select(&pos, 0)?;
        let sin = self.sin.index_select(&pos, 0)?;
        let mask = Visibility::new(visible, self.listed_attention, &self.cfg, &self.device)?;

        let mut x = self.embed(&batch.tokens)?;
        let mut hidden = vec![None; batch.hidden_layers.len()];
        for li in 0..self.layers.len() {
            x = self.layer_forward(li, &x, (&cos, &sin), &mask, parents)?;
            for (slot, &want) in batch.hidden_layers.iter().enumerate() {
                if want == li {
                    hidden[slot] = Some(x.clone());
                }
            }
        }
        let hidden = hidden.into_iter().flatten().collect();
        let logits = if batch.logits_rows.is_empty() {
            None
        } else {
            let rows = if batch.logits_rows.len() == n
                && batch.logits_rows.iter().enumerate().all(|(i, &r)| i == r)
            {
                x
            } else {
                let idx = Tensor::from_vec(
                    batch
                        .logits_rows
                        .iter()
                        .map(|&r| r as u32)
                        .collect::<Vec<_>>(),
                    batch.logits_rows.len(),
                    &self.device,
                )?;
                x.index_select(&idx, 0)?
            };
            Some(self.logits_from_hidden(&rows)?)
        };
        Ok(ForwardOutput { logits, hidden })
    }

    fn layer_forward(
        &mut self,
        li: usize,
        x: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        mask: &Visibility,
        parents: Option<&[Option<usize>]>,
    ) -> Result<Tensor> {
        let layer = &self.layers[li];
        match (&layer.mixer, self.recurrent[li].as_mut(), parents) {
            (Mixer::GatedDelta(g), Some(state), Some(parents)) => {
                let mixed = state.forward(g, &layer.attn_norm(x)?, parents)?;
                self.caches[li].advance(parents.len())?;
                layer.mlp.forward(&(x + mixed)?)
            }
            _ => layer.forward_cached(x, cos, sin, &mut self.caches[li], mask),
        }
    }
}

/// Row-wise argmax of a `[rows, vocab]` logits tensor (ties go to the lowest id); one kernel of
/// treespec's on a GPU ([`crate::gpu::row_argmax`]).
pub fn argmax_rows(logits: &Tensor) -> Result<Vec<u32>> {
    crate::gpu::row_argmax(logits)
}
