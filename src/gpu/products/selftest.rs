//! The products' kernels checked against CPU references and for batch invariance (`treespec
//! selftest`).

use super::*;

/// The tensor-core product against a CPU reference on random Q4_K and Q6_K weights (the
/// weights dequantised by candle, the activations quantised to Q8_1 here as the kernels of
/// `kernels/rows.cu` do), for row counts across the tile sizes, and batch invariance: every
/// row of every launch bit for bit the same as that row launched alone.
pub(crate) fn selftest_products(
    dev: &candle_core::CudaDevice,
    rng: &mut crate::gpu::Uniform,
    report: &mut Vec<String>,
) -> Result<()> {
    let stream = dev.cuda_stream();
    let device = Device::Cuda(dev.clone());
    for (dtype, tag, rows, cols) in [
        (GgmlDType::Q4K, "q4_k", 32usize, 768usize),
        (GgmlDType::Q6K, "q6_k", 48, 1280),
        (GgmlDType::Q4K, "q4_k", 16, 4864),
        // The long one-row kernel on Q6_K blocks of both alignments (35 a row), and a row
        // whose staged activations pass 48 KiB of shared memory.
        (GgmlDType::Q6K, "q6_k", 16, 8960),
        (GgmlDType::Q4K, "q4_k", 16, 32768),
        // Enough weight rows for the staged kernel's widest blocks (four warps along the rows),
        // the last block's warps partly past the matrix.
        (GgmlDType::Q4K, "q4_k", 17_936, 256),
        (GgmlDType::Q6K, "q6_k", 17_936, 256),
    ] {
        let w_host: Vec<f32> = (0..rows * cols).map(|_| rng.next() * 2.0 - 1.0).collect();
        let wt = Tensor::from_vec(w_host, (rows, cols), &device)?;
        let q = QTensor::quantize(&wt, dtype)?;
        let w_deq = q
            .dequantize(&device)?
            .to_device(&Device::Cpu)?
            .to_vec2::<f32>()?;
        let w_ptr = q.device_ptr()? as u64;
        let max_n = 131usize;
        let yq = cols / 32;
        let (bytes, xq) = random_q8_1(rng, max_n, cols, yq);
        let y = stream.clone_htod(&bytes).map_err(driver)?;
        let y_ptr = y.device_ptr(&stream).0;
        let run = |n: usize, first: usize, kernel: Mmtc| -> Result<Vec<f32>> {
            let f = mmtc_func(dev, tag, kernel)?;
            let out = stream.alloc_zeros::<f32>(n * rows).map_err(driver)?;
            let y_at = y_ptr + (first * yq * Q8_BYTES) as u64;
            let o = out.device_ptr(&stream).0;
            let stack = Stack::one(w_ptr, rows, cols);
            launch_mmtc(
                LaunchOn::new(&stream),
                &f,
                &stack,
                kernel,
                (y_at, yq),
                (o, rows),
                n,
            )?;
            stream.clone_dtoh(&out).map_err(driver)
        };
        let mut worst = 0f32;
        // One row through a tile kernel as well as through the one-row kernel, and the tile
        // and staged kernels at row counts the runtime gives the other.
        let long = long_rows(cols);
        let mut launches = vec![
            (1usize, Mmtc::Tiles(1)),
            (1, Mmtc::Rows { rows: 1, long }),
            (3, Mmtc::Rows { rows: 4, long }),
            (1, Mmtc::Staged),
            (5, Mmtc::Staged),
            (max_n, Mmtc::Staged),
            (max_n, Mmtc::Tiles(8)),
        ];
        for n in [1usize, 2, 3, 4, 5, 8, 9, 16, 17, 40, 64, 65, max_n] {
            launches.push((n, mmtc_kernel(n, rows, cols)));
        }
        for (n, kernel) in launches {
            let got = run(n, 0, kernel).map_err(|e| {
                Error::Device(format!(
                    "tensor-core product {tag} [{rows} x {cols}], {n} rows ({kernel:?}): {e}"
                ))
            })?;
            for c in 0..n {
                let alone = run(1, c, mmtc_kernel(1, rows, cols))?;
                for r in 0..rows {
                    let g = got[c * rows + r];
                    if g.to_bits() != alone[r].to_bits() {
                        return Err(Error::Device(format!(
                            "tensor-core product {tag} [{rows} x {cols}]: row {c} of a {n}-row launch ({kernel:?}) differs from its one-row launch ({g} vs {})",
                            alone[r]
                        )));
                    }
                    // The reference on every weight row of the small shapes, a sample of the big.
                    if rows > 1024 && r % 37 != 0 {
                        continue;
                    }
                    let (mut want, mut mag) = (0f64, 0f64);
                    for k in 0..cols {
                        let p = w_deq[r][k] as f64 * xq[c * cols + k] as f64;
                        want += p;
                        mag += p.abs();
                    }
                    let err = ((g as f64 - want).abs() / mag.max(1e-6)) as f32;
                    worst = worst.max(err);
                    if err > 2e-3 {
                        return Err(Error::Device(format!(
                            "tensor-core product {tag} [{rows} x {cols}], {n} rows: row {c} column {r} is {g}, reference {want}"
                        )));
                    }
                }
            }
        }
        report.push(format!(
            "tensor-core product {tag} [{rows} x {cols}], 1-{max_n} rows: largest error {worst:.1e} of the absolute sum, rows batch-invariant and equal to the one-row kernel's"
        ));
    }
    Ok(())
}

