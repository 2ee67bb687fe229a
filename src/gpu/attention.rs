//! Batch-invariant grouped-query attention over per-row key lists (`kernels/attention.cu`): each
//! new row attends to the cached keys a [`VisibleKeys`] lists for it, in rank order, and its output
//! depends only on those keys and its query, never on the other rows of the pass. On the GPU this
//! is two launches per layer (chunks of 32 to 128 ranks, then their combination) in place of
//! candle's matmul / scale / mask / softmax / matmul / transpose chain. On the host [`attention`]
//! runs each row and head whole on one thread ([`host`]), so the CPU's passes are batch-invariant
//! too (candle's matmuls are not: their summation order depends on the rows of the pass, which
//! made a verify pass and a one-token step differ in the last bits and a near tie flip);
//! [`reference`] is the definition both are tested against.

use crate::error::{Error, Result};
use crate::model::visibility::VisibleKeys;
use candle_core::{DType, Device, Tensor};

/// Ranks per chunk at most, and the cache rows of each of the wide kernel's chunks: `ATT_CHUNK`
/// in `kernels/attention.cu`.
pub const CHUNK: usize = 128;

/// A row is cut into at most this many chunks while chunks of 32 or 64 ranks can do it
/// (`ATT_FEW_CHUNKS` in `kernels/attention.cu`).
const FEW_CHUNKS: usize = 16;

/// Ranks a chunk of `attention_chunk_f32` holds for a row that sees `count` keys: `fixed` where it
/// is not 0, else ("by count") the fewest of 32 and 64 that cut the row into at most
/// [`FEW_CHUNKS`] chunks, else [`CHUNK`] (`att_chunk_ranks` in `kernels/attention.cu`). By count,
/// a one-row step over a few hundred keys is a few more blocks, each a shorter chain, while a long
/// context keeps chunks of 128, whose partials cost less to combine: each size was the fastest
/// step in its range on the H200 (BENCHMARKS.md, section 33). It depends on the row's own count of
/// keys alone, which a tree node verified in a pass and the one-row step over the same keys share,
/// so both cut them into the same chunks and sum alike.
pub fn ranks_for(fixed: usize, count: usize) -> usize {
    match fixed {
        0 => [32, 64]
            .into_iter()
            .find(|c| count <= FEW_CHUNKS * c)
            .unwrap_or(CHUNK),
        c => c,
    }
}

/// Chunks by each row's count of keys (0, see [`ranks_for`]) unless `TREESPEC_ATT_CHUNK` says
/// otherwise: on the H200, against chunks of 128 for every row, it made the 1.5B's step 10% faster
/// after 256 tokens and 8% after 700, and left it as it was past 1,024 (BENCHMARKS.md, section 34).
const CHUNK_DEFAULT: usize = 0;

/// This process's chunk sizes, for [`ranks_for`]: `TREESPEC_ATT_CHUNK=32|64|128` one size for
/// every row, `auto` by each row's count (0), else [`CHUNK_DEFAULT`] (by count). Read once: a
/// process sums one way.
pub(crate) fn fixed_chunk_ranks() -> usize {
    static SET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SET.get_or_init(|| match std::env::var("TREESPEC_ATT_CHUNK").as_deref() {
        Ok("auto") => 0,
        Ok(v) => v
            .parse()
            .ok()
            .filter(|c| matches!(c, 32 | 64 | 128))
            .unwrap_or(CHUNK_DEFAULT),
        Err(_) => CHUNK_DEFAULT,
    })
}

/// Chunks a pass's partials need when no row sees more than `max_count` keys, chunks sized by
/// `fixed` as [`ranks_for`] says: the most any such row is cut into (by count, a row just below 512
/// or 1,024 keys has more chunks than one just above).
pub fn chunks_for(fixed: usize, max_count: usize) -> usize {
    [FEW_CHUNKS * 32, FEW_CHUNKS * 64, max_count]
        .into_iter()
        .map(|c| c.min(max_count))
        .map(|c| c.div_ceil(ranks_for(fixed, c)))
        .max()
        .unwrap_or(0)
        .max(1)
}

/// The chunk size the kernels take (`fixed` in `attention_chunk_f32` and `attention_combine_f32`):
/// the wide kernel's chunks are [`CHUNK`] cache rows, the others' sized by `fixed` as
/// [`ranks_for`] says (0: by each row's count).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn chunk_arg(wide: bool, fixed: usize) -> i32 {
    (if wide { CHUNK } else { fixed }) as i32
}

/// [`chunks_for`] with this process's sizes ([`fixed_chunk_ranks`]).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn chunks_upto(max_count: usize) -> usize {
    chunks_for(fixed_chunk_ranks(), max_count)
}

/// Largest head dimension the kernel takes: `ATT_HD_MAX` in `kernels/attention.cu`.
pub const HEAD_DIM_MAX: usize = 256;

/// Can [`attention`] run heads of this shape on `device`? (Head dimension a multiple of 32 up to
/// [`HEAD_DIM_MAX`], query heads a multiple of the K/V heads; on a GPU also at most 32 query
/// heads a K/V head, a warp each in one block, and a block's shared memory within
/// [`CHUNK_SMEM_MAX`]: limits of the kernel, not of the host's path.)
pub fn supports(n_heads: usize, n_kv_heads: usize, head_dim: usize, device: &Device) -> bool {
    let shape = head_dim.is_multiple_of(32)
        && head_dim <= HEAD_DIM_MAX
        && n_kv_heads > 0
        && n_heads.is_multiple_of(n_kv_heads);
    shape && (!device.is_cuda() || fits(n_heads / n_kv_heads, head_dim, 1))
}

