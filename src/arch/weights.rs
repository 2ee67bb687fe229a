//! Weight storage: GGUF files (quantised tensors kept as `QTensor`s) and safetensors checkpoints,
//! behind one name space (llama.cpp's GGUF tensor names), plus the two layer kinds built from them.

use crate::error::{candle_message, Error, Result};
use crate::quant::{Format, QuantMatrix};
use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One weight tensor as stored: still quantised, or a plain tensor.
#[derive(Debug, Clone)]
pub enum Weight {
    /// A quantised GGUF tensor, used through `QMatMul` / quantised embedding lookups.
    Quantized(Arc<QTensor>),
    /// A plain tensor in the compute dtype.
    Dense(Tensor),
}

impl Weight {
    /// The tensor's dimensions.
    pub fn dims(&self) -> Vec<usize> {
        match self {
            Weight::Quantized(q) => q.shape().dims().to_vec(),
            Weight::Dense(t) => t.dims().to_vec(),
        }
    }

    /// The weight as a plain f32 tensor on `device`.
    pub fn to_dense(&self, device: &Device) -> Result<Tensor> {
        Ok(match self {
            Weight::Quantized(q) => q.dequantize(device)?,
            Weight::Dense(t) => t.to_device(device)?.to_dtype(DType::F32)?,
        })
    }
}

/// Where the tensors come from.
enum Backing {
    Gguf {
        path: PathBuf,
        content: gguf_file::Content,
        reader: BufReader<File>,
    },
    Safetensors {
        path: PathBuf,
        tensors: candle_core::safetensors::MmapedSafetensors,
        prefix: String,
    },
    Memory(HashMap<String, Tensor>),
}

/// A source of named weights, addressed by GGUF tensor names (`blk.3.attn_q.weight`, ...).
pub struct WeightStore {
    backing: Backing,
    device: Device,
    exact: bool,
    quantize_dense: bool,
    /// Plain matrices kept in bf16 on a GPU ([`WeightStore::keep_half_matrices`]).
    half_matrices: bool,
}

