//! The `treespec` binary end to end on a tiny GGUF model written by the test, and every kind of
//! bad input: one clear line on stderr and a non-zero exit, never a panic.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn treespec(args: &[&str], envs: &[(&str, &str)], home: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_treespec"));
    cmd.args(args)
        .env("TREESPEC_CACHE", home.join("cache"))
        .env("TREESPEC_DATA", home.join("data"))
        .env("TREESPEC_CONFIG", home.join("config"))
        .env("HF_HOME", home.join("hf"))
        .env_remove("HF_HUB_OFFLINE");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("run treespec")
}

/// The run failed with exactly one line on stderr containing `needle`, and did not panic.
/// `treespec generate` of `target` with `drafter` in `mode`, then `extra` arguments.
fn generate_with(home: &Path, target: &Path, drafter: &Path, mode: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "generate",
        "-m",
        target.to_str().unwrap(),
        "--drafter",
        drafter.to_str().unwrap(),
        "--mode",
        mode,
    ];
    args.extend_from_slice(extra);
    treespec(&args, &[], home)
}

fn assert_clean_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr: {err}"
    );
    assert!(!err.contains("panicked"), "panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got: {err}");
    assert!(
        lines[0].to_lowercase().contains(&needle.to_lowercase()),
        "stderr `{}` does not mention `{needle}`",
        lines[0]
    );
}

#[test]
fn generate_runs_on_a_tiny_gguf_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::write_tiny_gguf(dir.path(), "llama", 7);
    let out = treespec(
        &[
            "generate",
            "-m",
            model.to_str().unwrap(),
            "-p",
            "hello",
            "--max-tokens",
            "12",
        ],
        &[],
        dir.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {err}");
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.contains("prompt") && last.contains("prefill") && last.contains("tok/s"),
        "{err}"
    );
}

#[test]
fn seeded_sampling_is_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::write_tiny_gguf(dir.path(), "qwen2", 8);
    let run = |seed: &str| {
        treespec(
            &[
                "generate",
                "-m",
                model.to_str().unwrap(),
                "-p",
                "abc",
                "--max-tokens",
                "24",
                "--temperature",
                "1.0",
                "--seed",
                seed,
            ],
            &[],
            dir.path(),
        )
        .stdout
    };
    assert_eq!(run("1"), run("1"));
    assert_ne!(
        run("1"),
        run("2"),
        "different seeds gave the same 24 random tokens"
    );
}

#[test]
fn missing_model_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = treespec(
        &["generate", "-m", "/nonexistent/model.gguf", "-p", "hi"],
        &[],
        dir.path(),
    );
    assert_clean_error(&out, "not found");
}

/// `mtp` without a head (nor a target's own) says how to give one, before loading anything;
/// `--head` with a file that is not a head says so.
#[test]
fn mtp_without_a_head() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "generate",
        "-m",
        "/nonexistent/model.gguf",
        "--mode",
        "mtp",
        "-p",
        "hi",
    ];
    let out = treespec(&args, &[], dir.path());
    assert_clean_error(&out, "needs an MTP head: --head FILE");
    let model = common::write_tiny_gguf(dir.path(), "llama", 2);
    let m = model.to_str().unwrap();
    let args = [
        "generate", "-m", m, "--head", m, "--mode", "mtp", "-p", "hi",
    ];
    let out = treespec(&args, &[], dir.path());
    assert_clean_error(&out, "not an MTP head");
}

/// `bench --costs --cost-rows` with a block of no rows is refused before anything loads.
#[test]
fn cost_rows_of_zero() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "bench",
        "--costs",
        "--target",
        "/nonexistent/model.gguf",
        "--cost-rows",
        "1,0,4",
    ];
    let out = treespec(&args, &[], dir.path());
    assert_clean_error(&out, "--cost-rows: a verify pass has at least one row");
}

#[test]
fn corrupt_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("junk.gguf");
    std::fs::write(
        &p,
        b"this is not a gguf file at all, just some bytes........",
    )
    .unwrap();
    let out = treespec(
        &["generate", "-m", p.to_str().unwrap(), "-p", "hi"],
        &[],
        dir.path(),
    );
    assert_clean_error(&out, "not a usable GGUF");
}

