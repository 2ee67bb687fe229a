//! The engine on tiny random f32 models: greedy `linear` and `tree` emit exactly the `ar` tokens
//! (many seeds, budget 1, depth 1, stop tokens and token limits inside accepted paths, mode
//! switches mid-answer); caches after a tree step equal caches of the emitted tokens alone.
//! Sampling is checked statistically in `tests/lossless.rs`.

mod common;

use candle_core::{Device, Tensor};
use std::collections::{BTreeSet, HashMap};
use treespec::draft::CausalDrafter;
use treespec::engine::{DraftAhead, Engine, Mode, Settings, StopReason};
use treespec::model::config::Family;
use treespec::model::decoder::{Batch, Decoder};
use treespec::model::weights::WeightStore;

const CONTEXT: usize = 256;

/// A target and a drafter that agrees with it often but not always: the target's weights plus
/// a random perturbation.
fn pair(family: Family, vocab: usize, seed: u64, noise: f32) -> (Decoder, Decoder) {
    let cfg = common::tiny_config(family, vocab);
    let t = common::random_weights(&cfg, seed);
    let n = common::random_weights(&cfg, seed + 1000);
    let d: HashMap<String, Tensor> = t
        .iter()
        .map(|(k, v)| (k.clone(), (v + (&n[k] * noise as f64).unwrap()).unwrap()))
        .collect();
    let mut ts = WeightStore::from_tensors(t, &Device::Cpu);
    let mut ds = WeightStore::from_tensors(d, &Device::Cpu);
    (
        Decoder::load(&mut ts, cfg.clone(), CONTEXT).unwrap(),
        Decoder::load(&mut ds, cfg, CONTEXT).unwrap(),
    )
}

fn engine(family: Family, vocab: usize, seed: u64, stops: &[u32], s: Settings) -> Engine {
    let (t, d) = pair(family, vocab, seed, 0.35);
    let stops: BTreeSet<u32> = stops.iter().copied().collect();
    Engine::new(
        t,
        Some(Box::new(CausalDrafter::new(d, "drafter"))),
        stops,
        s,
        seed,
    )
    .unwrap()
}

fn settings(mode: Mode, budget: usize, depth: usize, gamma: usize) -> Settings {
    Settings {
        mode,
        budget,
        depth,
        gamma,
        ..Settings::default()
    }
}

/// `tree` with a tree the drafter grows, expanding `width` nodes per depth.
fn grown(budget: usize, depth: usize, width: usize) -> Settings {
    Settings {
        expand: width,
        min_chain_prob: 0.0,
        ..settings(Mode::Tree, budget, depth, 1)
    }
}

fn prompt(seed: u64, vocab: usize) -> Vec<u32> {
    let mut r = common::Lcg(seed * 7 + 3);
    (0..6 + seed as usize % 5)
        .map(|_| r.below(vocab) as u32)
        .collect()
}

fn run(e: &mut Engine, prompt: &[u32], max: usize) -> (Vec<u32>, StopReason, usize) {
    e.reset();
    let o = e.generate(prompt, max, |_| true).unwrap();
    (o.tokens, o.stop, o.stats.steps)
}

#[test]
fn greedy_speculation_equals_ar_over_many_seeds() {
    let configs = [
        settings(Mode::Linear, 1, 1, 1),
        settings(Mode::Linear, 1, 1, 4),
        settings(Mode::Linear, 1, 1, 7),
        settings(Mode::Tree, 1, 4, 1),
        settings(Mode::Tree, 4, 1, 1),
        settings(Mode::Tree, 8, 4, 1),
        settings(Mode::Tree, 32, 6, 1),
        settings(Mode::Tree, 64, 3, 1),
        grown(1, 4, 1),
        grown(4, 1, 3),
        grown(8, 4, 2),
        grown(32, 6, 4),
        settings(Mode::Auto, 8, 4, 4),
    ];
    let mut drafted_accepts = 0;
    let mut steps_total = 0;
    for family in [Family::Llama, Family::Qwen2, Family::Qwen3] {
        for seed in 0..6u64 {
            let p = prompt(seed, 61);
            let mut e = engine(family, 61, seed, &[], settings(Mode::Ar, 1, 1, 1));
            let (ar, _, ar_steps) = run(&mut e, &p, 40);
            assert_eq!(ar.len(), 40);
            assert_eq!(ar_steps, 40);
            for s in configs {
                e.set_settings(s).unwrap();
                let (out, stop, steps) = run(&mut e, &p, 40);
                assert_eq!(out, ar, "{family:?} seed {seed} {s:?}");
                assert_eq!(stop, StopReason::MaxTokens);
                drafted_accepts += 40 - steps;
                steps_total += steps;
            }
        }
    }
    eprintln!("{drafted_accepts} drafted tokens accepted over {steps_total} steps");
    // The drafter is good enough that speculation pays, and bad enough that it is rejected too.
    assert!(
        drafted_accepts > steps_total / 4,
        "{drafted_accepts} accepted over {steps_total} steps"
    );
    assert!(steps_total > 3 * 6 * configs.len() * 40 / 8);
}

