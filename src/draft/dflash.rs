//! DFlash: a block-diffusion drafter (z-lab, "DFlash", arXiv:2602.06036; reference code: the DDTree
//! repository's `model/dflash.py`, github.com/liranringel/ddtree).
//!
//! A few Qwen3-style layers read hidden states of chosen target layers (`target_layer_ids`) and
//! produce the distributions of a whole block of future tokens in one forward pass:
//!
//! - Context features: the target's hidden states after layers `target_layer_ids`, concatenated
//!   on the feature axis, then `hidden_norm(fc(.))`.
//! - Block: `[root, mask x (block_size - 1)]` embedded with the target's embeddings, at positions
//!   `start .. start + block_size`. Every layer attends, without a causal mask, over K/V of
//!   [context features ; block]; the context K/V come from the same `k_proj` / `v_proj` (with
//!   `k_norm` and RoPE at the context positions), queries from the block only.
//! - Output: the drafter's `norm`, then the target's LM head; rows 1.. are the per-depth
//!   distributions for depths 1..block_size-1.
//!
//! The drafter keeps K/V of the context features it has seen (never of blocks) and receives only
//! the features of newly committed positions, which wait in a pending buffer until the next pass.

use super::{Committed, DraftRequest, Drafter, Proposal};
use crate::arch::config::ModelConfig;
use crate::arch::kv_cache::KvCache;
use crate::arch::weights::{Linear, WeightStore};
use crate::error::{Error, Result};
use crate::gpu::row_top_k;
use crate::model::decoder::{rope_tables, Decoder, MASKED};
use crate::model::layer::DecoderLayer;
use crate::settings::Mode;
use crate::tree::DraftTree;
use crate::verify::SampledDraft;
use candle_core::{DType, Device, Tensor};
use rand::rngs::StdRng;
use std::path::{Path, PathBuf};

/// A DFlash drafter's configuration (from its `config.json`).
#[derive(Debug, Clone, PartialEq)]
pub struct DFlashConfig {
    /// Tokens per block (the root and `block_size - 1` masked positions).
    pub block_size: usize,
    /// Target layers whose outputs feed the drafter (0-based layer indices).
    pub target_layer_ids: Vec<usize>,
    /// The mask token's id.
    pub mask_token_id: u32,
    /// Layers of the target it was trained with, if stated.
    pub num_target_layers: Option<usize>,
    /// The drafter's own layers: sizes as a Qwen3 config (its vocabulary is the target's).
    pub model: ModelConfig,
    /// Per layer: the sliding window, for `sliding_attention` layers.
    pub sliding_window: Vec<Option<usize>>,
}

/// The layer choice of the reference when a config names none (`build_target_layer_ids`).
pub fn default_target_layer_ids(num_target_layers: usize, num_draft_layers: usize) -> Vec<usize> {
    if num_draft_layers <= 1 {
        return vec![num_target_layers / 2];
    }
    let (start, end) = (1.0f64, num_target_layers as f64 - 3.0);
    (0..num_draft_layers)
        .map(|i| {
            (start + i as f64 * (end - start) / (num_draft_layers as f64 - 1.0)).round() as usize
        })
        .collect()
}

/// What a DFlash drafter adds to its target's sizes (the rest of its `config.json` is the
/// target's: width, heads, MLP, vocabulary, norms' epsilon, rotation base).
#[derive(Debug, Clone, PartialEq)]
pub struct DFlashShape {
    /// Its own decoder layers.
    pub layers: usize,
    /// Tokens per block (the root and `block_size - 1` masked positions).
    pub block_size: usize,
    /// Target layers whose outputs it reads.
    pub target_layer_ids: Vec<usize>,
    /// The token its masked positions are embedded as.
    pub mask_token_id: u32,
}

