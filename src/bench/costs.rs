//! `bench --costs`: the passes speculation is made of, timed on this device.

use crate::error::Result;
use serde::Serialize;

/// Measured cost of one pass, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    /// What was timed.
    pub what: String,
    /// Rows fed in the pass.
    pub rows: usize,
    /// Median milliseconds.
    pub ms: f64,
    /// Relative to one target decode step (one row with its logits).
    pub relative: f64,
}

/// Median wall time of `f` in ms; the device is synchronised around each call, so that GPU work
/// is timed, not only its launch.
fn median_ms(
    device: &candle_core::Device,
    mut f: impl FnMut() -> Result<()>,
    reps: usize,
) -> Result<f64> {
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        device.synchronize()?;
        let t = std::time::Instant::now();
        f()?;
        device.synchronize()?;
        v.push(t.elapsed().as_secs_f64() * 1e3);
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// The verify-pass sizes run once more inside a profiler range, for `ncu --profile-from-start
/// off` (`TREESPEC_PROFILE_ROWS=64,256`; the developers' tool, not a user's option).
fn profiled_rows() -> Vec<usize> {
    std::env::var("TREESPEC_PROFILE_ROWS")
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Time the passes speculative decoding is made of, after a `prefix`-token context: the target's
/// decode step, its verification pass for blocks of `sizes` rows (tree mask, every row's logits
/// and their argmax ids brought to the host, as greedy verification reads them), and the
/// drafter's decode step and grown-tree passes. These are the
/// c and v(B) of DESIGN.md: budget and depth should be chosen from them, per device.
pub fn measure_costs(
    target: &mut crate::model::decoder::Decoder,
    drafter: Option<&mut crate::model::decoder::Decoder>,
    prefix: usize,
    sizes: &[usize],
    reps: usize,
) -> Result<Vec<CostRow>> {
    use crate::model::decoder::{argmax_rows, Batch, BlockMask};
    let vocab = target.config().vocab_size as u32;
    let toks: Vec<u32> = (0..prefix as u32)
        .map(|i| (i * 7919 + 13) % vocab)
        .collect();
    target.reset();
    target.forward(&Batch::causal(&toks, 0).with_logits_rows(vec![]))?;
    let device = target.device().clone();
    let step = median_ms(
        &device,
        || {
            target.truncate(prefix);
            if let Some(l) = target.forward(&Batch::causal(&[11], prefix))?.logits {
                argmax_rows(&l)?;
            }
            Ok(())
        },
        reps,
    )?;
    let mut rows = vec![CostRow {
        what: "target decode step (1 row + LM head + argmax)".into(),
        rows: 1,
        ms: step,
        relative: 1.0,
    }];
    // Blocks that do not fit the context after the prefix are left out of the table.
    let context = target.context();
    for &n in sizes.iter().filter(|&&n| prefix + n <= context) {
        // A tree of n nodes: a chain with side branches, like a DDTree.
        let parents: Vec<Option<usize>> = (0..n)
            .map(|i| if i == 0 { None } else { Some((i - 1) / 2) })
            .collect();
        let mask = BlockMask::from_parents(&parents)?;
        let block: Vec<u32> = (0..n as u32).map(|i| (i * 31 + 5) % vocab).collect();
        let ms = median_ms(
            &device,
            || {
                target.truncate(prefix);
                let out = target.forward(
                    &Batch::causal(&block, prefix)
                        .with_mask(mask.clone())
                        .all_logits(),
                )?;
                if let Some(l) = &out.logits {
                    argmax_rows(l)?;
                }
                Ok(())
            },
            reps,
        )?;
        if profiled_rows().contains(&n) {
            crate::gpu::profiler_range(&device, || {
                target.truncate(prefix);
                target.forward(
                    &Batch::causal(&block, prefix)
                        .with_mask(mask.clone())
                        .all_logits(),
                )?;
                Ok(())
            })?;
        }
        rows.push(CostRow {
            what: "target verify pass (rows + LM heads + argmax ids to the host)".into(),
            rows: n,
            ms,
            relative: ms / step,
        });
    }
    target.reset();
    if let Some(d) = drafter {
        d.reset();
        d.forward(&Batch::causal(&toks, 0).with_logits_rows(vec![]))?;
        let ms = median_ms(
            &device,
            || {
                d.truncate(prefix);
                d.forward(&Batch::causal(&[11], prefix))?;
                Ok(())
            },
            reps,
        )?;
        rows.push(CostRow {
            what: "drafter decode step (1 row + LM head)".into(),
            rows: 1,
            ms,
            relative: ms / step,
        });
        // A pass of a grown tree: W sibling nodes, each with its LM head row.
        for w in [2usize, 4, 8] {
            let block: Vec<u32> = (0..w as u32).map(|i| (i * 31 + 5) % vocab).collect();
            let mask = BlockMask::from_parents(&vec![None; w])?;
            let ms = median_ms(
                &device,
                || {
                    d.truncate(prefix);
                    d.forward(
                        &Batch::causal(&block, prefix)
                            .with_positions(vec![prefix; w])
                            .with_mask(mask.clone())
                            .all_logits(),
                    )?;
                    Ok(())
                },
                reps,
            )?;
            rows.push(CostRow {
                what: "drafter pass of a grown tree (rows + LM heads)".into(),
                rows: w,
                ms,
                relative: ms / step,
            });
        }
        d.reset();
    }
    Ok(rows)
}

/// The cost table as Markdown.
pub fn costs_markdown(rows: &[CostRow]) -> String {
    let mut s = String::from(
        "| pass | rows | ms | relative to a target step |\n| --- | ---: | ---: | ---: |\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {:.1} | {:.2} |\n",
            r.what, r.rows, r.ms, r.relative
        ));
    }
    s
}
