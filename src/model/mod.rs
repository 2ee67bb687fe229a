//! The model runtime: weights, the decoder with its KV cache, the tokenizer and chat template,
//! and loading all of it from a `--model` argument.

pub use crate::arch::{batch, config, kv_cache, weights};
pub mod chat_template;
pub mod context;
pub mod decoder;
pub mod draft_vocab;
pub mod gated_delta;
pub mod layer;
pub mod mtp;
pub mod mtp_gguf;
pub mod recommended;
pub mod rope;
pub mod source;
pub mod step_check;
pub mod tokenizer;
pub mod visibility;

use crate::error::{Error, Result};
use candle_core::Device;
use chat_template::{ChatTemplate, CHATML};
use config::ModelConfig;
use decoder::Decoder;
use source::ModelFiles;
use std::path::Path;
use tokenizer::TextTokenizer;
use weights::{read_gguf_header, WeightStore};

/// How to load a model.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Where to run it.
    pub device: Device,
    /// Dequantise every weight to f32 (bit-exact comparisons between decoding modes).
    pub exact: bool,
    /// KV cache capacity in tokens (clamped to the model's trained context); [`context::AUTO`]:
    /// the model's own, as much of it as memory holds ([`context::auto`]).
    pub context: usize,
    /// At most this many positions, whatever `context` says (a drafter: its target's context).
    pub context_limit: usize,
    /// Where a causal-LM drafter runs (default: a stream of its own on `device`'s GPU, so that
    /// it drafts while the target verifies; `device` itself on the CPU).
    pub drafter_device: Option<Device>,
    /// The GPU step's Q4_K / Q6_K products on tensor cores (a target's, by default; a drafter
    /// is loaded with [`crate::gpu::step::tensor_cores_for`]`(true)`), set before the first pass.
    pub tensor_cores: bool,
    /// Verify passes of many rows through cuBLAS on f16 copies of the weights
    /// ([`Decoder::set_wide_verify`]: big trees verify several times faster, exact to `ar` only
    /// up to f16's rounding); a prompt's passes take them either way ([`crate::gpu::wide`]).
    pub wide_verify: bool,
    /// The model's passes will verify drafts (a drafter or an MTP head is loaded beside it):
    /// the GPU step's products are chosen for it ([`Decoder::load_for`]).
    pub verifies: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            device: Device::Cpu,
            exact: false,
            context: 4096,
            context_limit: usize::MAX,
            drafter_device: None,
            tensor_cores: crate::gpu::step::tensor_cores_for(false),
            wide_verify: false,
            verifies: false,
        }
    }
}

/// A model ready to run: decoder, tokenizer and chat template.
pub struct LoadedModel {
    /// Short name for display.
    pub name: String,
    /// Where it was loaded from (after re-quantisation, the cached copy).
    pub files: ModelFiles,
    /// The decoder and its cache.
    pub decoder: Decoder,
    /// The tokenizer.
    pub tokenizer: TextTokenizer,
    /// The chat template.
    pub template: ChatTemplate,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("name", &self.name)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// Resolve and load a model.
pub fn load(spec: &str, opts: &LoadOptions) -> Result<LoadedModel> {
    let files = source::resolve(spec)?;
    load_files(&files, opts)
}

/// A model's tokenizer alone (no weights read): what needs only its vocabulary and stop tokens.
pub fn load_tokenizer(files: &ModelFiles) -> Result<TextTokenizer> {
    match files {
        ModelFiles::Gguf(path) => TextTokenizer::from_gguf(&read_gguf_header(path)?),
        ModelFiles::Checkpoint(dir) => TextTokenizer::from_dir(dir),
    }
}

/// Load a model from files already on disk.
pub fn load_files(files: &ModelFiles, opts: &LoadOptions) -> Result<LoadedModel> {
    match files {
        ModelFiles::Gguf(path) => load_gguf(path, opts),
        ModelFiles::Checkpoint(dir) => load_checkpoint(dir, opts),
    }
}

fn load_gguf(path: &Path, opts: &LoadOptions) -> Result<LoadedModel> {
    let name = ModelFiles::Gguf(path.to_path_buf()).display_name();
    let content = read_gguf_header(path)?;
    let weights_path = path.to_path_buf();
    let cfg = ModelConfig::from_gguf(&content)?;
    let tokenizer = TextTokenizer::from_gguf(&content)?;
    let template_src = content
        .metadata
        .get("tokenizer.chat_template")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_else(|| CHATML.to_string());
    let template = ChatTemplate::new(&template_src, tokenizer.bos_text(), tokenizer.eos_text())?;
    let weight_bytes = std::fs::metadata(path).map_or(0, |m| m.len());
    let context = context_for(&cfg, opts, weight_bytes);
    let mut store = WeightStore::gguf(&weights_path, content, &opts.device, opts.exact)?;
    let mut decoder = Decoder::load_for(&mut store, cfg, context, opts.verifies)?;
    decoder.set_tensor_cores(opts.tensor_cores);
    decoder.set_wide_verify(opts.wide_verify);
    decoder.warm_up()?;
    Ok(LoadedModel {
        name,
        files: ModelFiles::Gguf(weights_path),
        decoder,
        tokenizer,
        template,
    })
}

fn load_checkpoint(dir: &Path, opts: &LoadOptions) -> Result<LoadedModel> {
    let name = ModelFiles::Checkpoint(dir.to_path_buf()).display_name();
    let cfg = checkpoint_config(dir)?;
    let tokenizer = TextTokenizer::from_dir(dir)?;
    let template_src = read_template(dir).unwrap_or_else(|| CHATML.to_string());
    let template = ChatTemplate::new(&template_src, tokenizer.bos_text(), tokenizer.eos_text())?;
    let files = source::safetensors_files(dir)?;
    let weight_bytes = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum();
    let context = context_for(&cfg, opts, weight_bytes);
    let mut store = WeightStore::safetensors(&files, &opts.device)?;
    let mut decoder = Decoder::load_for(&mut store, cfg, context, opts.verifies)?;
    decoder.set_tensor_cores(opts.tensor_cores);
    decoder.set_wide_verify(opts.wide_verify);
    Ok(LoadedModel {
        name,
        files: ModelFiles::Checkpoint(dir.to_path_buf()),
        decoder,
        tokenizer,
        template,
    })
}

/// The cache's capacity for a model shaped as `cfg` with weights of `weight_bytes`: the one asked
/// for, within the model's trained context, or with [`context::AUTO`] as much of that as memory
/// holds.
fn context_for(cfg: &ModelConfig, opts: &LoadOptions, weight_bytes: u64) -> usize {
    let n = match opts.context {
        context::AUTO => context::auto(cfg, &opts.device, weight_bytes),
        n => n.min(cfg.max_position),
    };
    n.min(opts.context_limit).max(1)
}

/// A checkpoint's configuration (its `config.json`).
fn checkpoint_config(dir: &Path) -> Result<ModelConfig> {
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| Error::io(&cfg_path, e))?;
    ModelConfig::from_hf_json(&text).map_err(|e| match e {
        Error::Config(m) => Error::BadCheckpoint {
            path: cfg_path,
            reason: m,
        },
        other => other,
    })
}

