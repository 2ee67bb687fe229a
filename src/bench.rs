//! `treespec bench`: decode speed, speedup over `ar`, tokens per target pass (tau), acceptance by
//! depth and the time split by stage, per prompt file and mode, measured side by side in one run.

use crate::engine::{AnswerStats, Engine, Mode, Settings, StageTimes};
use crate::error::{Error, Result};
use crate::model::chat_template::{ChatMessage, ChatTemplate, Role};
use crate::model::tokenizer::TextTokenizer;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// One benchmark prompt.
#[derive(Debug, Clone)]
pub struct BenchPrompt {
    /// Its id in the file.
    pub id: String,
    /// The user message.
    pub text: String,
}

/// A prompt file.
#[derive(Debug, Clone)]
pub struct PromptSet {
    /// The file's stem (`humaneval`, `gsm8k`, `chat`, ...).
    pub name: String,
    /// Its prompts, in file order.
    pub prompts: Vec<BenchPrompt>,
}

/// The prompt sets that ship with treespec (`benchmarks/prompts/`), used when `bench` is given
/// no `--prompts`: name and JSON lines.
pub const BUNDLED: [(&str, &str); 3] = [
    (
        "humaneval",
        include_str!("../benchmarks/prompts/humaneval.jsonl"),
    ),
    ("gsm8k", include_str!("../benchmarks/prompts/gsm8k.jsonl")),
    ("chat", include_str!("../benchmarks/prompts/chat.jsonl")),
];

/// The bundled prompt sets, each cut to `limit` prompts.
pub fn bundled_prompts(limit: Option<usize>) -> Result<Vec<PromptSet>> {
    BUNDLED
        .iter()
        .map(|(name, text)| parse_prompts(name, text, limit))
        .collect()
}

/// Read a JSON-lines prompt file (`{"id": ..., "prompt": ...}` per line).
pub fn load_prompts(path: &Path, limit: Option<usize>) -> Result<PromptSet> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    parse_prompts(&name, &text, limit).map_err(|e| match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("{}:{m}", path.display())),
        other => other,
    })
}

/// Parse JSON-lines prompts; errors name the line.
fn parse_prompts(name: &str, text: &str, limit: Option<usize>) -> Result<PromptSet> {
    let mut prompts = vec![];
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| Error::InvalidArgument(format!("{}: {e}", i + 1)))?;
        let prompt = v
            .get("prompt")
            .and_then(|p| p.as_str())
            .ok_or_else(|| Error::InvalidArgument(format!("{}: no \"prompt\" field", i + 1)))?;
        let id = match v.get("id") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => format!("{}", i + 1),
        };
        prompts.push(BenchPrompt {
            id,
            text: prompt.to_string(),
        });
        if limit.is_some_and(|l| prompts.len() >= l) {
            break;
        }
    }
    Ok(PromptSet {
        name: name.to_string(),
        prompts,
    })
}

/// One decoding configuration to measure: a mode with its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    /// Label in the tables (`ar`, `linear`, `tree`, or with a shape: `tree:16x4`, `linear:6`).
    pub label: String,
    /// Settings it runs with.
    pub settings: Settings,
}

