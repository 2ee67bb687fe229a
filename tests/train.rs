//! Training an MTP head: the unrolled training forward computes what the runtime head computes
//! (first pass and chain steps, same parameters, through the saved file), and a few hundred steps
//! on a tiny target's own answers lower the loss and raise agreement with the target.

mod common;

use candle_core::{DType, Device, Tensor};
use std::collections::BTreeSet;
use treespec::load::DrafterChoice;
use treespec::model::config::{Family, RopeStyle};
use treespec::model::decoder::{Batch, Decoder};
use treespec::model::mtp::{MtpHead, MtpLayout};
use treespec::model::weights::WeightStore;
use treespec::train::head::TrainableHead;
use treespec::train::{answers_batched, Example, TrainOptions, Trainer};

fn target(family: Family, style: RopeStyle, seed: u64) -> Decoder {
    let mut cfg = common::tiny_config(family, 61);
    cfg.rope_style = style;
    let w = common::random_weights(&cfg, seed);
    let mut store = WeightStore::from_tensors(w, &Device::Cpu);
    Decoder::load(&mut store, cfg, 64).unwrap()
}

/// A trainer of a fresh head for `t`: two chain steps, a learning rate for tiny models.
fn fresh_trainer(t: &Decoder) -> Trainer {
    let head = TrainableHead::new(t.config(), &Device::Cpu, 7, None).unwrap();
    let opts = TrainOptions {
        k: 2,
        lr: 3e-3,
        max_len: 64,
        ..Default::default()
    };
    Trainer::new(t, head, opts).unwrap()
}

/// One sequence as a batch of one.
fn one(seq: &[u32], answer_from: usize) -> [Example<'_>; 1] {
    [Example { seq, answer_from }]
}

/// The reference for `answers_batched`: the target's greedy answers decoded one sequence at a
/// time, each prompt followed by up to `max_new` tokens the target writes after it.
fn answers(
    target: &mut Decoder,
    prompts: &[Vec<u32>],
    max_new: usize,
    stops: &std::collections::BTreeSet<u32>,
    mut progress: impl FnMut(usize),
) -> treespec::Result<Vec<Vec<u32>>> {
    let mut out = Vec::with_capacity(prompts.len());
    for (i, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            continue;
        }
        target.reset();
        let mut seq = p.clone();
        let fit = target.context().saturating_sub(p.len() + 1).min(max_new);
        let mut logits = target
            .forward(&Batch::causal(p, 0))?
            .logits
            .ok_or_else(|| treespec::Error::InvalidArgument("the target gave no logits".into()))?;
        for _ in 0..fit {
            let next = treespec::model::decoder::argmax_rows(&logits)?[0];
            seq.push(next);
            if stops.contains(&next) {
                break;
            }
            let pos = seq.len() - 1;
            logits = target
                .forward(&Batch::causal(&[next], pos))?
                .logits
                .ok_or_else(|| {
                    treespec::Error::InvalidArgument("the target gave no logits".into())
                })?;
        }
        target.reset();
        out.push(seq);
        progress(i + 1);
    }
    Ok(out)
}

