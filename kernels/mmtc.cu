// Tensor-core products of GGUF Q4_K / Q6_K weight matrices with Q8_1 activation rows: one kernel
// for every row count, from the one-row decoding step to a 64-row verify pass (more rows: more
// blocks along the grid's y), whose cost stays nearly flat with the row count.
//
// Batch invariance (a row's result never depends on how many rows the launch holds) by
// construction: integer sums are exact, so the int8 `mma.sync` sums of a 32-value (Q4_K) or
// 16-value (Q6_K) group are the same whichever lane or tile computes them; each (row, weight
// row) pair then accumulates its groups' float terms in one fixed order (warp w of a block of W
// warps takes the 64-value units w, w + W, ... of the row, each unit's groups in order), with
// explicit round-to-nearest operations so that the compiler contracts nothing differently in
// the instantiations for one, two or four 16-row tiles; and the W warps' partials are summed in
// warp order. W depends only on the row length. So `mmtc_<type>_t1` (up to 16 rows) computes a
// row exactly as `mmtc_<type>_t4` (up to 64) does, and the one-row decoding step uses the same
// kernel.
//
// Layouts (ggml): block_q8_1 {half d, half sum; int8 qs[32]} (36 bytes), block_q4_K {half d,
// half dmin; u8 scales[12]; u8 qs[128]} (144 bytes), block_q6_K {u8 ql[128]; u8 qh[64]; i8
// scales[16]; half d} (210 bytes). The MMA fragments are PTX's for m16n8k32 / m16n8k16 with s8
// operands: the activation rows are the 16-row A operand, eight weight rows the B operand.
// CPU reference: treespec's quantised kernels (src/quant) through `treespec selftest`.
#include <cuda_fp16.h>
#include <stdint.h>

#define FULL_MASK 0xffffffffu

static __device__ __forceinline__ void mma_k32(int c[4], const int a[4], const int b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
}

static __device__ __forceinline__ void mma_k16(int c[4], const int a[2], const int b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%7,%7,%7,%7};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(b), "r"(0));
}

// A 32-bit word at a 2-byte-aligned address (Q6_K blocks are 210 bytes).
static __device__ __forceinline__ int load_int_a2(const uint8_t *p) {
  const uint16_t *p16 = (const uint16_t *)p;
  return (int)((uint32_t)p16[0] | ((uint32_t)p16[1] << 16));
}

// One Q8_1 block's words t and 4 + t and its (d, sum), or zeros past the live rows.
struct ActBlock {
  int lo, hi;
  float d, s;
};

static __device__ __forceinline__ ActBlock act_block(const uint8_t *y, bool live, int t) {
  ActBlock a = {0, 0, 0.0f, 0.0f};
  if (live) {
    const float2 ds = __half22float2(*(const half2 *)y);
    const int *qs = (const int *)(y + 4);
    a.lo = qs[t];
    a.hi = qs[4 + t];
    a.d = ds.x;
    a.s = ds.y;
  }
  return a;
}

// Sum the W warps' partials in warp order and store the live rows. `red` holds
// [W][16 * NT][8] floats.
template <int NT>
static __device__ __forceinline__ void store_rows(float acc[NT][4], float *red, float *dst,
                                                  int row0, int tok0, int n, int stride_dst) {
  const int lane = threadIdx.x, w = threadIdx.y, W = blockDim.y;
  const int g = lane >> 2, t = lane & 3;
  constexpr int TOKS = 16 * NT;
#pragma unroll
  for (int T = 0; T < NT; ++T) {
    float *r = red + ((size_t)w * TOKS + 16 * T) * 8;
    r[g * 8 + 2 * t] = acc[T][0];
    r[g * 8 + 2 * t + 1] = acc[T][1];
    r[(g + 8) * 8 + 2 * t] = acc[T][2];
    r[(g + 8) * 8 + 2 * t + 1] = acc[T][3];
  }
  __syncthreads();
  for (int i = w * 32 + lane; i < TOKS * 8; i += W * 32) {
    const int tok = i >> 3, col = i & 7;
    float s = red[i];
    for (int ww = 1; ww < W; ++ww) s = __fadd_rn(s, red[(size_t)ww * TOKS * 8 + i]);
    if (tok0 + tok < n) dst[(size_t)(tok0 + tok) * stride_dst + row0 + col] = s;
  }
}

