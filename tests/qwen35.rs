//! Qwen3.5 (hybrid: Gated DeltaNet and gated attention layers) against Hugging Face transformers
//! on a tiny random model (`tests/data/qwen35/`, made by `generate.py` there): the logits of every
//! prefix of a prompt, of every node of a draft tree verified in one pass (each node's reference is
//! a cache-free forward over the prompt and its path), and of a token after the tree's accepted
//! path is kept; then the same tree verified as one-row steps along each path; the same model as
//! llama.cpp's converter writes it (GGUF); greedy `linear` and `tree` exactly `ar`'s.

mod common;

use candle_core::Device;
use serde::Deserialize;
use std::path::Path;
use treespec::model::config::ModelConfig;
use treespec::model::decoder::{Batch, BlockMask, Decoder};
use treespec::model::weights::WeightStore;

#[derive(Deserialize)]
struct Golden {
    prompt: Vec<u32>,
    prefix_logits: Vec<Vec<f32>>,
    tree: Tree,
    #[serde(rename = "continue")]
    cont: Continue,
}

#[derive(Deserialize)]
struct Tree {
    parents: Vec<i64>,
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct Continue {
    accepted: Vec<usize>,
    token: u32,
    logits: Vec<f32>,
}

/// Tolerance on a logit (f32; the reference runs the chunked form of the delta rule).
const TOL: f32 = 1e-4;

fn dir() -> &'static Path {
    Path::new("tests/data/qwen35")
}

fn golden() -> Golden {
    let text = std::fs::read_to_string(dir().join("golden.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn decoder() -> Decoder {
    let cfg = std::fs::read_to_string(dir().join("config.json")).unwrap();
    let cfg = ModelConfig::from_hf_json(&cfg).unwrap();
    let mut store =
        WeightStore::safetensors(&[dir().join("model.safetensors")], &common::test_device())
            .unwrap();
    Decoder::load(&mut store, cfg, 64).unwrap()
}

/// The largest difference between two rows of logits, or an error naming where they part by
/// more than the tolerance.
fn compare(what: &str, got: &[f32], want: &[f32]) -> Result<f32, String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} logits, want {}", got.len(), want.len()));
    }
    let mut worst = 0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        if d.is_nan() || d > TOL {
            return Err(format!("{what}: logit {i} is {g}, reference {w}"));
        }
        worst = worst.max(d);
    }
    Ok(worst)
}

fn depth(parents: &[i64], mut i: usize) -> usize {
    let mut d = 0;
    while parents[i] >= 0 {
        i = parents[i] as usize;
        d += 1;
    }
    d
}

fn path(parents: &[i64], mut i: usize) -> Vec<usize> {
    let mut p = vec![i];
    while parents[i] >= 0 {
        i = parents[i] as usize;
        p.push(i);
    }
    p.reverse();
    p
}

#[test]
fn the_config_reads_the_hybrid_layers() {
    let cfg = std::fs::read_to_string(dir().join("config.json")).unwrap();
    let cfg = ModelConfig::from_hf_json(&cfg).unwrap();
    let l = cfg.linear.as_ref().unwrap();
    assert_eq!(l.layers, vec![true, true, true, false]);
    assert_eq!(
        (l.k_heads, l.v_heads, l.k_dim, l.v_dim, l.conv),
        (2, 4, 16, 16, 4)
    );
    assert_eq!(
        (cfg.rotary_dim, cfg.attn_gate, cfg.norm_offset),
        (8, true, 1.0)
    );
}

#[test]
fn every_prefix_matches_transformers() {
    let g = golden();
    let mut d = decoder();
    let out = d
        .forward(&Batch::causal(&g.prompt, 0).all_logits())
        .unwrap();
    let rows = out.logits_rows().unwrap();
    for (i, (got, want)) in rows.iter().zip(&g.prefix_logits).enumerate() {
        compare(&format!("prompt row {i}"), got, want).unwrap();
    }
    // The same prompt as one-row steps (the recurrence row by row, against the reference's
    // chunked form over the whole prompt).
    d.reset();
    for (i, &t) in g.prompt.iter().enumerate() {
        let out = d.forward(&Batch::causal(&[t], i)).unwrap();
        let row = &out.logits_rows().unwrap()[0];
        compare(&format!("step {i}"), row, &g.prefix_logits[i]).unwrap();
    }
}

