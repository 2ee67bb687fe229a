//! MTP heads fed several target layers, fused (EAGLE-3's input, `model::mtp::fusion`): the
//! training forward computes what the runtime head computes from the saved file; a fused head
//! started from one that reads the last layer is that head; a run trains one that resumes,
//! exports, loads as a drafter and drafts exactly `ar`'s tokens; bad layer lists are refused in
//! one line.

mod common;

use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use treespec::model::config::{Family, ModelConfig};
use treespec::model::decoder::{rope_tables, Batch, Decoder};
use treespec::model::mtp::{MtpHead, MtpLayout};
use treespec::model::weights::{gguf_layer_name, WeightStore};
use treespec::train::head::TrainableHead;

/// A tiny target of four layers (so that a fused list can skip one).
fn four_layers(seed: u64) -> Decoder {
    let mut cfg = common::tiny_config(Family::Qwen2, 61);
    cfg.n_layers = 4;
    let w = common::random_weights(&cfg, seed);
    let mut store = WeightStore::from_tensors(w, &Device::Cpu);
    Decoder::load(&mut store, cfg, 64).unwrap()
}

/// `head` written as the trainer saves it and loaded back as the runtime's head.
fn runtime_of(head: &TrainableHead, cfg: &ModelConfig, dir: &std::path::Path) -> MtpHead {
    let file = dir.join(format!("head-{}.safetensors", rand_name()));
    candle_core::safetensors::save(&head.tensors().unwrap(), &file).unwrap();
    let mut store = WeightStore::safetensors(&[file], &Device::Cpu).unwrap();
    MtpHead::load(&mut store, cfg, MtpLayout::MiMo, 0, 64).unwrap()
}

fn rand_name() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// The target's outputs of `layers` over `seq`, side by side `[t, layers * hidden]`.
fn features(t: &mut Decoder, seq: &[u32], layers: Vec<usize>) -> Tensor {
    t.reset();
    let out = t
        .forward(&Batch::causal(seq, 0).with_hidden_layers(layers))
        .unwrap();
    t.reset();
    Tensor::cat(&out.hidden, 1).unwrap()
}

/// The runtime head's first pass over `seq`'s first `n` positions from the target's rows `x`
/// (as the drafter collects them): its outputs `o`.
fn first_pass(head: &mut MtpHead, t: &Decoder, x: &Tensor, seq: &[u32], n: usize) -> Tensor {
    head.truncate(0);
    let g = head.target_hidden(t, &x.narrow(0, 0, n).unwrap()).unwrap();
    head.forward(t, &g, &seq[1..n + 1]).unwrap()
}

/// The parameters of `head` by GGUF-style stem, as `TrainableHead::set_from` takes them.
fn stems(head: &TrainableHead) -> Vec<(String, Tensor)> {
    head.tensors()
        .unwrap()
        .into_iter()
        .map(|(name, t)| {
            let gguf = gguf_layer_name(&name).unwrap();
            (gguf["mtp.0.".len()..].to_string(), t)
        })
        .collect()
}

#[test]
fn the_fused_training_forward_is_the_runtime_head() {
    let mut t = four_layers(3);
    let cfg = t.config().clone();
    let layers = vec![0, 2, 3];
    let mut head = TrainableHead::new(&cfg, &Device::Cpu, 7, None)
        .unwrap()
        .with_feature_layers(layers.clone())
        .unwrap();
    assert_eq!(head.feature_layers(), layers);
    // A projection that mixes every layer (not the start's selection of the last).
    let h = cfg.hidden;
    let mixed = Tensor::randn(0f32, 0.2, (h, 3 * h), &Device::Cpu).unwrap();
    let name = "model.mtp_layers.0.feature_proj.weight";
    head.vars_mut().set_one(name, mixed).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut runtime = runtime_of(&head, &cfg, dir.path());
    assert_eq!(runtime.feature_layers(), layers);

    let seq: Vec<u32> = (0..12).map(|i| (i * 7 + 3) % 61).collect();
    let x = features(&mut t, &seq, layers);
    let embeds = t.embed(&seq).unwrap();
    let pad = Tensor::zeros((3, h), DType::F32, &Device::Cpu).unwrap();
    let embeds = Tensor::cat(&[&embeds, &pad], 0).unwrap();
    let (cos, sin) = rope_tables(&cfg, 32, None, &Device::Cpu).unwrap();
    let trained = head
        .forward(
            &x.unsqueeze(0).unwrap(),
            &embeds.unsqueeze(0).unwrap(),
            &cos,
            &sin,
            3,
        )
        .unwrap();
    let g = runtime.target_hidden(&t, &x).unwrap();
    common::assert_head_is_trained_forward(&mut runtime, &t, &g, &seq, &trained.outputs, "fused");
}

