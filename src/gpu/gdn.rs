//! The Gated DeltaNet layer's convolution and recurrence on the GPU (`kernels/gdn.cu`), for a
//! block of rows each continuing its parent row (a prompt or a chain walked in order, a draft
//! tree walked depth first, [`gdn_walk`]) from the committed state, which stays on the device.
//! No row's state is kept in device memory: committing a path is one more walk, of its rows.
//! The CPU reference is the host recurrence in [`crate::model::gated_delta`], which also holds
//! the bookkeeping (pending blocks, kept paths) both share; its `selftest` compares the two.

use super::gdn_walk;
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

/// How `gdn_tree` walks a block: the kernel (value columns a thread block), its threads, whether
/// a block holds the whole head and so gates and norms the outputs itself (otherwise `gdn_norm`
/// follows), the slots of saved states and the dynamic shared memory ([`gdn_walk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLaunch {
    /// `gdn_tree{cols}`.
    pub kernel: &'static str,
    /// Value columns a thread block.
    pub cols: usize,
    /// Threads a block: four lanes a column.
    pub threads: u32,
    /// One block a head, which gates and norms its outputs.
    pub fused: bool,
    /// Saved states a block holds.
    pub slots: usize,
    /// Dynamic shared memory, bytes.
    pub shared: u32,
}

/// Dynamic shared memory a `gdn_tree` launch takes at most: with the kernel's static 19-27 KiB
/// ([`tree_static`]), within the 99 KiB a block of sm_86, sm_89 and sm_120 cards may opt in to
/// (every tree kernel is given this much, past the 48 KiB a launch gets unasked).
pub const TREE_DYNAMIC: u32 = 64 * 1024;

/// Static shared memory of `gdn_tree{cols}` (its arrays in `kernels/gdn.cu`: two buffers of
/// eight rows' padded q and k, their values and gates, the gates, the norm's sums).
pub fn tree_static(cols: usize) -> u32 {
    let win = 8;
    (4 * (2 * win * 2 * 4 * 36 + 2 * win * cols + 2 * win * 2 + win * 2 + 32)) as u32
}

/// The launch that walks `rows` rows of a layer whose key and value heads are `k_dim` and
/// `v_dim` wide, in order or (`scheduled`) by a schedule read into shared memory, which may
/// branch: 16 value columns a block, or 8 where a tree's saved states would not fit
/// [`TREE_DYNAMIC`] (the widths measured fastest on the 27B's layer, for chains, trees and one
/// row alike: BENCHMARKS.md section 42); the kernel without bound checks where the key heads are
/// [`MAX_K_DIM`] wide. `TREESPEC_GDN_COLS` or the selftest may choose another width (the whole
/// head a block gates and norms its rows itself; the others leave that to `gdn_norm`).
pub fn tree_launch(
    rows: usize,
    scheduled: bool,
    branching: bool,
    (k_dim, v_dim): (usize, usize),
) -> Result<TreeLaunch> {
    let forced = match COLS_OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) {
        0 => std::env::var("TREESPEC_GDN_COLS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok()),
        c => Some(c),
    };
    let first = forced
        .and_then(|c| TREE_COLS.iter().position(|&w| w == c))
        .unwrap_or(2);
    let branching = branching && gdn_walk::slots(rows) > 0;
    let slots = if branching { gdn_walk::slots(rows) } else { 0 };
    let full = usize::from(k_dim == MAX_K_DIM);
    for (&cols, kernels) in TREE_COLS.iter().zip(&TREE_KERNELS).skip(first) {
        let kernel = kernels[full];
        let fused = cols >= v_dim;
        let threads = lane_threads(cols.min(v_dim));
        let entries = if scheduled { rows + 1 } else { 0 };
        let shared = gdn_walk::shared_bytes(slots, threads, entries);
        if shared <= TREE_DYNAMIC {
            return Ok(TreeLaunch {
                kernel,
                cols,
                threads,
                fused,
                slots,
                shared,
            });
        }
    }
    Err(Error::InvalidArgument(format!(
        "a Gated DeltaNet walk of {rows} rows (its saved states and order pass the GPU kernel's {} KiB)",
        TREE_DYNAMIC / 1024
    )))
}

