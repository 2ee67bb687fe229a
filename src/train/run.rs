//! A whole `treespec train-drafter` run: the target's answers to the prompts (generated once and
//! kept beside the output), the head initialised from the target's last layer, optimiser steps with
//! a progress bar, held-out evaluation, and checkpoints that a later run resumes from.
//!
//! Files, for `--out HEAD.safetensors`: the head itself (MiMo names: `--drafter HEAD.safetensors`
//! drafts with it), `HEAD.safetensors.json` (the run's record: command, data, seed, step reached,
//! held-out figures; read on resume), `HEAD.safetensors.data.json` (the token ids trained on)
//! and `HEAD.safetensors.best.safetensors` (the best checkpoint by held-out walked tau, its
//! record beside it: [`best_path`]).

use super::data::{data_lines, eval_sets, training_data, EARLIER_ANSWERS};
pub use super::data::{trained_answers, SELF_PROMPT_DOMAINS};
pub use super::figures::simulated_tau;
use super::figures::{eval_examples, figure_sums, mean_figures, EvalExamples, FigureSums};
use super::head::TrainableHead;
use super::{batches_of, Example, TrainOptions, Trainer};
use crate::arch::weights::{read_gguf_header, WeightStore};
use crate::error::{Error, Result};
use crate::model::source::{self, ModelFiles};
use crate::model::{LoadOptions, LoadedModel};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::path::{Path, PathBuf};

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The target (a name, file or hub id, as elsewhere).
    pub target: String,
    /// Where the head goes.
    pub out: PathBuf,
    /// Optimiser steps in all (a resumed run continues to this count).
    pub steps: usize,
    /// Unrolled steps, learning rate, longest sequence.
    pub opts: TrainOptions,
    /// Prompt files (JSON lines with a `prompt` field). Never the bundled sets, which are the
    /// benchmarks' prompts: with none named, the target's self-written prompts only.
    pub data: Vec<PathBuf>,
    /// Data files of earlier runs (`HEAD.safetensors.data.json`, the target's answers to other
    /// prompts) trained on too, ahead of this run's own: the held-out sequences stay the last of
    /// this run's, so that heads trained with and without them are measured alike.
    pub extra_data: Vec<PathBuf>,
    /// A head to start from (an `export-head` GGUF) where `out` holds no checkpoint.
    pub init: Option<PathBuf>,
    /// Tokens the head drafts among: the most frequent in the training answers
    /// ([`crate::model::draft_vocab`]); 0 or the vocabulary's size: all.
    pub draft_vocab: usize,
    /// Target layers fused into the head's input ([`crate::model::mtp::fusion::parse_layers`]'s
    /// spelling); `None`: the last layer alone.
    pub feature_layers: Option<String>,
    /// Prompts the target writes itself before answering them (Magpie-style; 0: none).
    pub self_prompts: usize,
    /// System prompts that steer the self-written prompts, shared out evenly among them (empty:
    /// the eight built-in ones, [`SELF_PROMPT_DOMAINS`]).
    pub self_prompt_systems: Vec<String>,
    /// Turns each conversation is taken to: after the first, the target writes a follow-up as
    /// the user and answers it (1: none; at most 4).
    pub turns: usize,
    /// Prompt sets never trained on, to measure the head on as it trains ([`EVAL_PROMPTS`] of
    /// each, its categories taking turns, figures by category and for the whole set; empty:
    /// none).
    /// `Some(vec![])`: the bundled sets.
    pub eval: Option<Vec<PathBuf>>,
    /// Most new tokens of each answer the target writes for training.
    pub answer_tokens: usize,
    /// Seed of the order the sequences are visited in.
    pub seed: u64,
    /// Where and how the target runs.
    pub load: LoadOptions,
    /// The command line, for the record.
    pub command: String,
}

