//! GGUF block formats (ggml's `block_q4_0` ... `block_q6_K`, `ggml-common.h`) and their portable
//! decoding into the kernel's unit: 32 integer weights with one f32 scale and one f32 offset, so
//! that weight i of the unit is `scale * w[i] + offset`.

use half::f16;

/// A quantised block format the kernels read directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// 32 x 4-bit, one f16 scale: `d * (q - 8)`.
    Q4_0,
    /// 32 x 4-bit, f16 scale and minimum: `d * q + m`.
    Q4_1,
    /// 32 x 5-bit, one f16 scale: `d * (q - 16)`.
    Q5_0,
    /// 32 x 5-bit, f16 scale and minimum: `d * q + m`.
    Q5_1,
    /// 32 x 8-bit, one f16 scale: `d * q`.
    Q8_0,
    /// 256 x 4-bit in 8 sub-blocks with 6-bit scales and minimums.
    Q4K,
    /// 256 x 5-bit in 8 sub-blocks with 6-bit scales and minimums.
    Q5K,
    /// 256 x 6-bit in 16 sub-blocks with 8-bit scales.
    Q6K,
}

impl Format {
    /// The format's name as ggml writes it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Q4_0 => "Q4_0",
            Format::Q4_1 => "Q4_1",
            Format::Q5_0 => "Q5_0",
            Format::Q5_1 => "Q5_1",
            Format::Q8_0 => "Q8_0",
            Format::Q4K => "Q4_K",
            Format::Q5K => "Q5_K",
            Format::Q6K => "Q6_K",
        }
    }

    /// Values per block.
    pub fn block_elems(self) -> usize {
        match self {
            Format::Q4K | Format::Q5K | Format::Q6K => 256,
            _ => 32,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Format::Q4_0 => 18,
            Format::Q4_1 => 20,
            Format::Q5_0 => 22,
            Format::Q5_1 => 24,
            Format::Q8_0 => 34,
            Format::Q4K => 144,
            Format::Q5K => 176,
            Format::Q6K => 210,
        }
    }

    /// True when units have a non-zero offset (a minimum).
    pub fn has_offset(self) -> bool {
        matches!(
            self,
            Format::Q4_1 | Format::Q5_1 | Format::Q4K | Format::Q5K
        )
    }

    /// True for the K-quant formats (256-value blocks with integer sub-block scales), whose
    /// kernels sum a whole block in integers against activations with one scale per 256.
    pub fn is_k(self) -> bool {
        matches!(self, Format::Q4K | Format::Q5K | Format::Q6K)
    }

    /// Values per activation scale: 256 for the K-quants, 32 otherwise.
    pub fn act_block(self) -> usize {
        if self.is_k() {
            256
        } else {
            32
        }
    }

    /// K-quants: units summed in integers before one f32 step (Q6_K's larger integer weights
    /// would overflow i32 over all 8 units of 16-bit activations, so it takes two steps).
    pub fn k_flush(self) -> usize {
        if self == Format::Q6K {
            4
        } else {
            8
        }
    }

    /// Every format.
    pub const ALL: [Format; 8] = [
        Format::Q4_0,
        Format::Q4_1,
        Format::Q5_0,
        Format::Q5_1,
        Format::Q8_0,
        Format::Q4K,
        Format::Q5K,
        Format::Q6K,
    ];

    /// The format of a candle GGML dtype, if the kernels read it.
    pub fn from_ggml(dtype: candle_core::quantized::GgmlDType) -> Option<Format> {
        use candle_core::quantized::GgmlDType as G;
        Some(match dtype {
            G::Q4_0 => Format::Q4_0,
            G::Q4_1 => Format::Q4_1,
            G::Q5_0 => Format::Q5_0,
            G::Q5_1 => Format::Q5_1,
            G::Q8_0 => Format::Q8_0,
            G::Q4K => Format::Q4K,
            G::Q5K => Format::Q5K,
            G::Q6K => Format::Q6K,
            _ => return None,
        })
    }
}

