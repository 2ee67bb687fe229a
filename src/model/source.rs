//! Where a model's files are: a local GGUF file, a local checkpoint directory, or a model hub id
//! (`org/name` or `org/name:file`) resolved through `hf-hub` and its cache.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// A model on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFiles {
    /// One GGUF file (weights, tokenizer and template inside).
    Gguf(PathBuf),
    /// A Hugging Face checkpoint directory: config.json, *.safetensors, tokenizer.json.
    Checkpoint(PathBuf),
}

impl ModelFiles {
    /// The file or directory.
    pub fn path(&self) -> &Path {
        match self {
            ModelFiles::Gguf(p) | ModelFiles::Checkpoint(p) => p,
        }
    }

    /// A short display name: the file or directory name.
    pub fn display_name(&self) -> String {
        let p = self.path();
        let name = p
            .file_name()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_else(|| p.display().to_string());
        name.trim_end_matches(".gguf").to_string()
    }
}

/// True when the environment asks for no network (`HF_HUB_OFFLINE=1`).
pub fn hub_offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .map(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
        .unwrap_or(false)
}

/// Parse `org/name` or `org/name:file` as a hub id.
pub fn parse_hub_id(spec: &str) -> Option<(String, Option<String>)> {
    let (repo, file) = match spec.split_once(':') {
        Some((r, f)) if !f.is_empty() => (r, Some(f.to_string())),
        Some(_) => return None,
        None => (spec, None),
    };
    let mut parts = repo.split('/');
    let (org, name) = (parts.next()?, parts.next()?);
    if parts.next().is_some() || org.is_empty() || name.is_empty() {
        return None;
    }
    let ok = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    if !ok(org) || !ok(name) || org.starts_with('.') {
        return None;
    }
    Some((repo.to_string(), file))
}

/// Resolve a `--model` argument to files on disk.
pub fn resolve(spec: &str) -> Result<ModelFiles> {
    let path = Path::new(spec);
    if path.exists() {
        return local(path);
    }
    let explicit_path = spec.starts_with('/')
        || spec.starts_with('.')
        || spec.starts_with('~')
        || spec.contains('\\');
    if !explicit_path {
        if let Some((repo, file)) = parse_hub_id(spec) {
            // `dir/model.gguf` that does not exist is a missing file, not a repository.
            if file.is_some() || !spec.ends_with(".gguf") {
                return from_hub(&repo, file.as_deref());
            }
        }
    }
    Err(Error::NotFound(path.to_path_buf()))
}

fn local(path: &Path) -> Result<ModelFiles> {
    if path.is_file() {
        return Ok(ModelFiles::Gguf(path.to_path_buf()));
    }
    if path.join("config.json").is_file() {
        return Ok(ModelFiles::Checkpoint(path.to_path_buf()));
    }
    let ggufs: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    match ggufs.as_slice() {
        [one] => Ok(ModelFiles::Gguf(one.clone())),
        [] => Err(Error::BadCheckpoint {
            path: path.to_path_buf(),
            reason: "the directory holds neither config.json nor a .gguf file".into(),
        }),
        _ => Err(Error::BadCheckpoint {
            path: path.to_path_buf(),
            reason: "the directory holds several .gguf files; name one".into(),
        }),
    }
}

/// Fetch (or find in the cache) one file of a hub repository.
pub fn hub_file(repo: &str, file: &str) -> Result<PathBuf> {
    let cache = hf_hub::Cache::from_env();
    if let Some(p) = cache.model(repo.to_string()).get(file) {
        return Ok(p);
    }
    if hub_offline() {
        return Err(Error::Hub(format!(
            "`{repo}` file `{file}` is not in the local cache ({}) and HF_HUB_OFFLINE is set",
            cache.path().display()
        )));
    }
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_progress(true)
        .with_retries(0)
        .build()
        .map_err(|e| Error::Hub(e.to_string()))?;
    api.model(repo.to_string()).get(file).map_err(|e| {
        Error::Hub(format!(
            "cannot fetch `{file}` of `{repo}`: {e} (not in the local cache at {})",
            cache.path().display()
        ))
    })
}

fn from_hub(repo: &str, file: Option<&str>) -> Result<ModelFiles> {
    if let Some(file) = file {
        let p = hub_file(repo, file)?;
        return if file.ends_with(".gguf") {
            Ok(ModelFiles::Gguf(p))
        } else {
            Ok(ModelFiles::Checkpoint(
                p.parent().map(Path::to_path_buf).unwrap_or_default(),
            ))
        };
    }
    // A checkpoint repository: config, tokenizer and weights (one file or an index of shards).
    let config = hub_file(repo, "config.json").map_err(|e| match e {
        Error::Hub(m) => Error::Hub(format!(
            "{m}; for a GGUF repository name the file: {repo}:FILE.gguf"
        )),
        other => other,
    })?;
    let dir = config.parent().map(Path::to_path_buf).unwrap_or_default();
    // Drafters such as DFlash use the target's tokenizer and ship none.
    for optional in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        let _ = hub_file(repo, optional);
    }
    match hub_file(repo, "model.safetensors") {
        Ok(_) => {}
        Err(single_err) => {
            let index = hub_file(repo, "model.safetensors.index.json").map_err(|_| single_err)?;
            for shard in shard_names(&index)? {
                hub_file(repo, &shard)?;
            }
        }
    }
    Ok(ModelFiles::Checkpoint(dir))
}

/// The shard file names listed in a `model.safetensors.index.json`.
pub fn shard_names(index: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(index)?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::BadCheckpoint {
        path: index.to_path_buf(),
        reason: e.to_string(),
    })?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| Error::BadCheckpoint {
            path: index.to_path_buf(),
            reason: "no weight_map".into(),
        })?;
    let mut names: Vec<String> = map
        .values()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// The safetensors files of a checkpoint directory.
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        return Ok(shard_names(&index)?
            .into_iter()
            .map(|s| dir.join(s))
            .collect());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::BadCheckpoint {
            path: dir.to_path_buf(),
            reason: "no .safetensors files".into(),
        });
    }
    Ok(files)
}
