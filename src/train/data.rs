//! The data a `treespec train-drafter` run trains on ([`super::run`]): the target's own answers
//! to the run's prompts (named prompt files, and prompts the target writes
//! itself), generated once and kept beside the head (`HEAD.safetensors.data.json`); earlier runs'
//! answers trained on ahead of them; and the target's answers to the evaluation sets' prompts
//! (`HEAD.safetensors.eval.json`).

use super::run::{bar, beside, logged, write_json, RunConfig, EVAL_PROMPTS};
use super::{answers_batched, Example};
use crate::bench::{balanced_by, bundled_prompts, load_prompts, PromptSet};
use crate::error::{Error, Result};
use crate::model::chat_template::{ChatMessage, Role};
use crate::model::LoadedModel;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A run's data file (`HEAD.safetensors.data.json`): the target's answers it trains on, and the
/// settings they were generated with.
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
    /// Turns each conversation was taken to (`--turns`; 1: no follow-ups).
    #[serde(default = "one_turn")]
    turns: usize,
    /// The follow-ups the target wrote as the user, turn by turn.
    #[serde(default)]
    follow_ups: Vec<String>,
    /// Per sequence, its turn in its conversation (1: the first; empty: every one a first).
    #[serde(default)]
    turn_of: Vec<usize>,
    /// The `--seed` the sampled text (self-written prompts, follow-ups) was drawn with; none
    /// in files from before it was recorded, which are taken for any seed.
    #[serde(default)]
    seed: Option<u64>,
}

/// Whether a run's own data depend on its `--seed`: its self-written prompts and follow-ups are
/// sampled (answers are greedy).
pub(super) fn seeded(cfg: &RunConfig) -> bool {
    cfg.self_prompts > 0 || cfg.turns > 1
}

/// The turns of a data file from before `--turns`.
fn one_turn() -> usize {
    1
}

/// Most sequences held out for evaluation (a tenth of them, at least one).
const HELD_OUT_MAX: usize = 32;

/// How many of a run's `n` own sequences are held out (the last ones): a tenth of them (at
/// least one, at most [`HELD_OUT_MAX`]), the boundary moved back to the start of the
/// conversation it would cut (`turn_of`: each sequence's turn, 1 a conversation's first; empty:
/// every one a first), so that no held-out turn reads an answer trained on as its context; or
/// forward, where moving back would leave nothing to train on.
pub(super) fn held_out_of(turn_of: &[usize], n: usize) -> usize {
    let held = (n / 10).clamp(1, HELD_OUT_MAX).min(n);
    let first_turn = |i: usize| turn_of.get(i).is_none_or(|&t| t <= 1);
    let cut = n - held;
    if let Some(back) = (1..=cut).rev().find(|&i| first_turn(i)) {
        return n - back;
    }
    match (cut + 1..n).find(|&i| first_turn(i)) {
        Some(forward) => n - forward,
        None => held,
    }
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
    let trained = n.saturating_sub(held_out_of(&d.turn_of, n));
    Ok(d.sequences
        .iter()
        .zip(d.answer_from.into_iter().chain(std::iter::repeat(0)))
        .take(trained)
        .map(|(seq, answer_from)| Example { seq, answer_from }.answer().to_vec())
        .collect())
}

/// Longest self-written prompt (or follow-up), in tokens.
pub(super) const SELF_PROMPT_TOKENS: usize = 96;

/// System prompts that steer the target's self-written prompts to the kinds of request a chat
/// user makes (as Magpie steers its queries): the eight categories of the bundled chat and
/// held-out sets (writing, role-play, reasoning, maths, code, extraction, STEM, humanities).
/// They only open the turn the prompt is written in; the answers are written to the prompt alone,
/// under the template's own system prompt, as a user would ask it.
pub const SELF_PROMPT_DOMAINS: [&str; 8] = [
    "You are a writing assistant. Users ask you for letters, emails, stories, poems, speeches \
     and descriptions.",
    "You are an improvising actor. Users ask you to play a character or a professional and to \
     speak as them.",
    "You are a helpful assistant. Users ask you logic puzzles and questions that need careful \
     step-by-step reasoning.",
    "You are a math tutor. Users ask you to solve math word problems and exercises step by step.",
    "You are a programming assistant. Users ask you to write, explain, fix or complete code.",
    "You are a data assistant. Users paste text and ask you to extract, list, classify or \
     summarise what is in it.",
    "You are a science teacher. Users ask you questions about physics, chemistry, biology, \
     medicine and technology.",
    "You are a knowledgeable assistant. Users ask you about history, philosophy, literature, \
     geography and society.",
];

