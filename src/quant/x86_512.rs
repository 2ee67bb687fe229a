//! The AVX-512 path of the canonical kernel ([`super::kernel`]) for the K-quants: a whole unit of
//! 32 weights decoded into one 32-lane i16 vector, one `vpmaddwd` against its activations, and
//! the 16 lane sums folded into the canonical eight (lane l and lane l + 8 hold the two halves
//! of canonical lane l) before each flush, so the integers, and with them every f32 operation,
//! are the AVX2 path's. The 32-value formats run the AVX2 loop.

use super::blocks::{Format, KHeader};
use super::kernel::TILE_ROWS;
use super::x86::{f16_at, mins_dot, prefetch_ahead, q45k_header, store};
use super::{QuantActs, BLOCK};
use std::arch::x86_64::*;

/// A K-quant format as the AVX-512 loop reads it: the block header and its units two at a time,
/// each as one 32-lane i16 vector with the integer sub-block scale folded in.
trait KFmt512 {
    const FORMAT: Format;
    /// The block header (the values of [`super::blocks::k_header`]).
    unsafe fn header(b: *const u8) -> KHeader;
    /// Units `2c` and `2c + 1`.
    unsafe fn pair(b: *const u8, c: usize, h: &KHeader) -> [__m512i; 2];
}

/// 32 bytes at `p` widened to 32 i16 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn widen32(p: *const u8) -> __m512i {
    _mm512_cvtepu8_epi16(_mm256_loadu_si256(p as *const __m256i))
}

/// `w` times the integer scale `sc`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn fold(w: __m512i, sc: u8) -> __m512i {
    _mm512_mullo_epi16(w, _mm512_set1_epi16(sc as i16))
}

/// The low and high nibbles of 32 widened bytes: units `2c` and `2c + 1` of a Q4_K / Q5_K block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn nibble_pair(v: __m512i) -> [__m512i; 2] {
    [
        _mm512_and_si512(v, _mm512_set1_epi16(0x0F)),
        _mm512_srli_epi16(v, 4),
    ]
}

/// Bit `j` of widened bytes, as 0 or 16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn bit16(v: __m512i, j: usize) -> __m512i {
    let b = _mm512_srl_epi16(v, _mm_cvtsi32_si128(j as i32));
    _mm512_slli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(1)), 4)
}

