//! An MTP head as a compact GGUF file, to ship beside a target: written from the f32
//! safetensors `treespec train-drafter` saves (`treespec export-head`), its matrices quantised
//! (Q8_0 by default) and its vectors kept f32, under the GGUF-style names
//! [`MtpLayout::MiMo`] reads (`mtp.0.input_proj.weight`, `mtp.0.attn_q.weight`, ...), with the
//! shape of the target it was made for in its metadata; and loaded back as a drafter, refused
//! for a target of another shape.

use crate::arch::config::{gguf_usize, ModelConfig};
use crate::arch::weights::{gguf_layer_name, write_gguf, WeightStore};
use crate::error::{candle_message, Error, Result};
use crate::model::mtp::{MtpHead, MtpLayout};
use crate::model::LoadOptions;
use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use std::path::Path;

/// `general.architecture` of a head file.
pub const ARCHITECTURE: &str = "treespec-mtp";

/// The tensor every MiMo-layout head has (its first head's input projection).
const INPUT_PROJ: &str = "mtp.0.input_proj.weight";

/// Metadata keys: the target's name and shape, the head count, and free text on where the head
/// came from (the training record).
const KEY_TARGET: &str = "treespec.mtp.target.name";
const KEY_HIDDEN: &str = "treespec.mtp.target.embedding_length";
const KEY_LAYERS: &str = "treespec.mtp.target.block_count";
const KEY_VOCAB: &str = "treespec.mtp.target.vocab_size";
const KEY_HEADS: &str = "treespec.mtp.head_count";
/// Free text on where the head came from (`treespec export-head` puts the training record here).
pub const KEY_SOURCE: &str = "treespec.mtp.source";

/// The formats a head's matrices can be written in, by the names `--type` takes.
const FORMATS: &[(&str, GgmlDType)] = &[
    ("f32", GgmlDType::F32),
    ("f16", GgmlDType::F16),
    ("bf16", GgmlDType::BF16),
    ("q8_0", GgmlDType::Q8_0),
    ("q5_1", GgmlDType::Q5_1),
    ("q5_0", GgmlDType::Q5_0),
    ("q4_1", GgmlDType::Q4_1),
    ("q4_0", GgmlDType::Q4_0),
    ("q6_k", GgmlDType::Q6K),
    ("q5_k", GgmlDType::Q5K),
    ("q4_k", GgmlDType::Q4K),
    ("q3_k", GgmlDType::Q3K),
    ("q2_k", GgmlDType::Q2K),
];

/// The matrix format named `name` (`q8_0`, `f16`, `q4_k`, ...; any case), or an error listing
/// the known ones.
pub fn parse_format(name: &str) -> Result<GgmlDType> {
    let lower = name.to_ascii_lowercase();
    FORMATS
        .iter()
        .find(|(n, _)| *n == lower)
        .map(|(_, d)| *d)
        .ok_or_else(|| {
            let known: Vec<&str> = FORMATS.iter().map(|(n, _)| *n).collect();
            Error::InvalidArgument(format!(
                "unknown weight format `{name}` (known: {})",
                known.join(", ")
            ))
        })
}

fn format_name(dtype: GgmlDType) -> String {
    FORMATS
        .iter()
        .find(|(_, d)| *d == dtype)
        .map_or_else(|| format!("{dtype:?}"), |(n, _)| n.to_string())
}

/// The target a head is made for: its name and the shape that must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadTarget {
    /// Display name (for messages; not checked).
    pub name: String,
    /// Hidden size.
    pub hidden: usize,
    /// Decoder layers (the head reads the last one's output).
    pub layers: usize,
    /// Vocabulary size (the head drafts through the target's embedding and LM head).
    pub vocab: usize,
}

impl HeadTarget {
    /// The target named `name` shaped as `cfg`.
    pub fn of(name: &str, cfg: &ModelConfig) -> Self {
        HeadTarget {
            name: name.to_string(),
            hidden: cfg.hidden,
            layers: cfg.n_layers,
            vocab: cfg.vocab_size,
        }
    }

    /// The target a head file's header records, if it records one.
    pub fn recorded(content: &gguf_file::Content) -> Option<Self> {
        let md = &content.metadata;
        let n = |k: &str| md.get(k).and_then(gguf_usize);
        Some(HeadTarget {
            name: md
                .get(KEY_TARGET)
                .and_then(|v| v.to_string().ok())
                .cloned()
                .unwrap_or_else(|| "an unnamed target".into()),
            hidden: n(KEY_HIDDEN)?,
            layers: n(KEY_LAYERS)?,
            vocab: n(KEY_VOCAB)?,
        })
    }

