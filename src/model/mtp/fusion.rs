//! Features from several target layers fused into the hidden state an MTP head reads: EAGLE-3's
//! input (Li et al., "EAGLE-3: Scaling up Inference Acceleration of Large Language Models via
//! Training-Time Test", arXiv:2503.01840; reference code SafeAILab/EAGLE `eagle/model/cnets.py`,
//! whose `fc` maps the concatenation of a low, a middle and a high layer's hidden states to one
//! hidden state). The last layer alone says what the target will write next; lower layers still
//! hold what it read, which the tokens after next depend on too.
//!
//! ```text
//! g = proj(cat[rms(h_l1), ..., rms(h_lL)])     layers l1 < ... < lL, each row of each part
//!                                               divided by its root mean square (no weight)
//! ```
//!
//! The per-part normalisation is ours: a pre-norm transformer's residual stream grows with
//! depth, so a low layer's part would start orders of magnitude below the last layer's. Divided
//! by their RMS, the parts start on one scale; and since the head's hidden norm (scale-invariant)
//! follows, a projection that selects the last layer ([`initial_projection`]) is the unfused head
//! to within the norm's epsilon: a fused head starts from a trained one exactly where it was.
//!
//! One rule for the trainer (`train::head`, through candle's differentiable ops) and the runtime
//! ([`super::MtpHead::target_hidden`]): [`normalised_parts`].

use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor, D};

/// GGUF-style stem of the projection `[hidden, layers * hidden]` within a head (`mtp.{i}.`
/// before it).
pub const STEM_PROJ: &str = "feature_proj.weight";

/// GGUF-style stem of the fused layers' indices (an f32 vector, as the draft vocabulary's).
pub const STEM_LAYERS: &str = "feature_layers.weight";

/// Most layers a head fuses.
pub const MAX_LAYERS: usize = 8;

/// Refuse a list of layers to fuse that is not 2 to [`MAX_LAYERS`] distinct layers of a target
/// of `n_layers`, ascending.
pub fn check_layers(layers: &[usize], n_layers: usize) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidArgument(format!(
            "feature layers {layers:?}: {why}"
        )))
    };
    if !(2..=MAX_LAYERS).contains(&layers.len()) {
        return bad(&format!("fuse 2 to {MAX_LAYERS} layers"));
    }
    if !layers.windows(2).all(|w| w[0] < w[1]) {
        return bad("list each layer once, in ascending order");
    }
    match layers.last() {
        Some(&l) if l >= n_layers => bad(&format!("the target has layers 0 to {}", n_layers - 1)),
        _ => Ok(()),
    }
}

/// The layers a spelling names for a target of `n_layers`: `eagle3` (EAGLE-3's low, middle and
/// high layers, the outputs of layers 1, n/2 - 1 and n - 4, and the last layer, which an unfused
/// head reads) or a comma-separated list of layer indices (0-based, each layer's output).
pub fn parse_layers(spec: &str, n_layers: usize) -> Result<Vec<usize>> {
    let layers: Vec<usize> = if spec.trim() == "eagle3" {
        let n = n_layers;
        let mut l = vec![
            1.min(n.saturating_sub(1)),
            (n / 2).saturating_sub(1),
            n.saturating_sub(4),
            n.saturating_sub(1),
        ];
        l.sort_unstable();
        l.dedup();
        l
    } else {
        spec.split(',')
            .map(|s| {
                s.trim().parse::<usize>().map_err(|_| {
                    Error::InvalidArgument(format!(
                        "feature layers `{spec}`: `{s}` is not a layer index (or say `eagle3`)"
                    ))
                })
            })
            .collect::<Result<_>>()?
    };
    check_layers(&layers, n_layers)?;
    Ok(layers)
}

/// `x` `[rows, parts * hidden]` (the layers' hidden states side by side) with each part of each
/// row divided by its root mean square (`eps` inside the root, as RMSNorm): the projection's
/// input, in f32. `ones` is a vector of `hidden` ones on `x`'s device: with it, candle's fused
/// RMSNorm (one launch on a GPU; the runtime's way), without it differentiable ops (the
/// trainer's); the same values either way.
pub fn normalised_parts(
    x: &Tensor,
    parts: usize,
    eps: f64,
    ones: Option<&Tensor>,
) -> Result<Tensor> {
    let (rows, width) = x.dims2()?;
    if parts == 0 || width % parts != 0 {
        return Err(Error::InvalidArgument(format!(
            "fused features of width {width} are not {parts} layers side by side"
        )));
    }
    let x = x
        .to_dtype(DType::F32)?
        .reshape((rows * parts, width / parts))?;
    let y = match ones {
        Some(w) => candle_nn::ops::rms_norm(&x, w, eps as f32)?,
        None => {
            let rms = (x.sqr()?.mean_keepdim(D::Minus1)? + eps)?.sqrt()?;
            x.broadcast_div(&rms)?
        }
    };
    Ok(y.reshape((rows, width))?)
}

