//! The parts of a pre-norm decoder layer (RMSNorm, attention with RoPE and grouped-query heads,
//! SwiGLU MLP), shared by the decoder ([`super::decoder`]), the DFlash drafter and the MTP head,
//! which run the same blocks over different inputs and caches. A hybrid model's layer mixes its
//! rows by a Gated DeltaNet instead ([`Mixer`], [`super::gated_delta`]); its attention layers
//! gate their output and rotate part of each head (Qwen3.5).

use crate::arch::config::{ModelConfig, RopeStyle};
use crate::arch::kv_cache::KvCache;
use crate::arch::weights::{Linear, WeightStore};
use crate::error::Error;
use crate::error::Result;
use crate::gpu::attention::KeyTable;
use crate::model::decoder::apply_rope;
use crate::model::gated_delta::GatedDeltaNet;
use crate::model::visibility::Visibility;
use candle_core::Tensor;

/// Projections that read the same input: one fused matrix where the weights can be joined
/// (fewer, larger matmuls), else one matrix each.
pub(crate) enum Projections {
    Fused { linear: Linear, widths: Vec<usize> },
    Separate(Vec<Linear>),
}

impl Projections {
    /// The linear layers, in output order (one when fused).
    pub(crate) fn linears(&self) -> Vec<&Linear> {
        match self {
            Projections::Fused { linear, .. } => vec![linear],
            Projections::Separate(ls) => ls.iter().collect(),
        }
    }

    /// Load the weights `{blk}.{stem}.weight` (`[out_i, inp]`), with biases if asked.
    pub(crate) fn load(
        store: &mut WeightStore,
        blk: &str,
        parts: &[(&str, usize)],
        inp: usize,
        bias: bool,
    ) -> Result<Self> {
        let name = |stem: &str, what: &str| format!("{blk}.{stem}.{what}");
        let mut biases = Vec::new();
        if bias {
            for (stem, _) in parts {
                biases.push(store.get_dense(&name(stem, "bias"))?);
            }
        }
        let shapes: Vec<(String, [usize; 2])> = parts
            .iter()
            .map(|(stem, out)| (name(stem, "weight"), [*out, inp]))
            .collect();
        if let Some(w) = store.get_concat(&shapes)? {
            let b = if bias {
                Some(Tensor::cat(&biases, 0)?)
            } else {
                None
            };
            return Ok(Projections::Fused {
                linear: Linear::new(w, b)?,
                widths: parts.iter().map(|p| p.1).collect(),
            });
        }
        let mut out = Vec::with_capacity(parts.len());
        for (i, (n, shape)) in shapes.iter().enumerate() {
            let w = store.get_checked(n, shape)?;
            out.push(Linear::new(w, biases.get(i).cloned())?);
        }
        Ok(Projections::Separate(out))
    }

    /// Apply to `x` `[rows, in]`; one output per projection.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        match self {
            Projections::Separate(ls) => ls.iter().map(|l| l.forward(x)).collect(),
            Projections::Fused { linear, widths } => {
                let y = linear.forward(x)?;
                let mut off = 0;
                let mut outs = Vec::with_capacity(widths.len());
                for &w in widths {
                    outs.push(y.narrow(1, off, w)?);
                    off += w;
                }
                Ok(outs)
            }
        }
    }
}

/// An RMSNorm weight `name`, with the config's offset added (`1 + w` norms of Hugging Face
/// Qwen3.5 checkpoints).
pub(crate) fn norm_weight(
    store: &mut WeightStore,
    name: &str,
    cfg: &ModelConfig,
) -> Result<Tensor> {
    let w = store.get_dense(name)?;
    match cfg.norm_offset {
        0.0 => Ok(w),
        off => Ok((w + off as f64)?),
    }
}

/// The attention of a layer: q/k/v projections (Qwen2's biases, Qwen3's per-head q/k norms),
/// RoPE, grouped-query attention over given K/V, the output projection; for Qwen3.5 the query
/// projection also gives each head's output gate, and RoPE turns the first `rotary_dim`
/// dimensions of a head only.
pub struct Attention {
    pub(crate) qkv: Projections,
    pub(crate) o: Linear,
    pub(crate) q_norm: Option<Tensor>,
    pub(crate) k_norm: Option<Tensor>,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    rotary_dim: usize,
    gated: bool,
    eps: f32,
    rope: RopeStyle,
}

