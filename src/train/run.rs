//! A whole `treespec train-drafter` run: the target's answers to the prompts (generated once and
//! kept beside the output), the head initialised from the target's last layer, optimiser steps with
//! a progress bar, held-out evaluation, and checkpoints that a later run resumes from.
//!
//! Files, for `--out HEAD.safetensors`: the head itself (MiMo names: `--drafter HEAD.safetensors`
//! drafts with it), `HEAD.safetensors.json` (the run's record: command, data, seed, step reached,
//! held-out figures; read on resume) and `HEAD.safetensors.data.json` (the token ids trained on).

use super::head::TrainableHead;
use super::{answers_batched, batches_of, Example, TrainOptions, Trainer, Walk};
use crate::bench::{bundled_prompts, load_prompts, PromptSet};
use crate::error::{Error, Result};
use crate::model::chat_template::{ChatMessage, Role};
use crate::model::source::{self, ModelFiles};
use crate::model::weights::{read_gguf_header, WeightStore};
use crate::model::LoadOptions;
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
    /// Prompt files (JSON lines with a `prompt` field); empty and no self-written prompts: the
    /// bundled sets.
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
    /// Prompts the target writes itself before answering them (Magpie-style; 0: none).
    pub self_prompts: usize,
    /// System prompts that steer the self-written prompts, shared out evenly among them (empty:
    /// the four built-in domains, [`SELF_PROMPT_DOMAINS`]).
    pub self_prompt_systems: Vec<String>,
    /// Prompt sets never trained on, to measure the head on as it trains (the first
    /// [`EVAL_PROMPTS`] of each; empty: none). `Some(vec![])`: the bundled sets.
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
}

/// Prompts of each evaluation set the head is measured on.
pub const EVAL_PROMPTS: usize = 16;

/// The target's answers to the evaluation sets' prompts, generated once (beside the head as
/// `HEAD.safetensors.eval.json`).
#[derive(Serialize, Deserialize)]
struct EvalFile {
    target: String,
    answer_tokens: usize,
    sets: Vec<EvalSet>,
}

/// An evaluation set's name, and its sequences with where their answers start.
type EvalSet = (String, Vec<(Vec<u32>, usize)>);

/// Loss and per-step agreement of the head over `seqs`, not learning: in batches as training
/// reads them, each batch's figures weighted by the rows it counted.
fn mean_figures(
    trainer: &mut Trainer,
    target: &mut crate::model::decoder::Decoder,
    seqs: &[Example<'_>],
    opts: &TrainOptions,
) -> Result<(f32, Vec<f32>, Walk)> {
    let order: Vec<usize> = (0..seqs.len()).collect();
    let (mut loss, mut rows) = (0.0, 0usize);
    let (mut agreed, mut counted) = (vec![0.0; opts.k], vec![0usize; opts.k]);
    let mut walked = Walk::default();
    for batch in batches_of(seqs, &order, opts) {
        let examples: Vec<Example<'_>> = batch.iter().map(|&i| seqs[i]).collect();
        let r = trainer.step(target, &examples, false)?;
        loss += r.loss * r.predicted as f32;
        if let Some(w) = r.walk {
            walked.steps += w.steps;
            walked.emitted += w.emitted;
        }
        rows += r.predicted;
        for j in 0..opts.k {
            agreed[j] += r.agreement[j] * r.counted[j] as f32;
            counted[j] += r.counted[j];
        }
    }
    let agreement = agreed
        .iter()
        .zip(&counted)
        .map(|(a, &n)| if n == 0 { 0.0 } else { a / n as f32 })
        .collect();
    Ok((loss / rows.max(1) as f32, agreement, walked))
}

/// `1 + a1 + a1 a2 + ...` for per-step agreements `a`.
pub fn simulated_tau(agreement: &[f32]) -> f32 {
    let mut run = 1.0;
    1.0 + agreement
        .iter()
        .map(|a| {
            run *= a;
            run
        })
        .sum::<f32>()
}

#[derive(Serialize, Deserialize)]
struct DataFile {
    target: String,
    answer_tokens: usize,
    /// Prompts asked for: from files (or bundled) plus self-written.
    prompts: usize,
    /// Self-written prompts asked for.
    #[serde(default)]
    self_prompts: usize,
    /// The system prompts that steered them, where not the built-in domains.
    #[serde(default)]
    self_prompt_systems: Vec<String>,
    sequences: Vec<Vec<u32>>,
    /// Per sequence, where its answer starts (its prompt's length).
    #[serde(default)]
    answer_from: Vec<usize>,
    /// The self-written prompts' texts, in the order of their sequences (after the others).
    #[serde(default)]
    self_written: Vec<String>,
}

/// Most sequences held out for evaluation (a tenth of them, at least one).
const HELD_OUT_MAX: usize = 32;

/// How many of `n` sequences are held out (the last ones).
fn held_out_of(n: usize) -> usize {
    (n / 10).clamp(1, HELD_OUT_MAX)
}

/// A run's data file, read.
fn read_data(path: &Path) -> Result<DataFile> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| {
        Error::InvalidArgument(format!("{}: not a training data file: {e}", path.display()))
    })
}

