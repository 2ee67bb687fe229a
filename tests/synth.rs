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
        hybrid: None,
    }
}

/// A tiny hybrid: Qwen3.5's layers (three Gated DeltaNet layers to one gated attention layer)
/// and an MTP block.
fn tiny_hybrid() -> Shape {
    Shape {
        name: "tiny-hybrid",
        family: Family::Qwen35,
        layers: 8,
        hidden: 256,
        ffn: 512,
        heads: 2,
        kv_heads: 1,
        head_dim: 128,
        vocab: 300,
        tied: false,
        hybrid: Some(synth::Hybrid {
            k_heads: 2,
            v_heads: 4,
            head: 32,
            conv: 4,
            interval: 4,
            rotary: 32,
            mtp: 1,
        }),
    }
}

#[test]
fn a_synthetic_model_loads_and_decodes_finite_logits() {
    let dir = tempfile::tempdir().unwrap();
    for (family, tied) in [(Family::Qwen2, true), (Family::Qwen3, false)] {
        let path = dir.path().join(format!("{family:?}.gguf"));
        synth::write(&tiny(family, tied), &path, 7, None).unwrap();
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

/// A hybrid file reads as llama.cpp's converter writes one (`qwen35`, the MTP block counted in
/// `block_count`), decodes finite logits, and its MTP head loads and drafts through greedy `mtp`
/// with `ar`'s tokens.
#[test]
fn a_synthetic_hybrid_loads_decodes_and_drafts_with_its_head() {
    use treespec::engine::{Engine, Mode, Settings};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hybrid.gguf");
    synth::write(&tiny_hybrid(), &path, 5, None).unwrap();
    let mut f = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    assert_eq!(content.metadata["qwen35.block_count"].to_u32().unwrap(), 9);
    assert!(content
        .tensor_infos
        .contains_key("blk.8.nextn.eh_proj.weight"));
    assert!(content.tensor_infos.contains_key("blk.0.ssm_conv1d.weight"));
    assert!(content
        .tensor_infos
        .contains_key("blk.3.attn_q_norm.weight"));
    let cfg = treespec::model::config::ModelConfig::from_gguf(&content).unwrap();
    let l = cfg.linear.as_ref().unwrap();
    assert_eq!(l.layers, [true, true, true, false, true, true, true, false]);
    assert_eq!((l.k_heads, l.v_heads, l.k_dim, l.v_dim), (2, 4, 32, 32));
    assert_eq!((cfg.rotary_dim, cfg.mtp_heads, cfg.n_layers), (32, 1, 8));
    let spec = path.to_str().unwrap();
    let mut m = treespec::model::load(spec, &LoadOptions::default()).unwrap();
    let ids = m.tokenizer.encode("def f(x):", false).unwrap();
    let out = m.decoder.forward(&Batch::causal(&ids, 0)).unwrap();
    let rows = out.logits_rows().unwrap();
    assert!(rows.iter().flatten().all(|v| v.is_finite()));
    let ar_settings = Settings {
        mode: Mode::Ar,
        ..Settings::default()
    };
    let m = treespec::model::load(spec, &LoadOptions::default()).unwrap();
    let mut e = Engine::new(m.decoder, None, Default::default(), ar_settings, 0).unwrap();
    let ar = e.generate(&ids, 12, |_| true).unwrap().tokens;
    let m = treespec::model::load(spec, &LoadOptions::default()).unwrap();
    let head = treespec::load::load_drafter("mtp", &m, &LoadOptions::default()).unwrap();
    let s = Settings {
        mode: Mode::Mtp,
        ..Settings::default()
    };
    let mut e = Engine::new(m.decoder, Some(head), Default::default(), s, 0).unwrap();
    let out = e.generate(&ids, 12, |_| true).unwrap();
    assert_eq!(out.tokens, ar);
}

/// `bench` on a hybrid with its own MTP block and no `--drafter` drafts `mtp` with that block, as
/// the chat does: it fetches no drafter (the default one is for another target).
#[test]
fn bench_drafts_with_a_targets_own_head_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hybrid.gguf");
    synth::write(&tiny_hybrid(), &path, 5, None).unwrap();
    let prompts = dir.path().join("p.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"def f(x):\"}\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_treespec"))
        .args(["bench", "--target", path.to_str().unwrap(), "--prompts"])
        .arg(&prompts)
        .args([
            "--modes",
            "ar,mtp:2",
            "--max-tokens",
            "8",
            "--require-identical",
        ])
        .env("TREESPEC_CACHE", dir.path().join("cache"))
        .env("TREESPEC_CONFIG", dir.path().join("config"))
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("MTP head"), "{stdout}");
    assert!(
        format!("{stdout}{stderr}").contains("every mode emitted exactly the ar tokens"),
        "{stdout}{stderr}"
    );
}