#[test]
fn stop_token_and_token_limit_inside_accepted_paths() {
    for seed in 0..5u64 {
        let p = prompt(seed, 61);
        let mut e = engine(Family::Qwen2, 61, seed, &[], settings(Mode::Ar, 1, 1, 1));
        let (ar, _, _) = run(&mut e, &p, 30);
        // Make a token from the middle of the answer a stop token.
        let stop = ar[11];
        let cut = ar.iter().position(|&t| t == stop).unwrap();
        let mut e = engine(
            Family::Qwen2,
            61,
            seed,
            &[stop],
            settings(Mode::Ar, 1, 1, 1),
        );
        let (ar_stopped, why, _) = run(&mut e, &p, 30);
        assert_eq!(ar_stopped, &ar[..cut]);
        assert_eq!(why, StopReason::StopToken);
        for s in [
            settings(Mode::Tree, 16, 5, 1),
            grown(16, 5, 3),
            settings(Mode::Linear, 1, 1, 6),
        ] {
            e.set_settings(s).unwrap();
            let (out, why, _) = run(&mut e, &p, 30);
            assert_eq!(out, ar_stopped, "seed {seed} {s:?}");
            assert_eq!(why, StopReason::StopToken);
            // The drafter never keeps what was cut after the stop token.
            if let Some(d) = e.drafter().and_then(|d| d.decoder()) {
                assert!(d.len() < e.sequence().len(), "seed {seed} {s:?}");
            }
        }
        // Every token limit, so that some fall inside an accepted path.
        for max in 1..9 {
            for s in [settings(Mode::Tree, 16, 6, 1), grown(16, 6, 2)] {
                let mut e = engine(Family::Qwen2, 61, seed, &[], s);
                let (out, why, _) = run(&mut e, &p, max);
                assert_eq!(out, &ar[..max], "seed {seed} max {max} {s:?}");
                assert_eq!(why, StopReason::MaxTokens);
            }
        }
    }
}

#[test]
fn mode_switch_mid_answer() {
    let schedule = [
        settings(Mode::Tree, 8, 4, 1),
        settings(Mode::Linear, 1, 1, 3),
        settings(Mode::Ar, 1, 1, 1),
        settings(Mode::Tree, 32, 6, 1),
        settings(Mode::Tree, 1, 1, 1),
        grown(12, 5, 3),
        settings(Mode::Linear, 1, 1, 8),
        grown(6, 3, 1),
        settings(Mode::Auto, 8, 5, 3),
    ];
    for seed in 0..4u64 {
        let p = prompt(seed, 61);
        let mut e = engine(Family::Llama, 61, seed, &[], settings(Mode::Ar, 1, 1, 1));
        let (ar, _, _) = run(&mut e, &p, 48);
        e.reset();
        e.begin(&p).unwrap();
        let mut step = 0;
        while e.answer().len() < 48 {
            e.set_settings(schedule[step % schedule.len()]).unwrap();
            let ev = e.step(48 - e.answer().len()).unwrap();
            step += 1;
            if ev.finished.is_some() {
                break;
            }
        }
        assert_eq!(e.answer(), ar.as_slice(), "seed {seed}");
    }
}

