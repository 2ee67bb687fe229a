//! The `mtp` mode on tiny random f32 models with a random MTP head: greedy `mtp` chains, trees
//! over the head and `linear` with it emit exactly the `ar` tokens, the head follows the target
//! row for row through accepted and rejected drafts, and the mode is offered only where the
//! drafter is an MTP head. (The head against the reference: `tests/mtp_golden.rs`; sampling:
//! `tests/lossless.rs`.)

mod common;

use std::collections::BTreeSet;
use treespec::draft::{CausalDrafter, MtpDrafter};
use treespec::engine::{Engine, Mode, Settings};
use treespec::load::DrafterChoice;
use treespec::model::config::Family;

const VOCAB: usize = 8;
const CONTEXT: usize = 128;

fn engine(family: Family, seed: u64, s: Settings) -> Engine {
    let cfg = common::tiny_config(family, VOCAB);
    let w = common::random_weights(&cfg, seed);
    let mut store =
        treespec::model::weights::WeightStore::from_tensors(w, &candle_core::Device::Cpu);
    let target = treespec::model::decoder::Decoder::load(&mut store, cfg.clone(), CONTEXT).unwrap();
    let head = common::random_mtp_head(&cfg, seed + 77, CONTEXT);
    let d = MtpDrafter::new(head, &cfg, "head");
    Engine::new(target, Some(Box::new(d)), BTreeSet::new(), s, 0).unwrap()
}

/// Settings of `mode`; `gamma` is the chain length of `linear` and of `mtp` (its k).
fn settings(mode: Mode, budget: usize, depth: usize, gamma: usize) -> Settings {
    Settings {
        mode,
        budget,
        depth,
        gamma,
        mtp_k: gamma,
        min_chain_prob: 0.0,
        ..Settings::default()
    }
}

#[test]
fn greedy_mtp_equals_ar() {
    let configs = [
        settings(Mode::Mtp, 1, 1, 1),
        settings(Mode::Mtp, 1, 1, 3),
        settings(Mode::Mtp, 1, 1, 6),
        settings(Mode::Linear, 1, 1, 4),
        settings(Mode::Tree, 8, 4, 1),
        settings(Mode::Tree, 16, 6, 1),
        // Trees the head grows itself, expanding 1, 2 and 3 nodes a depth.
        Settings {
            expand: 1,
            ..settings(Mode::Tree, 4, 4, 1)
        },
        Settings {
            expand: 2,
            ..settings(Mode::Tree, 8, 4, 1)
        },
        Settings {
            expand: 3,
            ..settings(Mode::Tree, 16, 6, 1)
        },
    ];
    let mut accepted = 0;
    for family in [Family::Llama, Family::Qwen2, Family::Qwen3] {
        for seed in 0..4u64 {
            let prompt: Vec<u32> = (0..5)
                .map(|i| ((seed * 3 + i * 5) % VOCAB as u64) as u32)
                .collect();
            let mut e = engine(family, seed, settings(Mode::Ar, 1, 1, 1));
            e.reset();
            let ar = e.generate(&prompt, 30, |_| true).unwrap().tokens;
            assert_eq!(ar.len(), 30);
            for s in configs {
                e.set_settings(s).unwrap();
                e.reset();
                let out = e.generate(&prompt, 30, |_| true).unwrap();
                assert_eq!(out.tokens, ar, "{family:?} seed {seed} {s:?}");
                accepted += 30 - out.stats.steps;
                // The head has read every position the target has.
                let d = e.drafter().unwrap();
                assert_eq!(
                    d.len() + 1,
                    e.sequence().len(),
                    "{family:?} seed {seed} {s:?}"
                );
            }
        }
    }
    eprintln!("{accepted} drafted tokens accepted");
    assert!(accepted > 20, "only {accepted} drafted tokens accepted");
}

