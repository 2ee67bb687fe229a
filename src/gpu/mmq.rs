//! The quantised products of K-quant weights (Q4_K, Q6_K) on the GPU: one family of kernels for
//! every row count (`kernels/mmq.cu`), the one-row decoding step, verify passes of a few rows and
//! of hundreds, all bound by one summation contract, so that each output is bit for bit the same
//! whichever kernel computes it (batch invariance by construction; "Defeating Nondeterminism in
//! LLM Inference", Thinking Machines, 2025):
//!
//! 1. activations quantised with one scale per 256 values ([`ACT_GROUP`]);
//! 2. a super-block's dot product in integers only, the integer sub-block scales included;
//! 3. one float term a super-block ([`q4k_term`], [`q6k_term`]), each operation rounded as written;
//! 4. a row's terms added in chunks of [`chunk_size`] super-blocks, each chunk from +0 in order,
//!    then the chunks' sums from +0 in order ([`Fold`]).
//!
//! [`reference`](fn@reference) is the contract on the CPU, bit for bit what every kernel computes;
//! `treespec selftest` checks each kernel against it and every row of a launch against the same
//! row launched alone. The kernels: `mmq_<fmt>_warp` on dp4a for one activation row (a warp a
//! weight row), `mmq_<fmt>_row` (`_rows2`, `_rows4`) for one to four, `mmq_<fmt>_t<NT>` on int8 tensor cores (8·NT rows a block) for more; a pass
//! whose tiles would not fill the GPU splits each row over its chunks, and the tile's last block
//! adds the chunks' sums in order (rule 4 makes the split free of any effect on the result).

use crate::quant::blocks::{f16_at, k_header, k_unit_ints};
use crate::quant::Format;

/// Values a super-block holds: the unit of the contract's float work.
pub const SUPER: usize = 256;

/// Values that share one activation scale (rule 1): a super-block. The quantisers of the
/// decoder step write the eight Q8_1 blocks of a super-block with the same `d` for these products.
pub const ACT_GROUP: usize = SUPER;

/// A row's super-blocks are cut into at most this many chunks (rule 4).
pub const CHUNKS: usize = 8;

/// Bytes of a Q8_1 block of 32 activations.
const Q8_BYTES: usize = 36;

/// Super-blocks of a chunk for rows of `cols` values (rule 4): a function of the row length
/// alone, so that no launch shape changes a sum's order.
pub fn chunk_size(cols: usize) -> usize {
    (cols / SUPER).div_ceil(CHUNKS).max(1)
}

/// The formats the family takes, with their kernels' tag.
pub fn tag_of(format: Format) -> Option<&'static str> {
    match format {
        Format::Q4K => Some("q4_k"),
        Format::Q6K => Some("q6_k"),
        _ => None,
    }
}

/// Rule 3 for Q4_K: `da * d` and `da * dmin` (exact: three halves' worth of bits), then
/// `(da d) * isum - (da dmin) * msum`, each operation rounded to nearest.
pub fn q4k_term(da: f32, d: f32, dmin: f32, isum: i32, msum: i32) -> f32 {
    let (dd, dm) = (da * d, da * dmin);
    dd * isum as f32 - dm * msum as f32
}

/// Rule 3 for Q6_K: `(da * d) * isum`.
pub fn q6k_term(da: f32, d: f32, isum: i32) -> f32 {
    (da * d) * isum as f32
}

/// Rule 4: the current chunk's sum and the finished chunks' sum.
#[derive(Clone, Copy, Default)]
pub struct Fold {
    part: f32,
    total: f32,
}

impl Fold {
    /// Add a super-block's term to the current chunk.
    pub fn add(&mut self, t: f32) {
        self.part += t;
    }

    /// Close the current chunk.
    pub fn end_chunk(&mut self) {
        self.total += self.part;
        self.part = 0.0;
    }

    /// The row's sum (after its last chunk is closed).
    pub fn total(&self) -> f32 {
        self.total
    }
}