impl WeightStore {
    /// Open a GGUF file. `content` is its parsed header (see [`read_gguf_header`]).
    pub fn gguf(
        path: &Path,
        content: gguf_file::Content,
        device: &Device,
        exact: bool,
    ) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        Ok(WeightStore {
            backing: Backing::Gguf {
                path: path.to_path_buf(),
                content,
                reader: BufReader::new(file),
            },
            device: device.clone(),
            exact,
            quantize_dense: false,
            half_matrices: false,
        })
    }

    /// Memory-map safetensors files. Tensor names are Hugging Face names, with or without the
    /// `model.` prefix; they are translated from GGUF names on each lookup.
    pub fn safetensors(paths: &[PathBuf], device: &Device) -> Result<Self> {
        let first = paths.first().cloned().unwrap_or_default();
        // SAFETY: the files are memory-mapped read-only; treespec never writes them, and a
        // checkpoint changed under a running process is outside what any loader can defend.
        let tensors = unsafe { candle_core::safetensors::MmapedSafetensors::multi(paths) }
            .map_err(|e| Error::BadCheckpoint {
                path: first.clone(),
                reason: candle_message(&e),
            })?;
        // Qwen3.5's checkpoints wrap the decoder in a vision-language model.
        let prefix = if tensors
            .get("model.language_model.embed_tokens.weight")
            .is_ok()
        {
            "model.language_model.".to_string()
        } else if tensors.get("model.embed_tokens.weight").is_ok()
            || tensors.get("model.layers.0.input_layernorm.weight").is_ok()
            || tensors.get("model.mtp_layers.0.input_proj.weight").is_ok()
        {
            "model.".to_string()
        } else {
            String::new()
        };
        Ok(WeightStore {
            backing: Backing::Safetensors {
                path: first,
                tensors,
                prefix,
            },
            device: device.clone(),
            exact: true,
            quantize_dense: false,
            half_matrices: false,
        })
    }

    /// Whether the tensors are a Hugging Face checkpoint's (their names and conventions).
    pub fn hugging_face(&self) -> bool {
        matches!(self.backing, Backing::Safetensors { .. })
    }

    /// Tensors held in memory under GGUF names (tests build random models this way).
    pub fn from_tensors(tensors: HashMap<String, Tensor>, device: &Device) -> Self {
        WeightStore {
            backing: Backing::Memory(tensors),
            device: device.clone(),
            exact: true,
            quantize_dense: false,
            half_matrices: false,
        }
    }

    /// Quantise plain matrices to Q8_0 as they are loaded (on the CPU, where the quantised
    /// kernels are several times faster than f32 for a memory-bound pass). For drafters only: a
    /// drafter proposes, so its rounding cannot change what is emitted.
    pub fn quantize_dense(mut self, on: bool) -> Self {
        self.quantize_dense = on && self.device.is_cpu();
        self
    }

    /// Keep plain matrices in bf16 on a GPU that multiplies bf16 (their products then run on the
    /// tensor cores, reading half the bytes). For drafters only, as [`Self::quantize_dense`].
    pub fn keep_half_matrices(mut self, on: bool) -> Self {
        self.half_matrices = on && crate::device::has_bf16_products(&self.device);
        self
    }

    /// The device weights are loaded onto.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Look Hugging Face names up under `prefix` instead (`mtp.` for Qwen3.5's MTP head, which
    /// sits beside the decoder, not inside it); returns the prefix it replaces. `None`, and no
    /// change, for a store that is not a Hugging Face checkpoint.
    pub fn swap_hf_prefix(&mut self, prefix: &str) -> Option<String> {
        match &mut self.backing {
            Backing::Safetensors { prefix: p, .. } => Some(std::mem::replace(p, prefix.into())),
            _ => None,
        }
    }

    /// True when a tensor of that (GGUF) name exists.
    pub fn contains(&self, name: &str) -> bool {
        match &self.backing {
            Backing::Gguf { content, .. } => content.tensor_infos.contains_key(name),
            Backing::Safetensors {
                tensors, prefix, ..
            } => tensors.get(&hf_name(name, prefix)).is_ok(),
            Backing::Memory(map) => map.contains_key(name),
        }
    }

    /// Load a weight. Quantised GGUF tensors stay quantised unless the store is exact (then they
    /// are dequantised to f32); everything else becomes an f32 tensor on the store's device.
    pub fn get(&mut self, name: &str) -> Result<Weight> {
        let host = self.get_host(name)?;
        self.upload(host)
    }

    /// Load several weights of the given shapes (`[out_i, in]`) as one `[sum out_i, in]` weight
    /// (fused projections). Returns `None` when they cannot be joined (quantised in different
    /// formats).
    pub fn get_concat(&mut self, parts: &[(String, [usize; 2])]) -> Result<Option<Weight>> {
        let parts = parts
            .iter()
            .map(|(n, shape)| {
                let w = self.get_host(n)?;
                check_shape(n, &w, shape)?;
                Ok(w)
            })
            .collect::<Result<Vec<_>>>()?;
        let joined = match parts.first() {
            Some(Weight::Quantized(first)) => {
                let dtype = first.dtype();
                let cols = first.shape().dims().get(1).copied().unwrap_or(0);
                let mut rows = 0;
                let mut bytes = Vec::new();
                for p in &parts {
                    match p {
                        Weight::Quantized(q)
                            if q.dtype() == dtype
                                && q.shape().dims().get(1).copied() == Some(cols) =>
                        {
                            rows += q.shape().dims()[0];
                            bytes.extend_from_slice(&q.data()?);
                        }
                        _ => return Ok(None),
                    }
                }
                let storage = QStorage::from_data(Cow::Owned(bytes), &Device::Cpu, dtype)?;
                Weight::Quantized(Arc::new(QTensor::new(storage, (rows, cols))?))
            }
            Some(Weight::Dense(_)) => {
                let mut ts = Vec::with_capacity(parts.len());
                for p in &parts {
                    match p {
                        Weight::Dense(t) => ts.push(t.clone()),
                        Weight::Quantized(_) => return Ok(None),
                    }
                }
                Weight::Dense(Tensor::cat(&ts, 0)?)
            }
            None => return Ok(None),
        };
        Ok(Some(self.upload(joined)?))
    }

    /// Move a host weight to the store's device.
    fn upload(&self, w: Weight) -> Result<Weight> {
        if self.device.is_cpu() {
            return Ok(match w {
                Weight::Dense(t)
                    if self.quantize_dense
                        && t.rank() == 2
                        && t.dim(1)?.is_multiple_of(crate::quant::BLOCK) =>
                {
                    Weight::Quantized(Arc::new(QTensor::quantize(&t, GgmlDType::Q8_0)?))
                }
                w => w,
            });
        }
        Ok(match w {
            Weight::Dense(t) if self.half_matrices && t.rank() == 2 => {
                Weight::Dense(t.to_dtype(DType::BF16)?.to_device(&self.device)?)
            }
            Weight::Dense(t) => Weight::Dense(t.to_device(&self.device)?),
            Weight::Quantized(q) => {
                let storage = QStorage::from_data(q.data()?, &self.device, q.dtype())?;
                Weight::Quantized(Arc::new(QTensor::new(storage, q.shape().clone())?))
            }
        })
    }

    /// Load a weight into host memory.
    fn get_host(&mut self, name: &str) -> Result<Weight> {
        let host = Device::Cpu;
        match &mut self.backing {
            Backing::Gguf {
                path,
                content,
                reader,
            } => {
                let info = content
                    .tensor_infos
                    .get(name)
                    .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
                let q = info
                    .read(reader, content.tensor_data_offset, &host)
                    .map_err(|e| Error::BadGguf {
                        path: path.clone(),
                        reason: format!("tensor `{name}`: {}", candle_message(&e)),
                    })?;
                let plain = matches!(q.dtype(), GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
                if plain || self.exact {
                    Ok(Weight::Dense(q.dequantize(&host)?))
                } else {
                    Ok(Weight::Quantized(Arc::new(q)))
                }
            }
            Backing::Safetensors {
                path,
                tensors,
                prefix,
            } => {
                let hf = hf_name(name, prefix);
                let t = tensors.load(&hf, &host).map_err(|_| {
                    if tensors.get(&hf).is_err() {
                        Error::MissingTensor(hf.clone())
                    } else {
                        Error::BadCheckpoint {
                            path: path.clone(),
                            reason: format!("tensor `{hf}` cannot be read"),
                        }
                    }
                })?;
                Ok(Weight::Dense(t.to_dtype(DType::F32)?))
            }
            Backing::Memory(map) => {
                let t = map
                    .get(name)
                    .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
                Ok(Weight::Dense(t.to_device(&host)?.to_dtype(DType::F32)?))
            }
        }
    }

    /// Load a weight as a plain f32 tensor (norm weights, biases).
    pub fn get_dense(&mut self, name: &str) -> Result<Tensor> {
        let device = self.device.clone();
        self.get(name)?.to_dense(&device)
    }

    /// Load a weight and check its shape (outer dimension first, as candle orders them).
    pub fn get_checked(&mut self, name: &str, expected: &[usize]) -> Result<Weight> {
        let w = self.get(name)?;
        check_shape(name, &w, expected)?;
        Ok(w)
    }
}

