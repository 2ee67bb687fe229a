//! The row count from which a GPU's passes multiply through cuBLAS ([`crate::gpu::wide`]),
//! measured on the GPU for a model's shape by `treespec bench --costs --calibrate` and kept in
//! the cache directory (`wide-crossover.json`), so that each device and model shape gets its own
//! crossover instead of one constant: on the H200 the quantised kernels won up to 16 rows on the
//! 1.5B and cuBLAS from 8 on a Qwen3-8B shape (BENCHMARKS.md, sections 27 and 29).

use crate::arch::config::ModelConfig;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One calibration: the passes timed both ways and the crossover chosen from them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Calibration {
    /// Rows from which the wide products are used (`None`: they lost at every size measured).
    pub from: Option<usize>,
    /// Per verify-pass size: rows, ms through the quantised kernels, ms through cuBLAS.
    pub table: Vec<(usize, f64, f64)>,
}

impl Calibration {
    /// The calibration of a table of `(rows, quantised ms, cuBLAS ms)`: [`choose`]'s crossover.
    pub fn of(table: Vec<(usize, f64, f64)>) -> Self {
        Calibration {
            from: choose(&table),
            table,
        }
    }
}

/// The crossover of a table of `(rows, quantised ms, cuBLAS ms)`: the smallest row count from
/// which cuBLAS is at least as fast at every larger size measured (so one noisy small size does
/// not pull it down); `None` if it loses at the largest.
pub fn choose(table: &[(usize, f64, f64)]) -> Option<usize> {
    let mut sorted = table.to_vec();
    sorted.sort_by_key(|r| r.0);
    let mut from = None;
    for &(n, quantised, wide) in sorted.iter().rev() {
        if wide > quantised {
            break;
        }
        from = Some(n);
    }
    from
}

/// The key a calibration is kept under: the GPU's name, the model's shape (a model of the same
/// shape in other formats shares it) and whether its products are the K-quant family's
/// (`family`: each set's passes cost their own, so each has its own crossover).
pub fn key(gpu: &str, cfg: &ModelConfig, family: bool) -> String {
    format!(
        "{gpu} | {} layers, hidden {}, {}/{} heads of {}, ffn {}, vocab {}{}",
        cfg.n_layers,
        cfg.hidden,
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.head_dim,
        cfg.ffn,
        cfg.vocab_size,
        if family { " | K-quant family" } else { "" }
    )
}

/// The file the calibrations are kept in.
pub fn path() -> PathBuf {
    crate::paths::cache_dir().join("wide-crossover.json")
}

fn read_all(path: &std::path::Path) -> BTreeMap<String, Calibration> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

/// The calibration recorded for `key` in the file at `path`, if any (a missing or unreadable
/// file reads as none: the default crossover then applies).
pub fn recorded_in(path: &std::path::Path, key: &str) -> Option<Calibration> {
    read_all(path).remove(key)
}

/// Record `cal` for `key` in the file at `path`, keeping the other keys' (written to a temporary
/// file, then renamed over the old one).
pub fn record_in(path: &std::path::Path, key: &str, cal: &Calibration) -> Result<()> {
    let mut all = read_all(path);
    all.insert(key.to_string(), cal.clone());
    let text = serde_json::to_string_pretty(&all)
        .map_err(|e| Error::InvalidArgument(format!("calibration: {e}")))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crossover_is_where_cublas_wins_from_on() {
        // The H200's 1.5B (section 29): quantised wins to 16 rows, cuBLAS from 32.
        let t = vec![
            (8, 2.5, 2.9),
            (16, 3.2, 3.3),
            (32, 4.8, 2.3),
            (64, 8.5, 2.5),
        ];
        assert_eq!(choose(&t), Some(32));
        // A noisy small size where cuBLAS happens to win does not pull the crossover down.
        let t = vec![(4, 2.1, 2.0), (8, 2.5, 2.9), (32, 4.8, 2.3)];
        assert_eq!(choose(&t), Some(32));
        // Never a win: none; order of the rows does not matter.
        assert_eq!(choose(&[(64, 1.0, 2.0), (32, 1.0, 2.0)]), None);
        assert_eq!(choose(&[(64, 3.0, 2.0), (8, 3.0, 2.0)]), Some(8));
        assert_eq!(choose(&[]), None);
    }

    #[test]
    fn calibrations_are_kept_per_key_and_survive_a_bad_file() {
        let dir = std::env::temp_dir().join(format!("treespec-crossover-{}", std::process::id()));
        let path = dir.join("wide-crossover.json");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(recorded_in(&path, "a"), None);
        let a = Calibration::of(vec![(16, 3.0, 2.0), (32, 4.0, 2.0)]);
        let b = Calibration::of(vec![(16, 1.0, 2.0)]);
        record_in(&path, "a", &a).unwrap();
        record_in(&path, "b", &b).unwrap();
        assert_eq!(recorded_in(&path, "a"), Some(a.clone()));
        assert_eq!(recorded_in(&path, "b").unwrap().from, None);
        std::fs::write(&path, "not json").unwrap();
        assert_eq!(recorded_in(&path, "a"), None);
        record_in(&path, "a", &a).unwrap();
        assert_eq!(recorded_in(&path, "a").unwrap().from, Some(16));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Each product set keeps its own crossover: the family's key is not `mmtc`'s, and
    /// `mmtc`'s is the key calibrations were kept under before the family had one.
    #[test]
    fn each_product_set_has_its_own_key() {
        use crate::arch::config::Family;
        let cfg = ModelConfig::new(Family::Qwen2, 28, 1536, 8960, 12, 2, 128, 151936);
        let (tiles, family) = (key("H100", &cfg, false), key("H100", &cfg, true));
        assert_eq!(
            tiles,
            "H100 | 28 layers, hidden 1536, 12/2 heads of 128, ffn 8960, vocab 151936"
        );
        assert_eq!(family, format!("{tiles} | K-quant family"));
    }
}