/// The run's record, written beside the head.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// The command that made it.
    pub command: String,
    /// Target name.
    pub target: String,
    /// Prompt files, "bundled", "self-written: N", and "earlier answers: FILE (N sequences)".
    pub data: Vec<String>,
    /// The head training started from (`--init`), if not the target's last layer.
    #[serde(default)]
    pub init: Option<String>,
    /// Tokens the head drafts among (the target's vocabulary size where it drafts among all).
    #[serde(default)]
    pub draft_vocab: usize,
    /// The target layers the head reads (several: fused); empty in records of heads that read
    /// the last layer alone, from before heads fused layers.
    #[serde(default)]
    pub feature_layers: Vec<usize>,
    /// Sequences trained on and held out.
    pub sequences: usize,
    /// Held-out sequences (the last ones).
    pub held_out: usize,
    /// Unrolled chain steps.
    pub k: usize,
    /// Learning rate (the peak, under a schedule).
    pub lr: f64,
    /// How the rate moved over the steps ([`super::LrSchedule::name`]).
    #[serde(default)]
    pub lr_schedule: String,
    /// Seed.
    pub seed: u64,
    /// Optimiser steps done.
    pub step: usize,
    /// Held-out loss and per-step agreement with the target at `step`.
    pub held_out_loss: f32,
    /// Per chain step, the share of held-out rows where the head's argmax is the target's.
    pub held_out_agreement: Vec<f32>,
    /// Tokens per step a greedy chain of k would emit if each step's agreement held whatever
    /// came before: `1 + a1 + a1 a2 + ...` (an estimate from teacher-forced agreement).
    pub simulated_tau: f32,
    /// Tokens per step greedy chains of k emit walking the held-out answers as decoding does
    /// ([`super::walk`]): the tau `bench` measures for `mtp:k@0`.
    #[serde(default)]
    pub walked_tau: f32,
    /// The same figures on each evaluation set (`--eval`), never trained on.
    #[serde(default)]
    pub eval: Vec<EvalFigures>,
}

/// A head's figures on one evaluation set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvalFigures {
    /// The set's name (its file's stem).
    pub set: String,
    /// Per chain step, the share of answer predictions where the head's top token is the
    /// target's.
    pub agreement: Vec<f32>,
    /// [`simulated_tau`] of that.
    pub simulated_tau: f32,
    /// Tokens per step of greedy chains of k walked over the set's answers ([`super::walk`]).
    #[serde(default)]
    pub walked_tau: f32,
    /// The same figures on each of the set's categories (`chat/writing`, ...; none where it
    /// has fewer than two).
    #[serde(default)]
    pub by_category: Vec<EvalFigures>,
}

/// Optimiser steps between a run's records (each a checkpoint a later run resumes from).
pub(super) const RECORD_EVERY: usize = 200;

/// Prompts of each evaluation set the head is measured on.
pub const EVAL_PROMPTS: usize = 16;

/// `out` with `suffix` after its name: where a file of the run goes beside the head.
pub(super) fn beside(out: &Path, suffix: &str) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Write `value` to `path` as JSON, through a temporary file beside it.
pub(super) fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string(value)
        .map_err(|e| Error::InvalidArgument(format!("{}: {e}", path.display())))?;
    let tmp = beside(path, ".tmp");
    std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// A progress bar of `len` steps drawn with `template`, ticking twice a second.
pub(super) fn bar(len: u64, template: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(len).with_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.enable_steady_tick(std::time::Duration::from_millis(500));
    b
}

/// A line above the bar; where the bar draws nothing (standard error is not a terminal: a log
/// file), on standard error.
fn say(b: &indicatif::ProgressBar, line: String) {
    if b.is_hidden() {
        eprintln!("{line}");
    } else {
        b.println(line);
    }
}

