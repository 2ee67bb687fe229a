//! The wide products against a CPU reference (`treespec selftest --device cuda`).

use super::*;

/// The wide product against a CPU reference (the dequantised weights and activations
/// multiplied in f64) on random Q4_K and Q6_K weights, three matrices of one input (two of
/// them in one copy), rows across GEMM tile sizes: within f16's rounding of the weights
/// and activations.
pub(crate) fn selftest(
    dev: &candle_core::CudaDevice,
    rng: &mut crate::gpu::Uniform,
    report: &mut Vec<String>,
) -> Result<()> {
    let stream = dev.cuda_stream();
    let device = Device::Cuda(dev.clone());
    let mut worst = 0f64;
    for (dtype, rows, cols) in [
        (GgmlDType::Q4K, 48usize, 1536usize),
        (GgmlDType::Q6K, 40, 768),
    ] {
        // Three matrices of one input: the first two copied back to back (one GEMM), the
        // third apart (a second); a row stride with padding blocks (yq > cols / 32).
        let mut mats = vec![];
        for _ in 0..3 {
            let w: Vec<f32> = (0..rows * cols).map(|_| rng.next() * 2.0 - 1.0).collect();
            let q = QTensor::quantize(&Tensor::from_vec(w, (rows, cols), &device)?, dtype)?;
            let deq = q.dequantize(&Device::Cpu)?.to_vec2::<f32>()?;
            let ptr = q.device_ptr()? as u64;
            mats.push((deq, ptr, Arc::new(q)));
        }
        let group = |js: &[usize]| js.iter().map(|&j| (mats[j].1, &mats[j].2)).collect();
        let Some(wide) = WideProducts::new(dev, vec![group(&[0, 1]), group(&[2])], 1)? else {
            report.push("wide products: skipped (no room on the GPU for the copies)".into());
            return Ok(());
        };
        let stack: Vec<(u64, usize, usize)> =
            mats.iter().map(|(_, ptr, _)| (*ptr, rows, cols)).collect();
        let yq = cols / 32 + 2;
        for n in [1usize, 7, 64, 130] {
            let (bytes, xq) = crate::gpu::products::random_q8_1(rng, n, cols, yq);
            let y = stream.clone_htod(&bytes).map_err(driver)?;
            let half = stream.alloc_zeros::<u16>(n * cols).map_err(driver)?;
            let (y_ptr, h_ptr) = (y.device_ptr(&stream).0, half.device_ptr(&stream).0);
            // Each way of writing: set, added to a residual of 0.5, as f16.
            for out in [Out::Set, Out::Add, Out::Half] {
                let base = if out == Out::Add { 0.5f32 } else { 0.0 };
                let len = n * 3 * rows;
                let got: Vec<f32> = match out {
                    Out::Half => {
                        let dst = stream.alloc_zeros::<u16>(len).map_err(driver)?;
                        let at = (dst.device_ptr(&stream).0, 3 * rows);
                        wide.product(&stream, &stack, (y_ptr, yq), (h_ptr, false), at, n, out)?;
                        let bits = stream.clone_dtoh(&dst).map_err(driver)?;
                        bits.iter()
                            .map(|&b| half::f16::from_bits(b).to_f32())
                            .collect()
                    }
                    Out::Set | Out::Add => {
                        let dst = stream.clone_htod(&vec![base; len]).map_err(driver)?;
                        let at = (dst.device_ptr(&stream).0, 3 * rows);
                        wide.product(&stream, &stack, (y_ptr, yq), (h_ptr, false), at, n, out)?;
                        stream.clone_dtoh(&dst).map_err(driver)?
                    }
                };
                for c in 0..n {
                    for (j, (deq, _, _)) in mats.iter().enumerate() {
                        for (r, wr) in deq.iter().enumerate() {
                            let (mut want, mut mag) = (base as f64, 0f64);
                            for k in 0..cols {
                                let p = wr[k] as f64 * xq[c * cols + k] as f64;
                                want += p;
                                mag += p.abs();
                            }
                            let g = got[c * 3 * rows + j * rows + r] as f64;
                            let err = (g - want).abs() / mag.max(1e-6);
                            worst = worst.max(err);
                            if err > 2e-3 || !g.is_finite() {
                                return Err(Error::Device(format!(
                                    "wide product ({out:?}) {dtype:?} [{rows} x {cols}], {n} rows: row {c} column {r} of matrix {j} is {g}, reference {want}"
                                )));
                            }
                        }
                    }
                }
            }
        }
    }
    report.push(format!(
        "wide products (f16 copies, cuBLAS) Q4_K and Q6_K, 1-130 rows, three of one input (two copied back to back), set, added to a residual and as f16: largest error {worst:.1e} of the absolute sum"
    ));
    Ok(())
}
