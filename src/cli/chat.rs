//! `treespec chat`: the models loaded as the arguments and the config file say, then the terminal UI.

use super::*;

pub(crate) fn run_chat(a: ChatArgs) -> anyhow::Result<()> {
    use treespec::chat::live::LiveEngine;
    use treespec::chat::scripted::ScriptedEngine;
    use treespec::chat::{ChatEngine, EngineInfo};
    use treespec::config::{self, Config};
    use treespec::transcript::{self, Transcript};
    use treespec::tui::app::{App, AppOptions};

    let cfg = Config::load(&config::path())?;
    let pick = |flag: &Option<String>, conf: &Option<String>, default: &str| {
        flag.clone()
            .or_else(|| conf.clone())
            .unwrap_or_else(|| default.to_string())
    };
    let target = pick(&a.target, &cfg.target, "target");
    let head = load::head_for(&target, a.head.head.as_deref().or(cfg.head.as_deref()));
    // With an MTP head the chat starts in `mtp`, the fastest mode on every prompt set where the
    // default pair has its head (BENCHMARKS.md section 26); otherwise in `tree`.
    let starting = if head.is_some() { "mtp" } else { "tree" };
    let mode = parse_mode(&pick(&a.mode, &cfg.mode, starting))?;
    // What the model's files recommend, for each sampling setting the user left unset.
    let recommended = match a.demo {
        true => RecommendedSampling::default(),
        false => treespec::model::source::resolve(&load::model_path(&target)?)
            .map(|files| recommended::sampling(&files))
            .unwrap_or_default(),
    };
    let recommended = RecommendedSampling {
        temperature: recommended
            .temperature
            .filter(|_| a.temperature.or(cfg.temperature).is_none()),
        top_p: recommended
            .top_p
            .filter(|_| a.top_p.or(cfg.top_p).is_none()),
        top_k: recommended
            .top_k
            .filter(|_| a.top_k.or(cfg.top_k).is_none()),
    };
    let decode = DecodeArgs {
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
    };
    let runtime = RuntimeArgs {
        device: pick(&a.device, &cfg.device, "cpu"),
        drafter_device: a.drafter_device.clone(),
        context: a.context.or(cfg.context).unwrap_or(4096),
        exact: a.exact,
        wide_verify: a.wide_verify,
    };
    // Unnamed, the drafter is the best that fits the target without a download.
    let named = a.drafter.clone().or(cfg.drafter.clone());
    let drafter = match named.as_deref() {
        Some("none") => DrafterChoice::None,
        Some(d) => DrafterChoice::Named(d),
        None => DrafterChoice::Auto,
    };
    let settings = decode.settings(mode)?;
    let dir = transcript::default_dir();
    // A chat to resume is read before the models load, so that a wrong path fails at once.
    // What the chat says on opening: lines joined by `; `.
    let mut notices: Vec<String> = vec![];
    if !recommended.is_empty() {
        let r = recommended.describe();
        notices.push(format!("sampling as the model recommends: {r}"));
    }
    let resumed = match &a.resume {
        None => None,
        Some(file) => {
            let path = if file.is_empty() {
                transcript::latest(&dir).ok_or_else(|| {
                    anyhow::anyhow!("no saved chats in {} to resume", dir.display())
                })?
            } else {
                PathBuf::from(file)
            };
            let loaded = Transcript::load(&path)?;
            if let Some(d) = loaded.dropped {
                notices.push(format!("resumed {}; dropped {d}", path.display()));
            }
            Some(loaded.transcript)
        }
    };
    let (engine, info): (Box<dyn ChatEngine>, EngineInfo) = if a.demo {
        let e = ScriptedEngine::demo();
        let info = e.info().clone();
        (Box::new(e), info)
    } else {
        let and = match drafter {
            DrafterChoice::Named(d) => format!(" and {d}"),
            _ => String::new(),
        };
        eprintln!("loading {target}{and} ...");
        let models = (drafter, head.as_deref());
        let start = decode.settings(Mode::Ar)?;
        let (mut engine, text) = build_engine(&target, models, start, decode.seed, &runtime)?;
        notices.extend(text.notes.iter().cloned());
        // A mode the models loaded cannot run starts as `ar`, saying why (unless it was only the
        // default and loading already said why there is no drafter).
        let asked = a.mode.is_some() || cfg.mode.is_some();
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
        (Box::new(live), info)
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
