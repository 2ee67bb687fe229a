//! A Qwen-style decoder layer written in ops that have gradients (RMSNorm, RoPE, softmax and
//! attention spelled out) over parameters held in a candle-nn `VarMap` under GGUF-style stems
//! (`attn_q.weight`, ...), each model naming where its stems are saved: shared by the trainable
//! MTP head ([`super::head`]) and the trainable DFlash drafter ([`super::dflash`]).

use crate::arch::config::{ModelConfig, RopeStyle};
use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{Init, VarMap};
use std::collections::HashMap;

/// A layer's tensors by GGUF-style stem and shape for a model shaped as `cfg` (norms, the
/// attention's and the MLP's matrices, biases and q/k norms where the family has them).
pub fn layer_params(cfg: &ModelConfig) -> Vec<(&'static str, Vec<usize>)> {
    let (h, hd, ffn) = (cfg.hidden, cfg.head_dim, cfg.ffn);
    let (q_out, kv_out) = (cfg.n_heads * hd, cfg.n_kv_heads * hd);
    let mut params = vec![
        ("attn_norm.weight", vec![h]),
        ("ffn_norm.weight", vec![h]),
        ("attn_q.weight", vec![q_out, h]),
        ("attn_k.weight", vec![kv_out, h]),
        ("attn_v.weight", vec![kv_out, h]),
        ("attn_output.weight", vec![h, q_out]),
        ("ffn_gate.weight", vec![ffn, h]),
        ("ffn_up.weight", vec![ffn, h]),
        ("ffn_down.weight", vec![h, ffn]),
    ];
    if cfg.qkv_bias {
        params.push(("attn_q.bias", vec![q_out]));
        params.push(("attn_k.bias", vec![kv_out]));
        params.push(("attn_v.bias", vec![kv_out]));
    }
    if cfg.qk_norm {
        params.push(("attn_q_norm.weight", vec![hd]));
        params.push(("attn_k_norm.weight", vec![hd]));
    }
    params
}

/// A matrix `[out, in]` of small random values from `rng`: uniform, with the variance of
/// N(0, (0.5 / sqrt(in))^2).
pub fn random_matrix(rng: &mut impl rand::Rng, shape: &[usize]) -> Result<Tensor> {
    let a = 3f32.sqrt() * 0.5 / (shape[1] as f32).sqrt();
    let n = shape[0] * shape[1];
    let v: Vec<f32> = (0..n).map(|_| rng.random_range(-a..a)).collect();
    Ok(Tensor::from_vec(v, shape, &candle_core::Device::Cpu)?)
}

/// Make the parameter `name` of `shape` in `vars`, on `device`: `value` where given (in f32),
/// else its start, one for a norm's weight (`is_norm`) and zero otherwise.
pub fn make_param(
    vars: &mut VarMap,
    name: &str,
    shape: &[usize],
    is_norm: bool,
    value: Option<Tensor>,
    device: &Device,
) -> Result<()> {
    let start = if is_norm {
        Init::Const(1.0)
    } else {
        Init::Const(0.0)
    };
    vars.get(shape, name, start, DType::F32, device)?;
    if let Some(t) = value {
        vars.set_one(name, t.to_dtype(DType::F32)?.to_device(device)?)?;
    }
    Ok(())
}

/// A model's parameters (locked) read as one decoder layer's: `name` maps a GGUF-style stem
/// to the name it is held under.
pub struct LayerOps<'a> {
    /// The parameters by saved name.
    pub vars: &'a HashMap<String, Var>,
    /// The model's shape.
    pub cfg: &'a ModelConfig,
    /// A stem's saved name.
    pub name: &'a dyn Fn(&str) -> String,
}

