// Lab variant of the family's tile (kernels/mmq.cu `mmq_tile`, Z = 1 only) with the activations
// packed: a small kernel (`lab_pack`, timed with the tile) writes each activation row's Q8_1
// values without their 4-byte block headers (256 bytes a super-block) and the rows' sub-block
// sums and d (`TileMeta`, as meta.cuh), so the tile (1) copies 16-byte aligned pieces of values
// only, (2) reads a tile's B fragments of two sub-blocks with one `ldmatrix.x4` (four 32-bit
// shared loads before), and (3) takes one barrier a super-block (meta.cuh). With `FOLD` the Q4_K
// scales are folded into the A operand (fold.cuh). The same integer sums and float terms as the
// family's kernels, so the same bits.

#define PK_ROW 272  // bytes a staged packed row takes (256 + 16: ldmatrix rows in distinct banks)

// Grid ceil(n * nsb / 128), block 128: packed[(r * nsb + s) * 256 + 32 j + i] = value i of Q8_1
// block 8 s + j of activation row r; meta[s * n + r] its super-block's sums (meta.cuh).
__global__ void lab_pack(const uint8_t *__restrict__ vy, uint8_t *__restrict__ packed,
                         TileMeta *__restrict__ meta, int n, int nsb, int stride_y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * nsb) return;
  const int s = i / n, r = i - s * n;
  TileMeta m = {};
  uint8_t *mb = (uint8_t *)&m;
  int4 *to = (int4 *)(packed + ((size_t)r * nsb + s) * 256);
  for (int j = 0; j < 8; ++j) {
    const int *w = (const int *)(vy + ((size_t)r * stride_y + 8 * s + j) * 36);
    int q[8], sum = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      q[k] = w[1 + k];
      sum = __dp4a(q[k], 0x01010101, sum);
    }
    to[2 * j] = make_int4(q[0], q[1], q[2], q[3]);
    to[2 * j + 1] = make_int4(q[4], q[5], q[6], q[7]);
    mb[4 + j] = (uint8_t)(sum & 0xFF);
    mb[12 + j] = (uint8_t)(sum >> 8);
    if (j == 0) m.d = __low2float(*(const half2 *)w);
  }
  meta[(size_t)s * n + r] = m;
}

static __device__ __forceinline__ void ldsm4(int r[4], const uint8_t *p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// Tile T's B fragments of sub-blocks j and j + 1: r[0], r[1] sub-block j's values 4t .. 4t + 3
// and 16 + 4t .. (m16n8k32), r[2], r[3] sub-block j + 1's. Lane l gives the address of row l % 8
// of matrix l / 8 (matrix m: sub-block j + m / 2, half m % 2).
static __device__ __forceinline__ void b_frags(int r[4], const uint8_t *pk, int T, int j) {
  const int lane = threadIdx.x, m = lane >> 3;
  ldsm4(r, pk + (8 * T + (lane & 7)) * PK_ROW + 32 * (j + (m >> 1)) + 16 * (m & 1));
}

template <int NT, bool FOLD>
static __device__ __forceinline__ void pk_super(const Q4kFrag &a, const uint8_t *pk,
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
    int bf[NT][4];
#pragma unroll
    for (int T = 0; T < NT; ++T) b_frags(bf[T], pk, T, 2 * jj);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * jj + h;
      const int s0 = ubyte(sc[0][j >> 2], j & 3), s1 = ubyte(sc[1][j >> 2], j & 3);
      const int v[4] = {(a.qs[0][jj][0] >> (4 * h)) & 0x0F0F0F0F,
                        (a.qs[1][jj][0] >> (4 * h)) & 0x0F0F0F0F,
                        (a.qs[0][jj][1] >> (4 * h)) & 0x0F0F0F0F,
                        (a.qs[1][jj][1] >> (4 * h)) & 0x0F0F0F0F};
      if (FOLD) {
        const int l0 = s0 & 7, h0 = s0 >> 3, l1 = s1 & 7, h1 = s1 >> 3;
        const int al[4] = {v[0] * l0, v[1] * l1, v[2] * l0, v[3] * l1};
        const int ah[4] = {v[0] * h0, v[1] * h1, v[2] * h0, v[3] * h1};
#pragma unroll
        for (int T = 0; T < NT; ++T) {
          const int b[2] = {bf[T][2 * h], bf[T][2 * h + 1]};
          mma_k32_acc(lo[T], al, b);
          mma_k32_acc(hi[T], ah, b);
        }
      } else {
#pragma unroll
        for (int T = 0; T < NT; ++T) {
          const int b[2] = {bf[T][2 * h], bf[T][2 * h + 1]};
          int c[4] = {0, 0, 0, 0};
          mma_k32_acc(c, v, b);
          lo[T][0] += s0 * c[0];
          lo[T][1] += s0 * c[1];
          lo[T][2] += s1 * c[2];
          lo[T][3] += s1 * c[3];
        }
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
      const int isum = FOLD ? 8 * hi[T][e] + lo[T][e] : lo[T][e];
      f[T][e].add(q4k_term(da[e & 1], as_half2(dm[e >> 1]), isum, msum));
    }
  }
}