/// `what: done/all after N s`, for a log (see [`say`]).
pub(super) fn logged(
    b: &indicatif::ProgressBar,
    what: &str,
    done: usize,
    started: std::time::Instant,
) {
    b.set_position(done as u64);
    if b.is_hidden() {
        let all = b.length().unwrap_or(0);
        eprintln!(
            "{what}: {done}/{all} after {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
}
/// Run (or resume) training; returns the final record.
pub fn run(cfg: &RunConfig) -> Result<RunRecord> {
    super::turns::check(cfg.turns)?;
    if cfg.self_prompts == 0 && !cfg.self_prompt_systems.is_empty() {
        return Err(Error::InvalidArgument(
            "a self-prompt system prompt steers self-written prompts: ask for some with \
             --self-prompts N"
                .into(),
        ));
    }
    // The head's folder, made before the target's answers are written into it.
    if let Some(dir) = cfg.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let mut t = crate::load::load_model(&cfg.target, &cfg.load)?;
    let record_path = beside(&cfg.out, ".json");
    let fused = fused_layers(cfg, &t, &record_path)?;
    let data = training_data(cfg, &mut t, &record_path)?;
    let sequences = data.examples();
    let eval_data = eval_sets(cfg, &mut t)?;
    let held = data.held_out()?;
    let (train, held_out) = sequences.split_at(sequences.len() - held);

    // What the run trains on, as its record says it.
    let data_lines = data_lines(cfg, &data.earlier);
    let (head, step, resumed_vocab) = start_head(cfg, &t, fused, &data_lines, &record_path)?;
    let (trainer, vocab_len) = trainer_for(cfg, &t, head, train, resumed_vocab)?;
    let epochs = Epochs::at_step(cfg, train, step);
    let recorder = Recorder {
        cfg,
        held_out,
        eval: eval_examples(&eval_data),
        data_lines,
        draft_vocab: vocab_len,
        sequences: sequences.len(),
        record_path,
    };
    train_steps(&mut t, trainer, epochs, &recorder, step)
}

/// A checkpoint to resume (its record at `record_path`) trained on other prompts, self-written
/// prompts or turns than `cfg` asks for, or on text the target sampled with another seed:
/// refused before any answer is generated, so that this run's data file is not written over
/// (earlier runs' answers are checked once read).
pub(super) fn same_own_data(cfg: &RunConfig, record_path: &Path) -> Result<()> {
    // Any run's record (a head's or a DFlash drafter's) says its data and seed alike.
    #[derive(Deserialize)]
    struct RecordedData {
        data: Vec<String>,
        seed: u64,
    }
    // A head is a file; a DFlash drafter's directory is made before its first checkpoint.
    let checkpoint = cfg.out.is_file() || cfg.out.join("model.safetensors").is_file();
    let Some(r) = Some(record_path)
        .filter(|_| checkpoint)
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| serde_json::from_str::<RecordedData>(&s).ok())
    else {
        return Ok(());
    };
    let own: Vec<String> = r
        .data
        .iter()
        .filter(|l| !l.starts_with(EARLIER_ANSWERS))
        .cloned()
        .collect();
    let asked = data_lines(cfg, &[]);
    if own != asked {
        return Err(other_data(cfg, &r.data, &asked));
    }
    if super::data::seeded(cfg) && r.seed != cfg.seed {
        return Err(Error::InvalidArgument(format!(
            "{} was trained on text the target wrote with --seed {}; resume it with that seed, \
             not {} (another seed writes other prompts)",
            cfg.out.display(),
            r.seed,
            cfg.seed
        )));
    }
    Ok(())
}

/// The refusal of a resume whose record says the head (or drafter) was trained on `had`, not
/// `asked`.
pub(super) fn other_data(cfg: &RunConfig, had: &[String], asked: &[String]) -> Error {
    Error::InvalidArgument(format!(
        "{} was trained on {had:?}; resume it with the same data, not {asked:?}",
        cfg.out.display()
    ))
}

/// The record beside a checkpoint, where there is one and it reads.
fn read_record(cfg: &RunConfig, record_path: &Path) -> Option<RunRecord> {
    if !cfg.out.exists() {
        return None;
    }
    record_at(record_path)
}

/// The record at `path`, where there is one and it reads.
fn record_at(path: &Path) -> Option<RunRecord> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| serde_json::from_str::<RunRecord>(&s).ok())
}

