//! Batch-invariant grouped-query attention over per-row key lists (`kernels/attention.cu`): each
//! new row attends to the cached keys a [`VisibleKeys`] lists for it, in rank order, and its output
//! depends only on those keys and its query, never on the other rows of the pass. On the GPU this
//! is two launches per layer (chunks of 32 to 128 ranks, then their combination) in place of
//! candle's matmul / scale / mask / softmax / matmul / transpose chain. On the host [`attention`]
//! runs each row and head whole on one thread (`host`), so the CPU's passes are batch-invariant
//! too (candle's matmuls are not: their summation order depends on the rows of the pass, which
//! made a verify pass and a one-token step differ in the last bits and a near tie flip);
//! [`reference`](fn@reference) is the definition both are tested against.

use crate::arch::visible::VisibleKeys;
use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};

/// Ranks per chunk at most, and the cache rows of each of the wide kernel's chunks: `ATT_CHUNK`
/// in `kernels/attention.cu`.
pub const CHUNK: usize = 128;

/// A row is cut into at most this many chunks while chunks of 32 or 64 ranks can do it
/// (`ATT_FEW_CHUNKS` in `kernels/attention.cu`).
const FEW_CHUNKS: usize = 16;

/// Ranks a chunk of `attention_chunk_f32` holds for a row that sees `count` keys: `fixed` where it
/// is not 0, else ("by count") the fewest of 32 and 64 that cut the row into at most
/// `FEW_CHUNKS` chunks, else [`CHUNK`] (`att_chunk_ranks` in `kernels/attention.cu`). By count,
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
/// `CHUNK_SMEM_MAX`: limits of the kernel, not of the host's path.)
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

mod selftest;
pub(super) use selftest::selftest;

#[cfg(feature = "cuda")]
mod cuda;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::batch::BlockMask;
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