/// A user message text no template changes, to find where the user turn opens.
const USER_MARKER: &str = "\u{1}treespec-user-turn\u{1}";

/// What is trained on of a sequence (tokens past it are cut): the target's context, or the
/// options' `max_len` where shorter.
pub(super) fn trained_length(cfg: &RunConfig, t: &LoadedModel) -> usize {
    t.decoder.context().min(cfg.opts.max_len)
}

/// Prompts (in tokens) must be shorter than this to leave room for an answer in the
/// [`trained_length`].
fn answer_room(cfg: &RunConfig, t: &LoadedModel) -> usize {
    trained_length(cfg, t).saturating_sub(2)
}

/// A user message as the target reads it: the chat template around it, as token ids.
fn user_turn(t: &LoadedModel, text: String) -> Result<Vec<u32>> {
    let text = t
        .template
        .render(&[ChatMessage::new(Role::User, text)], true)?;
    t.tokenizer.encode(&text, true)
}

/// The target's greedy answers to `prompts` (templated token ids; empty ones left out), up to
/// `answer_tokens` new tokens each ([`answers_batched`]), each with where its answer starts.
pub(super) fn answered(
    t: &mut LoadedModel,
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
/// system prompt `system` and the conversation's `earlier` messages.
pub(super) fn open_user_turn(
    t: &LoadedModel,
    system: &str,
    earlier: &[ChatMessage],
) -> Result<Vec<u32>> {
    let mut messages = vec![ChatMessage::new(Role::System, system.to_string())];
    messages.extend_from_slice(earlier);
    messages.push(ChatMessage::new(Role::User, USER_MARKER.to_string()));
    let text = t.template.render(&messages, true)?;
    let cut = text.find(USER_MARKER).ok_or_else(|| {
        Error::InvalidArgument("the chat template does not show the user's message".into())
    })?;
    t.tokenizer.encode(&text[..cut], true)
}

/// The target's answers to the evaluation sets' prompts, generated once (beside the head as
/// `HEAD.safetensors.eval.json`).
#[derive(Serialize, Deserialize)]
struct EvalFile {
    target: String,
    answer_tokens: usize,
    sets: Vec<EvalSet>,
}

/// An evaluation set: its name, its sequences with where their answers start, and each one's
/// prompt's category (empty where the set names none).
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct EvalSet {
    pub(super) name: String,
    pub(super) seqs: Vec<(Vec<u32>, usize)>,
    pub(super) categories: Vec<String>,
}

/// An evaluation prompt as the target reads it, and its category ("" where none).
type Picked = (Vec<u32>, String);

/// The evaluation sets' sequences (`cfg.eval`): the target's answers to [`EVAL_PROMPTS`]
/// prompts of each, its categories taking turns ([`balanced_by`]), read from
/// `HEAD.safetensors.eval.json` when it holds them, else generated and written there.
pub(super) fn eval_sets(cfg: &RunConfig, t: &mut LoadedModel) -> Result<Vec<EvalSet>> {
    let sets: Vec<PromptSet> = match &cfg.eval {
        None => return Ok(vec![]),
        Some(files) if files.is_empty() => bundled_prompts(None)?,
        Some(files) => files
            .iter()
            .map(|p| load_prompts(p, None))
            .collect::<Result<_>>()?,
    };
    // Each set's prompts that leave room for an answer, then EVAL_PROMPTS of them with the
    // categories taking turns; a set with none left out, and said.
    let room = answer_room(cfg, t);
    let mut picked: Vec<(String, Vec<Picked>)> = vec![];
    for set in sets {
        let mut fits = vec![];
        for p in set.prompts {
            let prompt = user_turn(t, p.text)?;
            if prompt.len() < room {
                fits.push((prompt, p.category));
            }
        }
        if fits.is_empty() {
            eprintln!(
                "evaluation set {}: no prompt leaves room for an answer in {room} tokens; left out",
                set.name
            );
            continue;
        }
        let prompts = balanced_by(fits, EVAL_PROMPTS, |(_, c)| c.clone())
            .into_iter()
            .map(|(prompt, c)| (prompt, c.unwrap_or_default()))
            .collect();
        picked.push((set.name, prompts));
    }
    let path = beside(&cfg.out, ".eval.json");
    let names: Vec<(&str, usize)> = picked.iter().map(|(n, p)| (n.as_str(), p.len())).collect();
    let cached = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| serde_json::from_str::<EvalFile>(&s).ok())
        .filter(|e| {
            let had: Vec<(&str, usize)> = e
                .sets
                .iter()
                .map(|s| (s.name.as_str(), s.categories.len()))
                .collect();
            e.target == t.name && e.answer_tokens == cfg.answer_tokens && had == names
        });
    if let Some(e) = cached {
        return Ok(e.sets);
    }
    let mut out = vec![];
    for (name, prompts) in picked {
        let (prompts, categories): (Vec<Vec<u32>>, Vec<String>) = prompts.into_iter().unzip();
        out.push(EvalSet {
            name,
            seqs: answered(t, &prompts, cfg.answer_tokens, |_| {})?,
            categories,
        });
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

/// The sequences a run trains on and holds out, with where their answers start: earlier runs'
/// answers (`--extra-data`) first, then this run's own.
pub(super) struct TrainingData<'a> {
    /// Token ids of every sequence.
    pub(super) sequences: Vec<Vec<u32>>,
    /// Per sequence, where its answer starts.
    pub(super) answer_from: Vec<usize>,
    /// This run's own sequences (the last ones; the last [`held_out_of`] of them are held out).
    pub(super) own: usize,
    /// Each own sequence's turn in its conversation (1: the first).
    pub(super) turn_of: Vec<usize>,
    /// Earlier runs' data files, and the sequences kept of each.
    pub(super) earlier: Vec<(&'a PathBuf, usize)>,
}

impl TrainingData<'_> {
    /// How many of the sequences are held out (the last ones, [`held_out_of`]); an error where
    /// the run has fewer than two answers of its own.
    pub(super) fn held_out(&self) -> Result<usize> {
        let own = self.own;
        if own < 2 {
            return Err(Error::InvalidArgument(format!(
                "training needs at least two answered prompts (one is held out); the data hold {own}"
            )));
        }
        Ok(held_out_of(&self.turn_of, own))
    }

    /// The sequences as training examples.
    pub(super) fn examples(&self) -> Vec<Example<'_>> {
        self.sequences
            .iter()
            .zip(&self.answer_from)
            .map(|(s, &a)| Example {
                seq: s.as_slice(),
                answer_from: a,
            })
            .collect()
    }
}

