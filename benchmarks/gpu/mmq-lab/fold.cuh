// Lab variant of the family's Q4_K tile (kernels/mmq.cu `tile_super` for Q4kFrag): each row's
// 6-bit sub-block scale folded into the MMA's A operand, so the tensor cores add the scaled
// sub-blocks and no lane multiplies an MMA's result by a scale.
//
// A scale sc (0..63) is split as 8 hi + lo (hi, lo in 0..7); a 4-bit value q times lo or hi is
// at most 105, so one 32-bit multiply of a word of four nibble bytes by lo (or hi) gives the four
// products without a carry between bytes, and they fit the MMA's int8. Two accumulators a tile:
// `lo` += (q * lo_j) . a_j and `hi` += (q * hi_j) . a_j over the eight sub-blocks j, then
// isum = 8 hi + lo = sum_j sc_j (q . a)_j exactly: the same integers as the family's kernel, so
// the same bits (integer sums are exact in any order: the contract's rule 2).
//
// Per sub-block and tile: two MMAs instead of one MMA and four multiply-adds, and the MMAs
// accumulate (no dependency from an MMA's result to integer work until the super-block's end).

struct Q4kFragFold : Q4kFrag {};

template <int NT>
static __device__ __forceinline__ void tile_super(const Q4kFragFold &a, const uint8_t *raw,
                                                  const TileMeta *meta, Fold (&f)[NT][4]) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  int sc[2][2], mn[2][2];
#pragma unroll
  for (int r = 0; r < 2; ++r) q4k_scales(a.hdr[r][1], a.hdr[r][2], a.hdr[r][3], sc[r], mn[r]);
  int lo[NT][4], hi[NT][4];
#pragma unroll
  for (int T = 0; T < NT; ++T)
#pragma unroll
    for (int e = 0; e < 4; ++e) lo[T][e] = hi[T][e] = 0;
#pragma unroll
  for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * jj + h;
      const int s0 = ubyte(sc[0][j >> 2], j & 3), s1 = ubyte(sc[1][j >> 2], j & 3);
      const int v[4] = {(a.qs[0][jj][0] >> (4 * h)) & 0x0F0F0F0F,
                        (a.qs[1][jj][0] >> (4 * h)) & 0x0F0F0F0F,
                        (a.qs[0][jj][1] >> (4 * h)) & 0x0F0F0F0F,
                        (a.qs[1][jj][1] >> (4 * h)) & 0x0F0F0F0F};
      const int l0 = s0 & 7, h0 = s0 >> 3, l1 = s1 & 7, h1 = s1 >> 3;
      const int al[4] = {v[0] * l0, v[1] * l1, v[2] * l0, v[3] * l1};
      const int ah[4] = {v[0] * h0, v[1] * h1, v[2] * h0, v[3] * h1};
#pragma unroll
      for (int T = 0; T < NT; ++T) {
        const int b[2] = {b_word(raw, 8 * T + g, j, t, 0), b_word(raw, 8 * T + g, j, t, 1)};
        mma_k32_acc(lo[T], al, b);
        mma_k32_acc(hi[T], ah, b);
      }
    }
  }
  const int am[2] = {t < 2 ? (t ? mn[0][1] : mn[0][0]) : 0, t < 2 ? (t ? mn[1][1] : mn[1][0]) : 0};
  const int dm[2] = {a.hdr[0][0], a.hdr[1][0]};
#pragma unroll
  for (int T = 0; T < NT; ++T) {
    const TileMeta &mg = meta[8 * T + g];
    const int blo = t < 2 ? mg.lo[t & 1] : 0, bhi = t < 2 ? mg.hi[t & 1] : 0;
    int ml[4], mh[4];
    mma_k16_uu(ml, am, blo);
    mma_k16_us(mh, am, bhi);
    const float da[2] = {meta[8 * T + 2 * t].d, meta[8 * T + 2 * t + 1].d};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int msum = mh[e] * 256 + ml[e];
      f[T][e].add(q4k_term(da[e & 1], as_half2(dm[e >> 1]), 8 * hi[T][e] + lo[T][e], msum));
    }
  }
}

// The family's tile (grid z splits as the runtime does) with the folded scales.
#define LAB_FOLD_TILE(NT)                                                                      \
  __global__ void __launch_bounds__(256) labf_q4_k_t##NT(                                      \
      const void *vx0, const void *vx1, const void *vx2, int row1, int row2, const void *vy,  \
      float *dst, int ncols, int nrows, int stride_y, int stride_dst, int n, int cs,          \
      float *work, unsigned int *counters) {                                                   \
    mmq_tile<NT, Q4kFragFold, 144>(vx0, vx1, vx2, row1, row2, (const uint8_t *)vy, dst, ncols, \
                                   nrows, stride_y, stride_dst, n, cs, work, counters);        \
  }
LAB_FOLD_TILE(1)
LAB_FOLD_TILE(2)
LAB_FOLD_TILE(4)
LAB_FOLD_TILE(8)

// The meta variant (meta.cuh: sums once a launch, one barrier a super-block) with them too.
LAB_META_TILE(q4_k_fold, Q4kFragFold, 144, 4)
LAB_META_TILE(q4_k_fold, Q4kFragFold, 144, 8)
