//! Wide passes through cuBLAS: from [`wide_rows_for`] rows on, the GPU step can multiply with f16
//! copies of the quantised weights (dequantised once, when the step is built; the matrices of
//! one input, q/k/v and gate/up, back to back) in half-precision GEMMs on the tensor cores,
//! instead of the quantised tile kernels (`kernels/mmtc.cu`), whose per-group float epilogue
//! grows with every row: on the H200 a 256-row pass of the 1.5B target cost 17 one-row steps
//! through them and 4 through cuBLAS (BENCHMARKS.md, section 27). This is the wide-pass half of
//! DDTree-scale trees (issue 13).
//!
//! The activations stay what the step's fused kernels write: Q8_1 rows, turned into f16 rows
//! (`kernels/convert.cu`, each value `d * q` rounded to f16) just before the GEMM. The GEMM's sums
//! run in cuBLAS's order, not the quantised kernels', so a row of a wide pass is not bit for bit
//! a one-row step's (its logits differ by about f16's rounding of the weights). Which passes
//! take it ([`takes_pass`]): by default those that read at most one row's logits (a prompt's
//! pass, a drafter's or an MTP head's context pass), so that greedy speculation stays bit-exact
//! to `ar` (the same prompt, split into the same passes, gives the same cache in every mode);
//! verify passes only with `--wide-verify` ([`crate::model::decoder::Decoder::set_wide_verify`]).
//!
//! Memory: the copies take two bytes a weight (3.1 GB for the 1.5B target, the LM head's 0.47
//! included, which only verify passes use); they are made only where the GPU has that much free
//! beside [`HEADROOM`], else the step keeps the quantised kernels for every pass.

/// Rows from which a pass's products go through cuBLAS when neither `TREESPEC_WIDE_ROWS` nor a
/// calibration of this GPU and shape ([`crate::gpu::crossover`]) says: where they won on the
/// H200 on both shapes measured (BENCHMARKS.md, section 30: a calibration of the 1.5B found
/// cuBLAS ahead from 4 rows, at 16 rows 2.14 ms against 3.19; section 27: on the Qwen3-8B shape
/// from 8). Not lower, for GPUs with less bandwidth beside their tensor cores, where the f16
/// copies' three-and-a-half times the quantised bytes weigh more.
pub const WIDE_ROWS_DEFAULT: usize = 16;

/// Free GPU memory the copies must leave (beside what they take): the KV caches, a pass's
/// logits and candle's pool grow after the step is built.
pub const HEADROOM: usize = 4 << 30;

/// `TREESPEC_WIDE_ROWS` as set: `Some(Some(n))` from `n` rows, `Some(None)` never (`0`), `None`
/// unset (a value that is not a number reads as unset, with a line).
fn env_rows() -> Option<Option<usize>> {
    static ROWS: std::sync::OnceLock<Option<Option<usize>>> = std::sync::OnceLock::new();
    *ROWS.get_or_init(|| {
        let v = std::env::var("TREESPEC_WIDE_ROWS").ok()?;
        match v.trim().parse::<usize>() {
            Ok(n) => Some((n > 0).then_some(n)),
            Err(_) => {
                eprintln!("treespec: TREESPEC_WIDE_ROWS={v} is not a number of rows; ignored");
                None
            }
        }
    })
}

/// Where a step's crossover came from, for its runtime line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WideSource {
    /// `TREESPEC_WIDE_ROWS`.
    Env,
    /// Measured on this GPU for this shape (`bench --costs --calibrate`, [`crate::gpu::crossover`]).
    Measured,
    /// [`WIDE_ROWS_DEFAULT`].
    Default,
}

impl std::fmt::Display for WideSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WideSource::Env => "TREESPEC_WIDE_ROWS",
            WideSource::Measured => "measured here",
            WideSource::Default => "default",
        })
    }
}

/// The row count from which passes use the cuBLAS products for a model shaped `cfg` on the GPU
/// named `gpu`, its quantised products the K-quant family's where `family`:
/// `TREESPEC_WIDE_ROWS` (`0`: never), else the crossover `bench --costs --calibrate` recorded
/// for them (none where cuBLAS lost at every size measured), else [`WIDE_ROWS_DEFAULT`].
/// `None`: never.
pub fn wide_rows_for(
    gpu: &str,
    cfg: &crate::arch::config::ModelConfig,
    family: bool,
) -> (Option<usize>, WideSource) {
    if let Some(rows) = env_rows() {
        return (rows, WideSource::Env);
    }
    let key = crate::gpu::crossover::key(gpu, cfg, family);
    match crate::gpu::crossover::recorded_in(&crate::gpu::crossover::path(), &key) {
        Some(cal) => (cal.from, WideSource::Measured),
        None => (Some(WIDE_ROWS_DEFAULT), WideSource::Default),
    }
}

