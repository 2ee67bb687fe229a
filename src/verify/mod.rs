//! Verification: how the target's choice at a node is made, and the rejection sampler for chains
//! the drafter sampled. Every rule here is lossless unless its name says otherwise.
//!
//! - Greedy (temperature 0): the target's token at a node is its argmax; walking the tree with it
//!   emits exactly the target's greedy continuation.
//! - Sample and match (deterministic children: DDTree's top-K trees, greedy chains): draw y_v from
//!   the target's processed distribution p_v at each visited node; descend if y_v is a child. The
//!   emitted token is y_v itself, so every emitted token is an exact sample of the target's sampler.
//! - Rejection with the residual (a chain the drafter sampled from q; Leviathan et al.,
//!   arXiv:2211.17192; Chen et al., arXiv:2302.01318): accept x with probability min(1, p(x)/q(x));
//!   on rejection emit a sample of normalize(max(p - q, 0)).

use crate::sampling::{argmax, distribution, draw, SamplingParams};
use rand::Rng;

/// The acceptance rule the engine applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verification {
    /// Greedy, sample-and-match or rejection sampling, as fits the mode: exact.
    #[default]
    Lossless,
    /// LOSSY: accept the drafter's first child at every node without asking the target. It exists
    /// only so the test suite can show that its statistical tests catch a wrong rule; it is never
    /// selectable from the command line or the chat.
    UncheckedFirstChild,
}

impl Verification {
    /// A visible label for status lines.
    pub fn label(self) -> &'static str {
        match self {
            Verification::Lossless => "lossless",
            Verification::UncheckedFirstChild => "LOSSY (unchecked)",
        }
    }
}

/// The target's token at a node with logits `row`: the argmax when greedy, else a draw from the
/// processed distribution.
pub fn target_choice(row: &[f32], params: &SamplingParams, rng: &mut impl Rng) -> u32 {
    if params.is_greedy() {
        return argmax(row).unwrap_or(0);
    }
    let p = distribution(row, params);
    draw(&p, rng).unwrap_or(0)
}

/// Probability of `token` in a sparse distribution.
pub fn prob_of(dist: &[(u32, f32)], token: u32) -> f32 {
    dist.iter().find(|d| d.0 == token).map_or(0.0, |d| d.1)
}

/// One position of a sampled chain: the drafted token and the drafter's distribution it was
/// drawn from.
#[derive(Debug, Clone)]
pub struct SampledDraft {
    /// The drafted token.
    pub token: u32,
    /// The drafter's processed distribution at that position.
    pub q: Vec<(u32, f32)>,
}

/// Rejection sampling of a drafter-sampled chain. `p(i)` gives the target's processed distribution
/// at chain position i (i = 0 is the root's row, predicting draft 0). Returns how many drafts were
/// accepted and the token emitted after them.
pub fn verify_sampled_chain(
    drafts: &[SampledDraft],
    mut p: impl FnMut(usize) -> Vec<(u32, f32)>,
    rng: &mut impl Rng,
) -> (usize, u32) {
    for (i, d) in drafts.iter().enumerate() {
        let pi = p(i);
        let px = prob_of(&pi, d.token);
        let qx = prob_of(&d.q, d.token);
        let u: f32 = rng.random();
        if qx > 0.0 && u < (px / qx).min(1.0) {
            continue;
        }
        // Rejected: sample the residual max(p - q, 0), renormalised.
        let residual: Vec<(u32, f32)> = pi
            .iter()
            .map(|&(t, pt)| (t, (pt - prob_of(&d.q, t)).max(0.0)))
            .filter(|r| r.1 > 0.0)
            .collect();
        let y = if residual.is_empty() {
            // p <= q everywhere means p == q: the rejection had probability 0; fall back to p.
            draw(&pi, rng).unwrap_or(0)
        } else {
            draw(&residual, rng).unwrap_or(0)
        };
        return (i, y);
    }
    let last = p(drafts.len());
    (drafts.len(), draw(&last, rng).unwrap_or(0))
}
