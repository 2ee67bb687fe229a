//! `treespec bench`: decode speed, speedup over `ar`, tokens per target pass (tau), acceptance by
//! depth and the time split by stage, per prompt file and mode, measured side by side in one run.

use crate::engine::{AnswerStats, Engine, Mode, Outcome, Settings, StageTimes};
use crate::error::Result;
use crate::model::chat_template::{ChatMessage, ChatTemplate, Role};
use crate::model::tokenizer::TextTokenizer;
use serde::Serialize;

mod costs;
mod prompts;
mod variant;

pub use costs::{costs_markdown, measure_costs, measure_dflash_costs, CostRow, ROUND_COMMITS};
pub use prompts::{
    balanced_by, bundled_prompts, by_category, load_prompts, BenchPrompt, PromptSet, BUNDLED,
};
pub use variant::Variant;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Configurations, in order (`ar` is added first when missing: every speedup is a ratio to
    /// it).
    pub variants: Vec<Variant>,
    /// New tokens per prompt.
    pub max_tokens: usize,
    /// Sampler seed for each answer.
    pub seed: u64,
}

/// Per prompt and mode.
#[derive(Debug, Clone, Serialize)]
pub struct PromptRun {
    /// Prompt id.
    pub id: String,
    /// Tokens emitted.
    pub tokens: usize,
    /// Target passes.
    pub steps: usize,
    /// Seconds of decoding.
    pub seconds: f64,
    /// The emitted ids.
    pub output: Vec<u32>,
    /// `auto` only: what each step ran and what it cost (empty for the other modes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<StepTrace>,
}

/// One decoding step of an `auto` answer, for reading back what the planner did.
#[derive(Debug, Clone, Serialize)]
pub struct StepTrace {
    /// The mode the step ran in (`ar`, `linear` or `tree`).
    pub mode: &'static str,
    /// Nodes verified besides the root (the chain's length, the tree's size).
    pub drafted: usize,
    /// Tokens emitted.
    pub tokens: usize,
    /// Microseconds the step took.
    pub micros: u64,
    /// The step paid a one-off cost (a new CUDA graph shape, a drafter catching up).
    pub cold: bool,
}

/// Totals of one configuration over one prompt file.
#[derive(Debug, Clone, Serialize)]
pub struct ModeResult {
    /// The configuration's label.
    pub label: String,
    /// The mode.
    pub mode: Mode,
    /// Tokens emitted over all prompts.
    pub tokens: usize,
    /// Target passes over all prompts.
    pub steps: usize,
    /// Seconds of decoding over all prompts.
    pub seconds: f64,
    /// tokens / seconds.
    pub tokens_per_sec: f64,
    /// This mode's tokens/s over `ar`'s, same prompts, same run.
    pub speedup: f64,
    /// Tokens per target pass.
    pub tau: f64,
    /// Share of the drafted depth drafted before its step began (mostly while the target
    /// verified the step before).
    pub drafted_ahead: f64,
    /// Fraction of steps whose accepted path reached depth d (d = 1, 2, ...), among steps that
    /// drafted that deep.
    pub acceptance_by_depth: Vec<f64>,
    /// Time per stage.
    pub stages: StageTimes,
    /// Per prompt.
    pub prompts: Vec<PromptRun>,
    /// Prompts whose output is exactly `ar`'s (greedy speculation must give all of them).
    pub matches_ar: usize,
    /// The first prompt (in file order) whose output differs from `ar`'s, and the first differing
    /// token position in it.
    pub first_divergence: Option<Divergence>,
}

/// Where a mode's output first left `ar`'s.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Divergence {
    /// Prompt id.
    pub prompt: String,
    /// Index of the first differing token of the answer.
    pub position: usize,
}