impl LayerOps<'_> {
    /// The parameter of stem `stem`.
    pub fn w(&self, stem: &str) -> Result<Tensor> {
        let name = (self.name)(stem);
        self.vars
            .get(&name)
            .map(|v| v.as_tensor().clone())
            .ok_or_else(|| Error::InvalidArgument(format!("no parameter {name}")))
    }

    /// RMSNorm of `x` by the weight of stem `stem`.
    pub fn norm(&self, x: &Tensor, stem: &str) -> Result<Tensor> {
        Ok(candle_nn::ops::rms_norm_slow(
            x,
            &self.w(stem)?,
            self.cfg.rms_eps as f32,
        )?)
    }

    /// `x W^T (+ b)` for the matrix `{stem}.weight` (and `{stem}.bias`).
    pub fn linear(&self, x: &Tensor, stem: &str, bias: bool) -> Result<Tensor> {
        let y = x.matmul(&self.w(&format!("{stem}.weight"))?.t()?)?;
        Ok(if bias {
            y.broadcast_add(&self.w(&format!("{stem}.bias"))?)?
        } else {
            y
        })
    }

    /// RoPE on `x` `[heads, rows, hd]` with per-row tables `[rows, hd / 2]`.
    pub fn rope(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let (heads, rows, hd) = x.dims3()?;
        Ok(match self.cfg.rope_style {
            RopeStyle::HalfSplit => {
                let cos = Tensor::cat(&[cos, cos], 1)?.unsqueeze(0)?;
                let sin = Tensor::cat(&[sin, sin], 1)?.unsqueeze(0)?;
                let x1 = x.narrow(2, 0, hd / 2)?;
                let x2 = x.narrow(2, hd / 2, hd / 2)?;
                let rot = Tensor::cat(&[&x2.neg()?, &x1], 2)?;
                (x.broadcast_mul(&cos)? + rot.broadcast_mul(&sin)?)?
            }
            RopeStyle::Interleaved => {
                let x = x.reshape((heads, rows, hd / 2, 2))?;
                let (x0, x1) = (
                    x.narrow(3, 0, 1)?.squeeze(3)?,
                    x.narrow(3, 1, 1)?.squeeze(3)?,
                );
                let (c, s) = (cos.unsqueeze(0)?, sin.unsqueeze(0)?);
                let y0 = (x0.broadcast_mul(&c)? - x1.broadcast_mul(&s)?)?;
                let y1 = (x0.broadcast_mul(&s)? + x1.broadcast_mul(&c)?)?;
                Tensor::stack(&[y0, y1], 3)?.reshape((heads, rows, hd))?
            }
        })
    }

    /// `[b * rows, out]` (sequence-major) to heads `[b * heads, rows, hd]`, normalised per head
    /// where the family does so.
    fn heads(&self, x: &Tensor, b: usize, heads: usize, norm: Option<&str>) -> Result<Tensor> {
        let rows = x.dim(0)? / b;
        let x = x.reshape((b, rows, heads, self.cfg.head_dim))?;
        let x = match norm {
            Some(n) if self.cfg.qk_norm => self.norm(&x, n)?,
            _ => x,
        };
        Ok(x.transpose(1, 2)?
            .contiguous()?
            .reshape((b * heads, rows, self.cfg.head_dim))?)
    }

    /// Keys and values of rows `n` already normed (`[b * rows, h]`, `b` sequences) at the
    /// rotations `cos`, `sin` (by row, the same for every sequence).
    pub fn kv_normed(
        &self,
        n: &Tensor,
        b: usize,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let bias = self.cfg.qkv_bias;
        let k = self.heads(
            &self.linear(n, "attn_k", bias)?,
            b,
            self.cfg.n_kv_heads,
            Some("attn_k_norm.weight"),
        )?;
        let v = self.heads(
            &self.linear(n, "attn_v", bias)?,
            b,
            self.cfg.n_kv_heads,
            None,
        )?;
        Ok((self.rope(&k, cos, sin)?, v))
    }

    /// The layer's queries and keys/values for its input rows `u` (normed by `attn_norm`).
    pub fn qkv(
        &self,
        u: &Tensor,
        b: usize,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let n = self.norm(u, "attn_norm.weight")?;
        let q = self.heads(
            &self.linear(&n, "attn_q", self.cfg.qkv_bias)?,
            b,
            self.cfg.n_heads,
            Some("attn_q_norm.weight"),
        )?;
        let (k, v) = self.kv_normed(&n, b, cos, sin)?;
        Ok((self.rope(&q, cos, sin)?, k, v))
    }

    /// Attention of `q` `[b * heads, R, hd]` over `k`, `v` `[b * kv_heads, K, hd]` under the
    /// additive `mask` `[R, K]` (the same for every sequence), then the rest of the layer on
    /// the residual `u` `[b * R, h]`: the layer's output.
    pub fn finish(
        &self,
        u: &Tensor,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: &Tensor,
    ) -> Result<Tensor> {
        let (bnh, rows, hd) = q.dims3()?;
        let (bnkv, keys, _) = k.dims3()?;
        let (nh, nkv) = (self.cfg.n_heads, self.cfg.n_kv_heads);
        let b = bnh / nh;
        let rep = nh / nkv;
        let expand = |t: &Tensor| -> Result<Tensor> {
            Ok(t.reshape((b, nkv, 1, keys, hd))?
                .broadcast_as((b, nkv, rep, keys, hd))?
                .contiguous()?
                .reshape((bnh, keys, hd))?)
        };
        debug_assert_eq!(bnkv, b * nkv);
        let (k, v) = (expand(k)?, expand(v)?);
        let scores =
            (q.matmul(&k.t()?)? / (hd as f64).sqrt())?.broadcast_add(&mask.unsqueeze(0)?)?;
        let att = candle_nn::ops::softmax(&scores, D::Minus1)?;
        let mixed = att
            .matmul(&v)?
            .reshape((b, nh, rows, hd))?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b * rows, nh * hd))?;
        let x = (u + self.linear(&mixed, "attn_output", false)?)?;
        let n = self.norm(&x, "ffn_norm.weight")?;
        let g = candle_nn::ops::silu(&self.linear(&n, "ffn_gate", false)?)?;
        let up = self.linear(&n, "ffn_up", false)?;
        Ok((&x + self.linear(&(g * up)?, "ffn_down", false)?)?)
    }
}