/// The `config.json` (z-lab's layout) of a DFlash drafter of `shape` for `target`; an error
/// names what does not fit the target.
pub fn config_json(target: &ModelConfig, shape: &DFlashShape) -> Result<serde_json::Value> {
    if shape.layers == 0 {
        return Err(Error::InvalidArgument(
            "a DFlash drafter of no layers".into(),
        ));
    }
    if shape.target_layer_ids.is_empty() {
        return Err(Error::InvalidArgument(
            "a DFlash drafter reading no target layer".into(),
        ));
    }
    if let Some(l) = shape
        .target_layer_ids
        .iter()
        .find(|&&l| l >= target.n_layers)
    {
        return Err(Error::InvalidArgument(format!(
            "a DFlash drafter reading target layer {l} of {}",
            target.n_layers
        )));
    }
    if shape.mask_token_id as usize >= target.vocab_size {
        return Err(Error::InvalidArgument(format!(
            "mask token {} outside the target's {} tokens",
            shape.mask_token_id, target.vocab_size
        )));
    }
    Ok(serde_json::json!({
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "vocab_size": target.vocab_size,
        "hidden_size": target.hidden,
        "intermediate_size": target.ffn,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": target.n_heads,
        "num_key_value_heads": target.n_kv_heads,
        "head_dim": target.head_dim,
        "rms_norm_eps": target.rms_eps,
        "rope_theta": target.rope_theta,
        "max_position_embeddings": target.max_position,
        "tie_word_embeddings": false,
        "attention_bias": false,
        "block_size": shape.block_size,
        "num_target_layers": target.n_layers,
        "dflash_config": {
            "target_layer_ids": shape.target_layer_ids,
            "mask_token_id": shape.mask_token_id
        }
    }))
}

/// True when a `config.json` describes a DFlash drafter.
pub fn is_dflash_config(v: &serde_json::Value) -> bool {
    v.get("architectures")
        .and_then(|a| a.as_array())
        .is_some_and(|a| a.iter().any(|x| x.as_str() == Some("DFlashDraftModel")))
}

impl DFlashConfig {
    /// Parse a DFlash `config.json`.
    pub fn from_json(text: &str) -> Result<Self> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Error::Config(format!("config.json: {e}")))?;
        if !is_dflash_config(&v) {
            return Err(Error::Config(
                "not a DFlash drafter (architectures lacks DFlashDraftModel)".into(),
            ));
        }
        // The layers are Qwen3 layers: read the sizes with the ordinary parser.
        let mut as_qwen3 = v.clone();
        as_qwen3["architectures"] = serde_json::json!(["Qwen3ForCausalLM"]);
        if as_qwen3.get("rope_theta").is_none() {
            if let Some(t) = v.pointer("/rope_parameters/rope_theta") {
                as_qwen3["rope_theta"] = t.clone();
            }
        }
        let model = ModelConfig::from_hf_json(&as_qwen3.to_string())?;
        let usize_at = |p: &str| v.pointer(p).and_then(|x| x.as_u64()).map(|x| x as usize);
        let block_size = usize_at("/block_size")
            .ok_or_else(|| Error::Config("DFlash config lacks block_size".into()))?;
        if block_size < 2 {
            return Err(Error::Config(format!(
                "block_size {block_size} drafts nothing"
            )));
        }
        let mask_token_id = usize_at("/dflash_config/mask_token_id")
            .or_else(|| usize_at("/mask_token_id"))
            .ok_or_else(|| {
                Error::Config("DFlash config lacks dflash_config.mask_token_id".into())
            })? as u32;
        let num_target_layers = usize_at("/num_target_layers");
        let target_layer_ids = match v.pointer("/dflash_config/target_layer_ids") {
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_u64()
                        .map(|x| x as usize)
                        .ok_or_else(|| Error::Config("target_layer_ids must be integers".into()))
                })
                .collect::<Result<Vec<_>>>()?,
            _ => match num_target_layers {
                Some(n) => default_target_layer_ids(n, model.n_layers),
                None => {
                    return Err(Error::Config(
                        "DFlash config names neither target_layer_ids nor num_target_layers".into(),
                    ))
                }
            },
        };
        let window = usize_at("/sliding_window");
        let sliding_window = match v.get("layer_types").and_then(|l| l.as_array()) {
            Some(types) => types
                .iter()
                .map(|t| {
                    (t.as_str() == Some("sliding_attention"))
                        .then_some(window)
                        .flatten()
                })
                .collect(),
            None => vec![None; model.n_layers],
        };
        if sliding_window.len() != model.n_layers {
            return Err(Error::Config(format!(
                "layer_types has {} entries for {} layers",
                sliding_window.len(),
                model.n_layers
            )));
        }
        Ok(DFlashConfig {
            block_size,
            target_layer_ids,
            mask_token_id,
            num_target_layers,
            model,
            sliding_window,
        })
    }
}