/// The answers trained on in a run's data file (`HEAD.safetensors.data.json`): each training
/// sequence (the held-out ones left out, as the run leaves them) from its answer's start. What a
/// draft vocabulary is chosen from ([`crate::model::draft_vocab::most_frequent`]).
pub fn trained_answers(path: &Path) -> Result<Vec<Vec<u32>>> {
    let d = read_data(path)?;
    let n = d.sequences.len();
    let trained = n.saturating_sub(held_out_of(n));
    Ok(d.sequences
        .iter()
        .zip(d.answer_from.into_iter().chain(std::iter::repeat(0)))
        .take(trained)
        .map(|(seq, answer_from)| Example { seq, answer_from }.answer().to_vec())
        .collect())
}

/// Longest self-written prompt, in tokens.
const SELF_PROMPT_TOKENS: usize = 96;

/// System prompts that steer the target's self-written prompts to the domains a user asks about
/// (as Magpie steers its queries): code, math, open chat and writing, knowledge and reasoning.
/// They only open the turn the prompt is written in; the answers are written to the prompt alone,
/// under the template's own system prompt, as a user would ask it.
pub const SELF_PROMPT_DOMAINS: [&str; 4] = [
    "You are a programming assistant. Users ask you to write, explain, fix or complete code.",
    "You are a math tutor. Users ask you to solve math word problems and exercises step by step.",
    "You are a helpful assistant. Users ask you for advice, ideas, stories, letters, summaries \
     and everyday help.",
    "You are a knowledgeable assistant. Users ask you questions about science, history, \
     geography and logic puzzles.",
];

/// A user message text no template changes, to find where the user turn opens.
const USER_MARKER: &str = "\u{1}treespec-user-turn\u{1}";

/// A user message as the target reads it: the chat template around it, as token ids.
fn user_turn(t: &crate::model::LoadedModel, text: String) -> Result<Vec<u32>> {
    let text = t
        .template
        .render(&[ChatMessage::new(Role::User, text)], true)?;
    t.tokenizer.encode(&text, true)
}

/// The target's greedy answers to `prompts` (templated token ids; empty ones left out), up to
/// `answer_tokens` new tokens each ([`answers_batched`]), each with where its answer starts.
fn answered(
    t: &mut crate::model::LoadedModel,
    prompts: &[Vec<u32>],
    answer_tokens: usize,
    progress: impl FnMut(usize),
) -> Result<Vec<(Vec<u32>, usize)>> {
    let stops = t.tokenizer.stop_ids().clone();
    let seqs = answers_batched(&mut t.decoder, prompts, answer_tokens, &stops, progress)?;
    // (answers_batched leaves empty prompts out.)
    let starts = prompts.iter().filter(|p| !p.is_empty()).map(Vec::len);
    Ok(seqs.into_iter().zip(starts).collect())
}