#[test]
fn truncated_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::write_tiny_gguf(dir.path(), "llama", 9);
    let bytes = std::fs::read(&model).unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let out = treespec(
        &["generate", "-m", cut.to_str().unwrap(), "-p", "hi"],
        &[],
        dir.path(),
    );
    assert_clean_error(&out, "truncated");
    // Cut inside the header, too.
    std::fs::write(&cut, &bytes[..100]).unwrap();
    let out = treespec(
        &["generate", "-m", cut.to_str().unwrap(), "-p", "hi"],
        &[],
        dir.path(),
    );
    assert_clean_error(&out, "not a usable GGUF");
}

#[test]
fn unknown_architecture() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::write_tiny_gguf(dir.path(), "mamba", 10);
    let out = treespec(
        &["generate", "-m", model.to_str().unwrap(), "-p", "hi"],
        &[],
        dir.path(),
    );
    assert_clean_error(&out, "unsupported architecture `mamba`");
}

#[test]
fn hub_id_offline_and_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let out = treespec(
        &[
            "generate",
            "-m",
            "SomeOrg/some-model-GGUF:model-q4.gguf",
            "-p",
            "hi",
        ],
        &[("HF_HUB_OFFLINE", "1")],
        dir.path(),
    );
    assert_clean_error(&out, "not in the local cache");
}

#[test]
fn hub_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let out = treespec(
        &[
            "generate",
            "-m",
            "SomeOrg/some-model-GGUF:model-q4.gguf",
            "-p",
            "hi",
        ],
        &[("HF_ENDPOINT", "http://127.0.0.1:9")],
        dir.path(),
    );
    assert_clean_error(&out, "model hub");
}

#[test]
fn prompt_longer_than_context() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::write_tiny_gguf(dir.path(), "llama", 11);
    let long = "word ".repeat(100);
    let out = treespec(
        &[
            "generate",
            "-m",
            model.to_str().unwrap(),
            "-p",
            &long,
            "--context",
            "64",
        ],
        &[],
        dir.path(),
    );
    assert_clean_error(&out, "context holds 64");
}

#[test]
fn bad_device_and_bad_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::write_tiny_gguf(dir.path(), "llama", 12);
    let m = model.to_str().unwrap();
    let out = treespec(
        &["generate", "-m", m, "-p", "hi", "--device", "tpu"],
        &[],
        dir.path(),
    );
    assert_clean_error(&out, "not a device");
    if !cfg!(feature = "cuda") {
        let out = treespec(
            &["generate", "-m", m, "-p", "hi", "--device", "cuda:0"],
            &[],
            dir.path(),
        );
        assert_clean_error(&out, "no CUDA support");
    }
    let out = treespec(
        &["generate", "-m", m, "-p", "hi", "--top-p", "0"],
        &[],
        dir.path(),
    );
    assert_clean_error(&out, "top-p");
}

#[test]
fn checksum_mismatch_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.bin");
    std::fs::write(&p, b"abc").unwrap();
    let good = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    treespec::fetch::verify(&p, good, false).unwrap();
    let err = treespec::fetch::verify(&p, &"0".repeat(64), false).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("checksum mismatch") && msg.contains(good),
        "{msg}"
    );
}

#[test]
fn fetch_rejects_unknown_names() {
    let dir = tempfile::tempdir().unwrap();
    let out = treespec(&["fetch", "llama-70b"], &[], dir.path());
    assert_clean_error(&out, "unknown model");
}

