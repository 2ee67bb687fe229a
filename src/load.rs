//! Loading what the engine runs: models by name, path or hub id (known models fetched on first
//! use), a drafter of whichever kind the files hold, and the engine over both.

use crate::draft::mtp::KIND as MTP_KIND;
use crate::draft::{check_same_vocabulary, CausalDrafter, DFlashDrafter, Drafter, MtpDrafter};
use crate::engine::{Engine, Mode, Settings};
use crate::error::{Error, Result};
use crate::fetch;
use crate::model::chat_template::ChatTemplate;
use crate::model::source::{self, ModelFiles};
use crate::model::tokenizer::TextTokenizer;
use crate::model::weights::read_gguf_header;
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
}

/// The `head` that means no MTP head beside the drafter.
pub const NO_HEAD: &str = "none";

/// The MTP head to load beside the drafter of `target`: `head` as given ([`NO_HEAD`]: none),
/// else the head shipped for a known target (copied into the cache the first time), else none.
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

/// Load the target (and the drafter and an MTP head beside it, when given) into an engine; the
/// engine takes the decoders, the tokenizer and template are returned beside it.
pub fn build_engine(
    target: &str,
    drafter: Option<&str>,
    head: Option<&str>,
    settings: Settings,
    seed: u64,
    opts: &LoadOptions,
) -> Result<(Engine, TextSide)> {
    let t = load_model(target, opts)?;
    let drafter = match drafter {
        Some(spec) => Some(load_drafter(spec, &t, opts)?),
        // A target with its own MTP head drafts with it unless told otherwise.
        None if t.decoder.config().mtp_heads > 0 && head.is_none() => {
            match load_drafter(MTP_DRAFTER, &t, opts) {
                Ok(d) => Some(d),
                Err(e) => {
                    eprintln!("treespec: drafting without the target's MTP head: {e}");
                    None
                }
            }
        }
        None => None,
    };
    // A drafter that is an MTP head drafts `mtp` itself: the shipped head is not added beside it.
    let drafts_mtp = drafter.as_ref().is_some_and(|d| d.kind() == MTP_KIND);
    let head = head.filter(|h| !(drafts_mtp && fetch::is_shipped_head(h)));
    let head = head.map(|h| load_drafter(h, &t, opts)).transpose()?;
    let start = Settings {
        mode: Mode::Ar,
        ..settings
    };
    let stop_ids = t.tokenizer.stop_ids().clone();
    let mut engine = Engine::new(t.decoder, drafter, stop_ids, start, seed)?;
    if let Some(h) = head {
        engine = engine.add_head(h)?;
    }
    engine.set_settings(settings)?;
    let text = TextSide {
        name: t.name,
        tokenizer: t.tokenizer,
        template: t.template,
    };
    Ok((engine, text))
}