/// An f16 stored little-endian at `b[0..2]`, as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and minimum of sub-block `j` of a Q4_K / Q5_K block.
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The eight 6-bit scales and eight 6-bit minimums of a Q4_K / Q5_K block (`scales`: its 12 scale
/// bytes), unpacked at once as ggml's AVX2 code does; equal to [`scale_min_k4`] for each j.
#[inline(always)]
pub(crate) fn k_scales_mins(scales: &[u8]) -> ([u8; 8], [u8; 8]) {
    const KMASK1: u32 = 0x3f3f3f3f;
    const KMASK2: u32 = 0x0f0f0f0f;
    const KMASK3: u32 = 0x03030303;
    let w = |i: usize| u32::from_le_bytes([scales[i], scales[i + 1], scales[i + 2], scales[i + 3]]);
    let (u0, u1, u2) = (w(0), w(4), w(8));
    let u3 = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    let v1 = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let v0 = u0 & KMASK1;
    let v2 = u1 & KMASK1;
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    sc[..4].copy_from_slice(&v0.to_le_bytes());
    sc[4..].copy_from_slice(&v1.to_le_bytes());
    mn[..4].copy_from_slice(&v2.to_le_bytes());
    mn[4..].copy_from_slice(&u3.to_le_bytes());
    (sc, mn)
}

/// A K-quant block as the integer kernel reads it: `d`, `dmin` (0 for Q6_K), and per unit the
/// integer scale folded into the weights (1 for Q6_K, whose 16 scales are folded per half unit)
/// and the integer minimum.
pub(crate) struct KHeader {
    pub d: f32,
    pub dmin: f32,
    pub sc: [u8; 8],
    pub mn: [u8; 8],
}

/// The header of a K-quant block.
#[inline(always)]
pub(crate) fn k_header(format: Format, block: &[u8]) -> KHeader {
    if format == Format::Q6K {
        return KHeader {
            d: f16_at(&block[208..210]),
            dmin: 0.0,
            sc: [1; 8],
            mn: [0; 8],
        };
    }
    let (sc, mn) = k_scales_mins(&block[4..16]);
    KHeader {
        d: f16_at(&block[0..2]),
        dmin: f16_at(&block[2..4]),
        sc,
        mn,
    }
}

/// Unit `sub` of a K-quant block as integers with the sub-block scale folded in: Q4_K / Q5_K
/// `q * sc`, Q6_K `(q - 32) * sc16`. So the block's value i is `d * w[i] - dmin * mn[unit]`.
pub(crate) fn k_unit_ints(
    format: Format,
    block: &[u8],
    sub: usize,
    h: &KHeader,
    w: &mut [i16; 32],
) {
    let (_, _) = decode_unit(format, block, sub, w);
    if format != Format::Q6K {
        let sc = h.sc[sub] as i16;
        for v in w.iter_mut() {
            *v *= sc;
        }
    }
}

/// Scale and offset of unit `sub` (0..8) of a Q4_K / Q5_K block: `d * sc` and `-(dmin * m)`.
#[inline(always)]
pub(crate) fn k_scale_offset(block: &[u8], sub: usize) -> (f32, f32) {
    let d = f16_at(&block[0..2]);
    let dmin = f16_at(&block[2..4]);
    let (sc, m) = scale_min_k4(sub, &block[4..16]);
    (d * sc as f32, -(dmin * m as f32))
}

/// Decode unit `u` (32 consecutive weights, `u` counted from the start of the row) of a row of
/// `format` blocks into integers `w`, returning `(scale, offset)`.
pub(crate) fn decode_unit(format: Format, row: &[u8], u: usize, w: &mut [i16; 32]) -> (f32, f32) {
    let units_per_block = format.block_elems() / 32;
    let bb = format.block_bytes();
    let block = &row[(u / units_per_block) * bb..][..bb];
    let sub = u % units_per_block;
    match format {
        Format::Q4_0 => {
            let qs = &block[2..18];
            for j in 0..16 {
                w[j] = (qs[j] & 0xF) as i16 - 8;
                w[j + 16] = (qs[j] >> 4) as i16 - 8;
            }
            (f16_at(block), 0.0)
        }
        Format::Q4_1 => {
            let qs = &block[4..20];
            for j in 0..16 {
                w[j] = (qs[j] & 0xF) as i16;
                w[j + 16] = (qs[j] >> 4) as i16;
            }
            (f16_at(block), f16_at(&block[2..4]))
        }
        Format::Q5_0 | Format::Q5_1 => {
            let (off, hb, sub16) = if format == Format::Q5_0 {
                (2, 2, 16)
            } else {
                (4, 4, 0)
            };
            let qh = u32::from_le_bytes([block[hb], block[hb + 1], block[hb + 2], block[hb + 3]]);
            let qs = &block[off + 4..off + 20];
            for j in 0..16 {
                let h0 = ((qh >> j) & 1) as i16;
                let h1 = ((qh >> (j + 16)) & 1) as i16;
                w[j] = ((qs[j] & 0xF) as i16 | (h0 << 4)) - sub16;
                w[j + 16] = ((qs[j] >> 4) as i16 | (h1 << 4)) - sub16;
            }
            let offset = if format == Format::Q5_1 {
                f16_at(&block[2..4])
            } else {
                0.0
            };
            (f16_at(block), offset)
        }
        Format::Q8_0 => {
            for (wi, &q) in w.iter_mut().zip(&block[2..34]) {
                *wi = q as i8 as i16;
            }
            (f16_at(block), 0.0)
        }
        Format::Q4K => {
            let qs = &block[16 + 32 * (sub / 2)..][..32];
            let shift = 4 * (sub % 2);
            for (wi, &q) in w.iter_mut().zip(qs) {
                *wi = ((q >> shift) & 0xF) as i16;
            }
            k_scale_offset(block, sub)
        }
        Format::Q5K => {
            let qh = &block[16..48];
            let qs = &block[48 + 32 * (sub / 2)..][..32];
            let shift = 4 * (sub % 2);
            for i in 0..32 {
                let lo = ((qs[i] >> shift) & 0xF) as i16;
                let hi = ((qh[i] >> sub) & 1) as i16;
                w[i] = lo | (hi << 4);
            }
            k_scale_offset(block, sub)
        }
        Format::Q6K => {
            // Unit `sub` holds values 32*sub .. 32*sub+32: half h, quarter k of that half.
            let (h, k) = (sub / 4, sub % 4);
            let ql = &block[64 * h + 32 * (k % 2)..][..32];
            let qh = &block[128 + 32 * h..][..32];
            let scales = &block[192..208];
            let shift_l = 4 * (k / 2);
            let shift_h = 2 * k;
            for l in 0..32 {
                let q = (((ql[l] >> shift_l) & 0xF) | (((qh[l] >> shift_h) & 3) << 4)) as i16 - 32;
                let sc = scales[2 * sub + l / 16] as i8 as i16;
                w[l] = q * sc;
            }
            (f16_at(&block[208..210]), 0.0)
        }
    }
}

/// Dequantise one row (`out.len()` values) to f32, as ggml's `dequantize_row_*` do.
pub(crate) fn dequantize_row(format: Format, row: &[u8], out: &mut [f32]) {
    let mut w = [0i16; 32];
    for (u, chunk) in out.chunks_mut(32).enumerate() {
        let (s, o) = decode_unit(format, row, u, &mut w);
        for (y, &q) in chunk.iter_mut().zip(&w) {
            *y = s * q as f32 + o;
        }
    }
}
