//! A trained MTP head shipped as a GGUF file (`treespec export-head`): exported to Q8_0 it drafts
//! through `--drafter HEAD.gguf` and greedy `mtp` still emits exactly the `ar` tokens; exported
//! to f32 it drafts exactly what the safetensors head drafts; a head made for a target of another
//! shape is refused, at export and at load, with both shapes named.

mod common;

use candle_core::quantized::GgmlDType;
use candle_core::Device;
use common::TinyShape;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use treespec::engine::{Mode, Settings, StepEvent};
use treespec::load::DrafterChoice;
use treespec::load::{build_engine, load_drafter, load_model};
use treespec::model::mtp_gguf::{self, HeadTarget};
use treespec::model::weights::read_gguf_header;
use treespec::model::{LoadOptions, LoadedModel};
use treespec::train::head::TrainableHead;
use treespec::train::{answers_batched, Example, TrainOptions, Trainer};

const TRAIN_STEPS: usize = 100;

fn opts() -> LoadOptions {
    LoadOptions {
        context: 128,
        ..Default::default()
    }
}

/// Training prompt `s` (the answers below start from prompt 0, which the head has seen).
fn prompt(s: u32) -> Vec<u32> {
    (0..4).map(|i| (s * 41 + i * 13 + 10) % 258).collect()
}

/// A tiny qwen2 target (hidden 64: every row a multiple of Q8_0's 32) and a head trained for it
/// on its own answers (enough steps that some drafts are accepted), saved as `train-drafter`
/// saves one.
fn target_and_head(dir: &Path) -> (PathBuf, LoadedModel, PathBuf) {
    let gguf = common::write_tiny_gguf(dir, "qwen2", 8);
    let mut t = load_model(&gguf.display().to_string(), &opts()).unwrap();
    let cfg = t.decoder.config().clone();
    let prompts: Vec<Vec<u32>> = (0..4).map(prompt).collect();
    let data = answers_batched(&mut t.decoder, &prompts, 28, &BTreeSet::new(), |_| {}).unwrap();
    let head = TrainableHead::new(&cfg, &Device::Cpu, 7, None).unwrap();
    let train = TrainOptions {
        k: 2,
        lr: 3e-3,
        max_len: 64,
        ..Default::default()
    };
    let mut trainer = Trainer::new(&t.decoder, head, train).unwrap();
    for step in 0..TRAIN_STEPS {
        trainer
            .step(
                &mut t.decoder,
                &[Example {
                    seq: &data[step % data.len()],
                    answer_from: 0,
                }],
                true,
            )
            .unwrap();
    }
    let file = dir.join("head.safetensors");
    trainer.head().vars().save(&file).unwrap();
    (gguf, t, file)
}

fn export(head: &Path, format: GgmlDType, t: &LoadedModel) -> treespec::Result<PathBuf> {
    let out = head.with_extension(format!("{format:?}.gguf"));
    let target = HeadTarget::of(&t.name, t.decoder.config());
    mtp_gguf::export(head, &out, format, &target, "{\"step\": 0}")?;
    Ok(out)
}

fn settings(mode: Mode) -> Settings {
    Settings {
        mode,
        gamma: 3,
        budget: 8,
        depth: 4,
        min_chain_prob: 0.0,
        ..Settings::default()
    }
}

/// Per step, the drafted tree: its tokens and its path weights as bits.
type Drafts = Vec<(Vec<u32>, Vec<u32>)>;

/// The tokens and the drafts of a greedy answer of `target` in `mode` with `drafter`.
fn answer(target: &Path, drafter: &Path, mode: Mode) -> (Vec<u32>, Drafts) {
    let (mut e, _) = build_engine(
        &target.display().to_string(),
        DrafterChoice::Named(&drafter.display().to_string()),
        None,
        settings(mode),
        0,
        &opts(),
    )
    .unwrap();
    assert_eq!(e.drafter().unwrap().kind(), "MTP head");
    let mut drafts = vec![];
    let mut record = |ev: &StepEvent| {
        let weights = ev.tree.log_weights.iter().map(|w| w.to_bits()).collect();
        drafts.push((ev.tree.tokens.clone(), weights));
        true
    };
    let tokens = e.generate(&prompt(0), 24, &mut record).unwrap().tokens;
    (tokens, drafts)
}

#[test]
fn a_q8_0_head_drafts_and_greedy_mtp_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, t, head) = target_and_head(dir.path());
    let q8 = export(&head, GgmlDType::Q8_0, &t).unwrap();
    let header = read_gguf_header(&q8).unwrap();
    assert!(mtp_gguf::is_head(&header));
    assert_eq!(
        header.tensor_infos["mtp.0.attn_q.weight"].ggml_dtype,
        GgmlDType::Q8_0
    );
    assert_eq!(
        header.tensor_infos["mtp.0.token_norm.weight"].ggml_dtype,
        GgmlDType::F32
    );
    assert_eq!(
        HeadTarget::recorded(&header),
        Some(HeadTarget::of(&t.name, t.decoder.config()))
    );
    let source = header.metadata[mtp_gguf::KEY_SOURCE].to_string().unwrap();
    assert_eq!(source, "{\"step\": 0}");
    let (st, q) = (
        std::fs::metadata(&head).unwrap().len(),
        std::fs::metadata(&q8).unwrap().len(),
    );
    assert!(q * 3 < st, "{q} bytes against {st} in f32");

    let (ar, _) = answer(&gguf, &q8, Mode::Ar);
    assert_eq!(ar.len(), 24);
    for mode in [Mode::Mtp, Mode::Tree] {
        let (tokens, drafts) = answer(&gguf, &q8, mode);
        assert_eq!(tokens, ar, "{mode:?}");
        // The head has seen this answer: most of its drafts are accepted.
        assert!(
            drafts.len() * 2 <= tokens.len(),
            "{mode:?}: {} steps",
            drafts.len()
        );
    }
}