    fn same_shape(&self, other: &HeadTarget) -> bool {
        (self.hidden, self.layers, self.vocab) == (other.hidden, other.layers, other.vocab)
    }
}

impl std::fmt::Display for HeadTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (hidden {}, {} layers, vocabulary {})",
            self.name, self.hidden, self.layers, self.vocab
        )
    }
}

/// What [`export`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exported {
    /// Size of the file in bytes.
    pub bytes: u64,
    /// Tensors in it.
    pub tensors: usize,
}

/// Write the MTP head of the safetensors file `head` (MiMo names, as `treespec train-drafter`
/// saves it) to the GGUF file `out`: matrices in `format`, vectors in f32, with `target`'s name
/// and shape and the free text `source` in the metadata. Fails when the file holds anything but
/// MTP layers, when the head's width is not `target`'s, or when a matrix's rows are no multiple
/// of `format`'s block.
pub fn export(
    head: &Path,
    out: &Path,
    format: GgmlDType,
    target: &HeadTarget,
    source: &str,
) -> Result<Exported> {
    export_with(head, out, format, target, source, None)
}

/// [`export`], from a head file that is a safetensors file or a head GGUF (this module's, its
/// first head's tensors, matrices dequantised first: quantising them again in the format they
/// were in gives the same values, in another format rounds them once more), with the draft vocabulary `vocab` (ascending token ids,
/// [`crate::model::draft_vocab`]) in place of the head's own where one is given (an empty one:
/// none, the head drafts among the whole vocabulary).
pub fn export_with(
    head: &Path,
    out: &Path,
    format: GgmlDType,
    target: &HeadTarget,
    source: &str,
    vocab: Option<&[u32]>,
) -> Result<Exported> {
    let bad = |reason: String| Error::BadCheckpoint {
        path: head.to_path_buf(),
        reason,
    };
    let mut magic = [0u8; 4];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(head).map_err(|e| Error::io(head, e))?;
        // A file shorter than four bytes is no GGUF; the safetensors reader says what it is.
        let _ = f.read_exact(&mut magic);
    }
    let mut named: Vec<(String, Tensor)> = if &magic == b"GGUF" {
        read_head(head, target, &Device::Cpu)?
            .into_iter()
            .map(|(stem, t)| (format!("mtp.0.{stem}"), t))
            .collect()
    } else {
        let read = candle_core::safetensors::load(head, &Device::Cpu)
            .map_err(|e| bad(candle_message(&e)))?;
        let mut named = Vec::with_capacity(read.len());
        for (hf, t) in read {
            let name = gguf_layer_name(&hf)
                .filter(|n| n.starts_with("mtp."))
                .ok_or_else(|| {
                    bad(format!(
                        "tensor `{hf}` is not an MTP layer's (a head has MiMo names, as `treespec \
                         train-drafter` writes them)"
                    ))
                })?;
            named.push((name, t));
        }
        named
    };
    if let Some(ids) = vocab {
        let name = format!("mtp.0.{}", crate::model::draft_vocab::STEM);
        named.retain(|(n, _)| *n != name);
        if !ids.is_empty() {
            named.push((name, crate::model::draft_vocab::to_tensor(ids)?));
        }
    }
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let proj = named
        .iter()
        .find(|(n, _)| n == INPUT_PROJ)
        .ok_or_else(|| bad("it holds no MTP head (no input projection)".into()))?;
    let h = target.hidden;
    if proj.1.dims() != [h, 2 * h] {
        return Err(Error::Config(format!(
            "{}: the head's input projection is {:?}, but the target {target} needs [{h}, {}]",
            head.display(),
            proj.1.dims(),
            2 * h
        )));
    }
    let block = format.block_size();
    let mut tensors = Vec::with_capacity(named.len());
    for (name, t) in named {
        let t = t.to_dtype(DType::F32)?;
        let q = match *t.dims() {
            [_] => QTensor::quantize(&t, GgmlDType::F32)?,
            [_, cols] if cols % block != 0 => {
                return Err(Error::InvalidArgument(format!(
                    "`{name}` has rows of {cols} values, not a multiple of {}'s block of {block} \
                     (f32, f16 and bf16 take any width)",
                    format_name(format)
                )))
            }
            [_, _] => QTensor::quantize(&t, format)?,
            ref dims => {
                return Err(bad(format!(
                    "tensor `{name}` has shape {dims:?}; a head holds vectors and matrices"
                )))
            }
        };
        tensors.push((name, q));
    }
    let heads = tensors
        .iter()
        .filter(|(n, _)| n.ends_with(".input_proj.weight"))
        .count();
    use gguf_file::Value as V;
    let u = |x: usize| V::U64(x as u64);
    let head_name = head.file_name().map_or_else(
        || head.display().to_string(),
        |n| n.to_string_lossy().into(),
    );
    let metadata = vec![
        (
            "general.architecture".to_string(),
            V::String(ARCHITECTURE.into()),
        ),
        ("general.name".into(), V::String(head_name)),
        (KEY_TARGET.into(), V::String(target.name.clone())),
        (KEY_HIDDEN.into(), u(target.hidden)),
        (KEY_LAYERS.into(), u(target.layers)),
        (KEY_VOCAB.into(), u(target.vocab)),
        (KEY_HEADS.into(), u(heads)),
        (KEY_SOURCE.into(), V::String(source.to_string())),
    ];
    write_gguf(out, &metadata, &tensors)?;
    let bytes = std::fs::metadata(out).map_err(|e| Error::io(out, e))?.len();
    Ok(Exported {
        bytes,
        tensors: tensors.len(),
    })
}

