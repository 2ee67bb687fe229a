//! The MTP head against the reference (`tests/data/mtp/`, a tiny random MiMo and the values of
//! `reference.py`, which follows vLLM's MiMo MTP): the target's logits and pre-norm hidden states,
//! the first pass over each context, greedy chains of 4, and a context that grows over three
//! verification rounds with one target cache and one head cache throughout. Within 1e-4, tokens
//! exact. The case file is read from `MTP_GOLDEN` (default `tests/data/mtp/golden.json`), the model
//! (`config.json`, `model.safetensors`) from the folder that holds it.

use candle_core::{Device, Tensor};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use treespec::model::config::ModelConfig;
use treespec::model::decoder::{Batch, Decoder};
use treespec::model::mtp::{MtpHead, MtpLayout};
use treespec::model::weights::WeightStore;

#[derive(Deserialize)]
struct Golden {
    tolerance: Tolerance,
    target: Vec<TargetCase>,
    chains: Vec<ChainCase>,
    grow: Vec<GrowCase>,
}

#[derive(Deserialize)]
struct Tolerance {
    logits_max_abs: f32,
    hidden_max_abs: f32,
}

#[derive(Deserialize)]
struct TargetCase {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
    hidden_prenorm: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct ChainCase {
    name: String,
    target_case: usize,
    first_pass: Pass,
    chain: Chain,
}

#[derive(Deserialize)]
struct Pass {
    positions: Vec<usize>,
    input_tokens: Vec<u32>,
    hidden: Vec<Vec<f32>>,
    logits: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct Chain {
    positions: Vec<usize>,
    input_tokens: Vec<u32>,
    draft_tokens: Vec<u32>,
    hidden: Vec<Vec<f32>>,
    logits: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct GrowCase {
    rounds: Vec<Round>,
}

#[derive(Deserialize)]
struct Round {
    #[serde(default)]
    target_input_tokens: Vec<u32>,
    #[serde(default)]
    verify_tokens: Vec<u32>,
    #[serde(default)]
    target_positions: Vec<usize>,
    #[serde(default)]
    verify_positions: Vec<usize>,
    target_logits: Vec<Vec<f32>>,
    target_hidden_prenorm: Vec<Vec<f32>>,
    accepted_drafts: Option<usize>,
    first_pass: Pass,
    chain: Chain,
}

fn golden_file() -> PathBuf {
    std::env::var_os("MTP_GOLDEN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mtp/golden.json"))
}

fn load() -> (Golden, Decoder, MtpHead) {
    let file = golden_file();
    let golden: Golden = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let dir = file.parent().unwrap();
    let cfg = ModelConfig::from_hf_json(&std::fs::read_to_string(dir.join("config.json")).unwrap())
        .unwrap();
    assert_eq!(cfg.mtp_heads, 1);
    let mut store =
        WeightStore::safetensors(&[dir.join("model.safetensors")], &Device::Cpu).unwrap();
    let head = MtpHead::load(&mut store, &cfg, MtpLayout::MiMo, 0, 128).unwrap();
    let target = Decoder::load(&mut store, cfg, 128).unwrap();
    (golden, target, head)
}

fn max_diff(got: &Tensor, want: &[Vec<f32>]) -> f32 {
    let got = got.to_vec2::<f32>().unwrap();
    assert_eq!(got.len(), want.len());
    got.iter()
        .flatten()
        .zip(want.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

fn argmax(row: &[f32]) -> u32 {
    row.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
        .map(|(i, _)| i as u32)
        .unwrap()
}

/// Target pass over `tokens` at `positions`: (all logits rows, pre-norm hidden of the last layer).
fn target_pass(target: &mut Decoder, tokens: &[u32], positions: &[usize]) -> (Tensor, Tensor) {
    let last = target.config().n_layers - 1;
    let out = target
        .forward(
            &Batch::causal(tokens, positions[0])
                .with_positions(positions.to_vec())
                .all_logits()
                .with_hidden_layers(vec![last]),
        )
        .unwrap();
    (out.logits.unwrap(), out.hidden[0].clone())
}

/// The head's first pass and chain against the golden values, the head's cache at the first
/// pass's first position.
fn check_chain(
    what: &str,
    tol: &Tolerance,
    target: &Decoder,
    head: &mut MtpHead,
    hidden: &Tensor,
    pass: &Pass,
    chain: &Chain,
) {
    head.truncate(pass.positions[0]);
    assert_eq!(head.len(), pass.positions[0], "{what}");
    let o = head.forward(target, hidden, &pass.input_tokens).unwrap();
    let logits = target.lm_head(&o).unwrap();
    let (dh, dl) = (max_diff(&o, &pass.hidden), max_diff(&logits, &pass.logits));
    assert!(
        dh <= tol.hidden_max_abs,
        "{what}: first pass hidden off by {dh}"
    );
    assert!(
        dl <= tol.logits_max_abs,
        "{what}: first pass logits off by {dl}"
    );
    // Chain: step 1 is the first pass's last row; each later step feeds back o and the draft.
    let n = pass.input_tokens.len();
    let mut o = o.narrow(0, n - 1, 1).unwrap();
    let mut row = logits.narrow(0, n - 1, 1).unwrap();
    for (j, &want_token) in chain.draft_tokens.iter().enumerate() {
        if j > 0 {
            assert_eq!(head.len(), chain.positions[j], "{what}: chain position {j}");
            o = head.forward(target, &o, &[chain.input_tokens[j]]).unwrap();
            row = target.lm_head(&o).unwrap();
        }
        let (dh, dl) = (
            max_diff(&o, &chain.hidden[j..=j]),
            max_diff(&row, &chain.logits[j..=j]),
        );
        assert!(
            dh <= tol.hidden_max_abs,
            "{what}: chain step {j} hidden off by {dh}"
        );
        assert!(
            dl <= tol.logits_max_abs,
            "{what}: chain step {j} logits off by {dl}"
        );
        let token = argmax(&row.to_vec2::<f32>().unwrap()[0]);
        assert_eq!(token, want_token, "{what}: chain step {j}");
        if j + 1 < chain.input_tokens.len() {
            assert_eq!(
                chain.input_tokens[j + 1],
                token,
                "{what}: the chain feeds its draft"
            );
        }
    }
}

/// The loader finds the head in the checkpoint folder, and refuses a head the config does not
/// declare.
#[test]
fn the_head_loads_from_the_checkpoint() {
    use treespec::model::source::ModelFiles;
    use treespec::model::{load_mtp_head, LoadOptions};
    let file = golden_file();
    let dir = file.parent().unwrap().to_path_buf();
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let cfg = ModelConfig::from_hf_json(&text).unwrap();
    let files = ModelFiles::Checkpoint(dir);
    let opts = LoadOptions::default();
    let head = load_mtp_head(&files, &cfg, 0, &opts, 64).unwrap();
    assert!(head.is_empty());
    let err = load_mtp_head(&files, &cfg, 1, &opts, 64)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("declares 1"), "{err}");
}

#[test]
fn first_passes_and_chains_match_the_reference() {
    let (golden, mut target, mut head) = load();
    for case in &golden.chains {
        let t = &golden.target[case.target_case];
        target.reset();
        let positions: Vec<usize> = (0..t.tokens.len()).collect();
        let (logits, hidden) = target_pass(&mut target, &t.tokens, &positions);
        let dl = max_diff(&logits, &t.logits);
        let dh = max_diff(&hidden, &t.hidden_prenorm);
        assert!(
            dl <= golden.tolerance.logits_max_abs,
            "{}: target logits off by {dl}",
            case.name
        );
        assert!(
            dh <= golden.tolerance.hidden_max_abs,
            "{}: target hidden off by {dh}",
            case.name
        );
        assert_eq!(case.first_pass.positions, positions, "{}", case.name);
        check_chain(
            &case.name,
            &golden.tolerance,
            &target,
            &mut head,
            &hidden,
            &case.first_pass,
            &case.chain,
        );
    }
}

#[test]
fn a_growing_context_keeps_one_cache_each() {
    let (golden, mut target, mut head) = load();
    for case in &golden.grow {
        target.reset();
        head.truncate(0);
        for (r, round) in case.rounds.iter().enumerate() {
            let what = format!("grow round {r}");
            let (tokens, positions) = if round.verify_tokens.is_empty() {
                (&round.target_input_tokens, &round.target_positions)
            } else {
                (&round.verify_tokens, &round.verify_positions)
            };
            assert_eq!(target.len(), positions[0], "{what}");
            let (logits, hidden) = target_pass(&mut target, tokens, positions);
            let dl = max_diff(&logits, &round.target_logits);
            let dh = max_diff(&hidden, &round.target_hidden_prenorm);
            assert!(
                dl <= golden.tolerance.logits_max_abs,
                "{what}: target logits off by {dl}"
            );
            assert!(
                dh <= golden.tolerance.hidden_max_abs,
                "{what}: target hidden off by {dh}"
            );
            // Keep the target rows of what was committed: the bonus and the accepted drafts.
            let kept = round.accepted_drafts.map_or(tokens.len(), |a| a + 1);
            target.truncate(positions[0] + kept);
            let hidden = hidden.narrow(0, 0, kept).unwrap();
            check_chain(
                &what,
                &golden.tolerance,
                &target,
                &mut head,
                &hidden,
                &round.first_pass,
                &round.chain,
            );
        }
    }
}
