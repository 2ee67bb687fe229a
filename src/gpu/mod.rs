//! treespec's own GPU kernels (CUDA sources in `kernels/`, compiled by `build.rs` with the `cuda`
//! feature into fatbins that `modules` loads), each behind a function that runs its CPU
//! reference on any other device.
//!
//! - [`row_top_k`], [`row_argmax`] (`topk`): per-row top-k with the log-normaliser; argmax.
//! - [`attention`](mod@attention) (`attention`): batch-invariant grouped-query attention over per-row key lists.
//! - [`gdn`] (`gdn`): a Gated DeltaNet layer's convolution and recurrence over a chain or a tree.
//! - [`step`] (`step`, `attention`): the decoder's forward pass, whose quantised products
//!   (`products`, CUDA builds) run on dp4a (`mmvq`) or tensor cores (`mmtc`, Q4_K and Q6_K) or,
//!   for targets that verify drafts and hybrid models ([`step::mmq_wanted`]), in the K-quant
//!   family of one summation contract ([`mmq`]), and, for
//!   passes of many rows, through cuBLAS on f16 copies of the weights ([`wide`]), from a row
//!   count measured per GPU and model shape ([`crossover`]).

pub mod attention;
pub mod crossover;
pub mod gdn;
pub mod gdn_walk;
#[cfg(feature = "cuda")]
pub(crate) mod launch;
pub mod mmq;
#[cfg(feature = "cuda")]
pub(crate) mod modules;
#[cfg(feature = "cuda")]
pub mod products;
pub mod step;
mod topk;
pub mod wide;

pub use attention::attention;
pub use topk::{row_argmax, row_top_k, TOP_K_MAX};

use crate::error::Result;

/// Free memory on `device`'s GPU, in bytes (`None` for the CPU, a build without CUDA, or where
/// the driver does not say).
pub fn free_memory(device: &candle_core::Device) -> Option<u64> {
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(dev) = device {
        dev.cuda_stream().context().bind_to_thread().ok()?;
        let (free, _) = cudarc::driver::result::mem_get_info().ok()?;
        return Some(free as u64);
    }
    let _ = device;
    None
}

/// Check every kernel on `device` against its CPU reference, on random inputs of awkward
/// shapes; returns one line per check, or an error naming the first mismatch.
pub fn selftest(device: &candle_core::Device) -> Result<Vec<String>> {
    let mut rng = Uniform(0x9E37_79B9_7F4A_7C15);
    let mut report = vec![];
    canary(device, &mut rng, &mut report)?;
    topk::selftest(device, &mut rng, &mut report)?;
    attention::selftest(device, &mut rng, &mut report)?;
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(dev) = device {
        report.push(format!("treespec's kernels: {}", modules::carried()));
        // The K-quant products' tiles use int8 MMA, which needs sm_80 (PTX built for 80 unless
        // CUDA_COMPUTE_CAP says otherwise).
        let tensor_cores = match crate::device::built_for() {
            Some(cap) if cap < 80 => {
                report.push(format!(
                    "tensor-core products: skipped (this build is for sm_{cap}; they need sm_80)"
                ));
                false
            }
            _ => true,
        };
        products::selftest_stacked(dev, &mut rng, &mut report, tensor_cores)?;
        if tensor_cores {
            products::selftest_products(dev, &mut rng, &mut report)?;
            mmq::selftest(dev, &mut rng, &mut report)?;
            mmq::selftest_stacked(dev, &mut rng, &mut report)?;
        }
        wide::selftest(dev, &mut rng, &mut report)?;
    }
    Ok(report)
}

/// candle's quantised product on `device` against the CPU's, on a small random Q4_0 matrix and
/// four activation rows. candle builds its quantised GPU kernels as machine code for one
/// architecture, and on another GPU they return garbage without an error: this launch catches
/// that (the start-up check of `device::check_architecture` refuses such a GPU first; this is
/// the second line of defence). Activations are quantised differently on the two sides (Q8_1,
/// Q8_0), so the bound is loose: garbage is off by the size of the values.
fn canary(device: &candle_core::Device, rng: &mut Uniform, report: &mut Vec<String>) -> Result<()> {
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
    use candle_core::{Device, Module, Tensor};
    let (rows, cols, n) = (64usize, 256usize, 4usize);
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.next() * 2.0 - 1.0).collect();
    let x: Vec<f32> = (0..n * cols).map(|_| rng.next() * 2.0 - 1.0).collect();
    let w = Tensor::from_vec(w, (rows, cols), &Device::Cpu)?;
    let x = Tensor::from_vec(x, (n, cols), &Device::Cpu)?;
    let product = |dev: &Device| -> Result<Tensor> {
        let q = QTensor::quantize(&w.to_device(dev)?, GgmlDType::Q4_0)?;
        let out = QMatMul::from_qtensor(q)?.forward(&x.to_device(dev)?)?;
        Ok(out.to_device(&Device::Cpu)?)
    };
    let want = product(&Device::Cpu)?;
    let got = product(device)?;
    let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
    let err = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
    if err.is_nan() || err > 0.05 * scale {
        return Err(crate::error::Error::Device(format!(
            "candle's quantised product gives wrong values on this device (largest error {err:.3} \
             against values up to {scale:.3}): this treespec was built for another GPU \
             architecture (CUDA_COMPUTE_CAP)"
        )));
    }
    report.push(format!(
        "canary: candle's quantised product [Q4_0 {rows} x {cols}, {n} rows]: largest error {:.1e} of the largest value",
        err / scale.max(f32::MIN_POSITIVE)
    ));
    Ok(())
}

