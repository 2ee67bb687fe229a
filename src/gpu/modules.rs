//! treespec's kernel modules: each CUDA source in `kernels/`, compiled by `build.rs` into a
//! fatbin (machine code for sm_90, sm_100 and sm_120 by default, and PTX that a newer GPU's
//! driver compiles at load time), embedded in the binary and loaded once per CUDA context.
//! candle's own loader takes PTX text only, so these are loaded here.

use crate::error::{Error, Result};
use candle_core::CudaDevice;
use cudarc::driver::{CudaFunction, CudaModule};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One of the kernel sources in `kernels/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Module {
    /// `attention.cu`: batch-invariant attention, its combination, the wide-pass kernels.
    Attention,
    /// `gdn.cu`: the Gated DeltaNet layer's convolution and recurrence.
    Gdn,
    /// `mmq.cu`: the K-quant products of one summation contract (dp4a and tensor cores).
    Mmq,
    /// `mmtc.cu`: the tensor-core quantised products.
    Mmtc,
    /// `mmvq.cu`: the dp4a quantised products.
    Mmvq,
    /// `rows.cu`: the decoder step's fused row kernels (norms, RoPE, SwiGLU, quantisation).
    Rows,
    /// `topk.cu`: per-row argmax, top-k and select.
    Topk,
    /// `convert.cu`: Q8_1 rows to f16 for the wide passes.
    Convert,
}

impl Module {
    /// The fatbin `build.rs` made of the source.
    fn image(self) -> &'static [u8] {
        macro_rules! fatbin {
            ($name:literal) => {
                include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".fatbin"))
            };
        }
        match self {
            Module::Attention => fatbin!("attention"),
            Module::Gdn => fatbin!("gdn"),
            Module::Mmq => fatbin!("mmq"),
            Module::Mmtc => fatbin!("mmtc"),
            Module::Mmvq => fatbin!("mmvq"),
            Module::Rows => fatbin!("rows"),
            Module::Topk => fatbin!("topk"),
            Module::Convert => fatbin!("convert"),
        }
    }
}

/// What this build's kernels carry, in words (from `build.rs`: `TREESPEC_CUDA_SASS`, the compute
/// capabilities with machine code, empty for PTX alone; `TREESPEC_CUDA_PTX`, the PTX's): "machine
/// code for compute capability 90,100,120 and PTX for compute_90", or "PTX alone for compute_90".
pub(crate) fn carried() -> String {
    let ptx = env!("TREESPEC_CUDA_PTX");
    match env!("TREESPEC_CUDA_SASS") {
        "" => format!("PTX alone for compute_{ptx}, compiled by the driver at load"),
        list => format!("machine code for compute capability {list} and PTX for compute_{ptx}"),
    }
}

/// Loaded modules, by (CUDA context, module): a module belongs to the context it was loaded in,
/// and the target and a drafter on one GPU share it.
type Loaded = HashMap<(usize, Module), Arc<CudaModule>>;

/// The kernel `name` of `module` on `dev`, the module loaded on first use in `dev`'s context.
pub(crate) fn func(dev: &CudaDevice, module: Module, name: &str) -> Result<CudaFunction> {
    static LOADED: Mutex<Option<Loaded>> = Mutex::new(None);
    let ctx = dev.cuda_stream().context().clone();
    let key = (ctx.cu_ctx() as usize, module);
    let loaded = {
        let mut map = LOADED
            .lock()
            .map_err(|_| Error::Device("the kernel module table was poisoned".into()))?;
        let map = map.get_or_insert_with(HashMap::new);
        match map.get(&key) {
            Some(m) => m.clone(),
            None => {
                let image = cudarc::nvrtc::Ptx::from_binary(module.image().to_vec());
                let m = ctx.load_module(image).map_err(|e| {
                    Error::Device(format!(
                        "loading treespec's {module:?} kernels (this build carries {}): {e:?}",
                        carried()
                    ))
                })?;
                map.insert(key, m.clone());
                m
            }
        }
    };
    loaded
        .load_function(name)
        .map_err(|e| Error::Device(format!("kernel {name} ({module:?} module): {e:?}")))
}
