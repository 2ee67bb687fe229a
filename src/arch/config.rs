//! Hyper-parameters of a dense decoder, read from GGUF metadata or a Hugging Face `config.json`.

use crate::error::{Error, Result};
use candle_core::quantized::gguf_file;
use serde::Deserialize;

/// The decoder families treespec runs. They differ only in a few switches (see [`ModelConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Llama 2/3, SmolLM, Mistral-style dense decoders: no biases, no q/k norm.
    Llama,
    /// Qwen2 / Qwen2.5: q, k and v projections carry biases.
    Qwen2,
    /// Qwen3 (dense): RMSNorm over each head of q and k before RoPE; explicit head_dim.
    Qwen3,
    /// Qwen3.5 / Qwen3.6 (dense hybrids): three Gated DeltaNet layers to one gated attention
    /// layer ([`LinearAttention`]), q/k norms, partial RoPE, the attention output gated.
    Qwen35,
}

impl Family {
    /// Parse a GGUF `general.architecture` or a Hugging Face `model_type` / architecture name.
    pub fn parse(name: &str) -> Result<Self> {
        let lower = name.to_ascii_lowercase();
        match lower.as_str() {
            "llama" | "llamaforcausallm" | "mistral" | "mistralforcausallm" => Ok(Family::Llama),
            // MiMo is a Qwen2 decoder with MTP heads beside it (`model.mtp_layers.*`).
            "qwen2" | "qwen2forcausallm" | "mimo" | "mimoforcausallm" => Ok(Family::Qwen2),
            "qwen3" | "qwen3forcausallm" => Ok(Family::Qwen3),
            "qwen35"
            | "qwen3_5"
            | "qwen3_5_text"
            | "qwen3_5forcausallm"
            | "qwen3_5forconditionalgeneration" => Ok(Family::Qwen35),
            _ => Err(Error::UnsupportedArchitecture(name.to_string())),
        }
    }

    /// The family's name as GGUF writes it.
    pub fn name(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Qwen35 => "qwen35",
        }
    }
}

/// How RoPE pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs (2i, 2i+1): what llama.cpp's converter leaves in GGUF llama weights (it permutes q/k).
    Interleaved,
    /// Pairs (i, i + d/2): Hugging Face checkpoints, and GGUF qwen2/qwen3 ("neox" style).
    HalfSplit,
}

/// Llama 3.x frequency scaling (`rope_scaling.rope_type = "llama3"`).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct Llama3RopeScaling {
    /// Overall scale factor.
    pub factor: f32,
    /// Low-frequency factor.
    pub low_freq_factor: f32,
    /// High-frequency factor.
    pub high_freq_factor: f32,
    /// Context length the base model was trained on.
    pub original_max_position_embeddings: usize,
}

/// The Gated DeltaNet layers of a hybrid model (Qwen3.5: "linear attention"; Yang, Kautz and
/// Hatamizadeh, "Gated Delta Networks", arXiv:2412.06464).
#[derive(Debug, Clone, PartialEq)]
pub struct LinearAttention {
    /// Per decoder layer: a Gated DeltaNet layer (true) or an attention layer.
    pub layers: Vec<bool>,
    /// Query/key heads.
    pub k_heads: usize,
    /// Value heads (a multiple of `k_heads`: each key head serves that many value heads).
    pub v_heads: usize,
    /// Width of a query/key head.
    pub k_dim: usize,
    /// Width of a value head.
    pub v_dim: usize,
    /// Width of the causal depthwise convolution over time.
    pub conv: usize,
    /// Value heads in llama.cpp's GGUF order, "tiled" (value head h reads key head
    /// `h % k_heads`), where Hugging Face groups them (key head `h / (v_heads / k_heads)`).
    pub v_tiled: bool,
}

impl LinearAttention {
    /// The key head value head `h` reads.
    pub fn key_head(&self, h: usize) -> usize {
        match self.v_tiled {
            true => h % self.k_heads,
            false => h / (self.v_heads / self.k_heads),
        }
    }

    /// Channels of the convolution: queries, keys and values.
    pub fn conv_channels(&self) -> usize {
        2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
    }
}

