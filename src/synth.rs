//! Random-weight GGUF models with a real model's shape and weight formats, for measuring what a
//! pass costs where the real weights cannot be had (the 8B-class setting of the DDTree paper) or
//! are slow to bring to a lent GPU. Every quantised block is random bytes with small scales,
//! written as it is (no float weights, no quantisation pass), so an 8B-shaped file takes seconds;
//! the vocabulary is the 256 byte-level symbols, the ChatML markers and filler tokens up to the
//! real vocabulary's size, so the LM head has its real cost. The outputs are noise: these models
//! are for timing (`treespec bench --costs`), never for text (with no merges every byte of a
//! prompt is a token, about four times the real tokenizer's count).

use crate::arch::config::Family;
use crate::error::{Error, Result};
use candle_core::quantized::{ggml_file, gguf_file, GgmlDType, QTensor};
use candle_core::Device;
use std::path::Path;

/// A model's shape and the formats its GGUF file stores its matrices in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The name `treespec synth --shape` takes.
    pub name: &'static str,
    /// Decoder family (biases, q/k norms).
    pub family: Family,
    /// Decoder layers.
    pub layers: usize,
    /// Hidden size.
    pub hidden: usize,
    /// MLP width.
    pub ffn: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// The LM head is the embedding (no `output.weight`).
    pub tied: bool,
    /// Qwen3.5 / 3.6's hybrid layers, where the shape has them (family [`Family::Qwen35`]).
    pub hybrid: Option<Hybrid>,
}

/// The Gated DeltaNet side of a hybrid shape (llama.cpp's `qwen35` architecture): every
/// `interval`-th layer is gated attention, the others Gated DeltaNet layers; `mtp` MTP blocks
/// (`blk.{layers + i}.nextn.*`) after the decoder's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hybrid {
    /// Query/key heads of a Gated DeltaNet layer.
    pub k_heads: usize,
    /// Value heads (a multiple of `k_heads`).
    pub v_heads: usize,
    /// Width of a key and of a value head (llama.cpp requires them equal).
    pub head: usize,
    /// Taps of the causal convolution.
    pub conv: usize,
    /// Every `interval`-th layer is an attention layer.
    pub interval: usize,
    /// Dimensions of an attention head RoPE turns.
    pub rotary: usize,
    /// MTP blocks.
    pub mtp: usize,
}

/// The shapes `synth` writes, as Q4_K_M files (see [`format_of`]).
pub const SHAPES: &[Shape] = &[
    Shape {
        name: "qwen2.5-1.5b",
        family: Family::Qwen2,
        layers: 28,
        hidden: 1536,
        ffn: 8960,
        heads: 12,
        kv_heads: 2,
        head_dim: 128,
        vocab: 151_936,
        tied: false,
        hybrid: None,
    },
    Shape {
        name: "qwen2.5-0.5b",
        family: Family::Qwen2,
        layers: 24,
        hidden: 896,
        ffn: 4864,
        heads: 14,
        kv_heads: 2,
        head_dim: 64,
        vocab: 151_936,
        tied: false,
        hybrid: None,
    },
    Shape {
        name: "qwen3-8b",
        family: Family::Qwen3,
        layers: 36,
        hidden: 4096,
        ffn: 12_288,
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        vocab: 151_936,
        tied: false,
        hybrid: None,
    },
    Shape {
        name: "qwen3-32b",
        family: Family::Qwen3,
        layers: 64,
        hidden: 5120,
        ffn: 25_600,
        heads: 64,
        kv_heads: 8,
        head_dim: 128,
        vocab: 151_936,
        tied: false,
        hybrid: None,
    },
    // Qwen3.6-27B's sizes (hidden, MLP, its gated attention's 24 / 4 heads of 256, 64 layers) with
    // every layer a dense Qwen3 attention layer, to compare with `qwen3.6-27b`.
    Shape {
        name: "qwen3.6-27b-dense",
        family: Family::Qwen3,
        layers: 64,
        hidden: 5120,
        ffn: 17_408,
        heads: 24,
        kv_heads: 4,
        head_dim: 256,
        vocab: 248_320,
        tied: false,
        hybrid: None,
    },
    // Qwen3.6-27B (= Qwen3.5-27B): 48 Gated DeltaNet layers (16 key / 48 value heads of 128)
    // and 16 gated attention layers, [L, L, L, F] x 16, with its MTP block.
    Shape {
        name: "qwen3.6-27b",
        family: Family::Qwen35,
        layers: 64,
        hidden: 5120,
        ffn: 17_408,
        heads: 24,
        kv_heads: 4,
        head_dim: 256,
        vocab: 248_320,
        tied: false,
        hybrid: Some(QWEN35_HYBRID),
    },
    // Qwen3.5-0.8B: the smallest of the family (18 + 6 layers, 16 / 16 heads, tied).
    Shape {
        name: "qwen3.5-0.8b",
        family: Family::Qwen35,
        layers: 24,
        hidden: 1024,
        ffn: 3584,
        heads: 8,
        kv_heads: 2,
        head_dim: 256,
        vocab: 248_320,
        tied: true,
        hybrid: Some(Hybrid {
            v_heads: 16,
            ..QWEN35_HYBRID
        }),
    },
];