#[test]
fn the_training_forward_is_the_runtime_head() {
    for (family, style) in [
        (Family::Qwen2, RopeStyle::HalfSplit),
        (Family::Llama, RopeStyle::Interleaved),
        (Family::Qwen3, RopeStyle::HalfSplit),
    ] {
        let mut t = target(family, style, 3);
        let cfg = t.config().clone();
        let head = TrainableHead::new(&cfg, &Device::Cpu, 7, None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("head.safetensors");
        head.vars().save(&file).unwrap();
        let mut store = WeightStore::safetensors(&[file], &Device::Cpu).unwrap();
        let mut runtime = MtpHead::load(&mut store, &cfg, MtpLayout::MiMo, 0, 64).unwrap();

        let seq: Vec<u32> = (0..12).map(|i| (i * 7 + 3) % 61).collect();
        let last = cfg.n_layers - 1;
        let out = t
            .forward(
                &Batch::causal(&seq, 0)
                    .all_logits()
                    .with_hidden_layers(vec![last]),
            )
            .unwrap();
        let hidden = out.hidden[0].clone();
        let embeds = t.embed(&seq).unwrap();
        let (cos, sin) =
            treespec::model::decoder::rope_tables(&cfg, 32, None, &Device::Cpu).unwrap();
        // A batch of one sequence, its embeddings padded past its end.
        let pad = Tensor::zeros((3, cfg.hidden), DType::F32, &Device::Cpu).unwrap();
        let embeds = Tensor::cat(&[&embeds, &pad], 0).unwrap();
        let trained = head
            .forward(
                &hidden.unsqueeze(0).unwrap(),
                &embeds.unsqueeze(0).unwrap(),
                &cos,
                &sin,
                3,
            )
            .unwrap();
        let what = format!("{family:?}");
        common::assert_head_is_trained_forward(
            &mut runtime,
            &t,
            &hidden,
            &seq,
            &trained.outputs,
            &what,
        );
    }
}

/// Answers decoded side by side (prompts packed into one cache, each row seeing only its own
/// sequence) are the answers decoded one sequence at a time: with stop tokens ending some early,
/// prompts of different lengths, and a context of 64 that splits them into several groups.
#[test]
fn batched_answers_are_the_sequential_answers() {
    let mut t = target(Family::Qwen2, RopeStyle::HalfSplit, 9);
    let prompts: Vec<Vec<u32>> = (0..7u32)
        .map(|s| (0..3 + s % 4).map(|i| (s * 13 + i * 7 + 2) % 61).collect())
        .chain([vec![]])
        .collect();
    for stops in [BTreeSet::new(), BTreeSet::from([5u32, 17, 33])] {
        let one = answers(&mut t, &prompts, 12, &stops, |_| {}).unwrap();
        let mut calls = vec![];
        let many = answers_batched(&mut t, &prompts, 12, &stops, |n| calls.push(n)).unwrap();
        assert_eq!(many, one, "stops {stops:?}");
        assert!(
            calls.len() > 1,
            "the context splits the prompts into groups: {calls:?}"
        );
        assert_eq!(calls.last(), Some(&7));
    }
}

#[test]
fn training_lowers_the_loss_on_the_targets_own_answers() {
    let mut t = target(Family::Qwen2, RopeStyle::HalfSplit, 5);
    let prompts: Vec<Vec<u32>> = (0..6u32)
        .map(|s| (0..4).map(|i| (s * 11 + i * 5 + 1) % 61).collect())
        .collect();
    let data = answers(&mut t, &prompts, 24, &BTreeSet::new(), |_| {}).unwrap();
    assert!(data.iter().all(|s| s.len() == 28));
    let mut trainer = fresh_trainer(&t);
    let eval = |tr: &mut Trainer, t: &mut Decoder| -> (f32, f32) {
        let r = tr.step(t, &one(&data[5], 0), false).unwrap();
        (r.loss, r.agreement[0])
    };
    let (before, agree_before) = eval(&mut trainer, &mut t);
    for step in 0..150 {
        trainer
            .step(&mut t, &one(&data[step % 5], 0), true)
            .unwrap();
    }
    let (after, agree_after) = eval(&mut trainer, &mut t);
    eprintln!("held-out loss {before:.3} -> {after:.3}, step-1 agreement {agree_before:.2} -> {agree_after:.2}");
    assert!(
        after < before * 0.8,
        "held-out loss {after} against {before} before"
    );
    assert!(
        agree_after > agree_before + 0.3,
        "agreement {agree_before} -> {agree_after}"
    );
}

/// Only the predictions of answer tokens count: from `answer_from` on, each chain step predicts
/// the tokens after the answer's first (the root a draft starts from), however long the prompt.
#[test]
fn only_predictions_of_answer_tokens_count() {
    let mut t = target(Family::Qwen2, RopeStyle::HalfSplit, 5);
    let seq: Vec<u32> = (0..20u32).map(|i| (i * 7 + 3) % 61).collect();
    let mut trainer = fresh_trainer(&t);
    // Step j's row p predicts token p + j + 2; rows run while the target's distribution does.
    let all = trainer.step(&mut t, &one(&seq, 0), false).unwrap();
    assert_eq!(all.predicted, 19 + 18);
    // Answer from 17: tokens 18, 19 and the one after the sequence, at each chain step.
    let answer = trainer.step(&mut t, &one(&seq, 17), false).unwrap();
    assert_eq!(answer.predicted, 3 + 3);
    assert_eq!(answer.agreement.len(), 2);
    // An answer past the end (a prompt longer than the sequences trained on): nothing counts.
    let past = trainer.step(&mut t, &one(&seq, 40), false).unwrap();
    assert_eq!(past.predicted, 0);
    assert_eq!(past.agreement, vec![0.0, 0.0]);
}

/// Sequences trained side by side (padded to the longest) give each the figures it gets alone:
/// padding rows are neither seen by a real row nor counted.
#[test]
fn a_batch_gives_each_sequence_what_it_gets_alone() {
    let mut t = target(Family::Qwen2, RopeStyle::HalfSplit, 5);
    let long: Vec<u32> = (0..20u32).map(|i| (i * 7 + 3) % 61).collect();
    let short: Vec<u32> = (0..9u32).map(|i| (i * 5 + 1) % 61).collect();
    let mut trainer = fresh_trainer(&t);
    let a = trainer.step(&mut t, &one(&long, 4), false).unwrap();
    let b = trainer.step(&mut t, &one(&short, 2), false).unwrap();
    let both = [
        Example {
            seq: &long,
            answer_from: 4,
        },
        Example {
            seq: &short,
            answer_from: 2,
        },
    ];
    let ab = trainer.step(&mut t, &both, false).unwrap();
    assert_eq!(ab.predicted, a.predicted + b.predicted);
    assert_eq!(ab.tokens, 29);
    for j in 0..2 {
        assert_eq!(ab.counted[j], a.counted[j] + b.counted[j]);
        let want = (a.agreement[j] * a.counted[j] as f32 + b.agreement[j] * b.counted[j] as f32)
            / ab.counted[j] as f32;
        assert!((ab.agreement[j] - want).abs() < 1e-6, "step {j}");
    }
    // The loss: per step the mean over all counted rows of the batch.
    let per_step = |r: &treespec::train::StepReport| r.loss * 2.0;
    let want = (per_step(&a) * (a.counted[0] + a.counted[1]) as f32
        + per_step(&b) * (b.counted[0] + b.counted[1]) as f32)
        / (ab.counted[0] + ab.counted[1]) as f32;
    // (Equal counts per step in each sequence make the per-step weights those of the whole.)
    assert!(
        (per_step(&ab) - want).abs() < 1e-3,
        "{} vs {want}",
        per_step(&ab)
    );
}

/// The loss's gradient written out (`loss::soft_cross_entropy`) is autograd's through the LM
/// head, and its figures are the cross-entropy and agreement computed plainly: over the whole
/// vocabulary, and over a reduced one (rows of the LM head; a row none of whose targets is in it
/// adds no loss, and its agreement compares whole-vocabulary ids).
#[test]
fn the_written_out_gradient_is_autograds() {
    use treespec::train::loss::{soft_cross_entropy, RowTargets};
    let dev = Device::Cpu;
    let (rows, h, vocab, k) = (5usize, 8usize, 30usize, 4usize);
    let val = |n: usize, s: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 * 0.37 + s).sin()) * 0.9)
            .collect()
    };
    let o = candle_core::Var::from_vec(val(rows * h, 0.3), (rows, h), &dev).unwrap();
    let w_full = Tensor::from_vec(val(vocab * h, 1.1), (vocab, h), &dev).unwrap();
    // Whole vocabulary; then 12 of its tokens (targets as rows there), row 2's weights all 0.
    let sub: Vec<u32> = (0..12).map(|i| i * 2 + 3).collect();
    let sub_t = Tensor::from_vec(sub.clone(), 12, &dev).unwrap();
    for reduced in [false, true] {
        let (w, width) = if reduced {
            (w_full.index_select(&sub_t, 0).unwrap(), 12)
        } else {
            (w_full.clone(), vocab)
        };
        let ids: Vec<u32> = (0..rows * k)
            .map(|i| ((i * 7 + i / k) % width) as u32)
            .collect();
        let ids = Tensor::from_vec(ids, (rows, k), &dev).unwrap();
        let wt: Vec<f32> = (0..rows * k)
            .map(|i| {
                if reduced && i / k == 2 {
                    0.0
                } else {
                    [0.6f32, 0.25, 0.1, 0.05][i % k]
                }
            })
            .collect();
        let wt = Tensor::from_vec(wt, (rows, k), &dev).unwrap();
        let best: Vec<u32> = (0..rows as u32)
            .map(|r| if reduced { sub[r as usize * 2] } else { r * 3 })
            .collect();
        let best = Tensor::from_vec(best, rows, &dev).unwrap();
        let scale = 0.25;
        // Plain: the loss through autograd.
        let logits = o.as_tensor().matmul(&w.t().unwrap()).unwrap();
        let logp = candle_nn::ops::log_softmax(&logits, candle_core::D::Minus1).unwrap();
        let ce = (wt
            .mul(&logp.gather(&ids, 1).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            .neg())
        .unwrap();
        let grads = (&ce * scale).unwrap().backward().unwrap();
        let want = grads.get(o.as_tensor()).unwrap();
        let r = soft_cross_entropy(
            o.as_tensor(),
            &w,
            &RowTargets {
                ids: &ids,
                weights: &wt,
                best: &best,
                vocab: reduced.then_some(&sub_t),
            },
            scale,
        )
        .unwrap();
        assert!(
            common::max_abs_diff(&r.grad, want) < 1e-5,
            "reduced {reduced}"
        );
        let (a, b) = (
            r.ce_sum.to_scalar::<f32>().unwrap(),
            ce.to_scalar::<f32>().unwrap(),
        );
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        let top = logits
            .argmax(candle_core::D::Minus1)
            .unwrap()
            .to_vec1::<u32>()
            .unwrap();
        let top: Vec<u32> = top
            .iter()
            .map(|&t| if reduced { sub[t as usize] } else { t })
            .collect();
        let best = best.to_vec1::<u32>().unwrap();
        let agreed = best.iter().zip(&top).filter(|(a, b)| a == b).count();
        assert_eq!(r.agreed.to_scalar::<f32>().unwrap(), agreed as f32);
    }
}

