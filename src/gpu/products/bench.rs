//! The products' kernels timed alone on random weights of real models' shapes (`treespec bench
//! --products`), for the developers.

use super::*;

/// Time the dp4a and the tensor-core products on the shapes of Qwen2.5-1.5B's and
/// Qwen3.6-27B's matrices (random weights), for 1 to 256 activation rows, each launch replayed
/// from a CUDA graph of 50, then the K-quant family of [`crate::gpu::mmq`] on the 1.5B's and the 8B's shapes:
/// markdown tables of microseconds a launch.
pub fn bench_products(dev: &candle_core::CudaDevice) -> Result<String> {
    let stream = dev.cuda_stream();
    let device = Device::Cuda(dev.clone());
    let mut rng = crate::gpu::Uniform(0x2545_F491_4F6C_DD1D);
    let max_n = 256usize;
    let mut out = String::from(
        "| matrix | rows x cols | n | dp4a us | dp4a, a block a row us | mmtc kernel us | the other mmtc kernel us |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (what, dtype, tag, rows, cols) in [
        ("q, o", GgmlDType::Q4K, "q4_k", 1536usize, 1536usize),
        ("k, v", GgmlDType::Q4K, "q4_k", 256, 1536),
        ("gate, up", GgmlDType::Q4K, "q4_k", 8960, 1536),
        ("down", GgmlDType::Q4K, "q4_k", 1536, 8960),
        ("down", GgmlDType::Q6K, "q6_k", 1536, 8960),
        ("LM head", GgmlDType::Q6K, "q6_k", 151_936, 1536),
        // The 0.5B drafter's shapes.
        ("0.5B q, o", GgmlDType::Q5_0, "q5_0", 896, 896),
        ("0.5B k, v", GgmlDType::Q5_0, "q5_0", 128, 896),
        ("0.5B gate, up", GgmlDType::Q5_0, "q5_0", 4864, 896),
        ("0.5B down", GgmlDType::Q8_0, "q8_0", 896, 4864),
        ("0.5B LM head", GgmlDType::Q8_0, "q8_0", 151_936, 896),
        // Qwen3.6-27B's (`treespec synth --shape qwen3.6-27b`): gated attention's q and gate,
        // a Gated DeltaNet layer's [qkv | z] projections and out projection, the MLP.
        ("27B q, gate", GgmlDType::Q4K, "q4_k", 12_288, 5120),
        ("27B GDN in", GgmlDType::Q4K, "q4_k", 16_384, 5120),
        ("27B GDN out", GgmlDType::Q4K, "q4_k", 5120, 6144),
        ("27B gate, up", GgmlDType::Q4K, "q4_k", 34_816, 5120),
        ("27B down", GgmlDType::Q4K, "q4_k", 5120, 17_408),
        ("27B down", GgmlDType::Q6K, "q6_k", 5120, 17_408),
    ] {
        let w_host: Vec<f32> = (0..rows * cols).map(|_| rng.next() - 0.5).collect();
        let q = QTensor::quantize(&Tensor::from_vec(w_host, (rows, cols), &device)?, dtype)?;
        let w_ptr = q.device_ptr()? as u64;
        let yq = qblocks(cols);
        let mut bytes = vec![0u8; max_n * yq * Q8_BYTES];
        for blk in bytes.chunks_mut(Q8_BYTES) {
            blk[..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            for b in &mut blk[4..] {
                *b = (rng.next() * 255.0) as u8;
            }
        }
        let y = stream.clone_htod(&bytes).map_err(driver)?;
        let y_ptr = y.device_ptr(&stream).0;
        let dst = stream.alloc_zeros::<f32>(max_n * rows).map_err(driver)?;
        let d_ptr = dst.device_ptr(&stream).0;
        let has_tc = matches!(tag, "q4_k" | "q6_k") && rows % 16 == 0 && cols % 256 == 0;
        for n in [1usize, 2, 4, 5, 8, 16, 32, 64, 128, 256] {
            // The dp4a kernel the runtime takes and, for one row, the one-row-a-block kernel.
            let picked = Dp4a::for_pass(tag, rows, cols, n);
            let dp4a = [
                Some(picked),
                (n == 1 && picked != Dp4a::Block).then_some(Dp4a::Block),
            ];
            // The mmtc.cu kernel the runtime takes, and the other: up to 8 rows the 8-row tile
            // kernel, beyond it the staged kernel or the tile kernel, whichever is not taken.
            let picked_tc = mmtc_kernel(n, rows, cols);
            let other = match (n, picked_tc) {
                (_, Mmtc::Warp { rows, .. }) => Mmtc::Rows {
                    rows,
                    long: long_rows(cols),
                },
                (..=8, _) => Mmtc::Tiles(1),
                (_, Mmtc::Staged) => Mmtc::Tiles(n.div_ceil(8).next_power_of_two().min(8)),
                _ => Mmtc::Staged,
            };
            // Microseconds a launch of `kernel` (an mmtc.cu kernel) or else `mmvq_kernel`.
            let time = |kernel: Option<Mmtc>, mmvq_kernel: Dp4a| -> Result<f64> {
                let mmvq = mmvq_func(dev, tag, mmvq_kernel, false)?;
                let mmtc = kernel.map(|k| mmtc_func(dev, tag, k)).transpose()?;
                // Each kernel alone: no dependent launches, which would overlap the 50.
                let alone = LaunchOn {
                    stream: &stream,
                    pdl: false,
                };
                let stack = Stack::one(w_ptr, rows, cols);
                let launch = || match (&mmtc, kernel) {
                    (Some(f), Some(t)) => {
                        launch_mmtc(alone, f, &stack, t, (y_ptr, yq), (d_ptr, rows), n)
                    }
                    _ => launch_mmvq(
                        alone,
                        &mmvq,
                        mmvq_kernel,
                        &stack,
                        (y_ptr, yq),
                        (d_ptr, rows),
                        n,
                    ),
                };
                launch()?;
                let graph = capture(&stream, || (0..50).try_for_each(|_| launch()))?;
                graph.launch().map_err(driver)?;
                Ok(replay_micros(&stream, &graph, 5)? / 50.0)
            };
            let shown = |t: Option<f64>| t.map_or("-".into(), |t| format!("{t:.1}"));
            let mut dp4a_us = [None, None];
            for (us, kernel) in dp4a_us.iter_mut().zip(dp4a) {
                *us = kernel.map(|k| time(None, k)).transpose()?;
            }
            let [dp4a_us, block_us] = dp4a_us.map(shown);
            let (tc, tile) = match has_tc {
                true => (
                    format!(
                        "{} ({picked_tc:?})",
                        shown(Some(time(Some(picked_tc), picked)?))
                    ),
                    format!("{} ({other:?})", shown(Some(time(Some(other), picked)?))),
                ),
                false => ("-".into(), "-".into()),
            };
            out.push_str(&format!(
                "| {what} {tag} | {rows} x {cols} | {n} | {dp4a_us} ({}) | {block_us} | {tc} | {tile} |\n",
                picked.suffix()
            ));
            // The warp-a-row kernel's other batch size, for one row.
            if let (true, Mmtc::Warp { units, rows: 1 }) = (has_tc, picked_tc) {
                let alt = Mmtc::Warp {
                    units: 6 - units,
                    rows: 1,
                };
                let us = shown(Some(time(Some(alt), picked)?));
                out.push_str(&format!(
                    "| {what} {tag} | {rows} x {cols} | {n} | | | {us} ({alt:?}) | |\n"
                ));
            }
        }
    }
    out.push('\n');
    out.push_str(&crate::gpu::mmq::bench(dev)?);
    Ok(out)
}
