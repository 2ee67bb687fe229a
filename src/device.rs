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
    let device = Device::new_cuda(ordinal)
        .map_err(|e| Error::Device(format!("cannot open cuda:{ordinal}: {e}")))?;
    tune(&device)?;
    Ok(device)
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
    // SAFETY: treespec issues all work for a device on its one stream (candle's default stream
    // of that device), which is what turning event tracking off requires.
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
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn tune(_device: &Device) -> Result<()> {
    Ok(())
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
