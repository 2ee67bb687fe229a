//! The quantised matrix products of the GPU decoder step (`gpu::step`): which kernel takes a
//! pass, on dp4a (`kernels/mmvq.cu`, [`Dp4a`]) or tensor cores (`kernels/mmtc.cu`, [`Mmtc`]; the
//! K-quant family of one summation contract, for targets that verify drafts and hybrid models,
//! is [`crate::gpu::mmq`]),
//! of one matrix or a [`Stack`] of up to three; their launches; and their checks and timings
//! (`treespec selftest`, `treespec bench --products`). Every kernel computes a row bit for bit
//! as the others of its family do, so a pass may take any of them (batch invariance).

use super::launch::{Launch, LaunchOn};
use super::step::Mat;
use crate::error::{Error, Result};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use cudarc::driver::{sys, CudaFunction, CudaGraph, CudaStream, DevicePtr, LaunchConfig};
use std::sync::Arc;

use crate::gpu::modules::{func, Module};
/// Bytes of a Q8_1 block of 32 values.
pub(super) const Q8_BYTES: usize = 36;
/// Activation rows padded to this multiple (llama.cpp's MATRIX_ROW_PADDING).
pub(super) const ROW_PAD: usize = 512;

/// A driver error of the decoder step's kernels.
pub(super) fn driver(e: impl std::fmt::Debug) -> Error {
    crate::gpu::kernel_error("decoder step", e)
}

/// Q8_1 blocks of an activation row of `width` values, padded to [`ROW_PAD`].
pub(super) fn qblocks(width: usize) -> usize {
    width.div_ceil(ROW_PAD) * ROW_PAD / 32
}

/// Up to three weights of one format and row length whose products one launch computes,
/// output rows back to back, as the kernels take them (`kernels/stacked.cuh`): the three
/// pointers and the rows where the second and the third start.
pub(crate) struct Stack {
    pub(super) ptrs: [u64; 3],
    pub(super) split: [i32; 2],
    pub(super) rows: usize,
    pub(super) cols: usize,
}

impl Stack {
    /// One matrix (a stack whose second and third start past its last row).
    pub(super) fn one(ptr: u64, rows: usize, cols: usize) -> Self {
        Stack {
            ptrs: [ptr; 3],
            split: [rows as i32; 2],
            rows,
            cols,
        }
    }

    /// The stack of one to three matrices, in that order.
    pub(super) fn of(mats: &[&Mat]) -> Result<Self> {
        match mats {
            [a] => Ok(Stack::one(a.ptr, a.rows, a.cols)),
            [a, b] => Ok(Stack {
                ptrs: [a.ptr, b.ptr, b.ptr],
                // No row reaches the third's start.
                split: [a.rows as i32, (a.rows + b.rows) as i32],
                rows: a.rows + b.rows,
                cols: a.cols,
            }),
            [a, b, c] => Ok(Stack {
                ptrs: [a.ptr, b.ptr, c.ptr],
                split: [a.rows as i32, (a.rows + b.rows) as i32],
                rows: a.rows + b.rows + c.rows,
                cols: a.cols,
            }),
            _ => Err(Error::Device(format!(
                "a stacked product of {} matrices (one to three)",
                mats.len()
            ))),
        }
    }

    /// Whether the stack is one matrix (its second starts past its last row).
    pub(super) fn is_one(&self) -> bool {
        self.split[0] as usize == self.rows
    }

    /// The kernel arguments a stack is: the three pointers, then the two split rows.
    pub(super) fn args<'a>(&'a self, b: &mut Launch<'a>) {
        b.arg(&self.ptrs[0])
            .arg(&self.ptrs[1])
            .arg(&self.ptrs[2])
            .arg(&self.split[0])
            .arg(&self.split[1]);
    }
}