/// The first index where two outputs differ (a length difference counts), or `None`.
pub fn divergence(a: &[u32], b: &[u32]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

/// One prompt file's results.
#[derive(Debug, Clone, Serialize)]
pub struct SetResult {
    /// File stem.
    pub name: String,
    /// Prompts run.
    pub prompts: usize,
    /// One entry per mode.
    pub modes: Vec<ModeResult>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Settings used, as text.
    pub settings: String,
    /// One entry per prompt file.
    pub sets: Vec<SetResult>,
}

#[derive(Default)]
struct Acc {
    stats: AnswerStats,
    stages: StageTimes,
    reached: Vec<usize>,
    drafted: Vec<usize>,
    prompts: Vec<PromptRun>,
    matches_ar: usize,
    first_divergence: Option<Divergence>,
}

/// New tokens of the discarded warm-up answer each configuration gives before timing starts.
const WARM_UP_TOKENS: usize = 8;

/// Run the benchmark. `progress` receives a line per answer.
///
/// What is timed: the decode steps of each answer (drafting, tree building, verification, walk,
/// commit), from the first step to the last. The prompt is read before the clock starts, by the
/// target and, for a mode with a causal drafter, by the drafter too (`Engine::begin`), so that no
/// mode is charged for reading the prompt. Each configuration first answers one discarded warm-up
/// prompt; the order of the configurations rotates from prompt to prompt, so that drift in the
/// machine's speed falls on all of them alike.
pub fn run(
    engine: &mut Engine,
    tokenizer: &TextTokenizer,
    template: &ChatTemplate,
    sets: &[PromptSet],
    cfg: &BenchConfig,
    mut progress: impl FnMut(&str),
) -> Result<BenchReport> {
    let base_settings = *engine.settings();
    let variants = variants_of(cfg, &base_settings)?;
    let encode = |text: &str| -> Result<Vec<u32>> {
        let text = template.render(&[ChatMessage::new(Role::User, text.to_string())], true)?;
        tokenizer.encode(&text, true)
    };
    if let Some(first) = sets.iter().flat_map(|s| s.prompts.first()).next() {
        warm_up(engine, &variants, &encode(&first.text)?)?;
    }
    let mut out = vec![];
    let mut turn = 0;
    for set in sets {
        let mut accs: Vec<Acc> = variants.iter().map(|_| Acc::default()).collect();
        for p in &set.prompts {
            let ids = encode(&p.text)?;
            let mut outputs: Vec<Vec<u32>> = vec![vec![]; variants.len()];
            for k in 0..variants.len() {
                let mi = (k + turn) % variants.len();
                let variant = &variants[mi];
                let acc = &mut accs[mi];
                let (outcome, trace) = timed_answer(engine, variant, &ids, cfg, acc)?;
                let o = outcome.stats;
                acc.stats.add(&o);
                progress(&format!(
                    "{} {} {:>14}: {} tokens, {} passes, {:.2} tok/s",
                    set.name,
                    p.id,
                    variant.label,
                    o.tokens,
                    o.steps,
                    o.tokens_per_sec()
                ));
                outputs[mi] = outcome.tokens.clone();
                acc.prompts.push(PromptRun {
                    id: p.id.clone(),
                    tokens: outcome.tokens.len(),
                    steps: o.steps,
                    seconds: o.decode.as_secs_f64(),
                    output: outcome.tokens,
                    trace,
                });
            }
            turn += 1;
            note_divergences(&mut accs, &outputs, &p.id);
        }
        out.push(SetResult {
            name: set.name.clone(),
            prompts: set.prompts.len(),
            modes: mode_results(&variants, accs),
        });
    }
    engine.set_settings(base_settings)?;
    Ok(BenchReport {
        settings: settings_line(engine, &base_settings, cfg),
        sets: out,
    })
}

/// The configurations to run: `cfg`'s, with `ar` (at `base` settings) added where missing, and
/// `ar` first: it is the reference, first in the tables, and the output every other mode is
/// compared to.
fn variants_of(cfg: &BenchConfig, base: &Settings) -> Result<Vec<Variant>> {
    let mut variants = cfg.variants.clone();
    if !variants.iter().any(|v| v.settings.mode == Mode::Ar) {
        variants.insert(0, Variant::parse("ar", base)?);
    }
    // `ar` is the reference: first in the tables, and the output every other mode is compared to.
    variants.sort_by_key(|v| v.settings.mode != Mode::Ar);
    Ok(variants)
}

/// Each configuration's discarded warm-up answer ([`WARM_UP_TOKENS`] new tokens) to the prompt
/// `ids`.
fn warm_up(engine: &mut Engine, variants: &[Variant], ids: &[u32]) -> Result<()> {
    for v in variants {
        engine.set_settings(v.settings)?;
        engine.reset();
        engine.generate(ids, WARM_UP_TOKENS, |_| true)?;
    }
    Ok(())
}

/// One timed answer of `variant` to the prompt `ids` (up to `cfg.max_tokens` new tokens, the
/// sampler seeded with `cfg.seed`), its steps' stage times and acceptance by depth added to
/// `acc`; with, for `auto`, what each step ran and cost.
fn timed_answer(
    engine: &mut Engine,
    variant: &Variant,
    ids: &[u32],
    cfg: &BenchConfig,
    acc: &mut Acc,
) -> Result<(Outcome, Vec<StepTrace>)> {
    engine.set_settings(variant.settings)?;
    engine.reseed(cfg.seed);
    engine.reset();
    let mut trace = vec![];
    let outcome = engine.generate(ids, cfg.max_tokens, |ev| {
        if variant.settings.mode == Mode::Auto {
            trace.push(StepTrace {
                mode: ev.mode.name(),
                drafted: ev.tree.len().saturating_sub(1),
                tokens: ev.emitted.len(),
                micros: ev.times.total().as_micros() as u64,
                cold: ev.cold,
            });
        }
        acc.stages.add(&ev.times);
        let depth = ev.tree.max_depth();
        let k = ev.accepted_drafts();
        if acc.drafted.len() < depth {
            acc.drafted.resize(depth, 0);
            acc.reached.resize(depth, 0);
        }
        for d in 0..depth {
            acc.drafted[d] += 1;
            if k > d {
                acc.reached[d] += 1;
            }
        }
        true
    })?;
    Ok((outcome, trace))
}

/// Count each configuration's answer to prompt `prompt` (`outputs`, in `accs`' order, `ar`'s
/// first) as matching `ar`'s, or note where it first left it (the set's first such prompt).
fn note_divergences(accs: &mut [Acc], outputs: &[Vec<u32>], prompt: &str) {
    for (acc, output) in accs.iter_mut().zip(outputs) {
        match divergence(&outputs[0], output) {
            None => acc.matches_ar += 1,
            Some(position) if acc.first_divergence.is_none() => {
                acc.first_divergence = Some(Divergence {
                    prompt: prompt.to_string(),
                    position,
                })
            }
            Some(_) => {}
        }
    }
}

/// Each configuration's totals over a prompt file (`accs`, in `variants`' order, `ar`'s first:
/// the speedups are over it).
fn mode_results(variants: &[Variant], accs: Vec<Acc>) -> Vec<ModeResult> {
    let ar_tps = accs[0].stats.tokens_per_sec();
    variants
        .iter()
        .zip(accs)
        .map(|(v, a)| {
            let tps = a.stats.tokens_per_sec();
            ModeResult {
                label: v.label.clone(),
                mode: v.settings.mode,
                tokens: a.stats.tokens,
                steps: a.stats.steps,
                seconds: a.stats.decode.as_secs_f64(),
                tokens_per_sec: tps,
                speedup: tps / ar_tps.max(1e-9),
                tau: a.stats.tau(),
                drafted_ahead: a.stats.ahead_share().unwrap_or(0.0),
                acceptance_by_depth: a
                    .reached
                    .iter()
                    .zip(&a.drafted)
                    .map(|(&r, &d)| r as f64 / d.max(1) as f64)
                    .collect(),
                stages: a.stages,
                prompts: a.prompts,
                matches_ar: a.matches_ar,
                first_divergence: a.first_divergence,
            }
        })
        .collect()
}

/// The report's settings line: what runs each model's passes (on a GPU: which products, so
/// that a log says it), the settings `s`, and what is timed.
fn settings_line(engine: &Engine, s: &Settings, cfg: &BenchConfig) -> String {
    let drafter = engine
        .drafter()
        .map(|d| match d.decoder() {
            Some(dec) => format!("{} ({}; {})", d.name(), d.kind(), dec.runtime()),
            None => format!("{} ({})", d.name(), d.kind()),
        })
        .unwrap_or_else(|| "none".into());
    let drafter = match engine.head() {
        Some(h) => format!("{drafter}; mtp drafts with {} ({})", h.name(), h.kind()),
        None => drafter,
    };
    format!(
        "target: {}; drafter {drafter}; budget {} depth {} gamma {} mtp k {} temperature {} top-p {} top-k {} max-tokens {}; \
         timed: decode steps only (both models read the prompt before the clock starts)",
        engine.target().runtime(),
        s.budget,
        s.depth,
        s.gamma,
        s.mtp_k,
        s.sampling.temperature,
        s.sampling.top_p,
        s.sampling.top_k,
        cfg.max_tokens
    )
}

/// What a greedy run says of its outputs against `ar`'s, from the first configuration whose
/// output differed (`(set, label, divergence)`, [`BenchReport::first_divergence`]): `Ok` with the
/// line to print, or, where `required` (`--require-identical`, `--exact`) and one differed, `Err`
/// with the message the run fails with.
pub fn identical_verdict(
    first: Option<(&str, &str, &Divergence)>,
    required: bool,
) -> std::result::Result<&'static str, String> {
    match first {
        Some((set, mode, d)) if required => Err(format!(
            "{mode} output differs from ar on {set} prompt {} at token {}",
            d.prompt, d.position
        )),
        Some(_) => Ok("greedy: some outputs differ from ar (column `= ar`)"),
        None => Ok("greedy: every mode emitted exactly the ar tokens"),
    }
}