/// The walk of greedy chains: a step accepts the leading hits from its root and emits them and
/// the target's token; the next root is past them.
#[test]
fn chains_walk_an_answer_as_decoding_does() {
    use treespec::train::{walk, Walk};
    let (t, f) = (true, false);
    let hits = vec![vec![t, t, f, t, f, f], vec![t, f, f, t, f, f]];
    // Root row 0: both right (3 tokens); root row 3: both right (3 tokens); end.
    assert_eq!(
        walk(&hits, 0, 6),
        Walk {
            steps: 2,
            emitted: 6
        }
    );
    // Root row 1: the first right, the second wrong (2 tokens); then root row 3 (3).
    assert_eq!(
        walk(&hits, 1, 6),
        Walk {
            steps: 2,
            emitted: 5
        }
    );
    // Nothing right: one token a step.
    let none = vec![vec![f; 4], vec![f; 4]];
    assert_eq!(walk(&none, 0, 4).tau(), 1.0);
    assert_eq!(walk(&none, 0, 4).steps, 4);
    // A later step's row past its end ends the chain there; roots run to the end given.
    let short = vec![vec![t, t, t], vec![t]];
    assert_eq!(
        walk(&short, 1, 4),
        Walk {
            steps: 2,
            emitted: 3
        }
    );
}

