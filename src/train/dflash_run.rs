//! A whole DFlash training run (`treespec train-drafter --dflash LxB`): the target's answers as a
//! head's run makes them (`data.rs`: prompt files, self-written prompts, turns, earlier
//! runs' answers; the last conversations held out), a drafter of random weights
//! ([`super::dflash::TrainableDFlash`]), optimiser steps on blocks anchored at random positions
//! of each answer, the drafter measured on the held-out answers as decoding walks them, and
//! saved as a checkpoint directory (`--out DIR`: `config.json`, `model.safetensors`) that
//! `--drafter DIR` loads, its record in `DIR.json`, the data in `DIR.data.json`.
//!
//! Not yet: resuming a run (each run starts from random weights) and evaluation sets.

use super::data::{data_lines, training_data};
use super::dflash::{Blocks, TrainableDFlash};
use super::loss::RowTargets;
use super::run::{bar, beside, write_json, Epochs, RunConfig};
use super::targets::{SequenceTargets, TargetCache};
use super::{Example, Walk};
use crate::draft::dflash::{default_target_layer_ids, DFlashShape};
use crate::error::{Error, Result};
use crate::model::decoder::{rope_tables, Decoder};
use candle_core::{DType, Tensor, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use rand::seq::index::sample;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

/// What a DFlash run is asked for beyond a head's run.
#[derive(Debug, Clone, PartialEq)]
pub struct DFlashRun {
    /// The drafter's own decoder layers.
    pub layers: usize,
    /// Tokens a block drafts at once, its root included.
    pub block_size: usize,
    /// The token its masked positions are embedded as (`None`: [`default_mask_token`]).
    pub mask_token: Option<u32>,
    /// Start its layers as the target's last layers (else from random weights).
    pub from_target: bool,
}

impl DFlashRun {
    /// Parse `LxB` (`2x16`: two layers, blocks of 16).
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = || {
            Error::InvalidArgument(format!(
                "--dflash {spec}: expected LAYERSxBLOCK, such as 2x16 (2 layers, blocks of 16 tokens)"
            ))
        };
        let (l, b) = spec.split_once('x').ok_or_else(bad)?;
        let layers: usize = l.trim().parse().map_err(|_| bad())?;
        let block_size: usize = b.trim().parse().map_err(|_| bad())?;
        if layers == 0 || block_size < 2 {
            return Err(bad());
        }
        Ok(DFlashRun {
            layers,
            block_size,
            mask_token: None,
            from_target: false,
        })
    }
}

/// Blocks each training sequence gives an optimiser step (anchored at distinct random
/// positions of its answer; all of them where it has fewer).
pub const TRAIN_ANCHORS: usize = 16;

/// Blocks a forward pass of the evaluation reads at once.
const EVAL_CHUNK: usize = 32;

/// Optimiser steps between records.
const RECORD_EVERY: usize = 200;

/// A DFlash run's record, written beside the drafter.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DFlashRecord {
    /// The command that made it.
    pub command: String,
    /// Target name.
    pub target: String,
    /// What it trained on, as a head's record says it.
    pub data: Vec<String>,
    /// Sequences trained on and held out.
    pub sequences: usize,
    /// Held-out sequences (the last ones).
    pub held_out: usize,
    /// The drafter's layers.
    pub layers: usize,
    /// Its block size.
    pub block_size: usize,
    /// The target layers it reads.
    pub target_layer_ids: Vec<usize>,
    /// Its mask token.
    pub mask_token_id: u32,
    /// Whether its layers started as the target's last layers (else random).
    #[serde(default)]
    pub from_target: bool,
    /// Learning rate (the peak, under a schedule).
    pub lr: f64,
    /// How the rate moved ([`super::LrSchedule::name`]).
    pub lr_schedule: String,
    /// Seed.
    pub seed: u64,
    /// Optimiser steps done.
    pub step: usize,
    /// Held-out cross-entropy, the mean over the blocks' rows.
    pub held_out_loss: f32,
    /// Share of the held-out blocks' rows (every depth) whose top token is the target's.
    pub held_out_agreement: f32,
    /// Tokens a target pass emits when blocks drafted from each root are verified greedily as
    /// chains, walking the held-out answers as decoding does ([`super::Walk`]).
    pub walked_tau: f32,
}

/// The mask token when none is named: the last id whose embedding row is not zero (the last ids
/// of a padded vocabulary are often zero rows, which would make every masked row of a block the
/// same).
pub fn default_mask_token(target: &Decoder) -> Result<u32> {
    let vocab = target.config().vocab_size;
    // Look back over the last rows a chunk at a time.
    let mut end = vocab;
    while end > 0 {
        let start = end.saturating_sub(256);
        let ids: Vec<u32> = (start as u32..end as u32).collect();
        let norms: Vec<f32> = target
            .embed(&ids)?
            .to_dtype(DType::F32)?
            .abs()?
            .sum(D::Minus1)?
            .to_vec1()?;
        if let Some(i) = norms.iter().rposition(|&n| n > 0.0) {
            return Ok((start + i) as u32);
        }
        end = start;
    }
    Err(Error::InvalidArgument(
        "the target's embeddings are all zero: no token can stand for a DFlash mask".into(),
    ))
}