// Q4_K: a unit is a pair of 32-value sub-blocks (2j, 2j + 1) of a super-block, stored as the low
// and high nibbles of the same 32 bytes. Per sub-block s of weight row r and activation row c:
// term = (d_r * sc_rs) * (d8_cs * isum) - (dmin_r * m_rs) * sum8_cs.
template <int NT>
static __device__ void mmtc_q4_k(const uint8_t *__restrict__ vx, const uint8_t *__restrict__ vy,
                                 float *__restrict__ dst, int ncols_x, int stride_col_y,
                                 int stride_col_dst, int n) {
  extern __shared__ float red[];
  const int lane = threadIdx.x, w = threadIdx.y, W = blockDim.y;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * 8;
  const int tok0 = blockIdx.y * 16 * NT;
  const int nsb = ncols_x / 256;
  const int units = nsb * 4;
  const uint8_t *wrow = vx + (size_t)(row0 + g) * nsb * 144;
  float acc[NT][4];
#pragma unroll
  for (int T = 0; T < NT; ++T) acc[T][0] = acc[T][1] = acc[T][2] = acc[T][3] = 0.0f;

  for (int u = w; u < units; u += W) {
    const int sb = u >> 2, j = u & 3;
    const uint8_t *blk = wrow + (size_t)sb * 144;
    const int *qs = (const int *)(blk + 16);
    const int w0 = qs[8 * j + t], w1 = qs[8 * j + 4 + t];
    const int b_lo[2] = {w0 & 0x0F0F0F0F, w1 & 0x0F0F0F0F};
    const int b_hi[2] = {(w0 >> 4) & 0x0F0F0F0F, (w1 >> 4) & 0x0F0F0F0F};
    // This lane's weight row g: scales and mins of sub-blocks 2j and 2j + 1 (ggml's
    // get_scale_min_k4), then rows 2t and 2t + 1 (the C fragment's columns) from their lanes.
    const float2 dm = __half22float2(*(const half2 *)blk);
    const uint8_t *sc = blk + 4;
    float dl[2], ml[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int is = 2 * j + h;
      int s, m;
      if (is < 4) {
        s = sc[is] & 63;
        m = sc[is + 4] & 63;
      } else {
        s = (sc[is + 4] & 0xF) | ((sc[is - 4] >> 6) << 4);
        m = (sc[is + 4] >> 4) | ((sc[is] >> 6) << 4);
      }
      dl[h] = __fmul_rn(dm.x, (float)s);
      ml[h] = __fmul_rn(dm.y, (float)m);
    }
    float rdl[2][2], rml[2][2];  // [column 2t + i][sub-block h]
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        rdl[i][h] = __shfl_sync(FULL_MASK, dl[h], 8 * t + 4 * i);
        rml[i][h] = __shfl_sync(FULL_MASK, ml[h], 8 * t + 4 * i);
      }
    }
    const int kb = sb * 8 + 2 * j;  // the Q8_1 block of sub-block 2j
#pragma unroll
    for (int T = 0; T < NT; ++T) {
      const int ta = tok0 + 16 * T + g, tb = ta + 8;
      const uint8_t *ya = vy + ((size_t)ta * stride_col_y + kb) * 36;
      const uint8_t *yb = vy + ((size_t)tb * stride_col_y + kb) * 36;
      ActBlock a[2][2];  // [row a/b][sub-block]
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        a[0][h] = act_block(ya + 36 * h, ta < n, t);
        a[1][h] = act_block(yb + 36 * h, tb < n, t);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int af[4] = {a[0][h].lo, a[1][h].lo, a[0][h].hi, a[1][h].hi};
        int c[4];
        mma_k32(c, af, h == 0 ? b_lo : b_hi);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const ActBlock &ab = a[e >> 1][h];
          const int col = e & 1;
          const float v = __fmul_rn(ab.d, (float)c[e]);
          const float term = __fsub_rn(__fmul_rn(rdl[col][h], v), __fmul_rn(rml[col][h], ab.s));
          acc[T][e] = __fadd_rn(acc[T][e], term);
        }
      }
    }
  }
  store_rows<NT>(acc, red, dst, row0, tok0, n, stride_col_dst);
}

