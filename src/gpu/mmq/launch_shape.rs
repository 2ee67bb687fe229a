//! The K-quant family's launch shapes (kernels/mmq.cu): which kernel a pass takes, a tile
//! block's warps, shared memory and grid, and when a pass splits its rows over their chunks. Pure
//! arithmetic on shapes and the GPU's limits, so that it is tested on every machine (the CUDA
//! launches in [`super`] read it; without the `cuda` feature only these tests do).
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use super::{chunk_size, SUPER};

/// Bytes a staged activation row of a tile takes per super-block (`TILE_RAW`) and its
/// per-row sums (`TileMeta`).
pub(crate) const TILE_RAW: usize = 304;
pub(crate) const TILE_META: usize = 32;
/// Super-blocks of weights and activations a tile block holds in shared memory at once
/// (`TILE_STAGES`).
pub(crate) const TILE_STAGES: usize = 3;
/// A tile block's static shared memory: its weight rows' start and end addresses (128 each)
/// and the split's flag.
pub(crate) const TILE_STATIC: usize = 2 * 128 * 8 + 16;
/// Shared memory the one-row kernels may stage activation rows in (48 bytes a Q8_1 block):
/// within the 99 KiB a block of the workstation Blackwell cards allows.
pub(crate) const ROWS_SHARED: usize = 96 * 1024;
/// A tile pass splits its rows over their chunks where its blocks would fill fewer than
/// this many waves of the GPU's multiprocessors.
pub(crate) const SPLIT_BELOW_WAVES: usize = 2;

/// How [`Mmq::Warp`] lays a weight row's units over a warp's lanes (`kernels/mmq.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum WarpLayout {
    /// A lane group a chunk of the row, two super-blocks in flight (`mmq_<tag>_warp`).
    Chunks,
    /// The same, four in flight (`_warp4`).
    Chunks4,
    /// Lanes over neighbouring units, each pass's terms folded by every lane (`_warpc`).
    Contiguous,
}

/// A kernel of the family (every one computes a row as the others do).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Mmq {
    /// Up to 1, 2 or 4 activation rows on dp4a (`mmq_<tag>_row`, `_rows2`, `_rows4`).
    Rows(usize),
    /// One activation row on dp4a, a warp a weight row (`mmq_<tag>_warp`, `_warp4`, `_warpc`).
    Warp(WarpLayout),
    /// Tensor cores, 8·NT activation rows a block (`mmq_<tag>_t<NT>`, NT 1, 2, 4 or 8).
    Tile(usize),
}

impl Mmq {
    /// Every kernel of a format.
    pub(crate) const ALL: [Mmq; 10] = [
        Mmq::Warp(WarpLayout::Chunks),
        Mmq::Warp(WarpLayout::Chunks4),
        Mmq::Warp(WarpLayout::Contiguous),
        Mmq::Rows(1),
        Mmq::Rows(2),
        Mmq::Rows(4),
        Mmq::Tile(1),
        Mmq::Tile(2),
        Mmq::Tile(4),
        Mmq::Tile(8),
    ];

    /// The entry point's name for format `tag`.
    pub(crate) fn name(self, tag: &str) -> String {
        match self {
            Mmq::Warp(WarpLayout::Chunks) => format!("mmq_{tag}_warp"),
            Mmq::Warp(WarpLayout::Chunks4) => format!("mmq_{tag}_warp4"),
            Mmq::Warp(WarpLayout::Contiguous) => format!("mmq_{tag}_warpc"),
            Mmq::Rows(1) => format!("mmq_{tag}_row"),
            Mmq::Rows(r) => format!("mmq_{tag}_rows{r}"),
            Mmq::Tile(nt) => format!("mmq_{tag}_t{nt}"),
        }
    }
}

/// Shared memory of the one-row kernel for `nr` activation rows of `cols` values.
pub(crate) fn rows_shared(nr: usize, cols: usize) -> usize {
    nr * cols / 32 * 48
}

/// Shared memory of the tile kernel of `nt` 8-row tiles and `wm` warps, for weights whose
/// super-block takes `slot` bytes there ([`weight_slot`]).
pub(crate) fn tile_shared(nt: usize, wm: usize, slot: usize) -> usize {
    TILE_STAGES * (8 * nt * TILE_RAW + 16 * wm * slot) + 8 * nt * TILE_META
}

/// Bytes a weight row's super-block takes in a tile block's shared memory (`Frag::SLOT`): a
/// Q4_K block, or the 16-byte aligned window around a (2-byte aligned) Q6_K block.
pub(crate) fn weight_slot(tag: &str) -> usize {
    match tag {
        "q6_k" => 224,
        _ => 144,
    }
}

