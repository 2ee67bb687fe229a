//! The sampler: temperature, top-k and top-p over one row of logits, and seeded draws.
//!
//! [`distribution`] is the single definition of "the target's processed distribution": plain
//! decoding samples from it, and lossless speculative verification must sample from exactly the
//! same distribution per node, so both call this function.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Sampling settings. A temperature of 0 means greedy decoding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 (or below) is greedy.
    pub temperature: f32,
    /// Keep only the k most likely tokens (0: off).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose mass reaches p (1: off).
    pub top_p: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self::greedy()
    }
}

impl SamplingParams {
    /// Whether `t` is a temperature the sampler takes: finite and >= 0 (0 is greedy).
    pub fn temperature_ok(t: f32) -> bool {
        t.is_finite() && t >= 0.0
    }

    /// Whether `p` is a nucleus mass the sampler takes: in (0, 1] (1 is off).
    pub fn top_p_ok(p: f32) -> bool {
        p > 0.0 && p <= 1.0
    }

    /// Greedy decoding.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
        }
    }

    /// True when decoding is greedy.
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }
}

/// Index of the largest value (the lowest index among equals); `None` for an empty row.
pub fn argmax(row: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in row.iter().enumerate() {
        match best {
            Some((_, b)) if x <= b => {}
            _ if x.is_nan() => {}
            _ => best = Some((i, x)),
        }
    }
    best.map(|(i, _)| i as u32)
}

/// `ln(sum(exp(row)))`, summed in f64 in row order (`-inf` for an empty row). The DDTree
/// builder's log-normaliser: summed this way it matches the reference's ranking of near-tied
/// prefixes (see [`crate::tree::top_k_log_probs`]).
pub fn log_sum_exp(row: &[f32]) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    if !max.is_finite() {
        return max;
    }
    let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
    max + sum.ln()
}

/// The processed distribution of one logits row, as `(token, probability)` pairs with positive
/// probabilities summing to 1, most likely first (ties by lower id). Greedy settings give the
/// argmax with probability 1.
pub fn distribution(logits: &[f32], p: &SamplingParams) -> Vec<(u32, f32)> {
    if p.is_greedy() {
        return argmax(logits).map(|t| vec![(t, 1.0)]).unwrap_or_default();
    }
    let inv_t = 1.0 / p.temperature as f64;
    let mut cand: Vec<(u32, f64)> = logits
        .iter()
        .enumerate()
        .filter(|(_, x)| x.is_finite())
        .map(|(i, &x)| (i as u32, x as f64 * inv_t))
        .collect();
    let order = |a: &(u32, f64), b: &(u32, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if p.top_k > 0 && p.top_k < cand.len() {
        cand.select_nth_unstable_by(p.top_k - 1, order);
        cand.truncate(p.top_k);
    }
    let max = cand.iter().map(|c| c.1).fold(f64::NEG_INFINITY, f64::max);
    let mut total = 0.0;
    for c in cand.iter_mut() {
        c.1 = (c.1 - max).exp();
        total += c.1;
    }
    let needs_order = p.top_p < 1.0;
    if needs_order {
        cand.sort_unstable_by(order);
        let mut acc = 0.0;
        let mut keep = cand.len();
        for (i, c) in cand.iter().enumerate() {
            acc += c.1 / total;
            if acc >= p.top_p as f64 {
                keep = i + 1;
                break;
            }
        }
        cand.truncate(keep);
        total = cand.iter().map(|c| c.1).sum();
    }
    let mut out: Vec<(u32, f32)> = cand
        .into_iter()
        .map(|(t, w)| (t, (w / total) as f32))
        .filter(|(_, q)| *q > 0.0)
        .collect();
    if !needs_order {
        out.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    }
    out
}

/// Draw one token from a distribution made by [`distribution`].
pub fn draw(dist: &[(u32, f32)], rng: &mut impl Rng) -> Option<u32> {
    let total: f64 = dist.iter().map(|d| d.1 as f64).sum();
    let mut u = rng.random::<f64>() * total;
    for &(t, q) in dist {
        u -= q as f64;
        if u < 0.0 {
            return Some(t);
        }
    }
    dist.last().map(|d| d.0)
}

/// A seeded sampler: the same seed and logits give the same tokens.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    /// A sampler with these settings and seed.
    pub fn new(params: SamplingParams, seed: u64) -> Self {
        Sampler {
            params,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// The settings.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The random source (verification draws from the same stream).
    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.rng
    }

    /// Pick the next token from a logits row (`None` only for an empty or all-NaN row).
    pub fn sample(&mut self, logits: &[f32]) -> Option<u32> {
        if self.params.is_greedy() {
            return argmax(logits);
        }
        let dist = distribution(logits, &self.params);
        draw(&dist, &mut self.rng)
    }
}
