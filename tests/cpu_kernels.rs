//! The CPU kernel paths against f32: every path this CPU can run (`TREESPEC_CPU_KERNELS`, or
//! `quant::with_path` in-process) gives logits within a stated tolerance of the same weights
//! dequantised to f32, bit-identical logits to every other path, and SmolLM2's greedy answer
//! "Paris" with its default system prompt (the near-tie that 8-bit activations flipped into a
//! French answer on CPUs without AVX-512); and greedy speculation on K-quant weights, through the
//! batch-invariant attention kernel real models' heads take, equal to `ar` on every path.

mod common;

use candle_core::quantized::GgmlDType;
use std::process::Command;
use treespec::model::decoder::Batch;
use treespec::model::{self, LoadOptions};
use treespec::quant::{self, KernelPath};

/// The paths this CPU runs; each named in the output, so a log shows which were covered.
fn paths() -> Vec<KernelPath> {
    let all: Vec<KernelPath> = KernelPath::ALL.to_vec();
    for p in &all {
        if !p.available() {
            eprintln!("skipping kernel path {}: this CPU cannot run it", p.name());
        }
    }
    all.into_iter().filter(|p| p.available()).collect()
}

/// Logits of every row of `tokens` fed as one block.
fn logits(path: &str, exact: bool, kernel: KernelPath, tokens: &[u32]) -> Vec<Vec<f32>> {
    let opts = LoadOptions {
        exact,
        ..LoadOptions::default()
    };
    let mut m = model::load(path, &opts).unwrap();
    quant::with_path(kernel, || {
        m.decoder
            .forward(&Batch::causal(tokens, 0).all_logits())
            .unwrap()
            .logits_rows()
            .unwrap()
    })
}

fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// Largest logit difference allowed between a quantised path and f32, for logits of magnitude
/// up to ~30: the 16-bit activations move them by about 1e-3 (8-bit ones moved SmolLM2's by 0.7).
const TOLERANCE: f32 = 0.02;

#[test]
fn tiny_models_agree_with_f32_on_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let shapes = [
        (64, 128, GgmlDType::Q8_0),
        (64, 128, GgmlDType::Q4_0),
        (64, 128, GgmlDType::Q4_1),
        (64, 128, GgmlDType::Q5_0),
        (64, 128, GgmlDType::Q5_1),
        (256, 512, GgmlDType::Q4K),
        (256, 512, GgmlDType::Q5K),
        (256, 512, GgmlDType::Q6K),
    ];
    let tokens: Vec<u32> = (0..40).map(|i| (i * 37 + 11) % 256).collect();
    for (hidden, ffn, dtype) in shapes {
        let shape = common::TinyShape {
            hidden,
            ffn,
            dtype,
            nextn: 0,
        };
        let path = common::write_tiny_gguf_shaped(dir.path(), "llama", 5, &[], shape);
        let path = path.to_str().unwrap();
        let reference = logits(path, true, KernelPath::Portable, &tokens);
        let mut first: Option<Vec<Vec<f32>>> = None;
        for kernel in paths() {
            let got = logits(path, false, kernel, &tokens);
            let d = max_abs_diff(&got, &reference);
            eprintln!(
                "{dtype:?} on {}: max |logit - f32| = {d:.2e}",
                kernel.name()
            );
            assert!(
                d <= TOLERANCE,
                "{dtype:?} on {}: logits differ from f32 by {d}",
                kernel.name()
            );
            match &first {
                None => first = Some(got),
                Some(f) => assert_eq!(
                    f,
                    &got,
                    "{dtype:?}: path {} differs from the first path",
                    kernel.name()
                ),
            }
        }
    }
}

#[test]
fn smollm2_agrees_with_f32_on_every_path() {
    let Some(path) = common::smollm2_path() else {
        return;
    };
    let path = path.to_str().unwrap();
    let m = model::load(path, &LoadOptions::default()).unwrap();
    let text = m
        .template
        .render(
            &[treespec::model::chat_template::ChatMessage::new(
                treespec::model::chat_template::Role::User,
                "What is the capital of France?",
            )],
            true,
        )
        .unwrap();
    let tokens = m.tokenizer.encode(&text, false).unwrap();
    drop(m);
    let reference = logits(path, true, KernelPath::Portable, &tokens);
    let mut first: Option<Vec<Vec<f32>>> = None;
    for kernel in paths() {
        let got = logits(path, false, kernel, &tokens);
        let d = max_abs_diff(&got, &reference);
        eprintln!("SmolLM2 on {}: max |logit - f32| = {d:.2e}", kernel.name());
        assert!(d <= TOLERANCE, "SmolLM2 on {}: {d}", kernel.name());
        match &first {
            None => first = Some(got),
            Some(f) => assert_eq!(f, &got, "path {} differs", kernel.name()),
        }
    }
}