/// The free text on where a head came from ([`KEY_SOURCE`]) that the GGUF head file `path`
/// carries, if it is one and carries it.
pub fn recorded_source(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let content = gguf_file::Content::read(&mut file).ok()?;
    content
        .metadata
        .get(KEY_SOURCE)
        .and_then(|v| v.to_string().ok())
        .cloned()
}

/// True when a GGUF file's header is an MTP head's: [`ARCHITECTURE`], or MiMo-layout head
/// tensors.
pub fn is_head(content: &gguf_file::Content) -> bool {
    let arch = content
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok());
    arch.is_some_and(|a| a == ARCHITECTURE) || content.tensor_infos.contains_key(INPUT_PROJ)
}

/// Load the first head of the MTP head file `path` (its parsed header `content`) for the target
/// `target_name` shaped as `cfg`, with a cache of `context` positions; refused when the file
/// records a target of another shape.
pub fn load(
    path: &Path,
    content: gguf_file::Content,
    target_name: &str,
    cfg: &ModelConfig,
    opts: &LoadOptions,
    context: usize,
) -> Result<MtpHead> {
    check_made_for(path, &content, &HeadTarget::of(target_name, cfg))?;
    let mut store = WeightStore::gguf(path, content, &opts.device, opts.exact)?;
    MtpHead::load(&mut store, cfg, MtpLayout::MiMo, 0, context)
}

/// Refuse a head file (`path`, its header `content`) that records a target of another shape than
/// `target`, or that holds no head.
fn check_made_for(path: &Path, content: &gguf_file::Content, target: &HeadTarget) -> Result<()> {
    if let Some(made_for) = HeadTarget::recorded(content) {
        if !made_for.same_shape(target) {
            return Err(Error::Config(format!(
                "{}: an MTP head for {made_for}, not for {target}",
                path.display()
            )));
        }
    }
    if !content.tensor_infos.contains_key(INPUT_PROJ) {
        return Err(Error::BadGguf {
            path: path.to_path_buf(),
            reason: format!("an MTP head file without `{INPUT_PROJ}`"),
        });
    }
    Ok(())
}

/// The first head of the MTP head file `path` as f32 tensors on `device` (quantised matrices
/// dequantised), by their GGUF-style stems (`attn_q.weight`, `input_proj.weight`, ...): to
/// start training from (`train-drafter --init`); refused as [`load`] refuses it.
pub fn read_f32(
    path: &Path,
    target_name: &str,
    cfg: &ModelConfig,
    device: &Device,
) -> Result<Vec<(String, Tensor)>> {
    read_head(path, &HeadTarget::of(target_name, cfg), device)
}

/// [`read_f32`] for a target described by `target`.
fn read_head(path: &Path, target: &HeadTarget, device: &Device) -> Result<Vec<(String, Tensor)>> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let content = gguf_file::Content::read(&mut file).map_err(|e| Error::BadGguf {
        path: path.to_path_buf(),
        reason: candle_message(&e),
    })?;
    check_made_for(path, &content, target)?;
    let names: Vec<String> = content
        .tensor_infos
        .keys()
        .filter(|n| n.starts_with("mtp.0."))
        .cloned()
        .collect();
    let mut out = vec![];
    for name in names {
        let q = content
            .tensor(&mut file, &name, device)
            .map_err(|e| Error::BadGguf {
                path: path.to_path_buf(),
                reason: format!("{name}: {}", candle_message(&e)),
            })?;
        let t = q.dequantize(device)?.to_dtype(DType::F32)?;
        out.push((name["mtp.0.".len()..].to_string(), t));
    }
    Ok(out)
}
