//! The K-quant family checked bit for bit against its CPU reference, and for batch invariance
//! (`treespec selftest`).

use super::*;

/// Every kernel of the family against [`reference`], bit for bit, on random Q4_K and Q6_K
/// weights and activation rows across the tile sizes, split and not, stacked and not; every
/// row of every launch bit for bit the same row launched alone.
pub(crate) fn selftest(
    dev: &candle_core::CudaDevice,
    rng: &mut crate::gpu::Uniform,
    report: &mut Vec<String>,
) -> Result<()> {
    let stream = dev.cuda_stream();
    let device = Device::Cuda(dev.clone());
    let scratch = MmqScratch::new(&stream, 16 << 20)?;
    for (dtype, format, rows, cols) in [
        (GgmlDType::Q4K, Format::Q4K, 48usize, 768usize),
        (GgmlDType::Q6K, Format::Q6K, 48, 1280),
        // Rows of 4864 (19 super-blocks: chunks of 3, the last one short), 8960 (35, odd: Q6_K
        // blocks at both alignments), 12288 (long rows of the 8B shape).
        (GgmlDType::Q4K, Format::Q4K, 32, 4864),
        (GgmlDType::Q6K, Format::Q6K, 32, 8960),
        (GgmlDType::Q4K, Format::Q4K, 16, 12288),
        // Many weight rows: tiles of four warps, the last block partly past the matrix.
        (GgmlDType::Q4K, Format::Q4K, 1040, 256),
        (GgmlDType::Q6K, Format::Q6K, 1040, 512),
    ] {
        let tag = tag_of(format).expect("a family format");
        let (q, w_bytes) = random_matrix(&device, rng, dtype, (rows, cols))?;
        let w_ptr = q.device_ptr()? as u64;
        let max_n = 131usize;
        let yq = crate::gpu::products::qblocks(cols);
        let y_bytes = random_rows(rng, max_n, cols, yq);
        let want = reference(format, &w_bytes, (rows, cols), &y_bytes, (max_n, yq));
        let y = stream.clone_htod(&y_bytes).map_err(driver)?;
        let y_ptr = y.device_ptr(&stream).0;
        let run = |n: usize, first: usize, kernel: Mmq| -> Result<Vec<f32>> {
            let f = mmq_func(dev, tag, kernel)?;
            let out = stream.alloc_zeros::<f32>(n * rows).map_err(driver)?;
            let y_at = y_ptr + (first * yq * Q8_BYTES) as u64;
            let o = out.device_ptr(&stream).0;
            let stack = Stack::one(w_ptr, rows, cols);
            launch_mmq(
                LaunchOn::new(&stream),
                (&f, tag),
                &stack,
                kernel,
                (y_at, yq),
                (o, rows),
                n,
                &scratch,
            )?;
            stream.clone_dtoh(&out).map_err(driver)
        };
        let mut launches: Vec<(usize, Mmq)> = vec![
            (1, Mmq::Tile(1)),
            (1, Mmq::Rows(1)),
            (1, Mmq::Warp(WarpLayout::Chunks)),
            (1, Mmq::Warp(WarpLayout::Chunks4)),
            (1, Mmq::Warp(WarpLayout::Contiguous)),
            (3, Mmq::Rows(4)),
            (5, Mmq::Tile(1)),
            (max_n, Mmq::Tile(1)),
            (max_n, Mmq::Tile(2)),
            (max_n, Mmq::Tile(4)),
            (40, Mmq::Tile(8)),
        ];
        for n in [1usize, 2, 3, 4, 5, 8, 9, 16, 17, 33, 64, 65, max_n] {
            launches.push((n, mmq_kernel(n, rows, cols)));
        }
        for (n, kernel) in launches {
            let got = run(n, 0, kernel).map_err(|e| {
                Error::Device(format!(
                    "product {tag} [{rows} x {cols}], {n} rows ({kernel:?}): {e}"
                ))
            })?;
            for c in 0..n {
                for r in 0..rows {
                    let (g, w) = (got[c * rows + r], want[c * rows + r]);
                    if g.to_bits() != w.to_bits() {
                        return Err(Error::Device(format!(
                            "product {tag} [{rows} x {cols}]: row {c} column {r} of a {n}-row launch ({kernel:?}) is {g}, the contract's reference {w}"
                        )));
                    }
                }
            }
        }
        // The reference against the dequantised weights in f64 (what the contract computes).
        let deq = q.dequantize(&Device::Cpu)?.to_vec2::<f32>()?;
        let mut worst = 0f64;
        for c in 0..4 {
            let x: Vec<f64> = (0..cols)
                .map(|k| {
                    let b = &y_bytes[(c * yq + k / 32) * Q8_BYTES..];
                    let d = half::f16::from_le_bytes([b[0], b[1]]).to_f64();
                    d * (b[4 + k % 32] as i8) as f64
                })
                .collect();
            for r in (0..rows).step_by(7) {
                let (mut dot, mut mag) = (0f64, 0f64);
                for k in 0..cols {
                    dot += deq[r][k] as f64 * x[k];
                    mag += (deq[r][k] as f64 * x[k]).abs();
                }
                worst = worst.max((want[c * rows + r] as f64 - dot).abs() / mag.max(1e-9));
            }
        }
        if worst > 1e-5 {
            return Err(Error::Device(format!(
                "product {tag} [{rows} x {cols}]: the contract's reference is {worst:.1e} of the absolute sum off the dequantised product"
            )));
        }
        report.push(format!(
            "product {tag} [{rows} x {cols}], 1-{max_n} rows, every kernel (split and not): = the contract's CPU reference bit for bit; reference within {worst:.1e} of the dequantised product"
        ));
    }
    Ok(())
}

