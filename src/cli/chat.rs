//! `treespec chat`: the models loaded as the arguments and the config file say, then the terminal UI.

use super::*;
use std::path::Path;
use treespec::chat::live::LiveEngine;
use treespec::chat::scripted::ScriptedEngine;
use treespec::chat::{ChatEngine, EngineInfo};
use treespec::config::{self, Config};
use treespec::transcript::{self, Transcript};
use treespec::tui::app::{App, AppOptions};

/// `treespec chat` with the arguments `a`: the chat in the terminal UI until the user quits.
pub(crate) fn run_chat(a: ChatArgs) -> anyhow::Result<()> {
    let cfg = Config::load(&config::path())?;
    let plan = plan(&a, &cfg)?;
    let settings = plan.decode.settings(plan.mode)?;
    let dir = transcript::default_dir();
    // A chat to resume is read before the models load, so that a wrong path fails at once.
    // What the chat says on opening: lines joined by `; `.
    let mut notices: Vec<String> = vec![];
    if !plan.recommended.is_empty() {
        let r = plan.recommended.describe();
        notices.push(format!("sampling as the model recommends: {r}"));
    }
    let resumed = chat_to_resume(a.resume.as_deref(), &dir, &mut notices)?;
    let (engine, info): (Box<dyn ChatEngine>, EngineInfo) = if a.demo {
        let e = ScriptedEngine::demo();
        let info = e.info().clone();
        (Box::new(e), info)
    } else {
        let asked = a.mode.is_some() || cfg.mode.is_some();
        live_engine(&plan, settings, asked, &mut notices)?
    };
    let transcript = match resumed {
        Some(t) => t,
        None => {
            let drafter = info.drafter_label();
            Transcript::new(&dir, &info.target, drafter.as_deref(), &info.device)
        }
    };
    let opts = AppOptions {
        max_tokens: a.max_tokens.or(cfg.max_tokens).unwrap_or(1024),
        theme: a.theme.clone().or(cfg.theme.clone()),
        user_theme_dir: Some(config::themes_dir()),
        keys: cfg.keys.clone(),
    };
    let mut app = App::new(engine, transcript, opts);
    if !notices.is_empty() {
        let n = notices.join("; ");
        app.notice = Some(treespec::tui::app::Notice {
            text: n,
            error: false,
        });
    }
    treespec::tui::run(&mut app)?;
    let saved = app.transcript.path.clone();
    drop(app);
    if saved.exists() {
        eprintln!("chat saved to {}", saved.display());
    }
    Ok(())
}

/// What the chat runs, each setting from its flag, else the config file, else its default.
struct ChatPlan {
    /// The target model.
    target: String,
    /// The MTP head, where there is one.
    head: Option<String>,
    /// The mode the chat starts in.
    mode: Mode,
    /// What the model's files recommend, for the sampling settings the user left unset.
    recommended: RecommendedSampling,
    /// How the chat decodes.
    decode: DecodeArgs,
    /// Where and how the models run.
    runtime: RuntimeArgs,
    /// The drafter named (`none`: none); unnamed, the best that fits the target without a
    /// download.
    drafter: Option<String>,
}

/// The flag `flag`, else the config file's `conf`, else `default`.
fn pick(flag: &Option<String>, conf: &Option<String>, default: &str) -> String {
    flag.clone()
        .or_else(|| conf.clone())
        .unwrap_or_else(|| default.to_string())
}

/// What the chat runs, from the arguments `a` over the config file `cfg`.
fn plan(a: &ChatArgs, cfg: &Config) -> anyhow::Result<ChatPlan> {
    let target = pick(&a.target, &cfg.target, "target");
    let asked = a.head.head.as_deref().or(cfg.head.as_deref());
    // `--head none` is kept as said, so that loading takes no head at all.
    let head = match asked {
        Some(load::NO_HEAD) => Some(load::NO_HEAD.to_string()),
        _ => load::head_for(&target, asked),
    };
    // With an MTP head the chat starts in `mtp`, the fastest mode on every prompt set where the
    // default pair has its head (BENCHMARKS.md section 26); otherwise in `tree`.
    let has_head = head.as_deref().is_some_and(|h| h != load::NO_HEAD);
    let starting = if has_head { "mtp" } else { "tree" };
    let mode = parse_mode(&pick(&a.mode, &cfg.mode, starting))?;
    let recommended = recommended_sampling(a, cfg, &target)?;
    let decode = decode_args(a, cfg, &recommended);
    let runtime = RuntimeArgs {
        device: pick(&a.device, &cfg.device, "cpu"),
        drafter_device: a.drafter_device.clone(),
        context: a
            .context
            .or(cfg.context)
            .unwrap_or(treespec::model::context::AUTO),
        exact: a.exact,
        wide_verify: a.wide_verify,
    };
    // Unnamed, the drafter is the best that fits the target without a download.
    let drafter = a.drafter.clone().or(cfg.drafter.clone());
    Ok(ChatPlan {
        target,
        head,
        mode,
        recommended,
        decode,
        runtime,
        drafter,
    })
}

