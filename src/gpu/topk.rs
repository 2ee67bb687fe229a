//! Per-row top-k with the log-normaliser (`kernels/topk.cu`), so that a drafter row of 152k
//! logits becomes k ids and log-probabilities on the device and only those cross to the host (CPU
//! reference: [`crate::tree::top_k_log_probs`]).

use crate::error::Result;
use crate::tree::{top_k_rows, DepthTopK};
use candle_core::{DType, Tensor};

mod selftest;
pub(super) use selftest::selftest;

/// The index of each row's largest entry of `[rows, cols]` logits (ties to the lower index): one
/// kernel launch on a GPU and `rows` ids back, candle's argmax elsewhere.
pub fn row_argmax(logits: &Tensor) -> Result<Vec<u32>> {
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(dev) = logits.device() {
        return cuda::row_argmax(dev, logits);
    }
    Ok(logits.argmax(candle_core::D::Minus1)?.to_vec1::<u32>()?)
}

/// Largest k the register-list kernels keep per row (the MTP chain's top-k in a captured graph;
/// larger k, a DDTree's K = B per depth, take the radix select, `row_select_f32`).
pub const TOP_K_MAX: usize = 16;

/// The top `k` entries of each row of `[rows, cols]` logits, with their log-probabilities
/// (largest first, ties to the lower id): on the GPU (only the k winners cross to the host),
/// on the host elsewhere.
pub fn row_top_k(logits: &Tensor, k: usize) -> Result<Vec<DepthTopK>> {
    let (_, cols) = logits.dims2()?;
    let k = k.min(cols);
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(dev) = logits.device() {
        if k >= 1 {
            return cuda::row_top_k(dev, logits, k);
        }
    }
    let rows = logits.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    Ok(top_k_rows(&rows, k))
}

/// One row of `row_select_f32`'s output (`kernels/topk.cu`: k ids, k values as f32 bits, the
/// logsumexp; the winners in index order) as a [`DepthTopK`]: largest first, ties to the lower id,
/// log-probabilities `value - logsumexp` in f32, as the CPU reference computes them.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn sorted_depth(words: &[u32], k: usize) -> DepthTopK {
    let lse = f32::from_bits(words[2 * k]);
    let mut pairs: Vec<(f32, u32)> = (0..k)
        .map(|j| (f32::from_bits(words[k + j]), words[j]))
        .collect();
    pairs.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    DepthTopK {
        tokens: pairs.iter().map(|p| p.1).collect(),
        log_probs: pairs.iter().map(|p| p.0 - lse).collect(),
    }
}