fn check_shape(name: &str, w: &Weight, expected: &[usize]) -> Result<()> {
    let got = w.dims();
    if got != expected {
        return Err(Error::TensorShape {
            name: name.to_string(),
            got,
            expected: expected.to_vec(),
        });
    }
    Ok(())
}

/// GGUF stems of a layer's tensors and their Hugging Face module names (other stems, such as an
/// MTP head's `input_proj`, are the same in both).
const LAYER_MODULES: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
    ("token_norm", "token_layernorm"),
    ("hidden_norm", "hidden_layernorm"),
    ("final_norm", "final_layernorm"),
    // Qwen3.5's Gated DeltaNet layers (llama.cpp's names; `ssm_a` and `ssm_dt.bias` below).
    ("attn_qkv", "linear_attn.in_proj_qkv"),
    ("attn_gate", "linear_attn.in_proj_z"),
    ("ssm_beta", "linear_attn.in_proj_b"),
    ("ssm_alpha", "linear_attn.in_proj_a"),
    ("ssm_conv1d", "linear_attn.conv1d"),
    ("ssm_norm", "linear_attn.norm"),
    ("ssm_out", "linear_attn.out_proj"),
];

/// GGUF names of a Gated DeltaNet layer's vectors whose Hugging Face names are not module
/// weights: `A_log` (llama.cpp stores `-exp(A_log)` as `ssm_a`) and `dt_bias`.
const LAYER_VECTORS: &[(&str, &str)] = &[
    ("ssm_a", "linear_attn.A_log"),
    ("ssm_dt.bias", "linear_attn.dt_bias"),
];