struct Q4K;
impl KFmt512 for Q4K {
    const FORMAT: Format = Format::Q4K;
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn header(b: *const u8) -> KHeader {
        q45k_header(b)
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn pair(b: *const u8, c: usize, h: &KHeader) -> [__m512i; 2] {
        let [u0, u1] = nibble_pair(widen32(b.add(16 + 32 * c)));
        [fold(u0, h.sc[2 * c]), fold(u1, h.sc[2 * c + 1])]
    }
}

struct Q5K;
impl KFmt512 for Q5K {
    const FORMAT: Format = Format::Q5K;
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn header(b: *const u8) -> KHeader {
        q45k_header(b)
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn pair(b: *const u8, c: usize, h: &KHeader) -> [__m512i; 2] {
        let [u0, u1] = nibble_pair(widen32(b.add(48 + 32 * c)));
        let qh = widen32(b.add(16));
        [
            fold(_mm512_or_si512(u0, bit16(qh, 2 * c)), h.sc[2 * c]),
            fold(_mm512_or_si512(u1, bit16(qh, 2 * c + 1)), h.sc[2 * c + 1]),
        ]
    }
}

struct Q6K;
impl Q6K {
    /// Unit `sub`: `(q - 32) * scale`, one scale a half unit.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn unit(b: *const u8, sub: usize) -> __m512i {
        let (hf, k) = (sub / 4, sub % 4);
        let ql = widen32(b.add(64 * hf + 32 * (k % 2)));
        let qh = widen32(b.add(128 + 32 * hf));
        let lo = _mm512_and_si512(
            _mm512_srl_epi16(ql, _mm_cvtsi32_si128(4 * (k / 2) as i32)),
            _mm512_set1_epi16(15),
        );
        let hi = _mm512_and_si512(
            _mm512_srl_epi16(qh, _mm_cvtsi32_si128(2 * k as i32)),
            _mm512_set1_epi16(3),
        );
        let q = _mm512_sub_epi16(
            _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4)),
            _mm512_set1_epi16(32),
        );
        let sc0 = _mm256_set1_epi16(*b.add(192 + 2 * sub) as i8 as i16);
        let sc1 = _mm256_set1_epi16(*b.add(193 + 2 * sub) as i8 as i16);
        let sc = _mm512_inserti64x4(_mm512_castsi256_si512(sc0), sc1, 1);
        _mm512_mullo_epi16(q, sc)
    }
}
impl KFmt512 for Q6K {
    const FORMAT: Format = Format::Q6K;
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn header(b: *const u8) -> KHeader {
        KHeader {
            d: f16_at(b.add(208)),
            dmin: 0.0,
            sc: [1; 8],
            mn: [0; 8],
        }
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn pair(b: *const u8, c: usize, _: &KHeader) -> [__m512i; 2] {
        [Q6K::unit(b, 2 * c), Q6K::unit(b, 2 * c + 1)]
    }
}

/// The tile loop of the K-quants: `R` rows from `r0` against one weight row.
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn tile_k<K: KFmt512, const R: usize>(
    wrow: &[u8],
    acts: &QuantActs,
    r0: usize,
    out: &mut [f32],
) {
    let format = K::FORMAT;
    let (units, nb, k) = (acts.units(), acts.blocks(), acts.k);
    let bb = format.block_bytes();
    let flush = format.k_flush();
    let offsets = format.has_offset();
    let mut acc = [_mm256_setzero_ps(); R];
    let mut off = [0f32; R];
    let q = acts.q.as_ptr().add(r0 * k);
    let d = acts.d.as_ptr().add(r0 * nb);
    let sums = acts.sum.as_ptr().add(r0 * units);
    let w = wrow.as_ptr();
    for blk in 0..nb {
        let b = w.add(blk * bb);
        prefetch_ahead(b);
        let h = K::header(b);
        let mut lanes = [_mm512_setzero_si512(); R];
        for c in 0..4 {
            let pair = K::pair(b, c, &h);
            for (j, wv) in pair.into_iter().enumerate() {
                let u = blk * 8 + 2 * c + j;
                for i in 0..R {
                    let a = _mm512_loadu_si512(q.add(i * k + u * BLOCK) as *const _);
                    lanes[i] = _mm512_add_epi32(lanes[i], _mm512_madd_epi16(wv, a));
                }
            }
            if (2 * c + 2) % flush == 0 {
                for i in 0..R {
                    // Canonical lane l: this vector's lanes l and l + 8 (its unit halves).
                    let l = _mm256_add_epi32(
                        _mm512_castsi512_si256(lanes[i]),
                        _mm512_extracti64x4_epi64(lanes[i], 1),
                    );
                    let t = h.d * *d.add(i * nb + blk);
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(t), _mm256_cvtepi32_ps(l), acc[i]);
                    lanes[i] = _mm512_setzero_si512();
                }
            }
        }
        if offsets {
            for i in 0..R {
                let t = -(h.dmin * *d.add(i * nb + blk));
                off[i] = t.mul_add(mins_dot(&h, sums.add(i * units + blk * 8)) as f32, off[i]);
            }
        }
    }
    store(&acc, &off, out);
}

/// `tile_k` for any row count up to [`TILE_ROWS`].
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn tile_k_rows<K: KFmt512>(wrow: &[u8], acts: &QuantActs, r0: usize, out: &mut [f32]) {
    match out.len() {
        1 => tile_k::<K, 1>(wrow, acts, r0, out),
        2 => tile_k::<K, 2>(wrow, acts, r0, out),
        3 => tile_k::<K, 3>(wrow, acts, r0, out),
        _ => tile_k::<K, 4>(wrow, acts, r0, out),
    }
}

/// AVX-512 kernel: rows `r0 .. r0 + out.len()` (at most [`TILE_ROWS`]) of `acts` against one
/// weight row; the 32-value formats on the AVX2 loop. The caller has checked that the CPU has
/// AVX-512 F and BW, AVX2, FMA and F16C.
pub(crate) fn tile_avx512(
    format: Format,
    wrow: &[u8],
    acts: &QuantActs,
    r0: usize,
    out: &mut [f32],
) {
    if !format.is_k() {
        return super::x86::tile_avx2(format, wrow, acts, r0, out);
    }
    assert!(out.len() <= TILE_ROWS && r0 + out.len() <= acts.m);
    assert_eq!(
        wrow.len(),
        acts.k / format.block_elems() * format.block_bytes()
    );
    assert_eq!(acts.block, format.act_block());
    // SAFETY: `KernelPath::Avx512` is only used where `available()` found the features; every
    // read stays inside `wrow` (checked: whole blocks for `acts.k` values) and inside activation
    // rows r0 .. r0 + out.len() (checked above).
    unsafe {
        match format {
            Format::Q4K => tile_k_rows::<Q4K>(wrow, acts, r0, out),
            Format::Q5K => tile_k_rows::<Q5K>(wrow, acts, r0, out),
            _ => tile_k_rows::<Q6K>(wrow, acts, r0, out),
        }
    }
}