/// The target layers a DFlash drafter reads, spelled `L1,L2,...` (0-based, distinct, ascending,
/// each below the target's `n_layers`).
pub fn parse_layers(spec: &str, n_layers: usize) -> Result<Vec<usize>> {
    let bad = |why: String| {
        Err(Error::InvalidArgument(format!(
            "--feature-layers {spec}: {why} (a DFlash drafter reads 0-based target layers such as 1,14,27)"
        )))
    };
    let mut layers = vec![];
    for part in spec.split(',') {
        match part.trim().parse::<usize>() {
            Ok(l) if l < n_layers => layers.push(l),
            Ok(l) => return bad(format!("the target has {n_layers} layers, not a layer {l}")),
            Err(_) => return bad(format!("`{}` is not a layer number", part.trim())),
        }
    }
    if layers.windows(2).any(|w| w[0] >= w[1]) {
        return bad("layers must be distinct and ascending".into());
    }
    Ok(layers)
}

/// Run a DFlash training; returns the final record.
pub fn run(cfg: &RunConfig, spec: &DFlashRun) -> Result<DFlashRecord> {
    super::turns::check(cfg.turns)?;
    if cfg.init.is_some() {
        return Err(Error::InvalidArgument(
            "--init starts a head from an exported one; a DFlash drafter starts from random weights"
                .into(),
        ));
    }
    // `dflash/` and `dflash` alike: the record and data go beside the directory, not in it.
    let cfg = &RunConfig {
        out: cfg.out.components().collect(),
        ..cfg.clone()
    };
    if cfg.out.join("model.safetensors").exists() {
        return Err(Error::InvalidArgument(format!(
            "{} holds a trained DFlash drafter; a DFlash run does not resume yet (each starts \
             from random weights): name another --out",
            cfg.out.display()
        )));
    }
    std::fs::create_dir_all(&cfg.out).map_err(|e| Error::io(&cfg.out, e))?;
    let mut t = crate::load::load_model(&cfg.target, &cfg.load)?;
    // The drafter, made (its shape checked against the target) before any answer is generated.
    let target_cfg = t.decoder.config().clone();
    let target_layer_ids = match &cfg.feature_layers {
        Some(s) => parse_layers(s, target_cfg.n_layers)?,
        None => default_target_layer_ids(target_cfg.n_layers, spec.layers),
    };
    let mask_token_id = match spec.mask_token {
        Some(m) => m,
        None => default_mask_token(&t.decoder)?,
    };
    let shape = DFlashShape {
        layers: spec.layers,
        block_size: spec.block_size,
        target_layer_ids: target_layer_ids.clone(),
        mask_token_id,
    };
    let device = t.decoder.device().clone();
    let drafter = if spec.from_target {
        let store = super::run::target_store(&t)?;
        let init = |name: &str| store.borrow_mut().get_dense(name).ok();
        TrainableDFlash::new(&target_cfg, &shape, &device, cfg.seed, Some(&init))?
    } else {
        TrainableDFlash::new(&target_cfg, &shape, &device, cfg.seed, None)?
    };
    let record_path = beside(&cfg.out, ".json");
    let data = training_data(cfg, &mut t, &record_path)?;
    let sequences = data.examples();
    let held = data.held_out()?;
    let (train, held_out) = sequences.split_at(sequences.len() - held);
    let rope = rope_tables(
        &drafter.config().model,
        cfg.opts.max_len + spec.block_size,
        None,
        &device,
    )?;
    let mut run = Trainer {
        drafter,
        lm_head: t.decoder.lm_head_dense()?,
        rope,
        cache: TargetCache::new(cfg.opts.cache_bytes, target_layer_ids),
        max_len: cfg.opts.max_len,
    };
    let mut opt = AdamW::new(
        run.drafter.vars().all_vars(),
        ParamsAdamW {
            lr: cfg.opts.lr,
            ..Default::default()
        },
    )?;
    let base = DFlashRecord {
        command: cfg.command.clone(),
        target: t.name.clone(),
        data: data_lines(cfg, &data.earlier),
        sequences: sequences.len(),
        held_out: held,
        layers: spec.layers,
        block_size: spec.block_size,
        target_layer_ids: shape.target_layer_ids.clone(),
        mask_token_id,
        from_target: spec.from_target,
        lr: cfg.opts.lr,
        lr_schedule: cfg.opts.schedule.name().into(),
        seed: cfg.seed,
        step: 0,
        held_out_loss: 0.0,
        held_out_agreement: 0.0,
        walked_tau: 1.0,
    };
    let mut epochs = Epochs::at_step(cfg, train, 0);
    let b = bar(cfg.steps as u64, "{msg} [{bar:30}] {pos}/{len} eta {eta}");
    // Where the training curve starts: the drafter as initialised.
    let mut last = run.record(&mut t.decoder, held_out, &base, 0, cfg, &record_path)?;
    let mut loss_ema = None::<f32>;
    for step in 1..=cfg.steps {
        opt.set_learning_rate(cfg.opts.schedule.at(cfg.opts.lr, step - 1, cfg.steps));
        let batch = epochs.next_batch();
        let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed ^ (step as u64) << 20);
        if let Some(l) = run.train_step(&mut t.decoder, &mut opt, &batch, &mut rng)? {
            loss_ema = Some(loss_ema.map_or(l, |e| 0.95 * e + 0.05 * l));
        }
        let message = format!(
            "loss {:.3} (epoch {})",
            loss_ema.unwrap_or(f32::NAN),
            epochs.e
        );
        if b.is_hidden() && step.is_multiple_of(50) {
            eprintln!("step {step}: {message}");
        }
        b.set_message(message);
        b.set_position(step as u64);
        if step.is_multiple_of(RECORD_EVERY) || step == cfg.steps {
            last = run.record(&mut t.decoder, held_out, &base, step, cfg, &record_path)?;
        }
    }
    b.finish_and_clear();
    Ok(last)
}