/// The target layers the head fuses (`--feature-layers` for the target `t`; `None`: it reads the
/// last), refused before any answer is generated where the spelling is bad or a checkpoint to
/// resume (its record at `record_path`) reads other layers.
fn fused_layers(
    cfg: &RunConfig,
    t: &LoadedModel,
    record_path: &Path,
) -> Result<Option<Vec<usize>>> {
    let n = t.decoder.config().n_layers;
    let fused = match &cfg.feature_layers {
        Some(spec) => Some(crate::model::mtp::fusion::parse_layers(spec, n)?),
        None => None,
    };
    let reads = fused.clone().unwrap_or_else(|| vec![n - 1]);
    if let Some(r) = read_record(cfg, record_path) {
        // Records from before heads fused layers name none: the last.
        let recorded = match r.feature_layers {
            l if l.is_empty() => vec![n - 1],
            l => l,
        };
        if recorded != reads {
            let how = match recorded.len() {
                1 => "without --feature-layers".to_string(),
                _ => format!(
                    "with --feature-layers {}",
                    recorded
                        .iter()
                        .map(|l| l.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            };
            return Err(Error::InvalidArgument(format!(
                "{} reads target layers {recorded:?}; resume it {how}",
                cfg.out.display()
            )));
        }
    }
    Ok(fused)
}

/// The target's own tensors (dense, on its device), to start a drafter's layers from.
pub(super) fn target_store(t: &LoadedModel) -> Result<RefCell<WeightStore>> {
    let device = t.decoder.device();
    Ok(RefCell::new(match &t.files {
        ModelFiles::Gguf(path) => WeightStore::gguf(path, read_gguf_header(path)?, device, false)?,
        ModelFiles::Checkpoint(dir) => {
            WeightStore::safetensors(&source::safetensors_files(dir)?, device)?
        }
    }))
}

/// The head a run starts from, the step it starts at, and the draft vocabulary's size a resumed
/// head was trained with (where its record names one). The head is the target's last layer as
/// its block, fed the layers `fused` where given; where `cfg.out` holds a checkpoint with its
/// record (`record_path`), that checkpoint (an error unless its record's data are
/// `data_lines`); at step 0 with `--init`, that head.
fn start_head(
    cfg: &RunConfig,
    t: &LoadedModel,
    fused: Option<Vec<usize>>,
    data_lines: &[String],
    record_path: &Path,
) -> Result<(TrainableHead, usize, Option<usize>)> {
    // The head: the target's last layer as its block, or where a checkpoint exists, that.
    let device = t.decoder.device().clone();
    let store = target_store(t)?;
    let init = |name: &str| store.borrow_mut().get_dense(name).ok();
    let target_cfg = t.decoder.config();
    let mut head = TrainableHead::new(target_cfg, &device, cfg.seed, Some(&init))?;
    if let Some(layers) = fused {
        head = head.with_feature_layers(layers)?;
    }
    let mut step = 0;
    let mut resumed_vocab = None;
    if let Some(r) = read_record(cfg, record_path) {
        if r.data != data_lines {
            return Err(other_data(cfg, &r.data, data_lines));
        }
        head.vars_mut().load(&cfg.out)?;
        step = r.step;
        resumed_vocab = Some(r.draft_vocab).filter(|&v| v > 0);
    }
    if step == 0 {
        if let Some(init) = &cfg.init {
            let tensors =
                crate::model::mtp_gguf::read_f32(init, &t.name, t.decoder.config(), &device)?;
            head.set_from(&tensors)?;
        }
    }
    Ok((head, step, resumed_vocab))
}

/// The trainer of `head` over the target `t`, drafting among the tokens the target writes most
/// often in the answers of `train` (`cfg.draft_vocab` of them; the same on resuming: the same
/// data), stop tokens always; and the size of that vocabulary. An error where a resumed head
/// was trained with another size (`resumed_vocab`).
fn trainer_for(
    cfg: &RunConfig,
    t: &LoadedModel,
    head: TrainableHead,
    train: &[Example<'_>],
    resumed_vocab: Option<usize>,
) -> Result<(Trainer, usize)> {
    // The head's f32 products on tensor cores (TF32), as PyTorch trains by default; the
    // target's own passes do not go through cuBLAS.
    candle_core::cuda::set_gemm_reduced_precision_f32(true);
    let mut trainer = Trainer::new(&t.decoder, head, cfg.opts)?;
    // The draft vocabulary: the tokens the target writes most often in the training answers
    // (the same on resuming: the same data), stop tokens always.
    let vocab_size = t.decoder.config().vocab_size;
    let vocab = crate::model::draft_vocab::most_frequent(
        train.iter().map(|e| e.answer()),
        cfg.draft_vocab,
        vocab_size,
        t.tokenizer.stop_ids(),
    );
    let vocab_len = vocab.as_ref().map_or(vocab_size, Vec::len);
    if let Some(was) = resumed_vocab.filter(|&was| was != vocab_len) {
        return Err(Error::InvalidArgument(format!(
            "{} was trained drafting among {was} tokens; resume it with the --draft-vocab it was \
             started with, not one giving {vocab_len}",
            cfg.out.display()
        )));
    }
    if let Some(ids) = vocab {
        trainer = trainer.with_draft_vocab(&t.decoder, ids)?;
    }
    Ok((trainer, vocab_len))
}

/// The order a run visits its training sequences in, and where it is in it: epoch e visits them
/// in an order of its own (seed + e), in batches.
pub(super) struct Epochs<'a> {
    cfg: &'a RunConfig,
    train: &'a [Example<'a>],
    /// The current epoch.
    pub(super) e: usize,
    /// Its batches.
    current: Vec<Vec<usize>>,
    /// The next batch's index in them.
    at: usize,
}

impl<'a> Epochs<'a> {
    /// Positioned where a run at optimiser step `step` goes on: the epoch and batch of its step.
    pub(super) fn at_step(cfg: &'a RunConfig, train: &'a [Example<'a>], step: usize) -> Self {
        let mut epochs = Epochs {
            cfg,
            train,
            e: 0,
            current: vec![],
            at: 0,
        };
        let mut seen = 0;
        epochs.current = epochs.batches(0);
        while seen + epochs.current.len() <= step {
            seen += epochs.current.len();
            epochs.e += 1;
            epochs.current = epochs.batches(epochs.e);
        }
        epochs.at = step - seen;
        epochs
    }

    /// The batches of epoch `e`.
    fn batches(&self, e: usize) -> Vec<Vec<usize>> {
        let mut order: Vec<usize> = (0..self.train.len()).collect();
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(
            self.cfg.seed + e as u64,
        ));
        batches_of(self.train, &order, &self.cfg.opts)
    }

    /// The next batch's sequences, the first of the next epoch after the last of this one.
    pub(super) fn next_batch(&mut self) -> Vec<Example<'a>> {
        if self.at == self.current.len() {
            self.e += 1;
            self.current = self.batches(self.e);
            self.at = 0;
        }
        let examples = self.current[self.at]
            .iter()
            .map(|&i| self.train[i])
            .collect();
        self.at += 1;
        examples
    }
}

