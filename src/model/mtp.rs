//! A multi-token-prediction (MTP) head: one extra decoder block on the target's own last hidden
//! state, which predicts the token after next and, fed its own output, the ones after that.
//!
//! Architecture: MiMo's MTP layer (Xiaomi, "MiMo: Unlocking the Reasoning Potential of Language
//! Models", arXiv:2505.07608), after DeepSeek-V3's sequential MTP modules (arXiv:2412.19437).
//! Reference code: vLLM v0.33 `model_executor/models/mimo_mtp.py` and the proposer loop of
//! `v1/spec_decode/llm_base_proposer.py`; the rules, with line references, are in
//! `tests/data/mtp/README.md`. One application at position `p` with token `t` and hidden `g`:
//!
//! ```text
//! e = embed(t)   (zero at p = 0)
//! u = input_proj(cat[hidden_norm(g), token_norm(e)])        hidden first (MiMo)
//! y = block(u)   a Qwen2 decoder block with its own KV cache, RoPE at p
//! o = final_norm(y);  logits = lm_head(o)                   the target's LM head, no model.norm
//! ```
//!
//! The first pass over the context pairs position `p` with the target's pre-norm hidden state
//! `h_p` and the token `x_{p+1}`; a chain continues one position at a time, fed `o` and the token
//! it drafted. The head shares the target's embedding and LM head.
//!
//! Qwen3.5 / 3.6 (`mtp.*` in Hugging Face checkpoints, `blk.{n}.nextn.*` in llama.cpp's GGUF;
//! reference: vLLM `model_executor/models/qwen3_5_mtp.py`, llama.cpp `src/models/qwen35.cpp`)
//! differs in three places: the embedding comes first (`fc(cat[norm_e(e), norm_h(g)])`), `g` is
//! the target's hidden state *after* its final norm (what its LM head reads), and the embedding is
//! not zeroed at position 0. The block is a gated full-attention Qwen3.5 layer.

use crate::arch::config::{Family, ModelConfig};
use crate::arch::kv_cache::KvCache;
use crate::arch::weights::{Linear, WeightStore};
use crate::error::{Error, Result};
use crate::gpu::step::{ChainStart, GpuStep, HeadStage, StepInput, StepWeights};
use crate::model::decoder::{rope_tables, BlockMask, Decoder, PastMask};
use crate::model::draft_vocab::tokens_of;
use crate::model::layer::{norm_weight, DecoderLayer};
use crate::model::visibility::{Visibility, VisibleKeys};
use candle_core::{DType, Tensor};

/// Where a checkpoint keeps its MTP head (names as the weight store reads them: GGUF-style, which
/// the store maps to Hugging Face names for safetensors files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MtpLayout {
    /// MiMo (`model.mtp_layers.{i}.{token_layernorm, hidden_layernorm, input_proj,
    /// final_layernorm}` and a Qwen2 block under the same prefix); hidden state first in the
    /// concatenation.
    MiMo,
    /// llama.cpp's GGUF `nextn` layers (`{arch}.nextn_predict_layers`): head `i` is block
    /// `n_layers + i` with `blk.{b}.nextn.{enorm, hnorm, eh_proj, shared_head_norm}` beside its
    /// ordinary tensors; embedding first in the concatenation (as DeepSeek's `eh_proj`).
    GgufNextn,
    /// Qwen3.5 / 3.6 Hugging Face checkpoints: `mtp.{fc, pre_fc_norm_embedding,
    /// pre_fc_norm_hidden, norm}` and the block `mtp.layers.{i}.*`, beside (not inside) the
    /// decoder's `model.*`; embedding first.
    Qwen35,
}

