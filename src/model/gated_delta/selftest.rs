//! The Gated DeltaNet kernels ([`crate::gpu::gdn`]) against the host recurrence of
//! [`super::GatedDeltaNet`], run by `treespec selftest --device cuda`.

use super::*;

/// The GPU kernels ([`crate::gpu::gdn`]) against the host recurrence on random layers: a chain,
/// a branching tree, a kept path, a step and a cut chain through [`RecurrentCache`] (outputs
/// within 1e-4 of the largest), and, bit for bit, a chain against one-row steps and the same path
/// inside a tree, and a committed tree path against the chain's state. One line a check.
pub(crate) fn selftest(
    device: &Device,
    rng: &mut crate::gpu::Uniform,
    report: &mut Vec<String>,
) -> Result<()> {
    let shapes = [
        // Qwen3.5's heads (dk = dv = 128), grouped value heads.
        LinearAttention {
            layers: vec![true],
            k_heads: 2,
            v_heads: 4,
            k_dim: 128,
            v_dim: 128,
            conv: 4,
            v_tiled: false,
        },
        // Small ragged heads, tiled value heads, a short convolution.
        LinearAttention {
            layers: vec![true],
            k_heads: 2,
            v_heads: 6,
            k_dim: 24,
            v_dim: 40,
            conv: 3,
            v_tiled: true,
        },
    ];
    for shape in shapes {
        let hidden = 64;
        let (host, gpu) = random_pair(&shape, hidden, device, rng)?;
        layer_check(&host, &gpu, hidden, device, rng)?;
        report.push(format!(
            "Gated DeltaNet [{} key / {} value heads of {} / {}, {} taps]: the kernels within 1e-4 \
             of the host recurrence over a chain, a tree, a kept path, steps and a cut chain",
            shape.k_heads, shape.v_heads, shape.k_dim, shape.v_dim, shape.conv
        ));
        invariance_check(&gpu, device, rng)?;
        report.push(format!(
            "Gated DeltaNet [{} / {}]: a chain, its one-row steps and its path inside a tree agree \
             bit for bit, and so do their committed states",
            shape.k_dim, shape.v_dim
        ));
    }
    Ok(())
}

/// The same random layer twice: on the host recurrence and on `device`'s kernels.
fn random_pair(
    shape: &LinearAttention,
    hidden: usize,
    device: &Device,
    rng: &mut crate::gpu::Uniform,
) -> Result<(GatedDeltaNet, GatedDeltaNet)> {
    use crate::arch::weights::Weight;
    let mut uniform = |n: usize, lo: f32, hi: f32| -> Vec<f32> {
        (0..n).map(|_| lo + (hi - lo) * rng.next()).collect()
    };
    let (ch, hv, vd) = (shape.conv_channels(), shape.v_heads, shape.v_dim);
    let scale = 1.0 / (hidden as f32).sqrt();
    let mats: Vec<(Vec<f32>, usize, usize)> = [
        (ch, hidden),
        (hv * vd, hidden),
        (hv, hidden),
        (hv, hidden),
        (hidden, hv * vd),
    ]
    .iter()
    .map(|&(r, c)| (uniform(r * c, -2.0 * scale, 2.0 * scale), r, c))
    .collect();
    let conv = uniform(ch * shape.conv, -0.6, 0.6);
    let a_neg: Vec<f32> = uniform(hv, -1.5, 0.5).iter().map(|v| -v.exp()).collect();
    let dt_bias = uniform(hv, -1.0, 1.0);
    let norm = uniform(vd, 0.5, 1.5);
    let build = |dev: &Device, gpu: bool| -> Result<GatedDeltaNet> {
        let lin = |i: usize| -> Result<Linear> {
            let (v, r, c) = &mats[i];
            Linear::new(Weight::Dense(Tensor::from_slice(v, (*r, *c), dev)?), None)
        };
        let eps = 1e-6;
        let gpu = match gpu {
            true => {
                let w = gdn::Weights::upload(dev, shape, eps, (&conv, &a_neg, &dt_bias, &norm))?;
                Some(w.ok_or_else(|| Error::Device("the Gated DeltaNet kernels are off".into()))?)
            }
            false => None,
        };
        Ok(GatedDeltaNet {
            qkv: lin(0)?,
            z: lin(1)?,
            b: lin(2)?,
            a: lin(3)?,
            out: lin(4)?,
            conv: conv.clone(),
            a_neg: a_neg.clone(),
            dt_bias: dt_bias.clone(),
            norm: norm.clone(),
            shape: shape.clone(),
            eps,
            gpu,
        })
    };
    Ok((build(&Device::Cpu, false)?, build(device, true)?))
}

