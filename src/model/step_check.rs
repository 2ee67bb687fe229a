//! `treespec selftest` from the model's side: every GPU kernel against its CPU reference
//! ([`selftest`]: the GPU runtime's own checks, then the Gated DeltaNet kernels against the host
//! recurrence), and the GPU step on a real model against the CPU decoder ([`check_model`],
//! `treespec selftest -m MODEL`).

use crate::arch::batch::BlockMask;
use crate::error::{Error, Result};
use crate::model::decoder::{argmax_rows, Batch, Decoder};
use candle_core::{Device, Tensor};

/// Every kernel on `device` against its CPU reference ([`crate::gpu::selftest`]), and on a GPU
/// the Gated DeltaNet kernels against the host recurrence; one line a check, or an error naming
/// the first mismatch.
pub fn selftest(device: &Device) -> Result<Vec<String>> {
    #[allow(unused_mut)]
    let mut report = crate::gpu::selftest(device)?;
    #[cfg(feature = "cuda")]
    if device.is_cuda() {
        let mut rng = crate::gpu::Uniform(0x2545_F491_4F6C_DD1D);
        super::gated_delta::selftest::selftest(device, &mut rng, &mut report)?;
    }
    Ok(report)
}

/// Check the step on a real model against the CPU decoder (treespec's reference kernels), against
/// candle's GPU ops, and against itself: the logits of a prompt through each (the largest and the
/// median per-row difference, and how often the top token agrees), then batch invariance: a
/// chain of rows verified in one pass gives bit for bit the logits of one-row steps (CUDA-graph
/// replays) over the same tokens. Returns one line per check, or an error naming the first
/// failure.
pub fn check_model(
    decoder: &mut Decoder,
    cpu: &mut Decoder,
    tokens: &[u32],
) -> Result<Vec<String>> {
    let n = tokens.len();
    if n < 24 {
        return Err(Error::InvalidArgument(
            "the step check needs at least 24 tokens".into(),
        ));
    }
    let mut report = vec![];
    if !check_prompt(decoder, cpu, tokens, &mut report)? {
        return Ok(report);
    }
    report.push(check_compaction(decoder, cpu, tokens)?);
    cpu.reset();
    // Invariance: the last rows in one pass (one chunk of four rows with a tail; chunks plus a
    // tail; five chunks), replayed from a graph and launched eagerly, against one-row steps.
    for len in [3usize, 13, 20] {
        report.push(check_invariance(decoder, tokens, len)?);
    }
    decoder.reset();
    Ok(report)
}

/// The logits of every row of `toks` fed to `d` from position `from`, on the host.
fn logits(d: &mut Decoder, from: usize, toks: &[u32]) -> Result<Tensor> {
    let l = d
        .forward(&Batch::causal(toks, from).all_logits())?
        .logits
        .ok_or_else(|| Error::Device("no logits".into()))?;
    Ok(l.to_device(&Device::Cpu)?)
}

/// `got` against `want`: (largest difference, its row, median row difference, rows whose top
/// token agrees).
fn compare(got: &Tensor, want: &Tensor) -> Result<(f32, usize, f32, usize)> {
    let row_diff = (got - want)?
        .abs()?
        .max_keepdim(1)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let diff = row_diff.iter().cloned().fold(0f32, f32::max);
    let worst = row_diff.iter().position(|&d| d == diff).unwrap_or(0);
    let mut sorted = row_diff.clone();
    sorted.sort_by(f32::total_cmp);
    let same = argmax_rows(got)?
        .iter()
        .zip(argmax_rows(want)?)
        .filter(|(a, b)| **a == *b)
        .count();
    Ok((diff, worst, sorted[sorted.len() / 2], same))
}

