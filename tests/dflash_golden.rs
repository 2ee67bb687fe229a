//! The DFlash drafter against the reference implementation's traces (`tests/data/dflash/`, copied from the project's shared golden set):
//! first-round drafter logits, every round's tree and accepted indices for each budget, the
//! linear outputs and acceptance lengths, and every output equal to the target's greedy output.
//! The case file is read from `DFLASH_GOLDEN` (default `tests/data/dflash/dflash-golden.json`).

use candle_core::Device;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use treespec::draft::{DFlashDrafter, Drafter};
use treespec::engine::{Engine, Mode, Settings, StepEvent};
use treespec::model::config::ModelConfig;
use treespec::model::decoder::{Batch, Decoder};
use treespec::model::weights::WeightStore;

#[derive(Deserialize)]
struct Golden {
    block_size: usize,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    prompt: Vec<u32>,
    ar_greedy: Vec<u32>,
    first_round_bonus: u32,
    first_round_draft_logits: Vec<Vec<f32>>,
    linear: Run,
    tree: Vec<TreeRun>,
}

#[derive(Deserialize)]
struct Run {
    output: Vec<u32>,
    acceptance_lengths: Vec<usize>,
}

#[derive(Deserialize)]
struct TreeRun {
    budget: usize,
    output: Vec<u32>,
    acceptance_lengths: Vec<usize>,
    rounds: Vec<Round>,
}

#[derive(Deserialize)]
struct Round {
    accepted_indices: Vec<usize>,
    tree: RoundTree,
}

#[derive(Deserialize)]
struct RoundTree {
    node_token_ids: Vec<u32>,
    node_depths: Vec<usize>,
    parents: Vec<i64>,
}

fn golden_file() -> PathBuf {
    std::env::var_os("DFLASH_GOLDEN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/dflash/dflash-golden.json")
        })
}

fn load_golden() -> (Golden, PathBuf) {
    let path = golden_file();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let dir = path.parent().unwrap().to_path_buf();
    (
        serde_json::from_str(&text).expect("parse the golden file"),
        dir,
    )
}

const CONTEXT: usize = 512;

fn target(dir: &Path) -> Decoder {
    let cfg = ModelConfig::from_hf_json(
        &std::fs::read_to_string(dir.join("target-config.json")).unwrap(),
    )
    .unwrap();
    let mut store =
        WeightStore::safetensors(&[dir.join("target.safetensors")], &Device::Cpu).unwrap();
    Decoder::load(&mut store, cfg, CONTEXT).unwrap()
}

fn drafter(dir: &Path) -> DFlashDrafter {
    DFlashDrafter::load(
        &dir.join("drafter-config.json"),
        &[dir.join("drafter.safetensors")],
        &Device::Cpu,
        CONTEXT,
        false,
    )
    .unwrap()
}

#[test]
fn first_round_drafter_logits() {
    let (g, dir) = load_golden();
    for (ci, case) in g.cases.iter().enumerate() {
        let mut t = target(&dir);
        let mut d = drafter(&dir);
        assert_eq!(d.config().block_size, g.block_size);
        let ids = d.config().target_layer_ids.clone();
        let out = t
            .forward(&Batch::causal(&case.prompt, 0).with_hidden_layers(ids))
            .unwrap();
        let last = out.logits_rows().unwrap().pop().unwrap();
        let bonus = treespec::sampling::argmax(&last).unwrap();
        assert_eq!(
            bonus, case.first_round_bonus,
            "case {ci}: the target's first token"
        );
        let feats = candle_core::Tensor::cat(&out.hidden, 1).unwrap();
        d.push_features(feats).unwrap();
        let logits = d.draft(bonus, &t).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(logits.len(), case.first_round_draft_logits.len());
        let mut worst = 0f32;
        for (a, b) in logits.iter().zip(&case.first_round_draft_logits) {
            for (x, y) in a.iter().zip(b) {
                worst = worst.max((x - y).abs());
            }
        }
        eprintln!("case {ci}: first-round drafter logits within {worst:e} of the reference");
        assert!(worst < 1e-4, "case {ci}: drafter logits differ by {worst}");
    }
}

/// Generate `len` tokens the way the reference counts rounds. The reference keeps drafting while
/// the root's position is below `prompt + len`, so it runs one more round when the root is the
/// last token wanted (and discards that round's output); the engine stops as soon as `len`
/// tokens are out. Asking the engine for `len + 1` tokens runs the same rounds; the output is
/// then cut to `len`.
fn run(dir: &Path, prompt: &[u32], settings: Settings, len: usize) -> (Vec<u32>, Vec<StepEvent>) {
    let mut e = Engine::new(
        target(dir),
        Some(Box::new(drafter(dir))),
        BTreeSet::new(),
        settings,
        0,
    )
    .unwrap();
    let mut events = vec![];
    let mut out = e
        .generate(prompt, len + 1, |ev| {
            events.push(ev.clone());
            true
        })
        .unwrap();
    out.tokens.truncate(len);
    (out.tokens, events)
}

