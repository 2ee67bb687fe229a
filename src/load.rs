//! Loading what the engine runs: models by name, path or hub id (known models fetched on first
//! use), a drafter of whichever kind the files hold, and the engine over both.

use crate::arch::weights::read_gguf_header;
use crate::draft::mtp::KIND as MTP_KIND;
use crate::draft::{check_same_vocabulary, CausalDrafter, DFlashDrafter, Drafter, MtpDrafter};
use crate::engine::{Engine, Mode, Settings};
use crate::error::{Error, Result};
use crate::fetch;
use crate::model::chat_template::ChatTemplate;
use crate::model::source::{self, ModelFiles};
use crate::model::tokenizer::TextTokenizer;
use crate::model::{self, mtp_gguf, LoadOptions, LoadedModel};

/// Resolve a model argument to something [`model::load`] takes, fetching a known model
/// (`target`, `drafter`, `smollm2`) into the cache on first use.
pub fn model_path(spec: &str) -> Result<String> {
    match fetch::known(spec) {
        Some(known) => Ok(fetch::ensure(&known)?.display().to_string()),
        None => Ok(spec.to_string()),
    }
}

/// Load a model by name, path or hub id.
pub fn load_model(spec: &str, opts: &LoadOptions) -> Result<LoadedModel> {
    model::load(&model_path(spec)?, opts)
}

/// The drafter name that means the target's own multi-token-prediction head.
pub const MTP_DRAFTER: &str = "mtp";

/// Load a drafter for `target`: its own MTP head ([`MTP_DRAFTER`]), an MTP head trained for it
/// (a `.safetensors` file from `treespec train-drafter`, or a `.gguf` file from `treespec
/// export-head`, recognised by its header), a DFlash checkpoint (recognised by its config) or a
/// small causal LM, which must share the target's vocabulary.
pub fn load_drafter(
    spec: &str,
    target: &LoadedModel,
    opts: &LoadOptions,
) -> Result<Box<dyn Drafter>> {
    let (cfg, context) = (target.decoder.config(), target.decoder.context());
    // A drafter that reads the target's hidden states runs where the target does.
    let on_target = || {
        if opts.drafter_device.is_some() {
            eprintln!("treespec: --drafter-device applies to a causal-LM drafter; {spec} runs on the target's device");
        }
    };
    if spec == MTP_DRAFTER {
        on_target();
        let head = model::load_mtp_head(&target.files, cfg, 0, opts, context)?;
        let name = format!("{} MTP head", target.name);
        return Ok(Box::new(MtpDrafter::new(head, cfg, name)));
    }
    let head_file = std::path::Path::new(spec);
    let head_name = || {
        head_file
            .file_name()
            .map_or(spec.to_string(), |n| n.to_string_lossy().into_owned())
    };
    if head_file.is_file() && spec.ends_with(".safetensors") {
        // An MTP head trained for this target (`treespec train-drafter`).
        on_target();
        let head = model::load_mimo_head(&[head_file.to_path_buf()], cfg, 0, opts, context)?;
        return Ok(Box::new(MtpDrafter::new(head, cfg, head_name())));
    }
    if head_file.is_file() && spec.ends_with(".gguf") {
        let content = read_gguf_header(head_file)?;
        if mtp_gguf::is_head(&content) {
            // An MTP head exported for this target (`treespec export-head`).
            on_target();
            let head = mtp_gguf::load(head_file, content, &target.name, cfg, opts, context)?;
            return Ok(Box::new(MtpDrafter::new(head, cfg, head_name())));
        }
    }
    let path = model_path(spec)?;
    if let Some(dir) = dflash_dir(&path)? {
        on_target();
        return Ok(Box::new(load_dflash(&dir, target, opts)?));
    }
    // Its own GPU, or its own stream of the target's: it drafts while the target verifies.
    let device = match &opts.drafter_device {
        Some(device) => device.clone(),
        None => crate::device::another_stream(&opts.device)?,
    };
    let own = LoadOptions {
        device,
        tensor_cores: crate::gpu::step::tensor_cores_for(true),
        verifies: false,
        ..opts.clone()
    };
    let mut d = model::load(&path, &own)?;
    check_same_vocabulary(&target.name, &target.tokenizer, &d.name, &d.tokenizer)?;
    if crate::gpu::side_by_side(&own.device, &opts.device) {
        // Beside the target on its GPU: first in line.
        d.decoder.set_high_priority();
    }
    Ok(Box::new(CausalDrafter::new(d.decoder, d.name)))
}

/// The checkpoint directory `path` (a model argument resolved by [`model_path`]) names when it
/// holds a DFlash drafter (recognised by its `config.json`), else `None`.
pub fn dflash_dir(path: &str) -> Result<Option<std::path::PathBuf>> {
    let ModelFiles::Checkpoint(dir) = source::resolve(path)? else {
        return Ok(None);
    };
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| Error::io(&cfg_path, e))?;
    let config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::BadCheckpoint {
            path: cfg_path.clone(),
            reason: format!("config.json is not valid JSON: {e}"),
        })?;
    Ok(crate::draft::dflash::is_dflash_config(&config).then_some(dir))
}