/// Most warps a tile block takes along the weight rows (16 rows a warp): eight for tiles of
/// 32 or 64 activation rows (the activations staged and summed once for 128 weight rows),
/// four for smaller ones; `TREESPEC_MMQ_WARPS=N` (1 to 8) sets it for every tile.
pub(crate) fn tile_warps(nt: usize) -> usize {
    static WARPS: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let set = *WARPS.get_or_init(|| {
        std::env::var("TREESPEC_MMQ_WARPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|w| (1..=8).contains(w))
    });
    set.unwrap_or(if nt >= 4 { 8 } else { 4 })
}

/// The kernel for `n` activation rows of a stack of `rows x cols`: the one-row kernel for
/// one row ([`warp_rows`]'s, `TREESPEC_MMQ_WARP`), for two on matrices of up to [`ROWS2_UPTO`] values, where their staged rows fit
/// (`TREESPEC_MMQ_ROWS=N`, 0, 1, 2 or 4, moves the row bound: 0 puts every pass on the tiles);
/// the tiles beyond. On the H200 (BENCHMARKS.md section 35) two rows on dp4a beat the 8-row
/// tile on the 1.5B's q/o and down (3.1 us against 6.5, 14.6 against 18.8) and lost on every
/// bigger matrix; four rows lost everywhere.
pub(crate) fn mmq_kernel(n: usize, rows: usize, cols: usize) -> Mmq {
    let nr = n.max(1).next_power_of_two();
    let upto = match (rows_upto(), nr) {
        (Some(upto), _) => upto,
        (None, 1) => 1,
        (None, _) if rows * cols <= ROWS2_UPTO => 2,
        (None, _) => 1,
    };
    if nr <= upto && rows_shared(nr, cols) <= ROWS_SHARED {
        return match (nr, warp_rows()) {
            (1, Some(layout)) => Mmq::Warp(layout),
            _ => Mmq::Rows(nr),
        };
    }
    Mmq::Tile(match n {
        0..=8 => 1,
        9..=16 => 2,
        17..=64 => 4,
        _ => 8,
    })
}

/// Values of a matrix up to which two activation rows take the one-row kernel.
pub(crate) const ROWS2_UPTO: usize = 16 << 20;

/// `TREESPEC_MMQ_ROWS`: the most activation rows the one-row kernels take (0, 1, 2 or 4),
/// or `None` (unset) for [`mmq_kernel`]'s choice by shape.
pub(crate) fn rows_upto() -> Option<usize> {
    static UPTO: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *UPTO.get_or_init(|| match std::env::var("TREESPEC_MMQ_ROWS").as_deref() {
        Ok("0") => Some(0),
        Ok("1") => Some(1),
        Ok("2") => Some(2),
        Ok("4") => Some(4),
        _ => None,
    })
}

/// Which [`Mmq::Warp`] one activation row takes, or `None` for the grid-stride kernel
/// `mmq_<tag>_row` (`TREESPEC_MMQ_WARP`: `0` none, `4` [`WarpLayout::Chunks4`], `c`
/// [`WarpLayout::Contiguous`], else [`WarpLayout::Chunks`]).
pub(crate) fn warp_rows() -> Option<WarpLayout> {
    static WARP: std::sync::OnceLock<Option<WarpLayout>> = std::sync::OnceLock::new();
    *WARP.get_or_init(|| match std::env::var("TREESPEC_MMQ_WARP").as_deref() {
        Ok("0") => None,
        Ok("4") => Some(WarpLayout::Chunks4),
        Ok("c") => Some(WarpLayout::Contiguous),
        _ => Some(WarpLayout::Chunks),
    })
}

/// Weight rows (a warp each) a block of [`Mmq::Warp`] takes (`WARP_ROWS`).
pub(crate) const WARP_ROWS: usize = 8;

/// A tile pass's grid without a split, and its warps along the weight rows: as many as
/// [`tile_warps`] and the rows allow, fewer where the block's shared memory would pass
/// `smem` (the workstation Blackwell cards allow a block 99 KiB).
pub(crate) fn tile_grid(
    rows: usize,
    n: usize,
    nt: usize,
    slot: usize,
    smem: usize,
) -> ((usize, usize), usize) {
    let mut wm = (rows / 16).clamp(1, tile_warps(nt));
    while wm > 1 && tile_shared(nt, wm, slot) + TILE_STATIC > smem {
        wm -= 1;
    }
    ((rows.div_ceil(16 * wm), n.div_ceil(8 * nt)), wm)
}

/// Chunks a tile pass whose grid is `grid` splits each row over (1: none).
pub(crate) fn split_chunks((gx, gy): (usize, usize), cols: usize, sms: usize) -> usize {
    let chunks = (cols / SUPER).div_ceil(chunk_size(cols));
    if gx * gy < SPLIT_BELOW_WAVES * sms && chunks > 1 {
        chunks
    } else {
        1
    }
}

/// A block may take 48 KiB of shared memory, static and dynamic together, without asking: whether
/// a launch of `kernel` with `shared` dynamic bytes must first raise its function's limit.
pub(crate) fn needs_opt_in(kernel: Mmq, shared: usize) -> bool {
    let fixed = match kernel {
        Mmq::Tile(_) => TILE_STATIC,
        Mmq::Rows(_) | Mmq::Warp(_) => 0,
    };
    shared + fixed > 48 * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shared memory a block may opt into: the workstation Blackwell cards (sm_120) and Hopper.
    const CARDS: [usize; 2] = [99 * 1024, 227 * 1024];

    #[test]
    fn a_tile_block_fits_every_card() {
        for smem in CARDS {
            for nt in [1, 2, 4, 8] {
                for slot in [weight_slot("q4_k"), weight_slot("q6_k")] {
                    for rows in [16, 48, 1040, 4096, 24_576] {
                        let ((gx, _), wm) = tile_grid(rows, 64, nt, slot, smem);
                        assert!(
                            tile_shared(nt, wm, slot) + TILE_STATIC <= smem,
                            "{nt} tiles, {wm} warps, slot {slot}: over {smem}"
                        );
                        assert!(gx * 16 * wm >= rows && wm >= 1);
                    }
                }
            }
        }
    }

    #[test]
    fn passes_of_up_to_64_rows_take_32_row_tiles_of_eight_warps_on_hopper() {
        assert_eq!(mmq_kernel(64, 24_576, 4096), Mmq::Tile(4));
        assert_eq!(mmq_kernel(65, 24_576, 4096), Mmq::Tile(8));
        assert_eq!(mmq_kernel(16, 24_576, 4096), Mmq::Tile(2));
        if std::env::var("TREESPEC_MMQ_WARPS").is_err() {
            assert_eq!(tile_grid(24_576, 64, 4, 144, CARDS[1]).1, 8);
            assert_eq!(tile_grid(24_576, 16, 2, 144, CARDS[1]).1, 4);
            // A stack of 48 rows: three warps.
            assert_eq!(tile_grid(48, 131, 2, 224, CARDS[1]).1, 3);
        }
    }

    #[test]
    fn a_pass_too_small_to_fill_the_gpu_splits_its_rows_over_their_chunks() {
        // The 8B shape's o (4096 x 4096) at 64 rows: 32 blocks of 128 rows on 132
        // multiprocessors split into the row's 8 chunks; gate+up (24576 rows) fills them.
        let o = tile_grid(4096, 64, 4, 144, CARDS[1]).0;
        assert_eq!(split_chunks(o, 4096, 132), 8);
        let gate_up = tile_grid(24_576, 256, 8, 144, CARDS[1]).0;
        assert_eq!(split_chunks(gate_up, 4096, 132), 1);
        assert_eq!(Mmq::Tile(4).name("q4_k"), "mmq_q4_k_t4");
        assert_eq!(Mmq::ALL.len(), 10);
    }

    #[test]
    fn one_row_takes_a_warp_a_weight_row() {
        if std::env::var("TREESPEC_MMQ_WARP").is_err() && rows_upto().is_none() {
            assert_eq!(mmq_kernel(1, 24_576, 4096), Mmq::Warp(WarpLayout::Chunks));
            assert_eq!(mmq_kernel(2, 1536, 1536), Mmq::Rows(2));
        }
        assert_eq!(
            Mmq::Warp(WarpLayout::Contiguous).name("q6_k"),
            "mmq_q6_k_warpc"
        );
    }

    #[test]
    fn the_static_shared_memory_counts_towards_the_unasked_limit() {
        // Session 27's selftest failure: a Q6_K stack of 48 rows, 16-row tiles, three warps.
        let shared = tile_shared(2, 3, weight_slot("q6_k"));
        assert!(shared <= 48 * 1024);
        assert!(needs_opt_in(Mmq::Tile(2), shared));
        assert!(!needs_opt_in(Mmq::Rows(1), shared));
    }
}