/// The prompt's logits through the step, candle's GPU ops and (where the step has them) the wide
/// products, each against the CPU decoder: a line each into `report`. False where the step does
/// not run this model (the rest of the check then has nothing to check).
fn check_prompt(
    decoder: &mut Decoder,
    cpu: &mut Decoder,
    tokens: &[u32],
    report: &mut Vec<String>,
) -> Result<bool> {
    let n = tokens.len();
    cpu.reset();
    let want = logits(cpu, 0, tokens)?;
    cpu.reset();
    let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
    decoder.set_gpu_step(false);
    decoder.reset();
    let candle = logits(decoder, 0, tokens)?;
    decoder.set_gpu_step(true);
    if !decoder.runtime().starts_with("treespec GPU step") {
        report.push(format!("GPU step not run: {}", decoder.runtime()));
        return Ok(false);
    }
    decoder.reset();
    let got = logits(decoder, 0, tokens)?;
    for (what, t) in [("GPU step", &got), ("candle's GPU ops", &candle)] {
        let (diff, row, median, same) = compare(t, &want)?;
        report.push(format!(
            "{what} vs the CPU, {n} prompt rows (largest logit {scale:.1}): max difference {diff:.3e} (row {row}), median row {median:.3e}, top token agrees on {same}/{n}"
        ));
        if what == "GPU step" && same * 10 < n * 9 {
            return Err(Error::Device(format!(
                "the GPU step disagrees with the CPU: {}",
                report.join("; ")
            )));
        }
    }
    // The wide path (cuBLAS on f16 copies, attention on tensor cores: `gpu::wide`), where the
    // step has copies and the prompt is wide enough: the same prompt as one verify-shaped pass.
    if decoder.runtime().contains("cuBLAS") && decoder.wide_from().is_some_and(|from| n >= from) {
        decoder.set_wide_verify(true);
        decoder.reset();
        let wide = logits(decoder, 0, tokens);
        decoder.set_wide_verify(false);
        let (diff, row, median, same) = compare(&wide?, &want)?;
        report.push(format!(
            "wide pass (cuBLAS f16, tensor-core attention) vs the CPU, {n} prompt rows: max difference {diff:.3e} (row {row}), median row {median:.3e}, top token agrees on {same}/{n}"
        ));
        if same * 10 < n * 9 {
            return Err(Error::Device(format!(
                "the wide pass disagrees with the CPU: {}",
                report.join("; ")
            )));
        }
    }
    Ok(true)
}