impl Variant {
    /// Parse `ar`, `linear`, `tree`, `linear:G`, `tree:BxL` or `tree:BxLwW` (a tree the drafter
    /// grows, expanding W nodes per depth), optionally followed by `@P` (the drafter's chain stops
    /// below probability P); bare modes take the shape of `base`.
    pub fn parse(spec: &str, base: &Settings) -> Result<Variant> {
        let spec = spec.trim();
        let (spec_shape, prob) = match spec.split_once('@') {
            Some((a, p)) => (
                a,
                Some(p.parse::<f32>().map_err(|_| {
                    Error::InvalidArgument(format!("`{spec}`: @P takes a probability"))
                })?),
            ),
            None => (spec, None),
        };
        let (mode_s, shape) = match spec_shape.split_once(':') {
            Some((m, s)) => (m, Some(s)),
            None => (spec_shape, None),
        };
        let mode = Mode::parse(mode_s)
            .ok_or_else(|| Error::InvalidArgument(format!("unknown mode `{mode_s}`")))?;
        let mut settings = Settings { mode, ..*base };
        if let Some(p) = prob {
            settings.min_chain_prob = p;
        }
        let bad = || {
            Error::InvalidArgument(format!(
                "`{spec}`: write linear:GAMMA or tree:BUDGETxDEPTH[wWIDTH]"
            ))
        };
        match (mode, shape) {
            (_, None) => {}
            (Mode::Linear, Some(g)) => settings.gamma = g.parse().map_err(|_| bad())?,
            (Mode::Tree, Some(s)) => {
                let (b, l) = s.split_once('x').ok_or_else(bad)?;
                let (l, w) = match l.split_once('w') {
                    Some((l, w)) => (l, Some(w)),
                    None => (l, None),
                };
                settings.budget = b.parse().map_err(|_| bad())?;
                settings.depth = l.parse().map_err(|_| bad())?;
                if let Some(w) = w {
                    settings.expand = w.parse().map_err(|_| bad())?;
                }
            }
            _ => return Err(bad()),
        }
        if settings.budget == 0 || settings.depth == 0 || settings.gamma == 0 {
            return Err(bad());
        }
        let mut label = match mode {
            Mode::Linear => format!("linear γ{}", settings.gamma),
            Mode::Tree if settings.expand > 0 => format!(
                "tree B{} L{} W{}",
                settings.budget, settings.depth, settings.expand
            ),
            Mode::Tree => format!("tree B{} L{}", settings.budget, settings.depth),
            m => m.name().to_string(),
        };
        if settings.min_chain_prob > 0.0 && mode != Mode::Ar {
            label.push_str(&format!(" p≥{}", settings.min_chain_prob));
        }
        Ok(Variant { label, settings })
    }
}

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
}

/// Stage times in seconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StageSeconds {
    /// Drafting.
    pub draft: f64,
    /// Tree building.
    pub build: f64,
    /// Target verification pass.
    pub verify: f64,
    /// Logits and walk.
    pub walk: f64,
    /// Cache compaction.
    pub commit: f64,
}

impl StageSeconds {
    fn from(t: &StageTimes) -> Self {
        let s = |d: Duration| d.as_secs_f64();
        StageSeconds {
            draft: s(t.draft),
            build: s(t.build),
            verify: s(t.verify),
            walk: s(t.walk),
            commit: s(t.commit),
        }
    }