/// What a checkpoint's record is made of: the sequences the head is measured on (held-out and
/// evaluation sets), the run's settings and data, and where the record goes.
struct Recorder<'a> {
    cfg: &'a RunConfig,
    held_out: &'a [Example<'a>],
    eval: Vec<EvalExamples<'a>>,
    data_lines: Vec<String>,
    draft_vocab: usize,
    sequences: usize,
    record_path: PathBuf,
}

impl Recorder<'_> {
    /// The head measured at optimiser step `step` (held-out loss, agreement and tau, and the
    /// same on each evaluation set), saved as the checkpoint `cfg.out` with its record beside it;
    /// returns the record.
    fn record(&self, trainer: &mut Trainer, t: &mut LoadedModel, step: usize) -> Result<RunRecord> {
        let cfg = self.cfg;
        let (loss, agree, walked) =
            mean_figures(trainer, &mut t.decoder, self.held_out, &cfg.opts)?;
        let mut eval = vec![];
        let figures = |name: &str, sums: &FigureSums| {
            let (_, agreement, w) = sums.means();
            EvalFigures {
                set: name.to_string(),
                simulated_tau: simulated_tau(&agreement),
                walked_tau: w.tau(),
                agreement,
                by_category: vec![],
            }
        };
        for set in &self.eval {
            // A set with categories is measured once, category by category; its own figures
            // are their sums'.
            let mut all = FigureSums::default();
            let mut by_category = vec![];
            for (name, seqs) in &set.categories {
                let sums = figure_sums(trainer, &mut t.decoder, seqs, &cfg.opts)?;
                all.add(&sums);
                by_category.push(figures(name, &sums));
            }
            if set.categories.is_empty() {
                all = figure_sums(trainer, &mut t.decoder, &set.seqs, &cfg.opts)?;
            }
            eval.push(EvalFigures {
                by_category,
                ..figures(set.name, &all)
            });
        }
        let rec = RunRecord {
            command: cfg.command.clone(),
            target: t.name.clone(),
            data: self.data_lines.clone(),
            init: cfg.init.as_ref().map(|p| p.display().to_string()),
            draft_vocab: self.draft_vocab,
            feature_layers: trainer.head().feature_layers(),
            sequences: self.sequences,
            held_out: self.held_out.len(),
            k: cfg.opts.k,
            lr: cfg.opts.lr,
            lr_schedule: cfg.opts.schedule.name().into(),
            seed: cfg.seed,
            step,
            held_out_loss: loss,
            simulated_tau: simulated_tau(&agree),
            walked_tau: walked.tau(),
            held_out_agreement: agree,
            eval,
        };
        let tmp = beside(&cfg.out, ".tmp.safetensors");
        trainer.save(&tmp)?;
        std::fs::rename(&tmp, &cfg.out).map_err(|e| Error::io(&cfg.out, e))?;
        write_json(&self.record_path, &rec)?;
        self.keep_best(&rec)?;
        Ok(rec)
    }

    /// The checkpoint just written (its record `rec`) copied to [`best_path`], its record beside
    /// it, where its held-out walked tau is above the best one's so far, or where there is none
    /// of this run (a run starting at step 0 replaces any).
    fn keep_best(&self, rec: &RunRecord) -> Result<()> {
        let best = best_path(&self.cfg.out);
        let better = rec.step == 0
            || best_record(&self.cfg.out).is_none_or(|b| rec.walked_tau > b.walked_tau);
        if better {
            // A second name for the checkpoint's file where the file system allows (the next
            // checkpoint is written to a new file and renamed over `out`, so this one stays as
            // it is), else a copy.
            let tmp = beside(&best, ".tmp");
            let _ = std::fs::remove_file(&tmp);
            link_or_copy(&self.cfg.out, &tmp)?;
            std::fs::rename(&tmp, &best).map_err(|e| Error::io(&best, e))?;
            write_json(&beside(&best, ".json"), rec)?;
        }
        Ok(())
    }
}