/// Everything the decoder needs to know about a model's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Which family's switches apply.
    pub family: Family,
    /// Number of decoder layers.
    pub n_layers: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Width of the MLP's inner layer.
    pub ffn: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (GQA when fewer than `n_heads`).
    pub n_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f64,
    /// RoPE base frequency.
    pub rope_theta: f32,
    /// RoPE pairing.
    pub rope_style: RopeStyle,
    /// Optional Llama-3 frequency scaling.
    pub rope_scaling: Option<Llama3RopeScaling>,
    /// The longest context the model was trained for.
    pub max_position: usize,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// q, k, v projections have biases (Qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm on q and k (Qwen3).
    pub qk_norm: bool,
    /// The LM head is the embedding matrix.
    pub tie_embeddings: bool,
    /// Multi-token-prediction heads the checkpoint declares (`num_nextn_predict_layers`).
    pub mtp_heads: usize,
    /// Dimensions of a head that RoPE rotates (the first ones; `head_dim` unless partial).
    pub rotary_dim: usize,
    /// The query projection is twice as wide, `[query | gate]` per head, and the attention's
    /// output is multiplied by `sigmoid(gate)` before the output projection (Qwen3.5).
    pub attn_gate: bool,
    /// Added to every RMSNorm weight at load (1 for Hugging Face Qwen3.5 checkpoints, whose
    /// norms scale by `1 + w`; GGUF files store `1 + w` already), the Gated DeltaNet output norm
    /// excepted.
    pub norm_offset: f32,
    /// The Gated DeltaNet layers of a hybrid model.
    pub linear: Option<LinearAttention>,
}

