//! Build script: with the `cuda` feature, compiles the CUDA sources in `kernels/` to PTX (for
//! the virtual architecture `compute_$CUDA_COMPUTE_CAP`, 80 when unset, which newer GPUs
//! compile at load time) into `$OUT_DIR`, from where `src/gpu` embeds them. Without the feature
//! it does nothing, so CPU builds need no CUDA toolkit.

use std::path::PathBuf;
use std::process::Command;

const KERNELS: &[&str] = &["topk", "attention", "step", "mmvq", "mmtc", "wide"];
/// Headers the kernels include.
const HEADERS: &[&str] = &["pdl.cuh", "stacked.cuh"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    for k in KERNELS {
        println!("cargo:rerun-if-changed=kernels/{k}.cu");
    }
    for h in HEADERS {
        println!("cargo:rerun-if-changed=kernels/{h}");
    }
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // candle-kernels compiles its quantised kernels as SASS for this one architecture: record it,
    // so that the binary can refuse a GPU they cannot run on (src/device.rs).
    let built: String = std::env::var("CUDA_COMPUTE_CAP")
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_digit())
        .collect();
    println!("cargo:rustc-env=TREESPEC_CUDA_COMPUTE_CAP={built}");
    let cap = if built.is_empty() {
        "80".to_string()
    } else {
        built
    };
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    for k in KERNELS {
        let ptx = out.join(format!("{k}.ptx"));
        let status = Command::new(&nvcc)
            .args(["--ptx", "-O3", "-std=c++17", "--expt-relaxed-constexpr"])
            .arg(format!("-arch=compute_{cap}"))
            .arg(format!("kernels/{k}.cu"))
            .arg("-o")
            .arg(&ptx)
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("nvcc failed on kernels/{k}.cu ({s})"),
            Err(e) => panic!(
                "the cuda feature needs nvcc on PATH (or NVCC=...) to build kernels/{k}.cu: {e}"
            ),
        }
    }
}
