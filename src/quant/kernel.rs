//! The canonical kernel and the work split.
//!
//! One output `y[r][c] = sum_i x[r][i] * W[c][i]` is, by definition, computed so (`lanes(w, a)`
//! is the eight exact i32 sums `w[2l]a[2l] + w[2l+1]a[2l+1] + w[16+2l]a[16+2l] + w[17+2l]a[17+2l]`,
//! which AVX2's `vpmaddwd` over two 16-lane halves gives):
//!
//! ```text
//! acc[0..8] = 0.0; off = 0.0
//! 32-value formats, per unit u of 32 (weight i = s * w[i] + o; activation i ~ d * a[i]):
//!     p = lanes(w, a);  acc[l] = fma(s * d, p[l] as f32, acc[l])
//!     if the format has offsets: off = fma(o * d, sum(a) as f32, off)
//! K-quants, per block of 256 (value i of unit j = D * w_j[i] - Dmin * mn[j], w_j holding the
//! integer sub-block scale; activations with one scale d per 256):
//!     L[0..8] = 0; M = 0
//!     per unit j: L += lanes(w_j, a_j); M += mn[j] * sum(a_j)
//!         after every `k_flush` units: acc[l] = fma(D * d, L[l] as f32, acc[l]); L = 0
//!     if the format has offsets: off = fma(-(Dmin * d), M as f32, off)
//! y = (((acc0 + acc1) + (acc2 + acc3)) + ((acc4 + acc5) + (acc6 + acc7))) + off
//! ```
//!
//! The portable path computes the same integers and the same f32 operations in the same order as
//! the SIMD paths, so the paths agree bit for bit, and no row's result depends on the other rows
//! of the call.

use super::blocks::{decode_unit, k_header, k_unit_ints, Format};
use super::{KernelPath, QuantActs, QuantMatrix, BLOCK};

/// Products smaller than this (multiply-adds) run on the calling thread: waking the pool costs
/// more than the work.
const SERIAL_WORK: usize = 1 << 16;

/// Rows of activations computed together against each decoded weight unit.
pub(crate) const TILE_ROWS: usize = 4;

/// The fixed reduction of the eight lane accumulators and the offset term.
#[inline(always)]
pub(crate) fn finish(acc: &[f32; 8], off: f32) -> f32 {
    (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) + off
}

/// The exact i32 lane sums of one unit.
#[inline(always)]
fn lane_sums(w: &[i16; 32], a: &[i16]) -> [i32; 8] {
    let mut p = [0i32; 8];
    for (l, pl) in p.iter_mut().enumerate() {
        let i = 2 * l;
        *pl = w[i] as i32 * a[i] as i32
            + w[i + 1] as i32 * a[i + 1] as i32
            + (w[16 + i] as i32 * a[16 + i] as i32 + w[17 + i] as i32 * a[17 + i] as i32);
    }
    p
}