impl MtpLayout {
    /// GGUF-style names of the head's own tensors and the prefix of its block, for head `i` of
    /// a target shaped as `cfg`.
    fn names(self, i: usize, cfg: &ModelConfig) -> MtpNames {
        let qwen35 = cfg.family == Family::Qwen35;
        match self {
            MtpLayout::MiMo => MtpNames {
                block: format!("mtp.{i}"),
                token_norm: format!("mtp.{i}.token_norm.weight"),
                hidden_norm: format!("mtp.{i}.hidden_norm.weight"),
                input_proj: format!("mtp.{i}.input_proj.weight"),
                final_norm: format!("mtp.{i}.final_norm.weight"),
                hidden_first: true,
                reads: HiddenRead::PreNorm,
            },
            MtpLayout::GgufNextn => {
                let b = cfg.n_layers + i;
                MtpNames {
                    block: format!("blk.{b}"),
                    token_norm: format!("blk.{b}.nextn.enorm.weight"),
                    hidden_norm: format!("blk.{b}.nextn.hnorm.weight"),
                    input_proj: format!("blk.{b}.nextn.eh_proj.weight"),
                    final_norm: format!("blk.{b}.nextn.shared_head_norm.weight"),
                    hidden_first: false,
                    reads: match qwen35 {
                        true => HiddenRead::PostNorm,
                        false => HiddenRead::PreNorm,
                    },
                }
            }
            // Looked up under the `mtp.` prefix ([`WeightStore::swap_hf_prefix`]).
            MtpLayout::Qwen35 => MtpNames {
                block: format!("blk.{i}"),
                token_norm: "pre_fc_norm_embedding.weight".into(),
                hidden_norm: "pre_fc_norm_hidden.weight".into(),
                input_proj: "fc.weight".into(),
                final_norm: "norm.weight".into(),
                hidden_first: false,
                reads: HiddenRead::PostNorm,
            },
        }
    }

    /// The Hugging Face prefixes the head's names may sit under, where not the decoder's (the
    /// released checkpoints keep `mtp.*` at the top; llama.cpp's converter also reads
    /// `model.mtp.*`).
    fn hf_prefixes(self) -> &'static [&'static str] {
        match self {
            MtpLayout::Qwen35 => &["mtp.", "model.mtp."],
            MtpLayout::MiMo | MtpLayout::GgufNextn => &[],
        }
    }
}

/// Which of the target's hidden states feeds the head, with what the embedding at position 0 is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HiddenRead {
    /// The last layer's output before the final norm; the embedding at position 0 zeroed
    /// (MiMo, vLLM `mimo_mtp.py`; DeepSeek-style `nextn` layers).
    PreNorm,
    /// The final norm's output, as the LM head reads it; every embedding kept (Qwen3.5).
    PostNorm,
}

struct MtpNames {
    block: String,
    token_norm: String,
    hidden_norm: String,
    input_proj: String,
    final_norm: String,
    hidden_first: bool,
    reads: HiddenRead,
}

/// A head's reduced vocabulary: its token ids (ascending), as a tensor on the head's device, and
/// the target's LM head cut to those rows (built on the first use, from the target's).
struct HeadVocab {
    ids: Vec<u32>,
    on_device: Tensor,
    lm_head: Option<Linear>,
}

impl HeadVocab {
    /// The target's LM head cut to the vocabulary's rows (cut on the first call).
    fn lm_head(&mut self, target: &Decoder) -> Result<&Linear> {
        Ok(match &mut self.lm_head {
            Some(l) => l,
            slot => slot.insert(target.lm_head_weights().select_rows(&self.ids)?),
        })
    }
}

/// Depths of the chains the GPU checks draft ([`MtpHead::check_gpu_step`]).
const DEPTH: usize = 4;

/// Where the rows of a pass sit: their RoPE positions and what each sees.
struct Placement {
    positions: Vec<usize>,
    keys: VisibleKeys,
}

/// Most rows of one pass of the head's GPU step (a longer context goes in pieces).
const HEAD_STEP_ROWS: usize = 512;

