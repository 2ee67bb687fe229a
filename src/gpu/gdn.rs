//! The Gated DeltaNet layer's convolution and recurrence on the GPU (`kernels/gdn.cu`), for a
//! block of rows each continuing its parent row (a prompt or a chain walked in order, a draft
//! tree one row a thread block over its path) from the committed state, which stays on the
//! device. No row's state is kept: committing a path is one more launch over its last row.
//! The CPU reference is the host recurrence in [`crate::model::gated_delta`], which also holds
//! the bookkeeping (pending blocks, kept paths) both share; its `selftest` compares the two.

use crate::arch::config::LinearAttention;
use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};

/// Widest key head the kernel holds (its state column's entries live in registers).
pub const MAX_K_DIM: usize = 128;
/// Widest value head (four lanes a column, `GDN_MAX_DV` in the kernel).
pub const MAX_V_DIM: usize = 128;
/// Most convolution taps (`GDN_MAX_TAPS`).
pub const MAX_TAPS: usize = 8;

/// Threads of a `gdn_conv` block (`GDN_CONV_THREADS`): a channel each.
pub const CONV_THREADS: u32 = 128;

/// Dynamic shared memory of a `gdn_recur*` launch over a block of `rows` rows: none for a chain
/// (its rows walked in order); a tree row's path, root first, then its length.
pub fn recur_shared(rows: usize, chain: bool) -> u32 {
    match chain {
        true => 0,
        false => 4 * (rows as u32 + 1),
    }
}

/// The recurrence kernel the runtime launches: `gdn_recur`, or with `TREESPEC_GDN_STAGED=1`
/// `gdn_recur_staged` (the same per-row arithmetic, a block's rows staged in shared memory
/// eight at a time and updated with no barrier between them; opt-in: on the H200 it left the
/// 27B shape's 64-row tree pass as it was, BENCHMARKS.md section 41).
pub fn recur_kernel() -> &'static str {
    let staged = match RECUR_OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => std::env::var("TREESPEC_GDN_STAGED").as_deref() == Ok("1"),
    };
    match staged {
        true => "gdn_recur_staged",
        false => "gdn_recur",
    }
}

/// The selftest's choice of recurrence kernel over the switch: 0 none, 1 `gdn_recur`, 2
/// `gdn_recur_staged`.
static RECUR_OVERRIDE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Run `f` with the recurrence kernel `staged` picks (the selftest compares the two bit for bit).
#[cfg(feature = "cuda")]
pub(crate) fn with_recur_kernel<T>(staged: bool, f: impl FnOnce() -> T) -> T {
    use std::sync::atomic::Ordering::Relaxed;
    let before = RECUR_OVERRIDE.swap(1 + staged as u8, Relaxed);
    let out = f();
    RECUR_OVERRIDE.store(before, Relaxed);
    out
}

/// `gdn_conv`'s grid for `rows` rows of a layer of `shape` (blocks of [`CONV_THREADS`]): a block
/// a (row, q or k head, span of value channels).
pub fn conv_grid(rows: usize, shape: &LinearAttention) -> (u32, u32, u32) {
    let spans = 2 * shape.k_heads + (shape.v_heads * shape.v_dim).div_ceil(CONV_THREADS as usize);
    (rows as u32, spans as u32, 1)
}

/// Why the kernels cannot run a layer of `shape`, or `None` when they can.
pub fn unsupported(shape: &LinearAttention) -> Option<String> {
    if shape.k_dim > MAX_K_DIM || shape.v_dim > MAX_V_DIM {
        return Some(format!(
            "key and value heads of {} and {} (the GPU kernel holds up to {MAX_K_DIM} and \
             {MAX_V_DIM})",
            shape.k_dim, shape.v_dim
        ));
    }
    if !(2..=MAX_TAPS).contains(&shape.conv) {
        return Some(format!(
            "a convolution of {} taps (the GPU kernel takes 2 to {MAX_TAPS})",
            shape.conv
        ));
    }
    None
}

/// A layer's small weights on the GPU, f32: the taps `[C, K]`, `-exp(A_log)` and the decay
/// bias per value head, the output norm's weight `[dv]`.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct Weights {
    conv: Tensor,
    a_neg: Tensor,
    dt_bias: Tensor,
    norm: Tensor,
    shape: LinearAttention,
    eps: f32,
}

/// A layer's committed state on the GPU: per value head `[dk, dv]`, and the convolution's last
/// `K - 1` inputs `[K - 1, C]`, oldest first.
#[derive(Debug, Clone)]
pub struct State {
    s: Tensor,
    window: Tensor,
}