/// The dp4a product (`kernels/mmvq.cu`) with `kernel` of `stack` with `n` Q8_1 activation rows
/// (`yq` blocks apart, padded to a multiple of four for [`Dp4a::Chunks`]) into `n` rows of `dst`
/// (`dst_stride` floats apart), output row r of the stack at `dst + r`: `f` is the entry point
/// for one matrix (`mmvq_<tag>_<kernel>`) when the stack is one, else `mmvq_<tag>_<kernel>_
/// stacked` (`kernels/stacked.cuh`; each row count even, for the chunked kernel's row pairs).
pub(super) fn launch_mmvq(
    on: LaunchOn,
    f: &CudaFunction,
    kernel: Dp4a,
    stack: &Stack,
    (y, yq): (u64, usize),
    (dst, dst_stride): (u64, usize),
    n: usize,
) -> Result<()> {
    // A dependent launch only where the kernel waits (Dp4a::dependent).
    let on = LaunchOn {
        pdl: on.pdl && kernel.dependent(),
        ..on
    };
    let mut b = Launch::new(f);
    if stack.is_one() {
        b.arg(&stack.ptrs[0]);
    } else {
        stack.args(&mut b);
    }
    let (rows, cols) = (stack.rows, stack.cols);
    let (cols_i, rows_i, sy, sd) = (cols as i32, rows as i32, yq as i32, dst_stride as i32);
    let chunks = n.div_ceil(kernel.activation_rows()) as i32;
    b.arg(&y)
        .arg(&dst)
        .arg(&cols_i)
        .arg(&rows_i)
        .arg(&sy)
        .arg(&sd)
        .arg(&chunks);
    let cfg = LaunchConfig {
        grid_dim: (rows.div_ceil(kernel.weight_rows()) as u32, 1, 1),
        block_dim: (32, kernel.warps(), 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the weights hold rows x cols (padded as candle pads them; a stack's rows split
    // as `split` says, every row count even, so a chunked block's two rows lie in one matrix),
    // y and dst hold the activation rows padded to a multiple of the kernel's activation rows.
    unsafe { b.launch(on, cfg) }.map_err(driver)?;
    Ok(())
}

/// The tensor-core product (`kernels/mmtc.cu`) of a stack of `rows x cols` weights (rows a
/// multiple of 16 each, cols of 256) with `n` Q8_1 activation rows (`yq` blocks apart), into `n`
/// rows of `dst` (`dst_stride` floats apart) with `kernel`: blocks of 16 weight rows by
/// `8 * tiles` activation rows, a row's 64-value units spread over [`mmtc_warps`] warps,
/// which depends only on the row length (so a row's sum order never depends on `n`); the
/// dp4a kernels go to [`launch_mmtc_rows`].
pub(super) fn launch_mmtc(
    on: LaunchOn,
    f: &CudaFunction,
    stack: &Stack,
    kernel: Mmtc,
    (y, yq): (u64, usize),
    (dst, dst_stride): (u64, usize),
    n: usize,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let (rows, cols) = (stack.rows, stack.cols);
    debug_assert!(
        rows.is_multiple_of(16) && stack.split.iter().all(|&r| r % 16 == 0),
        "the tile kernels take a stack's matrices in blocks of 16 rows"
    );
    let warps = mmtc_warps(cols);
    let tiles = match kernel {
        Mmtc::Tiles(tiles) => tiles,
        Mmtc::Rows { rows: nr, .. } => {
            return launch_mmtc_rows(on, f, stack, (warps, nr), (y, yq), (dst, dst_stride), n)
        }
        Mmtc::Staged => return launch_mmtc_staged(on, f, stack, (y, yq), (dst, dst_stride), n),
        Mmtc::Warp { rows: nr, .. } => {
            return launch_mmtc_warp(on, f, stack, nr, (y, yq), (dst, dst_stride), n)
        }
    };
    let shared = warps * (tiles * 8 * 16 * 4) as u32;
    allow_shared(f, shared as usize, 0)?;
    let mut b = Launch::new(f);
    let (cols_i, sy, sd, n_i) = (cols as i32, yq as i32, dst_stride as i32, n as i32);
    stack.args(&mut b);
    b.arg(&y).arg(&dst).arg(&cols_i).arg(&sy).arg(&sd).arg(&n_i);
    let cfg = LaunchConfig {
        grid_dim: ((rows / 16) as u32, n.div_ceil(8 * tiles) as u32, 1),
        block_dim: (32, warps, 1),
        shared_mem_bytes: shared,
    };
    // SAFETY: the weight holds rows x cols (rows a multiple of 16, cols of 256), y holds n
    // activation rows of yq Q8_1 blocks (only rows below n are read), dst n rows of
    // dst_stride (only rows below n are written).
    unsafe { b.launch(on, cfg) }.map_err(driver)?;
    Ok(())
}

/// Activation rows a block of the staged kernel (`mmtc_<tag>_staged`) takes (`ST_ROWS`).
const STAGED_ROWS: usize = 64;

/// Blocks the staged kernel's launch aims at: two waves of the H200's 132 multiprocessors.
const STAGED_BLOCKS: usize = 264;

/// The staged tensor-core kernel (`mmtc_<tag>_staged`): blocks of `16 * wm` weight rows by
/// [`STAGED_ROWS`] activation rows, `wm` (warps along the weight rows: 4, 2 or 1) the largest
/// that still gives [`STAGED_BLOCKS`] blocks. Every warp walks the whole row, so `wm` changes
/// no sum.
fn launch_mmtc_staged(
    on: LaunchOn,
    f: &CudaFunction,
    stack: &Stack,
    (y, yq): (u64, usize),
    (dst, dst_stride): (u64, usize),
    n: usize,
) -> Result<()> {
    let rows = stack.rows;
    let tiles = n.div_ceil(STAGED_ROWS);
    let wm = [4usize, 2, 1]
        .into_iter()
        .find(|wm| rows.div_ceil(16 * wm) * tiles >= STAGED_BLOCKS)
        .unwrap_or(1);
    let cfg = LaunchConfig {
        grid_dim: (rows.div_ceil(16 * wm) as u32, tiles as u32, 1),
        block_dim: (32, 2 * wm as u32, 1),
        shared_mem_bytes: 0,
    };
    // Warps past `rows` compute nothing.
    launch_with_rows(on, f, stack, (y, yq), (dst, dst_stride), n, cfg)
}

/// The warp-a-row kernels (`mmtc_<tag>_warp*`) for `n` activation rows, at most `nr`: blocks
/// of eight warps, a weight row each (four where that gives too few blocks for the GPU), the
/// rows staged in each block's shared memory (48 bytes a Q8_1 block).
fn launch_mmtc_warp(
    on: LaunchOn,
    f: &CudaFunction,
    stack: &Stack,
    nr: usize,
    (y, yq): (u64, usize),
    (dst, dst_stride): (u64, usize),
    n: usize,
) -> Result<()> {
    if n > nr || mmtc_warps(stack.cols) != WARP_SPLITS {
        return Err(Error::Device(format!(
            "the {nr}-row warp-a-row kernel given {n} activation rows of {} values",
            stack.cols
        )));
    }
    let per_block = if stack.rows >= 4096 { 8 } else { 4 };
    let shared = staged_bytes(nr, stack.cols);
    allow_shared(f, shared, 0)?;
    let shared = shared as u32;
    let cfg = LaunchConfig {
        grid_dim: (stack.rows.div_ceil(per_block) as u32, 1, 1),
        block_dim: (32, per_block as u32, 1),
        shared_mem_bytes: shared,
    };
    launch_with_rows(on, f, stack, (y, yq), (dst, dst_stride), n, cfg)
}

/// Launch `f`, a product kernel whose arguments are the stack's, the activations, the output,
/// the row length, the stack's row count, the strides and `n` (`mmtc_<tag>_row*`,
/// `mmtc_<tag>_staged`), as `cfg` says.
fn launch_with_rows(
    on: LaunchOn,
    f: &CudaFunction,
    stack: &Stack,
    (y, yq): (u64, usize),
    (dst, dst_stride): (u64, usize),
    n: usize,
    cfg: LaunchConfig,
) -> Result<()> {
    let mut b = Launch::new(f);
    let (cols_i, rows_i) = (stack.cols as i32, stack.rows as i32);
    let (sy, sd, n_i) = (yq as i32, dst_stride as i32, n as i32);
    stack.args(&mut b);
    b.arg(&y).arg(&dst).arg(&cols_i).arg(&rows_i);
    b.arg(&sy).arg(&sd).arg(&n_i);
    // SAFETY: the weight holds rows x cols (cols a multiple of 256), y n activation rows of
    // cols / 32 Q8_1 blocks yq blocks apart (only rows below n are read), dst n rows of
    // dst_stride floats (only rows below n, columns below `rows`, are written).
    unsafe { b.launch(on, cfg) }.map_err(driver)?;
    Ok(())
}

/// The dp4a kernels (`mmtc_<tag>_row`, `mmtc_<tag>_rows<N>`) for `n` activation rows, at most
/// `nr` (`yq` blocks apart, into rows of `dst` `dst_stride` floats apart): blocks of
/// `warps x r` lanes, a lane for each of a weight row's `warps` splits, `r` weight rows a
/// block, the `nr` activation rows staged in each block's shared memory (48 bytes a Q8_1 block).
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_mmtc_rows(
    on: LaunchOn,
    f: &CudaFunction,
    stack: &Stack,
    (warps, nr): (u32, usize),
    (y, yq): (u64, usize),
    (dst, dst_stride): (u64, usize),
    n: usize,
) -> Result<()> {
    if n > nr {
        return Err(Error::Device(format!(
            "a product of {n} activation rows given the {nr}-row kernel"
        )));
    }
    let (rows, cols) = (stack.rows, stack.cols);
    // Rows a block: enough blocks to spread a matrix over every SM (~256 blocks), at least
    // 64 lanes to stage the activations, at most 256 lanes.
    let per_block = (rows / 256)
        .max(64usize.div_ceil(warps as usize))
        .min((256 / warps) as usize) as u32;
    let shared = staged_bytes(nr, cols);
    // The kernel's static shared memory: 1 KiB a row for the reduction.
    allow_shared(f, shared, dp4a_rows_shared(nr, cols) - shared)?;
    let shared = shared as u32;
    let cfg = LaunchConfig {
        grid_dim: (rows.div_ceil(per_block as usize) as u32, 1, 1),
        block_dim: (warps, per_block, 1),
        shared_mem_bytes: shared,
    };
    launch_with_rows(on, f, stack, (y, yq), (dst, dst_stride), n, cfg)
}

/// `n` random activation rows of `cols` values quantised to Q8_1 as the kernels of
/// `kernels/rows.cu` do (d = amax / 127, half d, half sum, 32 int8), rows `yq` blocks apart
/// (the blocks past `cols / 32` zero): the bytes, and the values they stand for (`q * d`).
pub(crate) fn random_q8_1(
    rng: &mut crate::gpu::Uniform,
    n: usize,
    cols: usize,
    yq: usize,
) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = vec![0u8; n * yq * Q8_BYTES];
    let mut xq = vec![0f32; n * cols];
    for c in 0..n {
        for b in 0..cols / 32 {
            let x: Vec<f32> = (0..32).map(|_| rng.next() * 4.0 - 2.0).collect();
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let d16 = half::f16::from_f32(d);
            let sum = half::f16::from_f32(x.iter().sum());
            let blk = &mut bytes[(c * yq + b) * Q8_BYTES..][..Q8_BYTES];
            blk[..2].copy_from_slice(&d16.to_le_bytes());
            blk[2..4].copy_from_slice(&sum.to_le_bytes());
            for (i, v) in x.iter().enumerate() {
                let qv = if d == 0.0 { 0.0 } else { (v / d).round() };
                blk[4 + i] = qv as i8 as u8;
                xq[c * cols + b * 32 + i] = qv * d16.to_f32();
            }
        }
    }
    (bytes, xq)
}

mod bench;
mod selftest;
pub use bench::bench_products;
pub(crate) use selftest::{selftest_products, selftest_stacked};

/// A kernel of `kernels/mmvq.cu`: every one computes a row bit for bit as the others do
/// (one order of the same float sums), so a pass may take any of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Dp4a {
    /// One activation row, one weight row a block of four warps (`_x1`: candle's kernel).
    Block,
    /// One activation row, one weight row a warp, eight a block (`_w`; `_wp` when
    /// `dependent`): for short rows, where `Block` leaves most of its threads idle.
    Warps { dependent: bool },
    /// Chunks of four activation rows, two weight rows a block (`_x4`).
    Chunks,
}

impl Dp4a {
    /// Every kernel the runtime may pick.
    pub(super) const ALL: [Dp4a; 4] = [
        Dp4a::Block,
        Dp4a::Warps { dependent: false },
        Dp4a::Warps { dependent: true },
        Dp4a::Chunks,
    ];

    /// [`Dp4a::for_pass`] makes the one-row-a-warp kernel a dependent launch up to this
    /// many blocks (eight rows each): a PDL wait costs ~100 cycles a block (BENCHMARKS.md
    /// section 18); in practice this keeps only the LM head (~19,000 blocks) without one.
    /// Untuned: `warps-wait` (always) measured alike on the H200 (section 19).
    pub(super) const DEPENDENT_BLOCKS: usize = 2048;

    /// The kernel for `n` activation rows of a stack of `rows x cols` weights of format
    /// `tag`: four rows at a time beyond one; for one row, one weight row a warp where a
    /// thread of [`Dp4a::Block`] would make at most two passes of its loop over the row
    /// (each lane of the warp kernel does four threads' work), unless `TREESPEC_DP4A_ROW`
    /// says otherwise.
    pub(super) fn for_pass(tag: &str, rows: usize, cols: usize, n: usize) -> Dp4a {
        if n > 1 {
            return Dp4a::Chunks;
        }
        let choice = one_row_choice();
        match choice {
            "block" => Dp4a::Block,
            _ => match dp4a_units(tag) {
                Some((qk, per_iter)) if cols / qk <= 2 * per_iter => {
                    let dependent = match choice {
                        "warps-nowait" => false,
                        "warps-wait" => true,
                        _ => rows.div_ceil(8) <= Self::DEPENDENT_BLOCKS,
                    };
                    Dp4a::Warps { dependent }
                }
                _ => Dp4a::Block,
            },
        }
    }

    /// The entry point's suffix in `kernels/mmvq.cu`.
    pub(super) fn suffix(self) -> &'static str {
        match self {
            Dp4a::Block => "x1",
            Dp4a::Warps { dependent: false } => "w",
            Dp4a::Warps { dependent: true } => "wp",
            Dp4a::Chunks => "x4",
        }
    }

    /// Activation rows a launch takes at a time.
    pub(super) fn activation_rows(self) -> usize {
        match self {
            Dp4a::Chunks => 4,
            _ => 1,
        }
    }

    /// Weight rows a block takes.
    pub(super) fn weight_rows(self) -> usize {
        match self {
            Dp4a::Block => 1,
            Dp4a::Warps { .. } => 8,
            Dp4a::Chunks => 2,
        }
    }

    /// Warps a block.
    pub(super) fn warps(self) -> u32 {
        match self {
            Dp4a::Warps { .. } => 8,
            _ => 4,
        }
    }

    /// Whether the kernel has a PDL wait, and so may be a dependent launch.
    pub(super) fn dependent(self) -> bool {
        matches!(self, Dp4a::Warps { dependent: true })
    }
}