    fn total(&self) -> f64 {
        self.draft + self.build + self.verify + self.walk + self.commit
    }
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
    /// Fraction of steps whose accepted path reached depth d (d = 1, 2, ...), among steps that
    /// drafted that deep.
    pub acceptance_by_depth: Vec<f64>,
    /// Time per stage.
    pub stages: StageSeconds,
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
    let mut variants = cfg.variants.clone();
    if !variants.iter().any(|v| v.settings.mode == Mode::Ar) {
        variants.insert(0, Variant::parse("ar", &base_settings)?);
    }
    // `ar` is the reference: first in the tables, and the output every other mode is compared to.
    variants.sort_by_key(|v| v.settings.mode != Mode::Ar);
    let encode = |text: &str| -> Result<Vec<u32>> {
        let text = template.render(&[ChatMessage::new(Role::User, text.to_string())], true)?;
        tokenizer.encode(&text, true)
    };
    if let Some(first) = sets.iter().flat_map(|s| s.prompts.first()).next() {
        let ids = encode(&first.text)?;
        for v in &variants {
            engine.set_settings(v.settings)?;
            engine.reset();
            engine.generate(&ids, WARM_UP_TOKENS, |_| true)?;
        }
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
                engine.set_settings(variant.settings)?;
                engine.reseed(cfg.seed);
                engine.reset();
                let acc = &mut accs[mi];
                let outcome = engine.generate(&ids, cfg.max_tokens, |ev| {
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
                });
            }
            turn += 1;
            for (acc, output) in accs.iter_mut().zip(&outputs) {
                match divergence(&outputs[0], output) {
                    None => acc.matches_ar += 1,
                    Some(position) if acc.first_divergence.is_none() => {
                        acc.first_divergence = Some(Divergence {
                            prompt: p.id.clone(),
                            position,
                        })
                    }
                    Some(_) => {}
                }
            }
        }
        let ar_tps = accs[0].stats.tokens_per_sec();
        let results = variants
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
                    acceptance_by_depth: a
                        .reached
                        .iter()
                        .zip(&a.drafted)
                        .map(|(&r, &d)| r as f64 / d.max(1) as f64)
                        .collect(),
                    stages: StageSeconds::from(&a.stages),
                    prompts: a.prompts,
                    matches_ar: a.matches_ar,
                    first_divergence: a.first_divergence,
                }
            })
            .collect();
        out.push(SetResult {
            name: set.name.clone(),
            prompts: set.prompts.len(),
            modes: results,
        });
    }
    engine.set_settings(base_settings)?;
    let s = base_settings;
    let drafter = engine
        .drafter()
        .map(|d| format!("{} ({})", d.name(), d.kind()))
        .unwrap_or_else(|| "none".into());
    Ok(BenchReport {
        settings: format!(
            "drafter {drafter}; budget {} depth {} gamma {} temperature {} top-p {} top-k {} max-tokens {}; \
             timed: decode steps only (both models read the prompt before the clock starts)",
            s.budget,
            s.depth,
            s.gamma,
            s.sampling.temperature,
            s.sampling.top_p,
            s.sampling.top_k,
            cfg.max_tokens
        ),
        sets: out,
    })
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
            "| mode | tok/s | speedup vs ar | tau | accepted at depth 1/2/3/4/5/6 | draft | build | verify | walk | commit | = ar |\n",
        );
        s.push_str("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
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
            let total = m.stages.total().max(1e-12);
            let pct = |x: f64| format!("{:.0}%", 100.0 * x / total);
            let same = match &m.first_divergence {
                None => format!("{}/{}", m.matches_ar, set.prompts),
                Some(d) => format!(
                    "{}/{} (first at `{}` token {})",
                    m.matches_ar, set.prompts, d.prompt, d.position
                ),
            };
            s.push_str(&format!(
                "| {} | {:.2} | {:.2}x | {:.2} | {} | {} | {} | {} | {} | {} | {} |\n",
                m.label,
                m.tokens_per_sec,
                m.speedup,
                m.tau,
                acc,
                pct(m.stages.draft),
                pct(m.stages.build),
                pct(m.stages.verify),
                pct(m.stages.walk),
                pct(m.stages.commit),
                same,
            ));
        }
    }
    s
}

/// Measured cost of one pass, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    /// What was timed.
    pub what: String,
    /// Rows fed in the pass.
    pub rows: usize,
    /// Median milliseconds.
    pub ms: f64,
    /// Relative to one target decode step (one row with its logits).
    pub relative: f64,
}