/// Blocks through a host and a GPU cache of the same layer, outputs compared.
fn layer_check(
    host: &GatedDeltaNet,
    gpu: &GatedDeltaNet,
    hidden: usize,
    device: &Device,
    rng: &mut crate::gpu::Uniform,
) -> Result<()> {
    let (mut hc, mut gc) = (RecurrentCache::new(host)?, RecurrentCache::new(gpu)?);
    let chain = |n: usize| (0..n).map(|i| i.checked_sub(1)).collect::<Vec<_>>();
    let tree = vec![
        None,
        Some(0),
        Some(0),
        Some(1),
        Some(2),
        Some(3),
        Some(3),
        Some(5),
        Some(7),
    ];
    let mut run = |what: &str,
                   parents: &[Option<usize>],
                   hc: &mut RecurrentCache,
                   gc: &mut RecurrentCache|
     -> Result<()> {
        let x: Vec<f32> = (0..parents.len() * hidden)
            .map(|_| rng.next() * 2.0 - 1.0)
            .collect();
        let want = hc.forward(
            host,
            &Tensor::from_slice(&x, (parents.len(), hidden), &Device::Cpu)?,
            parents,
        )?;
        let got = gc.forward(
            gpu,
            &Tensor::from_slice(&x, (parents.len(), hidden), device)?,
            parents,
        )?;
        let (want, got) = (
            want.flatten_all()?.to_vec1::<f32>()?,
            got.to_device(&Device::Cpu)?
                .flatten_all()?
                .to_vec1::<f32>()?,
        );
        let top = want.iter().fold(1f32, |m, v| m.max(v.abs()));
        let err = want
            .iter()
            .zip(&got)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        if err > 1e-4 * top || got.iter().any(|v| !v.is_finite()) {
            return Err(Error::Device(format!(
                "Gated DeltaNet kernels, {what}: off the host recurrence by {err:.2e} (largest \
                 value {top:.2e})"
            )));
        }
        Ok(())
    };
    run("a prompt of 7 rows", &chain(7), &mut hc, &mut gc)?;
    run("a tree of 9 rows", &tree, &mut hc, &mut gc)?;
    for c in [&mut hc, &mut gc] {
        c.keep(7, &[0, 1, 3, 5, 7])?;
    }
    run("a step after a kept path", &chain(1), &mut hc, &mut gc)?;
    run("a chain of 3", &chain(3), &mut hc, &mut gc)?;
    let cut = hc.len() - 2;
    if hc.truncate(cut) != cut || gc.truncate(cut) != cut {
        return Err(Error::Device(
            "Gated DeltaNet: a chain could not be cut".into(),
        ));
    }
    run("a step after a cut chain", &chain(1), &mut hc, &mut gc)?;
    run("a second step", &chain(1), &mut hc, &mut gc)?;
    Ok(())
}