/// Held-out evaluation walks each answer: every answer token after the first is emitted once,
/// at most k + 1 a step.
#[test]
fn evaluation_reports_the_walk() {
    let mut t = target(Family::Qwen2, RopeStyle::HalfSplit, 5);
    let seq: Vec<u32> = (0..30u32).map(|i| (i * 7 + 3) % 61).collect();
    let mut trainer = fresh_trainer(&t);
    let r = trainer.step(&mut t, &one(&seq, 10), false).unwrap();
    let w = r.walk.expect("evaluation walks");
    assert!(w.steps > 0 && w.emitted >= w.steps && w.emitted <= 3 * w.steps);
    // The answer's tokens after its first, x_11..x_29, each emitted once: roots from row 9 (the
    // answer's first token, x_10) on, and no draft past the end.
    assert_eq!(w.emitted, 19, "{w:?}");
    assert!(trainer
        .step(&mut t, &one(&seq, 10), true)
        .unwrap()
        .walk
        .is_none());
}

/// The trainer's walk is what decoding measures: a head trained a little on a tiny target's own
/// answers, saved and loaded as a drafter, decodes a held-out prompt in `mtp` (chains of 3, no
/// threshold) in exactly the target passes and tokens the trainer's walk over the target's answer
/// to it counts.
#[test]
fn the_walk_is_what_mtp_decoding_measures() {
    // The whole vocabulary, and a reduced one (the 64 tokens the answers use most).
    for reduced in [false, true] {
        walk_against_decoding(reduced);
    }
}

fn walk_against_decoding(reduced: bool) {
    use treespec::engine::{Mode, Settings};
    let dir = tempfile::tempdir().unwrap();
    let gguf = common::write_tiny_gguf(dir.path(), "qwen2", 8);
    let spec = gguf.display().to_string();
    let opts = treespec::model::LoadOptions {
        context: 256,
        ..Default::default()
    };
    let s = |mode| Settings {
        mode,
        gamma: 3,
        min_chain_prob: 0.0,
        ..Settings::default()
    };
    let (mut e, _) =
        treespec::load::build_engine(&spec, DrafterChoice::None, None, s(Mode::Ar), 0, &opts)
            .unwrap();
    // The target's greedy answers (24 tokens, no stop) to a few prompts; the last held out.
    let mut data = vec![];
    for seed in 0..40u32 {
        let prompt: Vec<u32> = (0..5).map(|i| (seed * 37 + i * 11 + 3) % 250).collect();
        e.reset();
        let out = e.generate(&prompt, 24, |_| true).unwrap();
        if out.tokens.len() == 24 {
            data.push((prompt.len(), [prompt, out.tokens].concat()));
        }
        if data.len() == 8 {
            break;
        }
    }
    assert_eq!(data.len(), 8, "enough answers without a stop token");
    let mut m = treespec::load::load_model(&spec, &opts).unwrap();
    let head = TrainableHead::new(m.decoder.config(), &Device::Cpu, 7, None).unwrap();
    let topts = TrainOptions {
        k: 3,
        lr: 3e-3,
        max_len: 64,
        ..Default::default()
    };
    let mut trainer = Trainer::new(&m.decoder, head, topts).unwrap();
    if reduced {
        let answers = data[..7].iter().map(|(from, s)| &s[*from..]);
        let vocab = m.decoder.config().vocab_size;
        let ids =
            treespec::model::draft_vocab::most_frequent(answers, 64, vocab, m.tokenizer.stop_ids())
                .unwrap();
        assert_eq!(ids.len(), 64);
        trainer = trainer.with_draft_vocab(&m.decoder, ids).unwrap();
    }
    for step in 0..60 {
        let (from, seq) = &data[step % 7];
        trainer
            .step(&mut m.decoder, &one(seq, *from), true)
            .unwrap();
    }
    let (from, seq) = &data[7];
    let walked = trainer
        .step(&mut m.decoder, &one(seq, *from), false)
        .unwrap()
        .walk
        .unwrap();
    let file = dir.path().join("head.safetensors");
    trainer.save(&file).unwrap();
    let (mut e, _) = treespec::load::build_engine(
        &spec,
        DrafterChoice::Named(&file.display().to_string()),
        None,
        s(Mode::Mtp),
        0,
        &opts,
    )
    .unwrap();
    let out = e.generate(&seq[..*from], 24, |_| true).unwrap();
    assert_eq!(out.tokens, seq[*from..], "mtp emits the ar answer");
    eprintln!("reduced vocabulary: {reduced}");
    eprintln!(
        "walk {walked:?}; decoding: {} steps, {} tokens",
        out.stats.steps, out.stats.tokens
    );
    assert!(
        walked.emitted > walked.steps,
        "the head accepts something: {walked:?}"
    );
    assert_eq!(
        (out.stats.steps, out.stats.tokens),
        (walked.steps + 1, walked.emitted + 1),
        "decoding's target passes and tokens (with the prompt's) against the walk's"
    );
    // The head exported (f32 GGUF, its draft vocabulary beside it) drafts the same.
    use treespec::model::mtp_gguf;
    let exported = dir.path().join("head.gguf");
    let target = mtp_gguf::HeadTarget::of(&m.name, m.decoder.config());
    mtp_gguf::export(
        &file,
        &exported,
        candle_core::quantized::GgmlDType::F32,
        &target,
        "test",
    )
    .unwrap();
    let (mut e, _) = treespec::load::build_engine(
        &spec,
        DrafterChoice::Named(&exported.display().to_string()),
        None,
        s(Mode::Mtp),
        0,
        &opts,
    )
    .unwrap();
    let again = e.generate(&seq[..*from], 24, |_| true).unwrap();
    assert_eq!(again.tokens, out.tokens);
    assert_eq!(
        (again.stats.steps, again.stats.tokens),
        (out.stats.steps, out.stats.tokens)
    );
}