#[test]
fn a_fused_head_started_from_an_unfused_one_is_that_head() {
    let mut t = four_layers(5);
    let cfg = t.config().clone();
    let plain = TrainableHead::new(&cfg, &Device::Cpu, 7, None).unwrap();
    let mut fused = TrainableHead::new(&cfg, &Device::Cpu, 11, None)
        .unwrap()
        .with_feature_layers(vec![1, 3])
        .unwrap();
    fused.set_from(&stems(&plain)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = (
        runtime_of(&plain, &cfg, dir.path()),
        runtime_of(&fused, &cfg, dir.path()),
    );
    let seq: Vec<u32> = (0..10).map(|i| (i * 5 + 1) % 61).collect();
    let (xa, xb) = (
        features(&mut t, &seq, vec![3]),
        features(&mut t, &seq, vec![1, 3]),
    );
    let oa = first_pass(&mut a, &t, &xa, &seq, 9);
    let ob = first_pass(&mut b, &t, &xb, &seq, 9);
    let diff = common::max_abs_diff(&oa, &ob);
    assert!(diff < 1e-4, "{diff}");

    // The other way round is refused: an unfused head does not start from a fused one, nor a
    // head fusing other layers.
    let mut other = TrainableHead::new(&cfg, &Device::Cpu, 7, None).unwrap();
    let e = other.set_from(&stems(&fused)).unwrap_err().to_string();
    assert!(e.contains("fuses target layers [1, 3]"), "{e}");
    let mut other = other.with_feature_layers(vec![0, 3]).unwrap();
    assert!(other.set_from(&stems(&fused)).is_err());
}

#[test]
fn bad_feature_layers_are_refused_in_one_line() {
    let t = four_layers(5);
    let cfg = t.config().clone();
    for bad in [vec![3], vec![2, 1], vec![1, 4], vec![0, 0]] {
        let e = TrainableHead::new(&cfg, &Device::Cpu, 7, None)
            .unwrap()
            .with_feature_layers(bad.clone())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("feature layers") && !e.contains('\n'),
            "{bad:?}: {e}"
        );
    }
    // A file whose layers are past the target's: refused on loading.
    let head = TrainableHead::new(&cfg, &Device::Cpu, 7, None)
        .unwrap()
        .with_feature_layers(vec![1, 3])
        .unwrap();
    let mut tensors: HashMap<String, Tensor> = head.tensors().unwrap();
    tensors.insert(
        "model.mtp_layers.0.feature_layers.weight".into(),
        Tensor::new(&[1f32, 7.0], &Device::Cpu).unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.safetensors");
    candle_core::safetensors::save(&tensors, &file).unwrap();
    let mut store = WeightStore::safetensors(&[file], &Device::Cpu).unwrap();
    let e = MtpHead::load(&mut store, &cfg, MtpLayout::MiMo, 0, 64)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("fused features") && e.contains("layers 0 to 3"),
        "{e}"
    );
}

/// A whole run with `--feature-layers eagle3` on a tiny GGUF target, started from an exported
/// head that reads the last layer: it starts where that head was, trains, records its layers,
/// refuses to resume without them, and its exported Q8_0 file drafts exactly `ar`'s tokens.
#[test]
fn a_fused_run_starts_from_a_head_trains_and_drafts() {
    use treespec::engine::Mode;
    use treespec::model::mtp_gguf;
    use treespec::train::run::run;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::tiny_train_run(dir.path(), 4);
    let (gguf, plain_out) = (std::path::PathBuf::from(&cfg.target), cfg.out.clone());
    let plain = run(&cfg).unwrap();
    assert_eq!(plain.feature_layers, vec![1]);
    let m = treespec::load::load_model(&gguf.display().to_string(), &cfg.load).unwrap();
    let target = mtp_gguf::HeadTarget::of(&m.name, m.decoder.config());
    let plain_gguf = dir.path().join("plain.gguf");
    let f32 = candle_core::quantized::GgmlDType::F32;
    mtp_gguf::export(&plain_out, &plain_gguf, f32, &target, "test").unwrap();

    // In a folder not made yet: the run makes it.
    cfg.out = dir.path().join("fused").join("head.safetensors");
    cfg.feature_layers = Some("eagle3".into());
    cfg.init = Some(plain_gguf);
    cfg.steps = 0;
    let started = run(&cfg).unwrap();
    assert_eq!(started.feature_layers, vec![0, 1]);
    assert!(
        (started.held_out_loss - plain.held_out_loss).abs() < 1e-4,
        "{} against {}",
        started.held_out_loss,
        plain.held_out_loss
    );
    cfg.steps = 4;
    let trained = run(&cfg).unwrap();
    assert_eq!(
        (trained.step, trained.feature_layers.clone()),
        (4, vec![0, 1])
    );
    let mut unfused = cfg.clone();
    unfused.feature_layers = None;
    unfused.steps = 6;
    let e = run(&unfused)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("reads target layers [0, 1]; resume it with --feature-layers 0,1"),
        "{e}"
    );
    let mut typo = cfg.clone();
    typo.out = dir.path().join("typo").join("head.safetensors");
    typo.feature_layers = Some("0,9".into());
    let e = run(&typo).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("the target has layers 0 to 1"), "{e}");
    assert!(
        !dir.path().join("typo/head.safetensors.data.json").exists(),
        "refused before the target answers anything"
    );

    let fused_gguf = dir.path().join("fused.gguf");
    let q8 = candle_core::quantized::GgmlDType::Q8_0;
    mtp_gguf::export(&cfg.out, &fused_gguf, q8, &target, "test").unwrap();
    common::head_drafts_as_ar(&gguf, &fused_gguf, "MTP head", &[Mode::Mtp, Mode::Tree]);
    let cfg = treespec::model::LoadOptions::default();
    let m = treespec::load::load_model(&gguf.display().to_string(), &cfg).unwrap();
    let head = treespec::model::mtp_gguf::load(
        &fused_gguf,
        read_header(&fused_gguf),
        &m.name,
        m.decoder.config(),
        &cfg,
        64,
    )
    .unwrap();
    let drafter = treespec::draft::mtp::MtpDrafter::new(head, m.decoder.config(), "head");
    use treespec::draft::Drafter;
    assert_eq!(drafter.name(), "head, reading target layers [0, 1]");
}

fn read_header(path: &std::path::Path) -> candle_core::quantized::gguf_file::Content {
    let mut f = std::fs::File::open(path).unwrap();
    candle_core::quantized::gguf_file::Content::read(&mut f).unwrap()
}
