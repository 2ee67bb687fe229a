//! The trainable DFlash drafter (`treespec::train::dflash`): what it saves loads as the
//! runtime's drafter and drafts exactly what its own forward pass computes (the training sees
//! the blocks inference drafts), and its steps lower the loss on the target's own tokens.

mod common;

use candle_core::{Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use treespec::draft::dflash::DFlashShape;
use treespec::draft::DFlashDrafter;
use treespec::model::config::Family;
use treespec::model::decoder::{rope_tables, Batch, Decoder};
use treespec::train::dflash::{Blocks, TrainableDFlash};
use treespec::train::loss::RowTargets;

const CONTEXT: usize = 64;
const BLOCK: usize = 4;

/// The tiny target, its tokens (its own greedy continuation of a prompt), a drafter's shape
/// for it, its hidden states of the drafter's layers side by side for every position, a
/// drafter of that shape and its rotation tables.
struct Fixture {
    target: Decoder,
    tokens: Vec<u32>,
    shape: DFlashShape,
    features: Tensor,
    drafter: TrainableDFlash,
    cos: Tensor,
    sin: Tensor,
}

impl Fixture {
    fn new(seed: u64) -> Self {
        let mut target = common::tiny_decoder(Family::Qwen2, 3, CONTEXT);
        let cfg = target.config().clone();
        let shape = DFlashShape {
            layers: 2,
            block_size: BLOCK,
            target_layer_ids: vec![0, cfg.n_layers - 1],
            mask_token_id: cfg.vocab_size as u32 - 1,
        };
        let mut tokens = vec![5u32, 17, 2, 40];
        while tokens.len() < 24 {
            target.reset();
            let out = target
                .forward(&Batch::causal(&tokens, 0).all_logits())
                .unwrap();
            let last = out.logits.unwrap().narrow(0, tokens.len() - 1, 1).unwrap();
            tokens.push(last.argmax(1).unwrap().to_vec1::<u32>().unwrap()[0]);
        }
        target.reset();
        let out = target
            .forward(&Batch::causal(&tokens, 0).with_hidden_layers(shape.target_layer_ids.clone()))
            .unwrap();
        let features = Tensor::cat(&out.hidden, 1).unwrap();
        target.reset();
        let drafter = TrainableDFlash::new(&cfg, &shape, &Device::Cpu, seed, None).unwrap();
        let (cos, sin) = rope_tables(&drafter.config().model, CONTEXT, None, &Device::Cpu).unwrap();
        Fixture {
            target,
            tokens,
            shape,
            features,
            drafter,
            cos,
            sin,
        }
    }

    /// Each block's root and mask tokens, embedded by the target, block by block.
    fn embeds(&self, anchors: &[usize]) -> Tensor {
        let mask = self.shape.mask_token_id;
        let ids: Vec<u32> = anchors
            .iter()
            .flat_map(|&a| {
                std::iter::once(self.tokens[a]).chain(std::iter::repeat_n(mask, BLOCK - 1))
            })
            .collect();
        self.target.embed(&ids).unwrap()
    }

    fn blocks<'a>(&'a self, embeds: &'a Tensor, anchors: &'a [usize]) -> Blocks<'a> {
        Blocks {
            features: &self.features,
            embeds,
            anchors,
            cos: &self.cos,
            sin: &self.sin,
        }
    }
}

#[test]
fn a_saved_drafter_drafts_what_the_trainers_forward_computes() {
    let f = Fixture::new(11);
    let (target, tokens, features, d) = (&f.target, &f.tokens, &f.features, &f.drafter);
    let anchors = [3usize, 9, 15];
    let embeds = f.embeds(&anchors);
    let blocks = f.blocks(&embeds, &anchors);
    let rows = d.forward(&blocks).unwrap();
    assert_eq!(
        rows.dims(),
        &[anchors.len() * (BLOCK - 1), target.config().hidden]
    );
    let trained = target.draft_lm_head(&rows).unwrap();

    let dir = tempfile::tempdir().unwrap();
    d.save_dir(dir.path()).unwrap();
    for (i, &a) in anchors.iter().enumerate() {
        let mut drafter =
            DFlashDrafter::load_dir(dir.path(), &Device::Cpu, CONTEXT, false).unwrap();
        drafter
            .add_features(features.narrow(0, 0, a).unwrap())
            .unwrap();
        let drafted = drafter.draft(tokens[a], target).unwrap();
        let ours = trained.narrow(0, i * (BLOCK - 1), BLOCK - 1).unwrap();
        let diff = common::max_abs_diff(&drafted, &ours);
        assert!(
            diff < 1e-4,
            "block at {a}: the runtime's draft differs by {diff}"
        );
    }
}