/// `y[c] . W[r]` for `n` Q8_1 activation rows (`yq` blocks apart in `y`, super-blocks sharing
/// their `d`) and the `rows` rows of `w` (`format`, `cols` values each), as the contract says,
/// bit for bit: `out[c * rows + r]`.
pub fn reference(
    format: Format,
    w: &[u8],
    (rows, cols): (usize, usize),
    y: &[u8],
    (n, yq): (usize, usize),
) -> Vec<f32> {
    assert!(tag_of(format).is_some() && cols.is_multiple_of(SUPER));
    let nsb = cols / SUPER;
    let bb = format.block_bytes();
    let cs = chunk_size(cols);
    let mut out = vec![0f32; n * rows];
    let mut ints = [0i16; 32];
    for c in 0..n {
        let yrow = &y[c * yq * Q8_BYTES..];
        // The activations of each 32-value block as integers, their sums and the super-blocks' d.
        let act = |b: usize| -> &[u8] { &yrow[b * Q8_BYTES + 4..][..32] };
        for r in 0..rows {
            let row = &w[r * nsb * bb..][..nsb * bb];
            let mut fold = Fold::default();
            for s in 0..nsb {
                let block = &row[s * bb..][..bb];
                let h = k_header(format, block);
                let da = f16_at(&yrow[8 * s * Q8_BYTES..]);
                let (mut isum, mut msum) = (0i32, 0i32);
                for j in 0..8 {
                    k_unit_ints(format, block, j, &h, &mut ints);
                    let a = act(8 * s + j);
                    let mut bsum = 0i32;
                    for (&wv, &av) in ints.iter().zip(a) {
                        isum += wv as i32 * av as i8 as i32;
                        bsum += av as i8 as i32;
                    }
                    msum += h.mn[j] as i32 * bsum;
                }
                let t = match format {
                    Format::Q6K => q6k_term(da, h.d, isum),
                    _ => q4k_term(da, h.d, h.dmin, isum, msum),
                };
                fold.add(t);
                if (s + 1) % cs == 0 || s + 1 == nsb {
                    fold.end_chunk();
                }
            }
            out[c * rows + r] = fold.total();
        }
    }
    out
}

/// `n` activation rows of `cols` values quantised to Q8_1 with one `d` a super-block (rule 1),
/// as the decoder step's quantisers write them, rows `yq` blocks apart (blocks past `cols / 32`
/// zero): the bytes.
pub fn quantize_rows(x: &[f32], (n, cols): (usize, usize), yq: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n * yq * Q8_BYTES];
    for c in 0..n {
        for (s, xs) in x[c * cols..(c + 1) * cols].chunks(SUPER).enumerate() {
            let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let d16 = half::f16::from_f32(d);
            for (b, xb) in xs.chunks(32).enumerate() {
                let blk = &mut bytes[(c * yq + 8 * s + b) * Q8_BYTES..][..Q8_BYTES];
                let mut sum = 0i32;
                for (i, v) in xb.iter().enumerate() {
                    let q = if amax == 0.0 {
                        0
                    } else {
                        (v / d).round() as i32
                    };
                    blk[4 + i] = q as i8 as u8;
                    sum += q;
                }
                blk[..2].copy_from_slice(&d16.to_le_bytes());
                let s16 = half::f16::from_f32(d16.to_f32() * sum as f32);
                blk[2..4].copy_from_slice(&s16.to_le_bytes());
            }
        }
    }
    bytes
}

