//! Verification: how the target's choice at a node is made, and the rejection sampler for chains
//! the drafter sampled. Every rule here is lossless unless its name says otherwise.
//!
//! - Greedy (temperature 0): the target's token at a node is its argmax; walking the tree with it
//!   emits exactly the target's greedy continuation.
//! - Sample and match (deterministic children: DDTree's top-K trees, greedy chains, grown trees):
//!   draw y_v from the target's processed distribution p_v at each visited node; descend if y_v is
//!   a child. The emitted token is y_v itself, so every emitted token is an exact sample of the
//!   target's sampler.
//! - Rejection with the residual (a chain the drafter sampled from q; Leviathan et al.,
//!   arXiv:2211.17192; Chen et al., arXiv:2302.01318): accept x with probability min(1, p(x)/q(x));
//!   on rejection emit a sample of normalize(max(p - q, 0)).
//!
//! The `Lossy*` rules exist only so that the statistical tests can show they catch a wrong rule;
//! none is selectable from the command line or the chat.

use crate::sampling::{argmax, distribution, draw, SamplingParams};
use rand::Rng;
use std::collections::HashMap;

/// The acceptance rule the engine applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verification {
    /// Greedy, sample-and-match or rejection sampling, as fits the mode: exact.
    #[default]
    Lossless,
    /// LOSSY: accept the drafter's first child at every node without asking the target.
    LossyUncheckedFirstChild,
    /// LOSSY: descend into a child when it is the target's argmax (no sample drawn to match it);
    /// only the token after the accepted path is sampled.
    LossyArgmaxMatch,
    /// LOSSY: after rejecting a sampled draft, emit a sample of p instead of the residual
    /// max(p - q, 0).
    LossyResidualFromP,
    /// LOSSY: the target's top-p distribution is not renormalised before the acceptance ratio
    /// p(x) / q(x) and the residual.
    LossyUnnormalisedTopP,
    /// LOSSY only past the first position: as [`Verification::LossyResidualFromP`] where a draft
    /// after the first is rejected (a bug the first token's statistics cannot see).
    LossyResidualFromPPastFirst,
}

