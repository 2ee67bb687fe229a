//! What treespec keeps on disk for a model. Nothing is derived from a model file any more (the
//! CPU kernels read every GGUF format directly), so a bad file is refused before anything is
//! written, a file changed in place is read anew, and fetches into the cache take turns on a lock
//! that leaves no files behind.

mod common;

use candle_core::quantized::gguf_file;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn treespec(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_treespec"))
        .args(args)
        .env("TREESPEC_CACHE", cache)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap()
}

/// Every file under `dir`, relative, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files_under(&p));
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A copy of the GGUF at `src` with its metadata changed by `edit`.
fn rewrite_gguf(src: &Path, dst: &Path, edit: impl FnOnce(&mut Vec<(String, gguf_file::Value)>)) {
    let mut f = std::fs::File::open(src).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    let mut md: Vec<(String, gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    edit(&mut md);
    let names: Vec<String> = content.tensor_infos.keys().cloned().collect();
    let tensors: Vec<(String, candle_core::quantized::QTensor)> = names
        .iter()
        .map(|n| {
            let t = content
                .tensor(&mut f, n, &candle_core::Device::Cpu)
                .unwrap();
            (n.clone(), t)
        })
        .collect();
    let md_refs: Vec<(&str, &gguf_file::Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &candle_core::quantized::QTensor)> =
        tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut out = std::fs::File::create(dst).unwrap();
    gguf_file::write(&mut out, &md_refs, &t_refs).unwrap();
}

#[test]
fn a_bad_gguf_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let good = common::write_tiny_gguf(dir.path(), "llama", 3);
    let unknown = dir.path().join("unknown-arch.gguf");
    rewrite_gguf(&good, &unknown, |md| {
        for (k, v) in md.iter_mut() {
            if k == "general.architecture" {
                *v = gguf_file::Value::String("gpt9".into());
            }
        }
    });
    let no_vocab = dir.path().join("no-vocab.gguf");
    rewrite_gguf(&good, &no_vocab, |md| {
        md.retain(|(k, _)| !k.starts_with("tokenizer.ggml.tokens"))
    });
    for (file, says) in [(&unknown, "gpt9"), (&no_vocab, "token")] {
        let out = treespec(
            &cache,
            &["generate", "-m", file.to_str().unwrap(), "-p", "hi"],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{} was accepted", file.display());
        assert!(err.contains(says), "{}: {err}", file.display());
        assert!(
            files_under(&cache).is_empty(),
            "{} left {:?} in the cache",
            file.display(),
            files_under(&cache)
        );
    }
}

#[test]
fn a_file_changed_in_place_is_read_anew() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let a = common::write_tiny_gguf(dir.path(), "llama", 11);
    let b = common::write_tiny_gguf(dir.path(), "llama", 12);
    assert_eq!(
        std::fs::metadata(&a).unwrap().len(),
        std::fs::metadata(&b).unwrap().len(),
        "the two models must have the same size for this test"
    );
    let model = dir.path().join("model.gguf");
    let run = || {
        let out = treespec(
            &cache,
            &[
                "generate",
                "-m",
                model.to_str().unwrap(),
                "--raw",
                "-p",
                "abcdefgh",
                "--max-tokens",
                "12",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    std::fs::copy(&a, &model).unwrap();
    let from_a = run();
    std::fs::copy(&b, &model).unwrap();
    let from_b = run();
    assert_ne!(
        from_a, from_b,
        "the changed file gave the old file's answer"
    );
    std::fs::copy(&a, &model).unwrap();
    assert_eq!(run(), from_a, "the same file must give the same answer");
    assert!(files_under(&cache).is_empty(), "{:?}", files_under(&cache));
}

#[test]
fn concurrent_fetches_share_one_copy_and_leave_no_lock_files() {
    let Some(smollm2) = common::smollm2_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let models = cache.join("models");
    std::fs::create_dir_all(&models).unwrap();
    // A copy present but not yet verified: each process must verify it or wait for the other.
    let name = smollm2.file_name().unwrap();
    std::fs::copy(&smollm2, models.join(name)).unwrap();
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_treespec"))
            .args(["fetch", "smollm2"])
            .env("TREESPEC_CACHE", &cache)
            .env("HF_HUB_OFFLINE", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (p1, p2) = (spawn(), spawn());
    for p in [p1, p2] {
        let out = p.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(
            printed.trim().ends_with(name.to_str().unwrap()),
            "{printed}"
        );
    }
    let mut marker = name.to_os_string();
    marker.push(".sha256");
    assert_eq!(
        files_under(&cache),
        vec![models.join(name), models.join(marker)],
        "the cache holds exactly the model and its checksum marker"
    );
}