/// A loaded DFlash drafter with its context K/V cache.
pub struct DFlashDrafter {
    cfg: DFlashConfig,
    name: String,
    layers: Vec<DecoderLayer>,
    fc: Linear,
    hidden_norm: Tensor,
    norm: Tensor,
    cos: Tensor,
    sin: Tensor,
    caches: Vec<KvCache>,
    pending: Vec<Tensor>,
    pending_rows: usize,
    context: usize,
}

impl DFlashDrafter {
    /// Load from a checkpoint directory (config.json and *.safetensors).
    pub fn load_dir(dir: &Path, device: &Device, context: usize, quantize: bool) -> Result<Self> {
        let files = crate::model::source::safetensors_files(dir)?;
        Self::load(&dir.join("config.json"), &files, device, context, quantize)
    }

    /// Load from a config file and safetensors files (z-lab layout, with or without a `model.`
    /// prefix on tensor names). With `quantize`, the projection weights are quantised to Q8_0 on
    /// the CPU and kept in bf16 on a GPU (the checkpoints are bf16; a drafter only proposes, so
    /// its rounding cannot change what is emitted, and a pass reads half or a quarter of the
    /// bytes of f32).
    pub fn load(
        config: &Path,
        weights: &[PathBuf],
        device: &Device,
        context: usize,
        quantize: bool,
    ) -> Result<Self> {
        let text = std::fs::read_to_string(config).map_err(|e| Error::io(config, e))?;
        let cfg = DFlashConfig::from_json(&text).map_err(|e| Error::BadCheckpoint {
            path: config.to_path_buf(),
            reason: e.to_string(),
        })?;
        // A drafter only proposes, so its rounding cannot change what is emitted: quantised
        // on the CPU, bf16 on a GPU (z-lab's checkpoints are bf16).
        let mut store = WeightStore::safetensors(weights, device)?
            .quantize_dense(quantize && device.is_cpu())
            .keep_half_matrices(quantize);
        let m = &cfg.model;
        let h = m.hidden;
        let layers = (0..m.n_layers)
            .map(|i| DecoderLayer::load(&mut store, &format!("blk.{i}"), m))
            .collect::<Result<Vec<_>>>()?;
        let feat = cfg.target_layer_ids.len() * h;
        let fc = Linear::new(store.get_checked("fc.weight", &[h, feat])?, None)?;
        let hidden_norm = store.get_dense("hidden_norm.weight")?;
        let norm = store.get_dense("output_norm.weight")?;
        let (cos, sin) = rope_tables(m, context, None, device)?;
        let caches = (0..m.n_layers)
            .map(|_| KvCache::new(m.n_kv_heads, m.head_dim, context, DType::F32, device))
            .collect::<Result<Vec<_>>>()?;
        let name = config
            .parent()
            .and_then(|p| p.file_name())
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_else(|| "dflash".into());
        Ok(DFlashDrafter {
            cfg,
            name,
            layers,
            fc,
            hidden_norm,
            norm,
            cos,
            sin,
            caches,
            pending: vec![],
            pending_rows: 0,
            context,
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &DFlashConfig {
        &self.cfg
    }

    /// Set the display name.
    pub fn set_name(&mut self, name: impl Into<String>) {
        self.name = name.into();
    }

    /// Refuse a target this drafter cannot read: different vocabulary, hidden size or layers.
    fn target_mismatch(&self, target: &ModelConfig) -> Result<()> {
        let m = &self.cfg.model;
        let bad = |why: String| {
            Err(Error::Config(format!(
                "DFlash drafter {}: {why}",
                self.name
            )))
        };
        if m.vocab_size != target.vocab_size {
            return bad(format!(
                "its vocabulary has {} tokens, the target's {}",
                m.vocab_size, target.vocab_size
            ));
        }
        if m.hidden != target.hidden {
            return bad(format!(
                "hidden size {} does not match the target's {}",
                m.hidden, target.hidden
            ));
        }
        if let Some(&l) = self
            .cfg
            .target_layer_ids
            .iter()
            .find(|&&l| l >= target.n_layers)
        {
            return bad(format!(
                "reads target layer {l}, the target has {}",
                target.n_layers
            ));
        }
        if let Some(n) = self.cfg.num_target_layers.filter(|&n| n != target.n_layers) {
            return bad(format!(
                "was trained on a target of {n} layers, this one has {}",
                target.n_layers
            ));
        }
        if self.cfg.mask_token_id as usize >= target.vocab_size {
            return bad(format!(
                "mask token {} is outside the vocabulary",
                self.cfg.mask_token_id
            ));
        }
        Ok(())
    }

    /// Positions whose context it has (cached K/V plus pending features).
    pub fn context_len(&self) -> usize {
        self.caches.first().map_or(0, |c| c.len()) + self.pending_rows
    }

    /// Forget everything from position `len` on.
    fn forget_from(&mut self, len: usize) {
        let cached = self.caches.first().map_or(0, |c| c.len());
        if len <= cached {
            for c in &mut self.caches {
                c.truncate(len);
            }
            self.pending.clear();
            self.pending_rows = 0;
            return;
        }
        let mut keep = len - cached;
        if keep >= self.pending_rows {
            return;
        }
        let mut kept = vec![];
        for p in self.pending.drain(..) {
            let rows = p.dim(0).unwrap_or(0);
            if keep == 0 {
                break;
            }
            let take = rows.min(keep);
            kept.push(if take == rows {
                p
            } else {
                p.narrow(0, 0, take).unwrap_or(p)
            });
            keep -= take;
        }
        self.pending_rows = kept.iter().map(|t| t.dim(0).unwrap_or(0)).sum();
        self.pending = kept;
    }

    /// Add the features of the next committed positions: `[rows, layers x hidden]`, the target's
    /// hidden states after `target_layer_ids`, concatenated in that order.
    pub fn add_features(&mut self, features: Tensor) -> Result<()> {
        let rows = features.dim(0)?;
        if self.context_len() + rows > self.context {
            return Err(Error::ContextOverflow {
                prompt: self.context_len() + rows,
                context: self.context,
            });
        }
        self.pending.push(features);
        self.pending_rows += rows;
        Ok(())
    }

    /// One drafter pass for a block rooted at `root` (which sits right after the context):
    /// returns the logits of depths 1..block_size-1, `[block_size - 1, vocab]`.
    pub fn draft(&mut self, root: u32, target: &Decoder) -> Result<Tensor> {
        let m = self.cfg.model.clone();
        let bs = self.cfg.block_size;
        let base = self.caches.first().map_or(0, |c| c.len());
        let root_pos = base + self.pending_rows;
        if root_pos + bs > self.context {
            return Err(Error::ContextOverflow {
                prompt: root_pos + bs,
                context: self.context,
            });
        }
        let eps = m.rms_eps as f32;
        let mut block = vec![self.cfg.mask_token_id; bs];
        block[0] = root;
        let mut h = target.embed(&block)?;
        let device = h.device().clone();
        let m_rows = self.pending_rows;
        let bcos = self.cos.narrow(0, root_pos, bs)?;
        let bsin = self.sin.narrow(0, root_pos, bs)?;
        // The context's rows and the block's go through each layer's q/k/v projection together
        // (one product, its matrix read once): the context first, at its own positions, so with
        // its rotation tables ahead of the block's.
        let ctx = if self.pending.is_empty() {
            None
        } else {
            let f = Tensor::cat(&self.pending, 0)?;
            let f = self.fc.forward(&f)?;
            let f = candle_nn::ops::rms_norm(&f, &self.hidden_norm, eps)?;
            let cos = Tensor::cat(&[&self.cos.narrow(0, base, m_rows)?, &bcos], 0)?;
            let sin = Tensor::cat(&[&self.sin.narrow(0, base, m_rows)?, &bsin], 0)?;
            Some((f, cos, sin))
        };
        let n_rep = m.n_heads / m.n_kv_heads;
        for (li, layer) in self.layers.iter().enumerate() {
            let hn = layer.attn_norm(&h)?;
            let (q, kb, vb) = match &ctx {
                Some((c, cos, sin)) => {
                    // The context's features are normed by `hidden_norm`, not by the layer's
                    // norm; their queries are not used.
                    let (q, k, v) = layer.attn()?.qkv(&Tensor::cat(&[c, &hn], 0)?, cos, sin)?;
                    self.caches[li].append(&k.narrow(1, 0, m_rows)?, &v.narrow(1, 0, m_rows)?)?;
                    (
                        q.narrow(1, m_rows, bs)?.contiguous()?,
                        k.narrow(1, m_rows, bs)?,
                        v.narrow(1, m_rows, bs)?,
                    )
                }
                None => layer.attn()?.qkv(&hn, &bcos, &bsin)?,
            };
            let (kc, vc) = self.caches[li].view()?;
            let k = Tensor::cat(&[&kc, &kb], 1)?;
            let v = Tensor::cat(&[&vc, &vb], 1)?;
            let mask = match self.cfg.sliding_window[li] {
                Some(w) => {
                    // Keys more than `w - 1` positions before the query are out of the window.
                    let total = k.dim(1)?;
                    let mut mask = vec![0f32; bs * total];
                    for qi in 0..bs {
                        let qp = root_pos + qi;
                        for (ki, slot) in mask[qi * total..(qi + 1) * total].iter_mut().enumerate()
                        {
                            let kp = if ki < base + m_rows {
                                ki
                            } else {
                                root_pos + ki - (base + m_rows)
                            };
                            if kp + w <= qp {
                                *slot = MASKED;
                            }
                        }
                    }
                    Some(Tensor::from_vec(mask, (bs, total), &device)?.repeat((n_rep, 1))?)
                }
                None => None,
            };
            h = (h + layer.attn()?.attend(&q, &k, &v, mask.as_ref())?)?;
            h = layer.mlp.forward(&h)?;
        }
        self.pending.clear();
        self.pending_rows = 0;
        let rows = h.narrow(0, 1, bs - 1)?;
        let rows = candle_nn::ops::rms_norm(&rows, &self.norm, eps)?;
        target.draft_lm_head(&rows)
    }
}

impl Drafter for DFlashDrafter {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "DFlash"
    }

    fn len(&self) -> usize {
        self.context_len()
    }

    fn truncate(&mut self, len: usize) {
        self.forget_from(len);
    }

    fn check_target(&self, target: &ModelConfig) -> Result<()> {
        self.target_mismatch(target)
    }

    fn feature_layers(&self) -> &[usize] {
        &self.cfg.target_layer_ids
    }

    fn push_features(&mut self, features: Tensor) -> Result<()> {
        self.add_features(features)
    }

    fn drafts_whole_block(&self) -> bool {
        true
    }

    /// As in the reference, the first token of an answer comes from the target alone.
    fn ready(&self, seq_len: usize, answer_len: usize) -> bool {
        self.context_len() + 1 == seq_len && answer_len > 0
    }

    fn propose(&mut self, req: &DraftRequest<'_>, rng: &mut StdRng) -> Result<Proposal> {
        let root = *req.seq.last().unwrap_or(&0);
        let block = self.draft(root, req.target)?;
        let depth = req.depth().min(block.dim(0)?);
        let block = block.narrow(0, 0, depth)?;
        if req.mode == Mode::Tree {
            return Ok(Proposal::Depths(row_top_k(&block, req.top_k())?));
        }
        if !req.sampled_chain() {
            let chain: Vec<u32> = row_top_k(&block, 1)?
                .iter()
                .map(|t| t.tokens.first().copied().unwrap_or(0))
                .collect();
            return Ok(Proposal::Tree(DraftTree::chain(root, &chain)));
        }
        // A sampled chain: each depth's token drawn from that depth's distribution, the drafter's
        // q for rejection sampling (it need not depend on the earlier drafts).
        let params = req.settings.sampling;
        let drafts = block
            .to_vec2::<f32>()?
            .iter()
            .map(|r| {
                let q = crate::sampling::distribution(r, &params);
                let token = crate::sampling::draw(&q, rng).unwrap_or(0);
                SampledDraft { token, q }
            })
            .collect();
        Ok(Proposal::SampledChain(drafts))
    }

    fn commit(&mut self, c: &Committed<'_>) -> Result<()> {
        if let Some(f) = &c.features {
            self.add_features(f.clone())?;
        }
        self.forget_from((c.before + c.emitted.len()).saturating_sub(1));
        Ok(())
    }
}