/// The kernels against themselves: a chain of 19 rows in one block (over two of the kernel's
/// windows of eight rows and a short third), the same at the kernel's other widths, as 19 one-row
/// blocks (committed alternately through the kept state and through a commit launch), and its
/// first rows as a branch of a tree, bit for bit.
fn invariance_check(
    layer: &GatedDeltaNet,
    device: &Device,
    rng: &mut crate::gpu::Uniform,
) -> Result<()> {
    let g = layer.gpu.as_ref().ok_or_else(no_kernels)?;
    let l = &layer.shape;
    let (ch, hv, vd) = (l.conv_channels(), l.v_heads, l.v_dim);
    let n = 19;
    let mut random = |rows: usize, width: usize| -> Result<Tensor> {
        let v: Vec<f32> = (0..rows * width).map(|_| rng.next() * 2.0 - 1.0).collect();
        Ok(Tensor::from_vec(v, (rows, width), device)?)
    };
    let (c, z, a, b) = (
        random(n, ch)?,
        random(n, hv * vd)?,
        random(n, hv)?,
        random(n, hv)?,
    );
    let bits = |t: &Tensor| -> Result<Vec<u32>> {
        Ok(t.to_device(&Device::Cpu)?
            .flatten_all()?
            .to_vec1::<f32>()?
            .iter()
            .map(|v| v.to_bits())
            .collect())
    };
    let zero = g.zero_state()?;
    let chain: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
    let (whole, _, last) = g.block((&c, &z, &a, &b), &chain, &zero, true)?;
    let last = last.ok_or_else(|| Error::Device("a chain without its last state".into()))?;
    let want = bits(&whole)?;
    // The chain at the kernel's other widths (the whole head a block gating and norming its
    // rows itself, 32 and 8 columns a block): the same bits.
    for cols in [128, 32, 8] {
        let (o_whole, _, o_last) = crate::gpu::gdn::with_tree_cols(cols, || {
            g.block((&c, &z, &a, &b), &chain, &zero, true)
        })?;
        let o_last =
            o_last.ok_or_else(|| Error::Device("a chain without its last state".into()))?;
        if bits(&o_whole)? != want || o_last.to_host()? != last.to_host()? {
            return Err(Error::Device(format!(
                "Gated DeltaNet kernels: gdn_tree{cols} and gdn_tree16 differ on a chain"
            )));
        }
    }
    // One-row steps.
    let mut state = zero.clone();
    let mut steps = vec![];
    // The state after the chain's first five rows (the tree's branch below ends there).
    let mut after_five = None;
    for i in 0..n {
        let row = |t: &Tensor| t.narrow(0, i, 1);
        let (out, block, kept) = g.block(
            (&row(&c)?, &row(&z)?, &row(&a)?, &row(&b)?),
            &[None],
            &state,
            true,
        )?;
        steps.extend(bits(&out)?);
        state = match (i % 2, kept) {
            (0, Some(k)) => k,
            _ => g.commit(&state, &block, 0)?,
        };
        if i == 4 {
            after_five = Some(state.to_host()?);
        }
    }
    if steps != want || state.to_host()? != last.to_host()? {
        return Err(Error::Device(
            "Gated DeltaNet kernels: one-row steps differ from the chain in one block".into(),
        ));
    }
    // The chain as the branch 0-1-3-5-6 of a tree of 7 rows (rows 2 and 4 off it).
    let order = [0usize, 1, 9, 2, 9, 3, 4];
    let parents = [None, Some(0), Some(0), Some(1), Some(2), Some(3), Some(5)];
    let pick = |t: &Tensor, other: &Tensor| -> Result<Tensor> {
        let rows = order
            .iter()
            .map(|&r| match r {
                9 => other.narrow(0, 0, 1),
                r => t.narrow(0, r, 1),
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Tensor::cat(&rows, 0)?.contiguous()?)
    };
    let (oc, oz, oa, ob) = (
        random(1, ch)?,
        random(1, hv * vd)?,
        random(1, hv)?,
        random(1, hv)?,
    );
    let (tc, tz, ta, tb) = (
        pick(&c, &oc)?,
        pick(&z, &oz)?,
        pick(&a, &oa)?,
        pick(&b, &ob)?,
    );
    let (tree_out, block, none) = g.block((&tc, &tz, &ta, &tb), &parents, &zero, true)?;
    let tree_bits = bits(&tree_out)?;
    // The tree at the kernel's other widths that hold its saved states: the same bits.
    for cols in [32, 8] {
        let (other, _, _) = crate::gpu::gdn::with_tree_cols(cols, || {
            g.block((&tc, &tz, &ta, &tb), &parents, &zero, true)
        })?;
        if bits(&other)? != tree_bits {
            return Err(Error::Device(format!(
                "Gated DeltaNet kernels: gdn_tree{cols} and gdn_tree16 differ on a tree"
            )));
        }
    }
    let row_bits = |r: usize, of: &[u32]| of[r * hv * vd..(r + 1) * hv * vd].to_vec();
    let same = [(0usize, 0usize), (1, 1), (3, 2), (5, 3), (6, 4)]
        .iter()
        .all(|&(t, ch_row)| row_bits(t, &tree_bits) == row_bits(ch_row, &want));
    let committed = g.commit(&zero, &block, 6)?;
    if !same || none.is_some() || Some(committed.to_host()?) != after_five {
        return Err(Error::Device(
            "Gated DeltaNet kernels: a path inside a tree differs from the same chain".into(),
        ));
    }
    Ok(())
}