/// GGUF prefixes of layer tensors and their Hugging Face prefixes: decoder layers and MiMo's MTP
/// layers.
const LAYER_STEMS: [(&str, &str); 2] = [("blk.", "layers."), ("mtp.", "mtp_layers.")];

/// Translate a GGUF tensor name to its Hugging Face name (`prefix` is `model.` or empty); an MTP
/// head's `mtp.{i}.*` names go to `mtp_layers.{i}.*` (MiMo).
pub fn hf_name(gguf: &str, prefix: &str) -> String {
    match gguf {
        "token_embd.weight" => return format!("{prefix}embed_tokens.weight"),
        "output_norm.weight" => return format!("{prefix}norm.weight"),
        "output.weight" => return "lm_head.weight".to_string(),
        _ => {}
    }
    for (gguf_stem, hf_stem) in LAYER_STEMS {
        let Some((layer, tail)) = gguf
            .strip_prefix(gguf_stem)
            .and_then(|rest| rest.split_once('.'))
        else {
            continue;
        };
        if let Some((_, hf)) = LAYER_VECTORS.iter().find(|(g, _)| *g == tail) {
            return format!("{prefix}{hf_stem}{layer}.{hf}");
        }
        let (stem, suffix) = tail.rsplit_once('.').unwrap_or((tail, "weight"));
        let module = LAYER_MODULES
            .iter()
            .find(|(g, _)| *g == stem)
            .map_or(stem, |(_, m)| m);
        return format!("{prefix}{hf_stem}{layer}.{module}.{suffix}");
    }
    format!("{prefix}{gguf}")
}

/// The GGUF name of a layer tensor's Hugging Face name, with or without the `model.` prefix
/// (`model.mtp_layers.0.self_attn.q_proj.weight` -> `mtp.0.attn_q.weight`): the inverse of
/// [`hf_name`] for layer tensors; `None` for any other name.
pub fn gguf_layer_name(hf: &str) -> Option<String> {
    let name = hf.strip_prefix("model.").unwrap_or(hf);
    LAYER_STEMS.iter().find_map(|(gguf_stem, hf_stem)| {
        let (layer, tail) = name.strip_prefix(hf_stem)?.split_once('.')?;
        layer.parse::<usize>().ok()?;
        let (module, suffix) = tail.rsplit_once('.')?;
        let stem = LAYER_MODULES
            .iter()
            .find(|(_, m)| *m == module)
            .map_or(module, |(g, _)| g);
        Some(format!("{gguf_stem}{layer}.{stem}.{suffix}"))
    })
}

/// Write a GGUF file of `metadata` and `tensors` to `path`; a write that fails (a full disk)
/// is an error, never a short file behind a success.
pub fn write_gguf(
    path: &Path,
    metadata: &[(String, gguf_file::Value)],
    tensors: &[(String, QTensor)],
) -> Result<()> {
    let md: Vec<(&str, &gguf_file::Value)> =
        metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut out = std::io::BufWriter::new(file);
    gguf_file::write(&mut out, &md, &ts)?;
    std::io::Write::flush(&mut out).map_err(|e| Error::io(path, e))
}

/// Parse a GGUF header, turning every failure (bad magic, cut-short file, tensor data past the
/// end of the file) into one clear error that names the file.
pub fn read_gguf_header(path: &Path) -> Result<gguf_file::Content> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let file_len = file.metadata()?.len();
    let bad = |reason: String| Error::BadGguf {
        path: path.to_path_buf(),
        reason,
    };
    let content = gguf_file::Content::read(&mut file).map_err(|e| {
        if file_len < 8 {
            bad(format!("only {file_len} bytes"))
        } else {
            bad(candle_message(&e))
        }
    })?;
    let mut end = content.tensor_data_offset;
    for (name, info) in &content.tensor_infos {
        let elems = info.shape.elem_count();
        let block = info.ggml_dtype.block_size();
        if elems % block != 0 {
            return Err(bad(format!(
                "tensor `{name}` has {elems} elements, not a multiple of {block}"
            )));
        }
        let bytes = (elems / block * info.ggml_dtype.type_size()) as u64;
        end = end.max(content.tensor_data_offset + info.offset + bytes);
    }
    if end > file_len {
        return Err(bad(format!(
            "truncated: its tensors need {end} bytes but the file has {file_len} (an interrupted download?)"
        )));
    }
    Ok(content)
}