/// An MTP head with its KV cache over the context.
pub struct MtpHead {
    token_norm: Tensor,
    hidden_norm: Tensor,
    input_proj: Linear,
    block: DecoderLayer,
    final_norm: Tensor,
    cache: KvCache,
    cos: Tensor,
    sin: Tensor,
    cfg: ModelConfig,
    listed_attention: bool,
    /// The concatenation's order: hidden state first (MiMo) or embedding first.
    hidden_first: bool,
    /// Which of the target's hidden states the head reads.
    reads: HiddenRead,
    /// The reduced vocabulary the head drafts among ([`crate::model::draft_vocab`]), if its file
    /// has one.
    vocab: Option<HeadVocab>,
    /// Several target layers fused into the hidden state it reads ([`fusion`]), if its file
    /// fuses them; else it reads the last layer.
    fusion: Option<Fusion>,
    /// On a GPU, the block, its final norm and cache as a one-layer pass of the GPU step (fed
    /// the input projection's rows), built on the first forward there: `Some(Err(why))` when
    /// the step cannot run these weights (an f32 head: `treespec export-head` writes Q8_0) and
    /// candle's ops run the block.
    step: Option<std::result::Result<GpuStep, String>>,
    /// Whether that step drafts greedy chains in one launch ([`MtpHead::greedy_chain`]); set on
    /// the first chain.
    chain: Option<bool>,
}

mod check;
pub mod fusion;

/// A head's fused target layers ([`fusion`]), their projection, and the unit weight of the
/// parts' normalisation.
struct Fusion {
    layers: Vec<usize>,
    proj: Linear,
    ones: Tensor,
}

impl MtpHead {
    /// Load head `i` in `layout` from the target's checkpoint, with a cache of `context`
    /// positions. `cfg` is the target's configuration (the block has the target's shapes).
    pub fn load(
        store: &mut WeightStore,
        cfg: &ModelConfig,
        layout: MtpLayout,
        i: usize,
        context: usize,
    ) -> Result<Self> {
        let names = layout.names(i, cfg);
        let mut outer = None;
        for p in layout.hf_prefixes().iter().rev() {
            // The first prefix that holds the head, else the first (whose name the error gives).
            let before = store.swap_hf_prefix(p);
            outer = outer.or(before);
            if store.contains(&names.input_proj) {
                break;
            }
        }
        let head = Self::load_names(store, cfg, layout, &names, context);
        if let Some(p) = outer {
            store.swap_hf_prefix(&p);
        }
        head
    }

    /// [`MtpHead::load`] of the tensors `names`, the store's prefix set for them.
    fn load_names(
        store: &mut WeightStore,
        cfg: &ModelConfig,
        layout: MtpLayout,
        names: &MtpNames,
        context: usize,
    ) -> Result<Self> {
        if !store.contains(&names.input_proj) {
            let missing = match layout {
                MtpLayout::MiMo => crate::arch::weights::hf_name(&names.input_proj, "model."),
                MtpLayout::Qwen35 => crate::arch::weights::hf_name(&names.input_proj, "mtp."),
                MtpLayout::GgufNextn => names.input_proj.clone(),
            };
            return Err(Error::Config(format!(
                "the checkpoint declares an MTP head but ships none of its weights ({missing} is missing)"
            )));
        }
        let h = cfg.hidden;
        let device = store.device().clone();
        let (cos, sin) = rope_tables(cfg, context, None, &device)?;
        let vocab_name = format!("{}.{}", names.block, crate::model::draft_vocab::STEM);
        let vocab = if store.contains(&vocab_name) {
            let ids = crate::model::draft_vocab::from_tensor(&store.get_dense(&vocab_name)?)?;
            if !crate::model::draft_vocab::is_set_of(&ids, cfg.vocab_size) {
                return Err(Error::Config(format!(
                    "the MTP head's draft vocabulary ({} ids) is not a set of the target's {} tokens in ascending order",
                    ids.len(),
                    cfg.vocab_size
                )));
            }
            Some(HeadVocab {
                on_device: Tensor::from_vec(ids.clone(), ids.len(), &device)?,
                ids,
                lm_head: None,
            })
        } else {
            None
        };
        let fusion = Self::load_fusion(store, cfg, names)?;
        let norm = |store: &mut WeightStore, name: &str| norm_weight(store, name, cfg);
        Ok(MtpHead {
            token_norm: norm(store, &names.token_norm)?,
            hidden_norm: norm(store, &names.hidden_norm)?,
            input_proj: Linear::new(store.get_checked(&names.input_proj, &[h, 2 * h])?, None)?,
            block: DecoderLayer::load(store, &names.block, cfg)?,
            final_norm: norm(store, &names.final_norm)?,
            cache: KvCache::new(cfg.n_kv_heads, cfg.head_dim, context, DType::F32, &device)?,
            cos,
            sin,
            listed_attention: Visibility::listed_for(cfg, &device),
            hidden_first: names.hidden_first,
            reads: names.reads,
            cfg: cfg.clone(),
            vocab,
            fusion,
            step: None,
            chain: None,
        })
    }