/// Portable kernel: rows `r0 .. r0 + out.len()` of `acts` against one weight row.
fn tile_portable(format: Format, wrow: &[u8], acts: &QuantActs, r0: usize, out: &mut [f32]) {
    let rows = out.len();
    let mut acc = [[0f32; 8]; TILE_ROWS];
    let mut off = [0f32; TILE_ROWS];
    let mut w = [0i16; 32];
    let offsets = format.has_offset();
    let (units, nb) = (acts.units(), acts.blocks());
    let act = |r: usize, u: usize| &acts.q[r * acts.k + u * BLOCK..][..BLOCK];
    if !format.is_k() {
        for u in 0..units {
            let (s, o) = decode_unit(format, wrow, u, &mut w);
            for i in 0..rows {
                let r = r0 + i;
                let d = acts.d[r * nb + u];
                let p = lane_sums(&w, act(r, u));
                let t = s * d;
                for l in 0..8 {
                    acc[i][l] = t.mul_add(p[l] as f32, acc[i][l]);
                }
                if offsets {
                    off[i] = (o * d).mul_add(acts.sum[r * units + u] as f32, off[i]);
                }
            }
        }
    } else {
        let bb = format.block_bytes();
        let flush = format.k_flush();
        for (b, block) in wrow.chunks(bb).enumerate() {
            let h = k_header(format, block);
            let mut lanes = [[0i32; 8]; TILE_ROWS];
            let mut mins = [0i32; TILE_ROWS];
            for sub in 0..8 {
                k_unit_ints(format, block, sub, &h, &mut w);
                let u = b * 8 + sub;
                for i in 0..rows {
                    let r = r0 + i;
                    let p = lane_sums(&w, act(r, u));
                    for l in 0..8 {
                        lanes[i][l] += p[l];
                    }
                    mins[i] += h.mn[sub] as i32 * acts.sum[r * units + u];
                    if (sub + 1) % flush == 0 {
                        let t = h.d * acts.d[r * nb + b];
                        for l in 0..8 {
                            acc[i][l] = t.mul_add(lanes[i][l] as f32, acc[i][l]);
                        }
                        lanes[i] = [0; 8];
                    }
                }
            }
            if offsets {
                for i in 0..rows {
                    let t = -(h.dmin * acts.d[(r0 + i) * nb + b]);
                    off[i] = t.mul_add(mins[i] as f32, off[i]);
                }
            }
        }
    }
    for i in 0..rows {
        out[i] = finish(&acc[i], off[i]);
    }
}

/// A raw output pointer shared by the workers; each writes a disjoint set of elements.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: the workers write disjoint elements (one column range each) and the buffer outlives
// the parallel loop.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Element `i` of the buffer.
    ///
    /// # Safety
    /// `i` is inside the buffer and no other worker writes it.
    unsafe fn write(self, i: usize, v: f32) {
        *self.0.add(i) = v;
    }
}

/// `y = x W^T` for quantised activations on `path`: `[acts.m, w.rows()]`, row-major.
pub(crate) fn matmul(w: &QuantMatrix, acts: &QuantActs, path: KernelPath) -> Vec<f32> {
    let (m, n) = (acts.m, w.rows());
    assert_eq!(
        acts.k,
        w.cols(),
        "activations and weights disagree on the inner size"
    );
    assert!(
        path.available(),
        "kernel path {} on a CPU without it",
        path.name()
    );
    let mut out = vec![0f32; m * n];
    if m == 0 || n == 0 {
        return out;
    }
    let ptr = OutPtr(out.as_mut_ptr());
    let columns = |columns: std::ops::Range<usize>| {
        let mut vals = [0f32; TILE_ROWS];
        for c in columns {
            let wrow = w.row_data(c);
            let mut r0 = 0;
            while r0 < m {
                let rows = (m - r0).min(TILE_ROWS);
                let vals = &mut vals[..rows];
                match path {
                    KernelPath::Portable => tile_portable(w.format(), wrow, acts, r0, vals),
                    #[cfg(target_arch = "x86_64")]
                    KernelPath::Avx2 => super::x86::tile_avx2(w.format(), wrow, acts, r0, vals),
                    #[cfg(target_arch = "x86_64")]
                    KernelPath::Avx512 => {
                        super::x86_512::tile_avx512(w.format(), wrow, acts, r0, vals)
                    }
                    #[cfg(not(target_arch = "x86_64"))]
                    KernelPath::Avx2 | KernelPath::Avx512 => {
                        unreachable!("checked by available()")
                    }
                }
                for (i, &v) in vals.iter().enumerate() {
                    // SAFETY: (r0 + i, c) is inside the [m, n] buffer, and column c belongs to
                    // this range alone.
                    unsafe { ptr.write((r0 + i) * n + c, v) };
                }
                r0 += rows;
            }
        }
    };
    if m * n * w.cols() < SERIAL_WORK {
        columns(0..n);
        return out;
    }
    // candle's persistent spinning pool (the one its own CPU ops use): a matmul of a decode step
    // takes tens of microseconds, too short to wake sleeping threads for.
    candle_core::utils::barrier_pool().execute_chunked(n, columns);
    out
}