#[test]
fn training_steps_lower_the_loss_on_the_targets_tokens() {
    let f = Fixture::new(12);
    let (target, tokens, d) = (&f.target, &f.tokens, &f.drafter);
    let anchors: Vec<usize> = (1..tokens.len() - BLOCK + 1).collect();
    let embeds = f.embeds(&anchors);
    let blocks = f.blocks(&embeds, &anchors);
    // Hard targets: the target's own next tokens (its greedy answer).
    let next: Vec<u32> = anchors
        .iter()
        .flat_map(|&a| (1..BLOCK).map(move |dd| a + dd))
        .map(|p| tokens[p])
        .collect();
    let n = next.len();
    let ids = Tensor::from_vec(next.clone(), (n, 1), &Device::Cpu).unwrap();
    let weights = Tensor::ones((n, 1), candle_core::DType::F32, &Device::Cpu).unwrap();
    let best = Tensor::from_vec(next, n, &Device::Cpu).unwrap();
    let targets = RowTargets {
        ids: &ids,
        weights: &weights,
        best: &best,
        vocab: None,
    };
    let lm_head = target.lm_head_dense().unwrap();
    let mut opt = AdamW::new(
        d.vars().all_vars(),
        ParamsAdamW {
            lr: 3e-3,
            weight_decay: 0.0,
            ..Default::default()
        },
    )
    .unwrap();
    let (before, _) = d.step(None, &blocks, &lm_head, &targets).unwrap();
    let accepted = |d: &TrainableDFlash| -> usize {
        let l = d.loss(&blocks, &lm_head, &targets, 1.0).unwrap();
        let accepted = l.accepted().unwrap();
        assert_eq!(accepted.len(), anchors.len());
        accepted.iter().sum()
    };
    let accepted_before = accepted(d);
    for _ in 0..40 {
        d.step(Some(&mut opt), &blocks, &lm_head, &targets).unwrap();
    }
    let (after, agreed) = d.step(None, &blocks, &lm_head, &targets).unwrap();
    assert!(
        after < 0.5 * before,
        "cross-entropy {before} -> {after} after 40 steps"
    );
    assert!(agreed > 0.5 * n as f32, "{agreed} of {n} rows agree");
    let accepted_after = accepted(d);
    assert!(
        accepted_after > accepted_before + anchors.len(),
        "depths a greedy verification accepts: {accepted_before} -> {accepted_after} over {} blocks",
        anchors.len()
    );
}

#[test]
fn a_dflash_run_trains_saves_and_drafts_exactly_ar() {
    use treespec::engine::Mode;
    use treespec::train::dflash_run::{self, DFlashRun};
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::tiny_train_run(dir.path(), 30);
    cfg.out = dir.path().join("dflash/");
    cfg.answer_tokens = 12;
    let spec = DFlashRun::parse("1x4").unwrap();
    let r = dflash_run::run(&cfg, &spec).unwrap();
    assert_eq!((r.step, r.layers, r.block_size), (30, 1, 4));
    assert!(r.walked_tau >= 1.0 && r.held_out_loss.is_finite(), "{r:?}");
    // The record beside it, the data, and a directory the runtime loads.
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("dflash.json")).unwrap())
            .unwrap();
    assert_eq!(record["step"], 30);
    assert!(dir.path().join("dflash.data.json").exists());
    let gguf = std::path::PathBuf::from(&cfg.target);
    common::head_drafts_as_ar(&gguf, &cfg.out, "DFlash", &[Mode::Linear, Mode::Tree]);
}

#[test]
fn dflash_run_specs_are_checked() {
    use treespec::train::dflash_run::DFlashRun;
    assert_eq!(
        DFlashRun::parse("2x16").unwrap(),
        DFlashRun {
            layers: 2,
            block_size: 16,
            mask_token: None,
            from_target: false,
            loss_decay: None,
        }
    );
    // The loss's depth decay: the reference trainers' gammas, exp(-(d - 1) / gamma) a depth.
    use treespec::train::dflash_run::{default_loss_decay, depth_weight};
    assert_eq!([8, 10, 16].map(default_loss_decay), [4.0, 5.0, 7.0]);
    assert_eq!(default_loss_decay(4), 1.8);
    assert_eq!(depth_weight(1, 7.0), 1.0);
    assert!((depth_weight(3, 7.0) - (-2.0f64 / 7.0).exp()).abs() < 1e-12);
    assert_eq!(depth_weight(9, 0.0), 1.0);
    for bad in ["", "2", "0x16", "2x1", "x16", "2x", "twox16"] {
        let e = DFlashRun::parse(bad).unwrap_err().to_string();
        assert!(e.contains("LAYERSxBLOCK"), "{bad}: {e}");
    }
}

