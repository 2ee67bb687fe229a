//! A DFlash run's record (`DIR.json` beside the drafter's directory), what a resume checks it
//! against, where the best checkpoint goes, and the sums its figures are made of.

use super::run::{beside, RunConfig};
use super::Walk;
use crate::draft::dflash::DFlashShape;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
    /// The loss's depth decay, gamma ([`super::dflash_run::DFlashRun::loss_decay`]; 0: every depth alike, as in
    /// records from before it).
    #[serde(default)]
    pub loss_decay: f64,
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
    /// The held-out figures at every record of the run, resumed runs' included, in step order.
    #[serde(default)]
    pub curve: Vec<DFlashPoint>,
    /// The same figures on each evaluation set (`--eval`), never trained on.
    #[serde(default)]
    pub eval: Vec<DFlashFigures>,
}

/// The held-out figures at one record.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DFlashPoint {
    /// Optimiser steps done.
    pub step: usize,
    /// [`DFlashRecord::held_out_loss`].
    pub loss: f32,
    /// [`DFlashRecord::held_out_agreement`].
    pub agreement: f32,
    /// [`DFlashRecord::walked_tau`].
    pub walked_tau: f32,
}

/// A drafter's figures on one evaluation set, as the held-out answers' are measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DFlashFigures {
    /// The set's name (its file's stem), or `set/category`.
    pub set: String,
    /// Cross-entropy, the mean over the blocks' rows.
    pub loss: f32,
    /// Share of the rows whose top token is the target's.
    pub agreement: f32,
    /// Tokens a target pass emits walking the set's answers.
    pub walked_tau: f32,
    /// The same figures on each of the set's categories (none where it has fewer than two).
    #[serde(default)]
    pub by_category: Vec<DFlashFigures>,
}

/// The record of the checkpoint in `cfg.out` to resume (`None`: it holds none). A checkpoint
/// without a readable record (`record_path`) is refused, not trained over.
pub(super) fn checkpoint_record(
    cfg: &RunConfig,
    record_path: &Path,
) -> Result<Option<DFlashRecord>> {
    if !cfg.out.join("model.safetensors").exists() {
        return Ok(None);
    }
    std::fs::read_to_string(record_path)
        .ok()
        .and_then(|s| serde_json::from_str::<DFlashRecord>(&s).ok())
        .map(Some)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} holds a DFlash drafter without its record {} (a run's, to resume from): \
                 name another --out",
                cfg.out.display(),
                record_path.display()
            ))
        })
}

/// A checkpoint (its record `r`) resumed only as the drafter this run asks for: of the target
/// `target`, of `shape`, started as `from_target` says; else a refusal naming what differs.
pub(super) fn same_drafter(
    cfg: &RunConfig,
    r: &DFlashRecord,
    target: &str,
    shape: &DFlashShape,
    from_target: bool,
) -> Result<()> {
    let layers = |l: &[usize]| {
        l.iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let differs = if r.target != target {
        Some(format!(
            "was trained for the target {}, not {target}",
            r.target
        ))
    } else if (r.layers, r.block_size) != (shape.layers, shape.block_size) {
        Some(format!(
            "holds a {}x{} drafter; resume it with --dflash {}x{}",
            r.layers, r.block_size, r.layers, r.block_size
        ))
    } else if r.target_layer_ids != shape.target_layer_ids {
        Some(format!(
            "reads target layers {}; resume it with --feature-layers {}",
            layers(&r.target_layer_ids),
            layers(&r.target_layer_ids)
        ))
    } else if r.mask_token_id != shape.mask_token_id {
        Some(format!(
            "masks with token {}; resume it with --mask-token {}",
            r.mask_token_id, r.mask_token_id
        ))
    } else if r.from_target != from_target {
        let how = if r.from_target { "with" } else { "without" };
        Some(format!(
            "started from {}; resume it {how} --dflash-from-target",
            if r.from_target {
                "the target's last layers"
            } else {
                "random weights"
            }
        ))
    } else {
        None
    };
    match differs {
        Some(why) => Err(Error::InvalidArgument(format!(
            "{} {why} (or name another --out)",
            cfg.out.display()
        ))),
        None => Ok(()),
    }
}

/// Where a run writing `out` keeps its best checkpoint by held-out walked tau (`DIR.best/`, its
/// record beside it as `DIR.best.json`): a run that goes on too long never loses the drafter it
/// had at its best record.
pub fn best_dir(out: &Path) -> PathBuf {
    // `dflash/` and `dflash` alike.
    beside(&out.components().collect::<PathBuf>(), ".best")
}

/// What a drafter's figures over some answers average: cross-entropy summed over the rows,
/// rows agreeing, and the walk. Sums of disjoint sets add up to the union's.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Sums {
    pub(super) ce: f64,
    pub(super) agreed: f64,
    pub(super) rows: usize,
    pub(super) walk: Walk,
}

impl Sums {
    pub(super) fn add(&mut self, other: &Sums) {
        self.ce += other.ce;
        self.agreed += other.agreed;
        self.rows += other.rows;
        self.walk.steps += other.walk.steps;
        self.walk.emitted += other.walk.emitted;
    }

    /// Mean loss and agreement a row, and the walk's tau (step left at 0).
    pub(super) fn point(&self) -> DFlashPoint {
        let per_row = |x: f64| (x / self.rows.max(1) as f64) as f32;
        DFlashPoint {
            step: 0,
            loss: per_row(self.ce),
            agreement: per_row(self.agreed),
            walked_tau: self.walk.tau(),
        }
    }

    pub(super) fn figures(&self, set: &str) -> DFlashFigures {
        let p = self.point();
        DFlashFigures {
            set: set.to_string(),
            loss: p.loss,
            agreement: p.agreement,
            walked_tau: p.walked_tau,
            by_category: vec![],
        }
    }
}