#[test]
fn a_second_answer_reuses_the_shared_prefix() {
    let mut e = engine(Family::Qwen2, 3, settings(Mode::Mtp, 1, 1, 4));
    let first = e.generate(&[1, 2, 3, 4], 12, |_| true).unwrap().tokens;
    let mut longer = vec![1, 2, 3, 4];
    longer.extend(&first);
    longer.extend([5, 6]);
    let cont = e.generate(&longer, 10, |_| true).unwrap().tokens;
    e.set_settings(settings(Mode::Ar, 1, 1, 1)).unwrap();
    e.reset();
    let want = e.generate(&longer, 10, |_| true).unwrap().tokens;
    assert_eq!(cont, want);
}

#[test]
fn mtp_is_offered_only_with_an_mtp_head() {
    let e = engine(Family::Llama, 1, settings(Mode::Ar, 1, 1, 1));
    assert_eq!(e.mode_unavailable(Mode::Mtp), None);
    let d = common::tiny_decoder(Family::Llama, 9, CONTEXT);
    let t = common::tiny_decoder(Family::Llama, 1, CONTEXT);
    let mut e = Engine::new(
        t,
        Some(Box::new(CausalDrafter::new(d, "causal"))),
        BTreeSet::new(),
        settings(Mode::Ar, 1, 1, 1),
        0,
    )
    .unwrap();
    let why = e.mode_unavailable(Mode::Mtp).unwrap();
    assert!(why.contains("multi-token-prediction"), "{why}");
    assert!(e.set_settings(settings(Mode::Mtp, 1, 1, 4)).is_err());
}

/// A target with a causal drafter and an MTP head beside it: `mtp` drafts with the head,
/// `linear` and `tree` with the causal drafter, and an answer that changes mode every step is
/// still exactly the `ar` answer, with the head following the target throughout.
#[test]
fn a_head_beside_a_causal_drafter_drafts_mtp() {
    // (The vocabulary of `common::tiny_decoder`.)
    let cfg = common::tiny_config(Family::Qwen2, 61);
    let modes = [
        settings(Mode::Mtp, 1, 1, 3),
        settings(Mode::Linear, 1, 1, 3),
        settings(Mode::Tree, 8, 4, 1),
        settings(Mode::Mtp, 1, 1, 2),
        settings(Mode::Ar, 1, 1, 1),
        // (`auto`'s arms include `mtp` with the head.)
        settings(Mode::Auto, 8, 4, 3),
        settings(Mode::Auto, 8, 4, 3),
        settings(Mode::Auto, 8, 4, 3),
    ];
    for seed in 0..3u64 {
        let target = common::tiny_decoder(Family::Qwen2, seed, CONTEXT);
        let causal = common::tiny_decoder(Family::Qwen2, seed + 40, CONTEXT);
        let head = common::random_mtp_head(&cfg, seed + 77, CONTEXT);
        let drafter = Box::new(CausalDrafter::new(causal, "causal"));
        let s = settings(Mode::Ar, 1, 1, 1);
        let e = Engine::new(target, Some(drafter), BTreeSet::new(), s, 0).unwrap();
        let mut e = e
            .add_head(Box::new(MtpDrafter::new(head, &cfg, "head")))
            .unwrap();
        assert_eq!(e.mode_unavailable(Mode::Mtp), None);
        assert_eq!(e.drafter_for(Mode::Mtp).unwrap().name(), "head");
        assert_eq!(e.drafter_for(Mode::Linear).unwrap().name(), "causal");
        assert_eq!(e.head().unwrap().name(), "head");
        let prompt = [1, 2, (seed % 8) as u32, 3];
        let ar = e.generate(&prompt, 24, |_| true).unwrap().tokens;
        e.reset();
        e.begin(&prompt).unwrap();
        let (mut drafted, mut linear_drafted) = (0, 0);
        for i in 0.. {
            let s = modes[i % modes.len()];
            e.set_settings(s).unwrap();
            let ev = e.step(24 - e.answer().len()).unwrap();
            if s.mode != Mode::Auto {
                assert_eq!(
                    ev.mode == Mode::Ar,
                    s.mode == Mode::Ar || ev.tree.len() == 1
                );
            }
            drafted += ev.tree.len() - 1;
            let head = e.drafter_for(Mode::Mtp).unwrap();
            assert_eq!(head.len() + 1, e.sequence().len(), "seed {seed} step {i}");
            // The causal drafter holds a prefix of the sequence, whichever drafter drafted.
            let causal = e.drafter_for(Mode::Linear).unwrap();
            assert!(causal.len() < e.sequence().len(), "seed {seed} step {i}");
            if s.mode == Mode::Linear && ev.tree.len() > 1 {
                linear_drafted += 1;
            }
            if ev.finished.is_some() || e.answer().len() >= 24 {
                break;
            }
        }
        assert_eq!(e.answer(), &ar[..], "seed {seed}");
        assert!(drafted > 0);
        // `linear` drafts after `mtp` steps: the causal drafter catches up.
        assert!(linear_drafted > 0, "seed {seed}");
    }
}