/// The Gated DeltaNet layers of Qwen3.6-27B (the other sizes change the value heads).
const QWEN35_HYBRID: Hybrid = Hybrid {
    k_heads: 16,
    v_heads: 48,
    head: 128,
    conv: 4,
    interval: 4,
    rotary: 64,
    mtp: 1,
};

/// The shape named `name`, or an error listing the known ones.
pub fn shape(name: &str) -> Result<Shape> {
    SHAPES
        .iter()
        .find(|s| s.name == name)
        .copied()
        .ok_or_else(|| {
            let known: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
            Error::InvalidArgument(format!(
                "unknown shape `{name}` (known: {})",
                known.join(", ")
            ))
        })
}

/// llama.cpp's Q4_K_M choice for a matrix with rows of `cols` values: Q6_K for the LM head and
/// for the value and down projections of the layers `use_more_bits` picks (the first and last
/// eighth, every third between: half the layers, as in the default pair's files, whose exact
/// layers differ with the llama.cpp version), Q4_K otherwise; where a row is no multiple of 256
/// (the 0.5B's 896), Q5_0 for Q4_K and Q8_0 for Q6_K, as the default drafter's file has them.
pub fn format_of(tensor: &str, layer: Option<(usize, usize)>, cols: usize) -> GgmlDType {
    let more_bits = |(i, n): (usize, usize)| i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
    let wide = tensor == "output"
        || (matches!(tensor, "attn_v" | "ffn_down") && layer.is_some_and(more_bits));
    match (wide, cols.is_multiple_of(256)) {
        (true, true) => GgmlDType::Q6K,
        (true, false) => GgmlDType::Q8_0,
        (false, true) => GgmlDType::Q4K,
        (false, false) => GgmlDType::Q5_0,
    }
}

/// The printable stand-ins GPT-2's byte-level BPE uses for the 256 byte values, in byte order.
pub fn byte_level_alphabet() -> Vec<String> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut pairs: Vec<(u32, u32)> = bs.into_iter().zip(cs).collect();
    pairs.sort();
    pairs
        .into_iter()
        .filter_map(|(_, c)| char::from_u32(c).map(String::from))
        .collect()
}

