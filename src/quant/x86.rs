//! The AVX2 path of the canonical kernel ([`super::kernel`]): each format's unit decoded into two
//! 16-lane i16 vectors, `vpmaddwd` against the activations, the eight lane sums scaled into f32
//! accumulators with one FMA per unit and row.

use super::blocks::{k_scales_mins, Format, KHeader};
use super::kernel::{finish, TILE_ROWS};
use super::{QuantActs, BLOCK};
use std::arch::x86_64::*;

/// A 32-value block format as the AVX2 loop reads it: the block's scale and offset (the same
/// values as [`super::blocks::decode_unit`] gives) and its 32 weights as two 16-lane i16 vectors.
trait Fmt {
    /// Bytes per block.
    const BYTES: usize;
    /// True when blocks carry an offset.
    const OFFSET: bool;
    /// Scale and offset of the block at `b`.
    unsafe fn header(b: *const u8) -> (f32, f32);
    /// Weights 0..16 and 16..32 of the block at `b`.
    unsafe fn unit(b: *const u8) -> (__m256i, __m256i);
}

/// An f16 at `p` as f32 (F16C).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// Bytes ahead of the block being read that the loops prefetch (measured on the 1.5B Q4_K_M
/// target on a 2-core EPYC: 256 and 2,048 slower than 512-1,024; BENCHMARKS.md section 51).
const PREFETCH_AHEAD: usize = 512;

/// Cache lines prefetched a block: 256 bytes, more than the largest block (210), so successive
/// blocks' windows leave no gap.
const PREFETCH_LINES: usize = 4;

/// The weights a few blocks after `b`, asked for now: one core streams its rows faster with
/// the loads in flight early (a prefetch never faults, past the row's end included).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn prefetch_ahead(b: *const u8) {
    for line in 0..PREFETCH_LINES {
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH_AHEAD + 64 * line) as *const i8);
    }
}

/// 16 bytes of nibbles to (low nibbles, high nibbles) as u8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles16(p: *const u8) -> (__m128i, __m128i) {
    let v = _mm_loadu_si128(p as *const __m128i);
    let m = _mm_set1_epi8(0x0F);
    (_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m))
}

/// The fifth bits of 16 weights (`bits`, bit i for weight i) as 0 or 16 in i16 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fifth_bits(bits: u32) -> __m256i {
    let sel = _mm256_setr_epi16(
        1,
        2,
        4,
        8,
        16,
        32,
        64,
        128,
        256,
        512,
        1024,
        2048,
        4096,
        8192,
        16384,
        i16::MIN,
    );
    let b = _mm256_and_si256(_mm256_set1_epi16(bits as u16 as i16), sel);
    _mm256_and_si256(_mm256_cmpeq_epi16(b, sel), _mm256_set1_epi16(16))
}