/// The widths `gdn_tree` is built for, widest first (`GDN_TREE` in the kernel).
const TREE_COLS: [usize; 4] = [MAX_V_DIM, 32, 16, 8];
/// Their kernels, in the same order: for any key width, and for key heads of [`MAX_K_DIM`] (the
/// update's bound checks compiled out: the same bits, 25-30% faster on the 27B's layer,
/// BENCHMARKS.md section 43).
pub const TREE_KERNELS: [[&str; 2]; 4] = [
    ["gdn_tree128", "gdn_tree128_full"],
    ["gdn_tree32", "gdn_tree32_full"],
    ["gdn_tree16", "gdn_tree16_full"],
    ["gdn_tree8", "gdn_tree8_full"],
];
/// Threads of a block over `cols` value columns (`gdn_tree`, `gdn_norm`, `gdn_commit`): four
/// lanes a column (`GDN_PARTS`), whole warps.
pub fn lane_threads(cols: usize) -> u32 {
    (4 * cols).next_multiple_of(32) as u32
}

/// The selftest's choice of width over [`tree_launch`]'s (0: none).
static COLS_OVERRIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Run `f` with every walk `cols` columns a block where it fits (the selftest compares widths
/// bit for bit).
#[cfg(feature = "cuda")]
pub(crate) fn with_tree_cols<T>(cols: usize, f: impl FnOnce() -> T) -> T {
    use std::sync::atomic::Ordering::Relaxed;
    let before = COLS_OVERRIDE.swap(cols, Relaxed);
    let out = f();
    COLS_OVERRIDE.store(before, Relaxed);
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
    /// The parents on the host (a commit walks one's path).
    host_parents: Vec<Option<usize>>,
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
pub(crate) mod cuda {
    use super::{gdn_walk, Block, State, Weights};
    use crate::error::{Error, Result};
    use crate::gpu::modules::{func, Module};
    use crate::gpu::{tensor_from_slice, tensor_ptr};
    use candle_core::{CudaDevice, DType, Tensor};
    use cudarc::driver::{LaunchConfig, PushKernelArg};

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
            host_parents: parents.to_vec(),
            rows: n,
        };
        let walk = match chain {
            true => None,
            false => Some(gdn_walk::schedule(parents)?),
        };
        recur(
            dev,
            w,
            &block,
            (Some(&z), Some(&out)),
            start,
            walk.as_deref(),
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
        // The row's path walked as a chain: entry 0 (no slot), then its rows root first.
        let mut path = vec![row as u32];
        let mut at = row;
        while let Some(p) = block.host_parents[at] {
            path.push(p as u32);
            at = p;
        }
        path.push(0);
        path.reverse();
        recur(
            dev,
            w,
            block,
            (None, None),
            start,
            Some(&path),
            Some((&s, row)),
        )?;
        Ok(State {
            s,
            window: window(dev, w, start, block, row)?,
        })
    }

    /// One `gdn_tree` launch over the block's rows in order (`walk` None: a chain) or in the
    /// order of a walk ([`gdn_walk::schedule`], or a committed path: entry 0 zero, then its
    /// rows); outputs (with `z`) into `out`, gated and normed (by `gdn_norm` where the launch
    /// does not), the state after `state.1` into `state.0`.
    fn recur(
        dev: &CudaDevice,
        w: &Weights,
        block: &Block,
        (z, out): (Option<&Tensor>, Option<&Tensor>),
        start: &State,
        walk: Option<&[u32]>,
        state: Option<(&Tensor, usize)>,
    ) -> Result<()> {
        let l = &w.shape;
        let rows = walk.map_or(block.rows, |s| s.len() - 1);
        let branching = walk.is_some_and(gdn_walk::branches);
        let launch = super::tree_launch(rows, walk.is_some(), branching, (l.k_dim, l.v_dim))?;
        let stream = dev.cuda_stream();
        let f = func(dev, Module::Gdn, launch.kernel)?;
        allow_tree_shared(&f)?;
        let null = 0u64;
        let opt = |t: Option<&Tensor>| t.map_or(Ok(null), |t| ptr(t, dev));
        let sched = match walk {
            Some(s) => Some(Tensor::from_slice(s, s.len(), block.u.device())?),
            None => None,
        };
        let sp_walk = match &sched {
            Some(t) => tensor_ptr::<u32>(t, &stream).map_err(Error::Device)?,
            None => null,
        };
        let (up, ap, bp) = (
            ptr(&block.u, dev)?,
            ptr(&block.a, dev)?,
            ptr(&block.b, dev)?,
        );
        let (zp, outp) = (opt(z)?, opt(out)?);
        let zp_fused = if launch.fused { zp } else { null };
        let (anp, dtp, normp, s0p) = (
            ptr(&w.a_neg, dev)?,
            ptr(&w.dt_bias, dev)?,
            ptr(&w.norm, dev)?,
            ptr(&start.s, dev)?,
        );
        let sp = opt(state.map(|s| s.0))?;
        let state_row = state.map_or(-1, |s| s.1 as i32);
        let (n_i, slots_i) = (rows as i32, launch.slots as i32);
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
            .arg(&zp_fused)
            .arg(&anp)
            .arg(&dtp)
            .arg(&normp)
            .arg(&s0p)
            .arg(&sp_walk)
            .arg(&outp)
            .arg(&sp)
            .arg(&n_i)
            .arg(&slots_i)
            .arg(&state_row)
            .arg(&kh)
            .arg(&hv)
            .arg(&kd)
            .arg(&vd)
            .arg(&tiled)
            .arg(&w.eps)
            .arg(&hv)
            .arg(&z_stride);
        let cfg = LaunchConfig {
            grid_dim: (l.v_heads as u32, l.v_dim.div_ceil(launch.cols) as u32, 1),
            block_dim: (launch.threads, 1, 1),
            shared_mem_bytes: launch.shared,
        };
        // SAFETY: the block's tensors as `block` made them ([n, C], [n, hv], [n, hv * dv]),
        // [hv, dk, dv] states, a walk of rows below n each after its parent (gdn_walk), its
        // slots and schedule in `launch.shared`, dk and dv within the kernel's limits
        // (`unsupported`).
        unsafe { lb.launch(cfg) }.map_err(driver)?;
        if let (false, Some(out), Some(z)) = (launch.fused, out, z) {
            norm(dev, w, out, z, block.rows)?;
        }
        Ok(())
    }

    /// Let a `gdn_tree` kernel take [`super::TREE_DYNAMIC`] bytes of dynamic shared memory.
    pub(crate) fn allow_tree_shared(f: &cudarc::driver::CudaFunction) -> Result<()> {
        let attr = cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        f.set_attribute(attr, super::TREE_DYNAMIC as i32)
            .map_err(driver)
    }

    /// `gdn_norm` over the raw outputs `out` `[n, hv * dv]` of `n` rows, in place.
    fn norm(dev: &CudaDevice, w: &Weights, out: &Tensor, z: &Tensor, n: usize) -> Result<()> {
        let l = &w.shape;
        let stream = dev.cuda_stream();
        let f = func(dev, Module::Gdn, "gdn_norm")?;
        let (op, zp, np) = (ptr(out, dev)?, ptr(z, dev)?, ptr(&w.norm, dev)?);
        let (hv, vd) = (l.v_heads as i32, l.v_dim as i32);
        let z_stride = hv * vd;
        let mut lb = stream.launch_builder(&f);
        lb.arg(&op)
            .arg(&zp)
            .arg(&np)
            .arg(&hv)
            .arg(&vd)
            .arg(&w.eps)
            .arg(&z_stride);
        let cfg = LaunchConfig {
            grid_dim: (n as u32, l.v_heads as u32, 1),
            block_dim: (super::lane_threads(l.v_dim), 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: out and z hold n rows of hv * dv; the norm's weight dv.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_takes_sixteen_columns_a_block_where_its_saved_states_fit() {
        for (rows, scheduled) in [(1, true), (64, false), (4096, false)] {
            let l = tree_launch(rows, scheduled, false, (128, 128)).unwrap();
            assert_eq!(
                (l.kernel, l.threads, l.fused, l.slots),
                ("gdn_tree16_full", 64, false, 0)
            );
            assert_eq!(l.shared, if scheduled { 8 } else { 0 });
        }
        let l = tree_launch(64, true, true, (128, 128)).unwrap();
        assert_eq!(
            (l.kernel, l.cols, l.fused, l.slots),
            ("gdn_tree16_full", 16, false, 5)
        );
        assert_eq!(l.shared, 5 * 32 * 64 * 4 + 4 * 65);
        // A narrow head: the whole head in one block of the threads its columns need.
        let l = tree_launch(3, false, false, (24, 16)).unwrap();
        assert_eq!((l.kernel, l.threads, l.fused), ("gdn_tree16", 64, true));
    }

    #[test]
    fn every_width_fits_the_smallest_opt_in() {
        // sm_86, sm_89 and sm_120 give a block at most 99 KiB; ptxas reports gdn_tree16's
        // static shared memory as 19776 bytes.
        assert_eq!(tree_static(16), 19776);
        for cols in TREE_COLS {
            assert!(tree_static(cols) + TREE_DYNAMIC <= 99 * 1024, "{cols}");
        }
    }

    #[test]
    fn a_large_tree_takes_a_narrower_slice_and_a_larger_none() {
        let l = tree_launch(1024, true, true, (128, 128)).unwrap();
        assert_eq!((l.cols, l.slots), (8, 9));
        assert!(l.shared <= TREE_DYNAMIC);
        let e = tree_launch(16384, true, true, (128, 128))
            .unwrap_err()
            .to_string();
        assert!(e.contains("16384 rows"), "{e}");
    }
}