/// Batches: every sequence once, none over the budget unless alone, each of like lengths.
#[test]
fn batches_cover_every_sequence_within_the_budget() {
    let lens: Vec<usize> = (0..150).map(|i| 20 + (i * 37) % 200).collect();
    let order: Vec<usize> = (0..150).rev().collect();
    let got = treespec::train::batches(&order, |i| lens[i], 1000);
    let mut all: Vec<usize> = got.iter().flatten().copied().collect();
    all.sort();
    assert_eq!(all, (0..150).collect::<Vec<_>>());
    for b in &got {
        let longest = b.iter().map(|&i| lens[i]).max().unwrap();
        assert!(b.len() == 1 || b.len() * longest <= 1000, "{b:?}");
    }
    assert!(got.len() < 40, "{} batches", got.len());
}

/// A whole run on a tiny GGUF target: the head, its record and its data are written; a second run
/// resumes from the record and reuses the data; the head drafts for the target through
/// `--drafter FILE`, and greedy `mtp` with it emits exactly the `ar` tokens.
#[test]
fn a_run_writes_a_head_that_resumes_and_drafts() {
    use treespec::engine::Mode;
    use treespec::train::run::run;
    let dir = tempfile::tempdir().unwrap();
    let held_set = dir.path().join("unseen.jsonl");
    std::fs::write(
        &held_set,
        "{\"prompt\": \"never seen\", \"category\": \"a\"}\n\
         {\"prompt\": \"never heard\", \"category\": \"a\"}\n\
         {\"prompt\": \"nor this\", \"category\": \"b\"}\n",
    )
    .unwrap();
    let mut cfg = common::tiny_train_run(dir.path(), 6);
    cfg.eval = Some(vec![held_set]);
    let (gguf, out) = (std::path::PathBuf::from(&cfg.target), cfg.out.clone());
    let first = run(&cfg).unwrap();
    assert_eq!(first.step, 6);
    assert_eq!((first.sequences, first.held_out), (3, 1));
    assert_eq!(first.held_out_agreement.len(), 2);
    let a = &first.held_out_agreement;
    assert!((first.simulated_tau - (1.0 + a[0] + a[0] * a[1])).abs() < 1e-6);
    // The evaluation set: measured whole and by category, its answers kept beside the head.
    assert_eq!(first.eval.len(), 1);
    assert_eq!(first.eval[0].set, "unseen");
    assert_eq!(first.eval[0].agreement.len(), 2);
    let by: Vec<(&str, usize)> = first.eval[0]
        .by_category
        .iter()
        .map(|c| (c.set.as_str(), c.agreement.len()))
        .collect();
    assert_eq!(by, [("unseen/a", 2), ("unseen/b", 2)]);
    assert!(dir.path().join("head.safetensors.eval.json").is_file());
    let data = dir.path().join("head.safetensors.data.json");
    let written = std::fs::metadata(&data).unwrap().modified().unwrap();
    cfg.steps = 9;
    let second = run(&cfg).unwrap();
    assert_eq!(second.step, 9, "resumed from step 6");
    // The best checkpoint by held-out walked tau kept beside the head, with its record.
    let best = treespec::train::run::best_path(&out);
    let best_record = treespec::train::run::best_record(&out).expect("the best one's record");
    assert!(best.is_file());
    assert!(std::path::Path::new(&format!("{}.json", best.display())).is_file());
    assert!(best_record.walked_tau >= first.walked_tau.max(second.walked_tau));
    assert!(
        [0, 6, 9].contains(&best_record.step),
        "{}",
        best_record.step
    );
    assert_eq!(
        std::fs::metadata(&data).unwrap().modified().unwrap(),
        written
    );

    // `--init`: a fresh run from the exported head (f32) starts where that head is.
    use treespec::model::mtp_gguf;
    let m = treespec::load::load_model(&gguf.display().to_string(), &cfg.load).unwrap();
    let exported = dir.path().join("head.gguf");
    let target = mtp_gguf::HeadTarget::of(&m.name, m.decoder.config());
    mtp_gguf::export(
        &out,
        &exported,
        candle_core::quantized::GgmlDType::F32,
        &target,
        "test",
    )
    .unwrap();
    let again = tempfile::tempdir().unwrap();
    let mut from = cfg.clone();
    from.out = again.path().join("head.safetensors");
    from.init = Some(exported.clone());
    from.steps = 0;
    let started = run(&from).unwrap();
    assert_eq!(started.init, Some(exported.display().to_string()));
    assert!(
        (started.held_out_loss - second.held_out_loss).abs() < 1e-4,
        "{} against {}",
        started.held_out_loss,
        second.held_out_loss
    );
    from.init = Some(gguf.clone());
    let refused = run(&from).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        refused.contains("without `mtp.0.input_proj.weight`"),
        "{refused}"
    );

    common::head_drafts_as_ar(&gguf, &out, "MTP head", &[Mode::Mtp]);
}