/// `(values a quantised block, quantised blocks the one-row kernel's 128 threads cover in one
/// pass of their loop)` of the formats `kernels/mmvq.cu` has (`qk` and `vdr * 128 / qi`).
pub(super) fn dp4a_units(tag: &str) -> Option<(usize, usize)> {
    match tag {
        "q4_0" | "q4_1" | "q5_0" | "q5_1" => Some((32, 64)),
        "q8_0" => Some((32, 32)),
        "q2_k" | "q3_k" | "q4_k" | "q5_k" => Some((256, 8)),
        "q6_k" => Some((256, 4)),
        _ => None,
    }
}

/// `TREESPEC_DP4A_ROW`: `block`, `warps-nowait` / `warps-wait` (one row a warp,
/// never / always a dependent launch) or (any other value, or unset) `warps`.
pub(super) fn one_row_choice() -> &'static str {
    static CHOICE: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    CHOICE.get_or_init(|| match std::env::var("TREESPEC_DP4A_ROW").as_deref() {
        Ok("block") => "block",
        Ok("warps-nowait") => "warps-nowait",
        Ok("warps-wait") => "warps-wait",
        _ => "warps",
    })
}

/// The dp4a product kernel `kernel` for weights of format `tag` (of up to three stacked
/// matrices when `stacked`).
pub(super) fn mmvq_func(
    dev: &candle_core::CudaDevice,
    tag: &str,
    kernel: Dp4a,
    stacked: bool,
) -> Result<CudaFunction> {
    let suffix = kernel.suffix();
    let name = match stacked {
        true => format!("mmvq_{tag}_{suffix}_stacked"),
        false => format!("mmvq_{tag}_{suffix}"),
    };
    func(dev, Module::Mmvq, &name)
}