/// The configuration of a model's files, read without loading its weights.
pub fn read_config(files: &ModelFiles) -> Result<ModelConfig> {
    match files {
        ModelFiles::Gguf(path) => ModelConfig::from_gguf(&read_gguf_header(path)?),
        ModelFiles::Checkpoint(dir) => checkpoint_config(dir),
    }
}

/// Load the target's own MTP head `i` from its files, with a cache of `context` positions.
pub fn load_mtp_head(
    files: &ModelFiles,
    cfg: &config::ModelConfig,
    i: usize,
    opts: &LoadOptions,
    context: usize,
) -> Result<mtp::MtpHead> {
    if cfg.mtp_heads <= i {
        return Err(Error::Config(format!(
            "{} has no multi-token-prediction head {i} (it declares {})",
            files.display_name(),
            cfg.mtp_heads
        )));
    }
    match files {
        ModelFiles::Checkpoint(dir) if cfg.family == config::Family::Qwen35 => {
            let mut store =
                WeightStore::safetensors(&source::safetensors_files(dir)?, &opts.device)?;
            mtp::MtpHead::load(&mut store, cfg, mtp::MtpLayout::Qwen35, i, context)
        }
        ModelFiles::Checkpoint(dir) => {
            load_mimo_head(&source::safetensors_files(dir)?, cfg, i, opts, context)
        }
        ModelFiles::Gguf(path) => {
            let content = read_gguf_header(path)?;
            let mut store = WeightStore::gguf(path, content, &opts.device, opts.exact)?;
            mtp::MtpHead::load(&mut store, cfg, mtp::MtpLayout::GgufNextn, i, context)
        }
    }
}

/// Load MTP head `i` in MiMo's layout from safetensors files: a MiMo checkpoint's, or the one
/// `treespec train-drafter` writes.
pub fn load_mimo_head(
    files: &[std::path::PathBuf],
    cfg: &config::ModelConfig,
    i: usize,
    opts: &LoadOptions,
    context: usize,
) -> Result<mtp::MtpHead> {
    let mut store = WeightStore::safetensors(files, &opts.device)?;
    mtp::MtpHead::load(&mut store, cfg, mtp::MtpLayout::MiMo, i, context)
}

/// The chat template of a checkpoint: `chat_template.jinja`, or `chat_template` in
/// tokenizer_config.json (a string, or a list of named templates of which `default` is used).
fn read_template(dir: &Path) -> Option<String> {
    if let Ok(t) = std::fs::read_to_string(dir.join("chat_template.jinja")) {
        return Some(t);
    }
    let text = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    match v.get("chat_template")? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(list) => list
            .iter()
            .find(|e| e.get("name").and_then(|n| n.as_str()) == Some("default"))
            .or_else(|| list.first())
            .and_then(|e| e.get("template"))
            .and_then(|t| t.as_str())
            .map(str::to_string),
        _ => None,
    }
}
