//! The AVX-512 path of the canonical kernel ([`super::kernel`]) for the K-quants: a whole unit of
//! 32 weights decoded into one 32-lane i16 vector, one `vpmaddwd` against its activations, and
//! the 16 lane sums folded into the canonical eight (lane l and lane l + 8 hold the two halves
//! of canonical lane l) before each flush, so the integers, and with them every f32 operation,
//! are the AVX2 path's. The 32-value formats run the AVX2 loop.

use super::blocks::{Format, KHeader};
use super::kernel::TILE_ROWS;
use super::x86::{tile_k, KFmt, Lanes};
use super::QuantActs;
use std::arch::x86_64::*;

/// AVX-512: a unit as one 32-lane vector; lane l + 8 holds the second half of canonical lane l.
struct Avx512Lanes;
impl Lanes for Avx512Lanes {
    type Unit = __m512i;
    type Sums = __m512i;
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn zero() -> __m512i {
        _mm512_setzero_si512()
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn add_unit(s: __m512i, w: __m512i, a: *const i16) -> __m512i {
        _mm512_add_epi32(s, _mm512_madd_epi16(w, _mm512_loadu_si512(a as *const _)))
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn canonical(s: __m512i) -> __m256i {
        _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1))
    }
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
impl KFmt for Q4K {
    const FORMAT: Format = Format::Q4K;
    type Lanes = Avx512Lanes;
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn pair(b: *const u8, c: usize, h: &KHeader) -> [__m512i; 2] {
        let [u0, u1] = nibble_pair(widen32(b.add(16 + 32 * c)));
        [fold(u0, h.sc[2 * c]), fold(u1, h.sc[2 * c + 1])]
    }
}

struct Q5K;
impl KFmt for Q5K {
    const FORMAT: Format = Format::Q5K;
    type Lanes = Avx512Lanes;
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
impl KFmt for Q6K {
    const FORMAT: Format = Format::Q6K;
    type Lanes = Avx512Lanes;
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn pair(b: *const u8, c: usize, _: &KHeader) -> [__m512i; 2] {
        [Q6K::unit(b, 2 * c), Q6K::unit(b, 2 * c + 1)]
    }
}

/// `tile_k` for any row count up to [`TILE_ROWS`].
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn tile_k_rows<K: KFmt<Lanes = Avx512Lanes>>(
    wrow: &[u8],
    acts: &QuantActs,
    r0: usize,
    out: &mut [f32],
) {
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
