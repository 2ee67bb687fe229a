//! Qwen3.5's native MTP head against an independent reference (`tests/data/qwen35/`:
//! `mtp_golden.json`, made by `generate.py` there with transformers' own decoder layer and norm,
//! run as vLLM's `Qwen3_5MultiTokenPredictor`): the first pass over a prompt (the target's
//! post-norm hidden states, the embedding first), a greedy chain after the root and a tree the
//! head grows, from the Hugging Face checkpoint (`mtp.*`) and from the GGUF llama.cpp's
//! converter writes (`blk.4.nextn.*`); then greedy `mtp` and `tree` over the head emit exactly
//! `ar`'s tokens on the hybrid target.

mod common;

use candle_core::{Device, Tensor};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use treespec::draft::MtpDrafter;
use treespec::model::config::ModelConfig;
use treespec::model::decoder::{Batch, Decoder, PastMask};
use treespec::model::mtp::MtpHead;
use treespec::model::source::ModelFiles;
use treespec::model::weights::{read_gguf_header, WeightStore};
use treespec::model::{load_mtp_head, LoadOptions};

#[derive(Deserialize)]
struct Golden {
    prompt: Vec<u32>,
    root: u32,
    first_pass_logits: Vec<Vec<f32>>,
    first_pass_outputs: Vec<Vec<f32>>,
    chain: Chain,
    tree: Tree,
}

