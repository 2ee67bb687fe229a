//! Activations quantised for the kernels: 16-bit integers, one f32 scale per block of 32 (or of
//! 256, for the K-quant kernels), and the integer sum of every 32 values.

use super::BLOCK;

/// Largest quantised magnitude (the i16 range without -32768, so that no product pair of the
/// 16-bit dot product can overflow).
const QMAX: f32 = 32767.0;

/// `m` rows of `k` activations, each scale block stored as `d * q[i]`.
#[derive(Debug, Clone)]
pub struct QuantActs {
    /// Rows.
    pub m: usize,
    /// Values per row.
    pub k: usize,
    /// Values per scale: 32 or 256.
    pub block: usize,
    /// Quantised values, `[m, k]`.
    pub q: Vec<i16>,
    /// Scale of each block, `[m, k / block]`.
    pub d: Vec<f32>,
    /// Sum of the quantised values of each unit of 32, `[m, k / 32]`.
    pub sum: Vec<i32>,
}

impl QuantActs {
    /// Quantise `m` rows of `k` values with one scale per `block` values (`k` a multiple of
    /// `block`, `block` a multiple of 32). One scalar procedure for every kernel path, so that all
    /// of them see the same integers.
    pub fn quantize(x: &[f32], m: usize, k: usize, block: usize) -> Self {
        assert!(block.is_multiple_of(BLOCK) && k.is_multiple_of(block) && x.len() == m * k);
        let mut q = vec![0i16; m * k];
        let mut d = vec![0f32; m * k / block];
        let mut sum = vec![0i32; m * k / BLOCK];
        for (b, (xs, qs)) in x.chunks(block).zip(q.chunks_mut(block)).enumerate() {
            let amax = xs.iter().fold(0f32, |a, &v| a.max(v.abs()));
            if !amax.is_finite() {
                // An inf or NaN input: the outputs that read this block become NaN, as in f32.
                d[b] = f32::NAN;
                continue;
            }
            if amax == 0.0 {
                continue;
            }
            d[b] = amax / QMAX;
            let inv = QMAX / amax;
            for (qi, &v) in qs.iter_mut().zip(xs) {
                *qi = (v * inv).round().clamp(-QMAX, QMAX) as i16;
            }
        }
        for (s, qs) in sum.iter_mut().zip(q.chunks(BLOCK)) {
            *s = qs.iter().map(|&v| v as i32).sum();
        }
        QuantActs {
            m,
            k,
            block,
            q,
            d,
            sum,
        }
    }

    /// Units of 32 per row.
    pub fn units(&self) -> usize {
        self.k / BLOCK
    }

    /// Scale blocks per row.
    pub fn blocks(&self) -> usize {
        self.k / self.block
    }
}