/// What a block leaves on the GPU to commit any path of it: its convolution inputs `[n, C]`,
/// the convolution's normalised outputs `[n, C]`, the gate projections `[n, hv]` and the parents
/// (`u32::MAX` for a root).
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct Block {
    c: Tensor,
    u: Tensor,
    a: Tensor,
    b: Tensor,
    parents: Tensor,
    rows: usize,
}

impl Weights {
    /// Upload a layer's weights to `device` when it is a GPU and the kernels hold the shape;
    /// `None` keeps the layer on the host recurrence.
    pub fn upload(
        device: &Device,
        shape: &LinearAttention,
        eps: f32,
        (conv, a_neg, dt_bias, norm): (&[f32], &[f32], &[f32], &[f32]),
    ) -> Result<Option<Self>> {
        if !device.is_cuda() || unsupported(shape).is_some() || host_forced() {
            return Ok(None);
        }
        let put = |v: &[f32]| Tensor::from_slice(v, v.len(), device);
        Ok(Some(Weights {
            conv: put(conv)?,
            a_neg: put(a_neg)?,
            dt_bias: put(dt_bias)?,
            norm: put(norm)?,
            shape: shape.clone(),
            eps,
        }))
    }

    /// The layer's shape.
    pub fn shape(&self) -> &LinearAttention {
        &self.shape
    }

    /// The output norm's epsilon.
    pub fn eps(&self) -> f32 {
        self.eps
    }

    /// The taps `[C, K]`, `-exp(A_log)` and the decay bias `[hv]`, the output norm's weight
    /// `[dv]`, f32 on the GPU (what the decoder step's kernels read).
    pub fn tensors(&self) -> [&Tensor; 4] {
        [&self.conv, &self.a_neg, &self.dt_bias, &self.norm]
    }

    /// The state of an empty sequence.
    pub fn zero_state(&self) -> Result<State> {
        let l = &self.shape;
        let device = self.conv.device();
        Ok(State {
            s: Tensor::zeros(l.v_heads * l.k_dim * l.v_dim, DType::F32, device)?,
            window: Tensor::zeros((l.conv - 1) * l.conv_channels(), DType::F32, device)?,
        })
    }

    /// Run a block: `c` the convolution inputs `[n, C]`, `z`, `a`, `b` the gate projections,
    /// row i continuing `parents[i]` or `start`. Returns the gated outputs `[n, hv * dv]` (before
    /// the out projection), what a commit needs, and the state after the last row when `last`
    /// (a chain).
    pub fn block(
        &self,
        (c, z, a, b): (&Tensor, &Tensor, &Tensor, &Tensor),
        parents: &[Option<usize>],
        start: &State,
        last: bool,
    ) -> Result<(Tensor, Block, Option<State>)> {
        #[cfg(feature = "cuda")]
        if let Device::Cuda(dev) = self.conv.device() {
            return cuda::block(dev, self, (c, z, a, b), parents, start, last);
        }
        let _ = (c, z, a, b, parents, start, last);
        Err(no_gpu())
    }

    /// The state after the block's row `row` (its path from the block's root folded into
    /// `start`).
    pub fn commit(&self, start: &State, block: &Block, row: usize) -> Result<State> {
        if row >= block.rows {
            return Err(Error::InvalidArgument(format!(
                "commit row {row} of a block of {}",
                block.rows
            )));
        }
        #[cfg(feature = "cuda")]
        if let Device::Cuda(dev) = self.conv.device() {
            return cuda::commit(dev, self, start, block, row);
        }
        let _ = start;
        Err(no_gpu())
    }
}

impl State {
    /// The state as host vectors (`s` per value head `[dk, dv]`, the window oldest first), to
    /// compare with the host recurrence.
    pub fn to_host(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        Ok((self.s.to_vec1::<f32>()?, self.window.to_vec1::<f32>()?))
    }
}

fn no_gpu() -> Error {
    Error::Device("the Gated DeltaNet kernels need a CUDA build and a GPU".into())
}