/// GGUF metadata for a byte-level BPE tokenizer with no merges over `tokens` (the 256 byte
/// symbols first), the ids in `control` control tokens, `eos` the end of a turn, and a ChatML
/// chat template.
pub fn tokenizer_metadata(
    tokens: &[String],
    control: std::ops::Range<usize>,
    eos: u32,
) -> Vec<(String, gguf_file::Value)> {
    use gguf_file::Value as V;
    let s = |x: &str| V::String(x.to_string());
    let kind = |i: usize| V::I32(if control.contains(&i) { 3 } else { 1 });
    vec![
        ("tokenizer.ggml.model".into(), s("gpt2")),
        ("tokenizer.ggml.pre".into(), s("gpt2")),
        (
            "tokenizer.ggml.tokens".into(),
            V::Array(tokens.iter().map(|t| s(t)).collect()),
        ),
        ("tokenizer.ggml.merges".into(), V::Array(vec![])),
        (
            "tokenizer.ggml.token_type".into(),
            V::Array((0..tokens.len()).map(kind).collect()),
        ),
        ("tokenizer.ggml.eos_token_id".into(), V::U32(eos)),
        (
            "tokenizer.chat_template".into(),
            s(crate::model::chat_template::CHATML),
        ),
    ]
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// A half-precision scale in [scale / 2, scale), little-endian.
fn half_bytes(rng: &mut Rng, scale: f32) -> [u8; 2] {
    let u = (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
    half::f16::from_f32(scale * (0.5 + 0.5 * u)).to_le_bytes()
}

/// Random blocks of `dtype` for `elems` values, with scales that keep a row's products O(1)
/// for rows of `cols` values (norms between the layers keep the rest in range).
fn random_blocks(rng: &mut Rng, dtype: GgmlDType, elems: usize, cols: usize) -> Vec<u8> {
    let blocks = elems / dtype.block_size();
    let mut data = vec![0u8; blocks * dtype.type_size()];
    rng.fill(&mut data);
    // Weights of about 1/sqrt(cols): the scale over the largest quantised magnitude.
    let w = 1.0 / (cols as f32).sqrt();
    let (d_at, d) = match dtype {
        GgmlDType::Q4K => (0, w / (63.0 * 15.0)),
        GgmlDType::Q6K => (208, w / (127.0 * 32.0)),
        GgmlDType::Q5_0 => (0, w / 16.0),
        GgmlDType::Q8_0 => (0, w / 127.0),
        _ => return data,
    };
    for block in data.chunks_mut(dtype.type_size()) {
        block[d_at..d_at + 2].copy_from_slice(&half_bytes(rng, d));
        if dtype == GgmlDType::Q4K {
            // dmin
            block[2..4].copy_from_slice(&half_bytes(rng, d));
        }
    }
    data
}

/// The tokenizer of a real GGUF model: its `tokenizer.*` metadata, and its vocabulary's size.
pub struct RealTokenizer {
    /// Every `tokenizer.*` key of the file.
    pub metadata: Vec<(String, gguf_file::Value)>,
    /// Tokens it lists.
    pub vocab: usize,
}

/// Read the tokenizer of the GGUF model at `path`, for a synthetic model that llama.cpp loads
/// (llama.cpp refuses the filler vocabulary [`write`](fn@write) makes by itself: it has no merges).
pub fn tokenizer_from(path: &Path) -> Result<RealTokenizer> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let content = gguf_file::Content::read(&mut file).map_err(|e| {
        Error::InvalidArgument(format!("{} is not a GGUF file: {e}", path.display()))
    })?;
    let metadata: Vec<(String, gguf_file::Value)> = content
        .metadata
        .into_iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .collect();
    let vocab = metadata
        .iter()
        .find(|(k, _)| k == "tokenizer.ggml.tokens")
        .and_then(|(_, v)| match v {
            gguf_file::Value::Array(a) => Some(a.len()),
            _ => None,
        })
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} has no tokenizer.ggml.tokens: no tokenizer to copy",
                path.display()
            ))
        })?;
    Ok(RealTokenizer { metadata, vocab })
}

