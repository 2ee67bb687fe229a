//! Where treespec keeps its files: caches, user data and config (XDG directories by default,
//! overridable with `TREESPEC_CACHE`, `TREESPEC_DATA`, `TREESPEC_CONFIG`).

use std::fs::File;
use std::path::{Path, PathBuf};

fn dir(var: &str, base: Option<PathBuf>) -> PathBuf {
    if let Some(p) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    base.unwrap_or_else(std::env::temp_dir).join("treespec")
}

/// The cache directory (downloaded models).
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

/// An exclusive lock on a directory, held until dropped: processes that fetch into the same
/// directory take turns. On Unix the directory itself is locked, so no lock file is left behind;
/// elsewhere a `.lock` file inside it is locked (and left, empty, for the next process).
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Create `dir` if needed and wait for its lock.
    pub fn acquire(dir: &Path) -> crate::Result<DirLock> {
        std::fs::create_dir_all(dir).map_err(|e| crate::Error::io(dir, e))?;
        #[cfg(unix)]
        let (file, at) = (File::open(dir), dir.to_path_buf());
        #[cfg(not(unix))]
        let (file, at) = {
            let at = dir.join(".lock");
            (File::create(&at), at)
        };
        let file = file.map_err(|e| crate::Error::io(&at, e))?;
        file.lock().map_err(|e| crate::Error::io(&at, e))?;
        Ok(DirLock { _file: file })
    }
}
