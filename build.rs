//! Build script: with the `cuda` feature, compiles each CUDA source in `kernels/` into a fatbin
//! in `$OUT_DIR`, from where `src/gpu/modules.rs` embeds it. A fatbin carries machine code (SASS)
//! for the GPUs treespec is for, so they load it without compiling, and PTX for the virtual
//! architecture `compute_$CUDA_COMPUTE_CAP` (80 when unset), which a newer GPU's driver compiles
//! at load time:
//!
//! - `TREESPEC_CUDA_SASS`: the compute capabilities to carry machine code for, comma-separated,
//!   from 80 (the tensor-core kernels' int8 MMA); by default Hopper, datacentre Blackwell and
//!   workstation Blackwell (`90,100,120`), and the build's own `CUDA_COMPUTE_CAP` (from 80) when
//!   it is none of them, less any the installed nvcc cannot compile for (sm_100 and sm_120 need
//!   CUDA 12.8), with a warning; `none`: PTX alone (a quick build, and the path a GPU newer than
//!   the build takes).
//!
//! Without the feature it does nothing, so CPU builds need no CUDA toolkit.

use std::path::{Path, PathBuf};
use std::process::Command;

const KERNELS: &[&str] = &[
    "topk",
    "attention",
    "rows",
    "mmvq",
    "mmtc",
    "mmq",
    "convert",
    "gdn",
];
/// Headers the kernels include.
const HEADERS: &[&str] = &["cp_async.cuh", "pdl.cuh", "stacked.cuh"];
/// Machine code carried unless `TREESPEC_CUDA_SASS` says otherwise: sm_90 (H100, H200),
/// sm_100 (B200), sm_120 (RTX 50xx, RTX PRO 6000).
const SASS_DEFAULT: &[u32] = &[90, 100, 120];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=TREESPEC_CUDA_SASS");
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
    let cap: u32 = built.parse().unwrap_or(80);
    println!("cargo:rustc-env=TREESPEC_CUDA_PTX={cap}");
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    let sass = compilable(&nvcc, sass_list(cap));
    println!(
        "cargo:rustc-env=TREESPEC_CUDA_SASS={}",
        sass.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut gencode: Vec<String> = sass
        .iter()
        .map(|c| format!("-gencode=arch=compute_{c},code=sm_{c}"))
        .collect();
    gencode.push(format!("-gencode=arch=compute_{cap},code=compute_{cap}"));
    // One nvcc a source, all at once (the biggest, mmtc, takes most of the time).
    let jobs: Vec<_> = KERNELS
        .iter()
        .map(|k| {
            let (nvcc, gencode, out) = (nvcc.clone(), gencode.clone(), out.clone());
            std::thread::spawn(move || compile(&nvcc, k, &gencode, &out))
        })
        .collect();
    for job in jobs {
        if let Err(why) = job.join().expect("an nvcc thread panicked") {
            panic!("{why}");
        }
    }
}

/// The compute capabilities to carry machine code for (see the header).
fn sass_list(cap: u32) -> Vec<u32> {
    let list = std::env::var("TREESPEC_CUDA_SASS").unwrap_or_default();
    match list.trim() {
        "" => {
            let mut all = SASS_DEFAULT.to_vec();
            if cap >= 80 && !all.contains(&cap) {
                all.insert(0, cap);
            }
            all
        }
        "none" => vec![],
        list => list
            .split(',')
            .map(|c| match c.trim().parse::<u32>() {
                Ok(c) if c >= 80 => c,
                _ => panic!(
                    "TREESPEC_CUDA_SASS: {c:?} is not a compute capability from 80 (e.g. 90,100,120, or none)"
                ),
            })
            .collect(),
    }
}

/// `wanted` less the architectures `nvcc --list-gpu-code` does not name (an older toolkit), each
/// dropped with a warning; all of `wanted` when nvcc cannot list them.
fn compilable(nvcc: &str, wanted: Vec<u32>) -> Vec<u32> {
    let Ok(out) = Command::new(nvcc).arg("--list-gpu-code").output() else {
        return wanted;
    };
    if !out.status.success() {
        return wanted;
    }
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    let known: Vec<&str> = listed.split_whitespace().collect();
    wanted
        .into_iter()
        .filter(|c| {
            let ok = known.contains(&format!("sm_{c}").as_str());
            if !ok {
                println!(
                    "cargo:warning=this nvcc cannot compile for sm_{c}: treespec's kernels carry no machine code for it (CUDA 12.8 or later can)"
                );
            }
            ok
        })
        .collect()
}

/// `kernels/{kernel}.cu` to `{out}/{kernel}.fatbin`.
fn compile(nvcc: &str, kernel: &str, gencode: &[String], out: &Path) -> Result<(), String> {
    let fatbin = out.join(format!("{kernel}.fatbin"));
    // Output kept per source, so that the sources' messages do not interleave.
    let output = Command::new(nvcc)
        .args(["--fatbin", "-O3", "-std=c++17", "--expt-relaxed-constexpr"])
        .args(gencode)
        .arg(format!("kernels/{kernel}.cu"))
        .arg("-o")
        .arg(&fatbin)
        .output();
    match output {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "nvcc failed on kernels/{kernel}.cu ({}; {}; TREESPEC_CUDA_SASS picks the machine code):\n{}",
            o.status,
            gencode.join(" "),
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => Err(format!(
            "the cuda feature needs nvcc on PATH (or NVCC=...) to build kernels/{kernel}.cu: {e}"
        )),
    }
}
