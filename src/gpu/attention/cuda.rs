//! The attention kernels' launches on a CUDA device.

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
    let (k, v) = (dense_rows(k, hd)?, dense_rows(v, hd)?);
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
        let all = wide_name.is_some();
        combine(
            dev,
            (&part, &tv, &mut out),
            (n, nh, hd),
            (table.width, slots, csz_i, all),
        )?;
    }
    Ok(crate::gpu::tensor_from_slice(dev, out, (n, nh * hd)))
}

/// A cache view `t` (`[kv_heads, len, hd]`) in f32 with rows the kernels can read as float4:
/// 16-byte aligned, `hd` floats apart, unit stride inside (the view itself where it already is).
fn dense_rows(t: &Tensor, hd: usize) -> Result<Tensor> {
    let t = t.to_dtype(DType::F32)?;
    let s = t.stride();
    let aligned = t.layout().start_offset() % 4 == 0 && s[0] % 4 == 0;
    Ok(if s[2] == 1 && s[1] == hd && aligned {
        t
    } else {
        t.force_contiguous()?
    })
}

/// The combine kernel over the partials `part` of `n` rows of `nh` heads of `hd` into `out`
/// (`width` keys a table row, `slots` partials a (row, head), chunks of `csz` ranks; `all`:
/// every slot, as the wide kernel leaves them).
fn combine(
    dev: &CudaDevice,
    (part, tv, out): (
        &cudarc::driver::CudaSlice<f32>,
        &cudarc::driver::CudaView<'_, u32>,
        &mut cudarc::driver::CudaSlice<f32>,
    ),
    (n, nh, hd): (usize, usize, usize),
    (width, slots, csz_i, all): (usize, usize, i32, bool),
) -> Result<()> {
    let (n_i, nh_i, hd_i) = (n as i32, nh as i32, hd as i32);
    let (width_i, slots_i, all_i) = (width as i32, slots as i32, all as i32);
    let stream = dev.cuda_stream();
    let combine_fn = func(dev, Module::Attention, "attention_combine_f32")?;
    let mut b = stream.launch_builder(&combine_fn);
    b.arg(part)
        .arg(tv)
        .arg(out)
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
        .arg(&32i32)
        .arg(&NO_Q8)
        .arg(&0i32);
    let cfg = LaunchConfig {
        grid_dim: (nh as u32, n as u32, 1),
        block_dim: (hd as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: arguments in the kernel's order and types; the partials and the table as the
    // chunk or wide kernel left them; one block of hd threads per (head, row).
    unsafe { b.launch(cfg) }.map_err(driver)?;
    Ok(())
}