#[test]
fn a_tree_verified_in_one_pass_matches_transformers_and_its_path_commits() {
    let g = golden();
    let mut d = decoder();
    let base = g.prompt.len();
    d.forward(&Batch::causal(&g.prompt, 0).with_logits_rows(vec![]))
        .unwrap();
    let parents: Vec<Option<usize>> = g
        .tree
        .parents
        .iter()
        .map(|&p| (p >= 0).then_some(p as usize))
        .collect();
    let positions = (0..parents.len())
        .map(|i| base + depth(&g.tree.parents, i))
        .collect();
    let batch = Batch::causal(&g.tree.tokens, base)
        .with_positions(positions)
        .with_mask(BlockMask::from_parents(&parents).unwrap())
        .all_logits();
    let rows = d.forward(&batch).unwrap().logits_rows().unwrap();
    for (i, (got, want)) in rows.iter().zip(&g.tree.logits).enumerate() {
        compare(&format!("tree node {i}"), got, want).unwrap();
    }
    // Keep the accepted path; the next token sees exactly the prompt and that path.
    d.keep(base, &g.cont.accepted).unwrap();
    assert_eq!(d.len(), base + g.cont.accepted.len());
    let at = d.len();
    let out = d.forward(&Batch::causal(&[g.cont.token], at)).unwrap();
    compare(
        "after the kept path",
        &out.logits_rows().unwrap()[0],
        &g.cont.logits,
    )
    .unwrap();
}

/// Every node of the tree verified in one pass gives what one-row steps along its path give
/// (within f32 rounding: candle's dense CPU products sum a block's rows in their own order) and
/// the same greedy token, after rolling back to the prompt each time.
#[test]
fn tree_nodes_equal_one_row_steps_along_their_paths() {
    let g = golden();
    let mut d = decoder();
    let base = g.prompt.len();
    d.forward(&Batch::causal(&g.prompt, 0).with_logits_rows(vec![]))
        .unwrap();
    let parents: Vec<Option<usize>> = g
        .tree
        .parents
        .iter()
        .map(|&p| (p >= 0).then_some(p as usize))
        .collect();
    let positions = (0..parents.len())
        .map(|i| base + depth(&g.tree.parents, i))
        .collect();
    let tree_rows = d
        .forward(
            &Batch::causal(&g.tree.tokens, base)
                .with_positions(positions)
                .with_mask(BlockMask::from_parents(&parents).unwrap())
                .all_logits(),
        )
        .unwrap()
        .logits_rows()
        .unwrap();
    d.truncate(base);
    assert_eq!(
        d.len(),
        base,
        "a truncate back to the block's start keeps the prompt"
    );
    for leaf in [4usize, 7, 9, 11] {
        for (k, node) in path(&g.tree.parents, leaf).into_iter().enumerate() {
            let out = d
                .forward(&Batch::causal(&[g.tree.tokens[node]], base + k))
                .unwrap();
            let row = &out.logits_rows().unwrap()[0];
            compare(&format!("node {node} by steps"), row, &tree_rows[node]).unwrap();
            let argmax = |r: &[f32]| (0..r.len()).max_by(|&a, &b| r[a].total_cmp(&r[b]));
            assert_eq!(argmax(row), argmax(&tree_rows[node]), "node {node}");
        }
        // The steps committed the prompt's rows one by one: a length before the last step
        // cannot be reached again, so the sequence starts over and the prompt is read anew.
        d.truncate(base);
        assert_eq!(d.len(), 0);
        d.forward(&Batch::causal(&g.prompt, 0).with_logits_rows(vec![]))
            .unwrap();
    }
}

/// A chain verified in one pass then cut short (linear verification's rejection) continues as
/// if only the kept rows had been read.
#[test]
fn a_chain_cut_short_continues_from_its_kept_rows() {
    let g = golden();
    let mut d = decoder();
    let (head, tail) = g.prompt.split_at(6);
    d.forward(&Batch::causal(head, 0).with_logits_rows(vec![]))
        .unwrap();
    // Read the rest as a draft chain, keep only its first three rows.
    d.forward(&Batch::causal(tail, 6).all_logits()).unwrap();
    d.truncate(9);
    assert_eq!(d.len(), 9);
    let out = d
        .forward(&Batch::causal(&tail[3..], 9).all_logits())
        .unwrap();
    for (k, row) in out.logits_rows().unwrap().iter().enumerate() {
        compare(&format!("row {}", 9 + k), row, &g.prefix_logits[9 + k]).unwrap();
    }
    // A length inside an earlier block cannot be reached again: the sequence starts over.
    d.truncate(3);
    assert_eq!(d.len(), 0);
}