/// What the files of the model `target` recommend (nothing in the demo), for each sampling
/// setting that neither the arguments `a` nor the config file `cfg` set.
fn recommended_sampling(
    a: &ChatArgs,
    cfg: &Config,
    target: &str,
) -> anyhow::Result<RecommendedSampling> {
    let recommended = match a.demo {
        true => RecommendedSampling::default(),
        false => treespec::model::source::resolve(&load::model_path(target)?)
            .map(|files| recommended::sampling(&files))
            .unwrap_or_default(),
    };
    Ok(RecommendedSampling {
        temperature: recommended
            .temperature
            .filter(|_| a.temperature.or(cfg.temperature).is_none()),
        top_p: recommended
            .top_p
            .filter(|_| a.top_p.or(cfg.top_p).is_none()),
        top_k: recommended
            .top_k
            .filter(|_| a.top_k.or(cfg.top_k).is_none()),
    })
}

/// How the chat decodes: each setting from the arguments `a`, else the config file `cfg`, else
/// (sampling) the model's `recommended`, else its default.
fn decode_args(a: &ChatArgs, cfg: &Config, recommended: &RecommendedSampling) -> DecodeArgs {
    DecodeArgs {
        budget: a.budget.or(cfg.budget).unwrap_or(DEFAULT_BUDGET),
        depth: a.depth.or(cfg.depth).unwrap_or(DEFAULT_DEPTH),
        gamma: a.gamma.or(cfg.gamma).unwrap_or(DEFAULT_GAMMA),
        mtp_k: a
            .mtp_k
            .or(cfg.mtp_k)
            .unwrap_or(treespec::engine::DEFAULT_MTP_K),
        temperature: a
            .temperature
            .or(cfg.temperature)
            .or(recommended.temperature)
            .unwrap_or(0.0),
        top_p: a.top_p.or(cfg.top_p).or(recommended.top_p).unwrap_or(1.0),
        top_k: a.top_k.or(cfg.top_k).or(recommended.top_k).unwrap_or(0),
        seed: a.seed,
        min_chain_prob: a
            .min_chain_prob
            .or(cfg.min_chain_prob)
            .unwrap_or(treespec::engine::DEFAULT_MIN_CHAIN_PROB),
        expand: a
            .expand
            .or(cfg.expand)
            .unwrap_or(treespec::engine::DEFAULT_EXPAND),
    }
}

/// The saved chat to continue (`--resume FILE`, or with no file the latest in `dir`), read; what
/// reading it dropped is said in `notices`.
fn chat_to_resume(
    resume: Option<&str>,
    dir: &Path,
    notices: &mut Vec<String>,
) -> anyhow::Result<Option<Transcript>> {
    let Some(file) = resume else {
        return Ok(None);
    };
    let path = if file.is_empty() {
        transcript::latest(dir)
            .ok_or_else(|| anyhow::anyhow!("no saved chats in {} to resume", dir.display()))?
    } else {
        PathBuf::from(file)
    };
    let loaded = Transcript::load(&path)?;
    if let Some(d) = loaded.dropped {
        notices.push(format!("resumed {}; dropped {d}", path.display()));
    }
    Ok(Some(loaded.transcript))
}

/// The models of `plan` loaded into an engine for the chat, and what the chat shows of it. It
/// starts in `settings`; a mode the models cannot run starts as `ar`, saying why in `notices`
/// (unless the mode was only the default, `asked` false, and loading already said why there is
/// no drafter), where loading's own notes go too.
fn live_engine(
    plan: &ChatPlan,
    settings: Settings,
    asked: bool,
    notices: &mut Vec<String>,
) -> anyhow::Result<(Box<dyn ChatEngine>, EngineInfo)> {
    let drafter = match plan.drafter.as_deref() {
        Some("none") => DrafterChoice::None,
        Some(d) => DrafterChoice::Named(d),
        None => DrafterChoice::Auto,
    };
    let and = match drafter {
        DrafterChoice::Named(d) => format!(" and {d}"),
        _ => String::new(),
    };
    let target = &plan.target;
    eprintln!("loading {target}{and} ...");
    let models = (drafter, plan.head.as_deref());
    let start = plan.decode.settings(Mode::Ar)?;
    let (mut engine, text) = build_engine(target, models, start, plan.decode.seed, &plan.runtime)?;
    notices.extend(text.notes.iter().cloned());
    // A mode the models loaded cannot run starts as `ar`, saying why (unless it was only the
    // default and loading already said why there is no drafter).
    let mode = plan.mode;
    match engine.mode_unavailable(mode) {
        None => engine.set_settings(settings)?,
        Some(_) if !asked && !text.notes.is_empty() => {}
        Some(why) => {
            let why = format!("{mode} is unavailable ({why}): starting in ar");
            notices.push(why);
        }
    }
    let by_mode = match engine.head() {
        Some(_) => Mode::ALL
            .into_iter()
            .filter_map(|m| engine.drafter_for(m).map(|d| (m, d)))
            .map(|(m, d)| (m, d.name().to_string(), d.kind().to_string()))
            .collect(),
        None => vec![],
    };
    let info = EngineInfo {
        target: text.name.clone(),
        drafter: engine.drafter().map(|d| d.name().to_string()),
        drafter_kind: engine.drafter().map(|d| d.kind().to_string()),
        by_mode,
        device: device::describe(engine.target().device()),
        context: engine.target().context(),
        unavailable: vec![],
        thinks: false,
    };
    let live = LiveEngine::new(engine, text.tokenizer, text.template, info);
    let info = live.info().clone();
    Ok((Box::new(live), info))
}