#[test]
fn formats_follow_q4_k_m() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    synth::write(&tiny(Family::Qwen3, false), &path, 1, None).unwrap();
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
    synth::write(&tiny(Family::Qwen2, true), &tied, 1, None).unwrap();
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

#[test]
fn a_synthetic_dflash_drafter_loads_and_a_round_is_timed_piece_by_piece() {
    let dir = tempfile::tempdir().unwrap();
    let shape = tiny(Family::Qwen3, false);
    let target_path = dir.path().join("t.gguf");
    synth::write(&shape, &target_path, 3, None).unwrap();
    let drafter_dir = dir.path().join("dflash");
    synth::write_dflash(&shape, &drafter_dir, 3).unwrap();
    let opts = LoadOptions {
        context: 256,
        ..LoadOptions::default()
    };
    let mut t = treespec::model::load(target_path.to_str().unwrap(), &opts).unwrap();
    let found = treespec::load::dflash_dir(drafter_dir.to_str().unwrap()).unwrap();
    assert_eq!(found.as_deref(), Some(drafter_dir.as_path()));
    let mut d = treespec::load::load_dflash(&drafter_dir, &t, &opts).unwrap();
    let cfg = d.config().clone();
    assert_eq!(cfg.model.n_layers, synth::DFLASH_LAYERS);
    assert_eq!(cfg.block_size, synth::DFLASH_BLOCK);
    assert_eq!(cfg.target_layer_ids.len(), synth::DFLASH_LAYERS);
    assert!(cfg.target_layer_ids.iter().all(|&l| l < shape.layers));
    let rows = treespec::bench::measure_dflash_costs(&mut t.decoder, &mut d, 16, &[1, 8], (1.0, 1))
        .unwrap();
    // The drafter pass, then five rows for the tree of 8 (a tree of one row has no nodes).
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert_eq!(rows[0].rows, synth::DFLASH_BLOCK);
    assert!(rows.iter().all(|r| r.ms.is_finite() && r.ms >= 0.0));
    let sum: f64 = rows[..5].iter().map(|r| r.ms).sum();
    assert!((rows[5].ms - sum).abs() < 1e-9, "{rows:?}");
    // A deep tree: its accepted path holds ROUND_COMMITS nodes or the whole depth.
    assert!(rows[4].what.contains("-node path"), "{}", rows[4].what);
}

/// `--tokenizer-from`: the written file carries the other file's tokenizer keys as they are, and
/// its embedding and LM head take that vocabulary's size (so that llama.cpp, which needs both to
/// agree, loads it); a file with no tokenizer is refused with its name.
#[test]
fn a_real_tokenizer_is_copied_and_sets_the_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    let donor = dir.path().join("donor.gguf");
    synth::write(&tiny(Family::Qwen2, false), &donor, 1, None).unwrap();
    let tok = synth::tokenizer_from(&donor).unwrap();
    assert_eq!(tok.vocab, 300);
    let shape = Shape {
        vocab: 1000,
        ..tiny(Family::Qwen3, false)
    };
    let out = dir.path().join("out.gguf");
    synth::write(&shape, &out, 2, Some(&tok)).unwrap();
    let read = |p: &std::path::Path| {
        let mut f = std::fs::File::open(p).unwrap();
        gguf_file::Content::read(&mut f).unwrap()
    };
    let (a, b) = (read(&donor), read(&out));
    for (k, v) in a
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
    {
        assert_eq!(format!("{v:?}"), format!("{:?}", b.metadata[k]), "{k}");
    }
    for t in ["token_embd.weight", "output.weight"] {
        assert_eq!(b.tensor_infos[t].shape.dims()[0], 300, "{t}");
    }
    let spec = out.to_str().unwrap();
    let m = treespec::model::load(spec, &LoadOptions::default()).unwrap();
    assert_eq!(m.decoder.config().vocab_size, 300);
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"not a gguf").unwrap();
    let err = synth::tokenizer_from(&bad).err().unwrap().to_string();
    assert!(err.contains("bad.gguf"), "{err}");
}