/// The projection a fused head starts from (`[hidden, layers.len() * hidden]`, f32 on `device`):
/// the identity on the last layer's part where `last` is among `layers` (the unfused head's
/// input, so that a head trained before starts where it was), else the mean of the parts.
pub fn initial_projection(
    layers: &[usize],
    last: usize,
    hidden: usize,
    device: &Device,
) -> Result<Tensor> {
    let parts = layers.len();
    let mut w = vec![0f32; hidden * parts * hidden];
    let chosen: Vec<(usize, f32)> = match layers.iter().position(|&l| l == last) {
        Some(p) => vec![(p, 1.0)],
        None => (0..parts).map(|p| (p, 1.0 / parts as f32)).collect(),
    };
    for i in 0..hidden {
        for &(p, v) in &chosen {
            w[i * parts * hidden + p * hidden + i] = v;
        }
    }
    Ok(Tensor::from_vec(w, (hidden, parts * hidden), device)?)
}

/// The layers as a head file keeps them: as the draft vocabulary's ids
/// ([`crate::model::draft_vocab::to_tensor`]).
pub fn layers_tensor(layers: &[usize]) -> Result<Tensor> {
    let ids: Vec<u32> = layers.iter().map(|&l| l as u32).collect();
    crate::model::draft_vocab::to_tensor(&ids)
}

/// The layers from the vector a head file keeps ([`layers_tensor`]); refused where an entry is
/// no index.
pub fn layers_of(t: &Tensor) -> Result<Vec<usize>> {
    let ids = crate::model::draft_vocab::from_tensor(t)?;
    Ok(ids.into_iter().map(|l| l as usize).collect())
}

/// A forward's hidden states of the `layers` layers a head reads (`parts`, one a layer, in the
/// order asked) side by side in f32, `[rows, layers * hidden]`: what
/// [`super::MtpHead::target_hidden`] and the trainer take; an error where the target gave
/// another count.
pub fn side_by_side(parts: &[Tensor], layers: usize) -> Result<Tensor> {
    if parts.len() != layers || layers == 0 {
        return Err(Error::InvalidArgument(format!(
            "the target gave {} hidden states of the {layers} layers the head reads",
            parts.len()
        )));
    }
    let parts = parts
        .iter()
        .map(|h| h.to_dtype(DType::F32))
        .collect::<candle_core::Result<Vec<_>>>()?;
    Ok(Tensor::cat(&parts, 1)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eagle3_names_low_middle_high_and_last_layers() {
        assert_eq!(parse_layers("eagle3", 28).unwrap(), vec![1, 13, 24, 27]);
        assert_eq!(parse_layers("eagle3", 4).unwrap(), vec![0, 1, 3]);
        assert_eq!(parse_layers("eagle3", 2).unwrap(), vec![0, 1]);
        assert!(parse_layers("eagle3", 1).is_err());
        assert_eq!(parse_layers("2, 5,9", 10).unwrap(), vec![2, 5, 9]);
        for bad in ["5,2", "3,3", "1,10", "7", "a,b", "1,,2"] {
            let e = parse_layers(bad, 10).unwrap_err().to_string();
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn parts_are_normalised_each_on_its_own() {
        let x = Tensor::from_vec(vec![3f32, 4.0, 0.0, 0.02], (1, 4), &Device::Cpu).unwrap();
        let y = normalised_parts(&x, 2, 0.0, None).unwrap();
        // candle's fused RMSNorm with a unit weight: the same values.
        let ones = Tensor::ones(2, DType::F32, &Device::Cpu).unwrap();
        let fused = normalised_parts(&x, 2, 0.0, Some(&ones)).unwrap();
        let diff = (fused - &y).unwrap().abs().unwrap().max_all().unwrap();
        assert!(diff.to_scalar::<f32>().unwrap() < 1e-6);
        let y = y.to_vec2::<f32>().unwrap();
        let rms = (12.5f32).sqrt();
        assert!((y[0][0] - 3.0 / rms).abs() < 1e-6 && (y[0][1] - 4.0 / rms).abs() < 1e-6);
        assert!((y[0][2]).abs() < 1e-6 && (y[0][3] - 2f32.sqrt()).abs() < 1e-5);
        assert!(normalised_parts(&x, 3, 0.0, None).is_err());
    }

    #[test]
    fn the_initial_projection_selects_the_last_layer_or_averages() {
        let x = Tensor::from_vec((0..6).map(|i| i as f32).collect(), (1, 6), &Device::Cpu).unwrap();
        let w = initial_projection(&[1, 4, 7], 7, 2, &Device::Cpu).unwrap();
        let y = x.matmul(&w.t().unwrap()).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(y, vec![vec![4.0, 5.0]]);
        let w = initial_projection(&[1, 4], 7, 3, &Device::Cpu).unwrap();
        let y = x.matmul(&w.t().unwrap()).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(y, vec![vec![1.5, 2.5, 3.5]]);
        let t = layers_tensor(&[1, 13, 27]).unwrap();
        assert_eq!(layers_of(&t).unwrap(), vec![1, 13, 27]);
        let bad = Tensor::from_vec(vec![1.5f32], 1, &Device::Cpu).unwrap();
        assert!(layers_of(&bad).is_err());
    }
}