impl Verification {
    /// A visible label for status lines.
    pub fn label(self) -> &'static str {
        match self {
            Verification::Lossless => "lossless",
            Verification::LossyUncheckedFirstChild => "LOSSY (unchecked first child)",
            Verification::LossyArgmaxMatch => "LOSSY (argmax match)",
            Verification::LossyResidualFromP => "LOSSY (no residual)",
            Verification::LossyUnnormalisedTopP => "LOSSY (top-p not renormalised)",
            Verification::LossyResidualFromPPastFirst => "LOSSY (no residual past the first)",
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

/// The target's processed distribution of `row` as the rule `rule` sees it: the exact one, or
/// (for [`Verification::LossyUnnormalisedTopP`]) the top-p subset left with its unnormalised
/// probabilities.
pub fn target_distribution(
    row: &[f32],
    params: &SamplingParams,
    rule: Verification,
) -> Vec<(u32, f32)> {
    if rule != Verification::LossyUnnormalisedTopP || params.top_p >= 1.0 || params.is_greedy() {
        return distribution(row, params);
    }
    let full = distribution(
        row,
        &SamplingParams {
            top_p: 1.0,
            ..*params
        },
    );
    let keep = distribution(row, params).len();
    full.into_iter().take(keep).collect()
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
/// accepted and the token emitted after them. O(V) per position.
pub fn verify_sampled_chain(
    drafts: &[SampledDraft],
    mut p: impl FnMut(usize) -> Vec<(u32, f32)>,
    rule: Verification,
    rng: &mut impl Rng,
) -> (usize, u32) {
    for (i, d) in drafts.iter().enumerate() {
        let pi = p(i);
        let q: HashMap<u32, f32> = d.q.iter().copied().collect();
        let px = pi.iter().find(|e| e.0 == d.token).map_or(0.0, |e| e.1);
        let qx = q.get(&d.token).copied().unwrap_or(0.0);
        let u: f32 = rng.random();
        if qx > 0.0 && u < (px / qx).min(1.0) {
            continue;
        }
        let deep_bug = rule == Verification::LossyResidualFromPPastFirst && i > 0;
        if rule == Verification::LossyResidualFromP || deep_bug {
            return (i, draw(&pi, rng).unwrap_or(0));
        }
        // Rejected: sample the residual max(p - q, 0), renormalised.
        let residual: Vec<(u32, f32)> = pi
            .iter()
            .map(|&(t, pt)| (t, (pt - q.get(&t).copied().unwrap_or(0.0)).max(0.0)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn dist(v: &[f32]) -> Vec<(u32, f32)> {
        v.iter().enumerate().map(|(i, &p)| (i as u32, p)).collect()
    }

    /// Frequencies of the first emitted token of a one-draft chain whose draft is sampled from q.
    fn first_token_freqs(p: &[f32], q: &[f32], rule: Verification, n: usize) -> Vec<f64> {
        let mut rng = StdRng::seed_from_u64(7);
        let mut counts = vec![0usize; p.len()];
        for _ in 0..n {
            let qd = dist(q);
            let token = draw(&qd, &mut rng).unwrap();
            let drafts = [SampledDraft { token, q: qd }];
            let (k, y) = verify_sampled_chain(&drafts, |_| dist(p), rule, &mut rng);
            let first = if k == 1 { token } else { y };
            counts[first as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    #[test]
    fn rejection_sampling_gives_p() {
        let p = [0.5, 0.3, 0.2, 0.0];
        let q = [0.1, 0.1, 0.4, 0.4];
        let f = first_token_freqs(&p, &q, Verification::Lossless, 200_000);
        for (a, b) in f.iter().zip(p) {
            assert!((a - b as f64).abs() < 0.005, "{f:?} vs {p:?}");
        }
    }

    #[test]
    fn sampling_p_after_a_rejection_does_not_give_p() {
        let p = [0.5, 0.3, 0.2, 0.0];
        let q = [0.1, 0.1, 0.4, 0.4];
        let f = first_token_freqs(&p, &q, Verification::LossyResidualFromP, 200_000);
        let tv: f64 = f
            .iter()
            .zip(p)
            .map(|(a, b)| (a - b as f64).abs())
            .sum::<f64>()
            / 2.0;
        assert!(tv > 0.05, "the lossy rule looked exact: {f:?}");
    }

    /// Frequencies of the first two emitted tokens of two-draft chains (drafts sampled from
    /// `q[0]`, `q[1]`; the target's distribution at position i is `p[i]` whatever came before,
    /// so the exact joint is `p[0] x p[1]`). A chain rejected at its first draft is followed, as
    /// the next step would follow it, by a draw from `p[1]`.
    fn first_two_freqs(p: [&[f32]; 2], q: [&[f32]; 2], rule: Verification, n: usize) -> Vec<f64> {
        let mut rng = StdRng::seed_from_u64(11);
        let v = p[0].len();
        let mut counts = vec![0usize; v * v];
        for _ in 0..n {
            let drafts: Vec<SampledDraft> = q
                .iter()
                .map(|qi| {
                    let qd = dist(qi);
                    let token = draw(&qd, &mut rng).unwrap();
                    SampledDraft { token, q: qd }
                })
                .collect();
            let (k, y) = verify_sampled_chain(&drafts, |i| dist(p[i.min(1)]), rule, &mut rng);
            let (a, b) = match k {
                0 => (y, draw(&dist(p[1]), &mut rng).unwrap()),
                1 => (drafts[0].token, y),
                _ => (drafts[0].token, drafts[1].token),
            };
            counts[a as usize * v + b as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    /// The rejection sampler is exact at the second position too, and a rule that is wrong only
    /// there is caught: its first token is still exact, its pairs are not.
    #[test]
    fn a_rule_wrong_only_past_the_first_draft_fails_on_pairs() {
        let p: [&[f32]; 2] = [&[0.4, 0.4, 0.2], &[0.5, 0.3, 0.2]];
        let q: [&[f32]; 2] = [&[0.3, 0.5, 0.2], &[0.1, 0.1, 0.8]];
        let joint: Vec<f64> = (0..9)
            .map(|c| p[0][c / 3] as f64 * p[1][c % 3] as f64)
            .collect();
        let tv = |f: &[f64]| {
            f.iter()
                .zip(&joint)
                .map(|(a, b)| (a - b).abs())
                .sum::<f64>()
                / 2.0
        };
        let exact = first_two_freqs(p, q, Verification::Lossless, 200_000);
        assert!(tv(&exact) < 0.01, "exact rule off: TV {}", tv(&exact));
        let rule = Verification::LossyResidualFromPPastFirst;
        let deep = first_two_freqs(p, q, rule, 200_000);
        assert!(
            tv(&deep) > 0.05,
            "the deep bug looked exact: TV {}",
            tv(&deep)
        );
        // Its first token alone is exact: a test of first tokens could not have seen it.
        let first: Vec<f64> = (0..3)
            .map(|a| deep[a * 3..a * 3 + 3].iter().sum())
            .collect();
        for (f, e) in first.iter().zip(p[0]) {
            assert!((f - *e as f64).abs() < 0.01, "{first:?}");
        }
    }

    #[test]
    fn a_chain_the_target_agrees_with_is_accepted_whole() {
        let mut rng = StdRng::seed_from_u64(1);
        let q = vec![(3u32, 1.0f32)];
        let drafts = vec![
            SampledDraft {
                token: 3,
                q: q.clone()
            };
            4
        ];
        let (k, y) = verify_sampled_chain(&drafts, |_| q.clone(), Verification::Lossless, &mut rng);
        assert_eq!((k, y), (4, 3));
    }

    #[test]
    fn a_draft_the_target_never_makes_is_rejected() {
        let mut rng = StdRng::seed_from_u64(1);
        let drafts = [SampledDraft {
            token: 2,
            q: vec![(2, 1.0)],
        }];
        for _ in 0..100 {
            let (k, y) = verify_sampled_chain(
                &drafts,
                |_| vec![(0, 0.6), (1, 0.4)],
                Verification::Lossless,
                &mut rng,
            );
            assert_eq!(k, 0);
            assert!(y == 0 || y == 1);
        }
    }

    #[test]
    fn the_unnormalised_rule_keeps_the_raw_masses() {
        let row = [2.0f32, 1.0, 0.0, -1.0];
        let params = SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.7,
        };
        let exact = target_distribution(&row, &params, Verification::Lossless);
        let raw = target_distribution(&row, &params, Verification::LossyUnnormalisedTopP);
        assert_eq!(exact.len(), raw.len());
        let s: f32 = exact.iter().map(|e| e.1).sum();
        let r: f32 = raw.iter().map(|e| e.1).sum();
        assert!((s - 1.0).abs() < 1e-6 && r < 0.95, "{s} {r}");
    }

    #[test]
    fn greedy_choice_is_the_argmax() {
        let mut rng = StdRng::seed_from_u64(0);
        let row = [0.1, 3.0, 2.9, -1.0];
        assert_eq!(target_choice(&row, &SamplingParams::greedy(), &mut rng), 1);
    }
}
