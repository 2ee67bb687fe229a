//! Kernel launches of the decoder step, with programmatic dependent launch (PDL) where the GPU
//! and the build allow it: a kernel may then start while the kernel before it on its stream
//! finishes (its blocks are scheduled, its weights prefetched to L2), and waits inside for that
//! kernel's results (`kernels/pdl.cuh` says what each kernel may do before the wait). In a CUDA
//! graph the launch becomes a programmatic edge where the node before it is a kernel; after a
//! copy, or a kernel launched without the attribute, the order stays the plain stream order.
//! cudarc's launch builder has no launch attributes, so this calls `cuLaunchKernelEx` itself.

use cudarc::driver::{sys, CudaFunction, CudaStream, DeviceRepr, DriverError, LaunchConfig};
use std::ffi::c_void;
use std::marker::PhantomData;

/// Whether the step's kernels launch with PDL on a GPU of compute capability `device` (x 10):
/// it needs sm_90 or later, kernels built for compute_90 or later (built for less, their waits
/// are compiled out, and a launch that may overlap its predecessor would race it), and
/// `TREESPEC_PDL` not set to `0`.
pub fn pdl_for(device: u32) -> bool {
    let built = crate::device::built_for().unwrap_or(0);
    device >= 90 && built >= 90 && std::env::var("TREESPEC_PDL").as_deref() != Ok("0")
}

/// Where launches go: a stream, and whether they use PDL there (see [`pdl_for`]).
#[derive(Clone, Copy)]
pub struct LaunchOn<'a> {
    /// The stream.
    pub stream: &'a CudaStream,
    /// Launch with programmatic stream serialisation.
    pub pdl: bool,
}

impl<'a> LaunchOn<'a> {
    /// Launches on `stream`, with PDL where its GPU and this build allow it ([`pdl_for`]).
    pub fn new(stream: &'a CudaStream) -> Self {
        let cc = stream.context().compute_capability();
        let device = cc.map_or(0, |(major, minor)| (major * 10 + minor) as u32);
        LaunchOn {
            stream,
            pdl: pdl_for(device),
        }
    }
}

/// One launch's arguments (each a value that lives as long as the builder), then the launch.
pub struct Launch<'a> {
    func: &'a CudaFunction,
    args: Vec<*mut c_void>,
    _args: PhantomData<&'a ()>,
}

impl<'a> Launch<'a> {
    /// A launch of `func` with no arguments yet.
    pub fn new(func: &'a CudaFunction) -> Self {
        Launch {
            func,
            args: Vec::with_capacity(20),
            _args: PhantomData,
        }
    }

    /// The next kernel argument.
    pub fn arg<T: DeviceRepr>(&mut self, value: &'a T) -> &mut Self {
        self.args.push(value as *const T as *mut c_void);
        self
    }

    /// Launch on `on.stream`, with PDL when `on.pdl`.
    ///
    /// # Safety
    /// The arguments must be the kernel's, in its order, and every buffer they point at must
    /// hold what the kernel reads and writes under `cfg`; with PDL, the kernel must follow
    /// `kernels/pdl.cuh`.
    pub unsafe fn launch(&mut self, on: LaunchOn, cfg: LaunchConfig) -> Result<(), DriverError> {
        let (stream, pdl) = (on.stream, on.pdl);
        stream.context().bind_to_thread()?;
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            // SAFETY: an all-zero union is a valid value of each of its fields.
            value: unsafe { std::mem::zeroed() },
        };
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: u32::from(pdl),
        };
        // SAFETY: the caller's contract; `args` points at values that outlive this call.
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                self.func.cu_function(),
                self.args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
    }
}
