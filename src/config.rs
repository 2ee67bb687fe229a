//! The config file: defaults for the chat (`<config dir>/treespec/config.toml`). Every key is
//! optional; command-line flags override it.

use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Defaults read from the config file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Target model (path, hub id or known name).
    pub target: Option<String>,
    /// Drafter model, or "none".
    pub drafter: Option<String>,
    /// MTP head beside the drafter, for `mtp`, or "none".
    pub head: Option<String>,
    /// Starting mode.
    pub mode: Option<String>,
    /// Tree budget.
    pub budget: Option<usize>,
    /// Tree depth.
    pub depth: Option<usize>,
    /// Chain length for linear.
    pub gamma: Option<usize>,
    /// The MTP head's chain length in `mtp` mode.
    pub mtp_k: Option<usize>,
    /// Temperature.
    pub temperature: Option<f32>,
    /// Nucleus mass.
    pub top_p: Option<f32>,
    /// Top-k.
    pub top_k: Option<usize>,
    /// Confidence below which a causal drafter's chain stops.
    pub min_chain_prob: Option<f32>,
    /// Expansion width of a tree the causal drafter grows (0: the DDTree over its chain).
    pub expand: Option<usize>,
    /// Token limit per answer.
    pub max_tokens: Option<usize>,
    /// Theme name.
    pub theme: Option<String>,
    /// Device.
    pub device: Option<String>,
    /// KV cache size.
    pub context: Option<usize>,
    /// Key overrides: action name to keys.
    #[serde(default)]
    pub keys: BTreeMap<String, Vec<String>>,
}

/// The config file's path.
pub fn path() -> PathBuf {
    crate::paths::config_dir().join("config.toml")
}

/// Where user themes live.
pub fn themes_dir() -> PathBuf {
    crate::paths::config_dir().join("themes")
}

impl Config {
    /// Read the config file; a missing file is an empty config, a malformed one an error.
    pub fn load(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text)
                .map_err(|e| Error::Config(format!("{}: {}", path.display(), e.message()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(Error::Io(e)),
        }
    }
}