/// `from` given the second name `to` where the file system allows, else copied there: a
/// checkpoint is replaced by renaming a new file over it, so a link keeps the old one as it is.
pub(super) fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).map_err(|e| Error::io(to, e))?;
    }
    Ok(())
}

/// Where a run writing `out` keeps its best checkpoint by the held-out walked tau
/// (`HEAD.safetensors.best.safetensors`, its record beside it as `.json`): a run that goes on
/// too long (memorising its data) never loses the head it had at its best record.
pub fn best_path(out: &Path) -> PathBuf {
    beside(out, ".best.safetensors")
}

/// The record of the best checkpoint a run writing `out` has kept ([`best_path`]), if any.
pub fn best_record(out: &Path) -> Option<RunRecord> {
    record_at(&beside(&best_path(out), ".json"))
}

/// A record's figures, as a line above the bar.
fn report(b: &indicatif::ProgressBar, rec: &RunRecord) {
    let eval: String = rec
        .eval
        .iter()
        .map(|e| {
            format!(
                "; {} tau {:.2} walked, {:.2} simulated (step-1 agreement {:.2})",
                e.set,
                e.walked_tau,
                e.simulated_tau,
                e.agreement.first().copied().unwrap_or(0.0)
            )
        })
        .collect();
    say(
        b,
        format!(
            "step {}: held-out loss {:.3}, agreement {:?}, tau {:.2} walked, {:.2} simulated{eval}",
            rec.step, rec.held_out_loss, rec.held_out_agreement, rec.walked_tau, rec.simulated_tau
        ),
    )
}