/// Whether a block of `attention_chunk_f32` for `group` query heads a K/V head of `hd`, each over
/// `split` spans of a chunk (`split`), can run: a warp per (head, span), at most 1024 threads,
/// within [`CHUNK_SMEM_MAX`].
fn fits(group: usize, hd: usize, split: usize) -> bool {
    group * split <= 32 && chunk_smem_bytes(group, hd, split) as usize <= CHUNK_SMEM_MAX
}

/// Spans of a chunk's ranks a block of `attention_chunk_f32` gives a warp each, for `group` query
/// heads a K/V head of `hd`: two where they fit, else one. A one-row step has only (chunks x K/V
/// heads) blocks; two warps a head halve each warp's chain of dependent products in chunks of 128
/// ranks (measured on the H200, BENCHMARKS.md section 32: two beat one at every row count but 64,
/// within 1%, and beat four at the step and from 32 rows), and of 64 (section 34, after 700 tokens:
/// the step 2% faster and passes of 8 rows 3% faster, passes of 16-64 rows 1-4% slower). A span
/// holds at least 32 ranks, so in chunks of 64 with four spans, or of 32 with two or four, the
/// spans past the chunk's end are empty: with chunks of 32 (rows of up to 512 keys) the second warp
/// idles, and one warp a head made passes of 16-64 rows 3-4% faster there and the step no slower
/// (section 34). A split chosen per pass would have to sum a chunk of 32 alike with one warp and
/// two, bit for bit, to keep steps and verify passes equal: untried. This split depends on the
/// heads' shape alone, never on the rows of a pass, so a step and a verify pass sum alike (the
/// spans' sums are added in span order).
/// `TREESPEC_ATT_SPLIT=1|2|4` sets it, for measurement (read once: a process sums one way).
#[cfg(feature = "cuda")]
fn split(group: usize, hd: usize) -> usize {
    static CAP: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cap = *CAP.get_or_init(|| {
        std::env::var("TREESPEC_ATT_SPLIT")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|s| matches!(s, 1 | 2 | 4))
            .unwrap_or(SPLIT_DEFAULT)
    });
    widest_split(group, hd, cap)
}

/// Spans a warp each unless `TREESPEC_ATT_SPLIT` says otherwise ([`split`]).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const SPLIT_DEFAULT: usize = 2;

/// The most spans of 4, 2 and 1, at most `cap`, that a block for `group` heads of `hd` fits.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn widest_split(group: usize, hd: usize, cap: usize) -> usize {
    [4, 2, 1]
        .into_iter()
        .find(|&s| s <= cap && fits(group, hd, s))
        .unwrap_or(1)
}

/// Shared memory a block of `attention_chunk_f32` may take: the 99 KiB of the GPUs with the least
/// (sm_86, sm_89, sm_120; Hopper allows 227).
const CHUNK_SMEM_MAX: usize = 99 * 1024;

/// Heads of up to this size stage a chunk's keys and values at once, each in a buffer of its
/// own; bigger ones the values in the keys' place (`ATT_APART_HD` in `kernels/attention.cu`).
const APART_HD: usize = 64;

/// Heads of up to this size stage a whole chunk at a time, bigger ones half (`ATT_WHOLE_HD`).
const WHOLE_HD: usize = 128;

/// Dynamic shared memory of `attention_chunk_f32` for `group` query heads a K/V head of `hd`,
/// each over `split` spans: a stage of a chunk's keys and values (one buffer or two,
/// [`APART_HD`]; a chunk or half of one, [`WHOLE_HD`]) as rows of `hd + 4` floats, each head's
/// query and numerators, the chunk's cache rows, each warp's maximum or sum, and the value sums
/// of spans past the first.
fn chunk_smem_bytes(group: usize, hd: usize, split: usize) -> u32 {
    let buffers = if hd <= APART_HD { 2 } else { 1 };
    let rows = if hd <= WHOLE_HD { CHUNK } else { CHUNK / 2 };
    let spans = split * group + (split - 1) * group * hd;
    ((buffers * rows * (hd + 4) + group * hd + group * CHUNK + CHUNK + spans) * 4) as u32
}

/// Let `attention_chunk_f32` (`f`) take its shared memory for heads of `hd`, `group` to a K/V
/// head, past the 48 KiB a launch gets unasked. The target and the drafter load the same
/// function, so the limit only ever grows: the most any model loaded so far needs.
#[cfg(feature = "cuda")]
pub(crate) fn allow_chunk_smem(
    f: &cudarc::driver::CudaFunction,
    group: usize,
    hd: usize,
) -> std::result::Result<(), cudarc::driver::DriverError> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static MOST: AtomicU32 = AtomicU32::new(0);
    let need = chunk_smem_bytes(group, hd, split(group, hd));
    let most = MOST.load(Ordering::SeqCst).max(need);
    let attr =
        cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    // Recorded only once the GPU took it, so that a refused request does not stick.
    f.set_attribute(attr, most as i32)?;
    MOST.fetch_max(most, Ordering::SeqCst);
    Ok(())
}

/// The launch of `attention_chunk_f32` for `n` rows over `chunks` chunks: a block per (chunk,
/// K/V head, row), a warp per (query head of the K/V head's group, span of the chunk: [`split`])
/// ([`allow_chunk_smem`] first).
#[cfg(feature = "cuda")]
pub(crate) fn chunk_launch(
    n: usize,
    (nh, nkv, hd): (usize, usize, usize),
    chunks: usize,
) -> cudarc::driver::LaunchConfig {
    let group = nh / nkv;
    let split = split(group, hd);
    cudarc::driver::LaunchConfig {
        grid_dim: (chunks as u32, nkv as u32, n as u32),
        block_dim: (32, group as u32, split as u32),
        shared_mem_bytes: chunk_smem_bytes(group, hd, split),
    }
}