struct Q4_0;
impl Fmt for Q4_0 {
    const BYTES: usize = 18;
    const OFFSET: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(b: *const u8) -> (f32, f32) {
        (f16_at(b), 0.0)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unit(b: *const u8) -> (__m256i, __m256i) {
        let (lo, hi) = nibbles16(b.add(2));
        let eight = _mm256_set1_epi16(8);
        (
            _mm256_sub_epi16(_mm256_cvtepu8_epi16(lo), eight),
            _mm256_sub_epi16(_mm256_cvtepu8_epi16(hi), eight),
        )
    }
}

struct Q4_1;
impl Fmt for Q4_1 {
    const BYTES: usize = 20;
    const OFFSET: bool = true;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(b: *const u8) -> (f32, f32) {
        (f16_at(b), f16_at(b.add(2)))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unit(b: *const u8) -> (__m256i, __m256i) {
        let (lo, hi) = nibbles16(b.add(4));
        (_mm256_cvtepu8_epi16(lo), _mm256_cvtepu8_epi16(hi))
    }
}

/// The 32 five-bit weights of a Q5_0 / Q5_1 block (`qh` at `b + hb`, nibbles after it).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_unit(b: *const u8, hb: usize) -> (__m256i, __m256i) {
    let qh = (b.add(hb) as *const u32).read_unaligned().to_le();
    let (lo, hi) = nibbles16(b.add(hb + 4));
    (
        _mm256_or_si256(_mm256_cvtepu8_epi16(lo), fifth_bits(qh & 0xFFFF)),
        _mm256_or_si256(_mm256_cvtepu8_epi16(hi), fifth_bits(qh >> 16)),
    )
}

struct Q5_0;
impl Fmt for Q5_0 {
    const BYTES: usize = 22;
    const OFFSET: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(b: *const u8) -> (f32, f32) {
        (f16_at(b), 0.0)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unit(b: *const u8) -> (__m256i, __m256i) {
        let (lo, hi) = q5_unit(b, 2);
        let sixteen = _mm256_set1_epi16(16);
        (_mm256_sub_epi16(lo, sixteen), _mm256_sub_epi16(hi, sixteen))
    }
}

struct Q5_1;
impl Fmt for Q5_1 {
    const BYTES: usize = 24;
    const OFFSET: bool = true;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(b: *const u8) -> (f32, f32) {
        (f16_at(b), f16_at(b.add(2)))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unit(b: *const u8) -> (__m256i, __m256i) {
        q5_unit(b, 4)
    }
}

struct Q8_0;
impl Fmt for Q8_0 {
    const BYTES: usize = 34;
    const OFFSET: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(b: *const u8) -> (f32, f32) {
        (f16_at(b), 0.0)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unit(b: *const u8) -> (__m256i, __m256i) {
        let q = b.add(2);
        (
            _mm256_cvtepi8_epi16(_mm_loadu_si128(q as *const __m128i)),
            _mm256_cvtepi8_epi16(_mm_loadu_si128(q.add(16) as *const __m128i)),
        )
    }
}

/// A K-quant block's integer sub-block scales as i16 lanes, folded into the weights.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fold(w: (__m256i, __m256i), sc: u8) -> (__m256i, __m256i) {
    let s = _mm256_set1_epi16(sc as i16);
    (_mm256_mullo_epi16(w.0, s), _mm256_mullo_epi16(w.1, s))
}

/// A K-quant format, as a type (so that each gets its own loop): how to read a block's header and
/// its units two at a time, each as two 16-lane i16 vectors with the integer sub-block scale
/// folded in (the integers of [`super::blocks::k_unit_ints`]).
pub(super) trait KFmt {
    const FORMAT: Format;
    /// The vector width its units are decoded to.
    type Lanes: Lanes;
    /// Units `2c` and `2c + 1` (`h`: the block's [`k_header_at`]).
    unsafe fn pair(b: *const u8, c: usize, h: &KHeader) -> [<Self::Lanes as Lanes>::Unit; 2];
}

/// A vector width's part of the K-quant loop: a unit's weights against a row's 32
/// activations, summed into running integer lanes that fold into the canonical eight.
pub(super) trait Lanes {
    /// A unit's 32 weights, scale folded in.
    type Unit: Copy;
    /// A row's running lane sums.
    type Sums: Copy;
    /// Sums of nothing.
    unsafe fn zero() -> Self::Sums;
    /// `s` plus the unit `w` times the activations at `a` (32 i16).
    unsafe fn add_unit(s: Self::Sums, w: Self::Unit, a: *const i16) -> Self::Sums;
    /// The canonical eight lane sums of `s`.
    unsafe fn canonical(s: Self::Sums) -> __m256i;
}

/// AVX2: a unit as two 16-lane halves, eight lanes that are the canonical ones.
pub(super) struct Avx2Lanes;
impl Lanes for Avx2Lanes {
    type Unit = (__m256i, __m256i);
    type Sums = __m256i;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn zero() -> __m256i {
        _mm256_setzero_si256()
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn add_unit(s: __m256i, (lo, hi): (__m256i, __m256i), a: *const i16) -> __m256i {
        let alo = _mm256_loadu_si256(a as *const __m256i);
        let ahi = _mm256_loadu_si256(a.add(16) as *const __m256i);
        let p = _mm256_add_epi32(_mm256_madd_epi16(lo, alo), _mm256_madd_epi16(hi, ahi));
        _mm256_add_epi32(s, p)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn canonical(s: __m256i) -> __m256i {
        s
    }
}

/// Scales, minimums and f16 factors of a Q4_K / Q5_K block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q45k_header(b: *const u8) -> KHeader {
    let (sc, mn) = k_scales_mins(std::slice::from_raw_parts(b.add(4), 12));
    KHeader {
        d: f16_at(b),
        dmin: f16_at(b.add(2)),
        sc,
        mn,
    }
}

/// The header of the K-quant block of `format` at `b` (the values of
/// [`super::blocks::k_header`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn k_header_at(format: Format, b: *const u8) -> KHeader {
    if format == Format::Q6K {
        KHeader {
            d: f16_at(b.add(208)),
            dmin: 0.0,
            sc: [1; 8],
            mn: [0; 8],
        }
    } else {
        q45k_header(b)
    }
}

/// 32 bytes at `p` widened to two 16-lane i16 vectors.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen32(p: *const u8) -> (__m256i, __m256i) {
    (
        _mm256_cvtepu8_epi16(_mm_loadu_si128(p as *const __m128i)),
        _mm256_cvtepu8_epi16(_mm_loadu_si128(p.add(16) as *const __m128i)),
    )
}

/// The low and high nibbles of 32 widened bytes: units `2c` and `2c + 1` of a Q4_K / Q5_K block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibble_pair(v: (__m256i, __m256i)) -> [(__m256i, __m256i); 2] {
    let m = _mm256_set1_epi16(0x0F);
    [
        (_mm256_and_si256(v.0, m), _mm256_and_si256(v.1, m)),
        (_mm256_srli_epi16(v.0, 4), _mm256_srli_epi16(v.1, 4)),
    ]
}

/// Bit `j` of widened bytes, as 0 or 16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bit16(v: __m256i, j: usize) -> __m256i {
    let b = _mm256_srl_epi16(v, _mm_cvtsi32_si128(j as i32));
    _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(1)), 4)
}