template <int NT, bool FOLD>
static __device__ __forceinline__ void pk_super(const Q6kFrag &a, const uint8_t *pk,
                                                const TileMeta *meta, Fold (&f)[NT][4]) {
  const int lane = threadIdx.x, t = lane & 3;
  int isum[NT][4];
#pragma unroll
  for (int T = 0; T < NT; ++T)
#pragma unroll
    for (int e = 0; e < 4; ++e) isum[T][e] = 0;
#pragma unroll
  for (int hn = 0; hn < 2; ++hn) {
#pragma unroll
    for (int pp = 0; pp < 2; ++pp) {
      int bf[NT][4];  // sub-blocks 4 hn + 2 pp and + 1, their halves
#pragma unroll
      for (int T = 0; T < NT; ++T) b_frags(bf[T], pk, T, 4 * hn + 2 * pp);
#pragma unroll
      for (int dp = 0; dp < 2; ++dp) {
        const int p = 2 * pp + dp;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int A[2] = {q6k_vals(a.ql[0][hn][hf][p & 1], a.qh[0][hn][hf], p >> 1, 2 * p),
                            q6k_vals(a.ql[1][hn][hf][p & 1], a.qh[1][hn][hf], p >> 1, 2 * p)};
          const int gi = 8 * hn + 2 * p + hf;
          const int s0 = sbyte(a.scw[0][gi >> 2], gi & 3), s1 = sbyte(a.scw[1][gi >> 2], gi & 3);
#pragma unroll
          for (int T = 0; T < NT; ++T) {
            int c[4];
            mma_k16(c, A, bf[T][2 * dp + hf]);
            isum[T][0] += s0 * c[0];
            isum[T][1] += s0 * c[1];
            isum[T][2] += s1 * c[2];
            isum[T][3] += s1 * c[3];
          }
        }
      }
    }
  }
#pragma unroll
  for (int T = 0; T < NT; ++T) {
    const float da[2] = {meta[8 * T + 2 * t].d, meta[8 * T + 2 * t + 1].d};
#pragma unroll
    for (int e = 0; e < 4; ++e) f[T][e].add(q6k_term(da[e & 1], a.d[e >> 1], isum[T][e]));
  }
}