/// Warps per block of the wide-pass kernel (16 (row, query head) pairs each): `WARPS` of the
/// kernels `kernels/attention.cu` instantiates. Four measured a little faster than eight on the
/// H200 (BENCHMARKS.md, section 29).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const WIDE_WARPS: usize = 4;

/// The kernel that attends a wide pass whole, prefix and block alike, on tensor cores, for heads
/// of `hd` (`attention_wide_mma_<hd>_<warps>`, f16 MMA, chunks cut by cache row): `None` for
/// other head sizes and in builds for GPUs older than sm_80 (where it is compiled empty).
#[cfg(feature = "cuda")]
pub(crate) fn wide_kernel(hd: usize) -> Option<String> {
    let mma = crate::device::built_for().is_none_or(|c| c >= 80);
    (mma && matches!(hd, 64 | 128)).then(|| format!("attention_wide_mma_{hd}_{WIDE_WARPS}"))
}

/// Dynamic shared memory of the wide kernel for heads of `hd`: both halves of a chunk's keys and
/// values as f16 rows of `hd + 8` (`WM_KEYS`, `WM_PAD` in `kernels/attention.cu`).
#[cfg(feature = "cuda")]
fn wide_smem_bytes(hd: usize) -> u32 {
    (2 * 2 * 64 * (hd + 8) * 2) as u32
}

/// Let the wide kernel `f` (for heads of `hd`) take its dynamic shared memory, past the 48 KiB a
/// launch gets unasked; once, at load.
#[cfg(feature = "cuda")]
pub(crate) fn allow_wide_smem(
    f: &cudarc::driver::CudaFunction,
    hd: usize,
) -> std::result::Result<(), cudarc::driver::DriverError> {
    let attr =
        cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    f.set_attribute(attr, wide_smem_bytes(hd) as i32)
}

/// Chunks of cache rows one block of the wide kernel takes in turn (`WM_SPAN_MAX` in
/// `kernels/attention.cu` at most), and so the partials a row gets: a pass of `n` rows over
/// `chunks` chunks. Spans grow while the grid keeps [`WIDE_BLOCKS`] blocks or more, so that a pass
/// of many rows over a long context reads its queries and writes its partials once a span, not
/// once a chunk, and keeps a block's copies in flight while it computes; a short pass keeps every
/// chunk its own block.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn wide_span(n: usize, nh: usize, nkv: usize, chunks: usize) -> (usize, usize) {
    let tiles = (n * (nh / nkv)).div_ceil(16 * WIDE_WARPS) * nkv;
    let mut span = 1;
    while span < 4 && tiles * chunks.div_ceil(2 * span) >= WIDE_BLOCKS {
        span *= 2;
    }
    (span, chunks.div_ceil(span))
}

/// Blocks the wide kernel's grid keeps when it lengthens spans: three a multiprocessor of an
/// H200 (132), what its shared memory holds at once.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const WIDE_BLOCKS: usize = 396;

/// The wide kernel's launch for `n` rows of heads of `hd` in `slots` spans of chunks of cache
/// rows ([`wide_span`]): a block takes 16 (row, query head) pairs a warp of one K/V head and one
/// span.
#[cfg(feature = "cuda")]
pub(crate) fn wide_launch(
    n: usize,
    (nh, nkv, hd): (usize, usize, usize),
    slots: usize,
) -> cudarc::driver::LaunchConfig {
    let warps = WIDE_WARPS;
    cudarc::driver::LaunchConfig {
        grid_dim: (
            (n * (nh / nkv)).div_ceil(16 * warps) as u32,
            nkv as u32,
            slots as u32,
        ),
        block_dim: (32 * warps as u32, 1, 1),
        shared_mem_bytes: wide_smem_bytes(hd),
    }
}

/// Chunks of cache rows a wide pass's partials cover: up to the highest cache row any row sees.
pub fn wide_chunks(keys: &VisibleKeys) -> usize {
    let reach = (0..keys.len())
        .filter_map(|i| keys.last_key(i))
        .max()
        .map_or(0, |k| k + 1);
    reach.div_ceil(CHUNK).max(1)
}

/// A pass's visibility, uploaded once for all its layers: the packed `[rows, width]` table on
/// the device, and the lists on the host for the reference path.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct KeyTable {
    table: Tensor,
    width: usize,
    max_count: usize,
    keys: VisibleKeys,
}

impl KeyTable {
    /// Upload `keys` to `device`.
    pub fn new(keys: &VisibleKeys, device: &Device) -> Result<Self> {
        let width = keys.width();
        let table = Tensor::from_vec(keys.packed(), (keys.len(), width), device)?;
        let max_count = (0..keys.len()).map(|i| keys.count(i)).max().unwrap_or(0);
        Ok(KeyTable {
            table,
            width,
            max_count,
            keys: keys.clone(),
        })
    }
}

/// Attention of `q` `[heads, n, hd]` over `k`, `v` `[kv_heads, len, hd]` (views of a cache),
/// each row over the keys `table` lists for it, scaled by `1 / sqrt(hd)`: `[n, heads * hd]`.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, table: &KeyTable) -> Result<Tensor> {
    attention_chunked(q, k, v, table, fixed_chunk_ranks())
}