#[derive(Deserialize)]
struct Chain {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct Tree {
    parents: Vec<i64>,
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

/// Tolerance on a logit or an output (f32 throughout).
const TOL: f32 = 1e-4;
const CONTEXT: usize = 64;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/qwen35")
}

fn golden() -> Golden {
    let text = std::fs::read_to_string(dir().join("mtp_golden.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Load options on the test device ([`common::test_device`]).
fn options() -> LoadOptions {
    LoadOptions {
        device: common::test_device(),
        ..LoadOptions::default()
    }
}

/// The target and its head from the Hugging Face checkpoint, as the loader finds them.
fn from_checkpoint() -> (Decoder, MtpHead) {
    let cfg =
        ModelConfig::from_hf_json(&std::fs::read_to_string(dir().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(cfg.mtp_heads, 1);
    let files = ModelFiles::Checkpoint(dir());
    let head = load_mtp_head(&files, &cfg, 0, &options(), CONTEXT).unwrap();
    let mut store =
        WeightStore::safetensors(&[dir().join("model.safetensors")], &common::test_device())
            .unwrap();
    (Decoder::load(&mut store, cfg, CONTEXT).unwrap(), head)
}

/// The target and its head from the GGUF llama.cpp's converter wrote.
fn from_gguf() -> (Decoder, MtpHead) {
    let path = dir().join("model.gguf");
    let cfg = ModelConfig::from_gguf(&read_gguf_header(&path).unwrap()).unwrap();
    assert_eq!((cfg.n_layers, cfg.mtp_heads), (4, 1));
    let files = ModelFiles::Gguf(path.clone());
    let head = load_mtp_head(&files, &cfg, 0, &LoadOptions::default(), CONTEXT).unwrap();
    let mut store =
        WeightStore::gguf(&path, read_gguf_header(&path).unwrap(), &Device::Cpu, true).unwrap();
    (Decoder::load(&mut store, cfg, CONTEXT).unwrap(), head)
}

/// The largest difference between rows, or a panic naming `what` past the tolerance.
fn check(what: &str, got: &Tensor, want: &[Vec<f32>]) {
    let got = got
        .to_dtype(candle_core::DType::F32)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    assert_eq!(got.len(), want.len(), "{what}: rows");
    let d = got
        .iter()
        .flatten()
        .zip(want.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(d <= TOL, "{what}: off by {d}");
}

fn argmax(row: &[f32]) -> u32 {
    treespec::sampling::argmax(row).unwrap()
}

/// The head's first pass over the prompt: the target's hidden states of the prompt (its root the
/// target's next token), through [`MtpHead::target_hidden`]. Returns the outputs.
fn first_pass(g: &Golden, target: &mut Decoder, head: &mut MtpHead) -> Tensor {
    target.reset();
    head.truncate(0);
    let last = target.config().n_layers - 1;
    let out = target
        .forward(&Batch::causal(&g.prompt, 0).with_hidden_layers(vec![last]))
        .unwrap();
    assert_eq!(argmax(&out.logits_rows().unwrap()[0]), g.root, "the root");
    let hidden = head.target_hidden(target, &out.hidden[0]).unwrap();
    let mut tokens = g.prompt[1..].to_vec();
    tokens.push(g.root);
    head.forward(target, &hidden, &tokens).unwrap()
}

/// First pass, chain and grown tree against the reference.
fn check_head(what: &str, (mut target, mut head): (Decoder, MtpHead)) {
    let g = golden();
    let o = first_pass(&g, &mut target, &mut head);
    check(
        &format!("{what} first pass outputs"),
        &o,
        &g.first_pass_outputs,
    );
    let logits = head.logits(&target, &o).unwrap();
    check(&format!("{what} first pass"), &logits, &g.first_pass_logits);
    let n = g.prompt.len();
    assert_eq!(head.len(), n);
    // The greedy chain, each depth fed its own output and the token it drafted.
    let root_out = o.narrow(0, n - 1, 1).unwrap();
    let mut x = root_out.clone();
    let mut want = argmax(&g.first_pass_logits[n - 1]);
    for (j, &t) in g.chain.tokens.iter().enumerate() {
        assert_eq!(t, want, "{what}: chain token {j}");
        x = head.forward(&target, &x, &[t]).unwrap();
        let row = head.logits(&target, &x).unwrap();
        check(
            &format!("{what} chain depth {}", j + 2),
            &row,
            &g.chain.logits[j..=j],
        );
        want = argmax(&g.chain.logits[j]);
    }
    // The tree, one depth per pass, each node fed its parent's output under its ancestors.
    head.truncate(n);
    let parents = &g.tree.parents;
    let (mut outs, mut rows): (Vec<Option<Tensor>>, Vec<usize>) =
        (vec![None; parents.len()], vec![0; parents.len()]);
    let depth = |mut i: i64| {
        let mut d = 0;
        while i >= 0 {
            d += 1;
            i = parents[i as usize];
        }
        d
    };
    for d in 1..=parents.len() {
        let nodes: Vec<usize> = (0..parents.len())
            .filter(|&i| depth(i as i64) == d)
            .collect();
        if nodes.is_empty() {
            break;
        }
        let hidden: Vec<Tensor> = nodes
            .iter()
            .map(|&i| match parents[i] {
                -1 => root_out.clone(),
                p => outs[p as usize].clone().unwrap(),
            })
            .collect();
        let visible = nodes
            .iter()
            .map(|&i| {
                let mut seen = vec![];
                let mut p = parents[i];
                while p >= 0 {
                    seen.push(rows[p as usize]);
                    p = parents[p as usize];
                }
                seen
            })
            .collect();
        let first_row = head.len();
        let tokens: Vec<u32> = nodes.iter().map(|&i| g.tree.tokens[i]).collect();
        let past = PastMask { start: n, visible };
        let hidden = Tensor::cat(&hidden, 0).unwrap();
        let o = head
            .forward_nodes(&target, &hidden, &tokens, n + d - 1, &past)
            .unwrap();
        let logits = head.logits(&target, &o).unwrap();
        for (r, &i) in nodes.iter().enumerate() {
            rows[i] = first_row + r;
            outs[i] = Some(o.narrow(0, r, 1).unwrap());
            check(
                &format!("{what} tree node {i} (depth {d})"),
                &logits.narrow(0, r, 1).unwrap(),
                &g.tree.logits[i..=i],
            );
        }
    }
}

#[test]
fn the_checkpoint_head_matches_the_reference() {
    check_head("checkpoint", from_checkpoint());
}

#[test]
fn the_llama_cpp_gguf_head_matches_the_reference() {
    check_head("GGUF", from_gguf());
}

/// A corrupted golden value fails the comparison (the check is not vacuous).
#[test]
#[should_panic(expected = "off by")]
fn a_corrupted_golden_fails() {
    let mut g = golden();
    let (mut target, mut head) = from_checkpoint();
    g.first_pass_logits[3][7] += 1e-3;
    let o = first_pass(&g, &mut target, &mut head);
    let logits = head.logits(&target, &o).unwrap();
    check("corrupted", &logits, &g.first_pass_logits);
}

/// A checkpoint that declares the head but ships none of it is refused in one line naming the
/// tensor (`mtp.fc.weight`).
#[test]
fn a_missing_head_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let tensors =
        candle_core::safetensors::load(dir().join("model.safetensors"), &Device::Cpu).unwrap();
    let kept: std::collections::HashMap<String, Tensor> = tensors
        .into_iter()
        .filter(|(k, _)| !k.starts_with("mtp."))
        .collect();
    candle_core::safetensors::save(&kept, tmp.path().join("model.safetensors")).unwrap();
    std::fs::copy(dir().join("config.json"), tmp.path().join("config.json")).unwrap();
    let cfg =
        ModelConfig::from_hf_json(&std::fs::read_to_string(dir().join("config.json")).unwrap())
            .unwrap();
    let files = ModelFiles::Checkpoint(tmp.path().to_path_buf());
    let err = load_mtp_head(&files, &cfg, 0, &LoadOptions::default(), CONTEXT)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("mtp.fc.weight"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

/// Greedy `mtp` (chains of the head) and `tree` (DDTrees over the head's chain and trees the head
/// grows) emit exactly `ar`'s tokens on the hybrid target, from both files.
#[test]
fn greedy_mtp_and_tree_over_the_head_emit_exactly_ar() {
    use treespec::engine::{Engine, Mode, Settings};
    let g = golden();
    for (what, load) in [
        ("checkpoint", from_checkpoint as fn() -> (Decoder, MtpHead)),
        ("GGUF", from_gguf),
    ] {
        let (target, _) = load();
        let ar_settings = Settings {
            mode: Mode::Ar,
            ..Settings::default()
        };
        let mut e = Engine::new(target, None, Default::default(), ar_settings, 1).unwrap();
        let ar = e.generate(&g.prompt, 20, |_| true).unwrap().tokens;
        assert_eq!(ar.len(), 20);
        for (mode, depth, gamma, expand) in [
            (Mode::Mtp, 1, 3, 0),
            (Mode::Tree, 4, 1, 0),
            (Mode::Tree, 4, 1, 2),
        ] {
            let (target, head) = load();
            let cfg = target.config().clone();
            let s = Settings {
                mode,
                depth,
                gamma,
                expand,
                budget: 16,
                // Full-depth drafts whatever the (random) head's confidence.
                min_chain_prob: 0.0,
                ..Settings::default()
            };
            let drafter = Box::new(MtpDrafter::new(head, &cfg, "head"));
            let mut e = Engine::new(target, Some(drafter), Default::default(), s, 0).unwrap();
            let out = e.generate(&g.prompt, 20, |_| true).unwrap();
            assert_eq!(out.tokens, ar, "{what} {mode:?} expand {expand}");
            assert!(
                out.stats.offered > 0,
                "{what} {mode:?}: the head drafted nothing"
            );
            eprintln!(
                "{what} {mode:?} expand {expand}: {} steps for 20 tokens, {}/{} drafts accepted",
                out.stats.steps, out.stats.accepted, out.stats.offered
            );
            let again = e.generate(&g.prompt, 20, |_| true).unwrap();
            assert_eq!(again.tokens, ar, "{what} {mode:?} expand {expand}, again");
        }
    }
}