/// The DFlash drafter in `dir` for `target`, on the target's device.
pub fn load_dflash(
    dir: &std::path::Path,
    target: &LoadedModel,
    opts: &LoadOptions,
) -> Result<DFlashDrafter> {
    let context = target.decoder.context();
    let mut d = DFlashDrafter::load_dir(dir, &opts.device, context, !opts.exact)?;
    d.set_name(ModelFiles::Checkpoint(dir.to_path_buf()).display_name());
    Ok(d)
}

/// The text side of the target: what turns messages into ids and ids into text.
pub struct TextSide {
    /// The target's display name.
    pub name: String,
    /// Its tokenizer.
    pub tokenizer: TextTokenizer,
    /// Its chat template.
    pub template: ChatTemplate,
    /// What loading chose on the user's behalf, one line each (the chat shows them).
    pub notes: Vec<String>,
}

/// The `head` that means no MTP head beside the drafter.
pub const NO_HEAD: &str = "none";

/// The MTP head to load beside the drafter of `target`: `head` as given ([`NO_HEAD`]: none),
/// else the head shipped for a known target (copied into the cache the first time), else none
/// (and [`build_engine`] then takes the target's own, where it has one).
/// A shipped head that cannot be found leaves `mtp` unavailable, with a line on stderr.
pub fn head_for(target: &str, head: Option<&str>) -> Option<String> {
    match head {
        Some(NO_HEAD) => None,
        Some(h) => Some(h.to_string()),
        None => {
            let shipped = fetch::shipped_head(target)?;
            match fetch::ensure_head(&shipped) {
                Ok(p) => Some(p.display().to_string()),
                Err(e) => {
                    eprintln!("treespec: `mtp` unavailable: {e}");
                    None
                }
            }
        }
    }
}

/// Which drafter to load beside a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrafterChoice<'a> {
    /// No drafter: `ar`, and `mtp` where a head is given beside it.
    None,
    /// This one: a model, a head file, a DFlash checkpoint or [`MTP_DRAFTER`].
    Named(&'a str),
    /// The best that fits the target without a download ([`auto_drafter`]).
    Auto,
}

/// What [`auto_drafter`] picked for a target, and the line that tells the user so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoDrafter {
    /// The drafter to load (a known model key, [`MTP_DRAFTER`] or a path), or none.
    pub spec: Option<String>,
    /// Why, where the choice is not the obvious one (shown once, in the chat's status line).
    pub note: Option<String>,
}

/// A drafter must be at most 1/this of its target's bytes to be picked unasked: a model of the
/// target's own size drafts as slowly as the target verifies (the default pair's drafter is 44%
/// of its target).
const AUTO_DRAFTER_MAX_SHARE: u64 = 2;

/// The drafter for `target` (loaded from the argument `spec`) when the user named none, never
/// downloading one that cannot fit: the default drafter for the default target (fetched like
/// it); the target's own MTP head; else the smallest GGUF model in `cache` (the models folder)
/// with the target's vocabulary and at most half its size; else none, saying why.
pub fn auto_drafter(spec: &str, target: &LoadedModel, cache: &std::path::Path) -> AutoDrafter {
    if spec == fetch::TARGET.key {
        return AutoDrafter {
            spec: Some(fetch::DRAFTER.key.to_string()),
            note: None,
        };
    }
    if target.decoder.config().mtp_heads > 0 {
        return AutoDrafter {
            spec: Some(MTP_DRAFTER.to_string()),
            note: None,
        };
    }
    match drafter_in_cache(cache, target) {
        Some(path) => {
            let name = ModelFiles::Gguf(path.clone()).display_name();
            AutoDrafter {
                spec: Some(path.display().to_string()),
                note: Some(format!(
                    "drafting with {name} (found in the cache, same vocabulary as {})",
                    target.name
                )),
            }
        }
        None => AutoDrafter {
            spec: None,
            note: Some(format!(
                "no drafter in the cache shares {}'s vocabulary and it has no MTP head: `ar` \
                 only (name one with --drafter)",
                target.name
            )),
        },
    }
}

/// The bytes of a model's weights: the GGUF file, or a checkpoint's safetensors files.
fn model_bytes(files: &ModelFiles) -> u64 {
    let len = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    match files {
        ModelFiles::Gguf(p) => len(p),
        ModelFiles::Checkpoint(dir) => std::fs::read_dir(dir).map_or(0, |entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .map(|p| len(&p))
                .sum()
        }),
    }
}