impl Attention {
    /// Load a layer's attention (GGUF names `{blk}.attn_*`, e.g. `blk.3.attn_q.weight`).
    pub fn load(store: &mut WeightStore, blk: &str, cfg: &ModelConfig) -> Result<Self> {
        let (h, hd) = (cfg.hidden, cfg.head_dim);
        let (q_out, kv_out) = (cfg.n_heads * hd, cfg.n_kv_heads * hd);
        // With an output gate the query rows are [query | gate] per head: twice as many.
        let q_rows = if cfg.attn_gate { 2 * q_out } else { q_out };
        let qkv = Projections::load(
            store,
            blk,
            &[("attn_q", q_rows), ("attn_k", kv_out), ("attn_v", kv_out)],
            h,
            cfg.qkv_bias,
        )?;
        let o = Linear::new(
            store.get_checked(&format!("{blk}.attn_output.weight"), &[h, q_out])?,
            None,
        )?;
        let (q_norm, k_norm) = if cfg.qk_norm {
            (
                Some(norm_weight(
                    store,
                    &format!("{blk}.attn_q_norm.weight"),
                    cfg,
                )?),
                Some(norm_weight(
                    store,
                    &format!("{blk}.attn_k_norm.weight"),
                    cfg,
                )?),
            )
        } else {
            (None, None)
        };
        Ok(Attention {
            qkv,
            o,
            q_norm,
            k_norm,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: hd,
            rotary_dim: cfg.rotary_dim,
            gated: cfg.attn_gate,
            eps: cfg.rms_eps as f32,
            rope: cfg.rope_style,
        })
    }

    /// Heads `[n, heads, hd]` of a projection, normalised per head where the family does so,
    /// rotated, as `[heads, n, hd]`.
    fn heads(
        &self,
        x: &Tensor,
        heads: usize,
        norm: Option<&Tensor>,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<Tensor> {
        let n = x.dim(0)?;
        let x = x.reshape((n, heads, self.head_dim))?;
        let x = match norm {
            Some(w) => candle_nn::ops::rms_norm(&x.contiguous()?, w, self.eps)?,
            None => x,
        };
        let x = x.transpose(0, 1)?;
        if self.rotary_dim == self.head_dim {
            return apply_rope(&x, cos, sin, self.rope);
        }
        // Partial RoPE: the first rotary_dim dimensions turned, the rest as they are.
        let rd = self.rotary_dim;
        let turned = apply_rope(&x.narrow(2, 0, rd)?, cos, sin, self.rope)?;
        let rest = x.narrow(2, rd, self.head_dim - rd)?;
        Ok(Tensor::cat(&[&turned, &rest], 2)?.contiguous()?)
    }

    /// Queries `[heads, n, hd]` and keys and values `[kv_heads, n, hd]` of the normalised input
    /// `x` `[n, hidden]`, rotated with the per-row tables `cos`, `sin` `[n, hd / 2]`.
    pub fn qkv(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let (q, k, v, _) = self.qkv_gate(x, cos, sin)?;
        Ok((q, k, v))
    }

    /// [`Attention::qkv`] and, for a gated attention, each row's output gate `[n, heads * hd]`.
    pub fn qkv_gate(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor, Option<Tensor>)> {
        let p = self.qkv.forward(x)?;
        let n = x.dim(0)?;
        let (query, gate) = match self.gated {
            true => {
                let both = p[0].reshape((n, self.n_heads, 2 * self.head_dim))?;
                let q = both.narrow(2, 0, self.head_dim)?;
                let g = both.narrow(2, self.head_dim, self.head_dim)?;
                let g = g.contiguous()?.reshape((n, self.n_heads * self.head_dim))?;
                (
                    q.contiguous()?.reshape((n, self.n_heads * self.head_dim))?,
                    Some(g),
                )
            }
            false => (p[0].clone(), None),
        };
        let q = self.heads(&query, self.n_heads, self.q_norm.as_ref(), cos, sin)?;
        let k = self.heads(&p[1], self.n_kv_heads, self.k_norm.as_ref(), cos, sin)?;
        let n = x.dim(0)?;
        let v = p[2]
            .reshape((n, self.n_kv_heads, self.head_dim))?
            .transpose(0, 1)?
            .contiguous()?;
        Ok((q, k, v, gate))
    }

    /// The output projection of the attention's mixed rows `[n, heads * hd]`, gated where the
    /// layer gates (`mixed * sigmoid(gate)`).
    fn output(&self, mixed: Tensor, gate: Option<&Tensor>) -> Result<Tensor> {
        let mixed = match gate {
            Some(g) => (mixed * candle_nn::ops::sigmoid(g)?)?,
            None => mixed,
        };
        self.o.forward(&mixed)
    }

    /// Grouped-query attention of `q` `[heads, n, hd]` over `k`, `v` `[kv_heads, total, hd]`,
    /// with an optional additive mask `[heads / kv_heads * n, total]`, through the output
    /// projection: `[n, hidden]` ([`grouped_attention`]).
    pub fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        self.output(grouped_attention(q, k, v, mask, self.n_kv_heads)?, None)
    }