    /// The fused target layers and their projection, where the head's file has them; refused for
    /// a head that reads the target's normed state (a native Qwen3.5 head fuses nothing).
    fn load_fusion(
        store: &mut WeightStore,
        cfg: &ModelConfig,
        names: &MtpNames,
    ) -> Result<Option<Fusion>> {
        let layers_name = format!("{}.{}", names.block, fusion::STEM_LAYERS);
        if !store.contains(&layers_name) {
            return Ok(None);
        }
        let bad = |why: String| Error::Config(format!("the MTP head's fused features: {why}"));
        if names.reads != HiddenRead::PreNorm {
            return Err(bad(
                "only a head that reads the target's pre-norm states fuses layers".into(),
            ));
        }
        let layers =
            fusion::layers_of(&store.get_dense(&layers_name)?).map_err(|e| bad(e.to_string()))?;
        fusion::check_layers(&layers, cfg.n_layers).map_err(|e| bad(e.to_string()))?;
        let h = cfg.hidden;
        let proj_name = format!("{}.{}", names.block, fusion::STEM_PROJ);
        let proj = Linear::new(store.get_checked(&proj_name, &[h, layers.len() * h])?, None)?;
        let ones = Tensor::ones(h, DType::F32, store.device())?;
        Ok(Some(Fusion { layers, proj, ones }))
    }

    /// The target layers whose outputs the head reads, side by side in that order (what
    /// [`MtpHead::target_hidden`] takes): the fused ones, else the last.
    pub fn feature_layers(&self) -> Vec<usize> {
        match &self.fusion {
            Some(f) => f.layers.clone(),
            None => vec![self.cfg.n_layers - 1],
        }
    }

    /// The head's input from the target's hidden states `h` (`[n, layers * hidden]`: the
    /// outputs of [`MtpHead::feature_layers`] side by side, as the drafter collects them): the
    /// last layer's itself, or for a head that reads it after the final norm (Qwen3.5), the
    /// norm's output, or for a head that fuses layers, their fusion ([`fusion`]).
    pub fn target_hidden(&self, target: &Decoder, h: &Tensor) -> Result<Tensor> {
        match (&self.fusion, self.reads) {
            (Some(f), _) => {
                let eps = self.cfg.rms_eps;
                let parts = fusion::normalised_parts(h, f.layers.len(), eps, Some(&f.ones))?;
                Ok(f.proj.forward(&parts)?)
            }
            (None, HiddenRead::PreNorm) => Ok(h.clone()),
            (None, HiddenRead::PostNorm) => target.final_norm(h),
        }
    }

    /// The tokens the head drafts among, when it drafts among fewer than the target's.
    pub fn draft_vocab(&self) -> Option<&[u32]> {
        self.vocab.as_ref().map(|v| v.ids.as_slice())
    }