impl ModelConfig {
    /// A config with the family's switches set and the given sizes; used by tests and loaders.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        family: Family,
        n_layers: usize,
        hidden: usize,
        ffn: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        vocab_size: usize,
    ) -> Self {
        ModelConfig {
            family,
            n_layers,
            hidden,
            ffn,
            n_heads,
            n_kv_heads,
            head_dim,
            rms_eps: 1e-6,
            rope_theta: 10_000.0,
            rope_style: RopeStyle::HalfSplit,
            rope_scaling: None,
            max_position: 4096,
            vocab_size,
            qkv_bias: family == Family::Qwen2,
            qk_norm: matches!(family, Family::Qwen3 | Family::Qwen35),
            tie_embeddings: false,
            mtp_heads: 0,
            rotary_dim: head_dim,
            attn_gate: family == Family::Qwen35,
            norm_offset: 0.0,
            linear: None,
        }
    }

    /// Whether decoder layer `i` is a Gated DeltaNet layer.
    pub fn is_linear(&self, i: usize) -> bool {
        self.linear.as_ref().is_some_and(|l| l.layers[i])
    }

    /// Check the numbers fit together.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.n_layers == 0 || self.hidden == 0 || self.n_heads == 0 || self.head_dim == 0 {
            return bad(format!("empty model: {self:?}"));
        }
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "{} query heads cannot share {} key/value heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "head_dim {} is odd; RoPE needs pairs",
                self.head_dim
            ));
        }
        if self.vocab_size == 0 {
            return bad("vocabulary size is 0".into());
        }
        if self.rotary_dim == 0 || self.rotary_dim > self.head_dim || self.rotary_dim % 2 == 1 {
            return bad(format!(
                "{} rotary dimensions of a head of {}",
                self.rotary_dim, self.head_dim
            ));
        }
        if let Some(l) = &self.linear {
            if l.layers.len() != self.n_layers {
                return bad(format!(
                    "{} layer types for {} layers",
                    l.layers.len(),
                    self.n_layers
                ));
            }
            if l.k_heads == 0 || l.v_dim == 0 || l.k_dim == 0 || l.conv == 0 {
                return bad(format!("empty linear-attention layers: {l:?}"));
            }
            if !l.v_heads.is_multiple_of(l.k_heads) {
                return bad(format!(
                    "{} value heads cannot share {} key heads",
                    l.v_heads, l.k_heads
                ));
            }
        }
        Ok(())
    }

    /// Read the config from GGUF metadata.
    pub fn from_gguf(content: &gguf_file::Content) -> Result<Self> {
        let md = &content.metadata;
        let arch = md
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .ok_or_else(|| Error::Config("GGUF has no general.architecture".into()))?
            .clone();
        let family = Family::parse(&arch)?;
        let key = |k: &str| format!("{arch}.{k}");
        let get_u = |k: &str| -> Result<usize> {
            let v = md
                .get(&key(k))
                .ok_or_else(|| Error::Config(format!("GGUF metadata lacks `{}`", key(k))))?;
            gguf_usize(v).ok_or_else(|| Error::Config(format!("`{}` is not an integer", key(k))))
        };
        let get_f = |k: &str| -> Option<f64> { md.get(&key(k)).and_then(gguf_f64) };
        let n_heads = get_u("attention.head_count")?;
        let hidden = get_u("embedding_length")?;
        let n_kv_heads = get_u("attention.head_count_kv").unwrap_or(n_heads);
        let head_dim = get_u("attention.key_length").unwrap_or(hidden / n_heads.max(1));
        let vocab_size = match md
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.to_vec().ok())
        {
            Some(tokens) => tokens.len(),
            None => get_u("vocab_size").map_err(|_| {
                Error::Config(
                    "the GGUF has no vocabulary (no tokenizer.ggml.tokens): treespec needs the \
                     model's tokenizer in the file"
                        .into(),
                )
            })?,
        };
        // llama.cpp counts MTP ("nextn") layers in block_count and stores them last.
        let blocks = get_u("block_count")?;
        let nextn = get_u("nextn_predict_layers").unwrap_or(0);
        if nextn >= blocks {
            return Err(Error::Config(format!(
                "`{}` is {nextn}, but the file has only {blocks} blocks",
                key("nextn_predict_layers")
            )));
        }
        let mut cfg = ModelConfig::new(
            family,
            blocks - nextn,
            hidden,
            get_u("feed_forward_length")?,
            n_heads,
            n_kv_heads,
            head_dim,
            vocab_size,
        );
        cfg.rms_eps = get_f("attention.layer_norm_rms_epsilon").unwrap_or(1e-5);
        cfg.rope_theta = get_f("rope.freq_base").unwrap_or(10_000.0) as f32;
        cfg.max_position = get_u("context_length").unwrap_or(4096);
        cfg.rope_style = match family {
            Family::Llama => RopeStyle::Interleaved,
            Family::Qwen2 | Family::Qwen3 | Family::Qwen35 => RopeStyle::HalfSplit,
        };
        if family == Family::Qwen35 {
            // llama.cpp's converter: norms stored as 1 + w, A as -exp(A_log), the value heads
            // tiled (research: hybrid-targets.md §2.2-2.3).
            let state = get_u("ssm.state_size")?;
            let v_heads = get_u("ssm.time_step_rank")?;
            let k_heads = get_u("ssm.group_count")?;
            let layers = match md.get(&key("attention.recurrent_layers")) {
                Some(gguf_file::Value::Array(a)) => a
                    .iter()
                    .map(|v| match v {
                        gguf_file::Value::Bool(b) => Ok(*b),
                        _ => Err(Error::Config("recurrent_layers is not a bool array".into())),
                    })
                    // The MTP blocks' entries (after the decoder's) are not the decoder's.
                    .take(blocks - nextn)
                    .collect::<Result<Vec<_>>>()?,
                _ => {
                    let interval = get_u("full_attention_interval").unwrap_or(4).max(1);
                    (0..blocks - nextn)
                        .map(|i| (i + 1) % interval != 0)
                        .collect()
                }
            };
            cfg.linear = Some(LinearAttention {
                layers,
                k_heads,
                v_heads,
                k_dim: state,
                v_dim: get_u("ssm.inner_size")? / v_heads.max(1),
                conv: get_u("ssm.conv_kernel")?,
                v_tiled: k_heads != v_heads,
            });
            cfg.rotary_dim = get_u("rope.dimension_count").unwrap_or(head_dim);
            cfg.attn_gate = true;
            cfg.qk_norm = true;
        }
        cfg.mtp_heads = nextn;
        cfg.tie_embeddings = !content.tensor_infos.contains_key("output.weight");
        cfg.qkv_bias = content.tensor_infos.contains_key("blk.0.attn_q.bias");
        cfg.validate()?;
        Ok(cfg)
    }

    /// Read the config from a Hugging Face `config.json`.
    pub fn from_hf_json(text: &str) -> Result<Self> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Error::Config(format!("config.json: {e}")))?;
        // Qwen3.5's checkpoints are a vision-language wrapper: the decoder's sizes sit under
        // `text_config`, its architecture at the top.
        let architectures = value.get("architectures").cloned();
        let value = match value.get("text_config") {
            Some(text_config) => {
                let mut t = text_config.clone();
                if let (Some(obj), Some(a)) = (t.as_object_mut(), architectures) {
                    obj.entry("architectures").or_insert(a);
                }
                t
            }
            None => value,
        };
        let raw: HfConfig = serde_json::from_value(value)
            .map_err(|e| Error::Config(format!("config.json: {e}")))?;
        let arch_name = raw
            .architectures
            .as_ref()
            .and_then(|a| a.first().cloned())
            .or_else(|| raw.model_type.clone())
            .ok_or_else(|| Error::Config("config.json names no architecture".into()))?;
        if let Some(why) = unsupported_mtp_family(&arch_name, raw.model_type.as_deref()) {
            return Err(Error::Config(why));
        }
        let family = Family::parse(&arch_name).or_else(|e| match &raw.model_type {
            Some(mt) => Family::parse(mt),
            None => Err(e),
        })?;
        let head_dim = raw
            .head_dim
            .unwrap_or(raw.hidden_size / raw.num_attention_heads.max(1));
        let mut cfg = ModelConfig::new(
            family,
            raw.num_hidden_layers,
            raw.hidden_size,
            raw.intermediate_size,
            raw.num_attention_heads,
            raw.num_key_value_heads.unwrap_or(raw.num_attention_heads),
            head_dim,
            raw.vocab_size,
        );
        cfg.rms_eps = raw.rms_norm_eps.unwrap_or(1e-6);
        let rope = raw.rope_parameters.as_ref();
        let rope_f = |k: &str| rope.and_then(|r| r.get(k)).and_then(|v| v.as_f64());
        cfg.rope_theta = raw
            .rope_theta
            .or(rope_f("rope_theta").map(|t| t as f32))
            .unwrap_or(10_000.0);
        if family == Family::Qwen35 {
            cfg.hybrid_from_hf(&raw, rope_f("partial_rotary_factor"))?;
        }
        cfg.max_position = raw.max_position_embeddings.unwrap_or(4096);
        cfg.tie_embeddings = raw.tie_word_embeddings.unwrap_or(false);
        cfg.qkv_bias = raw.attention_bias.unwrap_or(family == Family::Qwen2);
        cfg.mtp_heads = match family {
            // Qwen3.5's MTP head (`mtp.*`) is counted apart from the decoder's layers.
            Family::Qwen35 => raw.mtp_num_hidden_layers.unwrap_or(0),
            _ => raw.num_nextn_predict_layers.unwrap_or(0),
        };
        if let Some(scaling) = raw.rope_scaling {
            let kind = scaling
                .get("rope_type")
                .or_else(|| scaling.get("type"))
                .and_then(|v| v.as_str())
                .unwrap_or("default");
            match kind {
                "default" => {}
                "llama3" => {
                    cfg.rope_scaling = Some(
                        serde_json::from_value(scaling.clone())
                            .map_err(|e| Error::Config(format!("rope_scaling: {e}")))?,
                    )
                }
                other => {
                    return Err(Error::Config(format!(
                        "rope_scaling type `{other}` is not supported"
                    )))
                }
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

#[derive(Deserialize)]
struct HfConfig {
    architectures: Option<Vec<String>>,
    model_type: Option<String>,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    vocab_size: usize,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f32>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    rope_scaling: Option<serde_json::Value>,
    num_nextn_predict_layers: Option<usize>,
    rope_parameters: Option<serde_json::Value>,
    partial_rotary_factor: Option<f64>,
    layer_types: Option<Vec<String>>,
    full_attention_interval: Option<usize>,
    linear_num_key_heads: Option<usize>,
    linear_num_value_heads: Option<usize>,
    linear_key_head_dim: Option<usize>,
    linear_value_head_dim: Option<usize>,
    linear_conv_kernel_dim: Option<usize>,
    mtp_num_hidden_layers: Option<usize>,
}

impl ModelConfig {
    /// The hybrid layers of a Hugging Face Qwen3.5 config (`partial` the rotary factor of
    /// `rope_parameters`, where set): the layer pattern, the Gated DeltaNet sizes, partial RoPE,
    /// the (1 + w) norms.
    fn hybrid_from_hf(&mut self, raw: &HfConfig, partial: Option<f64>) -> Result<()> {
        let interval = raw.full_attention_interval.unwrap_or(4).max(1);
        let layers: Vec<bool> = match &raw.layer_types {
            Some(types) => types
                .iter()
                .map(|t| match t.as_str() {
                    "linear_attention" => Ok(true),
                    "full_attention" => Ok(false),
                    other => Err(Error::Config(format!("layer type `{other}`"))),
                })
                .collect::<Result<_>>()?,
            None => (0..self.n_layers)
                .map(|i| (i + 1) % interval != 0)
                .collect(),
        };
        let need = |v: Option<usize>, what: &str| {
            v.ok_or_else(|| Error::Config(format!("config.json lacks `{what}`")))
        };
        self.linear = Some(LinearAttention {
            layers,
            k_heads: need(raw.linear_num_key_heads, "linear_num_key_heads")?,
            v_heads: need(raw.linear_num_value_heads, "linear_num_value_heads")?,
            k_dim: need(raw.linear_key_head_dim, "linear_key_head_dim")?,
            v_dim: need(raw.linear_value_head_dim, "linear_value_head_dim")?,
            conv: raw.linear_conv_kernel_dim.unwrap_or(4),
            v_tiled: false,
        });
        let factor = partial.or(raw.partial_rotary_factor).unwrap_or(0.25);
        self.rotary_dim = ((self.head_dim as f64 * factor).round() as usize).max(2);
        self.norm_offset = 1.0;
        self.attn_gate = true;
        self.qk_norm = true;
        Ok(())
    }
}

/// Families whose checkpoints carry MTP heads treespec recognises but cannot run, with why.
fn unsupported_mtp_family(arch: &str, model_type: Option<&str>) -> Option<String> {
    let names = [Some(arch), model_type];
    let is = |wanted: &[&str]| {
        names
            .iter()
            .flatten()
            .any(|n| wanted.contains(&n.to_ascii_lowercase().as_str()))
    };
    if is(&[
        "deepseekv3forcausallm",
        "deepseek_v3",
        "deepseekv2forcausallm",
        "deepseek_v2",
    ]) {
        return Some(
            "DeepSeek-V3 checkpoints (MTP heads in model.layers.{N}.{enorm, hnorm, eh_proj, \
             shared_head}) need multi-head latent attention and mixture-of-experts blocks, which \
             treespec does not run yet"
                .into(),
        );
    }
    if is(&[
        "qwen3nextforcausallm",
        "qwen3_next",
        "qwen3_5_moe",
        "qwen3_5moeforcausallm",
        "qwen3_5moeforconditionalgeneration",
    ]) {
        return Some(
            "Qwen3-Next and the Qwen3.5 / 3.6 mixture-of-experts checkpoints (35B-A3B, 122B-A10B, \
             397B-A17B; MTP heads in mtp.*) need mixture-of-experts blocks, which treespec does \
             not run yet (the dense Qwen3.5 / 3.6 models run)"
                .into(),
        );
    }
    None
}

/// An integer-valued GGUF metadata value as usize.
pub(crate) fn gguf_usize(v: &gguf_file::Value) -> Option<usize> {
    use gguf_file::Value::*;
    match v {
        U8(x) => Some(*x as usize),
        U16(x) => Some(*x as usize),
        U32(x) => Some(*x as usize),
        U64(x) => usize::try_from(*x).ok(),
        I8(x) => usize::try_from(*x).ok(),
        I16(x) => usize::try_from(*x).ok(),
        I32(x) => usize::try_from(*x).ok(),
        I64(x) => usize::try_from(*x).ok(),
        _ => None,
    }
}

/// A numeric GGUF metadata value as f64.
pub(crate) fn gguf_f64(v: &gguf_file::Value) -> Option<f64> {
    use gguf_file::Value::*;
    match v {
        F32(x) => Some(*x as f64),
        F64(x) => Some(*x),
        _ => gguf_usize(v).map(|x| x as f64),
    }
}
