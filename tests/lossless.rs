//! Losslessness under sampling, checked where it can fail: the joint distribution of the first
//! three tokens an engine emits, over many seeded draws, against the target's exact joint
//! distribution, for every drafter kind and mode, at temperature 0.7 and 1, with and without
//! top-k / top-p; and the same test failing for each of five subtly lossy rules, one of them
//! wrong only past the first position (a test of first tokens alone could not see it).
//!
//! The models are tiny (a vocabulary of 6 tokens, random weights), the drafters deliberately
//! unlike the target, and the engine is asked for four tokens (the first three are tabulated), so
//! the first step verifies a tree three levels deep with several children per node; each case
//! asserts that an accepted path reached depth 2 in a stated share of the draws. The exact distribution is enumerated from the target's logits with an f64 sampler written
//! here (temperature, top-k, top-p), not the engine's. The test is Pearson's chi-square over cells
//! pooled to expected counts of at least 5, at significance 1e-4; each case prints the total
//! variation (over the pooled cells) it detects with probability 0.9.

mod common;

use candle_core::Device;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use treespec::draft::{CausalDrafter, DFlashDrafter, Drafter, MtpDrafter};
use treespec::engine::{Engine, Mode, Settings};
use treespec::model::config::{Family, ModelConfig};
use treespec::model::decoder::{Batch, Decoder};
use treespec::model::weights::WeightStore;
use treespec::sampling::SamplingParams;
use treespec::verify::Verification;

const VOCAB: usize = 6;
/// Tokens tabulated per draw.
const TOKENS: usize = 3;
/// Draws per case.
const DRAWS: usize = 3000;
/// Significance of each test.
const ALPHA: f64 = 1e-4;
const CONTEXT: usize = 64;
const PROMPT: [u32; 5] = [1, 4, 2, 5, 3];

/// One thread for candle's ops: on models this small, waking a pool costs ten times the work.
/// Every test calls this before it makes a tensor (the pools read it once, on first use).
fn one_thread() {
    std::env::set_var("CANDLE_NUM_THREADS", "1");
    std::env::set_var("RAYON_NUM_THREADS", "1");
}

fn target_cfg() -> ModelConfig {
    common::tiny_config(Family::Llama, VOCAB)
}

/// The hybrid target: Qwen3.5's layers (Gated DeltaNet and gated attention), whose recurrent
/// state must follow each accepted path.
fn hybrid_cfg() -> ModelConfig {
    common::tiny_hybrid_config(VOCAB)
}

/// The target `kind` drafts for.
fn target(kind: Kind) -> Decoder {
    match kind {
        Kind::HybridMtp => {
            let cfg = hybrid_cfg();
            let w = common::random_weights(&cfg, HYBRID_SEED);
            let mut store = WeightStore::from_tensors(w, &Device::Cpu);
            Decoder::load(&mut store, cfg, CONTEXT).unwrap()
        }
        _ => decoder(0.0),
    }
}

/// The target's weights plus `noise` times those of another random model: 0 is the target, a
/// large noise a model unlike it.
fn decoder(noise: f32) -> Decoder {
    let cfg = target_cfg();
    let t = common::random_weights(&cfg, TARGET_SEED);
    let w = if noise > 0.0 {
        let n = common::random_weights(&cfg, TARGET_SEED + 1000);
        t.iter()
            .map(|(k, v)| (k.clone(), (v + (&n[k] * noise as f64).unwrap()).unwrap()))
            .collect()
    } else {
        t
    };
    let mut store = WeightStore::from_tensors(w, &Device::Cpu);
    Decoder::load(&mut store, cfg, CONTEXT).unwrap()
}

/// The causal drafter's distance from the target: accepted often enough that paths reach depth
/// 2 and 3, rejected often enough that every branch of the rules runs.
const DRAFTER_NOISE: f32 = 0.3;

const TARGET_SEED: u64 = 5;

/// The hybrid target's and its head's seeds: chosen (of a dozen pairs tried) so that the head
/// agrees with the target often enough for paths to reach depth 2 under every sampler.
const HYBRID_SEED: u64 = 6;
const HYBRID_HEAD_SEED: u64 = 3;