/// The smallest GGUF model in `dir` that can draft for `target`: not the target itself, not an
/// MTP head, at most `AUTO_DRAFTER_MAX_SHARE`-th of the target's bytes, with exactly its
/// vocabulary. Files that cannot be read are passed over.
pub fn drafter_in_cache(dir: &std::path::Path, target: &LoadedModel) -> Option<std::path::PathBuf> {
    let limit = model_bytes(&target.files) / AUTO_DRAFTER_MAX_SHARE;
    let own = std::fs::canonicalize(target.files.path()).ok();
    let mut candidates: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .filter(|p| std::fs::canonicalize(p).ok() != own)
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.len(), p)))
        .filter(|(len, _)| *len <= limit)
        .collect();
    candidates.sort();
    candidates.into_iter().map(|(_, p)| p).find(|p| {
        let Ok(content) = read_gguf_header(p) else {
            return false;
        };
        !mtp_gguf::is_head(&content)
            && TextTokenizer::from_gguf(&content)
                .is_ok_and(|tok| tok.vocab() == target.tokenizer.vocab())
    })
}

/// The target's own MTP head beside a drafter that is not one, so that `mtp` runs with it; where
/// it does not load, the drafter drafts alone and `notes` says why.
fn own_head(
    target: &LoadedModel,
    opts: &LoadOptions,
    notes: &mut Vec<String>,
) -> Option<Box<dyn Drafter>> {
    load_drafter(MTP_DRAFTER, target, opts)
        .map_err(|e| notes.push(format!("`mtp` is off: the target's MTP head: {e}")))
        .ok()
}

/// Load the target (and the drafter and an MTP head beside it, when given) into an engine; the
/// head is a file, [`MTP_DRAFTER`], [`NO_HEAD`] (none), or unsaid (`None`: the target's own
/// where it has one and a drafter that is not a head is loaded, so that `mtp` can run); the
/// engine takes the decoders, the tokenizer and template are returned beside it. With
/// [`DrafterChoice::Auto`], [`auto_drafter`] picks from the models cache; its note, if any, is
/// in [`TextSide::notes`].
pub fn build_engine(
    target: &str,
    drafter: DrafterChoice,
    head: Option<&str>,
    settings: Settings,
    seed: u64,
    opts: &LoadOptions,
) -> Result<(Engine, TextSide)> {
    // Anything that drafts makes the target's passes verify: its products are chosen for that.
    let drafts = drafter != DrafterChoice::None || head.is_some_and(|h| h != NO_HEAD);
    let mut t = load_model(
        target,
        &LoadOptions {
            verifies: drafts,
            ..opts.clone()
        },
    )?;
    // The drafter holds at most as many positions as the target's cache (fewer where its own
    // trained context or, unsaid, the memory left holds fewer: it then stops drafting there).
    let opts = &LoadOptions {
        context_limit: t.decoder.context(),
        verifies: false,
        ..opts.clone()
    };
    let mut notes = vec![];
    let (spec, auto) = match drafter {
        DrafterChoice::None => (None, false),
        DrafterChoice::Named(spec) => (Some(spec.to_string()), false),
        // An MTP head given beside the drafter drafts `mtp`; the target's own is not added.
        DrafterChoice::Auto if head.is_some() && t.decoder.config().mtp_heads > 0 => (None, true),
        DrafterChoice::Auto => {
            let picked = auto_drafter(target, &t, &crate::paths::models_dir());
            notes.extend(picked.note);
            (picked.spec, true)
        }
    };
    let drafter = match spec {
        // Picked unasked, the target's own head may still fail to load: draft without it.
        Some(spec) if auto && spec == MTP_DRAFTER => match load_drafter(&spec, &t, opts) {
            Ok(d) => Some(d),
            Err(e) => {
                notes.push(format!("drafting without the target's MTP head: {e}"));
                None
            }
        },
        Some(spec) => Some(load_drafter(&spec, &t, opts)?),
        None => None,
    };
    // A drafter that is an MTP head drafts `mtp` itself: the shipped head is not added beside it.
    let drafts_mtp = drafter.as_ref().is_some_and(|d| d.kind() == MTP_KIND);
    let head = match head {
        Some(NO_HEAD) => None,
        Some(h) if drafts_mtp && fetch::is_shipped_head(h) => None,
        Some(h) => Some(load_drafter(h, &t, opts)?),
        None if drafter.is_some() && !drafts_mtp && t.decoder.config().mtp_heads > 0 => {
            own_head(&t, opts, &mut notes)
        }
        None => None,
    };
    // Nothing came to draft (none found, or the target's own head failed to load): plain
    // decoding's products after all.
    if drafter.is_none() && head.is_none() {
        t.decoder.set_verifies(false);
    }
    let start = Settings {
        mode: Mode::Ar,
        ..settings
    };
    let stop_ids = t.tokenizer.stop_ids().clone();
    let mut engine = Engine::new(t.decoder, drafter, stop_ids, start, seed)?;
    if let Some(h) = head {
        engine = engine.add_head(h)?;
    }
    // A mode that needs a drafter none fits for: the error says why there is none.
    if let Err(e) = engine.set_settings(settings) {
        return Err(match notes.last() {
            Some(n) => Error::Config(format!("{e}: {n}")),
            None => e,
        });
    }
    let text = TextSide {
        name: t.name,
        tokenizer: t.tokenizer,
        template: t.template,
        notes,
    };
    Ok((engine, text))
}