/// The data of a run of `cfg` over the target `t`: earlier runs' answers (checked before
/// anything is generated, as is a checkpoint to resume, its record at `record_path`, against
/// this run's own prompts), the target's answers to this run's prompts (generated once), and the
/// two put together ([`with_earlier`]).
pub(super) fn training_data<'a>(
    cfg: &'a RunConfig,
    t: &mut LoadedModel,
    record_path: &Path,
) -> Result<TrainingData<'a>> {
    let data_path = beside(&cfg.out, ".data.json");
    // Earlier runs' answers, checked before anything is generated.
    let extra = earlier_data(cfg, &t.name, &data_path)?;
    let prompts = templated_prompts(cfg, t)?;
    super::run::same_own_data(cfg, record_path)?;
    // The target's answers, generated once.
    let own = own_answers(cfg, t, &data_path, prompts)?;
    Ok(with_earlier(own, extra))
}

/// The data files of earlier runs (`cfg.extra_data`), read and checked: not this run's own
/// (`data_path`), answers of the target named `target`, every answer's start in its sequence.
fn earlier_data<'a>(
    cfg: &'a RunConfig,
    target: &str,
    data_path: &Path,
) -> Result<Vec<(&'a PathBuf, DataFile)>> {
    let mut extra = vec![];
    for path in &cfg.extra_data {
        let real = std::fs::canonicalize(path).ok();
        if real.is_some() && real == std::fs::canonicalize(data_path).ok() {
            return Err(Error::InvalidArgument(format!(
                "{}: this run's own data file, not an earlier run's",
                path.display()
            )));
        }
        let d = read_data(path)?;
        if d.target != target {
            return Err(Error::InvalidArgument(format!(
                "{}: answers of {}, not of the target {}",
                path.display(),
                d.target,
                target
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
    Ok(extra)
}

/// The prompts of `cfg.data` as the target `t` reads them: the chat template around each, as
/// token ids, beside their texts. An error where no prompts are named and none are to be
/// self-written (the bundled sets are the benchmarks' and the evaluation's prompts: never trained
/// on), or where they are fewer than two.
fn templated_prompts(cfg: &RunConfig, t: &LoadedModel) -> Result<(Vec<Vec<u32>>, Vec<String>)> {
    if cfg.data.is_empty() && cfg.self_prompts == 0 {
        return Err(Error::InvalidArgument(
            "nothing to train on: name prompt files with --data FILE, or let the target write \
             its own with --self-prompts N (the bundled prompt sets are benchmarks, never \
             trained on)"
                .into(),
        ));
    }
    let sets: Vec<PromptSet> = cfg
        .data
        .iter()
        .map(|p| load_prompts(p, None))
        .collect::<Result<_>>()?;
    // A user message as the target reads it: the chat template around it, as token ids; those
    // that leave no room for an answer in the context left out, and said.
    let room = answer_room(cfg, t);
    let (mut prompts, mut texts, mut long) = (vec![], vec![], 0);
    for p in sets.iter().flat_map(|s| &s.prompts) {
        let prompt = user_turn(t, p.text.clone())?;
        if prompt.len() >= room {
            long += 1;
            continue;
        }
        prompts.push(prompt);
        texts.push(p.text.clone());
    }
    if long > 0 {
        eprintln!(
            "{long} prompts left out: no room for an answer in {room} tokens (the context or \
             the trained length, where shorter)"
        );
    }
    let asked = prompts.len() + cfg.self_prompts;
    if asked < 2 {
        return Err(Error::InvalidArgument(
            "training needs at least two prompts (one is held out)".into(),
        ));
    }
    Ok((prompts, texts))
}

/// The target's answers to `prompts` (templated, beside their texts) and to the
/// `cfg.self_prompts` prompts it writes itself ([`self_written_prompts`]), each conversation
/// taken to `cfg.turns` turns ([`super::turns`]: a sequence a turn), with where each answer
/// starts: read from `data_path` where it holds them for these settings, else generated and
/// written there.
fn own_answers(
    cfg: &RunConfig,
    t: &mut LoadedModel,
    data_path: &Path,
    (mut prompts, mut texts): (Vec<Vec<u32>>, Vec<String>),
) -> Result<super::turns::Continued> {
    let asked = prompts.len() + cfg.self_prompts;
    let cached: Option<DataFile> = std::fs::read_to_string(data_path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .filter(|d: &DataFile| {
            d.target == t.name
                && d.answer_tokens == cfg.answer_tokens
                && d.prompts == asked
                && d.self_prompts == cfg.self_prompts
                && d.self_prompt_systems == cfg.self_prompt_systems
                && d.turns == cfg.turns
                && d.answer_from.len() == d.sequences.len()
                && (d.turns == 1 || d.turn_of.len() == d.sequences.len())
                && (!seeded(cfg) || d.seed.is_none_or(|s| s == cfg.seed))
        });
    if let Some(d) = cached {
        return Ok(super::turns::Continued {
            turn_of: match d.turn_of.len() == d.sequences.len() {
                true => d.turn_of,
                false => vec![1; d.sequences.len()],
            },
            seqs: d.sequences,
            answer_from: d.answer_from,
            follow_ups: d.follow_ups,
        });
    }
    let mut self_written = vec![];
    if cfg.self_prompts > 0 {
        self_written = self_written_prompts(cfg, t, &mut prompts)?;
    }
    let b = bar(
        prompts.len() as u64,
        "target's answers [{bar:30}] {pos}/{len} eta {eta}",
    );
    let started = std::time::Instant::now();
    let (seqs, answer_from): (Vec<Vec<u32>>, Vec<usize>) =
        answered(t, &prompts, cfg.answer_tokens, |i| {
            logged(&b, "target's answers", i, started)
        })?
        .into_iter()
        .unzip();
    b.finish_and_clear();
    texts.extend(self_written.iter().cloned());
    let c = match cfg.turns {
        1 => super::turns::Continued {
            turn_of: vec![1; seqs.len()],
            seqs,
            answer_from,
            follow_ups: vec![],
        },
        _ => super::turns::go_on(cfg, t, &texts, seqs, answer_from)?,
    };
    write_json(
        data_path,
        &DataFile {
            target: t.name.clone(),
            answer_tokens: cfg.answer_tokens,
            prompts: asked,
            self_prompts: cfg.self_prompts,
            self_prompt_systems: cfg.self_prompt_systems.clone(),
            sequences: c.seqs.clone(),
            answer_from: c.answer_from.clone(),
            self_written,
            turns: cfg.turns,
            follow_ups: c.follow_ups.clone(),
            turn_of: c.turn_of.clone(),
            seed: Some(cfg.seed),
        },
    )?;
    Ok(c)
}

/// The `cfg.self_prompts` prompts the target `t` writes itself (Magpie-style), shared out evenly
/// among the system prompts that steer them (`cfg.self_prompt_systems`, else
/// [`SELF_PROMPT_DOMAINS`]), with a progress bar: each appended to `prompts` as the target reads
/// it, the domains interleaved (so that the held-out sequences, the last, span them all), and
/// their texts returned in that order.
fn self_written_prompts(
    cfg: &RunConfig,
    t: &mut LoadedModel,
    prompts: &mut Vec<Vec<u32>>,
) -> Result<Vec<String>> {
    let stops = t.tokenizer.stop_ids().clone();
    let mut self_written = vec![];
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
        let count = cfg.self_prompts / domains + usize::from(i < cfg.self_prompts % domains);
        let prefix = open_user_turn(t, system, &[])?;
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
            prompts.push(user_turn(t, text.clone())?);
            self_written.push(text);
        }
    }
    Ok(self_written)
}

/// Earlier runs' answers (`extra`), ahead of this run's own sequences (`own`, whose last ones
/// are held out), less any whose prompt is a held-out one (an earlier run over the same prompts
/// would otherwise train on them).
fn with_earlier<'a>(
    own: super::turns::Continued,
    extra: Vec<(&'a PathBuf, DataFile)>,
) -> TrainingData<'a> {
    let super::turns::Continued {
        seqs: sequences,
        answer_from,
        turn_of,
        ..
    } = own;
    let own = sequences.len();
    let (sequences_before, earlier) = {
        let held_prompts: std::collections::HashSet<&[u32]> = sequences
            .iter()
            .zip(&answer_from)
            .skip(own.saturating_sub(held_out_of(&turn_of, own)))
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
    TrainingData {
        sequences,
        answer_from,
        own,
        turn_of,
        earlier,
    }
}

/// How a record's line naming an earlier run's answers starts.
pub(super) const EARLIER_ANSWERS: &str = "earlier answers: ";

/// What a run trains on, as its record says it (a resumed run must train on the same): the
/// prompt files, the self-written prompts and what steered them, and the earlier runs' answers.
pub(super) fn data_lines(cfg: &RunConfig, earlier: &[(&PathBuf, usize)]) -> Vec<String> {
    let mut d: Vec<String> = cfg.data.iter().map(|p| p.display().to_string()).collect();
    if cfg.self_prompts > 0 {
        d.push(format!("self-written: {}", cfg.self_prompts));
    }
    for system in &cfg.self_prompt_systems {
        d.push(format!("self-written under: {system}"));
    }
    if cfg.turns > 1 {
        d.push(format!("turns: {}", cfg.turns));
    }
    for (path, n) in earlier {
        d.push(format!(
            "{EARLIER_ANSWERS}{} ({n} sequences)",
            path.display()
        ));
    }
    d
}

#[cfg(test)]
mod tests {
    use super::held_out_of;

    #[test]
    fn the_held_out_sequences_are_whole_conversations() {
        // One-turn data: a tenth, at least one.
        assert_eq!(held_out_of(&[], 30), 3);
        assert_eq!(held_out_of(&[1; 5], 5), 1);
        // Conversations of two turns: a tenth of 30 would start at a second turn (27); the
        // boundary moves back to its conversation's start.
        assert_eq!(held_out_of(&[1, 2].repeat(15), 30), 4);
        assert_eq!(held_out_of(&[1, 2, 1, 2], 4), 2);
        // Moving back would leave nothing to train on: forward to the next conversation.
        let mut long = vec![1];
        long.extend([2; 18]);
        long.push(1);
        assert_eq!(held_out_of(&long, 20), 1);
        // One conversation: the plain tenth (nothing else to hold out).
        assert_eq!(held_out_of(&[1, 2], 2), 1);
    }
}