/// The tensor-core product kernel `kernel` for weights of format `tag`.
pub(super) fn mmtc_func(
    dev: &candle_core::CudaDevice,
    tag: &str,
    kernel: Mmtc,
) -> Result<CudaFunction> {
    let name = match kernel {
        Mmtc::Rows { rows: 1, long } => format!("mmtc_{tag}_row{}", ["", "_long"][long as usize]),
        Mmtc::Rows { rows, long } => {
            format!("mmtc_{tag}_rows{rows}{}", ["", "_long"][long as usize])
        }
        Mmtc::Warp { units, rows: 1 } => format!("mmtc_{tag}_warp{units}"),
        Mmtc::Warp { units, rows } => format!("mmtc_{tag}_warp{units}_rows{rows}"),
        Mmtc::Tiles(tiles) => format!("mmtc_{tag}_t{tiles}"),
        Mmtc::Staged => format!("mmtc_{tag}_staged"),
    };
    func(dev, Module::Mmtc, &name)
}

/// The launches `launch` makes on `stream`, captured as a CUDA graph (capture ends even
/// when a launch fails).
pub(super) fn capture(
    stream: &Arc<CudaStream>,
    launch: impl FnOnce() -> Result<()>,
) -> Result<CudaGraph> {
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(driver)?;
    let launched = launch();
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .map_err(driver);
    launched?;
    graph?.ok_or_else(|| Error::Device("empty CUDA graph".into()))
}