#[test]
fn grown_trees_leave_both_caches_equal_to_caches_of_the_emitted_tokens() {
    let mut e = engine(Family::Qwen2, 61, 43, &[], grown(16, 5, 3));
    let p = prompt(4, 61);
    e.begin(&p).unwrap();
    let (mut fresh_t, mut fresh_d) = pair(Family::Qwen2, 61, 43, 0.35);
    let mut off_chain = false;
    for _ in 0..8 {
        let ev = e.step(100).unwrap();
        let first_children = {
            let children = ev.tree.children();
            let mut chain = vec![0];
            while let Some(&c) = children[*chain.last().unwrap()].first() {
                chain.push(c);
            }
            chain
        };
        off_chain |= !first_children.starts_with(&ev.accepted);
        let seq = e.sequence().to_vec();
        let Some(drafter) = e.drafter().and_then(|d| d.decoder()) else {
            panic!("no causal drafter");
        };
        for (model, fresh) in [(e.target(), &mut fresh_t), (drafter, &mut fresh_d)] {
            fresh.reset();
            fresh
                .forward(&Batch::causal(&seq[..model.len()], 0))
                .unwrap();
            let a = model.kv_views().unwrap();
            let b = fresh.kv_views().unwrap();
            for ((ka, va), (kb, vb)) in a.iter().zip(&b) {
                assert_eq!(ka.dims(), kb.dims());
                assert!(common::max_abs_diff(ka, kb) < 1e-4);
                assert!(common::max_abs_diff(va, vb) < 1e-4);
            }
        }
        assert_eq!(e.target().len(), seq.len() - 1);
        assert!(drafter.len() >= p.len() && drafter.len() < seq.len());
    }
    assert!(
        off_chain,
        "no step accepted a path off the drafter's greedy chain"
    );
}

#[test]
fn caches_after_tree_steps_equal_caches_of_the_emitted_tokens() {
    let (t, d) = pair(Family::Qwen3, 61, 42, 0.35);
    let mut e = Engine::new(
        t,
        Some(Box::new(CausalDrafter::new(d, "drafter"))),
        BTreeSet::new(),
        settings(Mode::Tree, 16, 5, 1),
        1,
    )
    .unwrap();
    let p = prompt(3, 61);
    e.begin(&p).unwrap();
    let mut accepted_any = false;
    for _ in 0..6 {
        let ev = e.step(100).unwrap();
        accepted_any |= ev.accepted_drafts() > 0 && ev.tree.num_drafted() > ev.tree.max_depth();
    }
    assert!(accepted_any, "no step accepted a path in a branching tree");
    let seq = e.sequence().to_vec();
    let (mut fresh, _) = pair(Family::Qwen3, 61, 42, 0.35);
    fresh
        .forward(&Batch::causal(&seq[..seq.len() - 1], 0))
        .unwrap();
    let a = e.target().kv_views().unwrap();
    let b = fresh.kv_views().unwrap();
    assert_eq!(a.len(), b.len());
    for ((ka, va), (kb, vb)) in a.iter().zip(&b) {
        assert_eq!(ka.dims(), kb.dims());
        assert!(common::max_abs_diff(ka, kb) < 1e-4);
        assert!(common::max_abs_diff(va, vb) < 1e-4);
    }
}

#[test]
fn modes_without_a_drafter_are_refused() {
    let (t, _) = pair(Family::Llama, 61, 1, 0.1);
    let err = Engine::new(t, None, BTreeSet::new(), settings(Mode::Tree, 4, 2, 1), 0)
        .err()
        .unwrap();
    assert!(err.to_string().contains("needs a drafter"));
    let (t, d) = pair(Family::Llama, 61, 1, 0.1);
    let mut e = Engine::new(
        t,
        Some(Box::new(CausalDrafter::new(d, "d"))),
        BTreeSet::new(),
        Settings::default(),
        0,
    )
    .unwrap();
    let err = e.set_settings(settings(Mode::Mtp, 4, 2, 1)).unwrap_err();
    assert!(err.to_string().contains("multi-token-prediction"));
}

/// What `auto` measured survives a visit to another mode with other settings (as the bench's
/// rotating order and the mode key make), and is dropped when auto's own settings change.
#[test]
fn auto_keeps_its_measurements_across_mode_switches() {
    let mut e = engine(Family::Qwen2, 61, 5, &[], settings(Mode::Auto, 8, 4, 4));
    let p = prompt(5, 61);
    run(&mut e, &p, 12);
    let measured = |e: &Engine| e.auto_rates().iter().filter(|r| r.1 > 0.0).count();
    assert!(measured(&e) > 1);
    let mut other = settings(Mode::Ar, 2, 2, 2);
    other.min_chain_prob = 0.3;
    e.set_settings(other).unwrap();
    run(&mut e, &p, 4);
    e.set_settings(settings(Mode::Auto, 8, 4, 4)).unwrap();
    assert!(measured(&e) > 1, "auto forgot what it measured");
    e.set_settings(settings(Mode::Auto, 16, 4, 4)).unwrap();
    assert_eq!(measured(&e), 0, "new auto settings start afresh");
}