/// Stacked products (q/k/v, gate/up: one launch over two or three matrices) against one
/// launch a matrix, bit for bit, for every kernel.
pub(crate) fn selftest_stacked(
    dev: &candle_core::CudaDevice,
    rng: &mut crate::gpu::Uniform,
    report: &mut Vec<String>,
) -> Result<()> {
    let stream = dev.cuda_stream();
    let device = Device::Cuda(dev.clone());
    let scratch = MmqScratch::new(&stream, 16 << 20)?;
    for (dtype, tag, cols) in [
        (GgmlDType::Q4K, "q4_k", 1536usize),
        (GgmlDType::Q6K, "q6_k", 1536),
    ] {
        for row_counts in [&[64usize, 16][..], &[48, 16, 32]] {
            let mats: Vec<Mat> = row_counts
                .iter()
                .map(|&rows| {
                    let q = random_matrix(&device, rng, dtype, (rows, cols))?.0;
                    let ptr = q.device_ptr()? as u64;
                    Ok(Mat {
                        ptr,
                        tag,
                        rows,
                        cols,
                        _keep: q,
                    })
                })
                .collect::<Result<_>>()?;
            let total: usize = row_counts.iter().sum();
            let yq = crate::gpu::products::qblocks(cols);
            let n = 40;
            let y = stream
                .clone_htod(&random_rows(rng, n, cols, yq))
                .map_err(driver)?;
            let y_ptr = y.device_ptr(&stream).0;
            for kernel in Mmq::ALL {
                let nk = match kernel {
                    Mmq::Rows(r) => r,
                    Mmq::Warp(_) => 1,
                    Mmq::Tile(_) => n,
                };
                let f = mmq_func(dev, tag, kernel)?;
                let on = LaunchOn::new(&stream);
                let out = |stacked: bool| -> Result<Vec<f32>> {
                    let dst = stream.alloc_zeros::<f32>(nk * total).map_err(driver)?;
                    let d = dst.device_ptr(&stream).0;
                    if stacked {
                        let stack = Stack::of(&mats.iter().collect::<Vec<_>>())?;
                        launch_mmq(
                            on,
                            (&f, tag),
                            &stack,
                            kernel,
                            (y_ptr, yq),
                            (d, total),
                            nk,
                            &scratch,
                        )?;
                    } else {
                        let mut at = 0;
                        for m in &mats {
                            let stack = Stack::one(m.ptr, m.rows, cols);
                            launch_mmq(
                                on,
                                (&f, tag),
                                &stack,
                                kernel,
                                (y_ptr, yq),
                                (d + (at * 4) as u64, total),
                                nk,
                                &scratch,
                            )?;
                            at += m.rows;
                        }
                    }
                    stream.clone_dtoh(&dst).map_err(driver)
                };
                let (a, b) = (out(true)?, out(false)?);
                if !a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()) {
                    return Err(Error::Device(format!(
                        "stacked product {tag} {row_counts:?} x {cols} ({kernel:?}): differs from one launch a matrix"
                    )));
                }
            }
            report.push(format!(
                "stacked product {tag} {row_counts:?} x {cols}, every kernel: = one launch a matrix, bit for bit"
            ));
        }
    }
    Ok(())
}