    /// As [`Attention::attend`], each row over the keys `table` lists for it, through treespec's
    /// batch-invariant kernel ([`crate::gpu::attention`](mod@crate::gpu::attention)).
    pub fn attend_listed(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        table: &KeyTable,
    ) -> Result<Tensor> {
        self.output(crate::gpu::attention(q, k, v, table)?, None)
    }
}

/// Grouped-query attention through candle's ops: `q` `[heads, n, hd]` over `k`, `v`
/// `[kv_heads, total, hd]` with an optional additive mask `[heads / kv_heads * n, total]`, scaled
/// by `1 / sqrt(hd)`: `[n, heads * hd]`. Query heads that share a K/V head are stacked along the
/// row axis, so K/V are never copied per head.
pub fn grouped_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    n_kv_heads: usize,
) -> Result<Tensor> {
    let (nh, n, hd) = q.dims3()?;
    let qg = q.reshape((n_kv_heads, nh / n_kv_heads * n, hd))?;
    let scale = 1.0 / (hd as f64).sqrt();
    let att = (qg.matmul(&k.t()?)? * scale)?;
    let att = match mask {
        Some(m) => att.broadcast_add(m)?,
        None => att,
    };
    let att = candle_nn::ops::softmax_last_dim(&att)?;
    Ok(att
        .matmul(v)?
        .reshape((nh, n, hd))?
        .transpose(0, 1)?
        .reshape((n, nh * hd))?)
}

/// The MLP half of a layer with its norm: `x + down(silu(gate(n)) * up(n))`, `n = norm(x)`.
pub struct Mlp {
    pub(crate) norm: Tensor,
    pub(crate) gate_up: Projections,
    pub(crate) down: Linear,
    eps: f32,
}

impl Mlp {
    /// Load a layer's MLP (GGUF names `{blk}.ffn_*`).
    pub fn load(store: &mut WeightStore, blk: &str, cfg: &ModelConfig) -> Result<Self> {
        let gate_up = Projections::load(
            store,
            blk,
            &[("ffn_gate", cfg.ffn), ("ffn_up", cfg.ffn)],
            cfg.hidden,
            false,
        )?;
        let down = Linear::new(
            store.get_checked(&format!("{blk}.ffn_down.weight"), &[cfg.hidden, cfg.ffn])?,
            None,
        )?;
        // llama.cpp names the MLP's norm `post_attention_norm` in Qwen3.5 files.
        let norm = match store.contains(&format!("{blk}.ffn_norm.weight")) {
            true => format!("{blk}.ffn_norm.weight"),
            false => format!("{blk}.post_attention_norm.weight"),
        };
        Ok(Mlp {
            norm: norm_weight(store, &norm, cfg)?,
            gate_up,
            down,
            eps: cfg.rms_eps as f32,
        })
    }

    /// The residual stream after the MLP.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = candle_nn::ops::rms_norm(x, &self.norm, self.eps)?;
        let gu = self.gate_up.forward(&h)?;
        let g = candle_nn::ops::silu(&gu[0])?;
        Ok((x + self.down.forward(&(g * &gu[1])?)?)?)
    }
}

/// What mixes a layer's rows: attention over the K/V cache, or a Gated DeltaNet's recurrence.
pub enum Mixer {
    /// Attention (the K/V cache is the caller's).
    Attention(Attention),
    /// A Gated DeltaNet (its recurrent state is the caller's, [`crate::model::gated_delta`]).
    GatedDelta(Box<GatedDeltaNet>),
}

