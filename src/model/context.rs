//! How many tokens a model's KV cache holds when the user names no number: the model's trained
//! context, cut to what a share of the memory left beside its weights holds. The caches are
//! allocated whole at load ([`super::kv_cache`]), so a context the memory cannot hold would fail
//! there, or take the room the drafter and the GPU's f16 weight copies need.

use super::config::ModelConfig;
use candle_core::Device;

/// [`super::LoadOptions::context`] that asks for this: the model's own context, bounded by
/// memory ([`auto`]).
pub const AUTO: usize = 0;

/// At least this many tokens (where memory cannot be read, or is short of it: the allocation
/// then says so).
pub const MIN: usize = 4096;

/// Share of the memory beside the weights that the caches may take: the rest is for the drafter,
/// the activations and, on a GPU, the wide passes' f16 copies of the weights.
const SHARE: f64 = 0.5;

/// Contexts chosen here are multiples of this many tokens.
const STEP: usize = 1024;

/// Bytes of KV cache a token takes: K and V of every full-attention layer in f32, and on a GPU
/// their f16 copies beside (the wide passes' attention reads those).
pub fn bytes_per_token(cfg: &ModelConfig, gpu: bool) -> u64 {
    let layers = (0..cfg.n_layers).filter(|&i| !cfg.is_linear(i)).count() + cfg.mtp_heads;
    let per_value = if gpu { 4 + 2 } else { 4 };
    (layers * 2 * cfg.n_kv_heads * cfg.head_dim * per_value) as u64
}

/// The context for a model of `max_position` tokens whose cache takes `per_token` bytes a token,
/// with `free` bytes beside its weights (`None`: unknown): all of `max_position` where
/// `SHARE` of `free` holds it, else as many `STEP`s as it holds, never under [`MIN`] (or
/// the model's own, if that is less).
pub fn fit(max_position: usize, per_token: u64, free: Option<u64>) -> usize {
    let floor = MIN.min(max_position);
    let Some(free) = free else {
        return floor;
    };
    let fits = (free as f64 * SHARE / per_token.max(1) as f64) as usize;
    (fits / STEP * STEP).clamp(floor, max_position.max(floor))
}

/// Memory left on `device` once weights of `weight_bytes` are loaded (`None` where it cannot be
/// read: not Linux, or a GPU without the `cuda` build).
pub fn free_beside(device: &Device, weight_bytes: u64) -> Option<u64> {
    let free = match device {
        Device::Cpu => cpu_available()?,
        Device::Cuda(_) => crate::gpu::free_memory(device)?,
        _ => return None,
    };
    Some(free.saturating_sub(weight_bytes))
}

/// The context for `cfg` on `device` with weights of `weight_bytes` ([`fit`]).
pub fn auto(cfg: &ModelConfig, device: &Device, weight_bytes: u64) -> usize {
    let per_token = bytes_per_token(cfg, device.is_cuda());
    fit(
        cfg.max_position,
        per_token,
        free_beside(device, weight_bytes),
    )
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn cpu_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_context_where_it_fits_else_what_memory_holds() {
        const GIB: u64 = 1 << 30;
        // 128 KiB a token: 32k tokens take 4 GiB.
        let per = 128 * 1024;
        assert_eq!(fit(32768, per, Some(16 * GIB)), 32768);
        assert_eq!(fit(131072, per, Some(16 * GIB)), 65536);
        assert_eq!(fit(131072, per, Some(GIB)), MIN);
        assert_eq!(fit(131072, per, None), MIN);
        assert_eq!(fit(2048, per, None), 2048);
        assert_eq!(fit(2048, per, Some(0)), 2048);
    }

    #[test]
    fn a_hybrid_counts_only_its_attention_layers() {
        let mut cfg = ModelConfig::new(
            crate::arch::config::Family::Qwen2,
            8,
            256,
            512,
            4,
            2,
            64,
            100,
        );
        let dense = bytes_per_token(&cfg, false);
        assert_eq!(dense, 8 * 2 * 2 * 64 * 4);
        assert_eq!(bytes_per_token(&cfg, true), dense / 4 * 6);
        cfg.linear = Some(crate::arch::config::LinearAttention {
            layers: (0..8).map(|i| (i + 1) % 4 != 0).collect(),
            k_heads: 1,
            v_heads: 1,
            k_dim: 64,
            v_dim: 64,
            conv: 4,
            v_tiled: false,
        });
        assert_eq!(bytes_per_token(&cfg, false), dense / 4);
    }

    #[test]
    fn this_machines_memory_is_read() {
        if cfg!(target_os = "linux") {
            assert!(cpu_available().is_some_and(|b| b > 0));
        }
    }
}