// ---------------------------------------------------------------------------------------------
// The reference: the target's exact joint distribution, with a sampler written here.

/// The processed distribution of one row: temperature, top-k (ties to the lower id), top-p
/// (the smallest most-likely set reaching p), renormalised; in f64.
fn reference_sampler(logits: &[f32], p: &SamplingParams) -> Vec<f64> {
    let n = logits.len();
    let t = p.temperature as f64;
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    let keep_k = if p.top_k > 0 { p.top_k.min(n) } else { n };
    let kept = &order[..keep_k];
    let max = logits[kept[0]] as f64;
    let w: Vec<f64> = kept
        .iter()
        .map(|&i| ((logits[i] as f64 - max) / t).exp())
        .collect();
    let total: f64 = w.iter().sum();
    let mut keep = kept.len();
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        for (j, wj) in w.iter().enumerate() {
            acc += wj / total;
            if acc >= p.top_p as f64 {
                keep = j + 1;
                break;
            }
        }
    }
    let total: f64 = w[..keep].iter().sum();
    let mut out = vec![0.0; n];
    for (j, &i) in kept[..keep].iter().enumerate() {
        out[i] = w[j] / total;
    }
    out
}

/// The exact joint distribution of the first `TOKENS` tokens after `PROMPT`, from the target
/// `kind` drafts for.
fn joint(kind: Kind, params: &SamplingParams) -> HashMap<Vec<u32>, f64> {
    let mut target = target(kind);
    let mut out = HashMap::new();
    let mut stack = vec![(vec![], 1.0f64)];
    while let Some((prefix, prob)) = stack.pop() {
        if prefix.len() == TOKENS {
            out.insert(prefix, prob);
            continue;
        }
        let seq: Vec<u32> = PROMPT.iter().chain(&prefix).copied().collect();
        target.reset();
        let row = target
            .forward(&Batch::causal(&seq, 0))
            .unwrap()
            .logits_rows()
            .unwrap()
            .pop()
            .unwrap();
        for (tok, &q) in reference_sampler(&row, params).iter().enumerate() {
            if q > 0.0 {
                let mut next = prefix.clone();
                next.push(tok as u32);
                stack.push((next, prob * q));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Statistics: chi-square with pooled cells, its p-value and its power.

fn ln_gamma(x: f64) -> f64 {
    // Lanczos, g = 7.
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularised upper incomplete gamma function Q(a, x).
fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    if x < a + 1.0 {
        let (mut sum, mut term, mut n) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            n += 1.0;
            term *= x / n;
            sum += term;
            if term < sum * 1e-15 {
                break;
            }
        }
        1.0 - sum * (-x + a * x.ln() - ln_gamma(a)).exp()
    } else {
        // Lentz's continued fraction.
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < 1e-15 {
                break;
            }
        }
        (-x + a * x.ln() - ln_gamma(a)).exp() * h
    }
}

/// P(chi-square with `df` degrees of freedom > x).
fn chi2_sf(x: f64, df: usize) -> f64 {
    gamma_q(df as f64 / 2.0, x / 2.0)
}

/// The value a chi-square statistic with `df` degrees of freedom exceeds with probability `alpha`.
fn chi2_critical(df: usize, alpha: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 10.0 * df as f64 + 100.0);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if chi2_sf(mid, df) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// Power of the test against an alternative of non-centrality `lambda`.
fn power(df: usize, lambda: f64, crit: f64) -> f64 {
    // The non-central chi-square is a Poisson(lambda / 2) mixture of central ones.
    let h = lambda / 2.0;
    let mut total = 0.0;
    let mut weight = (-h).exp();
    for j in 0..2_000 {
        if j > 0 {
            weight *= h / j as f64;
        }
        total += weight * chi2_sf(crit, df + 2 * j);
        if j as f64 > h + 50.0 && weight < 1e-18 {
            break;
        }
    }
    total
}

/// The total variation (over the pooled cells) detected with probability 0.9 by `n` draws: any
/// alternative at that distance has non-centrality `n * sum (p' - p)^2 / p >= 4 n tv^2`
/// (Cauchy-Schwarz), so it is at least as detectable as `lambda = 4 n tv^2`.
fn detectable_tv(n: usize, df: usize) -> f64 {
    let crit = chi2_critical(df, ALPHA);
    let (mut lo, mut hi) = (0.0, 10.0 * df as f64 + 1000.0);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if power(df, mid, crit) < 0.9 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (hi / (4.0 * n as f64)).sqrt()
}

/// Pearson's statistic over cells pooled (rarest first) until each expects at least 5 draws;
/// returns (statistic, degrees of freedom).
fn chi_square(counts: &HashMap<Vec<u32>, usize>, probs: &HashMap<Vec<u32>, f64>) -> (f64, usize) {
    let n: usize = counts.values().sum();
    let unexpected: usize = counts
        .iter()
        .filter(|(k, _)| !probs.contains_key(*k))
        .map(|(_, c)| c)
        .sum();
    assert_eq!(
        unexpected, 0,
        "draws of sequences the target cannot produce"
    );
    let mut cells: Vec<(f64, f64)> = probs
        .iter()
        .map(|(k, &p)| (p * n as f64, *counts.get(k).unwrap_or(&0) as f64))
        .collect();
    cells.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut pooled: Vec<(f64, f64)> = vec![];
    let mut acc = (0.0, 0.0);
    for (e, o) in cells {
        acc = (acc.0 + e, acc.1 + o);
        if acc.0 >= 5.0 {
            pooled.push(acc);
            acc = (0.0, 0.0);
        }
    }
    if acc.0 > 0.0 {
        match pooled.last_mut() {
            Some(last) => *last = (last.0 + acc.0, last.1 + acc.1),
            None => pooled.push(acc),
        }
    }
    let stat = pooled.iter().map(|(e, o)| (o - e) * (o - e) / e).sum();
    (stat, pooled.len().saturating_sub(1).max(1))
}

// ---------------------------------------------------------------------------------------------
// The engines under test.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// A small causal LM: sampled chains in `linear`, the DDTree over its chain or a grown tree in
    /// `tree`.
    Causal,
    /// A DFlash drafter reading the target's hidden states.
    DFlash,
    /// An MTP head on the target's last hidden state (`mtp`: a chain verified by rejection
    /// sampling; `tree`: the DDTree over its chain).
    Mtp,
    /// The same head drafting among three tokens in four only (a draft vocabulary): its
    /// logits' columns are those tokens, mapped back to the target's ids.
    MtpAmong,
    /// A Qwen3.5-style MTP head (post-norm hidden, embedding first) on the hybrid target.
    HybridMtp,
}

fn drafter(kind: Kind, dir: &Path) -> Box<dyn Drafter> {
    match kind {
        Kind::Causal => Box::new(CausalDrafter::new(decoder(DRAFTER_NOISE), "unlike")),
        Kind::DFlash => {
            let d = common::write_tiny_dflash(dir, &target_cfg(), 4, 9);
            Box::new(DFlashDrafter::load_dir(&d, &Device::Cpu, CONTEXT, false).unwrap())
        }
        Kind::Mtp => {
            let cfg = target_cfg();
            let head = common::random_mtp_head(&cfg, 1, CONTEXT);
            Box::new(MtpDrafter::new(head, &cfg, "mtp"))
        }
        Kind::MtpAmong => {
            let cfg = target_cfg();
            let among: Vec<u32> = (0..cfg.vocab_size as u32).filter(|t| t % 4 != 3).collect();
            let head = common::random_mtp_head_among(&cfg, 1, CONTEXT, Some(&among));
            Box::new(MtpDrafter::new(head, &cfg, "mtp among 3/4 of the tokens"))
        }
        Kind::HybridMtp => {
            let cfg = hybrid_cfg();
            let head = common::random_hybrid_mtp_head(&cfg, HYBRID_HEAD_SEED, CONTEXT);
            Box::new(MtpDrafter::new(head, &cfg, "hybrid mtp"))
        }
    }
}

/// What the draws found: counts of the first `TOKENS` tokens, and the share of draws in which
/// some step's accepted path reached depth 2.
struct Draws {
    counts: HashMap<Vec<u32>, usize>,
    deep_share: f64,
}

fn draw(kind: Kind, settings: Settings, seed: u64) -> Draws {
    let dir = tempfile::tempdir().unwrap();
    let mut e = Engine::new(
        target(kind),
        Some(drafter(kind, dir.path())),
        BTreeSet::new(),
        settings,
        0,
    )
    .unwrap();
    let mut counts = HashMap::new();
    let mut deep = 0usize;
    for i in 0..DRAWS {
        e.reset();
        e.reseed(seed.wrapping_mul(1_000_003).wrapping_add(i as u64));
        let mut reached = false;
        let out = e
            .generate(&PROMPT, TOKENS + 1, |ev| {
                reached |= ev.accepted_drafts() >= 2;
                true
            })
            .unwrap();
        deep += usize::from(reached);
        *counts.entry(out.tokens[..TOKENS].to_vec()).or_insert(0) += 1;
    }
    Draws {
        counts,
        deep_share: deep as f64 / DRAWS as f64,
    }
}

fn sampler(t: f32, top_k: usize, top_p: f32) -> SamplingParams {
    SamplingParams {
        temperature: t,
        top_k,
        top_p,
    }
}

/// The three samplers every case runs with.
fn samplers() -> [SamplingParams; 3] {
    [
        sampler(1.0, 0, 1.0),
        sampler(0.7, 4, 1.0),
        sampler(0.7, 0, 0.8),
    ]
}

fn shaped(mode: Mode, expand: usize, params: SamplingParams, rule: Verification) -> Settings {
    Settings {
        mode,
        budget: 8,
        depth: TOKENS,
        gamma: TOKENS,
        mtp_k: TOKENS,
        expand,
        min_chain_prob: 0.0,
        sampling: params,
        verification: rule,
    }
}

/// Run one case: (statistic, critical value, df, detectable TV, deep share).
fn case(kind: Kind, s: Settings, seed: u64) -> (f64, f64, usize, f64, f64) {
    one_thread();
    let probs = joint(kind, &s.sampling);
    let d = draw(kind, s, seed);
    let (stat, df) = chi_square(&d.counts, &probs);
    let crit = chi2_critical(df, ALPHA);
    let tv = detectable_tv(DRAWS, df);
    (stat, crit, df, tv, d.deep_share)
}

fn describe(kind: Kind, s: &Settings) -> String {
    format!(
        "{kind:?} {} {} T{} k{} p{} {}",
        s.mode,
        s.shape(),
        s.sampling.temperature,
        s.sampling.top_k,
        s.sampling.top_p,
        s.verification.label()
    )
}

fn check_lossless(kind: Kind, mode: Mode, expand: usize, min_deep: f64) {
    for (i, params) in samplers().into_iter().enumerate() {
        let s = shaped(mode, expand, params, Verification::Lossless);
        let (stat, crit, df, tv, deep) = case(kind, s, 17 + i as u64);
        let name = describe(kind, &s);
        eprintln!(
            "{name}: chi-square {stat:.1} (critical {crit:.1}, {df} df); detects TV >= {tv:.3}; \
             a path accepted to depth 2 in {:.0}% of draws",
            deep * 100.0
        );
        assert!(stat < crit, "{name}: chi-square {stat:.1} >= {crit:.1}");
        assert!(
            deep >= min_deep,
            "{name}: a path accepted to depth 2 in only {:.1}% of draws",
            deep * 100.0
        );
    }
}

#[test]
fn the_test_accepts_plain_sampling() {
    for (i, params) in samplers().into_iter().enumerate() {
        let s = shaped(Mode::Ar, 0, params, Verification::Lossless);
        let (stat, crit, df, tv, _) = case(Kind::Causal, s, 3 + i as u64);
        eprintln!(
            "ar T{}: chi-square {stat:.1} (critical {crit:.1}, {df} df); detects TV >= {tv:.3}",
            params.temperature
        );
        assert!(stat < crit, "ar: {stat} >= {crit}");
    }
}

#[test]
fn causal_chains_verified_by_rejection_sampling_are_lossless() {
    check_lossless(Kind::Causal, Mode::Linear, 0, 0.05);
}

#[test]
fn ddtrees_over_a_causal_chain_are_lossless() {
    check_lossless(Kind::Causal, Mode::Tree, 0, 0.08);
}

#[test]
fn grown_trees_are_lossless() {
    check_lossless(Kind::Causal, Mode::Tree, 2, 0.08);
}

/// Sample-and-match draws one target sample per visited node, in order, from the same stream
/// `ar` draws one per token from: with the same seed, a tree of fixed children emits exactly the
/// tokens `ar` does, whatever the tree (a coupling, checked here draw by draw).
#[test]
fn trees_emit_the_draws_ar_makes_with_the_same_seed() {
    one_thread();
    let dir = tempfile::tempdir().unwrap();
    let params = sampler(1.0, 0, 1.0);
    let mut ar = Engine::new(
        decoder(0.0),
        None,
        BTreeSet::new(),
        shaped(Mode::Ar, 0, params, Verification::Lossless),
        0,
    )
    .unwrap();
    for (kind, expand) in [
        (Kind::Causal, 0),
        (Kind::Causal, 2),
        (Kind::DFlash, 0),
        (Kind::Mtp, 0),
        (Kind::Mtp, 2),
        (Kind::MtpAmong, 0),
        (Kind::MtpAmong, 2),
    ] {
        let s = shaped(Mode::Tree, expand, params, Verification::Lossless);
        let mut e = Engine::new(
            decoder(0.0),
            Some(drafter(kind, dir.path())),
            BTreeSet::new(),
            s,
            0,
        )
        .unwrap();
        for seed in 0..200u64 {
            let mut out = vec![];
            for engine in [&mut ar, &mut e] {
                engine.reset();
                engine.reseed(seed);
                out.push(engine.generate(&PROMPT, 12, |_| true).unwrap().tokens);
            }
            assert_eq!(out[0], out[1], "{} seed {seed}", describe(kind, &s));
        }
    }
}

/// `auto` switches between ar and the drafting modes by measured speed; on models this small ar
/// is usually fastest, so no depth is required here (`tests/engine.rs` switches it mid-answer).
#[test]
fn auto_is_lossless() {
    check_lossless(Kind::Causal, Mode::Auto, 0, 0.0);
}

#[test]
fn dflash_trees_are_lossless() {
    check_lossless(Kind::DFlash, Mode::Tree, 0, 0.05);
}

#[test]
fn mtp_chains_are_lossless() {
    check_lossless(Kind::Mtp, Mode::Mtp, 0, 0.01);
}

#[test]
fn mtp_chains_among_a_draft_vocabulary_are_lossless() {
    check_lossless(Kind::MtpAmong, Mode::Mtp, 0, 0.005);
}

#[test]
fn trees_an_mtp_head_grows_are_lossless() {
    check_lossless(Kind::Mtp, Mode::Tree, 2, 0.03);
}

#[test]
fn ddtrees_over_an_mtp_chain_are_lossless() {
    check_lossless(Kind::Mtp, Mode::Tree, 0, 0.03);
}

#[test]
fn mtp_chains_on_a_hybrid_target_are_lossless() {
    check_lossless(Kind::HybridMtp, Mode::Mtp, 0, 0.1);
}

#[test]
fn trees_over_a_hybrid_targets_head_are_lossless() {
    check_lossless(Kind::HybridMtp, Mode::Tree, 0, 0.1);
    check_lossless(Kind::HybridMtp, Mode::Tree, 2, 0.1);
}

/// Greedy `mtp` and `tree` over the hybrid's head emit exactly `ar`'s tokens, prompt by prompt,
/// with drafts accepted along the way (the recurrent state follows accepted paths).
#[test]
fn greedy_drafts_on_a_hybrid_target_emit_exactly_ar() {
    one_thread();
    let dir = tempfile::tempdir().unwrap();
    let greedy = sampler(0.0, 0, 1.0);
    let mut ar = Engine::new(
        target(Kind::HybridMtp),
        None,
        BTreeSet::new(),
        shaped(Mode::Ar, 0, greedy, Verification::Lossless),
        0,
    )
    .unwrap();
    for (mode, expand) in [(Mode::Mtp, 0), (Mode::Tree, 0), (Mode::Tree, 2)] {
        let s = shaped(mode, expand, greedy, Verification::Lossless);
        let mut e = Engine::new(
            target(Kind::HybridMtp),
            Some(drafter(Kind::HybridMtp, dir.path())),
            BTreeSet::new(),
            s,
            0,
        )
        .unwrap();
        let mut accepted = 0;
        for p in 0..40u32 {
            let prompt = [p % 6, (p / 6) % 6, 2, (p * 7) % 6];
            let mut out = vec![];
            for engine in [&mut ar, &mut e] {
                engine.reset();
                out.push(engine.generate(&prompt, 16, |_| true).unwrap());
            }
            assert_eq!(
                out[0].tokens, out[1].tokens,
                "{mode:?} expand {expand}, prompt {p}"
            );
            accepted += out[1].stats.accepted;
        }
        eprintln!("greedy {mode:?} expand {expand}: {accepted} drafts accepted over 40 prompts");
        assert!(
            accepted > 100,
            "{mode:?} expand {expand}: {accepted} drafts accepted"
        );
    }
}

#[test]
fn dflash_chains_are_lossless() {
    check_lossless(Kind::DFlash, Mode::Linear, 0, 0.01);
}

#[test]
fn each_lossy_rule_fails_the_same_test() {
    let t1 = sampler(1.0, 0, 1.0);
    let controls = [
        (Mode::Tree, t1, Verification::LossyUncheckedFirstChild),
        (Mode::Tree, t1, Verification::LossyArgmaxMatch),
        (Mode::Linear, t1, Verification::LossyResidualFromP),
        (
            Mode::Linear,
            sampler(1.0, 0, 0.6),
            Verification::LossyUnnormalisedTopP,
        ),
        // Wrong only past the first position: the joint of the answer's tokens must see it.
        (Mode::Linear, t1, Verification::LossyResidualFromPPastFirst),
    ];
    for (i, (mode, params, rule)) in controls.into_iter().enumerate() {
        let s = shaped(mode, 0, params, rule);
        let (stat, crit, df, tv, _) = case(Kind::Causal, s, 91 + i as u64);
        let name = describe(Kind::Causal, &s);
        eprintln!(
            "{name}: chi-square {stat:.1} (critical {crit:.1}, {df} df); detects TV >= {tv:.3}"
        );
        assert!(
            stat > crit,
            "{name} passed: chi-square {stat:.1} <= {crit:.1}"
        );
    }
}

#[test]
fn the_statistics_are_right() {
    // Known values: the chi-square 0.999 quantile with 10 df is 29.588; Q(1, 1) = e^-1.
    assert!((chi2_critical(10, 1e-3) - 29.588).abs() < 0.01);
    assert!((gamma_q(1.0, 1.0) - (-1.0f64).exp()).abs() < 1e-12);
    assert!((gamma_q(3.0, 10.0) - 0.002_769_396_1).abs() < 1e-8);
    // A perfect fit gives 0; the pooling keeps every cell at 5 expected or more.
    let probs: HashMap<Vec<u32>, f64> = (0..10).map(|i| (vec![i], 0.1)).collect();
    let counts: HashMap<Vec<u32>, usize> = (0..10).map(|i| (vec![i], 100)).collect();
    assert_eq!(chi_square(&counts, &probs), (0.0, 9));
    // The reference sampler: top-k and top-p keep the right sets.
    let row = [1.0f32, 3.0, 2.0, 0.0];
    let p = reference_sampler(&row, &sampler(1.0, 2, 1.0));
    assert!(p[0] == 0.0 && p[3] == 0.0 && (p[1] + p[2] - 1.0).abs() < 1e-12);
    let p = reference_sampler(&row, &sampler(1.0, 0, 0.5));
    assert_eq!(p, vec![0.0, 1.0, 0.0, 0.0]);
}
