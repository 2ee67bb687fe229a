//! Rotary position embeddings (RoPE, Su et al., arXiv:2104.09864): the cos and sin tables a
//! decoder's positions read, with Llama 3's frequency scaling and GGUF's `rope_freqs` factors,
//! and their application in either pairing of a head's dimensions.

use crate::arch::config::{ModelConfig, RopeStyle};
use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};

/// Apply RoPE to `x` `[heads, rows, head_dim]` with per-row tables `[rows, head_dim / 2]`.
pub fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor, style: RopeStyle) -> Result<Tensor> {
    let x = x.contiguous()?.unsqueeze(0)?;
    let y = match style {
        RopeStyle::HalfSplit => candle_nn::rotary_emb::rope(&x, cos, sin)?,
        RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x, cos, sin)?,
    };
    Ok(y.squeeze(0)?)
}

/// cos and sin tables `[context, rotary_dim / 2]`.
pub fn rope_tables(
    cfg: &ModelConfig,
    context: usize,
    freq_factors: Option<&[f32]>,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let half = cfg.rotary_dim / 2;
    let mut inv_freq: Vec<f32> = (0..half)
        .map(|i| 1.0 / cfg.rope_theta.powf(2.0 * i as f32 / cfg.rotary_dim as f32))
        .collect();
    if let Some(f) = freq_factors {
        if f.len() != half {
            return Err(Error::Config(format!(
                "rope_freqs has {} entries, expected {half}",
                f.len()
            )));
        }
        for (x, d) in inv_freq.iter_mut().zip(f) {
            *x /= d;
        }
    } else if let Some(s) = cfg.rope_scaling {
        let low_wavelen = s.original_max_position_embeddings as f32 / s.low_freq_factor;
        let high_wavelen = s.original_max_position_embeddings as f32 / s.high_freq_factor;
        for x in inv_freq.iter_mut() {
            let wavelen = 2.0 * std::f32::consts::PI / *x;
            *x = if wavelen < high_wavelen {
                *x
            } else if wavelen > low_wavelen {
                *x / s.factor
            } else {
                let smooth = (s.original_max_position_embeddings as f32 / wavelen
                    - s.low_freq_factor)
                    / (s.high_freq_factor - s.low_freq_factor);
                (1.0 - smooth) * *x / s.factor + smooth * *x
            };
        }
    }
    let inv = Tensor::from_vec(inv_freq, (1, half), device)?;
    let t = Tensor::arange(0u32, context as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((context, 1))?;
    let freqs = t.broadcast_mul(&inv)?;
    Ok((freqs.cos()?.contiguous()?, freqs.sin()?.contiguous()?))
}