#[test]
fn smollm2_answers_paris_on_every_path() {
    let Some(path) = common::smollm2_path() else {
        return;
    };
    for kernel in paths() {
        let out = Command::new(env!("CARGO_BIN_EXE_treespec"))
            .args(["generate", "-m", path.to_str().unwrap()])
            .args(["-p", "What is the capital of France?", "--max-tokens", "12"])
            .env(quant::PATH_ENV, kernel.name())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("Paris"),
            "path {}: the default-prompt answer is {text:?}",
            kernel.name()
        );
    }
}

#[test]
fn an_unknown_kernel_path_is_refused_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::write_tiny_gguf(dir.path(), "llama", 1);
    let out = Command::new(env!("CARGO_BIN_EXE_treespec"))
        .args(["generate", "-m", path.to_str().unwrap(), "-p", "hi"])
        .args(["--max-tokens", "2"])
        .env(quant::PATH_ENV, "avx9000")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("avx9000") && err.contains("portable"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Greedy speculation on K-quant weights through the attention path real models take (heads of
/// 64: the listed, batch-invariant kernel, not the dense mask the tiny fixtures' heads of 16
/// take): `linear`, `tree` and a grown tree emit exactly `ar`'s tokens on every kernel path.
#[test]
fn k_quant_speculation_on_the_listed_attention_path_equals_ar() {
    use treespec::engine::{Mode, Settings};
    use treespec::load::{build_engine, DrafterChoice};
    use treespec::verify::Verification;
    // The same random weights quantised two ways, each drafting for the other: drafts that
    // are mostly right and sometimes not.
    let dir = tempfile::tempdir().unwrap();
    let file = |dtype, name: &str| {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let shape = common::TinyShape {
            hidden: 256,
            ffn: 512,
            dtype,
            nextn: 0,
        };
        let p = common::write_tiny_gguf_shaped(&sub, "qwen2", 6, &[], shape);
        p.display().to_string()
    };
    let (q4k, q6k) = (file(GgmlDType::Q4K, "q4k"), file(GgmlDType::Q6K, "q6k"));
    let prompt: Vec<u32> = (0..9).map(|i| (i * 53 + 7) % 256).collect();
    let settings = |mode, budget, depth, gamma, expand| Settings {
        mode,
        budget,
        depth,
        gamma,
        expand,
        min_chain_prob: 0.0,
        ..Settings::default()
    };
    let modes = [
        settings(Mode::Linear, 1, 1, 4, 0),
        settings(Mode::Tree, 12, 5, 1, 0),
        settings(Mode::Tree, 12, 5, 1, 3),
    ];
    let mut accepted = 0;
    for (target, drafter) in [(&q4k, &q6k), (&q6k, &q4k)] {
        let opts = LoadOptions {
            context: 256,
            ..LoadOptions::default()
        };
        for kernel in paths() {
            quant::with_path(kernel, || {
                let (mut e, _) = build_engine(
                    target,
                    DrafterChoice::Named(drafter),
                    None,
                    settings(Mode::Ar, 1, 1, 1, 0),
                    0,
                    &opts,
                )
                .unwrap();
                let cfg = e.target().config().clone();
                assert!(treespec::gpu::attention::supports(
                    cfg.n_heads,
                    cfg.n_kv_heads,
                    cfg.head_dim,
                    &candle_core::Device::Cpu
                ));
                let ar = e.generate(&prompt, 40, |_| true).unwrap().tokens;
                for s in modes {
                    e.set_settings(s).unwrap();
                    e.reset();
                    let got = e.generate(&prompt, 40, |_| true).unwrap();
                    let label = format!("{target} on {}, {s:?}", kernel.name());
                    assert_eq!(got.tokens, ar, "{label}");
                    accepted += got.stats.accepted;
                }
                // The control: a verifier that takes the drafter's first child unasked is caught.
                e.set_settings(Settings {
                    verification: Verification::LossyUncheckedFirstChild,
                    ..modes[1]
                })
                .unwrap();
                e.reset();
                let lossy = e.generate(&prompt, 40, |_| true).unwrap().tokens;
                assert_ne!(lossy, ar, "the lossy control went unnoticed");
            });
        }
    }
    eprintln!("drafted tokens accepted: {accepted}");
    assert!(
        accepted > 0,
        "no draft was ever accepted: the test shows nothing"
    );
}