/// The cases of [`selftest_stacked`]: (format, tag, on tensor cores, row length). At 1536
/// values a row the one-row tensor-core kernel takes 11 rows a block, so blocks
/// span the matrices' boundaries; the dp4a stacks' boundaries are not all multiples of 8
/// (the kernels of eight weight rows a block). The dp4a rows: 4608 values, where each of
/// the one-row kernel's threads takes several quantised blocks (each lane of the
/// one-row-a-warp kernel, four threads' worth), and the short rows of the models the
/// warp kernel is for (896: the 0.5B's Q5_0 and Q4_1 rows; 1536 for Q6_K).
const STACKED_CASES: [(GgmlDType, &str, bool, usize); 9] = [
    (GgmlDType::Q4_0, "q4_0", false, 4608),
    (GgmlDType::Q8_0, "q8_0", false, 4608),
    (GgmlDType::Q4K, "q4_k", false, 4608),
    (GgmlDType::Q4_1, "q4_1", false, 896),
    (GgmlDType::Q5_0, "q5_0", false, 896),
    (GgmlDType::Q6K, "q6_k", false, 1536),
    (GgmlDType::Q4K, "q4_k", true, 1536),
    (GgmlDType::Q6K, "q6_k", true, 1536),
    // The warp-a-row kernel (rows of 4096 values or more).
    (GgmlDType::Q4K, "q4_k", true, 4608),
];