// Q6_K: a unit is 64 values: for half h and 16-value lane half l, the four parts p of the
// super-block (values 128h + 32p + 16l + 0..15), which share their `ql` and `qh` bytes. Each
// part is a 16-value group with its own scale: term = (d_r * sc_rg) * (d8_cs * isum), values
// q - 32.
template <int NT>
static __device__ void mmtc_q6_k(const uint8_t *__restrict__ vx, const uint8_t *__restrict__ vy,
                                 float *__restrict__ dst, int ncols_x, int stride_col_y,
                                 int stride_col_dst, int n) {
  extern __shared__ float red[];
  const int lane = threadIdx.x, w = threadIdx.y, W = blockDim.y;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * 8;
  const int tok0 = blockIdx.y * 16 * NT;
  const int nsb = ncols_x / 256;
  const int units = nsb * 4;
  const uint8_t *wrow = vx + (size_t)(row0 + g) * nsb * 210;
  float acc[NT][4];
#pragma unroll
  for (int T = 0; T < NT; ++T) acc[T][0] = acc[T][1] = acc[T][2] = acc[T][3] = 0.0f;

  for (int u = w; u < units; u += W) {
    const int sb = u >> 2, hh = (u >> 1) & 1, l = u & 1;
    const uint8_t *blk = wrow + (size_t)sb * 210;
    const int ql0 = load_int_a2(blk + 64 * hh + 16 * l + 4 * t);
    const int ql1 = load_int_a2(blk + 64 * hh + 32 + 16 * l + 4 * t);
    const int qh = load_int_a2(blk + 128 + 32 * hh + 16 * l + 4 * t);
    const float d = __half2float(*(const half *)(blk + 208));
    int b[4];
    float dsc[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const int lo = ((p & 1) ? ql1 : ql0) >> (4 * (p >> 1));
      const int v = (lo & 0x0F0F0F0F) | (((qh >> (2 * p)) & 0x03030303) << 4);
      b[p] = __vsubss4(v, 0x20202020);
      const int8_t s = (int8_t)blk[192 + 8 * hh + 2 * p + l];
      dsc[p] = __fmul_rn(d, (float)s);
    }
    float rdsc[2][4];  // [column 2t + i][part]
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int p = 0; p < 4; ++p) rdsc[i][p] = __shfl_sync(FULL_MASK, dsc[p], 8 * t + 4 * i);
    }
#pragma unroll
    for (int T = 0; T < NT; ++T) {
      const int ta = tok0 + 16 * T + g, tb = ta + 8;
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const int kb = sb * 8 + 4 * hh + p;
        const uint8_t *ya = vy + ((size_t)ta * stride_col_y + kb) * 36;
        const uint8_t *yb = vy + ((size_t)tb * stride_col_y + kb) * 36;
        float da = 0.0f, db = 0.0f;
        int af[2] = {0, 0};
        if (ta < n) {
          da = __low2float(*(const half2 *)ya);
          af[0] = ((const int *)(ya + 4))[4 * l + t];
        }
        if (tb < n) {
          db = __low2float(*(const half2 *)yb);
          af[1] = ((const int *)(yb + 4))[4 * l + t];
        }
        int c[4];
        mma_k16(c, af, b[p]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float v = __fmul_rn(e < 2 ? da : db, (float)c[e]);
          acc[T][e] = __fadd_rn(acc[T][e], __fmul_rn(rdsc[e & 1][p], v));
        }
      }
    }
  }
  store_rows<NT>(acc, red, dst, row0, tok0, n, stride_col_dst);
}

// Entry points: grid (rows / 8, ceil(n / (16 * NT))), block (32, W), dynamic shared memory W *
// NT * 16 * 8 floats. dst[c * stride_col_dst + r] = W[r] . y[c] for the n activation rows c.
#define TREESPEC_MMTC(tag, NT)                                                                 \
  extern "C" __global__ void mmtc_##tag##_t##NT(                                               \
      const void *__restrict__ vx, const void *__restrict__ vy, float *__restrict__ dst,       \
      const int ncols_x, const int stride_col_y, const int stride_col_dst, const int n) {      \
    mmtc_##tag<NT>((const uint8_t *)vx, (const uint8_t *)vy, dst, ncols_x, stride_col_y,       \
                   stride_col_dst, n);                                                         \
  }

TREESPEC_MMTC(q4_k, 1)
TREESPEC_MMTC(q4_k, 2)
TREESPEC_MMTC(q4_k, 4)
TREESPEC_MMTC(q6_k, 1)
TREESPEC_MMTC(q6_k, 2)
TREESPEC_MMTC(q6_k, 4)
