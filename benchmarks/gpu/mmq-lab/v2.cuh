// Lab variant of the K-quant tile (kernels/mmq.cu `mmq_tile`), Q4_K: the weights staged through
// shared memory by cp.async with the activations, STAGES super-blocks deep (prefetch distance
// STAGES - 1), two barriers a super-block instead of three, no weight fragments held in registers
// ahead. The per-super-block arithmetic is `tile_super`'s, so every output is bit for bit the
// family's. No split over chunks (Z = 1 only); blockDim (32, WM).
// `tile_super` for Q4_K with one MMA a sub-block and tile (the scale applied to its integer
// result: four integer multiply-adds) instead of two on scale-folded weights: half the MMAs.
template <int NT>
static __device__ __forceinline__ void tile_super_imad(const Q4kFrag &a, const uint8_t *raw,
                                                       const TileMeta *meta, Fold (&f)[NT][4]) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  int sc[2][2], mn[2][2];
#pragma unroll
  for (int r = 0; r < 2; ++r) q4k_scales(a.hdr[r][1], a.hdr[r][2], a.hdr[r][3], sc[r], mn[r]);
  int isum[NT][4];
#pragma unroll
  for (int T = 0; T < NT; ++T)
#pragma unroll
    for (int e = 0; e < 4; ++e) isum[T][e] = 0;
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
#pragma unroll
      for (int T = 0; T < NT; ++T) {
        const int b[2] = {b_word(raw, 8 * T + g, j, t, 0), b_word(raw, 8 * T + g, j, t, 1)};
        int c[4] = {0, 0, 0, 0};
        mma_k32_acc(c, v, b);
        isum[T][0] += s0 * c[0];
        isum[T][1] += s0 * c[1];
        isum[T][2] += s1 * c[2];
        isum[T][3] += s1 * c[3];
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
      f[T][e].add(q4k_term(da[e & 1], as_half2(dm[e >> 1]), isum[T][e], msum));
    }
  }
}

template <int NT, int STAGES, bool IMAD = false>
static __device__ __forceinline__ void lab_tile2(const uint8_t *vx, const uint8_t *vy, float *dst,
                                                 int ncols, int nrows, int stride_y,
                                                 int stride_dst, int n, int cs) {
  constexpr int ROWS = 8 * NT;
  constexpr int WB = 144;  // a Q4_K super-block
  extern __shared__ __align__(16) uint8_t smem[];
  const int WM = blockDim.y;
  const int stage_bytes = ROWS * TILE_RAW + 16 * WM * WB;
  auto raw = [&](int s) { return smem + (s % STAGES) * stage_bytes; };
  auto wsm = [&](int s) { return smem + (s % STAGES) * stage_bytes + ROWS * TILE_RAW; };
  TileMeta *meta = (TileMeta *)(smem + STAGES * stage_bytes);
  const int lane = threadIdx.x, wm = threadIdx.y, g = lane >> 2, t = lane & 3;
  const int tid = lane + 32 * wm, nthreads = 32 * WM;
  const int brow0 = blockIdx.x * WM * 16, row0 = brow0 + wm * 16, tok0 = blockIdx.y * ROWS;
  const int nsb = ncols / 256;
  const int brows = min(16 * WM, nrows - brow0);  // live weight rows of the block (16s)
  auto copy = [&](int s) {
    if (s < nsb) {
      tile_copy(raw(s), vy, s, tok0, ROWS, n, stride_y);
      uint8_t *w = wsm(s);
      for (int i = tid; i < brows * 9; i += nthreads) {
        const int r = i / 9, k = i - r * 9;
        cp_async16(w + r * WB + 16 * k, vx + ((size_t)(brow0 + r) * nsb + s) * WB + 16 * k);
      }
    }
    cp_async_commit();
  };
  pdl_enter();
#pragma unroll
  for (int k = 0; k < STAGES - 1; ++k) copy(k);
  Fold fold[NT][4];
#pragma unroll
  for (int T = 0; T < NT; ++T)
#pragma unroll
    for (int e = 0; e < 4; ++e) fold[T][e].start();
  const bool live = row0 < nrows;
  int in_chunk = 0;
  for (int s = 0; s < nsb; ++s) {
    cp_async_wait<STAGES - 2>();  // super-block s's copies are done
    __syncthreads();              // ... for every thread; every warp is done with s - 1
    copy(s + STAGES - 1);         // into s - 1's buffers
    tile_meta(raw(s), meta, ROWS);
    __syncthreads();
    if (live) {
      const uint8_t *rows[2] = {wsm(s) + (16 * wm + g) * WB, wsm(s) + (16 * wm + g + 8) * WB};
      Q4kFrag cur;
      cur.load(rows, 0, t);
      if (IMAD)
        tile_super_imad<NT>(cur, raw(s), meta, fold);
      else
        tile_super<NT>(cur, raw(s), meta, fold);
    }
    if (++in_chunk == cs || s + 1 == nsb) {
      in_chunk = 0;
#pragma unroll
      for (int T = 0; T < NT; ++T)
#pragma unroll
        for (int e = 0; e < 4; ++e) fold[T][e].end_chunk();
    }
  }
  if (!live) return;
#pragma unroll
  for (int T = 0; T < NT; ++T)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int tok = tok0 + 8 * T + 2 * t + (e & 1);
      if (tok < n) dst[(size_t)tok * stride_dst + row0 + g + 8 * (e >> 1)] = fold[T][e].total;
    }
}

// Shared memory of lab_tile2.
static int lab_tile2_smem(int nt, int stages, int wm) {
  return stages * (8 * nt * TILE_RAW + 16 * wm * 144) + 8 * nt * (int)sizeof(TileMeta);
}

#define LAB_TILE2(NT, STAGES, WM, IMAD, tag)                                                    \
  extern "C" __global__ void __launch_bounds__(32 * WM) tag##_q4_k_t##NT##_s##STAGES##_w##WM(    \
      const void *__restrict__ vx0, const void *__restrict__, const void *__restrict__, int,   \
      int, const void *__restrict__ vy, float *__restrict__ dst, const int ncols,              \
      const int nrows, const int stride_y, const int stride_dst, const int n, const int cs,    \
      float *__restrict__, unsigned int *__restrict__) {                                       \
    lab_tile2<NT, STAGES, IMAD>((const uint8_t *)vx0, (const uint8_t *)vy, dst, ncols, nrows,         \
                          stride_y, stride_dst, n, cs);                                         \
  }
LAB_TILE2(8, 3, 4, false, lab2)
LAB_TILE2(8, 3, 8, false, lab2)
LAB_TILE2(8, 4, 4, false, lab2)
LAB_TILE2(4, 3, 4, false, lab2)
LAB_TILE2(4, 3, 8, false, lab2)
LAB_TILE2(8, 3, 4, true, lab3)
LAB_TILE2(4, 3, 4, true, lab3)