/// Rows candle's GPU kernels multiply with one per-row summation order: its quantised mat-vec
/// kernel (`mmvq_gguf.cu`) runs four warps per block for up to four activation rows (two for five
/// to eight, a tiled kernel beyond), and the warps split each row's blocks between them. Feeding a
/// verify pass four rows at a time gives every row exactly the logits of a one-token step.
const GPU_INVARIANT_ROWS: usize = 4;

/// Batch-invariant GPU products and attention (the default); `TREESPEC_GPU_BATCH_INVARIANT=0`
/// turns both off (candle's kernels for every row count), to measure what they cost.
pub(crate) fn gpu_batch_invariant() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TREESPEC_GPU_BATCH_INVARIANT").as_deref() != Ok("0"))
}

/// A linear layer `y = x W^T + b` over a quantised or a plain weight.
#[derive(Debug, Clone)]
pub struct Linear {
    weight: LinearWeight,
    bias: Option<Tensor>,
    out_features: usize,
}

#[derive(Debug, Clone)]
enum LinearWeight {
    /// GGUF blocks on the host, multiplied by treespec's CPU kernels ([`crate::quant`]).
    Blocks(Arc<QuantMatrix>),
    /// A quantised tensor on a GPU, multiplied by candle's kernels.
    Quantized(QMatMul),
    /// A plain tensor.
    Dense(Tensor),
}

/// What a quantised tensor becomes for the layer that uses it.
enum Placed {
    Blocks(Arc<QuantMatrix>),
    Device(Arc<QTensor>),
    Dense(Tensor),
}

/// Place a quantised tensor: on the host, as blocks for treespec's kernels (formats they do not
/// read are converted to Q8_0 once, in memory; widths no block format fits are dequantised); on a
/// GPU, as it is for candle's kernels.
fn place(q: Arc<QTensor>) -> Result<Placed> {
    if !q.device().is_cpu() {
        return Ok(Placed::Device(q));
    }
    let (rows, cols) = q.shape().dims2()?;
    if let Some(format) = Format::from_ggml(q.dtype()) {
        if cols % format.block_elems() == 0 {
            let m = QuantMatrix::new(format, rows, cols, q.data()?.into_owned())?;
            return Ok(Placed::Blocks(Arc::new(m)));
        }
    }
    let dense = q.dequantize(&Device::Cpu)?;
    if cols % crate::quant::BLOCK == 0 {
        let q8 = QTensor::quantize(&dense, GgmlDType::Q8_0)?;
        let m = QuantMatrix::new(Format::Q8_0, rows, cols, q8.data()?.into_owned())?;
        return Ok(Placed::Blocks(Arc::new(m)));
    }
    Ok(Placed::Dense(dense))
}

impl Linear {
    /// Build from a weight `[out, in]` and an optional bias `[out]`.
    pub fn new(weight: Weight, bias: Option<Tensor>) -> Result<Self> {
        let out_features = weight.dims().first().copied().unwrap_or(0);
        let weight = match weight {
            Weight::Quantized(q) => match place(q)? {
                Placed::Blocks(m) => LinearWeight::Blocks(m),
                Placed::Device(q) => LinearWeight::Quantized(QMatMul::QTensor(q)),
                Placed::Dense(t) => LinearWeight::Dense(t),
            },
            Weight::Dense(t) => LinearWeight::Dense(t.contiguous()?),
        };
        Ok(Linear {
            weight,
            bias,
            out_features,
        })
    }

    /// The quantised weight on a GPU and the bias, when this layer is one (what the GPU decoder
    /// step, [`crate::gpu::step`], multiplies with its own kernel).
    pub(crate) fn device_quantized(&self) -> Option<(&Arc<QTensor>, Option<&Tensor>)> {
        match &self.weight {
            LinearWeight::Quantized(QMatMul::QTensor(q)) => Some((q, self.bias.as_ref())),
            _ => None,
        }
    }

    /// Output width.
    pub fn out_features(&self) -> usize {
        self.out_features
    }