/// Microseconds a replay of `graph` takes on the GPU, over `times` replays back to back.
pub(super) fn replay_micros(
    stream: &Arc<CudaStream>,
    graph: &CudaGraph,
    times: usize,
) -> Result<f64> {
    stream.synchronize().map_err(driver)?;
    let t0 = std::time::Instant::now();
    for _ in 0..times {
        graph.launch().map_err(driver)?;
    }
    stream.synchronize().map_err(driver)?;
    Ok(t0.elapsed().as_secs_f64() * 1e6 / times as f64)
}

/// A kernel of `kernels/mmtc.cu`: every one computes a row bit for bit as the others do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Mmtc {
    /// Up to `rows` activation rows (1, 2 or 4) on dp4a (`mmtc_<tag>_row`,
    /// `mmtc_<tag>_rows<N>`): the same integer sums and the same float order as the tile
    /// kernels, each weight batch loaded once for all the rows (on the H200 the one-row kernel
    /// is faster than candle's dp4a kernel on the 1.5B's gate/up and LM head, slower on its
    /// smaller matrices). `long`: rows of more than 4096 values (`_long`: a lane's more than
    /// four units loaded in one batch).
    Rows { rows: usize, long: bool },
    /// Up to `rows` activation rows (1 or 2) of 4096 values or more (16 splits) on dp4a, a
    /// warp a weight row (`mmtc_<tag>_warp<units>`, `units` 2 or 4 a lane's batch of loads;
    /// `mmtc_<tag>_warp2_rows2`): twice the lanes of `Rows` on a row and a quarter of its
    /// registers, the same sums (on an H100 the 27B shape's step 1.25x faster than on `Rows`).
    Warp { units: usize, rows: usize },
    /// Tensor cores, blocks of 16 weight rows by this many 8-row activation tiles (1, 2, 4
    /// or 8; more rows: more blocks along the grid's y).
    Tiles(usize),
    /// Tensor cores for many rows (`mmtc_<tag>_staged`): each batch of activations staged in
    /// shared memory once for a block's warps, every warp over a whole row ([`launch_mmtc`]).
    Staged,
}