/// `--self-prompts N`: the target writes N prompts itself, answers them, and trains on both; the
/// data are written once (a resumed run reads them back) and the same seed writes the same
/// prompts; the bundled benchmark prompts are left out.
#[test]
fn self_written_prompts_are_written_once_and_trained_on() {
    use treespec::train::run::run;
    // The run fixture's target, with self-written prompts only.
    let make = |dir: &std::path::Path, steps: usize| {
        let mut cfg = common::tiny_train_run(dir, steps);
        cfg.opts.max_len = 160;
        cfg.data = vec![];
        cfg.self_prompts = 3;
        cfg.answer_tokens = 4;
        cfg.seed = 5;
        cfg.load.context = 256;
        cfg
    };
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = run(&make(a.path(), 2)).unwrap();
    assert_eq!(first.sequences, 3);
    assert_eq!(first.data, vec!["self-written: 3".to_string()]);
    let data = a.path().join("head.safetensors.data.json");
    let written = std::fs::metadata(&data).unwrap().modified().unwrap();
    let resumed = run(&make(a.path(), 3)).unwrap();
    assert_eq!(resumed.step, 3);
    assert_eq!(
        std::fs::metadata(&data).unwrap().modified().unwrap(),
        written,
        "the data are not written again"
    );
    run(&make(b.path(), 1)).unwrap();
    let read = |p: &std::path::Path| {
        let v: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(p.join("head.safetensors.data.json")).unwrap(),
        )
        .unwrap();
        v["sequences"].clone()
    };
    assert_eq!(read(a.path()), read(b.path()), "same seed, same prompts");
    // Another seed: a resume refused (its data would be other prompts); a new run beside a's
    // data file (no checkpoint) writes its own instead of taking a's.
    let mut other_seed = make(a.path(), 4);
    other_seed.seed = 6;
    let e = run(&other_seed).unwrap_err().to_string();
    assert!(e.contains("--seed 5") && e.contains("not 6"), "{e}");
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(&data, d.path().join("head.safetensors.data.json")).unwrap();
    let mut beside = make(d.path(), 1);
    beside.seed = 6;
    run(&beside).unwrap();
    assert_ne!(
        read(a.path()),
        read(d.path()),
        "another seed, other prompts"
    );
    // A data file from before the seed was recorded is taken for any seed.
    let e = tempfile::tempdir().unwrap();
    let mut unseeded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&data).unwrap()).unwrap();
    unseeded.as_object_mut().unwrap().remove("seed").unwrap();
    std::fs::write(
        e.path().join("head.safetensors.data.json"),
        unseeded.to_string(),
    )
    .unwrap();
    let mut old = make(e.path(), 1);
    old.seed = 6;
    run(&old).unwrap();
    assert_eq!(read(a.path()), read(e.path()), "an unseeded file reused");

    // `--extra-data`: an earlier run's answers trained on too, the held-out ones still this
    // run's own; a file of another target's answers refused.
    let c = tempfile::tempdir().unwrap();
    let mut more = make(c.path(), 1);
    more.seed = 6;
    // Earlier answers: a's three, six times over (18: with this run's 3, 21 in all, of which
    // a tenth would be 2; the held-out ones are a tenth of this run's own, 1).
    let mut earlier: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&data).unwrap()).unwrap();
    for key in ["sequences", "answer_from"] {
        let one = earlier[key].as_array().unwrap().clone();
        earlier[key] = one.iter().cycle().take(6 * one.len()).cloned().collect();
    }
    let earlier_path = c.path().join("earlier.data.json");
    std::fs::write(&earlier_path, earlier.to_string()).unwrap();
    more.extra_data = vec![earlier_path.clone()];
    let r = run(&more).unwrap();
    assert_eq!((r.sequences, r.held_out), (21, 1));
    assert_eq!(
        r.data.last().unwrap(),
        &format!("earlier answers: {} (18 sequences)", earlier_path.display())
    );
    // Resumed without them: refused (the data would change under the checkpoint); this run's
    // own data file as an earlier run's: refused.
    more.steps = 2;
    more.extra_data = vec![];
    let refused = run(&more).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        refused.contains("resume it with the same data"),
        "{refused}"
    );
    more.extra_data = vec![c.path().join("head.safetensors.data.json")];
    let refused = run(&more).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("this run's own data file"), "{refused}");
    // An earlier run over the same prompts: its answer to the held-out prompt is left out.
    let f = tempfile::tempdir().unwrap();
    let twin = f.path().join("twin.data.json");
    std::fs::copy(c.path().join("head.safetensors.data.json"), &twin).unwrap();
    let mut same = make(f.path(), 1);
    same.seed = 6;
    same.extra_data = vec![twin.clone()];
    let r = run(&same).unwrap();
    assert_eq!((r.sequences, r.held_out), (5, 1));
    let mut other: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&data).unwrap()).unwrap();
    other["target"] = "another-model".into();
    let foreign = c.path().join("foreign.data.json");
    std::fs::write(&foreign, other.to_string()).unwrap();
    more.extra_data = vec![foreign];
    let refused = run(&more).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("answers of another-model"), "{refused}");

    // `--self-prompt-system`: the prompts written under the given system prompts instead of the
    // built-in domains, recorded; data written under other system prompts are not reused.
    let e = tempfile::tempdir().unwrap();
    let mut steered = make(e.path(), 1);
    steered.self_prompt_systems = vec!["You write poems.".into(), "You play a pirate.".into()];
    let r = run(&steered).unwrap();
    assert_eq!(r.sequences, 3);
    assert!(r
        .data
        .contains(&"self-written under: You play a pirate.".to_string()));
    let steered_data = e.path().join("head.safetensors.data.json");
    std::fs::copy(&data, &steered_data).unwrap();
    let written = std::fs::metadata(&steered_data)
        .unwrap()
        .modified()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    run(&steered).unwrap();
    assert_ne!(
        std::fs::metadata(&steered_data)
            .unwrap()
            .modified()
            .unwrap(),
        written,
        "data of the built-in domains are written again"
    );
    steered.self_prompts = 0;
    let refused = run(&steered)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(refused.contains("--self-prompts N"), "{refused}");
    // No prompts named and none to write: refused, never the bundled (benchmark) prompts.
    steered.self_prompt_systems.clear();
    let refused = run(&steered)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        refused.contains("nothing to train on") && refused.contains("--data FILE"),
        "{refused}"
    );
}