#[test]
fn dflash_runs_check_their_layers_and_never_overwrite_a_drafter() {
    use treespec::train::dflash_run::{self, parse_layers, DFlashRun};
    assert_eq!(parse_layers("3", 8).unwrap(), vec![3]);
    assert_eq!(parse_layers("1, 4,7", 8).unwrap(), vec![1, 4, 7]);
    for (bad, says) in [
        ("8", "has 8 layers"),
        ("4,2", "ascending"),
        ("2,2", "ascending"),
        ("a", "not a layer number"),
        ("", "not a layer number"),
    ] {
        let e = parse_layers(bad, 8).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::tiny_train_run(dir.path(), 0);
    cfg.out = dir.path().join("dflash");
    // A layer the target lacks is refused before any answer is generated.
    cfg.feature_layers = Some("0,9".into());
    let e = dflash_run::run(&cfg, &DFlashRun::parse("1x4").unwrap()).unwrap_err();
    assert!(e.to_string().contains("not a layer 9"), "{e}");
    assert!(!dir.path().join("dflash.data.json").exists());
    // A directory holding a drafter without a run's record is not trained over.
    std::fs::create_dir_all(&cfg.out).unwrap();
    std::fs::write(cfg.out.join("model.safetensors"), b"trained").unwrap();
    cfg.feature_layers = None;
    let e = dflash_run::run(&cfg, &DFlashRun::parse("1x4").unwrap()).unwrap_err();
    assert!(e.to_string().contains("without its record"), "{e}");
    assert_eq!(
        std::fs::read(cfg.out.join("model.safetensors")).unwrap(),
        b"trained"
    );
}

#[test]
fn the_default_mask_token_is_the_last_with_an_embedding() {
    use treespec::model::weights::WeightStore;
    let f = Fixture::new(1);
    let last = f.target.config().vocab_size - 1;
    let m = treespec::train::dflash_run::default_mask_token(&f.target).unwrap();
    assert_eq!(m as usize, last);
    // A padded vocabulary: its last rows zero (here the last 300, past one look-back chunk).
    let cfg = common::tiny_config(Family::Qwen2, 400);
    let mut w = common::random_weights(&cfg, 3);
    let e = &w["token_embd.weight"];
    let zeros = Tensor::zeros((300, cfg.hidden), e.dtype(), e.device()).unwrap();
    let padded = Tensor::cat(&[&e.narrow(0, 0, 100).unwrap(), &zeros], 0).unwrap();
    w.insert("token_embd.weight".into(), padded);
    let mut store = WeightStore::from_tensors(w, &Device::Cpu);
    let t = Decoder::load(&mut store, cfg, CONTEXT).unwrap();
    assert_eq!(
        treespec::train::dflash_run::default_mask_token(&t).unwrap(),
        99
    );
}

#[test]
fn a_drafter_from_the_target_starts_as_its_last_layers() {
    let cfg = common::tiny_config(Family::Qwen2, 61);
    let w = common::random_weights(&cfg, 3);
    let shape = DFlashShape {
        layers: 1,
        block_size: BLOCK,
        target_layer_ids: vec![0],
        mask_token_id: 60,
    };
    let source = |name: &str| w.get(name).cloned();
    let copied = TrainableDFlash::new(&cfg, &shape, &Device::Cpu, 5, Some(&source)).unwrap();
    let random = TrainableDFlash::new(&cfg, &shape, &Device::Cpu, 5, None).unwrap();
    let get =
        |d: &TrainableDFlash, name: &str| d.vars().data().lock().unwrap()[name].as_tensor().clone();
    let last = cfg.n_layers - 1;
    for (ours, theirs) in [
        ("layers.0.self_attn.q_proj.weight", "attn_q.weight"),
        ("layers.0.mlp.down_proj.weight", "ffn_down.weight"),
        ("layers.0.input_layernorm.weight", "attn_norm.weight"),
    ] {
        let want = &w[&format!("blk.{last}.{theirs}")];
        assert_eq!(
            common::max_abs_diff(&get(&copied, ours), want),
            0.0,
            "{ours}"
        );
        assert!(
            common::max_abs_diff(&get(&random, ours), want) > 0.0,
            "{ours}"
        );
    }
    // What the target has no tensor for keeps the random start.
    assert_eq!(
        common::max_abs_diff(&get(&copied, "fc.weight"), &get(&random, "fc.weight")),
        0.0
    );
}

#[test]
fn a_dflash_run_resumes_keeps_its_best_and_measures_evaluation_sets() {
    use treespec::train::dflash_run::{self, best_dir, DFlashRun};
    let dir = tempfile::tempdir().unwrap();
    let unseen = dir.path().join("unseen.jsonl");
    std::fs::write(
        &unseen,
        "{\"prompt\": \"never seen\", \"category\": \"a\"}\n\
         {\"prompt\": \"never heard\", \"category\": \"b\"}\n",
    )
    .unwrap();
    let mut cfg = common::tiny_train_run(dir.path(), 4);
    cfg.out = dir.path().join("dflash");
    cfg.answer_tokens = 12;
    cfg.eval = Some(vec![unseen]);
    let spec = DFlashRun::parse("1x4").unwrap();
    // A gamma that is not one is refused before any answer is generated.
    for bad in [-1.0, f64::NAN] {
        let spec = DFlashRun {
            loss_decay: Some(bad),
            ..DFlashRun::parse("1x4").unwrap()
        };
        let e = dflash_run::run(&cfg, &spec).unwrap_err().to_string();
        assert!(e.contains("--loss-decay"), "{e}");
        assert!(!dir.path().join("dflash.data.json").exists());
    }
    let first = dflash_run::run(&cfg, &spec).unwrap();
    assert_eq!((first.step, first.loss_decay), (4, 1.8));
    let steps = |r: &dflash_run::DFlashRecord| r.curve.iter().map(|p| p.step).collect::<Vec<_>>();
    assert_eq!(steps(&first), [0, 4]);
    // The evaluation set, whole and by category, never trained on.
    assert_eq!(first.eval.len(), 1);
    assert_eq!(first.eval[0].set, "unseen");
    let by: Vec<&str> = first.eval[0]
        .by_category
        .iter()
        .map(|c| c.set.as_str())
        .collect();
    assert_eq!(by, ["unseen/a", "unseen/b"]);
    assert!(first.eval[0].walked_tau >= 1.0);
    let weights = cfg.out.join("model.safetensors");
    let at_4 = std::fs::read(&weights).unwrap();
    // Run again at its last step: the checkpoint read back and measured as it was, not trained.
    let again = dflash_run::run(&cfg, &spec).unwrap();
    assert_eq!((again.step, steps(&again)), (4, vec![0, 4]));
    assert_eq!(again.curve, first.curve);
    assert_eq!(again.eval[0].loss, first.eval[0].loss);

    // Resumed to step 8 (the directory named with a slash): the curve goes on from the record,
    // the weights move on from step 4's.
    cfg.steps = 8;
    cfg.out = dir.path().join("dflash/");
    let second = dflash_run::run(&cfg, &spec).unwrap();
    assert_eq!(second.step, 8);
    assert_eq!(steps(&second), [0, 4, 8]);
    assert_eq!(second.curve[..2], first.curve[..]);
    assert_ne!(std::fs::read(&weights).unwrap(), at_4);
    // The best record so far, a drafter of its own the runtime loads.
    let best: dflash_run::DFlashRecord = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("dflash.best.json")).unwrap(),
    )
    .unwrap();
    let best_tau = second
        .curve
        .iter()
        .map(|p| p.walked_tau)
        .fold(0.0, f32::max);
    assert_eq!(best.walked_tau, best_tau);
    let best_weights = std::fs::read(best_dir(weights.parent().unwrap()).join("model.safetensors"));
    match best.step {
        4 => assert_eq!(best_weights.unwrap(), at_4),
        8 => assert_eq!(best_weights.unwrap(), std::fs::read(&weights).unwrap()),
        _ => assert!(best_weights.is_ok()),
    }
    let gguf = std::path::PathBuf::from(&cfg.target);
    let t = treespec::load::load_model(&gguf.display().to_string(), &cfg.load).unwrap();
    treespec::load::load_dflash(
        &best_dir(weights.parent().unwrap()),
        &t,
        &Default::default(),
    )
    .unwrap();

    // Another drafter, mask token, start or data than the checkpoint's: refused, untouched.
    let trained = std::fs::read(&weights).unwrap();
    cfg.steps = 12;
    for (spec, says) in [
        (DFlashRun::parse("1x8").unwrap(), "--dflash 1x4"),
        (
            DFlashRun {
                mask_token: Some(3),
                ..spec.clone()
            },
            "--mask-token",
        ),
        (
            DFlashRun {
                from_target: true,
                ..spec.clone()
            },
            "without --dflash-from-target",
        ),
    ] {
        let e = dflash_run::run(&cfg, &spec).unwrap_err().to_string();
        assert!(e.contains(says), "{says}: {e}");
    }
    cfg.self_prompts = 2;
    let e = dflash_run::run(&cfg, &spec).unwrap_err().to_string();
    assert!(e.contains("same data"), "{e}");
    assert_eq!(std::fs::read(&weights).unwrap(), trained);
    // The drafter removed, its record left beside: a fresh run on other data, not a resume.
    std::fs::remove_dir_all(&cfg.out).unwrap();
    cfg.self_prompts = 0;
    cfg.data = vec![dir.path().join("other.jsonl")];
    std::fs::write(
        &cfg.data[0],
        "{\"prompt\": \"other\"}\n{\"prompt\": \"words\"}\n",
    )
    .unwrap();
    cfg.steps = 1;
    let fresh = dflash_run::run(&cfg, &spec).unwrap();
    assert_eq!(steps(&fresh), [0, 1]);
}