/// The caches' rows of every layer of `d`, on the host (K and V of each layer in turn).
fn host_rows(d: &Decoder) -> Result<Vec<Vec<f32>>> {
    let mut out = vec![];
    for (k, v) in d.kv_views()? {
        for t in [k, v] {
            out.push(
                t.to_dtype(candle_core::DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?,
            );
        }
    }
    Ok(out)
}

/// The block of the last 8 prompt rows at `split` whose rows 1, 4 and 6 the compaction keeps: a
/// causal block, or for a hybrid (whose recurrent state folds only a path from a root) a tree
/// in which rows 1, 4 and 6 are one path.
fn compaction_block(tokens: &[u32], split: usize, hybrid: bool) -> Result<Batch> {
    let batch = Batch::causal(&tokens[split..], split).with_logits_rows(vec![]);
    if !hybrid {
        return Ok(batch);
    }
    let parents = [
        None,
        None,
        Some(0),
        Some(1),
        Some(1),
        Some(2),
        Some(4),
        Some(6),
    ];
    let mut depth = [0usize; 8];
    for (i, p) in parents.iter().enumerate() {
        depth[i] = p.map_or(0, |p| depth[p] + 1);
    }
    let positions = depth.iter().map(|d| split + d).collect();
    Ok(batch
        .with_mask(BlockMask::from_parents(&parents)?)
        .with_positions(positions))
}

/// Compaction in one launch (`kv_keep`): of a block of 8 rows after the prompt, rows 1, 4 and 6
/// kept. The caches then hold bit for bit the rows they held before, and the rows after them (a
/// hybrid's state folded from the kept path first; a wide pass, which reads the f16 shadows
/// compacted in the same launch) agree with the CPU decoder that kept the same rows.
fn check_compaction(decoder: &mut Decoder, cpu: &mut Decoder, tokens: &[u32]) -> Result<String> {
    let n = tokens.len();
    let split = n - 8;
    let kept = [1usize, 4, 6];
    let hybrid = decoder.config().linear.is_some();
    let mut moved = true;
    for d in [&mut *decoder, &mut *cpu] {
        d.reset();
        d.forward(&Batch::causal(&tokens[..split], 0).with_logits_rows(vec![]))?;
        d.forward(&compaction_block(tokens, split, hybrid)?)?;
        let before = host_rows(d)?;
        d.keep(split, &kept)?;
        let after = host_rows(d)?;
        // Per cache, rows of [kv_heads * len] flattened: compare head by head.
        let len = split + 8;
        for (b, a) in before.iter().zip(&after) {
            let hd = b.len() / len / d.config().n_kv_heads;
            for g in 0..d.config().n_kv_heads {
                let row = |t: &[f32], heads_len: usize, r: usize| {
                    t[(g * heads_len + r) * hd..(g * heads_len + r + 1) * hd].to_vec()
                };
                let new_len = split + kept.len();
                for r in 0..new_len {
                    let src = if r < split {
                        r
                    } else {
                        split + kept[r - split]
                    };
                    if row(a, new_len, r) != row(b, len, src) {
                        moved = false;
                    }
                }
            }
        }
    }
    if !moved {
        return Err(Error::Device(
            "K/V compaction: the kept rows are not where they should be".into(),
        ));
    }
    let mut line = "K/V compaction of every layer in one launch: kept rows in place".to_string();
    // The rows after the kept ones (a hybrid's state folded from the kept path first) against
    // the CPU decoder that kept the same rows.
    {
        let from = split + kept.len();
        let next: Vec<u32> = tokens.iter().cycle().skip(3).take(24).copied().collect();
        let want = logits(cpu, from, &next)?;
        let got = logits(decoder, from, &next)?;
        let (diff, _, _, same) = compare(&got, &want)?;
        line += &format!(
            "; the next 24 rows against the CPU: max difference {diff:.3e}, top token agrees on {same}/24"
        );
        if same * 10 < 24 * 9 {
            return Err(Error::Device(format!("after a compaction, {line}")));
        }
        for d in [&mut *decoder, &mut *cpu] {
            d.truncate(from);
        }
    }
    let wide_rows = decoder.wide_from().unwrap_or(usize::MAX);
    if decoder.runtime().contains("cuBLAS") && wide_rows <= 64 {
        let next: Vec<u32> = tokens.iter().cycle().take(64).copied().collect();
        let from = split + kept.len();
        let want = logits(cpu, from, &next)?;
        decoder.set_wide_verify(true);
        let got = logits(decoder, from, &next);
        decoder.set_wide_verify(false);
        let (diff, _, _, same) = compare(&got?, &want)?;
        line += &format!(
            "; a wide pass of 64 rows after them against the CPU: max difference {diff:.3e}, top token agrees on {same}/64"
        );
        if same * 10 < 64 * 9 {
            return Err(Error::Device(format!("after a compaction, {line}")));
        }
    }
    Ok(line)
}

/// A `len`-row pass over the last rows of `tokens`, replayed from a graph and launched eagerly,
/// against one-row steps, bit for bit; the pass also copies out two layers' hidden states (as a
/// verify pass for a drafter that reads them does), which must come out of the graph as they do
/// eagerly.
fn check_invariance(decoder: &mut Decoder, tokens: &[u32], len: usize) -> Result<String> {
    let n = tokens.len();
    let same_bits = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    let layers = vec![0, decoder.config().n_layers - 1];
    let split = n - len;
    let mut blocks = vec![];
    let mut states = vec![];
    for graphs in [true, false] {
        decoder.set_cuda_graphs(graphs);
        // With graphs, the second run of the shape replays one (the first runs eagerly).
        let runs = if graphs { 2 } else { 1 };
        let (mut block, mut state) = (vec![], vec![]);
        for _ in 0..runs {
            decoder.reset();
            logits(decoder, 0, &tokens[..split])?;
            let out = decoder.forward(
                &Batch::causal(&tokens[split..], split)
                    .all_logits()
                    .with_hidden_layers(layers.clone()),
            )?;
            block = out
                .logits
                .ok_or_else(|| Error::Device("no logits".into()))?
                .to_device(&Device::Cpu)?
                .to_vec2::<f32>()?;
            state = out
                .hidden
                .iter()
                .map(|h| h.to_device(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>())
                .collect::<candle_core::Result<Vec<_>>>()?;
        }
        blocks.push(block);
        states.push(state);
    }
    if states[0].len() != layers.len()
        || !states[0]
            .iter()
            .zip(&states[1])
            .all(|(a, b)| a.len() == b.len() && same_bits(a, b))
    {
        return Err(Error::Device(format!(
            "the hidden states of a {len}-row pass replayed from a CUDA graph differ from the same pass launched eagerly"
        )));
    }
    decoder.set_cuda_graphs(true);
    let how = match (decoder.cuda_graphs_on(), decoder.hidden_graphs_on()) {
        (true, true) => "graph replay = eager launches, logits and two layers' hidden states",
        (true, false) => {
            "graph replay = eager launches; passes with hidden states eager (their capture failed)"
        }
        _ => "CUDA graphs off",
    };
    if !blocks[0]
        .iter()
        .zip(&blocks[1])
        .all(|(a, b)| same_bits(a, b))
    {
        return Err(Error::Device(format!(
            "a {len}-row pass replayed from a CUDA graph differs from the same pass launched eagerly"
        )));
    }
    decoder.reset();
    logits(decoder, 0, &tokens[..split])?;
    for (i, want_row) in blocks[0].iter().enumerate() {
        let one =
            logits(decoder, split + i, &tokens[split + i..split + i + 1])?.to_vec2::<f32>()?;
        if !same_bits(&one[0], want_row) {
            return Err(Error::Device(format!(
                "the GPU step is not batch-invariant: row {i} of a {len}-row pass differs from its one-row step"
            )));
        }
    }
    Ok(format!(
        "{len}-row pass ({how}) = one-row steps, bit for bit"
    ))
}