    /// The head's logits for its outputs `o` `[rows, hidden]` (after its final norm): over the
    /// target's vocabulary (its LM head), or with a reduced vocabulary over that set's tokens
    /// only, `[rows, m]` in the order of [`MtpHead::draft_vocab`] (column `c` is token
    /// `draft_vocab()[c]`; every other token has probability 0).
    pub fn logits(&mut self, target: &Decoder, o: &Tensor) -> Result<Tensor> {
        match &mut self.vocab {
            None => target.lm_head(o),
            Some(v) => Ok(v.lm_head(target)?.forward(o)?.to_dtype(DType::F32)?),
        }
    }

    /// Positions the cache covers.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Positions the cache can hold.
    pub fn capacity(&self) -> usize {
        self.cache.capacity()
    }

    /// True when the cache covers nothing.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Forget every position from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.cache.truncate(len);
    }

    /// The block over input rows `u` at positions from `start` through the GPU step (one graphed
    /// launch for a chain step instead of ~30 of candle's), its K/V into the cache: the block's
    /// output `y` (before the final norm), or `None` off a GPU, with `TREESPEC_GPU_STEP=0` or
    /// `TREESPEC_MTP_GPU_STEP=0` (to compare), or where the step cannot run the head's weights.
    fn step_forward(
        &mut self,
        target: &Decoder,
        u: &Tensor,
        start: usize,
        placed: Option<&Placement>,
    ) -> Result<Option<Tensor>> {
        let off = || std::env::var("TREESPEC_MTP_GPU_STEP").as_deref() == Ok("0");
        if !u.device().is_cuda() || !crate::gpu::step::enabled() || off() {
            return Ok(None);
        }
        if self.step.is_none() {
            // Any block the step runs, the gated attention of Qwen3.5's head included
            // (`selftest --head mtp` checks it against candle's ops).
            let Some(block) = self.block.step_weights() else {
                return Ok(None);
            };
            let built = GpuStep::new(
                &StepWeights {
                    cfg: &self.cfg,
                    embed: target.embedding(),
                    layers: vec![block],
                    norm: &self.final_norm,
                    lm_head: target.lm_head_weights(),
                    cos: &self.cos,
                    sin: &self.sin,
                    caches: vec![self.cache.storage()],
                },
                u.device(),
                // The head's passes are one-row chains: the faster one-row products.
                crate::gpu::step::mmq_wanted(false, false),
            );
            if let Err(why) = &built {
                eprintln!("treespec: the MTP head runs on candle's ops: {why}");
            }
            self.step = Some(built);
        }
        let Some(Ok(step)) = &mut self.step else {
            return Ok(None);
        };
        let n = u.dim(0)?;
        if let Some(p) = placed {
            // Rows placed as given (a drafted tree's nodes): one pass.
            let (_, mut hidden) = step.forward(&StepInput {
                tokens: &vec![0; n],
                positions: &p.positions,
                prefix: start,
                keys: &p.keys,
                logits_rows: &[],
                hidden_layers: &[0],
                inputs: Some(u),
                gdn: None,
            })?;
            self.cache.advance(n)?;
            return Ok(hidden.pop());
        }
        // A long context in pieces, as the target reads a prompt: the step's buffers grow to
        // the widest pass and stay.
        let mut out = vec![];
        for at in (0..n).step_by(HEAD_STEP_ROWS) {
            let rows = HEAD_STEP_ROWS.min(n - at);
            let from = start + at;
            let positions: Vec<usize> = (from..from + rows).collect();
            let (_, hidden) = step.forward(&StepInput {
                tokens: &vec![0; rows],
                positions: &positions,
                prefix: from,
                keys: &VisibleKeys::causal(rows, from),
                logits_rows: &[],
                hidden_layers: &[0],
                inputs: Some(&u.narrow(0, at, rows)?),
                gdn: None,
            })?;
            self.cache.advance(rows)?;
            out.extend(hidden);
        }
        Ok(Some(if out.len() == 1 {
            out.remove(0)
        } else {
            Tensor::cat(&out, 0)?
        }))
    }

    /// Run rows at consecutive positions from [`MtpHead::len`]: row `r` pairs the hidden state
    /// `hidden[r]` (`[n, hidden]`) with `tokens[r]`. Returns `o` (`[n, hidden]`, after the final
    /// norm: the LM head's input, and the hidden state a chain feeds back).
    pub fn forward(&mut self, target: &Decoder, hidden: &Tensor, tokens: &[u32]) -> Result<Tensor> {
        let y = self.block_forward(target, hidden, tokens)?;
        self.final_norm(&y)
    }

    /// The head's final norm of block outputs `y` (`[n, hidden]`): its outputs `o`.
    pub fn final_norm(&self, y: &Tensor) -> Result<Tensor> {
        let eps = self.cfg.rms_eps as f32;
        Ok(candle_nn::ops::rms_norm(y, &self.final_norm, eps)?)
    }

    /// Draft a greedy chain of `depth` tokens after the last position the cache covers: each
    /// depth's `k` most probable tokens with their log-probabilities, depth 1 first, in one
    /// launch of the head's GPU step (`gpu::step`'s `head_chain`) instead of a round trip per
    /// depth. `from` is that position's block output (`[1, hidden]`, [`MtpHead::block_forward`]'s
    /// last row; the cache keeps its length), or the target's hidden states of the positions
    /// not yet run through the head, with their tokens, which the same launch runs first (the
    /// cache then covers them; `TREESPEC_MTP_CATCH_UP=0` turns that off, to compare).
    /// `None` where that launch cannot run (off a GPU, no GPU step, k past
    /// [`crate::gpu::TOP_K_MAX`], a catch-up at position 0 or of more rows than a graph takes,
    /// `TREESPEC_MTP_CHAIN=0`): the caller drafts depth by depth.
    pub fn greedy_chain(
        &mut self,
        target: &Decoder,
        from: ChainStart,
        depth: usize,
        k: usize,
    ) -> Result<Option<Vec<crate::tree::DepthTopK>>> {
        let off = std::env::var("TREESPEC_MTP_CHAIN").as_deref() == Ok("0");
        if off || !(1..=crate::gpu::TOP_K_MAX).contains(&k) || depth == 0 {
            return Ok(None);
        }
        let start = self.cache.len();
        if let ChainStart::CatchUp { tokens, .. } = from {
            let on = std::env::var("TREESPEC_MTP_CATCH_UP").as_deref() != Ok("0");
            let n = tokens.len();
            if !on || start == 0 || n == 0 || n > crate::gpu::step::GRAPH_MAX_ROWS {
                return Ok(None);
            }
            if start + n > self.cache.capacity() {
                return Err(Error::ContextOverflow {
                    prompt: start + n,
                    context: self.cache.capacity(),
                });
            }
        }
        let Some(Ok(step)) = &mut self.step else {
            return Ok(None);
        };
        if self.chain.is_none() {
            if let Some(v) = &mut self.vocab {
                v.lm_head(target)?;
            }
            let lm_head = match self.vocab.as_ref().and_then(|v| v.lm_head.as_ref()) {
                Some(cut) => cut,
                None => target.lm_head_weights(),
            };
            let set = step.set_head_stage(&HeadStage {
                hidden_norm: &self.hidden_norm,
                token_norm: &self.token_norm,
                input_proj: &self.input_proj,
                hidden_first: self.hidden_first,
                lm_head,
                vocab: self.vocab.as_ref().map(|v| &v.on_device),
            });
            if let Err(why) = &set {
                eprintln!("treespec: the MTP head drafts depth by depth: {why}");
            }
            self.chain = Some(set.is_ok());
        }
        if self.chain != Some(true) {
            return Ok(None);
        }
        let mut tops = step.greedy_chain(from, start, depth, k)?;
        if let ChainStart::CatchUp { tokens, .. } = from {
            self.cache.advance(tokens.len())?;
        }
        for t in &mut tops {
            tokens_of(self.draft_vocab(), &mut t.tokens);
        }
        Ok(Some(tops))
    }

    /// [`MtpHead::forward`] before the final norm: the block's outputs `y` (`[n, hidden]`).
    pub fn block_forward(
        &mut self,
        target: &Decoder,
        hidden: &Tensor,
        tokens: &[u32],
    ) -> Result<Tensor> {
        self.run_rows(target, hidden, tokens, None)
    }

    /// Run the nodes of one depth of a drafted tree after the rows the cache covers: row `r`
    /// pairs its parent's output `hidden[r]` (`[n, hidden]`, after the final norm) with its
    /// token `tokens[r]`, all at RoPE `position`; each sees the cache's rows before
    /// `past.start`, the rows `past.visible[r]` (its fed ancestors) and itself. Returns their
    /// outputs `o` (`[n, hidden]`); the cache then covers them.
    pub fn forward_nodes(
        &mut self,
        target: &Decoder,
        hidden: &Tensor,
        tokens: &[u32],
        position: usize,
        past: &PastMask,
    ) -> Result<Tensor> {
        let n = tokens.len();
        let mask = BlockMask::from_parents(&vec![None; n])?;
        let placed = Placement {
            positions: vec![position; n],
            keys: VisibleKeys::new(Some(&mask), Some(past), n, self.cache.len()),
        };
        let y = self.run_rows(target, hidden, tokens, Some(&placed))?;
        self.final_norm(&y)
    }

    /// The input stage and the block over rows appended after the cache's: at consecutive
    /// positions, causal (`placed` = `None`), or placed as given. Returns the block's outputs.
    fn run_rows(
        &mut self,
        target: &Decoder,
        hidden: &Tensor,
        tokens: &[u32],
        placed: Option<&Placement>,
    ) -> Result<Tensor> {
        let n = tokens.len();
        let start = self.cache.len();
        if hidden.dim(0)? != n {
            return Err(Error::InvalidArgument(format!(
                "MTP head: {} hidden rows for {n} tokens",
                hidden.dim(0)?
            )));
        }
        if start + n > self.cache.capacity() {
            return Err(Error::ContextOverflow {
                prompt: start + n,
                context: self.cache.capacity(),
            });
        }
        let eps = self.cfg.rms_eps as f32;
        let mut e = target.embed(tokens)?;
        if start == 0 && self.reads == HiddenRead::PreNorm {
            // vLLM zeroes the embedding at position 0 (`mimo_mtp.py:76`).
            let zero = Tensor::zeros((1, self.cfg.hidden), e.dtype(), e.device())?;
            e = if n > 1 {
                Tensor::cat(&[&zero, &e.narrow(0, 1, n - 1)?], 0)?
            } else {
                zero
            };
        }
        let g = candle_nn::ops::rms_norm(&hidden.to_dtype(DType::F32)?, &self.hidden_norm, eps)?;
        let e = candle_nn::ops::rms_norm(&e, &self.token_norm, eps)?;
        let cat = if self.hidden_first {
            Tensor::cat(&[&g, &e], 1)?
        } else {
            Tensor::cat(&[&e, &g], 1)?
        };
        let u = self.input_proj.forward(&cat)?;
        if let Some(y) = self.step_forward(target, &u, start, placed)? {
            return Ok(y);
        }
        let causal;
        let (cos, sin, keys) = match placed {
            None => {
                causal = VisibleKeys::causal(n, start);
                let cos = self.cos.narrow(0, start, n)?;
                (cos, self.sin.narrow(0, start, n)?, &causal)
            }
            Some(p) => {
                let at: Vec<u32> = p.positions.iter().map(|&q| q as u32).collect();
                let at = Tensor::from_vec(at, n, u.device())?;
                let cos = self.cos.index_select(&at, 0)?;
                (cos, self.sin.index_select(&at, 0)?, &p.keys)
            }
        };
        let visible = Visibility::new(keys, self.listed_attention, &self.cfg, u.device())?;
        self.block
            .forward_cached(&u, &cos, &sin, &mut self.cache, &visible)
    }
}