/// `count` random blocks of `format` (Q4_K or Q6_K): random bytes with small half-precision
/// scales (`d`, and Q4_K's `dmin`, in [-0.025, 0.025)).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn random_blocks(
    rng: &mut crate::gpu::Uniform,
    format: Format,
    count: usize,
) -> Vec<u8> {
    let bb = format.block_bytes();
    let mut data = vec![0u8; count * bb];
    let mut state = rng.0 | 1;
    for chunk in data.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let b = state.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
    rng.0 = state;
    let fields: &[usize] = if format == Format::Q6K {
        &[208]
    } else {
        &[0, 2]
    };
    for block in data.chunks_mut(bb) {
        for &o in fields {
            let v = half::f16::from_f32((rng.next() - 0.5) * 0.05);
            block[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    data
}

mod launch_shape;
#[cfg_attr(not(feature = "cuda"), allow(unused_imports))]
pub(crate) use launch_shape::*;

#[cfg(feature = "cuda")]
pub(crate) use cuda::*;

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use crate::error::{Error, Result};
    use crate::gpu::launch::{Launch, LaunchOn};
    use crate::gpu::modules::{func, Module};
    use crate::gpu::products::{capture, driver, replay_micros, Stack};
    use crate::gpu::step::Mat;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::Device;
    use cudarc::driver::{sys, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig};
    use std::sync::Arc;

    /// Warps a block of the one-row kernels (`ROW_WARPS`), a weight row each at a time.
    const ROW_WARPS: u32 = 4;
    /// Blocks of the one-row kernels a multiprocessor: their warps then loop over the rows.
    const ROW_BLOCKS_PER_SM: usize = 8;
    /// The kernel `kernel` for weights of format `tag`.
    pub(crate) fn mmq_func(
        dev: &candle_core::CudaDevice,
        tag: &str,
        kernel: Mmq,
    ) -> Result<CudaFunction> {
        func(dev, Module::Mmq, &kernel.name(tag))
    }

    /// What a split tile pass needs beside the output: a workspace for the chunks' sums
    /// (`[chunks][n][rows]` floats) and a counter a tile (zero between launches).
    pub(crate) struct MmqScratch {
        work: CudaSlice<f32>,
        counters: CudaSlice<u32>,
        sms: usize,
        /// Shared memory a block may take (opted in).
        smem: usize,
    }

    impl MmqScratch {
        /// Room for `work` floats of chunk sums, on the GPU of `stream`.
        pub(crate) fn new(stream: &Arc<CudaStream>, work: usize) -> Result<Self> {
            let ctx = stream.context();
            let sms = ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .map_err(driver)? as usize;
            let smem = ctx
                .attribute(
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                )
                .map_err(driver)? as usize;
            Ok(MmqScratch {
                work: stream.alloc_zeros::<f32>(work.max(1)).map_err(driver)?,
                counters: stream
                    .alloc_zeros::<u32>(SPLIT_BELOW_WAVES * sms.max(1) * 4)
                    .map_err(driver)?,
                sms: sms.max(1),
                smem,
            })
        }

        /// The workspace a split pass of `n` rows over a stack of `rows x cols` takes on this
        /// GPU (0 when it does not split; weights of the smaller slot, whose blocks are the
        /// largest, so the fewest: the pass most ready to split).
        pub(crate) fn need(&self, rows: usize, cols: usize, n: usize) -> usize {
            match mmq_kernel(n, rows, cols) {
                Mmq::Tile(nt) => {
                    let grid = tile_grid(rows, n, nt, weight_slot("q4_k"), self.smem).0;
                    let z = split_chunks(grid, cols, self.sms);
                    if z > 1 {
                        z * n * rows
                    } else {
                        0
                    }
                }
                Mmq::Rows(_) | Mmq::Warp(_) => 0,
            }
        }
    }

    /// `dst[c * dst_stride + r] = W[r] . y[c]` for the `n` Q8_1 activation rows `y` (`yq`
    /// blocks apart; super-blocks sharing `d`), `W` the stack (rows a multiple of 16 each, cols of
    /// 256), with `kernel` (`f`, its entry point for the stack's format `tag`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_mmq(
        on: LaunchOn,
        (f, tag): (&CudaFunction, &str),
        stack: &Stack,
        kernel: Mmq,
        (y, yq): (u64, usize),
        (dst, dst_stride): (u64, usize),
        n: usize,
        scratch: &MmqScratch,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let (rows, cols) = (stack.rows, stack.cols);
        debug_assert!(
            rows.is_multiple_of(16) && cols.is_multiple_of(SUPER),
            "the product kernels take rows in sixteens of 256-value multiples"
        );
        let cs = chunk_size(cols) as i32;
        let (cols_i, rows_i, sy, sd, n_i) = (
            cols as i32,
            rows as i32,
            yq as i32,
            dst_stride as i32,
            n as i32,
        );
        let s = on.stream;
        let work = scratch.work.device_ptr(s).0;
        let counters = scratch.counters.device_ptr(s).0;
        let (cfg, shared) = match kernel {
            Mmq::Rows(nr) => {
                if n > nr {
                    return Err(Error::Device(format!(
                        "a product of {n} activation rows given the {nr}-row kernel"
                    )));
                }
                let shared = rows_shared(nr, cols);
                let blocks = rows
                    .div_ceil(ROW_WARPS as usize)
                    .min(ROW_BLOCKS_PER_SM * scratch.sms);
                let cfg = LaunchConfig {
                    grid_dim: (blocks as u32, 1, 1),
                    block_dim: (32, ROW_WARPS, 1),
                    shared_mem_bytes: shared as u32,
                };
                (cfg, shared)
            }
            Mmq::Warp(_) => {
                if n > 1 {
                    return Err(Error::Device(format!(
                        "a product of {n} activation rows given the one-row kernel"
                    )));
                }
                let shared = rows_shared(1, cols);
                let cfg = LaunchConfig {
                    grid_dim: (rows.div_ceil(WARP_ROWS) as u32, 1, 1),
                    block_dim: (32, WARP_ROWS as u32, 1),
                    shared_mem_bytes: shared as u32,
                };
                (cfg, shared)
            }
            Mmq::Tile(nt) => {
                let slot = weight_slot(tag);
                let ((gx, gy), wm) = tile_grid(rows, n, nt, slot, scratch.smem);
                let mut z = split_chunks((gx, gy), cols, scratch.sms);
                if z * n * rows > scratch.work.len() || gx * gy > scratch.counters.len() {
                    z = 1;
                }
                let shared = tile_shared(nt, wm, slot);
                let cfg = LaunchConfig {
                    grid_dim: (gx as u32, gy as u32, z as u32),
                    block_dim: (32, wm as u32, 1),
                    shared_mem_bytes: shared as u32,
                };
                (cfg, shared)
            }
        };
        if needs_opt_in(kernel, shared) {
            let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            f.set_attribute(attr, shared as i32).map_err(driver)?;
        }
        let mut b = Launch::new(f);
        stack.args(&mut b);
        b.arg(&y)
            .arg(&dst)
            .arg(&cols_i)
            .arg(&rows_i)
            .arg(&sy)
            .arg(&sd)
            .arg(&n_i)
            .arg(&cs);
        if matches!(kernel, Mmq::Tile(_)) {
            b.arg(&work).arg(&counters);
        }
        // SAFETY: the stack holds rows x cols (rows a multiple of 16, cols of 256), y holds n
        // activation rows of yq Q8_1 blocks (only rows below n are read), dst n rows of
        // dst_stride floats (only rows below n, columns below rows, written); a split pass's
        // workspace holds z * n * rows floats and a counter for each of its tiles (checked above).
        unsafe { b.launch(on, cfg) }.map_err(driver)?;
        Ok(())
    }

    /// `n` random activation rows of `cols` values, quantised as the step's quantisers do (one
    /// `d` a super-block), rows `yq` blocks apart: the bytes.
    pub(crate) fn random_rows(
        rng: &mut crate::gpu::Uniform,
        n: usize,
        cols: usize,
        yq: usize,
    ) -> Vec<u8> {
        let x: Vec<f32> = (0..n * cols)
            .map(|_| {
                // Now and then a large value, as real activations have (a super-block's d is set
                // by its largest).
                let v = rng.next() * 4.0 - 2.0;
                if rng.next() < 0.01 {
                    v * 30.0
                } else {
                    v
                }
            })
            .collect();
        quantize_rows(&x, (n, cols), yq)
    }

    /// A random weight matrix of `dtype` (Q4_K or Q6_K) on `device`, and its bytes: random
    /// quantised blocks with small half-precision scales, written as they are (no quantisation
    /// pass: an 8B-shaped LM head takes a moment).
    fn random_matrix(
        device: &Device,
        rng: &mut crate::gpu::Uniform,
        dtype: GgmlDType,
        (rows, cols): (usize, usize),
    ) -> Result<(Arc<QTensor>, Vec<u8>)> {
        let format = match dtype {
            GgmlDType::Q4K => Format::Q4K,
            _ => Format::Q6K,
        };
        let bytes = random_blocks(rng, format, rows * cols / SUPER);
        let storage = candle_core::quantized::QStorage::from_data(
            std::borrow::Cow::Owned(bytes.clone()),
            device,
            dtype,
        )?;
        Ok((Arc::new(QTensor::new(storage, (rows, cols))?), bytes))
    }

    mod selftest;
    pub(crate) use selftest::{selftest, selftest_stacked};

    /// Time the family's kernels on the shapes of Qwen2.5-1.5B's, Qwen3-8B's and Qwen3.6-27B's
    /// matrices (random weights) for 1 to 256 activation rows, each launch replayed from a CUDA graph of 20: a
    /// markdown table of microseconds a launch and the weight bandwidth it reaches.
    pub fn bench(dev: &candle_core::CudaDevice) -> Result<String> {
        let stream = dev.cuda_stream();
        let device = Device::Cuda(dev.clone());
        let mut rng = crate::gpu::Uniform(0x2545_F491_4F6C_DD1D);
        let max_n = 256usize;
        let scratch = MmqScratch::new(&stream, 64 << 20)?;
        let mut out = String::from(
            "| matrix | rows x cols | n | kernel | us | weights GB/s | TOPS |\n| --- | --- | ---: | --- | ---: | ---: | ---: |\n",
        );
        for (what, dtype, tag, rows, cols) in [
            ("1.5B q, o", GgmlDType::Q4K, "q4_k", 1536usize, 1536usize),
            ("1.5B gate+up", GgmlDType::Q4K, "q4_k", 17920, 1536),
            ("1.5B down", GgmlDType::Q6K, "q6_k", 1536, 8960),
            ("1.5B LM head", GgmlDType::Q6K, "q6_k", 151_936, 1536),
            ("8B q+k+v", GgmlDType::Q4K, "q4_k", 6144, 4096),
            ("8B o", GgmlDType::Q4K, "q4_k", 4096, 4096),
            ("8B gate+up", GgmlDType::Q4K, "q4_k", 24576, 4096),
            ("8B down", GgmlDType::Q4K, "q4_k", 4096, 12288),
            ("8B down", GgmlDType::Q6K, "q6_k", 4096, 12288),
            ("8B LM head", GgmlDType::Q6K, "q6_k", 151_936, 4096),
            // Qwen3.6-27B's widest (as `bench --products` times them on the other families).
            ("27B gate+up", GgmlDType::Q4K, "q4_k", 34_816, 5120),
            ("27B down", GgmlDType::Q6K, "q6_k", 5120, 17_408),
        ] {
            let (q, _) = random_matrix(&device, &mut rng, dtype, (rows, cols))?;
            let w_ptr = q.device_ptr()? as u64;
            let w_bytes = (rows * cols / 256 * dtype.type_size()) as f64;
            let yq = crate::gpu::products::qblocks(cols);
            let y = stream
                .clone_htod(&random_rows(&mut rng, max_n, cols, yq))
                .map_err(driver)?;
            let y_ptr = y.device_ptr(&stream).0;
            let dst = stream.alloc_zeros::<f32>(max_n * rows).map_err(driver)?;
            let d_ptr = dst.device_ptr(&stream).0;
            for n in [1usize, 2, 4, 8, 16, 32, 64, 128, 256] {
                let picked = mmq_kernel(n, rows, cols);
                let mut kernels = vec![picked];
                let one = [
                    Mmq::Warp(WarpLayout::Chunks),
                    Mmq::Warp(WarpLayout::Chunks4),
                    Mmq::Warp(WarpLayout::Contiguous),
                    Mmq::Rows(1),
                ];
                let others: &[Mmq] = match n {
                    1 => &one,
                    _ => &[Mmq::Rows(n.next_power_of_two())],
                };
                for &other in others.iter().chain(&[Mmq::Tile(1)]) {
                    if n <= 4 && other != picked {
                        kernels.push(other);
                    }
                }
                for kernel in kernels {
                    let f = mmq_func(dev, tag, kernel)?;
                    let alone = LaunchOn {
                        stream: &stream,
                        pdl: false,
                    };
                    let stack = Stack::one(w_ptr, rows, cols);
                    let launch = || {
                        launch_mmq(
                            alone,
                            (&f, tag),
                            &stack,
                            kernel,
                            (y_ptr, yq),
                            (d_ptr, rows),
                            n,
                            &scratch,
                        )
                    };
                    launch()?;
                    let graph = capture(&stream, || (0..20).try_for_each(|_| launch()))?;
                    graph.launch().map_err(driver)?;
                    let us = replay_micros(&stream, &graph, 5)? / 20.0;
                    let tops = 2.0 * (rows * cols * n) as f64 / us / 1e6;
                    out.push_str(&format!(
                        "| {what} {tag} | {rows} x {cols} | {n} | {kernel:?} | {us:.1} | {:.0} | {tops:.1} |\n",
                        w_bytes / us / 1e3
                    ));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::blocks::dequantize_row;

    fn rows_of(seed: u64, n: usize, cols: usize) -> Vec<f32> {
        let mut rng = crate::gpu::Uniform(seed);
        (0..n * cols)
            .map(|_| {
                let v = rng.next() * 4.0 - 2.0;
                if rng.next() < 0.01 {
                    v * 30.0
                } else {
                    v
                }
            })
            .collect()
    }

    /// The activations a quantised row stands for: `d * q` with the half `d` of its super-block.
    fn dequantized_rows(y: &[u8], (n, cols): (usize, usize), yq: usize) -> Vec<f64> {
        (0..n * cols)
            .map(|i| {
                let (c, k) = (i / cols, i % cols);
                let b = &y[(c * yq + k / 32) * Q8_BYTES..];
                let d = half::f16::from_le_bytes([b[0], b[1]]).to_f64();
                d * (b[4 + k % 32] as i8) as f64
            })
            .collect()
    }

    /// The contract computes the product of the dequantised weights and activations: within
    /// float rounding of the f64 dot product, for Q4_K and Q6_K and rows of one to many chunks.
    #[test]
    fn the_reference_is_the_dequantised_product() {
        for (format, cols) in [
            (Format::Q4K, 256usize),
            (Format::Q4K, 4864),
            (Format::Q6K, 1536),
            (Format::Q6K, 8960),
        ] {
            let rows = 5;
            let w = random_blocks(&mut crate::gpu::Uniform(11), format, rows * cols / SUPER);
            let mut deq = vec![0f32; rows * cols];
            let rb = w.len() / rows;
            for (r, out) in deq.chunks_mut(cols).enumerate() {
                dequantize_row(format, &w[r * rb..(r + 1) * rb], out);
            }
            let (n, yq) = (3, cols.div_ceil(512) * 16);
            let y = quantize_rows(&rows_of(5, n, cols), (n, cols), yq);
            let x = dequantized_rows(&y, (n, cols), yq);
            let got = reference(format, &w, (rows, cols), &y, (n, yq));
            for c in 0..n {
                for r in 0..rows {
                    let (mut dot, mut mag) = (0f64, 0f64);
                    for k in 0..cols {
                        let p = deq[r * cols + k] as f64 * x[c * cols + k];
                        dot += p;
                        mag += p.abs();
                    }
                    let err = (got[c * rows + r] as f64 - dot).abs() / mag;
                    assert!(
                        err < 1e-6,
                        "{format:?} x {cols}: row {c} col {r} off by {err:e}"
                    );
                }
            }
        }
    }

    /// Rule 1: the eight blocks of a super-block share `d`, set by the super-block's largest
    /// value, which quantises to +-127.
    #[test]
    fn a_super_block_shares_one_scale() {
        let cols = 1024;
        let x = rows_of(9, 2, cols);
        let y = quantize_rows(&x, (2, cols), 32);
        for c in 0..2 {
            for s in 0..cols / SUPER {
                let at = |b: usize| (c * 32 + 8 * s + b) * Q8_BYTES;
                let d0 = &y[at(0)..at(0) + 2];
                assert!((1..8).all(|b| &y[at(b)..at(b) + 2] == d0));
                let max = (0..8)
                    .flat_map(|b| {
                        y[at(b) + 4..at(b) + 36]
                            .iter()
                            .map(|&q| (q as i8).unsigned_abs())
                    })
                    .max();
                assert_eq!(max, Some(127));
            }
        }
    }

    /// Rule 4: the chunks depend on the row length alone and cover its super-blocks.
    #[test]
    fn chunks_cover_a_row() {
        for cols in [256usize, 1536, 4096, 4864, 8960, 12288, 17408] {
            let (nsb, cs) = (cols / SUPER, chunk_size(cols));
            assert!(nsb.div_ceil(cs) <= CHUNKS && cs * CHUNKS >= nsb, "{cols}");
        }
        assert_eq!(chunk_size(4096), 2);
        assert_eq!(chunk_size(1536), 1);
    }
}