#[test]
fn every_mode_gives_the_same_greedy_text_with_exact_weights() {
    let dir = tempfile::tempdir().unwrap();
    let target = common::write_tiny_gguf(dir.path(), "llama", 21);
    let drafter = common::write_tiny_gguf(dir.path(), "llama", 22);
    let run = |mode: &str| {
        let out = generate_with(
            dir.path(),
            &target,
            &drafter,
            mode,
            &["-p", "abc", "--max-tokens", "24", "--exact"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let ar = run("ar");
    assert!(!ar.is_empty());
    assert_eq!(run("linear"), ar);
    assert_eq!(run("tree"), ar);
}

#[test]
fn a_drafter_with_another_vocabulary_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = common::write_tiny_gguf(dir.path(), "llama", 23);
    let other = common::write_tiny_gguf_vocab(dir.path(), "llama", 24, &["<extra>"]);
    let tree_with =
        |drafter: &Path| generate_with(dir.path(), &target, drafter, "tree", &["-p", "hi"]);
    assert_clean_error(&tree_with(&other), "does not share the target");
    // A DFlash drafter trained for another target: its vocabulary (512) is not this one's.
    let dflash = dir.path().join("dflash");
    std::fs::create_dir_all(&dflash).unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/dflash");
    std::fs::copy(
        golden.join("drafter-config.json"),
        dflash.join("config.json"),
    )
    .unwrap();
    std::fs::copy(
        golden.join("drafter.safetensors"),
        dflash.join("model.safetensors"),
    )
    .unwrap();
    assert_clean_error(
        &tree_with(&dflash),
        "DFlash drafter dflash: its vocabulary has 512 tokens",
    );
}

/// `export-head` writes a trained head as a Q8_0 GGUF file with its training record, which
/// `generate --drafter` drafts with; a format the head's rows do not fit, or an unknown one, is
/// one clear line.
#[test]
fn an_exported_head_drafts_for_generate() {
    let dir = tempfile::tempdir().unwrap();
    let target = common::write_tiny_gguf(dir.path(), "llama", 25);
    let spec = target.to_str().unwrap();
    let t = treespec::load::load_model(spec, &treespec::model::LoadOptions::default()).unwrap();
    let head = treespec::train::head::TrainableHead::new(
        t.decoder.config(),
        &candle_core::Device::Cpu,
        3,
        None,
    )
    .unwrap();
    let st = dir.path().join("head.safetensors");
    head.vars().save(&st).unwrap();
    std::fs::write(dir.path().join("head.safetensors.json"), "{\"step\": 7}").unwrap();
    let gguf = dir.path().join("head.gguf");
    let export = |format: &str| {
        let (st, gguf) = (st.to_str().unwrap(), gguf.to_str().unwrap());
        let args = ["export-head", "--head", st, "--out", gguf, "-m", spec];
        treespec(&[&args[..], &["--type", format]].concat(), &[], dir.path())
    };
    let out = export("Q8_0");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("13 tensors") && said.contains(" MB"),
        "{said}"
    );
    let header = treespec::model::weights::read_gguf_header(&gguf).unwrap();
    let source = &header.metadata[treespec::model::mtp_gguf::KEY_SOURCE];
    assert_eq!(source.to_string().unwrap(), "{\"step\": 7}");
    let out = generate_with(dir.path(), &target, &gguf, "mtp", &["-p", "abc"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_clean_error(&export("q4_k"), "not a multiple of q4_k's block of 256");
    assert_clean_error(&export("q9"), "unknown weight format `q9`");
}

#[test]
fn selftest_runs_the_kernel_checks() {
    // On the CPU the kernels are their references; the command must still run every check.
    let home = tempfile::tempdir().unwrap();
    let out = treespec(&["selftest", "--device", "cpu"], &[], home.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("top-k [9 x 151936] k=8: ok"), "{text}");
    assert!(
        text.contains("canary: candle's quantised product"),
        "{text}"
    );
    assert!(text.contains("every kernel matches"), "{text}");
}

/// `bench --json` records, for `auto` alone, what each step ran and cost: one entry a step, the
/// tokens adding up to the answer's.
/// Run `bench` on a prompt file of `lines` (JSON lines) with `args` besides, and read the JSON
/// report it writes.
fn bench_report(dir: &std::path::Path, lines: &str, args: &[&str]) -> serde_json::Value {
    let json = dir.join("bench.json");
    let prompts = dir.join("mixed.jsonl");
    std::fs::write(&prompts, lines).unwrap();
    let mut all = vec![
        "bench",
        "--prompts",
        prompts.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let out = treespec(&all, &[], dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

/// `bench --by-category` reports each category of a prompt file apart.
#[test]
fn bench_by_category_reports_each_category() {
    let dir = tempfile::tempdir().unwrap();
    let target = common::write_tiny_gguf(dir.path(), "llama", 33);
    let report = bench_report(
        dir.path(),
        "{\"id\": \"a\", \"category\": \"writing\", \"prompt\": \"abc\"}\n\
         {\"id\": \"b\", \"category\": \"maths\", \"prompt\": \"hi\"}\n\
         {\"id\": \"c\", \"category\": \"writing\", \"prompt\": \"yo\"}\n",
        &[
            "--target",
            target.to_str().unwrap(),
            "--modes",
            "ar",
            "--max-tokens",
            "4",
            "--by-category",
        ],
    );
    let sets: Vec<(String, u64)> = report["sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["prompts"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        sets,
        [
            ("mixed/writing".to_string(), 2),
            ("mixed/maths".to_string(), 1)
        ]
    );
}

#[test]
fn bench_json_traces_auto_steps() {
    let dir = tempfile::tempdir().unwrap();
    let target = common::write_tiny_gguf(dir.path(), "llama", 31);
    let drafter = common::write_tiny_gguf(dir.path(), "llama", 32);
    let report = bench_report(
        dir.path(),
        "{\"id\": \"a\", \"prompt\": \"abc\"}\n{\"id\": \"b\", \"prompt\": \"hi\"}\n",
        &[
            "--target",
            target.to_str().unwrap(),
            "--drafter",
            drafter.to_str().unwrap(),
            "--modes",
            "ar,auto",
            "--max-tokens",
            "24",
        ],
    );
    let mut traced = 0;
    for set in report["sets"].as_array().unwrap() {
        for mode in set["modes"].as_array().unwrap() {
            for p in mode["prompts"].as_array().unwrap() {
                if mode["mode"] != "auto" {
                    assert!(p.get("trace").is_none(), "{p}");
                    continue;
                }
                let trace = p["trace"].as_array().unwrap();
                assert_eq!(trace.len() as u64, p["steps"].as_u64().unwrap(), "{p}");
                let tokens: u64 = trace.iter().map(|s| s["tokens"].as_u64().unwrap()).sum();
                assert_eq!(tokens, p["tokens"].as_u64().unwrap(), "{p}");
                assert!(trace
                    .iter()
                    .all(|s| ["ar", "linear", "tree"].contains(&s["mode"].as_str().unwrap())));
                traced += 1;
            }
        }
    }
    assert!(traced > 0, "no auto answer in {report}");
}

/// With no drafter named, a target other than the default one drafts with a model of its own
/// vocabulary already in the cache (the smallest that fits, never downloading one), else the
/// run says in one line why there is none; `ar` needs none and loads none.
#[test]
fn an_unnamed_drafter_comes_from_the_cache_or_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let wide = common::TinyShape {
        hidden: 256,
        ffn: 512,
        dtype: candle_core::quantized::GgmlDType::Q8_0,
        nextn: 0,
    };
    let target = common::write_tiny_gguf_shaped(home, "llama", 31, &[], wide);
    let run = |mode: &str| {
        let args = ["generate", "-m", target.to_str().unwrap(), "--mode", mode];
        let extra = ["-p", "hi", "--max-tokens", "12", "--exact"];
        treespec(&[&args[..], &extra[..]].concat(), &[], home)
    };
    // Nothing in the cache: `tree` cannot run, and says why; `ar` runs without a word.
    assert_clean_error(&run("tree"), "no drafter in the cache shares");
    let ar = run("ar");
    assert!(
        ar.status.success(),
        "{}",
        String::from_utf8_lossy(&ar.stderr)
    );
    assert!(!String::from_utf8_lossy(&ar.stderr).contains("drafter"));
    // In the cache: one of another vocabulary, one as large as the target, and the one that fits.
    let models = home.join("cache/models");
    std::fs::create_dir_all(&models).unwrap();
    common::write_tiny_gguf_vocab(&models, "llama", 32, &["<extra>"]);
    common::write_tiny_gguf_shaped(&models, "llama", 33, &[], wide);
    let fits = common::write_tiny_gguf(&models, "llama", 34);
    let tree = run("tree");
    let err = String::from_utf8_lossy(&tree.stderr);
    assert!(tree.status.success(), "{err}");
    let name = fits.file_stem().unwrap().to_str().unwrap();
    assert!(err.contains(&format!("drafting with {name}")), "{err}");
    assert_eq!(
        tree.stdout, ar.stdout,
        "greedy `tree` must emit `ar`'s text"
    );
}