/// The token ids of the chat template up to the content of an opened user turn, after the
/// system prompt `system`.
fn open_user_turn(t: &crate::model::LoadedModel, system: &str) -> Result<Vec<u32>> {
    let text = t.template.render(
        &[
            ChatMessage::new(Role::System, system.to_string()),
            ChatMessage::new(Role::User, USER_MARKER.to_string()),
        ],
        true,
    )?;
    let cut = text.find(USER_MARKER).ok_or_else(|| {
        Error::InvalidArgument("the chat template does not show the user's message".into())
    })?;
    t.tokenizer.encode(&text[..cut], true)
}

fn beside(out: &Path, suffix: &str) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string(value)
        .map_err(|e| Error::InvalidArgument(format!("{}: {e}", path.display())))?;
    let tmp = beside(path, ".tmp");
    std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

fn bar(len: u64, template: &str) -> indicatif::ProgressBar {
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
fn logged(b: &indicatif::ProgressBar, what: &str, done: usize, started: std::time::Instant) {
    b.set_position(done as u64);
    if b.is_hidden() {
        let all = b.length().unwrap_or(0);
        eprintln!(
            "{what}: {done}/{all} after {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
}

/// The evaluation sets' sequences (`cfg.eval`): the target's answers to the first
/// [`EVAL_PROMPTS`] prompts of each, read from `HEAD.safetensors.eval.json` when it holds them,
/// else generated and written there.
fn eval_sets(cfg: &RunConfig, t: &mut crate::model::LoadedModel) -> Result<Vec<EvalSet>> {
    let sets: Vec<PromptSet> = match &cfg.eval {
        None => return Ok(vec![]),
        Some(files) if files.is_empty() => bundled_prompts(Some(EVAL_PROMPTS))?,
        Some(files) => files
            .iter()
            .map(|p| load_prompts(p, Some(EVAL_PROMPTS)))
            .collect::<Result<_>>()?,
    };
    let path = beside(&cfg.out, ".eval.json");
    let names: Vec<(&str, usize)> = sets
        .iter()
        .map(|s| (s.name.as_str(), s.prompts.len()))
        .collect();
    let cached = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| serde_json::from_str::<EvalFile>(&s).ok())
        .filter(|e| {
            let had: Vec<(&str, usize)> =
                e.sets.iter().map(|(n, s)| (n.as_str(), s.len())).collect();
            e.target == t.name && e.answer_tokens == cfg.answer_tokens && had == names
        });
    if let Some(e) = cached {
        return Ok(e.sets);
    }
    // Prompts that leave no room for an answer in the context are left out.
    let room = t.decoder.context().saturating_sub(2);
    let mut out = vec![];
    for set in &sets {
        let prompts: Vec<Vec<u32>> = set
            .prompts
            .iter()
            .map(|p| user_turn(t, p.text.clone()))
            .filter(|p| p.as_ref().map_or(true, |p| p.len() < room))
            .collect::<Result<_>>()?;
        out.push((
            set.name.clone(),
            answered(t, &prompts, cfg.answer_tokens, |_| {})?,
        ));
    }
    write_json(
        &path,
        &EvalFile {
            target: t.name.clone(),
            answer_tokens: cfg.answer_tokens,
            sets: out.clone(),
        },
    )?;
    Ok(out)
}

/// Run (or resume) training; returns the final record.
pub fn run(cfg: &RunConfig) -> Result<RunRecord> {
    if cfg.self_prompts == 0 && !cfg.self_prompt_systems.is_empty() {
        return Err(Error::InvalidArgument(
            "a self-prompt system prompt steers self-written prompts: ask for some with \
             --self-prompts N"
                .into(),
        ));
    }
    let mut t = crate::load::load_model(&cfg.target, &cfg.load)?;
    let data_path = beside(&cfg.out, ".data.json");
    // Earlier runs' answers, checked before anything is generated.
    let mut extra = vec![];
    for path in &cfg.extra_data {
        let real = std::fs::canonicalize(path).ok();
        if real.is_some() && real == std::fs::canonicalize(&data_path).ok() {
            return Err(Error::InvalidArgument(format!(
                "{}: this run's own data file, not an earlier run's",
                path.display()
            )));
        }
        let d = read_data(path)?;
        if d.target != t.name {
            return Err(Error::InvalidArgument(format!(
                "{}: answers of {}, not of the target {}",
                path.display(),
                d.target,
                t.name
            )));
        }
        let starts_fit = d.answer_from.len() == d.sequences.len()
            && d.sequences
                .iter()
                .zip(&d.answer_from)
                .all(|(s, &a)| a <= s.len());
        if !starts_fit {
            return Err(Error::InvalidArgument(format!(
                "{}: its answers' starts are missing or out of range; generate it again",
                path.display()
            )));
        }
        extra.push((path, d));
    }
    // The bundled sets only when no prompts are named and none are to be self-written.
    let bundled = cfg.data.is_empty() && cfg.self_prompts == 0;
    let sets: Vec<PromptSet> = if bundled {
        bundled_prompts(None)?
    } else {
        cfg.data
            .iter()
            .map(|p| load_prompts(p, None))
            .collect::<Result<_>>()?
    };
    // A user message as the target reads it: the chat template around it, as token ids.
    let mut prompts = vec![];
    for p in sets.iter().flat_map(|s| &s.prompts) {
        prompts.push(user_turn(&t, p.text.clone())?);
    }
    let asked = prompts.len() + cfg.self_prompts;
    if asked < 2 {
        return Err(Error::InvalidArgument(
            "training needs at least two prompts (one is held out)".into(),
        ));
    }

    // The target's answers, generated once.
    let cached: Option<DataFile> = std::fs::read_to_string(&data_path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .filter(|d: &DataFile| {
            d.target == t.name
                && d.answer_tokens == cfg.answer_tokens
                && d.prompts == asked
                && d.self_prompts == cfg.self_prompts
                && d.self_prompt_systems == cfg.self_prompt_systems
                && d.answer_from.len() == d.sequences.len()
        });
    let (sequences, answer_from) = match cached {
        Some(d) => (d.sequences, d.answer_from),
        None => {
            let stops = t.tokenizer.stop_ids().clone();
            let mut self_written = vec![];
            if cfg.self_prompts > 0 {
                let b = bar(
                    cfg.self_prompts as u64,
                    "self-written prompts [{bar:30}] {pos}/{len} eta {eta}",
                );
                let started = std::time::Instant::now();
                let systems: Vec<&str> = if cfg.self_prompt_systems.is_empty() {
                    SELF_PROMPT_DOMAINS.to_vec()
                } else {
                    cfg.self_prompt_systems.iter().map(String::as_str).collect()
                };
                let domains = systems.len();
                let mut by_domain = vec![];
                let mut done = 0;
                for (i, system) in systems.iter().enumerate() {
                    let count =
                        cfg.self_prompts / domains + usize::from(i < cfg.self_prompts % domains);
                    let prefix = open_user_turn(&t, system)?;
                    by_domain.push(crate::train::self_prompts(
                        &mut t.decoder,
                        &prefix,
                        count,
                        SELF_PROMPT_TOKENS,
                        &stops,
                        cfg.seed + i as u64,
                        |n| logged(&b, "self-written prompts", done + n, started),
                    )?);
                    done += count;
                }
                b.finish_and_clear();
                // Domains interleaved, so that the held-out sequences (the last) span them all.
                let longest = by_domain.iter().map(Vec::len).max().unwrap_or(0);
                for j in 0..longest {
                    for content in by_domain.iter().filter_map(|d| d.get(j)) {
                        let text = t.tokenizer.decode(content)?;
                        prompts.push(user_turn(&t, text.clone())?);
                        self_written.push(text);
                    }
                }
            }
            let b = bar(
                prompts.len() as u64,
                "target's answers [{bar:30}] {pos}/{len} eta {eta}",
            );
            let started = std::time::Instant::now();
            let (seqs, answer_from): (Vec<Vec<u32>>, Vec<usize>) =
                answered(&mut t, &prompts, cfg.answer_tokens, |i| {
                    logged(&b, "target's answers", i, started)
                })?
                .into_iter()
                .unzip();
            b.finish_and_clear();
            write_json(
                &data_path,
                &DataFile {
                    target: t.name.clone(),
                    answer_tokens: cfg.answer_tokens,
                    prompts: asked,
                    self_prompts: cfg.self_prompts,
                    self_prompt_systems: cfg.self_prompt_systems.clone(),
                    sequences: seqs.clone(),
                    answer_from: answer_from.clone(),
                    self_written,
                },
            )?;
            (seqs, answer_from)
        }
    };
    // Earlier runs' answers, ahead of this run's (whose last sequences are held out), less any
    // whose prompt is a held-out one (an earlier run over the same prompts would otherwise
    // train on them).
    let own = sequences.len();
    let (sequences_before, earlier) = {
        let held_prompts: std::collections::HashSet<&[u32]> = sequences
            .iter()
            .zip(&answer_from)
            .skip(own.saturating_sub(held_out_of(own)))
            .map(|(s, &a)| &s[..a.min(s.len())])
            .collect();
        let mut before: Vec<(Vec<u32>, usize)> = vec![];
        let mut earlier = vec![];
        for (path, d) in extra {
            let kept: Vec<(Vec<u32>, usize)> = d
                .sequences
                .into_iter()
                .zip(d.answer_from)
                .filter(|(s, a)| !held_prompts.contains(&s[..*a]))
                .collect();
            earlier.push((path, kept.len()));
            before.extend(kept);
        }
        (before, earlier)
    };
    let (sequences, answer_from): (Vec<Vec<u32>>, Vec<usize>) = sequences_before
        .into_iter()
        .chain(sequences.into_iter().zip(answer_from))
        .unzip();
    let sequences: Vec<Example<'_>> = sequences
        .iter()
        .zip(answer_from)
        .map(|(s, a)| Example {
            seq: s.as_slice(),
            answer_from: a,
        })
        .collect();
    let eval_data = eval_sets(cfg, &mut t)?;
    if own < 2 {
        return Err(Error::InvalidArgument(format!(
            "training needs at least two answered prompts (one is held out); the data hold {own}"
        )));
    }
    let held = held_out_of(own);
    let (train, held_out) = sequences.split_at(sequences.len() - held);

    // The head: the target's last layer as its block, or where a checkpoint exists, that.
    let device = t.decoder.device().clone();
    let store = RefCell::new(match &t.files {
        ModelFiles::Gguf(path) => WeightStore::gguf(path, read_gguf_header(path)?, &device, false)?,
        ModelFiles::Checkpoint(dir) => {
            WeightStore::safetensors(&source::safetensors_files(dir)?, &device)?
        }
    });
    let init = |name: &str| store.borrow_mut().get_dense(name).ok();
    let mut head = TrainableHead::new(t.decoder.config(), &device, cfg.seed, Some(&init))?;
    // What the run trains on, as its record says it.
    let data_lines: Vec<String> = {
        let mut d: Vec<String> = if bundled {
            vec!["bundled".into()]
        } else {
            cfg.data.iter().map(|p| p.display().to_string()).collect()
        };
        if cfg.self_prompts > 0 {
            d.push(format!("self-written: {}", cfg.self_prompts));
        }
        for system in &cfg.self_prompt_systems {
            d.push(format!("self-written under: {system}"));
        }
        for (path, n) in &earlier {
            d.push(format!(
                "earlier answers: {} ({n} sequences)",
                path.display()
            ));
        }
        d
    };
    let record_path = beside(&cfg.out, ".json");
    let mut step = 0;
    let mut resumed_vocab = None;
    if cfg.out.exists() {
        if let Some(r) = std::fs::read_to_string(&record_path)
            .ok()
            .and_then(|s| serde_json::from_str::<RunRecord>(&s).ok())
        {
            if r.data != data_lines {
                return Err(Error::InvalidArgument(format!(
                    "{} was trained on {:?}; resume it with the same data, not {:?}",
                    cfg.out.display(),
                    r.data,
                    data_lines
                )));
            }
            head.vars_mut().load(&cfg.out)?;
            step = r.step;
            resumed_vocab = Some(r.draft_vocab).filter(|&v| v > 0);
        }
    }
    if step == 0 {
        if let Some(init) = &cfg.init {
            let tensors =
                crate::model::mtp_gguf::read_f32(init, &t.name, t.decoder.config(), &device)?;
            head.set_from(&tensors)?;
        }
    }
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
    // Epoch e visits the training sequences in an order of its own (seed + e), in batches.
    let epoch = |e: usize| {
        let mut order: Vec<usize> = (0..train.len()).collect();
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(cfg.seed + e as u64));
        batches_of(train, &order, &cfg.opts)
    };
    // Where a resumed run goes on: the epoch and batch of its step.
    let (mut e, mut seen) = (0, 0);
    let mut current = epoch(0);
    while seen + current.len() <= step {
        seen += current.len();
        e += 1;
        current = epoch(e);
    }
    let mut at = step - seen;

    let eval_examples: Vec<(&String, Vec<Example<'_>>)> = eval_data
        .iter()
        .map(|(set, data)| {
            let seqs = data
                .iter()
                .map(|(s, a)| Example {
                    seq: s.as_slice(),
                    answer_from: *a,
                })
                .collect();
            (set, seqs)
        })
        .collect();
    let record = |trainer: &mut Trainer, t: &mut crate::model::LoadedModel, step: usize| {
        let (loss, agree, walked) = mean_figures(trainer, &mut t.decoder, held_out, &cfg.opts)?;
        let mut eval = vec![];
        for (set, seqs) in &eval_examples {
            let (_, agreement, w) = mean_figures(trainer, &mut t.decoder, seqs, &cfg.opts)?;
            eval.push(EvalFigures {
                set: set.to_string(),
                simulated_tau: simulated_tau(&agreement),
                walked_tau: w.tau(),
                agreement,
            });
        }
        let rec = RunRecord {
            command: cfg.command.clone(),
            target: t.name.clone(),
            data: data_lines.clone(),
            init: cfg.init.as_ref().map(|p| p.display().to_string()),
            draft_vocab: vocab_len,
            sequences: sequences.len(),
            held_out: held_out.len(),
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
        write_json(&record_path, &rec)?;
        Ok::<_, Error>(rec)
    };

    let b = bar(
        cfg.steps as u64,
        "{msg} [{bar:30}] {pos}/{len} {per_sec} eta {eta}",
    );
    b.set_position(step as u64);
    let (mut loss_ema, mut agree_ema) = (None::<f32>, vec![0f32; cfg.opts.k]);
    let mut tokens = 0usize;
    let mut last = None;
    let report = |b: &indicatif::ProgressBar, rec: &RunRecord| {
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
    };
    if step == 0 {
        // Where the training curve starts: the head as initialised.
        report(&b, &record(&mut trainer, &mut t, 0)?);
    }
    let mut training = std::time::Duration::ZERO;
    while step < cfg.steps {
        if at == current.len() {
            e += 1;
            current = epoch(e);
            at = 0;
        }
        let examples: Vec<Example<'_>> = current[at].iter().map(|&i| train[i]).collect();
        at += 1;
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
        let message = format!(
            "loss {l:.3} agree {} {:.0} tok/s (epoch {e}, target outputs of {kept} sequences kept, {:.1} GiB)",
            agree.join("/"),
            tokens as f64 / training.as_secs_f64(),
            bytes as f64 / (1u64 << 30) as f64
        );
        if b.is_hidden() && step % 50 == 0 {
            eprintln!("step {step}: {message}");
        }
        b.set_message(message);
        b.set_position(step as u64);
        if step % 200 == 0 || step == cfg.steps {
            let rec = record(&mut trainer, &mut t, step)?;
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
        None => record(&mut trainer, &mut t, step),
    }
}
