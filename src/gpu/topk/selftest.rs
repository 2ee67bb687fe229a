//! The top-k kernel against its CPU reference (`treespec selftest`).

use super::*;

/// The kernel against its CPU reference on random rows of awkward shapes, with ties: one line
/// per check, or an error naming the first mismatch.
pub(in crate::gpu) fn selftest(
    device: &candle_core::Device,
    rng: &mut crate::gpu::Uniform,
    report: &mut Vec<String>,
) -> Result<()> {
    use crate::error::Error;
    for (rows, cols) in [
        (1usize, 151_936usize),
        (9, 151_936),
        (4, 1000),
        (3, 17),
        (16, 4097),
    ] {
        // Values on a coarse grid, so that ties happen.
        let host: Vec<f32> = (0..rows * cols)
            .map(|_| (rng.next() * 64.0).floor() / 4.0 - 8.0)
            .collect();
        let rows_host: Vec<Vec<f32>> = host.chunks(cols).map(|c| c.to_vec()).collect();
        let t = Tensor::from_vec(host, (rows, cols), device)?;
        // Up to 16 by the register lists, above by the radix select (up to the whole row).
        for k in [1usize, 4, 8, TOP_K_MAX, TOP_K_MAX + 1, 100, 1000, cols] {
            let k = k.min(cols);
            let got = row_top_k(&t, k)?;
            let want = top_k_rows(&rows_host, k);
            for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                let close = g
                    .log_probs
                    .iter()
                    .zip(&w.log_probs)
                    .all(|(a, b)| (a - b).abs() <= 1e-5 * b.abs().max(1.0));
                if g.tokens != w.tokens || !close {
                    return Err(Error::Device(format!(
                        "top-k [{rows}x{cols}] k={k} row {r}: {:?} {:?} vs reference {:?} {:?}",
                        g.tokens, g.log_probs, w.tokens, w.log_probs
                    )));
                }
            }
            report.push(format!("top-k [{rows} x {cols}] k={k}: ok"));
        }
        let want: Vec<u32> = top_k_rows(&rows_host, 1)
            .iter()
            .map(|r| r.tokens[0])
            .collect();
        let got = row_argmax(&t)?;
        if got != want {
            return Err(Error::Device(format!(
                "argmax [{rows}x{cols}]: {got:?} vs reference {want:?}"
            )));
        }
        report.push(format!("argmax [{rows} x {cols}]: ok"));
    }
    Ok(())
}