impl BenchReport {
    /// The first configuration, over all sets, whose output differed from `ar`'s:
    /// `(set, label, divergence)`.
    pub fn first_divergence(&self) -> Option<(&str, &str, &Divergence)> {
        self.sets.iter().find_map(|s| {
            s.modes.iter().find_map(|m| {
                m.first_divergence
                    .as_ref()
                    .map(|d| (s.name.as_str(), m.label.as_str(), d))
            })
        })
    }
}

/// The report as Markdown tables, one per prompt file.
pub fn markdown(r: &BenchReport) -> String {
    let mut s = format!("settings: {}\n", r.settings);
    for set in &r.sets {
        s.push_str(&format!("\n### {} ({} prompts)\n\n", set.name, set.prompts));
        s.push_str(
            "| mode | tok/s | speedup vs ar | tau | drafted ahead | accepted at depth 1/2/3/4/5/6 | draft | build | verify | walk | commit | = ar |\n",
        );
        s.push_str(
            "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |\n",
        );
        for m in &set.modes {
            let acc = if m.acceptance_by_depth.is_empty() {
                "-".to_string()
            } else {
                m.acceptance_by_depth
                    .iter()
                    .take(6)
                    .map(|a| format!("{:.0}%", a * 100.0))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let pct = m.stages.shares().map(|x| format!("{:.0}%", 100.0 * x));
            let same = match &m.first_divergence {
                None => format!("{}/{}", m.matches_ar, set.prompts),
                Some(d) => format!(
                    "{}/{} (first at `{}` token {})",
                    m.matches_ar, set.prompts, d.prompt, d.position
                ),
            };
            let ahead = if m.mode == Mode::Ar {
                "-".to_string()
            } else {
                format!("{:.0}%", 100.0 * m.drafted_ahead)
            };
            s.push_str(&format!(
                "| {} | {:.2} | {:.2}x | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                m.label,
                m.tokens_per_sec,
                m.speedup,
                m.tau,
                ahead,
                acc,
                pct[0],
                pct[1],
                pct[2],
                pct[3],
                pct[4],
                same,
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `= ar` column and `--require-identical` stand on this: a difference anywhere, a
    /// shorter or a longer answer all count, and the index is the first token that differs.
    #[test]
    fn divergence_finds_the_first_differing_token_and_length_differences() {
        assert_eq!(divergence(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(divergence(&[], &[]), None);
        assert_eq!(divergence(&[1, 2, 3], &[1, 9, 3]), Some(1));
        assert_eq!(divergence(&[1, 2, 3], &[1, 2, 3, 4]), Some(3));
        assert_eq!(divergence(&[1, 2, 3], &[1, 2]), Some(2));
        assert_eq!(divergence(&[5], &[6, 7]), Some(0));
    }

    /// A mode that leaves `ar`'s tokens on one prompt fails a run that requires identical
    /// outputs, naming the mode, the set, the prompt and the token; one that matches does not;
    /// without the requirement the run only says so.
    #[test]
    fn a_differing_mode_fails_require_identical_and_a_matching_one_does_not() {
        let mut accs: Vec<Acc> = (0..3).map(|_| Acc::default()).collect();
        // Prompt p1: every mode matches; p2: the third leaves ar at token 2; p3: again at 0.
        note_divergences(
            &mut accs,
            &[vec![1, 2, 3], vec![1, 2, 3], vec![1, 2, 3]],
            "p1",
        );
        note_divergences(
            &mut accs,
            &[vec![4, 5, 6], vec![4, 5, 6], vec![4, 5, 7]],
            "p2",
        );
        note_divergences(&mut accs, &[vec![8], vec![8], vec![9]], "p3");
        let matches: Vec<usize> = accs.iter().map(|a| a.matches_ar).collect();
        assert_eq!(matches, [3, 3, 1]);
        assert_eq!(accs[1].first_divergence, None);
        let d = accs[2]
            .first_divergence
            .clone()
            .expect("the third mode diverged");
        assert_eq!(
            (d.prompt.as_str(), d.position),
            ("p2", 2),
            "the first divergence is kept"
        );
        let first = Some(("humaneval", "tree B16", &d));
        assert_eq!(
            identical_verdict(first, true),
            Err("tree B16 output differs from ar on humaneval prompt p2 at token 2".into())
        );
        assert!(identical_verdict(first, false).is_ok_and(|l| l.contains("differ")));
        assert!(identical_verdict(None, true).is_ok_and(|l| l.contains("exactly")));
    }
}