struct Q4K;
impl KFmt for Q4K {
    const FORMAT: Format = Format::Q4K;
    type Lanes = Avx2Lanes;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pair(b: *const u8, c: usize, h: &KHeader) -> [(__m256i, __m256i); 2] {
        let [u0, u1] = nibble_pair(widen32(b.add(16 + 32 * c)));
        [fold(u0, h.sc[2 * c]), fold(u1, h.sc[2 * c + 1])]
    }
}

struct Q5K;
impl KFmt for Q5K {
    const FORMAT: Format = Format::Q5K;
    type Lanes = Avx2Lanes;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pair(b: *const u8, c: usize, h: &KHeader) -> [(__m256i, __m256i); 2] {
        let [u0, u1] = nibble_pair(widen32(b.add(48 + 32 * c)));
        let qh = widen32(b.add(16));
        let with = |u: (__m256i, __m256i), j: usize| {
            (
                _mm256_or_si256(u.0, bit16(qh.0, j)),
                _mm256_or_si256(u.1, bit16(qh.1, j)),
            )
        };
        [
            fold(with(u0, 2 * c), h.sc[2 * c]),
            fold(with(u1, 2 * c + 1), h.sc[2 * c + 1]),
        ]
    }
}

struct Q6K;
impl Q6K {
    /// Unit `sub`: `(q - 32) * scale` per half unit.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unit(b: *const u8, sub: usize) -> (__m256i, __m256i) {
        let (hf, k) = (sub / 4, sub % 4);
        let ql = widen32(b.add(64 * hf + 32 * (k % 2)));
        let qh = widen32(b.add(128 + 32 * hf));
        let sl = _mm_cvtsi32_si128(4 * (k / 2) as i32);
        let sh = _mm_cvtsi32_si128(2 * k as i32);
        let (m15, m3, thirty_two) = (
            _mm256_set1_epi16(15),
            _mm256_set1_epi16(3),
            _mm256_set1_epi16(32),
        );
        let q = |l: __m256i, h: __m256i| {
            let lo = _mm256_and_si256(_mm256_srl_epi16(l, sl), m15);
            let hi = _mm256_and_si256(_mm256_srl_epi16(h, sh), m3);
            _mm256_sub_epi16(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), thirty_two)
        };
        let sc0 = *b.add(192 + 2 * sub) as i8 as i16;
        let sc1 = *b.add(193 + 2 * sub) as i8 as i16;
        (
            _mm256_mullo_epi16(q(ql.0, qh.0), _mm256_set1_epi16(sc0)),
            _mm256_mullo_epi16(q(ql.1, qh.1), _mm256_set1_epi16(sc1)),
        )
    }
}
impl KFmt for Q6K {
    const FORMAT: Format = Format::Q6K;
    type Lanes = Avx2Lanes;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pair(b: *const u8, c: usize, _: &KHeader) -> [(__m256i, __m256i); 2] {
        [Q6K::unit(b, 2 * c), Q6K::unit(b, 2 * c + 1)]
    }
}

/// The tile loop of the 32-value formats: `R` rows from `r0` against one weight row.
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<F: Fmt, const R: usize>(wrow: &[u8], acts: &QuantActs, r0: usize, out: &mut [f32]) {
    let units = acts.units();
    let k = acts.k;
    let mut acc = [_mm256_setzero_ps(); R];
    let mut off = [0f32; R];
    let q = acts.q.as_ptr().add(r0 * k);
    let d = acts.d.as_ptr().add(r0 * units);
    let sums = acts.sum.as_ptr().add(r0 * units);
    let w = wrow.as_ptr();
    for u in 0..units {
        let b = w.add(u * F::BYTES);
        if u % 4 == 0 {
            // Four units span at most 136 bytes: the lines prefetched cover them.
            prefetch_ahead(b);
        }
        let (s, o) = F::header(b);
        let (lo, hi) = F::unit(b);
        for i in 0..R {
            let a = q.add(i * k + u * BLOCK);
            let alo = _mm256_loadu_si256(a as *const __m256i);
            let ahi = _mm256_loadu_si256(a.add(16) as *const __m256i);
            let p = _mm256_add_epi32(_mm256_madd_epi16(lo, alo), _mm256_madd_epi16(hi, ahi));
            let du = *d.add(i * units + u);
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(s * du), _mm256_cvtepi32_ps(p), acc[i]);
            if F::OFFSET {
                off[i] = (o * du).mul_add(*sums.add(i * units + u) as f32, off[i]);
            }
        }
    }
    store(&acc, &off, out);
}

