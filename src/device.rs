//! Parsing `--device cpu|cuda[:N]` into a candle device.

use crate::error::{Error, Result};
use candle_core::Device;

/// Open the device named by `spec` (`cpu`, `cuda`, `cuda:N`).
pub fn parse_device(spec: &str) -> Result<Device> {
    let spec = spec.trim().to_ascii_lowercase();
    if spec == "cpu" {
        return Ok(Device::Cpu);
    }
    let ordinal = if spec == "cuda" || spec == "gpu" {
        0
    } else if let Some(n) = spec.strip_prefix("cuda:") {
        n.parse::<usize>()
            .map_err(|_| Error::Device(format!("`{spec}`: expected cuda:N with N a number")))?
    } else {
        return Err(Error::Device(format!(
            "`{spec}` is not a device (use cpu, cuda or cuda:N)"
        )));
    };
    if !candle_core::utils::cuda_is_available() {
        return Err(Error::Device(format!(
            "`{spec}` asked for, but this build of treespec has no CUDA support \
             (rebuild with `cargo build --release --features cuda`)"
        )));
    }
    let device = Device::new_cuda_with_stream(ordinal)
        .map_err(|e| Error::Device(format!("cannot open cuda:{ordinal}: {e}")))?;
    check_architecture(built_for(), capability(&device)?)
        .map_err(|why| Error::Device(format!("cuda:{ordinal}: {why}")))?;
    tune(&device)?;
    Ok(device)
}

/// A second handle on the GPU of `device`, with its own stream (work on it runs beside work on
/// `device`'s); the CPU stays the CPU.
pub fn another_stream(device: &Device) -> Result<Device> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = device {
        return parse_device(&format!("cuda:{}", dev.cuda_stream().context().ordinal()));
    }
    Ok(device.clone())
}

/// The compute capability this binary's GPU kernels were built for (`CUDA_COMPUTE_CAP` at build
/// time, e.g. 90), when the build named one.
pub(crate) fn built_for() -> Option<u32> {
    option_env!("TREESPEC_CUDA_COMPUTE_CAP").and_then(|s| s.parse().ok())
}

/// Whether `device` multiplies bf16 matrices on its tensor cores (a GPU of compute capability 8.0
/// or later; cuBLAS has no bf16 products before).
pub fn has_bf16_products(device: &Device) -> bool {
    device.is_cuda() && capability(device).is_ok_and(|c| c >= 80)
}

/// The device's compute capability as `major * 10 + minor`.
#[cfg(feature = "cuda")]
fn capability(device: &Device) -> Result<u32> {
    let Device::Cuda(dev) = device else {
        return Ok(0);
    };
    let (major, minor) = dev
        .cuda_stream()
        .context()
        .compute_capability()
        .map_err(|e| Error::Device(format!("reading the compute capability: {e:?}")))?;
    Ok((major * 10 + minor) as u32)
}

#[cfg(not(feature = "cuda"))]
fn capability(_device: &Device) -> Result<u32> {
    Ok(0)
}

/// Can kernels built for `built` (compute capability x 10) run on a GPU of `device`? candle's
/// quantised kernels are machine code for one architecture (cudaforge builds 9.0 to 12.0 with
/// the `a` suffix, sm_90a to sm_120a, which runs on that compute capability alone; later ones
/// with `f`, and those before 9.0 plain, which run on later minor versions of the same major),
/// and on any other GPU they return garbage without an error: refuse instead, naming the build to
/// use.
pub fn check_architecture(built: Option<u32>, device: u32) -> std::result::Result<(), String> {
    let Some(built) = built else {
        return Ok(());
    };
    let runs = if (90..=120).contains(&built) {
        device == built
    } else {
        device / 10 == built / 10 && device >= built
    };
    if runs || device == 0 {
        return Ok(());
    }
    let v = |c: u32| format!("{}.{}", c / 10, c % 10);
    Err(format!(
        "this treespec's GPU kernels are built for compute capability {} and this GPU has {}; \
         rebuild for it: CUDA_COMPUTE_CAP={device} cargo build --release --features cuda",
        v(built),
        v(device)
    ))
}

