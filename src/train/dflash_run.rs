//! A whole DFlash training run (`treespec train-drafter --dflash LxB`): the target's answers as a
//! head's run makes them (`data.rs`: prompt files, self-written prompts, turns, earlier
//! runs' answers; the last conversations held out), a drafter of random weights
//! ([`super::dflash::TrainableDFlash`]), optimiser steps on blocks anchored at random positions
//! of each answer, the drafter measured on the held-out answers as decoding walks them, and
//! saved as a checkpoint directory (`--out DIR`: `config.json`, `model.safetensors`) that
//! `--drafter DIR` loads, its record in `DIR.json`, the data in `DIR.data.json`, and the best
//! checkpoint by held-out walked tau in `DIR.best/` (its record `DIR.best.json`).
//!
//! A run whose `--out` holds a checkpoint and its record resumes it: the same drafter, target
//! and data (refused otherwise), from the step it reached to `--steps`, with the batches and
//! anchors an unbroken run would take from that step; the learning rate follows the schedule
//! over this run's `--steps` and the optimiser's moments start afresh. `--eval` sets are
//! measured as the held-out answers are, set by set and category by category.

use super::data::{data_lines, eval_sets, training_data};
use super::dflash::{Blocks, TrainableDFlash};
pub use super::dflash_record::{best_dir, DFlashFigures, DFlashPoint, DFlashRecord};
use super::dflash_record::{checkpoint_record, same_drafter, Sums};
use super::figures::{eval_examples, EvalExamples};
use super::loss::RowTargets;
use super::run::{
    bar, beside, link_or_copy, other_data, write_json, Epochs, RunConfig, RECORD_EVERY,
};
use super::targets::{SequenceTargets, TargetCache};
use super::Example;
use crate::draft::dflash::{default_target_layer_ids, DFlashShape};
use crate::error::{Error, Result};
use crate::model::decoder::{rope_tables, Decoder};
use candle_core::{DType, Tensor, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use rand::seq::index::sample;
use rand::SeedableRng;
use std::path::PathBuf;

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
    /// The depth decay of the training loss, gamma: depth d's rows weigh `exp(-(d - 1) /
    /// gamma)`, since a block is accepted from its first row on (`None`:
    /// [`default_loss_decay`]; 0: every depth alike).
    pub loss_decay: Option<f64>,
}

/// The loss's depth decay for blocks of `block_size` where none is named: the reference
/// trainers' choices (SpecForge's DFlash scripts: 7 for blocks of 16, 5 for 10, 4 for 8), and
/// 0.45 of the block size otherwise.
pub fn default_loss_decay(block_size: usize) -> f64 {
    match block_size {
        8 => 4.0,
        10 => 5.0,
        16 => 7.0,
        b => 0.45 * b as f64,
    }
}

/// The weight of depth `d` (from 1) under the decay `gamma` (0: 1 at every depth).
pub fn depth_weight(d: usize, gamma: f64) -> f64 {
    if gamma > 0.0 {
        (-((d.max(1) - 1) as f64) / gamma).exp()
    } else {
        1.0
    }
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
            loss_decay: None,
        })
    }
}

/// Blocks each training sequence gives an optimiser step (anchored at distinct random
/// positions of its answer; all of them where it has fewer).
pub const TRAIN_ANCHORS: usize = 16;

/// Blocks a forward pass of the evaluation reads at once.
const EVAL_CHUNK: usize = 32;

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

