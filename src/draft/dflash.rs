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

use crate::error::{Error, Result};
use crate::model::config::{ModelConfig, RopeStyle};
use crate::model::decoder::{apply_rope, rope_tables, Decoder, MASKED};
use crate::model::kv_cache::KvCache;
use crate::model::weights::{Linear, Weight, WeightStore};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
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

struct Layer {
    attn_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Tensor,
    k_norm: Tensor,
    ffn_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// A loaded DFlash drafter with its context K/V cache.
pub struct DFlashDrafter {
    cfg: DFlashConfig,
    name: String,
    layers: Vec<Layer>,
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
    /// prefix on tensor names). With `quantize` on the CPU, the projection weights are quantised
    /// to Q8_0 (the checkpoints are bf16; a drafter only proposes, so its rounding cannot change
    /// what is emitted, and on a memory-bound CPU it runs several times faster).
    pub fn load(
        config: &Path,
        weights: &[PathBuf],
        device: &Device,
        context: usize,
        quantize: bool,
    ) -> Result<Self> {
        let text =
            std::fs::read_to_string(config).map_err(|e| Error::io(config, e))?;
        let cfg = DFlashConfig::from_json(&text).map_err(|e| Error::BadCheckpoint {
            path: config.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut store = WeightStore::safetensors(weights, device)?;
        let m = &cfg.model;
        let (h, hd) = (m.hidden, m.head_dim);
        let (q_out, kv_out) = (m.n_heads * hd, m.n_kv_heads * hd);
        let quantize = quantize && device.is_cpu();
        let lin =
            |store: &mut WeightStore, name: String, out: usize, inp: usize| -> Result<Linear> {
                let w = store.get_checked(&name, &[out, inp])?;
                match w {
                    Weight::Dense(t) if quantize && inp.is_multiple_of(32) => {
                        let q = QTensor::quantize(&t, GgmlDType::Q8_0)?;
                        Linear::new(Weight::Quantized(std::sync::Arc::new(q)), None)
                    }
                    w => Linear::new(w, None),
                }
            };
        let mut layers = Vec::with_capacity(m.n_layers);
        for i in 0..m.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let q = lin(&mut store, n("attn_q"), q_out, h)?;
            let k = lin(&mut store, n("attn_k"), kv_out, h)?;
            let v = lin(&mut store, n("attn_v"), kv_out, h)?;
            let o = lin(&mut store, n("attn_output"), h, q_out)?;
            let gate = lin(&mut store, n("ffn_gate"), m.ffn, h)?;
            let up = lin(&mut store, n("ffn_up"), m.ffn, h)?;
            let down = lin(&mut store, n("ffn_down"), h, m.ffn)?;
            layers.push(Layer {
                attn_norm: store.get_dense(&n("attn_norm"))?,
                q,
                k,
                v,
                o,
                q_norm: store.get_dense(&n("attn_q_norm"))?,
                k_norm: store.get_dense(&n("attn_k_norm"))?,
                ffn_norm: store.get_dense(&n("ffn_norm"))?,
                gate,
                up,
                down,
            });
        }
        let feat = cfg.target_layer_ids.len() * h;
        let fc = lin(&mut store, "fc.weight".into(), h, feat)?;
        let hidden_norm = store.get_dense("hidden_norm.weight")?;
        let norm = store.get_dense("output_norm.weight")?;
        let (cos, sin) = rope_tables(m, context, None, device)?;
        let caches = (0..m.n_layers)
            .map(|_| KvCache::new(m.n_kv_heads, hd, context, DType::F32, device))
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

    /// A display name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Set the display name.
    pub fn set_name(&mut self, name: impl Into<String>) {
        self.name = name.into();
    }

    /// Refuse a target this drafter cannot read: different vocabulary, hidden size or layers.
    pub fn check_target(&self, target: &ModelConfig) -> Result<()> {
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
    pub fn truncate(&mut self, len: usize) {
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
    pub fn push_features(&mut self, features: Tensor) -> Result<()> {
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
        let (nh, nkv, hd) = (m.n_heads, m.n_kv_heads, m.head_dim);
        let eps = m.rms_eps as f32;
        let mut block = vec![self.cfg.mask_token_id; bs];
        block[0] = root;
        let mut h = target.embed(&block)?;
        let device = h.device().clone();
        let ctx = if self.pending.is_empty() {
            None
        } else {
            let f = Tensor::cat(&self.pending, 0)?;
            let f = self.fc.forward(&f)?;
            Some(candle_nn::ops::rms_norm(&f, &self.hidden_norm, eps)?)
        };
        let m_rows = self.pending_rows;
        let bcos = self.cos.narrow(0, root_pos, bs)?;
        let bsin = self.sin.narrow(0, root_pos, bs)?;
        let (ccos, csin) = (
            self.cos.narrow(0, base, m_rows)?,
            self.sin.narrow(0, base, m_rows)?,
        );
        let n_rep = nh / nkv;
        let scale = 1.0 / (hd as f64).sqrt();
        for (li, layer) in self.layers.iter().enumerate() {
            let hn = candle_nn::ops::rms_norm(&h, &layer.attn_norm, eps)?;
            let q = layer.q.forward(&hn)?.reshape((bs, nh, hd))?;
            let q = candle_nn::ops::rms_norm(&q.contiguous()?, &layer.q_norm, eps)?;
            let q = apply_rope(&q.transpose(0, 1)?, &bcos, &bsin, RopeStyle::HalfSplit)?;
            let kv =
                |x: &Tensor, rows: usize, cos: &Tensor, sin: &Tensor| -> Result<(Tensor, Tensor)> {
                    let k = layer.k.forward(x)?.reshape((rows, nkv, hd))?;
                    let k = candle_nn::ops::rms_norm(&k.contiguous()?, &layer.k_norm, eps)?;
                    let k = apply_rope(&k.transpose(0, 1)?, cos, sin, RopeStyle::HalfSplit)?;
                    let v = layer
                        .v
                        .forward(x)?
                        .reshape((rows, nkv, hd))?
                        .transpose(0, 1)?
                        .contiguous()?;
                    Ok((k, v))
                };
            if let Some(c) = &ctx {
                let (kc, vc) = kv(c, m_rows, &ccos, &csin)?;
                self.caches[li].append(&kc, &vc)?;
            }
            let (kb, vb) = kv(&hn, bs, &bcos, &bsin)?;
            let (kc, vc) = self.caches[li].view()?;
            let k = Tensor::cat(&[&kc, &kb], 1)?;
            let v = Tensor::cat(&[&vc, &vb], 1)?;
            let total = k.dim(1)?;
            let qg = q.reshape((nkv, n_rep * bs, hd))?;
            let mut att = (qg.matmul(&k.t()?)? * scale)?;
            if let Some(w) = self.cfg.sliding_window[li] {
                // Keys more than `w - 1` positions before the query are out of the window.
                let mut mask = vec![0f32; bs * total];
                for qi in 0..bs {
                    let qp = root_pos + qi;
                    for (ki, slot) in mask[qi * total..(qi + 1) * total].iter_mut().enumerate() {
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
                let mask = Tensor::from_vec(mask, (bs, total), &device)?.repeat((n_rep, 1))?;
                att = att.broadcast_add(&mask)?;
            }
            let att = candle_nn::ops::softmax_last_dim(&att)?;
            let out = att
                .matmul(&v)?
                .reshape((nh, bs, hd))?
                .transpose(0, 1)?
                .reshape((bs, nh * hd))?;
            h = (h + layer.o.forward(&out)?)?;
            let hn = candle_nn::ops::rms_norm(&h, &layer.ffn_norm, eps)?;
            let g = candle_nn::ops::silu(&layer.gate.forward(&hn)?)?;
            let u = layer.up.forward(&hn)?;
            h = (h + layer.down.forward(&(g * u)?)?)?;
        }
        self.pending.clear();
        self.pending_rows = 0;
        let rows = h.narrow(0, 1, bs - 1)?;
        let rows = candle_nn::ops::rms_norm(&rows, &self.norm, eps)?;
        target.lm_head(&rows)
    }
}