/// One pre-norm decoder layer: `x += mix(norm(x)); x += mlp(norm(x))`. The caller runs the
/// mixer (it owns the K/V cache or the recurrent state).
pub struct DecoderLayer {
    pub(crate) attn_norm: Tensor,
    eps: f32,
    /// The attention or the Gated DeltaNet.
    pub mixer: Mixer,
    /// The MLP with its norm.
    pub mlp: Mlp,
}

impl DecoderLayer {
    /// The layer's attention (an error for a Gated DeltaNet layer).
    pub fn attn(&self) -> Result<&Attention> {
        match &self.mixer {
            Mixer::Attention(a) => Ok(a),
            Mixer::GatedDelta(_) => Err(Error::Config(
                "a Gated DeltaNet layer where an attention layer was expected".into(),
            )),
        }
    }

    /// The layer's weights as the GPU step reads them (`None` for a Gated DeltaNet layer whose
    /// kernels do not run on the GPU).
    pub(crate) fn step_weights(&self) -> Option<crate::gpu::step::LayerWeights<'_>> {
        use crate::gpu::step::{LayerWeights, MixerKind};
        let (qkv, q_norm, k_norm, o, mixer) = match &self.mixer {
            Mixer::Attention(attn) => (
                attn.qkv.linears(),
                attn.q_norm.as_ref(),
                attn.k_norm.as_ref(),
                &attn.o,
                MixerKind::Attention { gated: attn.gated },
            ),
            Mixer::GatedDelta(g) => {
                let (proj, out, small) = g.step_weights()?;
                (proj, None, None, out, MixerKind::GatedDelta(small))
            }
        };
        Some(LayerWeights {
            attn_norm: &self.attn_norm,
            qkv,
            q_norm,
            k_norm,
            o,
            mixer,
            ffn_norm: &self.mlp.norm,
            gate_up: self.mlp.gate_up.linears(),
            down: &self.mlp.down,
        })
    }

    /// Load the attention layer whose GGUF names start `{blk}.` (`blk.3` for a decoder's fourth
    /// layer).
    pub fn load(store: &mut WeightStore, blk: &str, cfg: &ModelConfig) -> Result<Self> {
        Self::load_as(store, blk, cfg, false)
    }

    /// Load the layer `{blk}.`, a Gated DeltaNet layer where `linear`.
    pub fn load_as(
        store: &mut WeightStore,
        blk: &str,
        cfg: &ModelConfig,
        linear: bool,
    ) -> Result<Self> {
        let mixer = match linear {
            true => Mixer::GatedDelta(Box::new(GatedDeltaNet::load(store, blk, cfg)?)),
            false => Mixer::Attention(Attention::load(store, blk, cfg)?),
        };
        Ok(DecoderLayer {
            attn_norm: norm_weight(store, &format!("{blk}.attn_norm.weight"), cfg)?,
            eps: cfg.rms_eps as f32,
            mixer,
            mlp: Mlp::load(store, blk, cfg)?,
        })
    }

    /// The input of the mixer: `norm(x)`.
    pub fn attn_norm(&self, x: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::rms_norm(x, &self.attn_norm, self.eps)?)
    }

    /// An attention layer over new rows `x` `[n, hidden]` at the rotations `cos`, `sin`: their
    /// K/V appended to `cache`, each row attending to the cached rows `visible` grants it.
    pub fn forward_cached(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        cache: &mut KvCache,
        visible: &Visibility,
    ) -> Result<Tensor> {
        let attn = self.attn()?;
        let h = self.attn_norm(x)?;
        let (q, k, v, gate) = attn.qkv_gate(&h, cos, sin)?;
        cache.append(&k, &v)?;
        let (kc, vc) = cache.view()?;
        let mixed = match visible {
            Visibility::Dense(m) => grouped_attention(&q, &kc, &vc, m.as_ref(), attn.n_kv_heads)?,
            Visibility::Listed(t) => crate::gpu::attention(&q, &kc, &vc, t)?,
        };
        let mixed = attn.output(mixed, gate.as_ref())?;
        self.mlp.forward(&(x + mixed)?)
    }
}