#[cfg(feature = "cuda")]
pub(crate) use cuda::{depths, launch_top_k, TopKFuncs, TopKScratch};

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use crate::error::Error;
    use candle_core::CudaDevice;
    use cudarc::driver::{
        CudaFunction, CudaSlice, CudaStream, CudaView, DevicePtr, LaunchConfig, PushKernelArg,
    };
    use std::sync::Arc;

    use crate::gpu::modules::{func, Module};
    /// Threads per block of the first top-k launch: `TOPK_THREADS` in `kernels/topk.cu`.
    const THREADS: u32 = 256;
    /// Slices (blocks) per row of the first launch: `TOPK_SPLIT`.
    const SPLIT: u32 = 16;
    /// Threads per block of the merge launch: `TOPK_MERGE_THREADS`.
    const MERGE_THREADS: u32 = 256;
    /// Threads per block of the argmax kernel: `ARGMAX_THREADS` in `kernels/topk.cu`.
    const ARGMAX_THREADS: u32 = 1024;

    fn driver(e: impl std::fmt::Debug) -> Error {
        crate::gpu::kernel_error("top-k", e)
    }

    /// Run `launch` over the `[rows, cols]` f32 logits as a device view (`rows` > 0); `what`
    /// names the kernel in errors. Zero rows give `empty` without a launch.
    fn with_logits<T>(
        logits: &Tensor,
        what: &str,
        empty: T,
        launch: impl FnOnce(&CudaView<f32>, usize, usize) -> Result<T>,
    ) -> Result<T> {
        let logits = logits.to_dtype(DType::F32)?.contiguous()?;
        let (rows, cols) = logits.dims2()?;
        if rows == 0 {
            return Ok(empty);
        }
        let (storage, layout) = logits.storage_and_layout();
        let candle_core::Storage::Cuda(cs) = &*storage else {
            return Err(Error::Device(format!(
                "{what} kernel: the logits are not on the GPU"
            )));
        };
        let x = cs
            .as_cuda_slice::<f32>()?
            .slice(layout.start_offset()..layout.start_offset() + rows * cols);
        launch(&x, rows, cols)
    }

    pub(super) fn row_argmax(dev: &CudaDevice, logits: &Tensor) -> Result<Vec<u32>> {
        with_logits(logits, "argmax", vec![], |x, rows, cols| {
            let f = func(dev, Module::Topk, "row_argmax_f32")?;
            let stream = dev.cuda_stream();
            // SAFETY: uninitialised (no memset launch); the kernel writes every row's id.
            let mut ids = unsafe { stream.alloc::<u32>(rows) }.map_err(driver)?;
            let cols_i = cols as i32;
            let cfg = LaunchConfig {
                grid_dim: (rows as u32, 1, 1),
                block_dim: (ARGMAX_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = stream.launch_builder(&f);
            b.arg(x).arg(&cols_i).arg(&mut ids);
            // SAFETY: a [rows, cols] f32 input and a [rows] output, as the kernel takes them.
            unsafe { b.launch(cfg) }.map_err(driver)?;
            stream.clone_dtoh(&ids).map_err(driver)
        })
    }

    /// The two kernels of the device top-k (`kernels/topk.cu`).
    pub(crate) struct TopKFuncs {
        part: CudaFunction,
        merge: CudaFunction,
    }

    impl TopKFuncs {
        /// Load (once per device) the kernels.
        pub(crate) fn load(dev: &CudaDevice) -> Result<Self> {
            let load = |name| func(dev, Module::Topk, name);
            Ok(TopKFuncs {
                part: load("row_top_k_part_f32")?,
                merge: load("row_top_k_merge_f32")?,
            })
        }
    }

    /// Scratch of the first launch for `rows` rows and k up to [`TOP_K_MAX`].
    pub(crate) struct TopKScratch {
        v: CudaSlice<f32>,
        i: CudaSlice<i32>,
        max: CudaSlice<f32>,
        sum: CudaSlice<f64>,
    }

    impl TopKScratch {
        /// Scratch for `rows` rows.
        pub(crate) fn new(stream: &Arc<CudaStream>, rows: usize) -> Result<Self> {
            let slices = rows * SPLIT as usize;
            // SAFETY: uninitialised device buffers: the first launch writes every candidate and
            // slice sum before the merge reads them.
            unsafe {
                Ok(TopKScratch {
                    v: stream.alloc::<f32>(slices * TOP_K_MAX).map_err(driver)?,
                    i: stream.alloc::<i32>(slices * TOP_K_MAX).map_err(driver)?,
                    max: stream.alloc::<f32>(slices).map_err(driver)?,
                    sum: stream.alloc::<f64>(slices).map_err(driver)?,
                })
            }
        }
    }

    /// Queue the top `k` (1..=[`TOP_K_MAX`]) of `rows` rows of `cols` f32 logits at device
    /// address `x` into `out` (`[rows, 2k + 1]` words: ids, log-probabilities as f32 bits, the
    /// log-normaliser), with `scratch` for at least `rows` rows. Plain launches (no PDL), so
    /// they may sit in a captured graph between the decoder step's kernels.
    pub(crate) fn launch_top_k(
        stream: &Arc<CudaStream>,
        f: &TopKFuncs,
        scratch: &TopKScratch,
        (x, rows, cols): (u64, usize, usize),
        k: usize,
        out: u64,
    ) -> Result<()> {
        let p = |s: &CudaSlice<f32>| s.device_ptr(stream).0;
        let (v, i) = (p(&scratch.v), scratch.i.device_ptr(stream).0);
        let (max, sum) = (p(&scratch.max), scratch.sum.device_ptr(stream).0);
        let (cols_i, k_i) = (cols as i32, k as i32);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, SPLIT, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&f.part);
        b.arg(&x)
            .arg(&cols_i)
            .arg(&k_i)
            .arg(&v)
            .arg(&i)
            .arg(&max)
            .arg(&sum);
        // SAFETY: the arguments match the kernel's signature: a [rows, cols] f32 input,
        // [rows, SPLIT, k] candidates and [rows, SPLIT] slice sums (the scratch holds rows),
        // k <= TOPK_MAX (checked by the callers).
        unsafe { b.launch(cfg) }.map_err(driver)?;
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (MERGE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&f.merge);
        b.arg(&v).arg(&i).arg(&max).arg(&sum).arg(&k_i).arg(&out);
        // SAFETY: the buffers the first launch filled, and a [rows, 2k + 1] output.
        unsafe { b.launch(cfg) }.map_err(driver)?;
        Ok(())
    }

    /// The `[rows, 2k + 1]` words of [`launch_top_k`] as one [`DepthTopK`] a row.
    pub(crate) fn depths(words: &[u32], k: usize) -> Vec<DepthTopK> {
        words
            .chunks(2 * k + 1)
            .map(|w| DepthTopK {
                tokens: w[..k].to_vec(),
                log_probs: w[k..2 * k].iter().map(|&b| f32::from_bits(b)).collect(),
            })
            .collect()
    }

    pub(super) fn row_top_k(dev: &CudaDevice, logits: &Tensor, k: usize) -> Result<Vec<DepthTopK>> {
        if k > TOP_K_MAX {
            return row_select(dev, logits, k);
        }
        with_logits(logits, "top-k", vec![], |x, rows, cols| {
            let f = TopKFuncs::load(dev)?;
            let stream = dev.cuda_stream();
            let scratch = TopKScratch::new(&stream, rows)?;
            // SAFETY: uninitialised (no memset launch); the merge writes every output word.
            let out = unsafe { stream.alloc::<u32>(rows * (2 * k + 1)) }.map_err(driver)?;
            let x_ptr = x.device_ptr(&stream).0;
            let out_ptr = out.device_ptr(&stream).0;
            launch_top_k(&stream, &f, &scratch, (x_ptr, rows, cols), k, out_ptr)?;
            Ok(depths(&stream.clone_dtoh(&out).map_err(driver)?, k))
        })
    }

    /// Threads per block of the radix select: `SELECT_THREADS` in `kernels/topk.cu`.
    const SELECT_THREADS: u32 = 1024;

    /// [`row_top_k`] for k above [`TOP_K_MAX`] (at most the row): the radix select writes each
    /// row's k winners in index order with the logsumexp; here they are sorted (larger value,
    /// then lower id) and turned into log-probabilities, as the CPU reference computes them.
    fn row_select(dev: &CudaDevice, logits: &Tensor, k: usize) -> Result<Vec<DepthTopK>> {
        with_logits(logits, "top-k select", vec![], |x, rows, cols| {
            if k > cols {
                return Err(Error::InvalidArgument(format!(
                    "top-{k} of rows of {cols} logits"
                )));
            }
            let f = func(dev, Module::Topk, "row_select_f32")?;
            let stream = dev.cuda_stream();
            // SAFETY: uninitialised (no memset launch); the kernel writes every output word.
            let mut out = unsafe { stream.alloc::<u32>(rows * (2 * k + 1)) }.map_err(driver)?;
            let (cols_i, k_i) = (cols as i32, k as i32);
            let cfg = LaunchConfig {
                grid_dim: (rows as u32, 1, 1),
                block_dim: (SELECT_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = stream.launch_builder(&f);
            b.arg(x).arg(&cols_i).arg(&k_i).arg(&mut out);
            // SAFETY: a [rows, cols] f32 input and a [rows, 2k + 1] output, k <= cols.
            unsafe { b.launch(cfg) }.map_err(driver)?;
            let words = stream.clone_dtoh(&out).map_err(driver)?;
            Ok(words
                .chunks(2 * k + 1)
                .map(|w| sorted_depth(w, k))
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selected_winners_come_back_sorted_as_the_reference_sorts_them() {
        // The radix select's winners of a row, in index order, with ties: ids 3, 5, 9, 12 with
        // values 1.0, 2.5, 1.0, 2.5 and a logsumexp of 3.0.
        let row = [
            7.0f32, 1.0, 0.0, 1.0, -1.0, 2.5, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.5,
        ];
        let (ids, lse) = ([3u32, 5, 9, 12], 3.0f32);
        let mut words: Vec<u32> = ids.to_vec();
        words.extend(ids.iter().map(|&i| row[i as usize].to_bits()));
        words.push(lse.to_bits());
        let got = sorted_depth(&words, 4);
        assert_eq!(got.tokens, vec![5, 12, 3, 9]);
        assert_eq!(
            got.log_probs,
            vec![2.5 - lse, 2.5 - lse, 1.0 - lse, 1.0 - lse]
        );
    }
}