/// Run (or resume) a DFlash training; returns the final record.
pub fn run(cfg: &RunConfig, spec: &DFlashRun) -> Result<DFlashRecord> {
    super::turns::check(cfg.turns)?;
    if cfg.init.is_some() {
        return Err(Error::InvalidArgument(
            "--init starts a head from an exported one; a DFlash drafter starts from random \
             weights, the target's last layers, or the checkpoint in its --out"
                .into(),
        ));
    }
    // `dflash/` and `dflash` alike: the record and data go beside the directory, not in it.
    let cfg = &RunConfig {
        out: cfg.out.components().collect(),
        ..cfg.clone()
    };
    let record_path = beside(&cfg.out, ".json");
    let resumed = checkpoint_record(cfg, &record_path)?;
    std::fs::create_dir_all(&cfg.out).map_err(|e| Error::io(&cfg.out, e))?;
    let mut t = crate::load::load_model(&cfg.target, &cfg.load)?;
    // The drafter, made (its shape checked against the target and any checkpoint) before any
    // answer is generated.
    let target_cfg = t.decoder.config().clone();
    let (shape, loss_decay) = drafter_shape(cfg, spec, &t.decoder)?;
    if let Some(r) = &resumed {
        same_drafter(cfg, r, &t.name, &shape, spec.from_target)?;
    }
    let device = t.decoder.device().clone();
    let mut drafter = if spec.from_target && resumed.is_none() {
        let store = super::run::target_store(&t)?;
        let init = |name: &str| store.borrow_mut().get_dense(name).ok();
        TrainableDFlash::new(&target_cfg, &shape, &device, cfg.seed, Some(&init))?
    } else {
        TrainableDFlash::new(&target_cfg, &shape, &device, cfg.seed, None)?
    };
    if resumed.is_some() {
        drafter.load_dir(&cfg.out)?;
    }
    let data = training_data(cfg, &mut t, &record_path)?;
    let data_lines = data_lines(cfg, &data.earlier);
    if let Some(r) = resumed.as_ref().filter(|r| r.data != data_lines) {
        return Err(other_data(cfg, &r.data, &data_lines));
    }
    let eval_data = eval_sets(cfg, &mut t)?;
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
        cache: TargetCache::new(cfg.opts.cache_bytes, shape.target_layer_ids.clone()),
        max_len: cfg.opts.max_len,
        loss_decay,
    };
    let mut opt = AdamW::new(
        run.drafter.vars().all_vars(),
        ParamsAdamW {
            lr: cfg.opts.lr,
            ..Default::default()
        },
    )?;
    let start = resumed.as_ref().map_or(0, |r| r.step);
    let base = DFlashRecord {
        command: cfg.command.clone(),
        target: t.name.clone(),
        data: data_lines,
        sequences: sequences.len(),
        held_out: held,
        layers: spec.layers,
        block_size: spec.block_size,
        target_layer_ids: shape.target_layer_ids.clone(),
        mask_token_id: shape.mask_token_id,
        from_target: resumed.as_ref().map_or(spec.from_target, |r| r.from_target),
        loss_decay,
        lr: cfg.opts.lr,
        lr_schedule: cfg.opts.schedule.name().into(),
        seed: cfg.seed,
        step: start,
        held_out_loss: 0.0,
        held_out_agreement: 0.0,
        walked_tau: 1.0,
        curve: resumed.map(|r| r.curve).unwrap_or_default(),
        eval: vec![],
    };
    let mut recorder = Recorder {
        cfg,
        held_out,
        eval: eval_examples(&eval_data),
        base,
        record_path,
    };
    let mut epochs = Epochs::at_step(cfg, train, start);
    let b = bar(cfg.steps as u64, "{msg} [{bar:30}] {pos}/{len} eta {eta}");
    b.set_position(start as u64);
    // Where the training curve starts: the drafter as initialised.
    let mut last = None;
    if start == 0 {
        last = Some(recorder.record(&mut run, &mut t.decoder, 0)?);
    }
    let mut loss_ema = None::<f32>;
    for step in start + 1..=cfg.steps {
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
            last = Some(recorder.record(&mut run, &mut t.decoder, step)?);
        }
    }
    b.finish_and_clear();
    // A checkpoint at --steps already (or past them) is measured again, as it is.
    match last {
        Some(r) => Ok(r),
        None => recorder.record(&mut run, &mut t.decoder, start),
    }
}

/// The shape of the drafter `spec` asks for over `target` (`cfg.feature_layers` read, the mask
/// token found where none is named) and its loss's depth decay, checked.
fn drafter_shape(
    cfg: &RunConfig,
    spec: &DFlashRun,
    target: &Decoder,
) -> Result<(DFlashShape, f64)> {
    let n_layers = target.config().n_layers;
    let target_layer_ids = match &cfg.feature_layers {
        Some(s) => parse_layers(s, n_layers)?,
        None => default_target_layer_ids(n_layers, spec.layers),
    };
    let mask_token_id = match spec.mask_token {
        Some(m) => m,
        None => default_mask_token(target)?,
    };
    let loss_decay = spec
        .loss_decay
        .unwrap_or_else(|| default_loss_decay(spec.block_size));
    if !(loss_decay >= 0.0 && loss_decay.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "--loss-decay {loss_decay}: expected a finite gamma of 0 or more (0: every depth alike)"
        )));
    }
    let shape = DFlashShape {
        layers: spec.layers,
        block_size: spec.block_size,
        target_layer_ids,
        mask_token_id,
    };
    Ok((shape, loss_decay))
}