#[test]
fn a_head_is_added_once_and_only_a_head() {
    let cfg = common::tiny_config(Family::Llama, 61);
    let head = || {
        Box::new(MtpDrafter::new(
            common::random_mtp_head(&cfg, 5, CONTEXT),
            &cfg,
            "h",
        ))
    };
    let t = common::tiny_decoder(Family::Llama, 1, CONTEXT);
    let causal = Box::new(CausalDrafter::new(
        common::tiny_decoder(Family::Llama, 2, CONTEXT),
        "causal",
    ));
    let e = Engine::new(t, None, BTreeSet::new(), settings(Mode::Ar, 1, 1, 1), 0).unwrap();
    let err = e.add_head(causal).err().unwrap().to_string();
    assert!(err.contains("not an MTP head"), "{err}");
    let t = common::tiny_decoder(Family::Llama, 1, CONTEXT);
    let e = Engine::new(t, None, BTreeSet::new(), settings(Mode::Ar, 1, 1, 1), 0).unwrap();
    // Without another drafter the head drafts every mode.
    let e = e.add_head(head()).unwrap();
    assert_eq!(e.drafter_for(Mode::Tree).unwrap().name(), "h");
    assert!(e.head().is_none());
    let err = e.add_head(head()).err().unwrap().to_string();
    assert!(err.contains("already drafts `mtp`"), "{err}");
}

#[test]
fn a_checkpoint_without_the_head_it_declares_is_refused() {
    let mut cfg = common::tiny_config(Family::Qwen2, VOCAB);
    cfg.mtp_heads = 1;
    let mut store = treespec::model::weights::WeightStore::from_tensors(
        common::random_weights(&cfg, 1),
        &candle_core::Device::Cpu,
    );
    let err = treespec::model::mtp::MtpHead::load(
        &mut store,
        &cfg,
        treespec::model::mtp::MtpLayout::MiMo,
        0,
        CONTEXT,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("ships none of its weights"), "{err}");
    assert!(
        err.contains("model.mtp_layers.0.input_proj.weight"),
        "{err}"
    );
}

/// A tiny Q8_0 qwen2 GGUF in `dir` with one `nextn` (MTP) layer after its two decoder layers.
fn nextn_gguf(dir: &std::path::Path) -> std::path::PathBuf {
    let shape = common::TinyShape {
        hidden: 64,
        ffn: 128,
        dtype: candle_core::quantized::GgmlDType::Q8_0,
        nextn: 1,
    };
    common::write_tiny_gguf_shaped(dir, "qwen2", 4, &[], shape)
}