/// Median wall time of `f` in ms; the device is synchronised around each call, so that GPU work
/// is timed, not only its launch.
fn median_ms(
    device: &candle_core::Device,
    mut f: impl FnMut() -> Result<()>,
    reps: usize,
) -> Result<f64> {
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        device.synchronize()?;
        let t = std::time::Instant::now();
        f()?;
        device.synchronize()?;
        v.push(t.elapsed().as_secs_f64() * 1e3);
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// Time the passes speculative decoding is made of, after a `prefix`-token context: the target's
/// decode step, its verification pass for blocks of `sizes` rows (tree mask, hidden states
/// only), its LM head for 1 and for `sizes` rows, and the drafter's decode step. These are the
/// c and v(B) of DESIGN.md: budget and depth should be chosen from them, per device.
pub fn measure_costs(
    target: &mut crate::model::decoder::Decoder,
    drafter: Option<&mut crate::model::decoder::Decoder>,
    prefix: usize,
    sizes: &[usize],
    reps: usize,
) -> Result<Vec<CostRow>> {
    use crate::model::decoder::{Batch, BlockMask};
    let vocab = target.config().vocab_size as u32;
    let toks: Vec<u32> = (0..prefix as u32)
        .map(|i| (i * 7919 + 13) % vocab)
        .collect();
    target.reset();
    target.forward(&Batch::causal(&toks, 0).with_logits_rows(vec![]))?;
    let last = target.config().n_layers - 1;
    let device = target.device().clone();
    let step = median_ms(
        &device,
        || {
            target.truncate(prefix);
            target.forward(&Batch::causal(&[11], prefix))?;
            Ok(())
        },
        reps,
    )?;
    let mut rows = vec![CostRow {
        what: "target decode step (1 row + LM head)".into(),
        rows: 1,
        ms: step,
        relative: 1.0,
    }];
    for &n in sizes {
        // A tree of n nodes: a chain with side branches, like a DDTree.
        let parents: Vec<Option<usize>> = (0..n)
            .map(|i| if i == 0 { None } else { Some((i - 1) / 2) })
            .collect();
        let mask = BlockMask::from_parents(&parents)?;
        let block: Vec<u32> = (0..n as u32).map(|i| (i * 31 + 5) % vocab).collect();
        let mut hidden = None;
        let ms = median_ms(
            &device,
            || {
                target.truncate(prefix);
                let out = target.forward(
                    &Batch::causal(&block, prefix)
                        .with_mask(mask.clone())
                        .with_logits_rows(vec![])
                        .with_hidden_layers(vec![last]),
                )?;
                hidden = out.hidden.into_iter().next();
                Ok(())
            },
            reps,
        )?;
        rows.push(CostRow {
            what: "target verify pass, hidden states only".into(),
            rows: n,
            ms,
            relative: ms / step,
        });
        if let Some(h) = &hidden {
            let ms = median_ms(
                &device,
                || {
                    target.logits_from_hidden(h)?.to_vec2::<f32>()?;
                    Ok(())
                },
                reps,
            )?;
            rows.push(CostRow {
                what: "target LM head".into(),
                rows: n,
                ms,
                relative: ms / step,
            });
        }
    }
    target.reset();
    if let Some(d) = drafter {
        d.reset();
        d.forward(&Batch::causal(&toks, 0).with_logits_rows(vec![]))?;
        let ms = median_ms(
            &device,
            || {
                d.truncate(prefix);
                d.forward(&Batch::causal(&[11], prefix))?;
                Ok(())
            },
            reps,
        )?;
        rows.push(CostRow {
            what: "drafter decode step (1 row + LM head)".into(),
            rows: 1,
            ms,
            relative: ms / step,
        });
        // A pass of a grown tree: W sibling nodes, each with its LM head row.
        for w in [2usize, 4, 8] {
            let block: Vec<u32> = (0..w as u32).map(|i| (i * 31 + 5) % vocab).collect();
            let mask = BlockMask::from_parents(&vec![None; w])?;
            let ms = median_ms(
                &device,
                || {
                    d.truncate(prefix);
                    d.forward(
                        &Batch::causal(&block, prefix)
                            .with_positions(vec![prefix; w])
                            .with_mask(mask.clone())
                            .all_logits(),
                    )?;
                    Ok(())
                },
                reps,
            )?;
            rows.push(CostRow {
                what: "drafter pass of a grown tree (rows + LM heads)".into(),
                rows: w,
                ms,
                relative: ms / step,
            });
        }
        d.reset();
    }
    Ok(rows)
}

/// The cost table as Markdown.
pub fn costs_markdown(rows: &[CostRow]) -> String {
    let mut s = String::from(
        "| pass | rows | ms | relative to a target step |\n| --- | ---: | ---: | ---: |\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {:.1} | {:.2} |\n",
            r.what, r.rows, r.ms, r.relative
        ));
    }
    s
}