/// [`attention`] with chunks sized by `fixed` ([`ranks_for`]) on a GPU (the self-test runs each
/// size; the host's path has no chunks).
fn attention_chunked(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    table: &KeyTable,
    fixed: usize,
) -> Result<Tensor> {
    let (nh, n, hd) = q.dims3()?;
    let (nkv, len, khd) = k.dims3()?;
    if khd != hd || v.dims3()? != (nkv, len, hd) || !supports(nh, nkv, hd, q.device()) {
        return Err(Error::InvalidArgument(format!(
            "attention: queries {:?}, keys {:?}, values {:?}",
            q.dims(),
            k.dims(),
            v.dims()
        )));
    }
    if table.keys.len() != n {
        return Err(Error::InvalidArgument(format!(
            "attention: key lists for {} rows, queries for {n}",
            table.keys.len()
        )));
    }
    if let Some(bad) = (0..n).find(|&i| table.keys.last_key(i).is_some_and(|key| key >= len)) {
        return Err(Error::InvalidArgument(format!(
            "attention: row {bad} lists a key past the {len} cached rows"
        )));
    }
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = q.device() {
        return cuda::attention(dev, q, k, v, table, None, fixed);
    }
    let _ = fixed;
    host(q, k, v, &table.keys)
}

/// The dot product of two rows of a head's width (a multiple of 32), summed in eight lanes
/// combined in one fixed order: the same for every call, whatever pass the rows belong to.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
}

/// Where a host tensor `[a, b, c]` of f32 with its last dimension contiguous keeps its rows:
/// its start offset and the strides of its first two dimensions; `None` for any other layout,
/// type or storage.
fn host_rows(t: &Tensor) -> Option<[usize; 3]> {
    let (storage, layout) = t.storage_and_layout();
    let stride = layout.stride();
    let ok = t.dtype() == DType::F32
        && stride.len() == 3
        && stride[2] == 1
        && matches!(&*storage, candle_core::Storage::Cpu(_));
    ok.then(|| [layout.start_offset(), stride[0], stride[1]])
}

/// Attention on the host, batch-invariant: per row and query head, over the row's listed keys in
/// rank order, the scores ([`dot`]), their softmax and the weighted sum of the values each in one
/// fixed order, every (row, head) computed whole by one thread; the keys and values are read in
/// place in the cache. Returns `[n, heads * hd]` as [`reference`] does, to float rounding.
fn host(q: &Tensor, k: &Tensor, v: &Tensor, keys: &VisibleKeys) -> Result<Tensor> {
    use rayon::prelude::*;
    let (nh, n, hd) = q.dims3()?;
    let device = q.device().clone();
    let nkv = k.dim(0)?;
    let (k, v) = (k.to_dtype(DType::F32)?, v.to_dtype(DType::F32)?);
    let (Some([ko, k0, k1]), Some([vo, v0, v1])) = (host_rows(&k), host_rows(&v)) else {
        let (k, v) = (k.contiguous()?, v.contiguous()?);
        if host_rows(&k).is_none() || host_rows(&v).is_none() {
            return reference(q, &k, &v, keys);
        }
        return host(q, &k, &v, keys);
    };
    let (kst, vst) = (k.storage_and_layout().0, v.storage_and_layout().0);
    let (candle_core::Storage::Cpu(kc), candle_core::Storage::Cpu(vc)) = (&*kst, &*vst) else {
        return Err(Error::Device(
            "attention: the cache is not on the host".into(),
        ));
    };
    let (kbuf, vbuf) = (kc.as_slice::<f32>()?, vc.as_slice::<f32>()?);
    let q = q.to_dtype(DType::F32)?.to_vec3::<f32>()?;
    let lists: Vec<Vec<usize>> = (0..n).map(|i| keys.keys(i).collect()).collect();
    let scale = 1.0 / (hd as f32).sqrt();
    let group = nh / nkv;
    let mut out = vec![0f32; n * nh * hd];
    out.par_chunks_mut(hd).enumerate().for_each(|(at, o)| {
        let (i, h) = (at / nh, at % nh);
        let g = h / group;
        let key = |j: usize| &kbuf[ko + g * k0 + j * k1..][..hd];
        let value = |j: usize| &vbuf[vo + g * v0 + j * v1..][..hd];
        let scores: Vec<f32> = lists[i]
            .iter()
            .map(|&j| dot(&q[h][i], key(j)) * scale)
            .collect();
        let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0f32;
        for (&j, &s) in lists[i].iter().zip(&scores) {
            let w = (s - m).exp();
            total += w;
            for (acc, x) in o.iter_mut().zip(value(j)) {
                *acc += w * x;
            }
        }
        for acc in o.iter_mut() {
            *acc /= total;
        }
    });
    Ok(Tensor::from_vec(out, (n, nh * hd), &device)?)
}

/// The host reference: per row and head, softmax-weighted values over the listed keys, summed in
/// f64. Returns `[n, heads * hd]` on `q`'s device.
pub fn reference(q: &Tensor, k: &Tensor, v: &Tensor, keys: &VisibleKeys) -> Result<Tensor> {
    let (nh, n, hd) = q.dims3()?;
    let nkv = k.dim(0)?;
    let device = q.device().clone();
    let q = q.to_dtype(DType::F32)?.to_vec3::<f32>()?;
    let k = k.to_dtype(DType::F32)?.to_vec3::<f32>()?;
    let v = v.to_dtype(DType::F32)?.to_vec3::<f32>()?;
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0f32; n * nh * hd];
    for i in 0..n {
        let list: Vec<usize> = keys.keys(i).collect();
        for h in 0..nh {
            let g = h / (nh / nkv);
            let scores: Vec<f64> = list
                .iter()
                .map(|&j| {
                    let dot: f64 = (0..hd).map(|d| q[h][i][d] as f64 * k[g][j][d] as f64).sum();
                    dot * scale
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let total: f64 = w.iter().sum();
            for d in 0..hd {
                let acc: f64 = list
                    .iter()
                    .zip(&w)
                    .map(|(&j, wj)| wj * v[g][j][d] as f64)
                    .sum();
                out[i * nh * hd + h * hd + d] = (acc / total) as f32;
            }
        }
    }
    Ok(Tensor::from_vec(out, (n, nh * hd), &device)?)
}

/// The largest absolute difference between two tables of rows (NaN where either holds one).
fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, |m, d| {
            if m.is_nan() || d.is_nan() {
                f32::NAN
            } else {
                m.max(d)
            }
        })
}