/// The drafter being trained and what its steps read.
struct Trainer {
    drafter: TrainableDFlash,
    /// The target's LM head `[vocab, h]` in f32.
    lm_head: Tensor,
    /// The drafter's rotation tables.
    rope: (Tensor, Tensor),
    /// The target's outputs of the drafter's layers, kept per sequence.
    cache: TargetCache,
    /// Longest sequence read (longer ones are cut).
    max_len: usize,
}

/// One sequence's blocks as [`TrainableDFlash::loss`] reads them.
struct SequenceBlocks {
    embeds: Tensor,
    ids: Tensor,
    weights: Tensor,
    best: Tensor,
    /// Depth rows with a token to predict.
    rows: usize,
}

impl Trainer {
    /// The blocks of `seq` anchored at `anchors` (each below `seq.len() - 1`): their
    /// embeddings and, per depth row, the target's distribution of the token it predicts (no
    /// weight and no top token past the sequence's end).
    fn blocks_of(
        &self,
        target: &Decoder,
        seq: &[u32],
        anchors: &[usize],
        tg: &SequenceTargets,
    ) -> Result<SequenceBlocks> {
        let cfg = self.drafter.config();
        let bs = cfg.block_size;
        let ids: Vec<u32> = anchors
            .iter()
            .flat_map(|&a| {
                std::iter::once(seq[a]).chain(std::iter::repeat_n(cfg.mask_token_id, bs - 1))
            })
            .collect();
        let embeds = target.embed(&ids)?;
        // Row d of the block at a predicts the token at a + d: the target's distribution at
        // position a + d - 1.
        let last = seq.len() - 1;
        let at: Vec<(usize, bool)> = anchors
            .iter()
            .flat_map(|&a| (1..bs).map(move |d| ((a + d - 1).min(last - 1), a + d <= last)))
            .collect();
        let device = &embeds.device().clone();
        let index = Tensor::from_vec(
            at.iter().map(|&(p, _)| p as u32).collect::<Vec<_>>(),
            at.len(),
            device,
        )?;
        let valid: Vec<u8> = at.iter().map(|&(_, v)| v as u8).collect();
        let valid = Tensor::from_vec(valid, at.len(), device)?;
        // Past the end: no weight, and a top token no row can agree with.
        let none = Tensor::full(u32::MAX, at.len(), device)?;
        let best = valid.where_cond(&tg.best.index_select(&index, 0)?, &none)?;
        let keep = valid.to_dtype(DType::F32)?.unsqueeze(1)?;
        Ok(SequenceBlocks {
            embeds,
            ids: tg.ids.index_select(&index, 0)?,
            weights: tg.weights.index_select(&index, 0)?.broadcast_mul(&keep)?,
            best,
            rows: at.iter().filter(|&&(_, v)| v).count(),
        })
    }