/// The comparison fails on a corrupted reference.
#[test]
fn a_corrupted_golden_fails() {
    let g = golden();
    let mut d = decoder();
    let out = d.forward(&Batch::causal(&g.prompt, 0)).unwrap();
    let mut want = g.prefix_logits.last().unwrap().clone();
    want[17] += 1e-3;
    assert!(compare("corrupted", &out.logits_rows().unwrap()[0], &want).is_err());
}

/// A mask that is no tree (a row seeing a sibling) is refused with a clear error.
#[test]
fn a_mask_that_is_no_tree_is_refused() {
    let g = golden();
    let mut d = decoder();
    d.forward(&Batch::causal(&g.prompt[..4], 0)).unwrap();
    // Row 2 sees row 1 but not row 1's parent, row 0.
    let mut mask = BlockMask::from_parents(&[None, Some(0), Some(1)]).unwrap();
    mask.set(2, 0, false);
    let err = d
        .forward(&Batch::causal(&[1, 2, 3], 4).with_mask(mask))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("trees and chains"), "{err}");
}

/// A drafter that knows the target's greedy answer and proposes it with wrong branches beside
/// it and, now and then, a wrong token on the main path: the verifier must emit the answer
/// exactly whatever the tree, on a hybrid target whose recurrent state follows each accepted path.
struct Oracle {
    want: Vec<u32>,
    len: usize,
    rng: u64,
    vocab: u32,
}

impl Oracle {
    fn next(&mut self) -> u32 {
        self.rng = self
            .rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.rng >> 33) as u32
    }
}

impl treespec::draft::Drafter for Oracle {
    fn name(&self) -> &str {
        "oracle"
    }
    fn kind(&self) -> &'static str {
        "test oracle"
    }
    fn len(&self) -> usize {
        self.len
    }
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
    fn prefill(&mut self, seq: &[u32]) -> treespec::error::Result<()> {
        self.len = seq.len();
        Ok(())
    }
    fn propose(
        &mut self,
        req: &treespec::draft::DraftRequest<'_>,
        _rng: &mut rand::rngs::StdRng,
    ) -> treespec::error::Result<treespec::draft::Proposal> {
        let at = req.seq.len();
        let mut t = treespec::tree::DraftTree::root(*req.seq.last().unwrap());
        let tree = req.mode == treespec::engine::Mode::Tree;
        let mut parent = 0;
        for d in 0..req.depth() {
            let correct = self.want.get(at + d).copied().unwrap_or(0);
            let wrong = (correct + 1 + self.next() % (self.vocab - 1)) % self.vocab;
            if tree && self.next().is_multiple_of(2) {
                // A wrong branch before the right one, with a child of its own.
                let w = t.push(wrong, parent);
                t.push(correct, w);
            }
            let tok = if self.next().is_multiple_of(6) {
                wrong
            } else {
                correct
            };
            parent = t.push(tok, parent);
        }
        Ok(treespec::draft::Proposal::Tree(t))
    }
    fn commit(&mut self, c: &treespec::draft::Committed<'_>) -> treespec::error::Result<()> {
        self.len = c.before + c.emitted.len();
        Ok(())
    }
}

#[test]
fn greedy_linear_and_tree_emit_exactly_ar_on_a_hybrid_target() {
    use treespec::engine::{Engine, Mode, Settings};
    let g = golden();
    let ar_settings = Settings {
        mode: Mode::Ar,
        ..Settings::default()
    };
    let mut e = Engine::new(decoder(), None, Default::default(), ar_settings, 1).unwrap();
    let ar = e.generate(&g.prompt, 24, |_| true).unwrap().tokens;
    assert_eq!(ar.len(), 24);
    let mut want = g.prompt.clone();
    want.extend(&ar);
    for (mode, depth, gamma) in [(Mode::Linear, 1, 4), (Mode::Tree, 5, 1), (Mode::Tree, 3, 1)] {
        for seed in 0..3u64 {
            let oracle = Oracle {
                want: want.clone(),
                len: 0,
                rng: seed,
                vocab: 512,
            };
            let s = Settings {
                mode,
                depth,
                gamma,
                budget: 32,
                ..Settings::default()
            };
            let mut e = Engine::new(
                decoder(),
                Some(Box::new(oracle)),
                Default::default(),
                s,
                seed,
            )
            .unwrap();
            let out = e.generate(&g.prompt, 24, |_| true).unwrap();
            assert_eq!(out.tokens, ar, "{mode:?} depth {depth} seed {seed}");
            assert!(out.stats.steps < 24, "{mode:?}: {} steps", out.stats.steps);
            // A second answer in the same engine (the conversation's rows kept where they can be).
            let out = e.generate(&g.prompt, 24, |_| true).unwrap();
            assert_eq!(out.tokens, ar, "{mode:?} again, seed {seed}");
        }
    }
}