/// A GGUF whose metadata declares a `nextn` layer: the decoder loads without it, the head loads
/// from it (by default, with no drafter named), and greedy `mtp` on the quantised weights emits
/// exactly the `ar` tokens.
#[test]
fn a_gguf_nextn_layer_is_the_mtp_drafter() {
    let dir = tempfile::tempdir().unwrap();
    let path = nextn_gguf(dir.path());
    let opts = treespec::model::LoadOptions {
        context: 128,
        ..Default::default()
    };
    let spec = path.display().to_string();
    let (mut e, _) = treespec::load::build_engine(
        &spec,
        DrafterChoice::Auto,
        None,
        settings(Mode::Ar, 1, 1, 1),
        0,
        &opts,
    )
    .unwrap();
    assert_eq!(e.drafter().unwrap().kind(), "MTP head");
    assert_eq!(e.target().config().n_layers, 2);
    let prompt = [10u32, 20, 30, 40, 50];
    let ar = e.generate(&prompt, 24, |_| true).unwrap().tokens;
    for s in [settings(Mode::Mtp, 1, 1, 4), settings(Mode::Tree, 8, 4, 1)] {
        e.set_settings(s).unwrap();
        e.reset();
        assert_eq!(
            e.generate(&prompt, 24, |_| true).unwrap().tokens,
            ar,
            "{s:?}"
        );
    }
}

/// With a drafter named beside a target that has its own `nextn` head, the drafter drafts
/// `linear` and `tree` and the target's head drafts `mtp`; every greedy mode emits exactly the
/// `ar` tokens.
#[test]
fn a_named_drafter_leaves_mtp_to_the_targets_own_head() {
    let dir = tempfile::tempdir().unwrap();
    let target = nextn_gguf(dir.path());
    let sub = dir.path().join("drafter");
    std::fs::create_dir_all(&sub).unwrap();
    let drafter = common::write_tiny_gguf(&sub, "qwen2", 5);
    // No context named: the target's own (256 tokens), which the drafter follows.
    let opts = treespec::model::LoadOptions {
        context: treespec::model::context::AUTO,
        ..Default::default()
    };
    let (mut e, text) = treespec::load::build_engine(
        &target.display().to_string(),
        DrafterChoice::Named(&drafter.display().to_string()),
        None,
        settings(Mode::Ar, 1, 1, 1),
        0,
        &opts,
    )
    .unwrap();
    assert!(text.notes.is_empty(), "{:?}", text.notes);
    assert_eq!(e.drafter().unwrap().kind(), "causal LM");
    assert_eq!(e.target().context(), 256);
    assert_eq!(e.drafter().unwrap().decoder().unwrap().context(), 256);
    assert_eq!(e.drafter_for(Mode::Mtp).unwrap().kind(), "MTP head");
    assert_eq!(e.mode_unavailable(Mode::Mtp), None);
    let prompt = [10u32, 20, 30, 40, 50];
    let ar = e.generate(&prompt, 24, |_| true).unwrap().tokens;
    for s in [
        settings(Mode::Mtp, 1, 1, 3),
        settings(Mode::Linear, 4, 4, 1),
        settings(Mode::Tree, 8, 4, 1),
    ] {
        e.set_settings(s).unwrap();
        e.reset();
        let got = e.generate(&prompt, 24, |_| true).unwrap().tokens;
        assert_eq!(got, ar, "{s:?}");
    }
    // `--head none` (or a command whose mode never drafts with a head) loads none.
    let (e, _) = treespec::load::build_engine(
        &target.display().to_string(),
        DrafterChoice::Named(&drafter.display().to_string()),
        Some(treespec::load::NO_HEAD),
        settings(Mode::Ar, 1, 1, 1),
        0,
        &opts,
    )
    .unwrap();
    assert!(e.head().is_none() && e.mode_unavailable(Mode::Mtp).is_some());
}

#[test]
fn deepseek_and_qwen3_next_heads_are_refused_by_name() {
    use treespec::model::config::ModelConfig;
    for (arch, word) in [
        ("DeepseekV3ForCausalLM", "DeepSeek-V3"),
        ("Qwen3NextForCausalLM", "Qwen3-Next"),
        ("Qwen3_5MoeForConditionalGeneration", "35B-A3B"),
    ] {
        let json = format!(
            r#"{{"architectures": ["{arch}"], "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
                "num_nextn_predict_layers": 1}}"#
        );
        let err = ModelConfig::from_hf_json(&json).unwrap_err().to_string();
        assert!(err.contains(word) && err.contains("MTP"), "{err}");
    }
}