/// What a run's records are made of: the sequences measured, the record so far (its curve
/// growing), and where it goes.
struct Recorder<'a> {
    cfg: &'a RunConfig,
    held_out: &'a [Example<'a>],
    eval: Vec<EvalExamples<'a>>,
    base: DFlashRecord,
    record_path: PathBuf,
}

impl Recorder<'_> {
    /// The drafter measured at optimiser step `step` on the held-out answers and each
    /// evaluation set, saved with its record (and as the best, where it is); returns the record.
    fn record(
        &mut self,
        run: &mut Trainer,
        target: &mut Decoder,
        step: usize,
    ) -> Result<DFlashRecord> {
        let held = run.sums(target, self.held_out)?;
        let mut eval = vec![];
        for set in &self.eval {
            // A set with categories is measured category by category; its figures are their
            // sums'.
            let mut all = Sums::default();
            let mut by_category = vec![];
            for (name, seqs) in &set.categories {
                let sums = run.sums(target, seqs)?;
                all.add(&sums);
                by_category.push(sums.figures(name));
            }
            if set.categories.is_empty() {
                all = run.sums(target, &set.seqs)?;
            }
            eval.push(DFlashFigures {
                by_category,
                ..all.figures(set.name)
            });
        }
        let point = DFlashPoint {
            step,
            ..held.point()
        };
        self.base.curve.retain(|p| p.step < step);
        self.base.curve.push(point);
        let rec = DFlashRecord {
            step,
            held_out_loss: point.loss,
            held_out_agreement: point.agreement,
            walked_tau: point.walked_tau,
            eval,
            ..self.base.clone()
        };
        // The weights, then their record, each renamed into place (a kill between the two
        // leaves a record one checkpoint behind: a resume repeats those steps).
        run.drafter.save_dir(&self.cfg.out)?;
        write_json(&self.record_path, &rec)?;
        self.keep_best(&rec)?;
        let eval: String = rec
            .eval
            .iter()
            .map(|e| format!("; {}: tau {:.2}", e.set, e.walked_tau))
            .collect();
        eprintln!(
            "step {step}: held-out loss {:.3}, agreement {:.3}, tau {:.2} walked (blocks of {}){eval}",
            rec.held_out_loss, rec.held_out_agreement, rec.walked_tau, rec.block_size
        );
        Ok(rec)
    }

    /// The checkpoint just saved (its record `rec`) linked (else copied) into [`best_dir`], its
    /// record beside it, where its held-out walked tau is above the best one's so far, or where
    /// there is none (a run starting at step 0 replaces any).
    fn keep_best(&self, rec: &DFlashRecord) -> Result<()> {
        let best = best_dir(&self.cfg.out);
        let best_json = beside(&best, ".json");
        // A best without its drafter (a run killed while replacing it) counts as none.
        let better = rec.step == 0
            || !best.join("model.safetensors").is_file()
            || std::fs::read_to_string(&best_json)
                .ok()
                .and_then(|s| serde_json::from_str::<DFlashRecord>(&s).ok())
                .is_none_or(|b| rec.walked_tau > b.walked_tau);
        if !better {
            return Ok(());
        }
        // The old record goes first: a kill from here on leaves no record claiming a drafter
        // that is not there (or not its own).
        if best_json.exists() {
            std::fs::remove_file(&best_json).map_err(|e| Error::io(&best_json, e))?;
        }
        let tmp = beside(&best, ".tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
        for file in ["config.json", "model.safetensors"] {
            link_or_copy(&self.cfg.out.join(file), &tmp.join(file))?;
        }
        if best.exists() {
            std::fs::remove_dir_all(&best).map_err(|e| Error::io(&best, e))?;
        }
        std::fs::rename(&tmp, &best).map_err(|e| Error::io(&best, e))?;
        write_json(&best_json, rec)
    }
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
    /// The training loss's depth decay, gamma (0: none; [`depth_weight`]).
    loss_decay: f64,
}