/// Write a random-weight GGUF model of `shape` to `path` (`seed` picks the bytes), with the
/// filler vocabulary, or with `tokenizer` (whose vocabulary size then sets the embedding's and
/// the LM head's rows).
pub fn write(
    shape: &Shape,
    path: &Path,
    seed: u64,
    tokenizer: Option<&RealTokenizer>,
) -> Result<()> {
    let shape = &Shape {
        vocab: tokenizer.map_or(shape.vocab, |t| t.vocab),
        ..*shape
    };
    let mut rng = Rng(seed | 1);
    let tensors = Layout::of(shape).random(&mut rng)?;
    let md = metadata(shape, tokenizer);
    crate::arch::weights::write_gguf(path, &md, &tensors)
}

/// The tensors of a synthetic model before their bytes, in the order the bytes are drawn.
struct Layout {
    /// (name, rows, cols, format); vectors (norms, biases) are f32.
    mats: Vec<(String, usize, usize, GgmlDType)>,
    /// (name, values, columns (0: a vector), centre).
    vecs: Vec<(String, usize, usize, f32)>,
}

impl Layout {
    /// The tensors of `shape`: the embedding and the LM head, then each decoder layer's and
    /// MTP block's ([`Layout::block`]).
    fn of(shape: &Shape) -> Layout {
        let h = shape.hidden;
        let mut l = Layout {
            mats: vec![],
            vecs: vec![("output_norm.weight".into(), h, 0, 1.0)],
        };
        // A tied embedding is the LM head, and llama.cpp gives it the LM head's format.
        let embd = if shape.tied { "output" } else { "token_embd" };
        l.mat("token_embd.weight".into(), embd, None, shape.vocab, h);
        if !shape.tied {
            l.mat("output.weight".into(), "output", None, shape.vocab, h);
        }
        let mtp = shape.hybrid.map_or(0, |y| y.mtp);
        for i in 0..shape.layers + mtp {
            l.block(shape, i);
        }
        l
    }

    /// A matrix `name` of `rows` x `cols`, in the format llama.cpp's Q4_K_M gives the tensor
    /// `tensor` of `layer` ([`format_of`]).
    fn mat(
        &mut self,
        name: String,
        tensor: &str,
        layer: Option<(usize, usize)>,
        rows: usize,
        cols: usize,
    ) {
        let format = format_of(tensor, layer, cols);
        self.mats.push((name, rows, cols, format));
    }