#[test]
fn an_f32_head_drafts_exactly_what_the_safetensors_head_drafts() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, t, head) = target_and_head(dir.path());
    let f32 = export(&head, GgmlDType::F32, &t).unwrap();
    for mode in [Mode::Mtp, Mode::Tree] {
        assert_eq!(
            answer(&gguf, &f32, mode),
            answer(&gguf, &head, mode),
            "{mode:?}"
        );
    }
}

#[test]
fn a_head_for_another_shape_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, t, head) = target_and_head(dir.path());
    let q8 = export(&head, GgmlDType::Q8_0, &t).unwrap();
    let spec = q8.display().to_string();
    let wider = TinyShape {
        hidden: 128,
        ffn: 128,
        dtype: GgmlDType::Q8_0,
        nextn: 0,
    };
    let others = [
        // One more token: the same width, another vocabulary.
        common::write_tiny_gguf_vocab(dir.path(), "qwen2", 8, &["extra"]),
        common::write_tiny_gguf_shaped(dir.path(), "qwen2", 8, &[], wider),
    ];
    for other in others {
        let o = load_model(&other.display().to_string(), &opts()).unwrap();
        let err = load_drafter(&spec, &o, &opts()).err().unwrap().to_string();
        let (made, other) = (
            HeadTarget::of(&t.name, t.decoder.config()),
            HeadTarget::of(&o.name, o.decoder.config()),
        );
        assert!(
            err.contains(&made.to_string()) && err.contains(&other.to_string()),
            "{err}"
        );
        // Nor can it be exported for a target of another width.
        if other.hidden != made.hidden {
            let out = dir.path().join("wrong.gguf");
            let err = mtp_gguf::export(&head, &out, GgmlDType::Q8_0, &other, "")
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains("[128, 256]"), "{err}");
        }
    }
    // Rows of 64 values are no whole number of Q4_K's blocks of 256.
    let err = export(&head, GgmlDType::Q4K, &t).err().unwrap().to_string();
    assert!(err.contains("block of 256"), "{err}");
}

/// A GGUF head exported again with a draft vocabulary: the same drafts where they fall in the
/// set, only tokens of the set drafted, and greedy `mtp` and `tree` still exactly `ar`; exported
/// again with an empty set, the head's own drafts come back.
#[test]
fn a_head_exported_with_a_draft_vocabulary_drafts_only_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, t, head) = target_and_head(dir.path());
    let q8 = export(&head, GgmlDType::Q8_0, &t).unwrap();
    let target = HeadTarget::of(&t.name, t.decoder.config());
    let ids: Vec<u32> = (0..t.decoder.config().vocab_size as u32)
        .step_by(3)
        .collect();
    let reduced = dir.path().join("reduced.gguf");
    mtp_gguf::export_with(&q8, &reduced, GgmlDType::Q8_0, &target, "", Some(&ids)).unwrap();
    let header = read_gguf_header(&reduced).unwrap();
    assert!(header.tensor_infos.contains_key("mtp.0.draft_vocab.weight"));
    let (ar, _) = answer(&gguf, &q8, Mode::Ar);
    let outside = |drafts: &Drafts| {
        drafts
            .iter()
            .flat_map(|(d, _)| d.iter().skip(1))
            .filter(|d| ids.binary_search(d).is_err())
            .count()
    };
    assert!(
        outside(&answer(&gguf, &q8, Mode::Tree).1) > 0,
        "the whole head drafts other tokens"
    );
    let (e, _) = build_engine(
        &gguf.display().to_string(),
        DrafterChoice::Named(&reduced.display().to_string()),
        None,
        settings(Mode::Mtp),
        0,
        &opts(),
    )
    .unwrap();
    let n = ids.len();
    let name = e.drafter().unwrap().name().to_string();
    assert!(
        name.ends_with(&format!(", drafting among {n} tokens")),
        "{name}"
    );
    for mode in [Mode::Mtp, Mode::Tree] {
        let (tokens, drafts) = answer(&gguf, &reduced, mode);
        assert_eq!(tokens, ar, "{mode:?}");
        for (drafted, _) in &drafts {
            // The root (the tree's first token) is the target's; the drafts are the head's.
            assert!(
                drafted.iter().skip(1).all(|d| ids.binary_search(d).is_ok()),
                "{mode:?}: {drafted:?}"
            );
        }
    }
    // Dropped again (an empty set): the head's own drafts, bit for bit.
    let whole = dir.path().join("whole.gguf");
    mtp_gguf::export_with(&reduced, &whole, GgmlDType::Q8_0, &target, "", Some(&[])).unwrap();
    assert_eq!(
        answer(&gguf, &whole, Mode::Tree),
        answer(&gguf, &q8, Mode::Tree)
    );
}