    /// Apply to `x` of shape `[rows, in]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match &self.weight {
            LinearWeight::Blocks(m) => {
                let (rows, inp) = x.dims2()?;
                let host = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                if inp != m.cols() {
                    return Err(Error::InvalidArgument(format!(
                        "input of width {inp} for a layer of width {}",
                        m.cols()
                    )));
                }
                let y = m.matmul(&host, rows)?;
                Tensor::from_vec(y, (rows, m.rows()), x.device())?
            }
            LinearWeight::Quantized(q) => {
                let rows = x.dim(0)?;
                if rows > GPU_INVARIANT_ROWS && gpu_batch_invariant() {
                    let parts = (0..rows)
                        .step_by(GPU_INVARIANT_ROWS)
                        .map(|r| q.forward(&x.narrow(0, r, (rows - r).min(GPU_INVARIANT_ROWS))?))
                        .collect::<candle_core::Result<Vec<_>>>()?;
                    Tensor::cat(&parts, 0)?
                } else {
                    q.forward(x)?
                }
            }
            // Matrices kept in bf16 (`WeightStore::keep_half_matrices`): the product in bf16,
            // the result in x's precision.
            LinearWeight::Dense(w) if w.dtype() != x.dtype() => x
                .to_dtype(w.dtype())?
                .matmul(&w.t()?)?
                .to_dtype(x.dtype())?,
            LinearWeight::Dense(w) => x.matmul(&w.t()?)?,
        };
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

impl Linear {
    /// The layer of only the output rows `rows` (in that order), each exactly as here: the same
    /// blocks in the same format, so that its outputs are this layer's at those rows (a drafter's
    /// reduced vocabulary, [`crate::model::draft_vocab`]).
    pub fn select_rows(&self, rows: &[u32]) -> Result<Linear> {
        let bad = |r: u32| {
            Error::InvalidArgument(format!(
                "row {r} of a layer of {} outputs",
                self.out_features
            ))
        };
        if let Some(&r) = rows.iter().find(|&&r| r as usize >= self.out_features) {
            return Err(bad(r));
        }
        let index = |device: &Device| Tensor::from_vec(rows.to_vec(), rows.len(), device);
        let weight = match &self.weight {
            LinearWeight::Blocks(m) => {
                let data: Vec<u8> = rows
                    .iter()
                    .flat_map(|&r| m.row_data(r as usize).iter().copied())
                    .collect();
                LinearWeight::Blocks(Arc::new(QuantMatrix::new(
                    m.format(),
                    rows.len(),
                    m.cols(),
                    data,
                )?))
            }
            LinearWeight::Quantized(QMatMul::QTensor(q)) => {
                let (_, cols) = q.shape().dims2()?;
                let dtype = q.dtype();
                let row_bytes = cols / dtype.block_size() * dtype.type_size();
                let all = q.data()?;
                let data: Vec<u8> = rows
                    .iter()
                    .flat_map(|&r| {
                        let at = r as usize * row_bytes;
                        all[at..at + row_bytes].iter().copied()
                    })
                    .collect();
                let storage = candle_core::quantized::QStorage::from_data(
                    std::borrow::Cow::Owned(data),
                    &q.device(),
                    dtype,
                )?;
                LinearWeight::Quantized(QMatMul::QTensor(Arc::new(QTensor::new(
                    storage,
                    (rows.len(), cols),
                )?)))
            }
            LinearWeight::Quantized(QMatMul::Tensor(t) | QMatMul::TensorF16(t)) => {
                LinearWeight::Dense(
                    t.index_select(&index(t.device())?, 0)?
                        .to_dtype(DType::F32)?
                        .contiguous()?,
                )
            }
            LinearWeight::Dense(t) => {
                LinearWeight::Dense(t.index_select(&index(t.device())?, 0)?.contiguous()?)
            }
        };
        let bias = match &self.bias {
            Some(b) => Some(b.index_select(&index(b.device())?, 0)?),
            None => None,
        };
        Ok(Linear {
            weight,
            bias,
            out_features: rows.len(),
        })
    }
}

/// A token embedding table, quantised or plain.
#[derive(Debug, Clone)]
pub enum Embedding {
    /// GGUF blocks on the host: rows dequantised on lookup.
    Blocks(Arc<QuantMatrix>),
    /// A quantised table on a GPU: rows dequantised by candle on lookup.
    Quantized(Arc<QTensor>),
    /// A plain `[vocab, hidden]` table.
    Dense(Tensor),
}

