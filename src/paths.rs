//! Where treespec keeps its files: caches, user data and config (XDG directories by default,
//! overridable with `TREESPEC_CACHE`, `TREESPEC_DATA`, `TREESPEC_CONFIG`).

use std::path::PathBuf;

fn dir(var: &str, base: Option<PathBuf>) -> PathBuf {
    if let Some(p) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    base.unwrap_or_else(std::env::temp_dir).join("treespec")
}

/// The cache directory (downloaded and re-quantised models).
pub fn cache_dir() -> PathBuf {
    dir("TREESPEC_CACHE", dirs::cache_dir())
}

/// Where fetched models live.
pub fn models_dir() -> PathBuf {
    cache_dir().join("models")
}

/// The data directory (transcripts).
pub fn data_dir() -> PathBuf {
    dir("TREESPEC_DATA", dirs::data_dir())
}

/// The config directory (config file, user themes).
pub fn config_dir() -> PathBuf {
    dir("TREESPEC_CONFIG", dirs::config_dir())
}