    /// The tensors of block `i` of `shape`: a Gated DeltaNet or attention layer (with the
    /// family's biases and q/k norms), its MLP and norms, and for an MTP block (past the
    /// decoder's layers) its own tensors.
    fn block(&mut self, shape: &Shape, i: usize) {
        let (h, hd) = (shape.hidden, shape.head_dim);
        let (q_out, kv_out) = (shape.heads * hd, shape.kv_heads * hd);
        let at = Some((i.min(shape.layers - 1), shape.layers));
        let p = |s: &str| format!("blk.{i}.{s}.weight");
        let linear = shape
            .hybrid
            .filter(|y| i < shape.layers && !(i + 1).is_multiple_of(y.interval));
        match linear {
            Some(y) => {
                // A Gated DeltaNet layer, as llama.cpp's converter names and shapes it.
                let (ch, vd) = (
                    2 * y.k_heads * y.head + y.v_heads * y.head,
                    y.v_heads * y.head,
                );
                self.mat(p("attn_qkv"), "attn_qkv", at, ch, h);
                self.mat(p("attn_gate"), "attn_gate", at, vd, h);
                self.mat(p("ssm_beta"), "ssm_beta", at, y.v_heads, h);
                self.mat(p("ssm_alpha"), "ssm_alpha", at, y.v_heads, h);
                self.mat(p("ssm_out"), "ssm_out", at, h, vd);
                self.vecs.push((p("ssm_conv1d"), ch * y.conv, y.conv, 0.0));
                self.vecs
                    .push((format!("blk.{i}.ssm_a"), y.v_heads, 0, -1.0));
                self.vecs
                    .push((format!("blk.{i}.ssm_dt.bias"), y.v_heads, 0, 0.0));
                self.vecs.push((p("ssm_norm"), y.head, 0, 1.0));
            }
            None => {
                // Qwen3.5's attention gates its output: the query rows are [query | gate].
                let q_rows = q_out * if shape.hybrid.is_some() { 2 } else { 1 };
                self.mat(p("attn_q"), "attn_q", at, q_rows, h);
                self.mat(p("attn_k"), "attn_k", at, kv_out, h);
                self.mat(p("attn_v"), "attn_v", at, kv_out, h);
                self.mat(p("attn_output"), "attn_output", at, h, q_out);
            }
        }
        self.mat(p("ffn_gate"), "ffn_gate", at, shape.ffn, h);
        self.mat(p("ffn_up"), "ffn_up", at, shape.ffn, h);
        self.mat(p("ffn_down"), "ffn_down", at, h, shape.ffn);
        self.vecs.push((p("attn_norm"), h, 0, 1.0));
        // llama.cpp names the MLP's norm `post_attention_norm` in `qwen35` files.
        let ffn_norm = if shape.hybrid.is_some() {
            "post_attention_norm"
        } else {
            "ffn_norm"
        };
        self.vecs.push((p(ffn_norm), h, 0, 1.0));
        if shape.family == Family::Qwen2 {
            for (t, n) in [("attn_q", q_out), ("attn_k", kv_out), ("attn_v", kv_out)] {
                self.vecs.push((format!("blk.{i}.{t}.bias"), n, 0, 0.0));
            }
        }
        if matches!(shape.family, Family::Qwen3 | Family::Qwen35) && linear.is_none() {
            self.vecs.push((p("attn_q_norm"), hd, 0, 1.0));
            self.vecs.push((p("attn_k_norm"), hd, 0, 1.0));
        }
        if i >= shape.layers {
            // The MTP block's own tensors (llama.cpp's `nextn`): embedding first in `eh_proj`.
            self.mat(p("nextn.eh_proj"), "nextn.eh_proj", at, h, 2 * h);
            for n in ["enorm", "hnorm", "shared_head_norm"] {
                self.vecs.push((p(&format!("nextn.{n}")), h, 0, 1.0));
            }
        }
    }

