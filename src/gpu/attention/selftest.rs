//! The attention kernels checked against the host reference (`treespec selftest`).

use super::*;

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
pub(crate) fn selftest(
    device: &Device,
    rng: &mut crate::gpu::Uniform,
    report: &mut Vec<String>,
) -> Result<()> {
    use crate::arch::batch::BlockMask;
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
    rng: &mut crate::gpu::Uniform,
    report: &mut Vec<String>,
) -> Result<()> {
    use crate::arch::batch::{BlockMask, PastMask};
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