/// The layout of the released checkpoints: `Qwen3_5ForConditionalGeneration`, the decoder under
/// `model.language_model.*` and its sizes under `text_config`, read as the text-only one.
#[test]
fn the_vision_language_layout_reads_alike() {
    let g = golden();
    let tmp = tempfile::tempdir().unwrap();
    let tensors =
        candle_core::safetensors::load(dir().join("model.safetensors"), &Device::Cpu).unwrap();
    let renamed: std::collections::HashMap<String, candle_core::Tensor> = tensors
        .into_iter()
        .map(|(k, v)| match k.strip_prefix("model.") {
            Some(rest) => (format!("model.language_model.{rest}"), v),
            None => (k, v),
        })
        .collect();
    let path = tmp.path().join("model.safetensors");
    candle_core::safetensors::save(&renamed, &path).unwrap();
    let text: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("config.json")).unwrap()).unwrap();
    let wrapped = serde_json::json!({
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text,
    });
    let cfg = ModelConfig::from_hf_json(&wrapped.to_string()).unwrap();
    let mut store = WeightStore::safetensors(&[path], &Device::Cpu).unwrap();
    let mut d = Decoder::load(&mut store, cfg, 64).unwrap();
    let out = d.forward(&Batch::causal(&g.prompt, 0)).unwrap();
    compare(
        "last prompt row",
        &out.logits_rows().unwrap()[0],
        g.prefix_logits.last().unwrap(),
    )
    .unwrap();
}

/// The same model converted by llama.cpp's own `convert_hf_to_gguf.py` (norms + 1, `-exp(A_log)`,
/// value heads tiled, `post_attention_norm`): the GGUF reader gives transformers' logits too,
/// for the prompt and for the tree verified in one pass.
#[test]
fn the_llama_cpp_gguf_matches_transformers() {
    let g = golden();
    let path = dir().join("model.gguf");
    let content = treespec::model::weights::read_gguf_header(&path).unwrap();
    let cfg = ModelConfig::from_gguf(&content).unwrap();
    let l = cfg.linear.as_ref().unwrap();
    assert!(l.v_tiled && l.layers == vec![true, true, true, false]);
    assert_eq!((cfg.rotary_dim, cfg.norm_offset), (8, 0.0));
    let mut store = WeightStore::gguf(&path, content, &Device::Cpu, true).unwrap();
    let mut d = Decoder::load(&mut store, cfg, 64).unwrap();
    let rows = d
        .forward(&Batch::causal(&g.prompt, 0).all_logits())
        .unwrap()
        .logits_rows()
        .unwrap();
    for (i, (got, want)) in rows.iter().zip(&g.prefix_logits).enumerate() {
        compare(&format!("GGUF prompt row {i}"), got, want).unwrap();
    }
    let base = g.prompt.len();
    let parents: Vec<Option<usize>> = g
        .tree
        .parents
        .iter()
        .map(|&p| (p >= 0).then_some(p as usize))
        .collect();
    let positions = (0..parents.len())
        .map(|i| base + depth(&g.tree.parents, i))
        .collect();
    let batch = Batch::causal(&g.tree.tokens, base)
        .with_positions(positions)
        .with_mask(BlockMask::from_parents(&parents).unwrap())
        .all_logits();
    let rows = d.forward(&batch).unwrap().logits_rows().unwrap();
    for (i, (got, want)) in rows.iter().zip(&g.tree.logits).enumerate() {
        compare(&format!("GGUF tree node {i}"), got, want).unwrap();
    }
    // And as a user opens it: the file's tokenizer and the whole loader.
    let m = treespec::model::load(path.to_str().unwrap(), &Default::default()).unwrap();
    assert_eq!(m.decoder.config().vocab_size, 512);
}