/// True while work queued on `device`'s stream is still running; false on the CPU, once the
/// stream is idle, or if the driver cannot say.
pub fn busy(device: &candle_core::Device) -> bool {
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(dev) = device {
        use cudarc::driver::sys;
        // SAFETY: the stream handle belongs to the live device; a query only reads its state.
        let r = unsafe { sys::cuStreamQuery(dev.cuda_stream().cu_stream()) };
        if !matches!(
            r,
            sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_NOT_READY
        ) {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!("treespec: cannot query the GPU stream ({r:?}): not drafting ahead")
            });
        }
        return r == sys::CUresult::CUDA_ERROR_NOT_READY;
    }
    let _ = device;
    false
}

/// Whether two devices run side by side: GPUs, or two streams of one GPU, that are not the same
/// candle device (whose work would queue one after the other).
pub fn side_by_side(a: &candle_core::Device, b: &candle_core::Device) -> bool {
    a.is_cuda() && b.is_cuda() && !a.same_device(b)
}

/// Run `f` inside a CUDA profiler range on a GPU, so that `ncu --profile-from-start off` profiles
/// that work alone (the developers' `TREESPEC_PROFILE_ROWS`, `bench --costs`); on the CPU, `f`.
pub fn profiler_range<T>(device: &candle_core::Device, f: impl FnOnce() -> Result<T>) -> Result<T> {
    #[cfg(feature = "cuda")]
    if device.is_cuda() {
        device.synchronize()?;
        let range = cudarc::driver::Profiler::new().map_err(|e| kernel_error("profiler", e))?;
        let out = f();
        device.synchronize()?;
        drop(range);
        return out;
    }
    let _ = device;
    f()
}

/// A xorshift generator of uniform values in [0, 1) for the self-tests' inputs.
pub(crate) struct Uniform(pub(crate) u64);

impl Uniform {
    pub(crate) fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// The device address of a contiguous tensor's first element, its elements of type `T` (f32,
/// u32, f16, ...).
#[cfg(feature = "cuda")]
fn tensor_ptr<T: candle_core::cuda::CudaDType>(
    t: &candle_core::Tensor,
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
) -> std::result::Result<u64, String> {
    use cudarc::driver::DevicePtr;
    let t = t.contiguous().map_err(|e| e.to_string())?;
    let (s, l) = t.storage_and_layout();
    let candle_core::Storage::Cuda(s) = &*s else {
        return Err("a tensor is not on the GPU".into());
    };
    let slice = s.as_cuda_slice::<T>().map_err(|e| e.to_string())?;
    let (ptr, _guard) = slice.device_ptr(stream);
    Ok(ptr + (l.start_offset() * std::mem::size_of::<T>()) as u64)
}

/// A kernel's f32 output buffer as a tensor of `shape` on its device (no copy).
#[cfg(feature = "cuda")]
fn tensor_from_slice(
    dev: &candle_core::CudaDevice,
    slice: cudarc::driver::CudaSlice<f32>,
    shape: impl Into<candle_core::Shape>,
) -> candle_core::Tensor {
    let storage = candle_core::CudaStorage::wrap_cuda_slice(slice, dev.clone());
    candle_core::Tensor::from_storage(
        candle_core::Storage::Cuda(storage),
        shape,
        candle_core::op::BackpropOp::none(),
        false,
    )
}

/// A driver error of one of the kernels, as a device error naming it.
#[cfg(feature = "cuda")]
fn kernel_error(kernel: &str, e: impl std::fmt::Debug) -> crate::error::Error {
    crate::error::Error::Device(format!("{kernel} kernel: {e:?}"))
}