/// One sequence's blocks as [`TrainableDFlash::loss`] reads them.
struct SequenceBlocks {
    embeds: Tensor,
    ids: Tensor,
    weights: Tensor,
    best: Tensor,
    /// Depth rows with a token to predict.
    rows: usize,
    /// Their weights summed (`rows` where every depth weighs 1).
    weight: f64,
}

impl Trainer {
    /// The blocks of `seq` anchored at `anchors` (each below `seq.len() - 1`): their
    /// embeddings and, per depth row, the target's distribution of the token it predicts,
    /// weighted by its depth under the decay `gamma` ([`depth_weight`]; no weight and no top
    /// token past the sequence's end).
    fn blocks_of(
        &self,
        target: &Decoder,
        seq: &[u32],
        anchors: &[usize],
        tg: &SequenceTargets,
        gamma: f64,
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
        // Row r is depth r % (bs - 1) + 1 of its block.
        let row_weights: Vec<f32> = at
            .iter()
            .enumerate()
            .map(|(r, &(_, v))| {
                if v {
                    depth_weight(r % (bs - 1) + 1, gamma) as f32
                } else {
                    0.0
                }
            })
            .collect();
        let weight = row_weights.iter().map(|&w| w as f64).sum();
        let keep = Tensor::from_vec(row_weights, (at.len(), 1), device)?;
        Ok(SequenceBlocks {
            embeds,
            ids: tg.ids.index_select(&index, 0)?,
            weights: tg.weights.index_select(&index, 0)?.broadcast_mul(&keep)?,
            best,
            rows: at.iter().filter(|&&(_, v)| v).count(),
            weight,
        })
    }

    /// One optimiser step on `batch`: up to [`TRAIN_ANCHORS`] blocks of each sequence,
    /// anchored at random positions of its answer, the rows weighted by depth
    /// ([`Trainer::loss_decay`]). Returns their weighted mean cross-entropy (`None`: the batch
    /// had no answer to anchor a block in, and no step was taken).
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
            let blocks = self.blocks_of(target, seq, &anchors, &tg, self.loss_decay)?;
            prepared.push((tg, anchors, blocks));
        }
        // The loss: the rows' cross-entropies, each weighted by its depth, over their weights.
        let weight: f64 = prepared.iter().map(|p| p.2.weight).sum();
        if weight <= 0.0 {
            return Ok(None);
        }
        let mut sums: Option<(Tensor, Tensor)> = None;
        for (tg, anchors, b) in &prepared {
            let l = self.drafter.loss(
                &self.inputs(tg, &b.embeds, anchors),
                &self.lm_head,
                &b.targets(),
                1.0 / weight,
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
        Ok(Some((ce.to_scalar::<f32>()? as f64 / weight) as f32))
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

    /// The drafter's figures over `seqs`' answers, not learning: every position of each a
    /// root, the blocks' greedy verification walked as decoding walks it.
    fn sums(&mut self, target: &mut Decoder, seqs: &[Example<'_>]) -> Result<Sums> {
        let mut sums = Sums::default();
        for ex in seqs {
            let seq = &ex.seq[..ex.seq.len().min(self.max_len)];
            let first = ex.answer_from.max(1);
            if first + 1 >= seq.len() {
                continue;
            }
            let tg = self.cache.get(target, seq)?;
            let roots: Vec<usize> = (first..seq.len() - 1).collect();
            let mut accepted = vec![];
            for chunk in roots.chunks(EVAL_CHUNK) {
                // Measured as decoding meets them: every depth alike.
                let b = self.blocks_of(target, seq, chunk, &tg, 0.0)?;
                let l = self.drafter.loss(
                    &self.inputs(&tg, &b.embeds, chunk),
                    &self.lm_head,
                    &b.targets(),
                    1.0,
                )?;
                sums.ce += l.ce_sum.to_scalar::<f32>()? as f64;
                sums.agreed += l.agreed.to_scalar::<f32>()? as f64;
                sums.rows += b.rows;
                accepted.extend(l.accepted()?);
            }
            // Decoding's walk: a block from each root, its accepted drafts and the target's
            // own token emitted, the next root after them; as the head's walk, a draft is never
            // the answer's last token (the step's own token must be there to emit).
            let mut p = 0;
            while p < accepted.len() {
                let n = accepted[p].min(accepted.len() - 1 - p);
                sums.walk.steps += 1;
                sums.walk.emitted += n + 1;
                p += n + 1;
            }
        }
        Ok(sums)
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