/// A drafter that drafts ahead during the verify pass (forced here on the CPU, where it runs
/// after the pass) proposes step for step the chains and trees a drafter that does not proposes,
/// keeps the chain it drafted ahead when the target takes a whole proposal, and changes no token.
#[test]
fn drafting_ahead_changes_no_proposal_and_no_token() {
    for (mode, family, noise, seed) in [
        (settings(Mode::Linear, 1, 1, 4), Family::Qwen2, 0.02, 3),
        (settings(Mode::Linear, 1, 1, 7), Family::Llama, 0.1, 4),
        (settings(Mode::Tree, 8, 4, 1), Family::Qwen2, 0.02, 5),
        (
            Settings {
                min_chain_prob: 0.3,
                ..settings(Mode::Linear, 1, 1, 6)
            },
            Family::Qwen3,
            0.05,
            6,
        ),
    ] {
        let new = |ahead: DraftAhead| {
            let (t, d) = pair(family, 61, seed, noise);
            let d = Box::new(CausalDrafter::new(d, "drafter"));
            let mut e = Engine::new(t, Some(d), BTreeSet::new(), mode, seed).unwrap();
            e.set_draft_ahead(ahead);
            e
        };
        let (mut plain, mut ahead) = (new(DraftAhead::Off), new(DraftAhead::Steps(3)));
        let p = prompt(seed, 61);
        plain.begin(&p).unwrap();
        ahead.begin(&p).unwrap();
        let (mut kept, mut ahead_used) = (0, 0);
        for step in 0..16 {
            if step == 8 {
                // Other settings mid-answer (as auto's arms and the mode key make): a chain
                // drafted ahead for the old ones is dropped, not used.
                let other = Settings {
                    min_chain_prob: 0.0,
                    ..settings(Mode::Tree, 4, 3, 1)
                };
                plain.set_settings(other).unwrap();
                ahead.set_settings(other).unwrap();
            }
            let (a, b) = (plain.step(200).unwrap(), ahead.step(200).unwrap());
            assert_eq!(
                a.tree.tokens, b.tree.tokens,
                "{mode:?}: step {step} proposed otherwise"
            );
            assert_eq!(
                a.emitted, b.emitted,
                "{mode:?}: step {step} emitted otherwise"
            );
            let d = ahead.drafter().unwrap();
            kept += usize::from(d.len() >= ahead.sequence().len());
            // A chain kept at the end of a step is what the next step proposes first.
            assert!(b.drafted_ahead <= b.tree.max_depth());
            ahead_used += b.drafted_ahead;
        }
        assert!(kept > 0, "{mode:?}: no chain drafted ahead was kept");
        assert!(
            ahead_used > 0,
            "{mode:?}: no step proposed tokens drafted ahead"
        );
    }
}

/// The next turn keeps the cached rows of the conversation so far: a prompt that continues the
/// last one (its answer and a new message after it) reads only the new rows, one that differs
/// part way (a template that leaves the last answer's reasoning out of the history) reads from
/// where it differs; either way the answer is the one a fresh engine gives the whole prompt.
#[test]
fn the_next_turn_reads_only_what_the_cache_does_not_hold() {
    for mode in [Mode::Ar, Mode::Tree] {
        let s = settings(mode, 8, 4, 1);
        let mut e = engine(Family::Qwen2, 61, 9, &[], s);
        let first = prompt(2, 61);
        let answer = e.generate(&first, 12, |_| true).unwrap().tokens;
        let mut next = [first.clone(), answer.clone(), vec![7, 8, 9]].concat();
        let begun = e.begin(&next).unwrap();
        // The answer's last token was emitted but never read back in: it is not cached.
        assert_eq!(begun.cached, first.len() + answer.len() - 1, "{mode:?}");
        let mut fresh = engine(Family::Qwen2, 61, 9, &[], s);
        let want = fresh.generate(&next, 12, |_| true).unwrap().tokens;
        e.reset();
        let reused = {
            e.generate(&[first.clone(), answer.clone()].concat(), 1, |_| true)
                .unwrap();
            let o = e.generate(&next, 12, |_| true).unwrap();
            assert!(o.stats.cached_tokens > first.len(), "{mode:?}");
            o.tokens
        };
        assert_eq!(reused, want, "{mode:?}");
        // Differing at `cut`: rows from there are read again.
        let cut = first.len() + 2;
        next[cut] = (next[cut] + 1) % 61;
        let begun = e.begin(&next).unwrap();
        assert_eq!(begun.cached, cut, "{mode:?}");
    }
}