/// The kernel against [`reference`] on random heads of the shapes treespec's models use, with a
/// draft tree over a prefix longer than a chunk; then invariance: each tree row's output equals,
/// bit for bit, a one-row pass over its prefix and ancestors laid out in a line.
pub(super) fn selftest(
    device: &Device,
    rng: &mut super::Uniform,
    report: &mut Vec<String>,
) -> Result<()> {
    use crate::model::decoder::BlockMask;
    // On a GPU, chunks of 128 for every row, by each row's count, of 32 and of 64 for every row;
    // the host has none.
    let ways: &[usize] = if device.is_cuda() {
        &[CHUNK, 0, 32, 64]
    } else {
        &[CHUNK]
    };
    for (&fixed, (nh, nkv, hd, prefix)) in ways.iter().flat_map(|f| {
        [
            // By count, the root row (prefix + 1 keys) and the rows below it fall on both sides of
            // 512 and of 1,024 keys: chunks of 32 and 64 ranks in one pass, and of 64 and 128.
            (12usize, 2usize, 128usize, 511usize),
            (14, 2, 64, 37),
            (9, 3, 64, 700),
            (4, 4, 32, 5),
            (8, 2, 256, 1023),
            // 32 query heads a K/V head: blocks of 1024 threads (a warp a head); 16: two spans.
            (32, 1, 128, 1023),
            (16, 1, 128, 200),
        ]
        .map(|shape| (f, shape))
    }) {
        let n = 13;
        let parents: Vec<Option<usize>> = (0..n)
            .map(|i| match i {
                0 => None,
                _ => Some((rng.next() * i as f32) as usize % i),
            })
            .collect();
        let mask = BlockMask::from_parents(&parents)?;
        let keys = VisibleKeys::new(Some(&mask), None, n, prefix);
        let len = prefix + n;
        let mut rand =
            |count: usize| -> Vec<f32> { (0..count).map(|_| rng.next() * 4.0 - 2.0).collect() };
        let q_host = rand(nh * n * hd);
        let k_host = rand(nkv * len * hd);
        let v_host = rand(nkv * len * hd);
        let q = Tensor::from_vec(q_host.clone(), (nh, n, hd), device)?;
        let k = Tensor::from_vec(k_host.clone(), (nkv, len, hd), device)?;
        let v = Tensor::from_vec(v_host.clone(), (nkv, len, hd), device)?;
        let got = attention_chunked(&q, &k, &v, &KeyTable::new(&keys, device)?, fixed)?;
        let got = got.to_device(&Device::Cpu)?.to_vec2::<f32>()?;
        let want = reference(&q, &k, &v, &keys)?.to_vec2::<f32>()?;
        let way = match (device.is_cuda(), fixed) {
            (false, _) => String::new(),
            (true, 0) => ", chunks by count".to_string(),
            (true, c) => format!(", chunks of {c}"),
        };
        let err = max_abs_diff(&got, &want);
        if err > 1e-4 || err.is_nan() {
            return Err(Error::Device(format!(
                "attention [{nh}/{nkv} heads x {hd}, {n} rows over {prefix}{way}]: max error {err:e}"
            )));
        }
        // Invariance: row i alone, its keys copied to consecutive cache rows.
        for i in 0..n {
            let list: Vec<usize> = keys.keys(i).collect();
            let gather = |src: &[f32]| -> Vec<f32> {
                (0..nkv)
                    .flat_map(|g| {
                        list.iter().flat_map(move |&j| {
                            src[(g * len + j) * hd..(g * len + j + 1) * hd].to_vec()
                        })
                    })
                    .collect()
            };
            let c = list.len();
            let k1 = Tensor::from_vec(gather(&k_host), (nkv, c, hd), device)?;
            let v1 = Tensor::from_vec(gather(&v_host), (nkv, c, hd), device)?;
            let q1: Vec<f32> = (0..nh)
                .flat_map(|h| q_host[(h * n + i) * hd..(h * n + i + 1) * hd].to_vec())
                .collect();
            let q1 = Tensor::from_vec(q1, (nh, 1, hd), device)?;
            let one = VisibleKeys::new(None, None, 1, c - 1);
            let alone = attention_chunked(&q1, &k1, &v1, &KeyTable::new(&one, device)?, fixed)?;
            let alone = alone.to_device(&Device::Cpu)?.to_vec2::<f32>()?;
            if alone[0]
                .iter()
                .zip(&got[i])
                .any(|(a, b)| a.to_bits() != b.to_bits())
            {
                return Err(Error::Device(format!(
                    "attention [{nh}/{nkv} heads x {hd}{way}]: tree row {i} differs from the same keys in a one-row pass"
                )));
            }
        }
        report.push(format!(
            "attention [{nh}/{nkv} heads x {hd}, {n} tree rows over {prefix}{way}]: max error {err:.1e}, rows batch-invariant"
        ));
    }
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = device {
        selftest_wide(dev, rng, report)?;
    }
    Ok(())
}

