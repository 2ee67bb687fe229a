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
    Device::new_cuda(ordinal).map_err(|e| Error::Device(format!("cannot open cuda:{ordinal}: {e}")))
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
