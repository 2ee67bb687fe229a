//! The documentation keeps up with the code: every `TREESPEC_*` switch the code, the tests and CI
//! read is listed in `docs/switches.md` (and nothing else is), and the README stays short.

use std::collections::BTreeSet;
use std::path::Path;

/// Every `TREESPEC_` name in the files under `dir` with one of `exts`.
fn names_in(dir: &Path, exts: &[&str], found: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            names_in(&p, exts, found);
        } else if p.extension().is_some_and(|x| exts.iter().any(|e| x == *e))
            && !p.ends_with("tests/docs.rs")
        {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            found.extend(switch_names(&text));
        }
    }
}

/// The `TREESPEC_[A-Z0-9_]+` names in `text` (a name ending in `_` is a prefix, not a switch).
fn switch_names(text: &str) -> Vec<String> {
    let mut out = vec![];
    let mut rest = text;
    while let Some(i) = rest.find("TREESPEC_") {
        let tail = &rest[i..];
        let len = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..len];
        if !name.ends_with('_') {
            out.push(name.to_string());
        }
        rest = &tail[len.max(1)..];
    }
    out
}

#[test]
fn every_switch_the_code_reads_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut code = BTreeSet::new();
    names_in(&root.join("src"), &["rs"], &mut code);
    names_in(&root.join("kernels"), &["cu", "cuh", "sh"], &mut code);
    names_in(&root.join("tests"), &["rs"], &mut code);
    for file in ["build.rs", ".ci/run"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        code.extend(switch_names(&text));
    }
    assert!(code.len() > 20, "the scan found the switches: {code:?}");
    let doc = std::fs::read_to_string(root.join("docs/switches.md")).expect("docs/switches.md");
    let documented: BTreeSet<String> = switch_names(&doc).into_iter().collect();
    let missing: Vec<&String> = code.difference(&documented).collect();
    assert!(missing.is_empty(), "not in docs/switches.md: {missing:?}");
    let stale: Vec<&String> = documented.difference(&code).collect();
    assert!(
        stale.is_empty(),
        "in docs/switches.md but read nowhere: {stale:?}"
    );
}

#[test]
fn the_scan_sees_names_and_skips_prefixes() {
    let text = "env(\"TREESPEC_MMQ\") TREESPEC_WIDE_ROWS=0, a TREESPEC_ prefix, TREESPEC_X2.";
    assert_eq!(
        switch_names(text),
        ["TREESPEC_MMQ", "TREESPEC_WIDE_ROWS", "TREESPEC_X2"]
    );
}

#[test]
fn the_readme_stays_short_and_names_the_two_setup_commands() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 250,
        "README.md has {lines} lines; move details to docs/"
    );
    assert!(readme.contains("    cargo run --release\n    cargo test\n"));
}