/// The wide-pass kernel (f16 tensor cores, chunks by cache row, visibility as masks) against
/// [`reference`] on the blocks wide passes meet, over prefixes of no particular length: a
/// prompt's causal block (from an empty cache too), a chain, a star, a random tree, a DDTree-like
/// tree of several hundred nodes and a grown tree whose rows see listed rows of the cache (a
/// past mask); head counts 9 to 32 over 2 to 8 K/V heads of 64 and 128.
#[cfg(feature = "cuda")]
fn selftest_wide(
    dev: &candle_core::CudaDevice,
    rng: &mut super::Uniform,
    report: &mut Vec<String>,
) -> Result<()> {
    use crate::model::decoder::{BlockMask, PastMask};
    let device = Device::Cuda(dev.clone());
    let mut worst = 0f32;
    let mut cases = 0;
    for (nh, nkv, hd) in [
        (12usize, 2usize, 128usize),
        (9, 3, 64),
        (14, 2, 64),
        (32, 8, 128),
    ] {
        if wide_kernel(hd).is_none() {
            continue;
        }
        for (shape, n, prefix) in [
            ("causal", 70usize, 0usize),
            ("causal", 33, 301),
            ("chain", 40, 130),
            ("star", 65, 7),
            ("random", 97, 1000),
            ("ddtree", 300, 257),
            ("grown", 36, 200),
        ] {
            let mut past = None;
            let parents: Vec<Option<usize>> = (0..n)
                .map(|i| match (shape, i) {
                    (_, 0) | ("star", _) => None,
                    ("chain" | "causal", _) => Some(i - 1),
                    ("ddtree", _) => Some((i - 1) / 2),
                    _ => Some((rng.next() * i as f32) as usize % i),
                })
                .collect();
            let mask = match shape {
                "causal" => None,
                _ => Some(BlockMask::from_parents(&parents)?),
            };
            if shape == "grown" {
                // The last 150 cached rows hidden unless listed: each row sees a random few.
                let start = prefix - 150;
                let visible = (0..n)
                    .map(|_| (start..prefix).filter(|_| rng.next() < 0.1).collect())
                    .collect();
                past = Some(PastMask { start, visible });
            }
            let keys = VisibleKeys::new(mask.as_ref(), past.as_ref(), n, prefix);
            let len = prefix + n;
            let mut rand =
                |count: usize| -> Vec<f32> { (0..count).map(|_| rng.next() * 4.0 - 2.0).collect() };
            let q = Tensor::from_vec(rand(nh * n * hd), (nh, n, hd), &device)?;
            let k = Tensor::from_vec(rand(nkv * len * hd), (nkv, len, hd), &device)?;
            let v = Tensor::from_vec(rand(nkv * len * hd), (nkv, len, hd), &device)?;
            let want = reference(&q, &k, &v, &keys)?.to_vec2::<f32>()?;
            let table = KeyTable::new(&keys, &device)?;
            // Spans of one, two and four chunks a block, and the pass's own choice.
            for span in [0usize, 1, 2, 4] {
                let got = cuda::attention(dev, &q, &k, &v, &table, Some(span), CHUNK)?;
                let got = got.to_device(&Device::Cpu)?.to_vec2::<f32>()?;
                let err = max_abs_diff(&got, &want);
                if err > 2e-2 || err.is_nan() {
                    return Err(Error::Device(format!(
                        "wide attention [{nh}/{nkv} heads x {hd}, {shape} block of {n} rows over {prefix}, span {span}]: max error {err:e}"
                    )));
                }
                worst = worst.max(err);
            }
            cases += 1;
        }
    }
    report.push(format!(
        "wide attention (tensor cores, masks by cache row, f16 K/V) [{cases} blocks: causal, chain, star, random, DDTree-like and grown trees of 33-300 rows over 0-1000 cached rows; 9-32 heads over 2-8 K/V heads of 64 and 128; spans of 1, 2 and 4 chunks and the pass's own]: max error {worst:.1e}"
    ));
    Ok(())
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use candle_core::{CudaDevice, Storage};
    use cudarc::driver::{LaunchConfig, PushKernelArg};

    use crate::gpu::modules::{func, Module};
    /// The combine kernel's optional Q8_1 and f16 outputs, unused here (the GPU decoder step
    /// uses them).
    const NO_Q8: u64 = 0;

    fn driver(e: impl std::fmt::Debug) -> Error {
        crate::gpu::kernel_error("attention", e)
    }

    pub(super) fn attention(
        dev: &CudaDevice,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        table: &KeyTable,
        // Wide (`Some`): through the wide kernel, with spans of this many chunks (0: the pass's
        // own choice, `wide_span`).
        wide: Option<usize>,
        // Else chunks sized by `ranks_for(fixed, ..)`.
        fixed: usize,
    ) -> Result<Tensor> {
        // The kernel's shared memory holds chunks of at most CHUNK ranks.
        debug_assert!(matches!(fixed, 0 | 32 | 64 | 128), "chunk size {fixed}");
        let q = q.to_dtype(DType::F32)?.contiguous()?;
        let (nh, n, hd) = q.dims3()?;
        let nkv = k.dim(0)?;
        // The cache views keep the cache's strides: [kv_heads, len, hd] with rows hd apart.
        let dense = |t: &Tensor| -> Result<Tensor> {
            let t = t.to_dtype(DType::F32)?;
            // Rows are read as float4: 16-byte aligned, hd floats apart, unit stride inside.
            let s = t.stride();
            let aligned = t.layout().start_offset() % 4 == 0 && s[0] % 4 == 0;
            Ok(if s[2] == 1 && s[1] == hd && aligned {
                t
            } else {
                t.force_contiguous()?
            })
        };
        let (k, v) = (dense(k)?, dense(v)?);
        if k.stride() != v.stride() {
            return Err(Error::Device(
                "attention kernel: keys and values laid out differently".into(),
            ));
        }
        let kv_stride = k.stride()[0] as i64;
        let chunks = chunks_for(fixed, table.max_count);
        let stream = dev.cuda_stream();
        let mut out = stream.alloc_zeros::<f32>(n * nh * hd).map_err(driver)?;
        {
            let (qs, ql) = q.storage_and_layout();
            let (ks, kl) = k.storage_and_layout();
            let (vs, vl) = v.storage_and_layout();
            let (ts, tl) = table.table.storage_and_layout();
            let (Storage::Cuda(qs), Storage::Cuda(ks), Storage::Cuda(vs), Storage::Cuda(ts)) =
                (&*qs, &*ks, &*vs, &*ts)
            else {
                return Err(Error::Device(
                    "attention kernel: an input is not on the GPU".into(),
                ));
            };
            let qv = qs.as_cuda_slice::<f32>()?.slice(ql.start_offset()..);
            let kv = ks.as_cuda_slice::<f32>()?.slice(kl.start_offset()..);
            let vv = vs.as_cuda_slice::<f32>()?.slice(vl.start_offset()..);
            let tv = ts.as_cuda_slice::<u32>()?.slice(tl.start_offset()..);
            let (n_i, nh_i, nkv_i, hd_i) = (n as i32, nh as i32, nkv as i32, hd as i32);
            let width_i = table.width as i32;
            let scale = 1.0f32 / (hd as f32).sqrt();
            // Wide passes (as the GPU step runs them from `TREESPEC_WIDE_ROWS` rows): the whole
            // pass on tensor cores, chunks by cache row; else chunks by rank, row by row.
            let wide_name = wide_kernel(hd).filter(|_| wide.is_some());
            let chunks = match wide_name {
                Some(_) => wide_chunks(&table.keys),
                None => chunks,
            };
            let chunks_i = chunks as i32;
            let csz_i = chunk_arg(wide_name.is_some(), fixed);
            // Wide: partials a span of chunks each.
            let (span, slots) = match wide_name {
                Some(_) => match wide {
                    Some(forced @ 1..) => (forced, chunks.div_ceil(forced)),
                    _ => wide_span(n, nh, nkv, chunks),
                },
                None => (1, chunks),
            };
            let (span_i, slots_i) = (span as i32, slots as i32);
            let mut part = stream
                .alloc_zeros::<f32>(n * nh * chunks * (hd + 2))
                .map_err(driver)?;
            if let Some(name) = &wide_name {
                let f = func(dev, Module::Attention, name)?;
                allow_wide_smem(&f, hd).map_err(driver)?;
                // The kernel reads the cache's f16 shadow (the GPU step keeps one beside it).
                let (k16, v16) = (k.to_dtype(DType::F16)?, v.to_dtype(DType::F16)?);
                let (k16s, k16l) = k16.storage_and_layout();
                let (v16s, v16l) = v16.storage_and_layout();
                let (Storage::Cuda(k16s), Storage::Cuda(v16s)) = (&*k16s, &*v16s) else {
                    return Err(Error::Device(
                        "attention kernel: f16 K/V off the GPU".into(),
                    ));
                };
                let kv16_stride = k16l.stride()[0] as i64; // contiguous: len * hd
                let k16v = k16s
                    .as_cuda_slice::<half::f16>()?
                    .slice(k16l.start_offset()..);
                let v16v = v16s
                    .as_cuda_slice::<half::f16>()?
                    .slice(v16l.start_offset()..);
                let mut b = stream.launch_builder(&f);
                b.arg(&qv)
                    .arg(&k16v)
                    .arg(&v16v)
                    .arg(&tv)
                    .arg(&mut part)
                    .arg(&n_i)
                    .arg(&nh_i)
                    .arg(&nkv_i)
                    .arg(&kv16_stride)
                    .arg(&width_i)
                    .arg(&chunks_i)
                    .arg(&span_i)
                    .arg(&slots_i)
                    .arg(&scale);
                // SAFETY: arguments in the kernel's order and types; every key listed is below
                // the cache length (checked by the caller), hd is the kernel's, the partials
                // sized [n, nh, chunks, hd + 2] with chunks covering the highest listed key.
                unsafe { b.launch(wide_launch(n, (nh, nkv, hd), slots)) }.map_err(driver)?;
            } else {
                let chunk_fn = func(dev, Module::Attention, "attention_chunk_f32")?;
                allow_chunk_smem(&chunk_fn, nh / nkv, hd).map_err(driver)?;
                let cfg = chunk_launch(n, (nh, nkv, hd), chunks);
                let mut b = stream.launch_builder(&chunk_fn);
                b.arg(&qv)
                    .arg(&kv)
                    .arg(&vv)
                    .arg(&tv)
                    .arg(&mut part)
                    .arg(&n_i)
                    .arg(&nh_i)
                    .arg(&nkv_i)
                    .arg(&hd_i)
                    .arg(&kv_stride)
                    .arg(&width_i)
                    .arg(&chunks_i)
                    .arg(&csz_i)
                    .arg(&scale);
                // SAFETY: arguments in the kernel's order and types; every key the table lists
                // is below the cache length (checked by the caller), hd <= ATT_HD_MAX and a
                // multiple of 32, nh a multiple of nkv by at most 32 (`supports`), the partials sized
                // [n, nh, chunks, hd + 2] with chunks covering the longest list.
                unsafe { b.launch(cfg) }.map_err(driver)?;
            }
            let all_i = wide_name.is_some() as i32;
            let combine_fn = func(dev, Module::Attention, "attention_combine_f32")?;
            let mut b = stream.launch_builder(&combine_fn);
            b.arg(&part)
                .arg(&tv)
                .arg(&mut out)
                .arg(&n_i)
                .arg(&nh_i)
                .arg(&hd_i)
                .arg(&width_i)
                .arg(&slots_i)
                .arg(&csz_i)
                .arg(&NO_Q8)
                .arg(&0i32)
                .arg(&all_i)
                .arg(&NO_Q8)
                .arg(&32i32);
            let cfg = LaunchConfig {
                grid_dim: (nh as u32, n as u32, 1),
                block_dim: (hd as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: as above; one block of hd threads per (head, row).
            unsafe { b.launch(cfg) }.map_err(driver)?;
        }
        Ok(crate::gpu::tensor_from_slice(dev, out, (n, nh * hd)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::decoder::BlockMask;
    use crate::model::layer::grouped_attention;

    /// The reference agrees with candle's dense path under the equivalent additive mask, and the
    /// checked entry point runs it on the CPU.
    #[test]
    fn the_reference_matches_the_dense_path() {
        let mut rng = crate::gpu::Uniform(7);
        let (nh, nkv, hd, prefix, n) = (6, 2, 32, 9, 5);
        let mask = BlockMask::from_parents(&[None, Some(0), Some(0), Some(2), None]).unwrap();
        let keys = VisibleKeys::new(Some(&mask), None, n, prefix);
        let len = prefix + n;
        let mut rand = |c: usize| (0..c).map(|_| rng.next() - 0.5).collect::<Vec<f32>>();
        let q = Tensor::from_vec(rand(nh * n * hd), (nh, n, hd), &Device::Cpu).unwrap();
        let k = Tensor::from_vec(rand(nkv * len * hd), (nkv, len, hd), &Device::Cpu).unwrap();
        let v = Tensor::from_vec(rand(nkv * len * hd), (nkv, len, hd), &Device::Cpu).unwrap();
        let dense = keys.dense_mask(nh / nkv, &Device::Cpu).unwrap();
        let want = grouped_attention(&q, &k, &v, dense.as_ref(), nkv).unwrap();
        let table = KeyTable::new(&keys, &Device::Cpu).unwrap();
        let got = attention(&q, &k, &v, &table).unwrap();
        let err = (got - want)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(err < 1e-5, "max error {err}");
    }

    #[test]
    fn the_self_test_passes_on_the_cpu() {
        let mut report = vec![];
        selftest(&Device::Cpu, &mut crate::gpu::Uniform(3), &mut report).unwrap();
        assert_eq!(report.len(), 7);
    }

    /// Two warps a head (the default) or four where a block has room (the models' shapes and most
    /// of the self-test's), fewer where threads or shared memory run out; one whenever capped so.
    #[test]
    fn chunks_split_over_as_many_warps_as_fit() {
        for (group, hd, want) in [
            (6, 128, 4), // the 1.5B
            (7, 64, 4),  // the 0.5B
            (4, 128, 4), // Qwen3-8B
            (4, 256, 4),
            (16, 128, 2),
            (32, 128, 1),
        ] {
            assert_eq!(widest_split(group, hd, 4), want, "{group} heads of {hd}");
            assert_eq!(widest_split(group, hd, SPLIT_DEFAULT), want.min(2));
            assert_eq!(widest_split(group, hd, 1), 1);
            assert!(fits(group, hd, want));
        }
    }

    /// Rows of up to 512 keys take chunks of 32 ranks, up to 1,024 of 64, longer ones of 128; a
    /// pass's partials have room for every row's chunks, and no more than the most of them.
    #[test]
    fn chunks_grow_with_the_rows_keys_and_the_partials_hold_them_all() {
        for (count, want) in [
            (1, 32),
            (512, 32),
            (513, 64),
            (1024, 64),
            (1025, 128),
            (9000, 128),
        ] {
            assert_eq!(ranks_for(0, count), want, "{count} keys");
            assert_eq!(ranks_for(64, count), 64);
        }
        for fixed in [0, 32, 64, 128] {
            let mut most = 0;
            for max_count in 0..5000usize {
                most = most.max(max_count.div_ceil(ranks_for(fixed, max_count)));
                assert_eq!(
                    chunks_for(fixed, max_count),
                    most.max(1),
                    "up to {max_count}"
                );
            }
        }
    }

    /// Spans stay within the kernel's `WM_SPAN_MAX` (4) and cover every chunk; a short pass keeps a
    /// block a chunk, a long one over a long context takes four.
    #[test]
    fn wide_spans_cover_every_chunk_and_grow_only_with_the_grid() {
        for (nh, nkv) in [(12usize, 2usize), (32, 8), (9, 3), (4, 4)] {
            for n in [1usize, 32, 64, 256, 1024, 3861] {
                for chunks in [1usize, 2, 4, 8, 16, 32, 64, 256] {
                    let (span, slots) = wide_span(n, nh, nkv, chunks);
                    assert!(
                        [1, 2, 4].contains(&span),
                        "{n} rows, {chunks} chunks: span {span}"
                    );
                    assert_eq!(slots, chunks.div_ceil(span));
                    assert!(slots * span >= chunks && (slots - 1) * span < chunks);
                }
            }
        }
        assert_eq!(wide_span(32, 12, 2, 4), (1, 4));
        assert_eq!(wide_span(256, 12, 2, 64).0, 4);
        assert_eq!(wide_span(1024, 12, 2, 16).0, 4);
    }

    #[test]
    fn a_key_past_the_cache_is_refused() {
        let keys = VisibleKeys::new(None, None, 2, 4);
        let q = Tensor::zeros((2, 2, 32), DType::F32, &Device::Cpu).unwrap();
        let k = Tensor::zeros((1, 5, 32), DType::F32, &Device::Cpu).unwrap();
        let table = KeyTable::new(&keys, &Device::Cpu).unwrap();
        assert!(attention(&q, &k, &k, &table).is_err());
    }
}