#[test]
fn tree_rounds_match_the_reference_exactly() {
    let (g, dir) = load_golden();
    let horizon = g.block_size - 1;
    for (ci, case) in g.cases.iter().enumerate() {
        for tr in &case.tree {
            let settings = Settings {
                mode: Mode::Tree,
                budget: tr.budget,
                depth: horizon,
                ..Settings::default()
            };
            let (output, events) = run(&dir, &case.prompt, settings, case.ar_greedy.len());
            assert_eq!(output, tr.output, "case {ci} budget {}: output", tr.budget);
            assert_eq!(
                output, case.ar_greedy,
                "case {ci} budget {}: not greedy",
                tr.budget
            );
            // The first step is the target's own first token; the drafting rounds follow.
            assert_eq!(events[0].mode, Mode::Ar);
            let rounds: Vec<&StepEvent> = events[1..].iter().collect();
            assert_eq!(
                rounds.len(),
                tr.rounds.len(),
                "case {ci} budget {}: rounds",
                tr.budget
            );
            // The reference keeps its tokens in a buffer of prompt + len + budget + 1 slots and
            // reads each round's block from it: when a round starts within block_size of that
            // end (small budgets, last round), its block is cut short, the drafter sees fewer
            // masked positions and its rows shift. Those rounds are a buffer artifact of the
            // reference, not DFlash; they are checked for their output only.
            let buffer_end = case.prompt.len() + case.ar_greedy.len() + tr.budget + 1;
            let mut start = case.prompt.len();
            let mut cut_short = vec![];
            for want in &tr.rounds {
                cut_short.push(start + g.block_size > buffer_end);
                start += want.accepted_indices.len();
            }
            for (ri, (ev, want)) in rounds.iter().zip(&tr.rounds).enumerate() {
                if cut_short[ri] {
                    assert!(
                        cut_short[ri..].iter().all(|&c| c),
                        "only the last rounds can be cut short"
                    );
                    continue;
                }
                let at = format!("case {ci} budget {} round {ri}", tr.budget);
                assert_eq!(ev.mode, Mode::Tree, "{at}");
                if ev.tree.tokens[1..] != want.tree.node_token_ids[..] {
                    // Our drafter logits agree with the reference's to a few ulps (see the first
                    // test); two candidates whose path log-probabilities tie to that precision
                    // can swap at the budget's edge. Accept a difference only there: every
                    // differing node must score within 1e-5 of the last node kept, and the walk
                    // must not touch it.
                    let lw = &ev.tree.log_weights;
                    let edge = *lw.last().unwrap();
                    let mut differs = 0;
                    for (k, (&a, &b)) in ev.tree.tokens[1..]
                        .iter()
                        .zip(&want.tree.node_token_ids)
                        .enumerate()
                    {
                        if a != b
                            || ev.tree.parents[k + 1].map_or(-1, |p| p as i64)
                                != want.tree.parents[k + 1]
                        {
                            assert!(
                                (lw[k + 1] - edge).abs() < 1e-5,
                                "{at}: node {} differs and is no tie at the budget's edge",
                                k + 1
                            );
                            assert!(
                                !ev.accepted.contains(&(k + 1)),
                                "{at}: a differing node was accepted"
                            );
                            differs += 1;
                        }
                    }
                    eprintln!("{at}: {differs} node(s) at the budget's edge swapped by a floating-point tie");
                    assert_eq!(ev.accepted, want.accepted_indices, "{at}: accepted");
                    continue;
                }
                assert_eq!(
                    &ev.tree.depths[1..],
                    want.tree.node_depths.as_slice(),
                    "{at}: depths"
                );
                let parents: Vec<i64> = ev
                    .tree
                    .parents
                    .iter()
                    .map(|p| p.map_or(-1, |p| p as i64))
                    .collect();
                assert_eq!(parents, want.tree.parents, "{at}: parents");
                assert_eq!(ev.accepted, want.accepted_indices, "{at}: accepted");
            }
            let kept = |v: Vec<usize>| -> Vec<usize> {
                v.into_iter()
                    .zip(&cut_short)
                    .filter(|(_, &c)| !c)
                    .map(|(x, _)| x)
                    .collect()
            };
            let lengths = kept(rounds.iter().map(|e| e.accepted.len()).collect());
            assert_eq!(
                lengths,
                kept(tr.acceptance_lengths.clone()),
                "case {ci} budget {}",
                tr.budget
            );
        }
    }
}

#[test]
fn linear_matches_the_reference_exactly() {
    let (g, dir) = load_golden();
    for (ci, case) in g.cases.iter().enumerate() {
        let settings = Settings {
            mode: Mode::Linear,
            gamma: g.block_size - 1,
            ..Settings::default()
        };
        let (output, events) = run(&dir, &case.prompt, settings, case.ar_greedy.len());
        assert_eq!(output, case.linear.output, "case {ci}");
        assert_eq!(output, case.ar_greedy, "case {ci}: not greedy");
        let lengths: Vec<usize> = events[1..].iter().map(|e| e.accepted.len()).collect();
        assert_eq!(lengths, case.linear.acceptance_lengths, "case {ci}");
    }
}

#[test]
fn dflash_sampling_smoke() {
    // Under sampling the rules are lossless by construction; here: it runs, stays in the
    // vocabulary, and is reproducible with a seed.
    let (g, dir) = load_golden();
    let case = &g.cases[0];
    for mode in [Mode::Tree, Mode::Linear] {
        let s = Settings {
            mode,
            budget: 16,
            depth: g.block_size - 1,
            gamma: g.block_size - 1,
            sampling: treespec::sampling::SamplingParams {
                temperature: 0.8,
                top_k: 0,
                top_p: 0.95,
            },
            ..Settings::default()
        };
        let (a, _) = run(&dir, &case.prompt, s, 32);
        let (b, _) = run(&dir, &case.prompt, s, 32);
        assert_eq!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.iter().all(|&t| t < 512));
    }
}