/// Whether a pass of `n` rows that reads `m` rows' logits goes through the copies, passes of at
/// least `from` rows using them: a pass that reads at most one row's logits (a prompt's, a
/// drafter's or an MTP head's context pass) always; a verify pass (every row's) only with
/// `verify`, since the GEMM sums in its own order: by default greedy speculation stays
/// bit-exact to `ar` while a prompt of any length is read at GEMM speed.
pub fn takes_pass(from: usize, verify: bool, n: usize, m: usize) -> bool {
    n >= from && (verify || m <= 1)
}

/// Bytes the f16 copies of matrices of these `(rows, cols)` take.
pub fn copy_bytes(shapes: impl Iterator<Item = (usize, usize)>) -> usize {
    shapes.map(|(r, c)| r * c * 2).sum()
}

/// Whether copies of `bytes` fit a GPU with `free` bytes free: [`HEADROOM`] must stay free
/// after them.
pub fn copies_fit(bytes: usize, free: usize) -> bool {
    bytes.checked_add(HEADROOM).is_some_and(|need| need <= free)
}

#[cfg(feature = "cuda")]
pub(crate) use cuda::{selftest, Out, WideProducts};

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use crate::error::{Error, Result};
    use crate::gpu::products::driver;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};
    use cudarc::cublas::{result as blas, sys as bsys, CudaBlas};
    use cudarc::driver::{
        CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
    };
    use std::collections::HashMap;
    use std::sync::Arc;

    /// Threads of the conversion kernel.
    const THREADS: u32 = 256;

    fn blas_err(e: cudarc::cublas::result::CublasError) -> Error {
        Error::Device(format!("cuBLAS: {e:?}"))
    }

    /// What a wide product writes to its destination.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Out {
        /// f32 results, replacing what was there.
        Set,
        /// f32 results added to what is there (a residual: `x += W . y` in the GEMM itself).
        Add,
        /// f16 results (`ldc` counts halves): the next kernel reads half the bytes.
        Half,
    }

    /// The f16 copies of a step's weight matrices and what multiplies with them.
    pub(crate) struct WideProducts {
        blas: CudaBlas,
        convert: CudaFunction,
        /// By the quantised matrix's device address: the f16 copy holding it (kept alive; the
        /// matrices that share an input, q/k/v or gate/up, share one copy, back to back) and
        /// the address of its first row there.
        copies: HashMap<u64, (Arc<Tensor>, u64)>,
        /// Passes of at least this many rows use the copies.
        pub(crate) from: usize,
        /// cuBLAS's workspace, its own for the handle's life ([`blas_with_workspace`]).
        _workspace: CudaSlice<u8>,
    }

    /// cuBLAS's workspace: fixed, so that a GEMM captured in a CUDA graph runs the algorithm
    /// an eager launch of the same shape runs (without one, cuBLAS picks workspace-free
    /// algorithms while capturing, which sum in another order).
    const WORKSPACE: usize = 32 << 20;

    /// A cuBLAS handle on `stream` with a workspace of its own (returned, to be kept alive as
    /// long as the handle).
    fn blas_with_workspace(stream: &Arc<CudaStream>) -> Result<(CudaBlas, CudaSlice<u8>)> {
        let blas = CudaBlas::new(stream.clone()).map_err(blas_err)?;
        let workspace = stream.alloc_zeros::<u8>(WORKSPACE).map_err(driver)?;
        let ptr = workspace.device_ptr(stream).0;
        // SAFETY: the handle is alive and on `stream`; the buffer outlives it (both are kept
        // together by the caller) and holds WORKSPACE bytes, 256-byte aligned (cudaMalloc).
        unsafe {
            bsys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut std::ffi::c_void, WORKSPACE)
        }
        .result()
        .map_err(blas_err)?;
        Ok((blas, workspace))
    }

    impl WideProducts {
        /// Copies of the matrices of `groups` (device address, quantised tensor; a group's
        /// matrices share their input and are copied back to back, so that one GEMM takes them
        /// all) when passes of `from` rows on should use them and the GPU has the memory;
        /// `Ok(None)` where it has not.
        pub(crate) fn new(
            dev: &candle_core::CudaDevice,
            groups: Vec<Vec<(u64, &Arc<QTensor>)>>,
            from: usize,
        ) -> Result<Option<Self>> {
            let shapes = groups.iter().flatten().map(|(_, q)| {
                let d = q.shape().dims();
                (d[0], d.get(1).copied().unwrap_or(1))
            });
            let bytes = copy_bytes(shapes);
            let stream = dev.cuda_stream();
            stream.context().bind_to_thread().map_err(driver)?;
            let (free, _) = cudarc::driver::result::mem_get_info().map_err(driver)?;
            if !copies_fit(bytes, free) {
                return Ok(None);
            }
            let device = Device::Cuda(dev.clone());
            let mut copies = HashMap::new();
            for group in groups {
                let group: Vec<_> = group
                    .into_iter()
                    .filter(|(ptr, _)| !copies.contains_key(ptr))
                    .collect();
                let Some((_, first)) = group.first() else {
                    continue;
                };
                let cols = first.shape().dims().get(1).copied().unwrap_or(1);
                let parts = group
                    .iter()
                    .map(|(_, q)| q.dequantize_f16(&device))
                    .collect::<candle_core::Result<Vec<_>>>()?;
                if parts.iter().any(|p| p.dims().get(1) != Some(&cols)) {
                    return Err(Error::Device(
                        "wide products: matrices of one input with different widths".into(),
                    ));
                }
                let t = Arc::new(Tensor::cat(&parts, 0)?.contiguous()?);
                let mut at =
                    crate::gpu::tensor_ptr::<half::f16>(&t, &stream).map_err(Error::Device)?;
                for ((ptr, _), part) in group.iter().zip(&parts) {
                    copies.insert(*ptr, (t.clone(), at));
                    at += (part.elem_count() * 2) as u64;
                }
            }
            let (blas, workspace) = blas_with_workspace(&stream)?;
            Ok(Some(WideProducts {
                blas,
                _workspace: workspace,
                convert: convert_func(dev)?,
                copies,
                from,
            }))
        }

        /// Whether a pass of `n` rows over matrices at these addresses goes through the copies.
        pub(crate) fn takes(&self, n: usize, mut mats: impl Iterator<Item = u64>) -> bool {
            n >= self.from && mats.all(|p| self.has(p))
        }

        /// Whether the matrix at this device address has a copy.
        pub(crate) fn has(&self, ptr: u64) -> bool {
            self.copies.contains_key(&ptr)
        }

        /// Bytes the copies take.
        pub(crate) fn bytes(&self) -> usize {
            let mut seen = std::collections::HashSet::new();
            self.copies
                .values()
                .filter(|(t, _)| seen.insert(Arc::as_ptr(t)))
                .map(|(t, _)| t.elem_count() * 2)
                .sum()
        }

        /// `dst[c * dst_stride + off_j + r] = W_j[r] . y[c]` for the stacked matrices `mats`
        /// (`(address, rows, cols)`, output columns back to back) and the `n` Q8_1 activation
        /// rows at `y` (`yq` blocks apart), through `half` (room for `n x cols` halves; with
        /// `ready`, already holding the rows as f16, written by the kernel that wrote `y`);
        /// written as `out` says.
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn product(
            &self,
            stream: &Arc<CudaStream>,
            mats: &[(u64, usize, usize)],
            (y, yq): (u64, usize),
            (half, ready): (u64, bool),
            (dst, dst_stride): (u64, usize),
            n: usize,
            out: Out,
        ) -> Result<()> {
            let Some(&(_, _, cols)) = mats.first() else {
                return Ok(());
            };
            if !ready {
                to_f16(stream, &self.convert, (y, yq), cols, half, n)?;
            }
            // Runs of matrices whose copies lie back to back: one GEMM a run.
            let mut at = dst;
            let mut run: Option<(u64, usize)> = None; // (first row's copy, rows so far)
            for &(ptr, rows, c) in mats {
                if c != cols {
                    return Err(Error::Device(format!(
                        "wide product: stacked matrices of {cols} and {c} columns"
                    )));
                }
                let w = self.copies.get(&ptr).ok_or_else(|| {
                    Error::Device("wide product: a matrix without its f16 copy".into())
                })?;
                run = match run {
                    Some((start, r)) if start + (r * cols * 2) as u64 == w.1 => {
                        Some((start, r + rows))
                    }
                    Some((start, r)) => {
                        gemm(&self.blas, start, r, cols, half, n, (at, dst_stride), out)?;
                        at += (r * out.bytes()) as u64;
                        Some((w.1, rows))
                    }
                    None => Some((w.1, rows)),
                };
            }
            if let Some((start, r)) = run {
                gemm(&self.blas, start, r, cols, half, n, (at, dst_stride), out)?;
            }
            Ok(())
        }
    }

    fn convert_func(dev: &candle_core::CudaDevice) -> Result<CudaFunction> {
        crate::gpu::modules::func(dev, crate::gpu::modules::Module::Convert, "q8_1_to_f16")
    }

    /// `n` rows of `cols` values from Q8_1 blocks at `y` (rows `yq` blocks apart) to f16 rows
    /// at `out`.
    fn to_f16(
        stream: &Arc<CudaStream>,
        f: &CudaFunction,
        (y, yq): (u64, usize),
        cols: usize,
        out: u64,
        n: usize,
    ) -> Result<()> {
        let (qb, stride, n_i) = ((cols / 32) as i32, yq as i32, n as i32);
        let mut b = stream.launch_builder(f);
        b.arg(&y).arg(&qb).arg(&stride).arg(&out).arg(&n_i);
        let cfg = LaunchConfig {
            grid_dim: (n as u32, (cols as u32).div_ceil(THREADS), 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: y holds n rows of at least cols / 32 blocks, yq apart; out n x cols halves.
        unsafe { b.launch(cfg) }.map_err(driver)?;
        Ok(())
    }

    impl Out {
        /// Bytes of one result.
        pub(crate) fn bytes(self) -> usize {
            match self {
                Out::Set | Out::Add => 4,
                Out::Half => 2,
            }
        }
    }

    /// `dst[c * ldc + r] = W[r] . X[c]` (or `+=`, as `out` says): W `rows x cols` f16 row-major
    /// at `w`, X `n x cols` f16 at `x`, f32 accumulation on the tensor cores.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        blas: &CudaBlas,
        w: u64,
        rows: usize,
        cols: usize,
        x: u64,
        n: usize,
        (dst, ldc): (u64, usize),
        out: Out,
    ) -> Result<()> {
        let alpha = 1.0f32;
        let beta = if out == Out::Add { 1.0f32 } else { 0.0 };
        let ctype = match out {
            Out::Half => bsys::cudaDataType::CUDA_R_16F,
            Out::Set | Out::Add => bsys::cudaDataType::CUDA_R_32F,
        };
        // Column-major: C (rows x n, ldc) = op(A) B with A the weights as stored (cols x rows,
        // transposed) and B the activations (cols x n).
        // SAFETY: the buffers hold what the shapes say (the callers' sizes); the handle is on
        // the stream every buffer is used on; alpha and beta are host values read at the call.
        unsafe {
            blas::gemm_ex(
                *blas.handle(),
                bsys::cublasOperation_t::CUBLAS_OP_T,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                rows as i32,
                n as i32,
                cols as i32,
                &alpha as *const f32 as *const std::ffi::c_void,
                w as *const std::ffi::c_void,
                bsys::cudaDataType::CUDA_R_16F,
                cols as i32,
                x as *const std::ffi::c_void,
                bsys::cudaDataType::CUDA_R_16F,
                cols as i32,
                &beta as *const f32 as *const std::ffi::c_void,
                dst as *mut std::ffi::c_void,
                ctype,
                ldc as i32,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(blas_err)
    }

    mod selftest;
    pub(crate) use selftest::selftest;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_passes_take_the_copies_only_when_asked() {
        // A prompt of 200 tokens, its last row's logits: through the copies.
        assert!(takes_pass(32, false, 200, 1));
        assert!(takes_pass(32, false, 200, 0));
        // A 64-node tree's verify pass: only with verify on.
        assert!(!takes_pass(32, false, 65, 65));
        assert!(takes_pass(32, true, 65, 65));
        // Below the crossover, never.
        assert!(!takes_pass(32, true, 31, 31));
        assert!(!takes_pass(32, false, 31, 1));
    }

    #[test]
    fn copies_are_two_bytes_a_weight_and_need_headroom() {
        let bytes = copy_bytes([(1536usize, 1536usize), (8960, 1536)].into_iter());
        assert_eq!(bytes, (1536 * 1536 + 8960 * 1536) * 2);
        assert!(copies_fit(bytes, bytes + HEADROOM));
        assert!(!copies_fit(bytes, bytes + HEADROOM - 1));
        assert!(!copies_fit(usize::MAX, usize::MAX));
    }
}