/// `--turns 2`: each conversation goes on with a follow-up the target writes as the user and
/// its greedy answer (the one-at-a-time reference), a sequence a turn trained on from its own
/// answer, the first turn as a one-turn run has it; stopped where there is no room; recorded,
/// reused on resume, refused out of range.
#[test]
fn conversations_go_on_for_their_turns() {
    use treespec::model::chat_template::{ChatMessage, Role};
    use treespec::train::run::run;
    let make = |dir: &std::path::Path, turns: usize| {
        let mut cfg = common::tiny_train_run(dir, 1);
        cfg.opts.max_len = 256;
        cfg.answer_tokens = 4;
        cfg.seed = 3;
        cfg.load.context = 256;
        cfg.turns = turns;
        cfg
    };
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    run(&make(one.path(), 1)).unwrap();
    let cfg = make(two.path(), 2);
    let r = run(&cfg).unwrap();
    assert!(r.data.contains(&"turns: 2".to_string()), "{:?}", r.data);
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(
            &std::fs::read_to_string(p.join("head.safetensors.data.json")).unwrap(),
        )
        .unwrap()
    };
    let (d1, d2) = (read(one.path()), read(two.path()));
    assert_eq!(d2["turns"], 2);
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let at = |d: &serde_json::Value, key: &str, i: usize| d[key][i].as_u64().unwrap() as usize;
    let follow_ups: Vec<String> = d2["follow_ups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    assert!(!follow_ups.is_empty(), "no conversation went on");
    // A sequence a turn, a conversation's turns side by side.
    let n = d2["sequences"].as_array().unwrap().len();
    assert_eq!(
        (r.sequences, n),
        (3 + follow_ups.len(), 3 + follow_ups.len())
    );
    let mut m = treespec::load::load_model(&cfg.target, &cfg.load).unwrap();
    let stops = m.tokenizer.stop_ids().clone();
    let users = ["abc", "hello there", "xyz"];
    let mut follow_up = follow_ups.iter();
    let mut k = 0;
    for (i, user) in users.iter().enumerate() {
        // The first turn as a one-turn run has it.
        let s1 = ids(&d1["sequences"][i]);
        assert_eq!(
            ids(&d2["sequences"][k]),
            s1,
            "conversation {i}'s first turn"
        );
        assert_eq!(at(&d2, "answer_from", k), at(&d1, "answer_from", i));
        assert_eq!(at(&d2, "turn_of", k), 1);
        k += 1;
        if k == n || at(&d2, "turn_of", k) == 1 {
            continue;
        }
        // Its second: the conversation as the template renders it, then the greedy answer,
        // trained on from that answer.
        assert_eq!(at(&d2, "turn_of", k), 2);
        let from = at(&d1, "answer_from", i);
        let mut answer = &s1[from..];
        if answer.last().is_some_and(|t| stops.contains(t)) {
            answer = &answer[..answer.len() - 1];
        }
        let messages = [
            ChatMessage::new(Role::User, user.to_string()),
            ChatMessage::new(Role::Assistant, m.tokenizer.decode(answer).unwrap()),
            ChatMessage::new(Role::User, follow_up.next().unwrap().clone()),
        ];
        let text = m.template.render(&messages, true).unwrap();
        let prompt = m.tokenizer.encode(&text, true).unwrap();
        let expected = answers(
            &mut m.decoder,
            std::slice::from_ref(&prompt),
            4,
            &stops,
            |_| (),
        )
        .unwrap();
        let s2 = ids(&d2["sequences"][k]);
        assert_eq!(
            s2, expected[0],
            "conversation {i}: the follow-up's greedy answer"
        );
        assert_eq!(at(&d2, "answer_from", k), prompt.len());
        k += 1;
    }
    assert_eq!(k, n);
    // Held out: the last conversation, whole.
    let last = (0..n).rev().find(|&i| at(&d2, "turn_of", i) == 1).unwrap();
    assert_eq!(r.held_out, n - last);
    assert!(
        follow_up.next().is_none(),
        "a follow-up for each conversation that went on"
    );
    // Three turns in a context with no room for a third (the tiny model's 256 tokens): the
    // conversations stop where two turns left them, the same draws as the two-turn run's.
    let three = tempfile::tempdir().unwrap();
    run(&make(three.path(), 3)).unwrap();
    let d3 = read(three.path());
    assert_eq!(d3["sequences"], d2["sequences"]);
    assert_eq!(d3["follow_ups"], d2["follow_ups"]);
    // Resumed with the same turns: the data read back, not written again; with other turns:
    // refused (the data would change under the checkpoint) before any answer is generated, the
    // data file left as it was.
    let data = two.path().join("head.safetensors.data.json");
    let written = std::fs::metadata(&data).unwrap().modified().unwrap();
    let mut more = make(two.path(), 2);
    more.steps = 2;
    assert_eq!(run(&more).unwrap().step, 2);
    assert_eq!(
        std::fs::metadata(&data).unwrap().modified().unwrap(),
        written
    );
    more.turns = 1;
    more.steps = 3;
    let refused = run(&more).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        refused.contains("resume it with the same data"),
        "{refused}"
    );
    assert_eq!(
        std::fs::metadata(&data).unwrap().modified().unwrap(),
        written
    );
    for turns in [0, 5] {
        let refused = run(&make(tempfile::tempdir().unwrap().path(), turns))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(refused.contains(&format!("--turns {turns}")), "{refused}");
    }
}

/// A prompt file with a prompt that leaves no room for an answer in the target's context: that
/// prompt is left out (and said), the others trained on, not the whole run refused.
#[test]
fn a_prompt_longer_than_the_context_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::tiny_train_run(dir.path(), 1);
    let long = "word ".repeat(200);
    std::fs::write(
        &cfg.data[0],
        format!("{{\"prompt\": \"abc\"}}\n{{\"prompt\": \"{long}\"}}\n{{\"prompt\": \"xyz\"}}\n"),
    )
    .unwrap();
    cfg.answer_tokens = 4;
    let r = treespec::train::run::run(&cfg).unwrap();
    assert_eq!(r.sequences, 2);
}
