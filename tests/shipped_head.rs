//! The MTP head shipped for the default target (`heads/`): the file the repository holds is the
//! one `fetch.rs` pins (size and sha256), a head for the default target's shape with its draft
//! vocabulary, and the first use copies it into the model cache, verified, where a second use
//! finds it. (Loading it needs the 1.1 GB target: `BENCHMARKS.md` measures it on the real pair.)

use treespec::fetch::{self, DEFAULT_HEAD};
use treespec::model::mtp_gguf::{self, HeadTarget};

#[test]
fn the_shipped_head_is_a_head_for_the_default_target() {
    let path = fetch::repository_head(&DEFAULT_HEAD);
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(size, DEFAULT_HEAD.size, "{}", path.display());
    fetch::verify(&path, DEFAULT_HEAD.sha256, false).unwrap();
    let header = treespec::model::weights::read_gguf_header(&path).unwrap();
    assert!(mtp_gguf::is_head(&header));
    let target = HeadTarget::recorded(&header).unwrap();
    // Qwen2.5-Coder-1.5B-Instruct's shape.
    assert_eq!(
        (target.hidden, target.layers, target.vocab),
        (1536, 28, 151_936)
    );
    assert_eq!(
        fetch::shipped_head("target").unwrap().file,
        DEFAULT_HEAD.file
    );
    assert!(fetch::shipped_head("drafter").is_none());
    assert!(fetch::is_shipped_head(&path.display().to_string()));
}

#[test]
fn the_first_use_copies_the_head_into_the_cache() {
    let cache = tempfile::tempdir().unwrap();
    // (This test binary's only test that reads the environment.)
    std::env::set_var("TREESPEC_CACHE", cache.path());
    let got = treespec::load::head_for("target", None).unwrap();
    let cached = cache.path().join("models").join(DEFAULT_HEAD.file);
    assert_eq!(got, cached.display().to_string());
    fetch::verify(&cached, DEFAULT_HEAD.sha256, false).unwrap();
    // Found there the second time, without the repository's copy being read again.
    assert_eq!(fetch::ensure_head(&DEFAULT_HEAD).unwrap(), cached);
    // `none`, a file given, and a target with no shipped head.
    assert_eq!(treespec::load::head_for("target", Some("none")), None);
    assert_eq!(
        treespec::load::head_for("target", Some("h.gguf")).as_deref(),
        Some("h.gguf")
    );
    assert_eq!(treespec::load::head_for("smollm2", None), None);
}