/// The optimiser steps from `step` to the run's last, with a progress bar: a record of the head
/// as initialised first where the run starts at step 0, then one every [`RECORD_EVERY`] steps
/// and at the last
/// ([`Recorder::record`]); returns the last record.
fn train_steps(
    t: &mut LoadedModel,
    mut trainer: Trainer,
    mut epochs: Epochs<'_>,
    recorder: &Recorder<'_>,
    mut step: usize,
) -> Result<RunRecord> {
    let cfg = recorder.cfg;
    let b = bar(
        cfg.steps as u64,
        "{msg} [{bar:30}] {pos}/{len} {per_sec} eta {eta}",
    );
    b.set_position(step as u64);
    let (mut loss_ema, mut agree_ema) = (None::<f32>, vec![0f32; cfg.opts.k]);
    let mut tokens = 0usize;
    let mut last = None;
    if step == 0 {
        // Where the training curve starts: the head as initialised.
        report(&b, &recorder.record(&mut trainer, t, 0)?);
    }
    let mut training = std::time::Duration::ZERO;
    while step < cfg.steps {
        let examples = epochs.next_batch();
        let began = std::time::Instant::now();
        trainer.set_lr(cfg.opts.schedule.at(cfg.opts.lr, step, cfg.steps));
        let r = trainer.step(&mut t.decoder, &examples, true)?;
        training += began.elapsed();
        step += 1;
        tokens += r.tokens;
        let l = loss_ema.map_or(r.loss, |e| 0.95 * e + 0.05 * r.loss);
        loss_ema = Some(l);
        for (e, a) in agree_ema.iter_mut().zip(&r.agreement) {
            *e = 0.95 * *e + 0.05 * a;
        }
        let agree: Vec<String> = agree_ema.iter().map(|a| format!("{a:.2}")).collect();
        let (kept, bytes) = trainer.cache_usage();
        let e = epochs.e;
        let message = format!(
            "loss {l:.3} agree {} {:.0} tok/s (epoch {e}, target outputs of {kept} sequences kept, {:.1} GiB)",
            agree.join("/"),
            tokens as f64 / training.as_secs_f64(),
            bytes as f64 / (1u64 << 30) as f64
        );
        if b.is_hidden() && step.is_multiple_of(50) {
            eprintln!("step {step}: {message}");
        }
        b.set_message(message);
        b.set_position(step as u64);
        if step.is_multiple_of(RECORD_EVERY) || step == cfg.steps {
            let rec = recorder.record(&mut trainer, t, step)?;
            report(&b, &rec);
            if crate::profile::enabled() {
                say(&b, crate::profile::report());
            }
            last = Some(rec);
        }
    }
    b.finish_and_clear();
    match last {
        Some(r) => Ok(r),
        None => recorder.record(&mut trainer, t, step),
    }
}
