//! `treespec synth`: random-weight GGUF models of a real shape load and decode (noise, but
//! finite), with llama.cpp's Q4_K_M choice of formats.

use candle_core::quantized::{gguf_file, GgmlDType};
use treespec::model::config::Family;
use treespec::model::{decoder::Batch, LoadOptions};
use treespec::synth::{self, Shape};

fn tiny(family: Family, tied: bool) -> Shape {
    Shape {
        name: "tiny",
        family,
        layers: 8,
        hidden: 256,
        ffn: 512,
        heads: 2,
        kv_heads: 1,
        head_dim: 128,
        vocab: 300,
        tied,
    }
}

#[test]
fn a_synthetic_model_loads_and_decodes_finite_logits() {
    let dir = tempfile::tempdir().unwrap();
    for (family, tied) in [(Family::Qwen2, true), (Family::Qwen3, false)] {
        let path = dir.path().join(format!("{family:?}.gguf"));
        synth::write(&tiny(family, tied), &path, 7).unwrap();
        let spec = path.to_str().unwrap();
        let mut m = treespec::model::load(spec, &LoadOptions::default()).unwrap();
        let ids = m.tokenizer.encode("def f(x):", false).unwrap();
        assert!(!ids.is_empty());
        let out = m.decoder.forward(&Batch::causal(&ids, 0)).unwrap();
        let rows = out.logits_rows().unwrap();
        assert_eq!(rows.last().map(|r| r.len()), Some(300));
        assert!(rows.iter().flatten().all(|v| v.is_finite()), "{family:?}");
    }
}

#[test]
fn formats_follow_q4_k_m() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    synth::write(&tiny(Family::Qwen3, false), &path, 1).unwrap();
    let mut f = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    let dtype = |name: &str| content.tensor_infos[name].ggml_dtype;
    // 8 layers: layer 0 (first eighth) and 7 (last eighth) get more bits, so does 3 ((3-1)%3 == 2).
    for (layer, wide) in [(0, true), (1, false), (2, false), (3, true), (7, true)] {
        let want = if wide { GgmlDType::Q6K } else { GgmlDType::Q4K };
        assert_eq!(
            dtype(&format!("blk.{layer}.ffn_down.weight")),
            want,
            "layer {layer}"
        );
        assert_eq!(
            dtype(&format!("blk.{layer}.attn_v.weight")),
            want,
            "layer {layer}"
        );
        assert_eq!(dtype(&format!("blk.{layer}.attn_q.weight")), GgmlDType::Q4K);
    }
    assert_eq!(dtype("output.weight"), GgmlDType::Q6K);
    assert_eq!(dtype("token_embd.weight"), GgmlDType::Q4K);
    // A tied embedding is the LM head: the LM head's format.
    let tied = dir.path().join("tied.gguf");
    synth::write(&tiny(Family::Qwen2, true), &tied, 1).unwrap();
    let mut f = std::fs::File::open(&tied).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    assert_eq!(
        content.tensor_infos["token_embd.weight"].ggml_dtype,
        GgmlDType::Q6K
    );
    assert!(!content.tensor_infos.contains_key("output.weight"));
    // Rows of 896 values (the 0.5B) cannot hold K-quant blocks.
    assert_eq!(
        synth::format_of("attn_q", Some((0, 24)), 896),
        GgmlDType::Q5_0
    );
    assert_eq!(
        synth::format_of("attn_v", Some((0, 24)), 896),
        GgmlDType::Q8_0
    );
}

#[test]
fn unknown_shapes_are_refused_with_the_known_ones() {
    let err = synth::shape("llama-70b").unwrap_err().to_string();
    assert!(
        err.contains("qwen3-8b") && err.contains("llama-70b"),
        "{err}"
    );
    assert_eq!(synth::shape("qwen2.5-1.5b").unwrap().layers, 28);
}