/// Stacked products (`mmvq_<tag>_<kernel>_stacked`, and the tensor-core kernels when
/// `tensor_cores`) against one launch per matrix, bit for bit, for two and three stacked
/// matrices of a few formats, one activation row and five (the chunked kernel), and 20 and 40
/// on tensor cores (the 4-tile kernel, the staged kernel); on dp4a every kernel ([`Dp4a`]), stacked and not,
/// against the one-row kernel taken from candle (`mmvq_<tag>_x1`) launched a matrix and an
/// activation row at a time.
pub(crate) fn selftest_stacked(
    dev: &candle_core::CudaDevice,
    rng: &mut crate::gpu::Uniform,
    report: &mut Vec<String>,
    tensor_cores: bool,
) -> Result<()> {
    let stream = dev.cuda_stream();
    let device = Device::Cuda(dev.clone());
    let with_tc = tensor_cores;
    for (dtype, tag, tensor_cores, cols) in STACKED_CASES.into_iter().filter(|c| with_tc || !c.2) {
        let family = if tensor_cores { "tensor-core" } else { "dp4a" };
        let row_counts_n = if tensor_cores {
            &[1usize, 5, 20, 40][..]
        } else {
            &[1, 5]
        };
        let stacks = if tensor_cores {
            [&[64usize, 16][..], &[48, 16, 16]]
        } else {
            [&[64usize, 16][..], &[90, 30, 22]]
        };
        let yq = qblocks(cols);
        for row_counts in stacks {
            let mut mats = vec![];
            for &rows in row_counts {
                let w: Vec<f32> = (0..rows * cols).map(|_| rng.next() * 2.0 - 1.0).collect();
                let q = QTensor::quantize(&Tensor::from_vec(w, (rows, cols), &device)?, dtype)?;
                let ptr = q.device_ptr()? as u64;
                mats.push(Mat {
                    ptr,
                    tag,
                    rows,
                    cols,
                    _keep: Arc::new(q),
                });
            }
            let total: usize = row_counts.iter().sum();
            for &n in row_counts_n {
                let padded = n.div_ceil(4) * 4;
                let bytes: Vec<u8> = (0..padded * yq * Q8_BYTES)
                    .map(|i| match i % Q8_BYTES {
                        0 => 0x1f, // d = half 0x1f1f: ~0.0066
                        1 => 0x1f,
                        2 | 3 => 0,
                        _ => (rng.next() * 255.0) as u8,
                    })
                    .collect();
                let y = stream.clone_htod(&bytes).map_err(driver)?;
                let y_ptr = y.device_ptr(&stream).0;
                let on = LaunchOn::new(&stream);
                // 40 rows through the staged kernel, which the runtime takes for stacks of
                // enough rows to fill the GPU.
                let kernel = match n {
                    40 => Mmtc::Staged,
                    _ => mmtc_kernel(n, total, cols),
                };
                // One launch of the stack `stack` over `rows` activation rows from row `from`
                // into its output rows at `o` (dp4a: with `dp4a`).
                let launch = |stack: &Stack, o: u64, dp4a: Dp4a, (from, rows): (usize, usize)| {
                    let y = (y_ptr + (from * yq * Q8_BYTES) as u64, yq);
                    let dst = (o + (from * total * 4) as u64, total);
                    if tensor_cores {
                        let f = mmtc_func(dev, tag, kernel)?;
                        launch_mmtc(on, &f, stack, kernel, y, dst, rows)
                    } else {
                        let f = mmvq_func(dev, tag, dp4a, !stack.is_one())?;
                        launch_mmvq(on, &f, dp4a, stack, y, dst, rows)
                    }
                };
                // The n rows' products, the stack in one launch or one launch a matrix, with
                // `dp4a`; `Dp4a::Block` one activation row at a time.
                let out = |stacked: bool, dp4a: Dp4a| -> Result<Vec<f32>> {
                    let dst = stream.alloc_zeros::<f32>(padded * total).map_err(driver)?;
                    let d = dst.device_ptr(&stream).0;
                    let passes: Vec<(usize, usize)> = match dp4a {
                        Dp4a::Block if !tensor_cores => (0..n).map(|r| (r, 1)).collect(),
                        _ => vec![(0, n)],
                    };
                    for pass in passes {
                        if stacked {
                            let refs: Vec<&Mat> = mats.iter().collect();
                            launch(&Stack::of(&refs)?, d, dp4a, pass)?;
                        } else {
                            let mut at = 0;
                            for m in &mats {
                                let stack = Stack::one(m.ptr, m.rows, cols);
                                launch(&stack, d + (at * 4) as u64, dp4a, pass)?;
                                at += m.rows;
                            }
                        }
                    }
                    stream.clone_dtoh(&dst).map_err(driver)
                };
                // Reference: one launch a matrix (dp4a: of the one-row kernel taken from
                // candle, `_x1`, a row at a time); against it every dp4a kernel for the pass
                // (those of one activation row, or the chunked one), stacked or not.
                let reference = out(false, Dp4a::Block)?;
                let kernels: Vec<Dp4a> = match tensor_cores {
                    true => vec![Dp4a::Block],
                    false => Dp4a::ALL
                        .into_iter()
                        .filter(|k| (k.activation_rows() == 1) == (n == 1))
                        .collect(),
                };
                for dp4a in kernels {
                    for stacked in [true, false] {
                        let got = out(stacked, dp4a)?;
                        let same = got[..n * total]
                            .iter()
                            .zip(&reference[..n * total])
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        if !same {
                            let how = if stacked {
                                "stacked"
                            } else {
                                "one launch a matrix"
                            };
                            let with = if tensor_cores { "" } else { dp4a.suffix() };
                            return Err(Error::Device(format!(
                                "{family} product {tag} {row_counts:?} x {cols}, {n} rows, {how} {with}: differs from one launch a matrix and a row"
                            )));
                        }
                    }
                }
            }
            let of = if tensor_cores {
                "one launch a matrix"
            } else {
                "the one-row kernel (_x1), a launch a matrix and a row (every dp4a kernel)"
            };
            report.push(format!(
                "stacked {family} product {tag} {row_counts:?} x {cols}, {row_counts_n:?} rows: = {of}, bit for bit"
            ));
        }
    }
    Ok(())
}
