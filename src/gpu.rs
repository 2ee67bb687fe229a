//! treespec's own GPU kernels (CUDA sources in `kernels/`, compiled to PTX by `build.rs` with
//! the `cuda` feature), each behind a function that runs its CPU reference on any other device.
//!
//! - [`row_top_k`]: per-row top-k with the log-normaliser (`kernels/topk.cu`), so that a drafter
//!   row of 152k logits becomes k ids and log-probabilities on the device and only those cross to
//!   the host (CPU reference: [`crate::tree::top_k_log_probs`]).

use crate::error::Result;
use crate::tree::{top_k_rows, DepthTopK};
use candle_core::{DType, Tensor};

/// Largest k the device kernel keeps per row (larger k takes the host path).
pub const TOP_K_MAX: usize = 16;

/// The top `k` entries of each row of `[rows, cols]` logits, with their log-probabilities
/// (largest first, ties to the lower id): on the GPU for `k <= TOP_K_MAX`, else on the host.
pub fn row_top_k(logits: &Tensor, k: usize) -> Result<Vec<DepthTopK>> {
    let (_, cols) = logits.dims2()?;
    let k = k.min(cols);
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(dev) = logits.device() {
        if (1..=TOP_K_MAX).contains(&k) {
            return cuda::row_top_k(dev, logits, k);
        }
    }
    let rows = logits.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    Ok(top_k_rows(&rows, k))
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use crate::error::Error;
    use candle_core::CudaDevice;
    use cudarc::driver::{LaunchConfig, PushKernelArg};

    const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/topk.ptx"));
    /// Threads per block (one block per row): `TOPK_THREADS` in `kernels/topk.cu`.
    const THREADS: u32 = 256;

    fn driver(e: impl std::fmt::Debug) -> Error {
        Error::Device(format!("top-k kernel: {e:?}"))
    }

    pub(super) fn row_top_k(dev: &CudaDevice, logits: &Tensor, k: usize) -> Result<Vec<DepthTopK>> {
        let logits = logits.to_dtype(DType::F32)?.contiguous()?;
        let (rows, cols) = logits.dims2()?;
        if rows == 0 {
            return Ok(vec![]);
        }
        let (storage, layout) = logits.storage_and_layout();
        let candle_core::Storage::Cuda(cs) = &*storage else {
            return Err(Error::Device(
                "top-k kernel: the logits are not on the GPU".into(),
            ));
        };
        let x = cs
            .as_cuda_slice::<f32>()?
            .slice(layout.start_offset()..layout.start_offset() + rows * cols);
        let func = dev.get_or_load_custom_func("row_top_k_f32", "treespec_topk", PTX)?;
        let stream = dev.cuda_stream();
        let mut ids = stream.alloc_zeros::<i32>(rows * k).map_err(driver)?;
        let mut lps = stream.alloc_zeros::<f32>(rows * k).map_err(driver)?;
        let mut lse = stream.alloc_zeros::<f32>(rows).map_err(driver)?;
        let (cols_i, k_i) = (cols as i32, k as i32);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = func.builder();
        b.arg(&x)
            .arg(&cols_i)
            .arg(&k_i)
            .arg(&mut ids)
            .arg(&mut lps)
            .arg(&mut lse);
        // SAFETY: the arguments match the kernel's signature: a [rows, cols] f32 input, two
        // [rows, k] outputs and one [rows] output, k <= TOPK_MAX (checked by the caller).
        unsafe { b.launch(cfg) }.map_err(driver)?;
        drop(storage);
        let ids = stream.memcpy_dtov(&ids).map_err(driver)?;
        let lps = stream.memcpy_dtov(&lps).map_err(driver)?;
        Ok(ids
            .chunks(k)
            .zip(lps.chunks(k))
            .map(|(i, l)| DepthTopK {
                tokens: i.iter().map(|&t| t as u32).collect(),
                log_probs: l.to_vec(),
            })
            .collect())
    }
}