    /// One optimiser step on `batch`: up to [`TRAIN_ANCHORS`] blocks of each sequence,
    /// anchored at random positions of its answer. Returns the mean cross-entropy of the rows
    /// (`None`: the batch had no answer to anchor a block in, and no step was taken).
    fn train_step(
        &mut self,
        target: &mut Decoder,
        opt: &mut AdamW,
        batch: &[Example<'_>],
        rng: &mut rand::rngs::StdRng,
    ) -> Result<Option<f32>> {
        let mut prepared = vec![];
        for ex in batch {
            let seq = &ex.seq[..ex.seq.len().min(self.max_len)];
            let first = ex.answer_from.max(1);
            if seq.len() < 2 || first + 1 >= seq.len() {
                continue;
            }
            let span = seq.len() - 1 - first;
            let mut anchors: Vec<usize> = sample(rng, span, span.min(TRAIN_ANCHORS))
                .into_iter()
                .map(|i| first + i)
                .collect();
            anchors.sort_unstable();
            let tg = self.cache.get(target, seq)?;
            let blocks = self.blocks_of(target, seq, &anchors, &tg)?;
            prepared.push((tg, anchors, blocks));
        }
        let rows: usize = prepared.iter().map(|p| p.2.rows).sum();
        if rows == 0 {
            return Ok(None);
        }
        let mut sums: Option<(Tensor, Tensor)> = None;
        for (tg, anchors, b) in &prepared {
            let l = self.drafter.loss(
                &self.inputs(tg, &b.embeds, anchors),
                &self.lm_head,
                &b.targets(),
                1.0 / rows as f64,
            )?;
            sums = Some(match sums {
                Some((s, ce)) => ((s + l.surrogate)?, (ce + l.ce_sum)?),
                None => (l.surrogate, l.ce_sum),
            });
        }
        let Some((surrogate, ce)) = sums else {
            return Ok(None);
        };
        opt.backward_step(&surrogate)?;
        Ok(Some(ce.to_scalar::<f32>()? / rows as f32))
    }

    fn inputs<'a>(
        &'a self,
        tg: &'a SequenceTargets,
        embeds: &'a Tensor,
        anchors: &'a [usize],
    ) -> Blocks<'a> {
        Blocks {
            features: &tg.hidden,
            embeds,
            anchors,
            cos: &self.rope.0,
            sin: &self.rope.1,
        }
    }

    /// The drafter measured on the held-out answers (every position of each a root; the
    /// blocks' greedy verification walked as decoding walks it), saved with its record.
    fn record(
        &mut self,
        target: &mut Decoder,
        held_out: &[Example<'_>],
        base: &DFlashRecord,
        step: usize,
        cfg: &RunConfig,
        record_path: &std::path::Path,
    ) -> Result<DFlashRecord> {
        let (mut ce, mut agreed, mut rows) = (0f64, 0f64, 0usize);
        let mut walk = Walk::default();
        for ex in held_out {
            let seq = &ex.seq[..ex.seq.len().min(self.max_len)];
            let first = ex.answer_from.max(1);
            if first + 1 >= seq.len() {
                continue;
            }
            let tg = self.cache.get(target, seq)?;
            let roots: Vec<usize> = (first..seq.len() - 1).collect();
            let mut accepted = vec![];
            for chunk in roots.chunks(EVAL_CHUNK) {
                let b = self.blocks_of(target, seq, chunk, &tg)?;
                let l = self.drafter.loss(
                    &self.inputs(&tg, &b.embeds, chunk),
                    &self.lm_head,
                    &b.targets(),
                    1.0,
                )?;
                ce += l.ce_sum.to_scalar::<f32>()? as f64;
                agreed += l.agreed.to_scalar::<f32>()? as f64;
                rows += b.rows;
                accepted.extend(l.accepted()?);
            }
            // Decoding's walk: a block from each root, its accepted drafts and the target's
            // own token emitted, the next root after them; as the head's walk, a draft is never
            // the answer's last token (the step's own token must be there to emit).
            let mut p = 0;
            while p < accepted.len() {
                let n = accepted[p].min(accepted.len() - 1 - p);
                walk.steps += 1;
                walk.emitted += n + 1;
                p += n + 1;
            }
        }
        let per_row = |x: f64| {
            if rows == 0 {
                0.0
            } else {
                (x / rows as f64) as f32
            }
        };
        let rec = DFlashRecord {
            step,
            held_out_loss: per_row(ce),
            held_out_agreement: per_row(agreed),
            walked_tau: walk.tau(),
            ..base.clone()
        };
        self.drafter.save_dir(&cfg.out)?;
        write_json(record_path, &rec)?;
        eprintln!(
            "step {step}: held-out loss {:.3}, agreement {:.3}, tau {:.2} walked (blocks of {})",
            rec.held_out_loss, rec.held_out_agreement, rec.walked_tau, base.block_size
        );
        Ok(rec)
    }
}

impl SequenceBlocks {
    fn targets(&self) -> RowTargets<'_> {
        RowTargets {
            ids: &self.ids,
            weights: &self.weights,
            best: &self.best,
            vocab: None,
        }
    }
}
