// Lab variant of the family's tile (kernels/mmq.cu `mmq_tile`, Z = 1 only): each activation
// row's sub-block sums and d (`TileMeta`) made once a launch by `lab_meta` (not once a block and
// super-block), copied into shared memory with the weights and activations, so a super-block
// needs one barrier instead of two. The same integer sums, so the same bits.

// Grid ceil(n * nsb / 128), block 128: meta[s * n + r] for activation row r, super-block s.
__global__ void lab_meta(const uint8_t *__restrict__ vy, TileMeta *__restrict__ meta, int n,
                         int nsb, int stride_y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * nsb) return;
  const int s = i / n, r = i - s * n;
  TileMeta m = {};
  uint8_t *mb = (uint8_t *)&m;
  for (int j = 0; j < 8; ++j) {
    const int *w = (const int *)(vy + ((size_t)r * stride_y + 8 * s + j) * 36);
    int sum = 0;
#pragma unroll
    for (int k = 1; k < 9; ++k) sum = __dp4a(w[k], 0x01010101, sum);
    mb[4 + j] = (uint8_t)(sum & 0xFF);
    mb[12 + j] = (uint8_t)(sum >> 8);
    if (j == 0) m.d = __low2float(*(const half2 *)w);
  }
  meta[(size_t)s * n + r] = m;
}

template <int NT, typename Frag, int bytes>
static __device__ __forceinline__ void lab_tile_meta(const uint8_t *vx, const uint8_t *vy,
                                                     const TileMeta *gmeta, float *dst, int ncols,
                                                     int nrows, int stride_y, int stride_dst,
                                                     int n, int cs) {
  constexpr int ROWS = 8 * NT;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x, wm = threadIdx.y, g = lane >> 2, t = lane & 3;
  const int WM = blockDim.y, tid = lane + 32 * wm, nthreads = 32 * WM;
  const int brow0 = blockIdx.x * 16 * WM, row0 = brow0 + 16 * wm, tok0 = blockIdx.y * ROWS;
  const int brows = min(16 * WM, nrows - brow0);
  const bool live = row0 < nrows;
  const int nsb = ncols / 256;
  const int stage_bytes = ROWS * TILE_RAW + 16 * WM * Frag::SLOT + ROWS * (int)sizeof(TileMeta);
  auto raw = [&](int s) { return smem + (s % TILE_STAGES) * stage_bytes; };
  auto wsm = [&](int s) { return raw(s) + ROWS * TILE_RAW; };
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
      tile_copy(raw(s), vy, s, tok0, ROWS, n, stride_y);
      uint8_t *m = (uint8_t *)msm(s);
      for (int i = tid; i < ROWS * 2; i += nthreads) {
        const int r = i >> 1, k = i & 1;
        if (tok0 + r < n)
          cp_async16(m + 32 * r + 16 * k, (const uint8_t *)(gmeta + (size_t)s * n + tok0 + r) + 16 * k);
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
      tile_super<NT>(cur, raw(s), msm(s), fold);
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

#define LAB_META_TILE(tag, Frag, bytes, NT)                                                     \
  __global__ void __launch_bounds__(256) labm_##tag##_t##NT(                                    \
      const uint8_t *vx, const uint8_t *vy, const TileMeta *meta, float *dst, int ncols,      \
      int nrows, int stride_y, int stride_dst, int n, int cs) {                                \
    lab_tile_meta<NT, Frag, bytes>(vx, vy, meta, dst, ncols, nrows, stride_y, stride_dst, n, cs); \
  }
LAB_META_TILE(q4_k, Q4kFrag, 144, 4)
LAB_META_TILE(q4_k, Q4kFrag, 144, 8)
LAB_META_TILE(q6_k, Q6kFrag, 210, 4)
LAB_META_TILE(q6_k, Q6kFrag, 210, 8)
