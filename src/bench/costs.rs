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
    Ok(median(v))
}

/// The median of timings (the upper one of an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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

/// Positions a DDTree round commits in [`measure_dflash_costs`] (their features are the drafter's
/// new context each round): the paper's tau of 10.7 on Qwen3-8B, rounded.
pub const ROUND_COMMITS: usize = 11;

/// The token every timed round of [`measure_dflash_costs`] roots its block and tree at.
const ROOT: u32 = 11;

/// Factor on the drafter's logits before the top-K in [`measure_dflash_costs`].
const SHARPEN: f64 = 30.0;

/// Time a DDTree round with a DFlash drafter after a `prefix`-token context, piece by piece, for
/// trees of `sizes` rows (the root and B = rows - 1 nodes): the drafter's pass (the features of
/// [`ROUND_COMMITS`] new positions, a block, the target's LM head on its rows), the per-depth top-K
/// (K = B) to the host, the DDTree build, the target's verify pass with the drafter's feature
/// layers copied out, and the walk with the K/V compaction of a path of up to [`ROUND_COMMITS`]
/// nodes; then the round's sum. The tree is built from the drafter's logits times `SHARPEN`, so
/// that it is deep. `step` is the target's decode step in ms ([`measure_costs`]), which the
/// rows are relative to. The drafter's features are random: its timing does not depend on them.
pub fn measure_dflash_costs(
    target: &mut crate::model::decoder::Decoder,
    drafter: &mut crate::draft::DFlashDrafter,
    prefix: usize,
    sizes: &[usize],
    (step, reps): (f64, usize),
) -> Result<Vec<CostRow>> {
    use crate::draft::Drafter;
    use crate::model::decoder::{argmax_rows, Batch};
    let cfg = target.config().clone();
    let vocab = cfg.vocab_size as u32;
    let device = target.device().clone();
    let taps = drafter.config().target_layer_ids.clone();
    let feature = |rows: usize| -> Result<candle_core::Tensor> {
        Ok(candle_core::Tensor::randn(
            0f32,
            1.0,
            (rows, taps.len() * cfg.hidden),
            &device,
        )?)
    };
    let toks: Vec<u32> = (0..prefix as u32)
        .map(|i| (i * 7919 + 13) % vocab)
        .collect();
    target.reset();
    target.forward(&Batch::causal(&toks, 0).with_logits_rows(vec![]))?;
    drafter.truncate(0);
    drafter.add_features(feature(prefix)?)?;
    drafter.draft(ROOT, target)?;
    let new = feature(ROUND_COMMITS)?;
    // One round's drafter pass: back to the context, the new positions' features, the block.
    let pass = |d: &mut crate::draft::DFlashDrafter, t: &crate::model::decoder::Decoder| {
        d.truncate(prefix);
        d.add_features(new.clone())?;
        d.draft(ROOT, t)
    };
    let row = |what: String, rows: usize, ms: f64| CostRow {
        what,
        rows,
        ms,
        relative: ms / step,
    };
    let block_rows = drafter.config().block_size;
    let draft_ms = median_ms(&device, || pass(drafter, target).map(|_| ()), reps)?;
    if std::env::var_os("TREESPEC_PROFILE_DRAFT").is_some() {
        // One more drafter pass inside a profiler range (as TREESPEC_PROFILE_ROWS for verify
        // passes).
        crate::gpu::profiler_range(&device, || pass(drafter, target))?;
    }
    let mut rows = vec![row(
        format!("DFlash drafter pass ({ROUND_COMMITS} new positions' features, block, LM heads)"),
        block_rows,
        draft_ms,
    )];
    // A random drafter's distributions are flat, which makes a star of depth 1; sharpened, they
    // make a tree as deep as a confident drafter's, whose accepted path is long.
    let block = (pass(drafter, target)? * SHARPEN)?;
    let context = target.context();
    for &n in sizes.iter().filter(|&&n| n >= 2 && prefix + n <= context) {
        let budget = n - 1;
        let k = budget.min(vocab as usize);
        let mut depths = vec![];
        let top_ms = median_ms(
            &device,
            || {
                depths = crate::gpu::row_top_k(&block, k)?;
                Ok(())
            },
            reps,
        )?;
        let mut tree = crate::tree::DraftTree::root(ROOT);
        // Host work: timed on the CPU "device", whose synchronisation is nothing.
        let build_ms = median_ms(
            &candle_core::Device::Cpu,
            || {
                tree = crate::tree::builder::build_ddtree(&depths, budget, ROOT);
                Ok(())
            },
            reps,
        )?;
        let mask = tree.mask();
        let verify = Batch::causal(&tree.tokens, prefix)
            .with_positions(tree.positions(prefix))
            .with_mask(mask)
            .with_hidden_layers(taps.clone())
            .all_logits();
        let verify_ms = median_ms(
            &device,
            || {
                target.truncate(prefix);
                let out = target.forward(&verify)?;
                if let Some(l) = &out.logits {
                    argmax_rows(l)?;
                }
                Ok(())
            },
            reps,
        )?;
        // The walk along the tree's deepest path, up to ROUND_COMMITS nodes, then its K/V kept.
        let deepest = (0..tree.len()).max_by_key(|&i| tree.depths[i]).unwrap_or(0);
        let mut path = tree.path_to(deepest);
        path.truncate(ROUND_COMMITS);
        let mut commit = vec![];
        for _ in 0..reps {
            target.truncate(prefix);
            target.forward(&verify)?;
            device.synchronize()?;
            let t = std::time::Instant::now();
            // The target "chooses" the path's next node, then a token no node holds.
            let (accepted, _) = crate::tree::walk::walk(&tree, |node| {
                path.iter()
                    .position(|&p| p == node)
                    .and_then(|i| path.get(i + 1))
                    .map_or(u32::MAX, |&c| tree.tokens[c])
            });
            target.keep(prefix, &accepted)?;
            device.synchronize()?;
            commit.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let commit_ms = median(commit);
        let what = |s: &str| format!("{s} (B = {budget}, depth {})", tree.max_depth());
        rows.push(row(
            what("per-depth top-K to the host, K = B"),
            block_rows - 1,
            top_ms,
        ));
        rows.push(row(what("DDTree build on the host"), n, build_ms));
        rows.push(row(
            what("target verify pass with the drafter's feature layers"),
            n,
            verify_ms,
        ));
        rows.push(row(
            what(&format!(
                "walk + K/V compaction of a {}-node path",
                path.len()
            )),
            path.len(),
            commit_ms,
        ));
        rows.push(row(
            what("round: the drafter pass and the four above"),
            n,
            draft_ms + top_ms + build_ms + verify_ms + commit_ms,
        ));
    }
    target.reset();
    drafter.truncate(0);
    Ok(rows)
}

/// The cost table as Markdown.
pub fn costs_markdown(rows: &[CostRow]) -> String {
    let mut s = String::from(
        "| pass | rows | ms | relative to a target step |\n| --- | ---: | ---: | ---: |\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} |\n",
            r.what, r.rows, r.ms, r.relative
        ));
    }
    s
}