template <int NT, typename Frag, int bytes, bool FOLD>
static __device__ __forceinline__ void lab_tile_pk(const uint8_t *vx, const uint8_t *gpk,
                                                   const TileMeta *gmeta, float *dst, int ncols,
                                                   int nrows, int stride_dst, int n, int cs) {
  constexpr int ROWS = 8 * NT;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x, wm = threadIdx.y, g = lane >> 2, t = lane & 3;
  const int WM = blockDim.y, tid = lane + 32 * wm, nthreads = 32 * WM;
  const int brow0 = blockIdx.x * 16 * WM, row0 = brow0 + 16 * wm, tok0 = blockIdx.y * ROWS;
  const int brows = min(16 * WM, nrows - brow0);
  const bool live = row0 < nrows;
  const int nsb = ncols / 256;
  const int stage_bytes = ROWS * PK_ROW + 16 * WM * Frag::SLOT + ROWS * (int)sizeof(TileMeta);
  auto pks = [&](int s) { return smem + (s % TILE_STAGES) * stage_bytes; };
  auto wsm = [&](int s) { return pks(s) + ROWS * PK_ROW; };
  auto msm = [&](int s) { return (TileMeta *)(wsm(s) + 16 * WM * Frag::SLOT); };
  auto copy = [&](int s) {
    if (s < nsb) {
      uint8_t *w = wsm(s);
      constexpr int PER = Frag::SLOT / 16;
      for (int i = tid; i < brows * PER; i += nthreads) {
        const int r = i / PER, k = i - r * PER;
        const uint8_t *row = vx + (size_t)(brow0 + r) * nsb * bytes;
        Frag::stage(w + r * Frag::SLOT, row + (size_t)s * bytes, row + (size_t)nsb * bytes, k);
      }
      uint8_t *p = pks(s);
      for (int i = tid; i < ROWS * 16; i += nthreads) {
        const int r = i >> 4, k = i & 15;
        if (tok0 + r < n)
          cp_async16(p + r * PK_ROW + 16 * k, gpk + ((size_t)(tok0 + r) * nsb + s) * 256 + 16 * k);
        else
          *(int4 *)(p + r * PK_ROW + 16 * k) = make_int4(0, 0, 0, 0);
      }
      uint8_t *m = (uint8_t *)msm(s);
      for (int i = tid; i < ROWS * 2; i += nthreads) {
        const int r = i >> 1, k = i & 1;
        if (tok0 + r < n)
          cp_async16(m + 32 * r + 16 * k,
                     (const uint8_t *)(gmeta + (size_t)s * n + tok0 + r) + 16 * k);
        else
          *(int4 *)(m + 32 * r + 16 * k) = make_int4(0, 0, 0, 0);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int k = 0; k < TILE_STAGES - 1; ++k) copy(k);
  Fold fold[NT][4];
#pragma unroll
  for (int T = 0; T < NT; ++T)
#pragma unroll
    for (int e = 0; e < 4; ++e) fold[T][e].start();
  int in_chunk = 0;
  for (int s = 0; s < nsb; ++s) {
    cp_async_wait<TILE_STAGES - 2>();
    __syncthreads();  // s's copies visible; every warp done with s - 1
    copy(s + TILE_STAGES - 1);
    if (live) {
      const uint8_t *w = wsm(s) + (16 * wm + g) * Frag::SLOT;
      const uint8_t *src = vx + ((size_t)(row0 + g) * nsb + s) * bytes;
      const uint8_t *src8 = vx + ((size_t)(row0 + g + 8) * nsb + s) * bytes;
      const uint8_t *rows[2] = {w + Frag::offset(src), w + 8 * Frag::SLOT + Frag::offset(src8)};
      Frag cur;
      cur.load(rows, t);
      pk_super<NT, FOLD>(cur, pks(s), msm(s), fold);
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

typedef void (*PkFn)(const uint8_t *, const uint8_t *, const TileMeta *, float *, int, int, int,
                     int, int);

#define LAB_PK_TILE(name, Frag, bytes, NT, FOLD)                                                 \
  __global__ void __launch_bounds__(256) labp_##name##_t##NT(                                    \
      const uint8_t *vx, const uint8_t *pk, const TileMeta *meta, float *dst, int ncols,       \
      int nrows, int stride_dst, int n, int cs) {                                              \
    lab_tile_pk<NT, Frag, bytes, FOLD>(vx, pk, meta, dst, ncols, nrows, stride_dst, n, cs);     \
  }
LAB_PK_TILE(q4_k, Q4kFrag, 144, 4, false)
LAB_PK_TILE(q4_k, Q4kFrag, 144, 8, false)
LAB_PK_TILE(q4_k_fold, Q4kFrag, 144, 4, true)
LAB_PK_TILE(q4_k_fold, Q4kFrag, 144, 8, true)
LAB_PK_TILE(q6_k, Q6kFrag, 210, 4, false)
LAB_PK_TILE(q6_k, Q6kFrag, 210, 8, false)