impl Embedding {
    /// Build from a `[vocab, hidden]` weight.
    pub fn new(weight: Weight) -> Result<Self> {
        Ok(match weight {
            Weight::Quantized(q) => match place(q)? {
                Placed::Blocks(m) => Embedding::Blocks(m),
                Placed::Device(q) => Embedding::Quantized(q),
                Placed::Dense(t) => Embedding::Dense(t),
            },
            Weight::Dense(t) => Embedding::Dense(t),
        })
    }

    /// Look up `ids` (a u32 tensor of shape `[n]`), giving `[n, hidden]` in f32.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Embedding::Blocks(m) => {
                let ids = ids.to_vec1::<u32>()?;
                let h = m.cols();
                let mut out = vec![0f32; ids.len() * h];
                for (row, &id) in out.chunks_mut(h).zip(&ids) {
                    if id as usize >= m.rows() {
                        return Err(Error::InvalidArgument(format!(
                            "token id {id} is outside the vocabulary of {}",
                            m.rows()
                        )));
                    }
                    m.dequantize_row(id as usize, row);
                }
                Tensor::from_vec(out, (ids.len(), h), &Device::Cpu)?
            }
            Embedding::Quantized(q) => q.embedding(ids)?.to_dtype(DType::F32)?,
            Embedding::Dense(t) => t.index_select(ids, 0)?,
        })
    }

    /// The same table as an LM head (tied embeddings).
    pub fn as_linear(&self) -> Result<Linear> {
        match self {
            Embedding::Blocks(m) => Ok(Linear {
                weight: LinearWeight::Blocks(m.clone()),
                bias: None,
                out_features: m.rows(),
            }),
            Embedding::Quantized(q) => Linear::new(Weight::Quantized(q.clone()), None),
            Embedding::Dense(t) => Linear::new(Weight::Dense(t.clone()), None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bf16_matrix_takes_f32_rows_and_gives_f32_within_bf16_rounding() {
        // As a drafter's matrices kept in bf16 on a GPU (`keep_half_matrices`) multiply.
        let dev = Device::Cpu;
        let w: Vec<f32> = (0..12).map(|i| i as f32 * 0.37 - 2.0).collect();
        let w = Tensor::from_vec(w, (3, 4), &dev).unwrap();
        let x = vec![0.5f32, -1.25, 2.0, 0.75, 1.0, 1.0, -1.0, 0.0];
        let x = Tensor::from_vec(x, (2, 4), &dev).unwrap();
        let plain = Linear::new(Weight::Dense(w.clone()), None).unwrap();
        let half = Linear::new(Weight::Dense(w.to_dtype(DType::BF16).unwrap()), None).unwrap();
        let (want, got) = (plain.forward(&x).unwrap(), half.forward(&x).unwrap());
        assert_eq!(got.dtype(), DType::F32);
        let (want, got) = (
            want.to_vec2::<f32>().unwrap(),
            got.to_vec2::<f32>().unwrap(),
        );
        for (w, g) in want.iter().flatten().zip(got.iter().flatten()) {
            assert!((w - g).abs() <= 2e-2 * w.abs().max(1.0), "{g} against {w}");
        }
    }

    #[test]
    fn layer_names_go_to_hugging_face_and_back() {
        let stems = LAYER_MODULES.iter().map(|(g, _)| *g).chain(["input_proj"]);
        for stem in stems {
            for gguf in [format!("blk.3.{stem}.weight"), format!("mtp.0.{stem}.bias")] {
                for prefix in ["model.", ""] {
                    let hf = hf_name(&gguf, prefix);
                    assert_eq!(gguf_layer_name(&hf).as_deref(), Some(gguf.as_str()), "{hf}");
                }
            }
        }
        // Qwen3.5's Gated DeltaNet vectors, which are not module weights in a checkpoint.
        assert_eq!(
            hf_name("blk.2.ssm_a", "model."),
            "model.layers.2.linear_attn.A_log"
        );
        assert_eq!(
            hf_name("blk.2.ssm_dt.bias", ""),
            "layers.2.linear_attn.dt_bias"
        );
        assert_eq!(gguf_layer_name("model.embed_tokens.weight"), None);
        assert_eq!(gguf_layer_name("lm_head.weight"), None);
        assert_eq!(gguf_layer_name("model.layers.x.mlp.up_proj.weight"), None);
    }
}