/// The minimums' integer dot product with a block's 8 unit sums (at `sums`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn mins_dot(h: &KHeader, sums: *const i32) -> i32 {
    let mn = _mm256_cvtepu8_epi32(_mm_loadl_epi64(h.mn.as_ptr() as *const __m128i));
    let v = _mm256_mullo_epi32(mn, _mm256_loadu_si256(sums as *const __m256i));
    let v = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0b01_00_11_10));
    let v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0b10_11_00_01));
    _mm_cvtsi128_si32(v)
}

/// The tile loop of the K-quants: `R` rows from `r0` against one weight row, at any vector
/// width (`K::Lanes`). Inlined into each width's entry ([`tile_k_rows`], and the AVX-512 one),
/// whose target features its intrinsics then run under.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub(super) unsafe fn tile_k<K: KFmt, const R: usize>(
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
        let h = k_header_at(format, b);
        let mut lanes = [K::Lanes::zero(); R];
        for c in 0..4 {
            let pair = K::pair(b, c, &h);
            for (j, unit) in pair.into_iter().enumerate() {
                let u = blk * 8 + 2 * c + j;
                for i in 0..R {
                    lanes[i] = K::Lanes::add_unit(lanes[i], unit, q.add(i * k + u * BLOCK));
                }
            }
            if (2 * c + 2) % flush == 0 {
                for i in 0..R {
                    let l = K::Lanes::canonical(lanes[i]);
                    let t = h.d * *d.add(i * nb + blk);
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(t), _mm256_cvtepi32_ps(l), acc[i]);
                    lanes[i] = K::Lanes::zero();
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

/// The fixed reduction of each row's lanes into `out`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn store<const R: usize>(acc: &[__m256; R], off: &[f32; R], out: &mut [f32]) {
    for i in 0..R {
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc[i]);
        out[i] = finish(&lanes, off[i]);
    }
}

/// `tile` for any row count up to [`TILE_ROWS`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_rows<F: Fmt>(wrow: &[u8], acts: &QuantActs, r0: usize, out: &mut [f32]) {
    match out.len() {
        1 => tile::<F, 1>(wrow, acts, r0, out),
        2 => tile::<F, 2>(wrow, acts, r0, out),
        3 => tile::<F, 3>(wrow, acts, r0, out),
        _ => tile::<F, 4>(wrow, acts, r0, out),
    }
}

/// `tile_k` for any row count up to [`TILE_ROWS`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_k_rows<K: KFmt<Lanes = Avx2Lanes>>(
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

/// AVX2 kernel: rows `r0 .. r0 + out.len()` (at most [`TILE_ROWS`]) of `acts` against one
/// weight row. The caller has checked that the CPU has AVX2, FMA and F16C.
pub(crate) fn tile_avx2(format: Format, wrow: &[u8], acts: &QuantActs, r0: usize, out: &mut [f32]) {
    assert!(out.len() <= TILE_ROWS && r0 + out.len() <= acts.m);
    assert_eq!(
        wrow.len(),
        acts.k / format.block_elems() * format.block_bytes()
    );
    assert_eq!(acts.block, format.act_block());
    // SAFETY: `KernelPath::Avx2` is only used where `available()` found the features; every
    // read stays inside `wrow` (checked: whole blocks for `acts.k` values) and inside activation
    // rows r0 .. r0 + out.len() (checked above).
    unsafe {
        match format {
            Format::Q4_0 => tile_rows::<Q4_0>(wrow, acts, r0, out),
            Format::Q4_1 => tile_rows::<Q4_1>(wrow, acts, r0, out),
            Format::Q5_0 => tile_rows::<Q5_0>(wrow, acts, r0, out),
            Format::Q5_1 => tile_rows::<Q5_1>(wrow, acts, r0, out),
            Format::Q8_0 => tile_rows::<Q8_0>(wrow, acts, r0, out),
            Format::Q4K => tile_k_rows::<Q4K>(wrow, acts, r0, out),
            Format::Q5K => tile_k_rows::<Q5K>(wrow, acts, r0, out),
            Format::Q6K => tile_k_rows::<Q6K>(wrow, acts, r0, out),
        }
    }
}