    /// The tensors with bytes drawn from `rng` (the matrices' first, then the vectors', each
    /// value within 0.05 of its centre), sorted by name.
    fn random(self, rng: &mut Rng) -> Result<Vec<(String, QTensor)>> {
        let cpu = Device::Cpu;
        let mut tensors: Vec<(String, QTensor)> = vec![];
        for (name, rows, cols, format) in self.mats {
            let data = random_blocks(rng, format, rows * cols, cols);
            tensors.push((
                name,
                ggml_file::qtensor_from_ggml(format, &data, vec![rows, cols], &cpu)?,
            ));
        }
        for (name, n, cols, centre) in self.vecs {
            let values: Vec<u8> = (0..n)
                .flat_map(|_| {
                    let u = (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
                    (centre + 0.1 * (u - 0.5)).to_le_bytes()
                })
                .collect();
            let dims = match cols {
                0 => vec![n],
                c => vec![n / c, c],
            };
            tensors.push((
                name,
                ggml_file::qtensor_from_ggml(GgmlDType::F32, &values, dims, &cpu)?,
            ));
        }
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(tensors)
    }
}

/// The GGUF metadata of a synthetic model of `shape`: its architecture's keys (and a hybrid
/// shape's, [`hybrid_metadata`]), and `tokenizer`'s keys or the filler vocabulary's (the 256
/// byte symbols, the ChatML markers, filler tokens up to `shape.vocab`).
fn metadata(shape: &Shape, tokenizer: Option<&RealTokenizer>) -> Vec<(String, gguf_file::Value)> {
    let (h, hd) = (shape.hidden, shape.head_dim);
    let mtp = shape.hybrid.map_or(0, |y| y.mtp);
    let mut tokens = byte_level_alphabet();
    tokens.push("<|im_start|>".into());
    tokens.push("<|im_end|>".into());
    let specials = tokens.len();
    for i in tokens.len()..shape.vocab {
        tokens.push(format!("synth{i}"));
    }
    let arch = shape.family.name();
    // Qwen3.5 / 3.6 turn their RoPE ten times slower than Qwen2.5 / 3.
    let rope_base = if shape.hybrid.is_some() { 1e7 } else { 1e6 };
    use gguf_file::Value as V;
    let s = |x: &str| V::String(x.to_string());
    let u = |x: usize| V::U32(x as u32);
    let mut md: Vec<(String, V)> = vec![
        ("general.architecture".into(), s(arch)),
        (
            "general.name".into(),
            s(&format!("synthetic {}", shape.name)),
        ),
        (format!("{arch}.block_count"), u(shape.layers + mtp)),
        (format!("{arch}.context_length"), u(32_768)),
        (format!("{arch}.embedding_length"), u(h)),
        (format!("{arch}.feed_forward_length"), u(shape.ffn)),
        (format!("{arch}.attention.head_count"), u(shape.heads)),
        (format!("{arch}.attention.head_count_kv"), u(shape.kv_heads)),
        (format!("{arch}.attention.key_length"), u(hd)),
        (format!("{arch}.attention.value_length"), u(hd)),
        (
            format!("{arch}.attention.layer_norm_rms_epsilon"),
            V::F32(1e-6),
        ),
        (format!("{arch}.rope.freq_base"), V::F32(rope_base)),
    ];
    if let Some(y) = shape.hybrid {
        md.extend(hybrid_metadata(arch, shape, &y));
    }
    match tokenizer {
        Some(t) => md.extend(t.metadata.iter().cloned()),
        None => md.extend(tokenizer_metadata(&tokens, 256..specials, 257)),
    }
    md
}

/// The `qwen35` keys of a hybrid shape, as llama.cpp's converter writes them (its loader needs
/// `rope.dimension_sections`; the recurrent-layer list covers the MTP blocks too).
fn hybrid_metadata(arch: &str, shape: &Shape, y: &Hybrid) -> Vec<(String, gguf_file::Value)> {
    use gguf_file::Value as V;
    let u = |x: usize| V::U32(x as u32);
    let pairs = y.rotary / 2;
    let sections = [pairs.div_ceil(3), (pairs + 1) / 3, pairs / 3, 0];
    let blocks = shape.layers + y.mtp;
    let recurrent = (0..blocks)
        .map(|i| V::Bool(i < shape.layers && (i + 1) % y.interval != 0))
        .collect();
    vec![
        (format!("{arch}.ssm.conv_kernel"), u(y.conv)),
        (format!("{arch}.ssm.state_size"), u(y.head)),
        (format!("{arch}.ssm.group_count"), u(y.k_heads)),
        (format!("{arch}.ssm.time_step_rank"), u(y.v_heads)),
        (format!("{arch}.ssm.inner_size"), u(y.v_heads * y.head)),
        (format!("{arch}.full_attention_interval"), u(y.interval)),
        (
            format!("{arch}.attention.recurrent_layers"),
            V::Array(recurrent),
        ),
        (format!("{arch}.rope.dimension_count"), u(y.rotary)),
        (
            format!("{arch}.rope.dimension_sections"),
            V::Array(sections.iter().map(|&x| V::I32(x as i32)).collect()),
        ),
        (format!("{arch}.nextn_predict_layers"), u(y.mtp)),
    ]
}

/// Decoder layers of a synthetic DFlash drafter: z-lab's Qwen3 drafters have five.
pub const DFLASH_LAYERS: usize = 5;

/// Block size of a synthetic DFlash drafter (z-lab's `-b16` checkpoints).
pub const DFLASH_BLOCK: usize = 16;

/// Write a random-weight DFlash drafter for a target of `shape` into the directory `dir`
/// (`config.json` and `model.safetensors`, z-lab's layout and bf16 weights): [`DFLASH_LAYERS`]
/// Qwen3 layers of the target's width, heads and MLP, blocks of [`DFLASH_BLOCK`], reading the
/// target layers the reference picks for it (`default_target_layer_ids`), the last id of the
/// vocabulary as the mask token. For timing a drafter pass of the paper's setting; it drafts
/// noise.
pub fn write_dflash(shape: &Shape, dir: &Path, seed: u64) -> Result<()> {
    let (h, hd, ffn) = (shape.hidden, shape.head_dim, shape.ffn);
    let (q_out, kv_out) = (shape.heads * hd, shape.kv_heads * hd);
    let taps = crate::draft::dflash::default_target_layer_ids(shape.layers, DFLASH_LAYERS);
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let config = serde_json::json!({
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "vocab_size": shape.vocab,
        "hidden_size": h,
        "intermediate_size": ffn,
        "num_hidden_layers": DFLASH_LAYERS,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": hd,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000.0,
        "max_position_embeddings": 32_768,
        "tie_word_embeddings": false,
        "attention_bias": false,
        "block_size": DFLASH_BLOCK,
        "num_target_layers": shape.layers,
        "dflash_config": {
            "target_layer_ids": taps,
            "mask_token_id": shape.vocab - 1
        }
    });
    let config_path = dir.join("config.json");
    std::fs::write(&config_path, config.to_string()).map_err(|e| Error::io(&config_path, e))?;
    let mut rng = Rng(seed | 1);
    let cpu = Device::Cpu;
    // Matrices of about 1/sqrt(cols), norm weights about 1.
    let mut tensor = |dims: &[usize], scale: f32, centre: f32| {
        let n: usize = dims.iter().product();
        let values: Vec<half::bf16> = (0..n)
            .map(|_| {
                let u = (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
                half::bf16::from_f32(centre + scale * (2.0 * u - 1.0))
            })
            .collect();
        candle_core::Tensor::from_vec(values, dims, &cpu)
    };
    let w = |cols: usize| 1.0 / (cols as f32).sqrt();
    let mut m = std::collections::HashMap::new();
    m.insert(
        "fc.weight".into(),
        tensor(&[h, h * taps.len()], w(h * taps.len()), 0.0)?,
    );
    m.insert("hidden_norm.weight".into(), tensor(&[h], 0.05, 1.0)?);
    m.insert("norm.weight".into(), tensor(&[h], 0.05, 1.0)?);
    for i in 0..DFLASH_LAYERS {
        let p = |s: &str| format!("layers.{i}.{s}.weight");
        m.insert(p("input_layernorm"), tensor(&[h], 0.05, 1.0)?);
        m.insert(p("post_attention_layernorm"), tensor(&[h], 0.05, 1.0)?);
        m.insert(p("self_attn.q_proj"), tensor(&[q_out, h], w(h), 0.0)?);
        m.insert(p("self_attn.k_proj"), tensor(&[kv_out, h], w(h), 0.0)?);
        m.insert(p("self_attn.v_proj"), tensor(&[kv_out, h], w(h), 0.0)?);
        m.insert(p("self_attn.o_proj"), tensor(&[h, q_out], w(q_out), 0.0)?);
        m.insert(p("self_attn.q_norm"), tensor(&[hd], 0.05, 1.0)?);
        m.insert(p("self_attn.k_norm"), tensor(&[hd], 0.05, 1.0)?);
        m.insert(p("mlp.gate_proj"), tensor(&[ffn, h], w(h), 0.0)?);
        m.insert(p("mlp.up_proj"), tensor(&[ffn, h], w(h), 0.0)?);
        m.insert(p("mlp.down_proj"), tensor(&[h, ffn], w(ffn), 0.0)?);
    }
    let path = dir.join("model.safetensors");
    candle_core::safetensors::save(&m, &path)?;
    Ok(())
}