impl Mmtc {
    /// The one-row kernel for rows of up to 4096 values.
    pub(super) const ROW: Mmtc = Mmtc::Rows {
        rows: 1,
        long: false,
    };

    /// Every kernel of a format.
    pub(super) fn all() -> impl Iterator<Item = Mmtc> {
        let rows = [1, 2, 4].into_iter();
        let dp4a = rows.flat_map(|rows| [false, true].map(|long| Mmtc::Rows { rows, long }));
        dp4a.chain([1, 2, 4, 8].map(Mmtc::Tiles)).chain([
            Mmtc::Staged,
            Mmtc::Warp { units: 2, rows: 1 },
            Mmtc::Warp { units: 4, rows: 1 },
            Mmtc::Warp { units: 2, rows: 2 },
        ])
    }
}

/// `TREESPEC_MMTC_ROWS=0`: passes of two to four rows on the 8-row tile kernel, as before the
/// multi-row dp4a kernels (for comparison; any other value, or unset: on those).
fn multi_row_dp4a() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TREESPEC_MMTC_ROWS").as_deref() != Ok("0"))
}

/// `TREESPEC_MMTC_WARP=0`: passes of one or two rows of 4096 values or more on
/// `mmtc_<tag>_row*` / `_rows2*`, as before the warp-a-row kernels (for comparison; any other
/// value, or unset: on them).
fn warp_row() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TREESPEC_MMTC_WARP").as_deref() != Ok("0"))
}