/// `TREESPEC_GDN_HOST=1` keeps Gated DeltaNet layers on the host recurrence on a GPU (to compare
/// the two).
fn host_forced() -> bool {
    std::env::var("TREESPEC_GDN_HOST").as_deref() == Ok("1")
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::{Block, State, Weights};
    use crate::error::{Error, Result};
    use crate::gpu::modules::{func, Module};
    use crate::gpu::{tensor_from_slice, tensor_ptr};
    use candle_core::{CudaDevice, DType, Tensor};
    use cudarc::driver::{LaunchConfig, PushKernelArg};

    /// Lanes a value column (`GDN_PARTS`).
    const PARTS: usize = 4;
    /// Most rows of a block walked as a tree (its paths in 48 KiB of shared memory).
    const MAX_TREE_ROWS: usize = 8192;
    /// Threads of the convolution and window kernels.
    const THREADS: u32 = 256;

    fn driver(e: impl std::fmt::Debug) -> Error {
        crate::gpu::kernel_error("Gated DeltaNet", e)
    }

    /// A contiguous f32 tensor (kept alive by the caller while its address is used).
    fn dense(t: &Tensor) -> Result<Tensor> {
        Ok(t.to_dtype(DType::F32)?.contiguous()?)
    }

    fn alloc(dev: &CudaDevice, len: usize) -> Result<cudarc::driver::CudaSlice<f32>> {
        // SAFETY: every element is written by the kernel that takes it before any read.
        unsafe { dev.cuda_stream().alloc::<f32>(len.max(1)) }.map_err(driver)
    }

    fn ptr(t: &Tensor, dev: &CudaDevice) -> Result<u64> {
        tensor_ptr::<f32>(t, &dev.cuda_stream()).map_err(Error::Device)
    }

    pub(super) fn block(
        dev: &CudaDevice,
        w: &Weights,
        (c, z, a, b): (&Tensor, &Tensor, &Tensor, &Tensor),
        parents: &[Option<usize>],
        start: &State,
        last: bool,
    ) -> Result<(Tensor, Block, Option<State>)> {
        let l = &w.shape;
        let n = parents.len();
        let (ch, hv, vd) = (l.conv_channels(), l.v_heads, l.v_dim);
        let (c, z, a, b) = (dense(c)?, dense(z)?, dense(a)?, dense(b)?);
        let host_parents: Vec<u32> = parents
            .iter()
            .map(|p| p.map_or(u32::MAX, |p| p as u32))
            .collect();
        let parents_t = Tensor::from_vec(host_parents, n, c.device())?;
        let stream = dev.cuda_stream();
        let pp = tensor_ptr::<u32>(&parents_t, &stream).map_err(Error::Device)?;
        // The convolution, SiLU and the q/k norms.
        let u = alloc(dev, n * ch)?;
        let u = tensor_from_slice(dev, u, (n, ch));
        {
            let f = func(dev, Module::Gdn, "gdn_conv")?;
            let (ch_i, taps_i, kh_i, kd_i) =
                (ch as i32, l.conv as i32, l.k_heads as i32, l.k_dim as i32);
            let (cp, wp, convp, up) = (
                ptr(&c, dev)?,
                ptr(&start.window, dev)?,
                ptr(&w.conv, dev)?,
                ptr(&u, dev)?,
            );
            let mut lb = stream.launch_builder(&f);
            let (null, zero, hv_i) = (0u64, 0i32, hv as i32);
            lb.arg(&cp)
                .arg(&ch_i)
                .arg(&wp)
                .arg(&convp)
                .arg(&pp)
                .arg(&up)
                .arg(&ch_i)
                .arg(&taps_i)
                .arg(&kh_i)
                .arg(&kd_i)
                .arg(&null)
                .arg(&null)
                .arg(&zero)
                .arg(&hv_i);
            let cfg = LaunchConfig {
                grid_dim: super::conv_grid(n, l),
                block_dim: (super::CONV_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: [n, C] inputs and outputs, a [K-1, C] window, [C, K] taps, n parents each
            // below its row or u32::MAX, as the kernel takes them.
            unsafe { lb.launch(cfg) }.map_err(driver)?;
        }
        let chain = crate::arch::batch::is_chain(parents);
        let out = tensor_from_slice(dev, alloc(dev, n * hv * vd)?, (n, hv * vd));
        let s_last = match last && chain {
            true => Some(tensor_from_slice(
                dev,
                alloc(dev, hv * l.k_dim * vd)?,
                hv * l.k_dim * vd,
            )),
            false => None,
        };
        let block = Block {
            c,
            u,
            a,
            b,
            parents: parents_t,
            rows: n,
        };
        recur(
            dev,
            w,
            &block,
            (Some(&z), Some(&out)),
            start,
            (chain, 0, n),
            s_last.as_ref().map(|s| (s, n - 1)),
        )?;
        let last = match s_last {
            Some(s) => Some(State {
                s,
                window: window(dev, w, start, &block, n - 1)?,
            }),
            None => None,
        };
        Ok((out, block, last))
    }

    pub(super) fn commit(
        dev: &CudaDevice,
        w: &Weights,
        start: &State,
        block: &Block,
        row: usize,
    ) -> Result<State> {
        let l = &w.shape;
        let s = tensor_from_slice(
            dev,
            alloc(dev, l.v_heads * l.k_dim * l.v_dim)?,
            l.v_heads * l.k_dim * l.v_dim,
        );
        recur(
            dev,
            w,
            block,
            (None, None),
            start,
            (false, row, 1),
            Some((&s, row)),
        )?;
        Ok(State {
            s,
            window: window(dev, w, start, block, row)?,
        })
    }

    /// One `gdn_recur` launch: a chain walked by one block a head, or `count` rows from `first`
    /// each walking its path; outputs (with `z`) into `out`, the state after `state.1` into
    /// `state.0`.
    fn recur(
        dev: &CudaDevice,
        w: &Weights,
        block: &Block,
        (z, out): (Option<&Tensor>, Option<&Tensor>),
        start: &State,
        (chain, first, count): (bool, usize, usize),
        state: Option<(&Tensor, usize)>,
    ) -> Result<()> {
        let l = &w.shape;
        if !chain && block.rows > MAX_TREE_ROWS {
            return Err(Error::InvalidArgument(format!(
                "a Gated DeltaNet tree block of {} rows (the kernel walks up to {MAX_TREE_ROWS})",
                block.rows
            )));
        }
        let stream = dev.cuda_stream();
        let f = func(dev, Module::Gdn, super::recur_kernel())?;
        let null = 0u64;
        let opt = |t: Option<&Tensor>| t.map_or(Ok(null), |t| ptr(t, dev));
        let pp = tensor_ptr::<u32>(&block.parents, &stream).map_err(Error::Device)?;
        let (up, ap, bp) = (
            ptr(&block.u, dev)?,
            ptr(&block.a, dev)?,
            ptr(&block.b, dev)?,
        );
        let (zp, outp) = (opt(z)?, opt(out)?);
        let (anp, dtp, normp, s0p) = (
            ptr(&w.a_neg, dev)?,
            ptr(&w.dt_bias, dev)?,
            ptr(&w.norm, dev)?,
            ptr(&start.s, dev)?,
        );
        let sp = opt(state.map(|s| s.0))?;
        let state_row = state.map_or(-1, |s| s.1 as i32);
        let (chain_i, n_i, first_i) = (chain as i32, block.rows as i32, first as i32);
        let (kh, hv, kd, vd) = (
            l.k_heads as i32,
            l.v_heads as i32,
            l.k_dim as i32,
            l.v_dim as i32,
        );
        let tiled = l.v_tiled as i32;
        let z_stride = hv * vd;
        let mut lb = stream.launch_builder(&f);
        lb.arg(&up)
            .arg(&ap)
            .arg(&bp)
            .arg(&zp)
            .arg(&anp)
            .arg(&dtp)
            .arg(&normp)
            .arg(&s0p)
            .arg(&pp)
            .arg(&outp)
            .arg(&sp)
            .arg(&chain_i)
            .arg(&n_i)
            .arg(&first_i)
            .arg(&state_row)
            .arg(&kh)
            .arg(&hv)
            .arg(&kd)
            .arg(&vd)
            .arg(&tiled)
            .arg(&w.eps)
            .arg(&hv)
            .arg(&z_stride);
        let threads = (PARTS * l.v_dim).next_multiple_of(32) as u32;
        let cfg = LaunchConfig {
            grid_dim: (l.v_heads as u32, if chain { 1 } else { count as u32 }, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: super::recur_shared(block.rows, chain),
        };
        // SAFETY: the block's tensors as `block` made them ([n, C], [n, hv], [n, hv * dv]),
        // [hv, dk, dv] states, parents each below its row or u32::MAX, rows first..first+count
        // below n, dk and dv within the kernel's limits (`unsupported`).
        unsafe { lb.launch(cfg) }.map_err(driver)?;
        Ok(())
    }

    /// The convolution window after `row`.
    fn window(
        dev: &CudaDevice,
        w: &Weights,
        start: &State,
        block: &Block,
        row: usize,
    ) -> Result<Tensor> {
        let l = &w.shape;
        let ch = l.conv_channels();
        let len = (l.conv - 1) * ch;
        let out = tensor_from_slice(dev, alloc(dev, len)?, len);
        let stream = dev.cuda_stream();
        let f = func(dev, Module::Gdn, "gdn_window")?;
        let pp = tensor_ptr::<u32>(&block.parents, &stream).map_err(Error::Device)?;
        let (cp, wp, op) = (
            ptr(&block.c, dev)?,
            ptr(&start.window, dev)?,
            ptr(&out, dev)?,
        );
        let (row_i, ch_i, taps_i) = (row as i32, ch as i32, l.conv as i32);
        let mut lb = stream.launch_builder(&f);
        lb.arg(&cp)
            .arg(&ch_i)
            .arg(&wp)
            .arg(&pp)
            .arg(&op)
            .arg(&row_i)
            .arg(&ch_i)
            .arg(&taps_i);
        let cfg = LaunchConfig {
            grid_dim: ((ch as u32).div_ceil(THREADS), 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: [n, C] inputs, a [K-1, C] window in and out, the row below n.
        unsafe { lb.launch(cfg) }.map_err(driver).map(|_| out)
    }
}