/// Runtime settings for a GPU that treespec drives from one stream: no CUDA events recorded per
/// allocation (cudarc does so while event tracking is on, for multi-stream safety), and a memory
/// pool that keeps freed memory for the next step instead of returning it to the driver at every
/// synchronisation.
#[cfg(feature = "cuda")]
fn tune(device: &Device) -> Result<()> {
    use cudarc::driver::{result, sys};
    let Device::Cuda(dev) = device else {
        return Ok(());
    };
    let fail = |what: &str, e: result::DriverError| Error::Device(format!("{what}: {e:?}"));
    // SAFETY: treespec issues all work for a device handle on its one stream (candle's stream of
    // that handle), which is what turning event tracking off requires; the one exception, graph
    // replays on a decoder's high-priority stream (`gpu::step`), is fenced to it by events. A
    // drafter on a second handle of the same GPU shares no buffers with the target.
    unsafe { dev.disable_event_tracking() };
    let ctx = dev.cuda_stream().context().clone();
    ctx.bind_to_thread()
        .map_err(|e| fail("binding the CUDA context", e))?;
    // SAFETY: the device handle comes from the context; the attribute takes a u64.
    unsafe {
        let pool = result::device::get_default_mem_pool(ctx.cu_device())
            .map_err(|e| fail("reading the memory pool", e))?;
        let mut keep = u64::MAX;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut keep as *mut u64 as *mut std::ffi::c_void,
        )
        .map_err(|e| fail("setting the memory pool's release threshold", e))?;
    }
    warm_up_modules(device)
}

/// Load, once at start-up, the candle kernel modules a draft tree's cache compaction uses
/// (`KvCache::keep`: a row gather and a strided copy): the driver compiles a module from PTX on
/// first use, and on an H200 that first use cost a 2-second stall in the middle of an answer
/// (BENCHMARKS.md, section 14).
#[cfg(feature = "cuda")]
fn warm_up_modules(device: &Device) -> Result<()> {
    let t = candle_core::Tensor::zeros((1, 4, 2), candle_core::DType::F32, device)?;
    let idx = candle_core::Tensor::new(&[1u32, 0], device)?;
    let rows = t.index_select(&idx, 1)?;
    t.slice_set(&rows, 1, 0)?;
    device.synchronize()?;
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn tune(_device: &Device) -> Result<()> {
    Ok(())
}

/// The GPU's name as its driver gives it (`None` on the CPU or where the driver cannot say).
pub fn gpu_name(device: &Device) -> Option<String> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = device {
        return dev.cuda_stream().context().name().ok();
    }
    let _ = device;
    None
}

/// A short description of the device for status lines.
pub fn describe(device: &Device) -> String {
    match device {
        Device::Cpu => "cpu".to_string(),
        Device::Cuda(_) => match device.location() {
            candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
            _ => "cuda".to_string(),
        },
        _ => format!("{:?}", device.location()),
    }
}

#[cfg(test)]
mod tests {
    use super::check_architecture;

    #[test]
    fn a_gpu_the_kernels_cannot_run_on_is_refused() {
        assert!(check_architecture(Some(90), 90).is_ok());
        assert!(check_architecture(None, 120).is_ok());
        let why = check_architecture(Some(90), 120).unwrap_err();
        assert!(why.contains("9.0") && why.contains("12.0"), "{why}");
        assert!(why.contains("CUDA_COMPUTE_CAP=120"), "{why}");
        assert!(check_architecture(Some(90), 100).is_err());
        assert!(check_architecture(Some(80), 86).is_ok());
        assert!(check_architecture(Some(86), 80).is_err());
        assert!(check_architecture(Some(120), 90).is_err());
        // sm_100a and sm_120a run on 10.0 and 12.0 alone; sm_121f on later 12.x too.
        assert!(check_architecture(Some(100), 103).is_err());
        assert!(check_architecture(Some(120), 121).is_err());
        assert!(check_architecture(Some(121), 121).is_ok());
    }
}