/// Activation rows from which the staged kernel takes a product (`TREESPEC_MMTC_STAGED=N`
/// sets it; bit for bit the same sums either way).
fn staged_from() -> usize {
    static FROM: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *FROM.get_or_init(|| {
        std::env::var("TREESPEC_MMTC_STAGED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(STAGED_FROM)
    })
}

/// The default of [`staged_from`]: on the H200 (BENCHMARKS.md section 31) the staged kernel
/// lost to the tile kernels at 32 rows and won from 64 where it fills the GPU.
const STAGED_FROM: usize = 33;

/// Whether the staged kernel's widest blocks (64 weight rows) fill the GPU for `n` activation
/// rows of a matrix of `rows` rows: where they do not, its warps each walking a whole row lose
/// to the tile kernels, which spread a row over several warps.
fn staged_fills(n: usize, rows: usize) -> bool {
    rows.div_ceil(64) * n.div_ceil(STAGED_ROWS) >= STAGED_BLOCKS
}

/// Activation rows the dp4a kernels of `kernels/mmtc.cu` take at most. On the H200 (BENCHMARKS.md
/// section 25) two and four rows beat the 8-row tile kernel on the 1.5B's larger matrices (gate/up
/// 7.4 us against 10.8 at four rows, the LM head 154 against 204), eight lose everywhere.
const MMTC_DP4A_ROWS: usize = 4;

/// Shared memory a block of the dp4a kernels may take (their staged activation rows, 48 bytes a
/// Q8_1 block, and 1 KiB a row for the reduction): within the 99 KiB a block of the workstation
/// Blackwell cards allows (the H200 allows 227).
const MMTC_DP4A_SHARED: usize = 96 * 1024;

/// Shared memory the dp4a kernel of `rows` activation rows takes a block for rows of `cols` values.
fn dp4a_rows_shared(rows: usize, cols: usize) -> usize {
    staged_bytes(rows, cols) + rows * 1024
}

/// Bytes of `rows` activation rows of `cols` values staged in a block's shared memory by the
/// dp4a kernels of `kernels/mmtc.cu` (48 a Q8_1 block).
fn staged_bytes(rows: usize, cols: usize) -> usize {
    rows * (cols / 32 * 48)
}

/// Let `f` take `dynamic` bytes of dynamic shared memory a block where, with its `fixed` bytes of
/// static shared memory, that passes the default 48 KiB (the H200 allows 227 KiB a block).
fn allow_shared(f: &CudaFunction, dynamic: usize, fixed: usize) -> Result<()> {
    if dynamic + fixed > 48 * 1024 {
        let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        f.set_attribute(attr, dynamic as i32).map_err(driver)?;
    }
    Ok(())
}

/// Whether a lane of the one-row dp4a kernels of rows of `cols` values takes more than one batch
/// of four 64-value units (`mmtc_<tag>_row_long`, `_rows<N>_long`).
pub(super) fn long_rows(cols: usize) -> bool {
    cols / 64 > 4 * mmtc_warps(cols) as usize
}

/// The kernel for `n` activation rows of a weight of `rows` rows of `cols` values: dp4a up to
/// [`MMTC_DP4A_ROWS`] (the smallest of 1, 2, 4 that holds them) where their staged rows fit in
/// [`MMTC_DP4A_SHARED`], tensor cores beyond: the staged kernel from [`staged_from`] rows where
/// it fills the GPU ([`staged_fills`]), else the tile kernels.
pub(super) fn mmtc_kernel(n: usize, rows: usize, cols: usize) -> Mmtc {
    let long = long_rows(cols);
    let held = n.max(1).next_power_of_two();
    let dp4a = n <= 1
        || (n <= MMTC_DP4A_ROWS
            && multi_row_dp4a()
            && dp4a_rows_shared(held, cols) <= MMTC_DP4A_SHARED);
    match n {
        // Four rows: the warp-a-row kernel's 21.9 ms 27B pass against `_rows4_long`'s 21.0
        // (H100, BENCHMARKS.md section 39); one and two rows: 9.2 against 11.5, 12.6 against 14.4.
        _ if dp4a && held <= 2 && mmtc_warps(cols) == WARP_SPLITS && warp_row() => Mmtc::Warp {
            units: 2,
            rows: held,
        },
        _ if dp4a => Mmtc::Rows { rows: held, long },
        _ if n >= staged_from() && staged_fills(n, rows) => Mmtc::Staged,
        0..=8 => Mmtc::Tiles(1),
        9..=16 => Mmtc::Tiles(2),
        17..=32 => Mmtc::Tiles(4),
        _ => Mmtc::Tiles(8),
    }
}

/// Splits of a row the warp-a-row kernel takes (`WARP_SPLITS` in `kernels/mmtc.cu`): the
/// most [`mmtc_warps`] gives, rows of 4096 values or more.
const WARP_SPLITS: u32 = 16;

/// Warps a block of the tensor-core product spreads a row of `cols` values over: one batch
/// of four 64-value units each (`UNITS` in `kernels/mmtc.cu`, loaded before any is summed),
/// at most 16 warps. A function of the row length alone (batch invariance).
pub(super) fn mmtc_warps(cols: usize) -> u32 {
    ((cols / 64).div_ceil(4)).clamp(1, 16) as u32
}
