// Tensor-core products of GGUF Q4_K / Q6_K weight matrices with Q8_1 activation rows: one kernel
// for every row count of a verify pass, up to 64 rows (more rows: more blocks along the grid's
// y), whose cost stays nearly flat with the row count; and a one-row kernel on dp4a for the
// decoding step that computes a row bit for bit as they do.
//
// Batch invariance (a row's result never depends on how many rows the launch holds) by
// construction: integer sums are exact, so the int8 `mma.sync` sums of a 32-value (Q4_K) or
// 16-value (Q6_K) group are the same whichever lane or tile computes them; each (row, weight
// row) pair then accumulates its groups' float terms in one fixed order (warp w of a block of W
// warps takes the 64-value units w, w + W, ... of the row, each unit's groups in order), with
// explicit round-to-nearest operations so that the compiler contracts nothing differently in
// the instantiations for one to eight 8-row tiles; and the W warps' partials are summed in warp
// order. W depends only on the row length. So `mmtc_<type>_t1` (up to 8 rows) computes a row
// exactly as `mmtc_<type>_t8` (up to 64) does, and `mmtc_<type>_row` and, for rows of 4096 values
// or more, `mmtc_<type>_warp<UW>` (one row, no tensor cores: an MMA over one activation row wastes
// seven eighths of it) follow the same order.
//
// Layouts (ggml): block_q8_1 {half d, half sum; int8 qs[32]} (36 bytes), block_q4_K {half d,
// half dmin; u8 scales[12]; u8 qs[128]} (144 bytes), block_q6_K {u8 ql[128]; u8 qh[64]; i8
// scales[16]; half d} (210 bytes). The MMA fragments are PTX's for m16n8k32 / m16n8k16 with s8
// operands: sixteen weight rows are the A operand (so a lane's C rows are the weight rows whose
// scales it reads), eight activation rows the B operand.
// CPU reference: treespec's quantised kernels (src/quant) through `treespec selftest`.
// The Q4_K min term takes the exact integer sum of each activation block, as the dp4a kernel
// does (it took the block's stored half-precision sum until 2026-12-01, which put the logits
// twice as far from the CPU's; BENCHMARKS.md sections 15-16).
#include <cuda_fp16.h>
#include <stdint.h>

#include "pdl.cuh"
#include "stacked.cuh"

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

// Units (64 values of a row) a warp loads before it computes on them.
#define UNITS 4
// Warps a block spreads a row over at most (`mmtc_warps` in src/gpu/products.rs).
#define MAX_WARPS 16

// A 32-bit word at a 2-byte-aligned address (Q6_K blocks are 210 bytes).
static __device__ __forceinline__ int load_int_a2(const uint8_t *p) {
  const uint16_t *p16 = (const uint16_t *)p;
  return (int)((uint32_t)p16[0] | ((uint32_t)p16[1] << 16));
}

// The float rules both kernels of this file share, so that the one-row kernel below rounds
// exactly as the tile kernels do (each operation rounded as written, nothing contracted).

// Row r's (d * scale, dmin * min) of Q4_K sub-blocks 2j and 2j + 1 (j 0..3): ggml's
// get_scale_min_k4 for both at once, on 16-bit lanes of the scale words (llama.cpp's mmvq
// unpacks them so), branch-free.
static __device__ __forceinline__ void q4k_scale_min_pair(const int sc[3], half2 dmh, int j,
                                                          float dl[2], float ml[2]) {
  const float2 dm = __half22float2(dmh);
  const int sh = 16 * (j & 1);
  const uint32_t a = (uint32_t)sc[0] >> sh, b = (uint32_t)sc[1] >> sh, c = (uint32_t)sc[2] >> sh;
  // Sub-blocks 0-3: 6-bit scales in bytes 0-3, mins in 4-7; 4-7: low nibbles of bytes 8-11
  // with the top two bits of bytes 0-3 (scales) and 4-7 (mins).
  const uint32_t s2 = j < 2 ? a & 0x3F3F : (c & 0x0F0F) | ((a & 0xC0C0) >> 2);
  const uint32_t m2 = j < 2 ? b & 0x3F3F : ((c >> 4) & 0x0F0F) | ((b & 0xC0C0) >> 2);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    dl[h] = __fmul_rn(dm.x, (float)((s2 >> (8 * h)) & 0xFF));
    ml[h] = __fmul_rn(dm.y, (float)((m2 >> (8 * h)) & 0xFF));
  }
}

// A Q4_K sub-block's term: (d_r * sc) * (d8 * isum) - (dmin_r * m) * (d8 * sum8).
static __device__ __forceinline__ float q4k_term(float dl, float ml, float d8, int isum,
                                                 int sum8) {
  const float v = __fmul_rn(d8, (float)isum);
  const float m = __fmul_rn(d8, (float)sum8);
  return __fsub_rn(__fmul_rn(dl, v), __fmul_rn(ml, m));
}

// Q6_K: group scale `byte` (0..7) of the eight loaded as two words, times d.
static __device__ __forceinline__ float q6k_scale(const int scw[2], float d, int byte) {
  const int8_t s = (int8_t)((scw[byte >> 2] >> (8 * (byte & 3))) & 0xFF);
  return __fmul_rn(d, (float)s);
}

// Q6_K part p's four values (bytes of one word) from the `ql` words and the `qh` word, minus 32.
static __device__ __forceinline__ int q6k_values(int ql0, int ql1, int qh, int p) {
  const int lo = ((p & 1) ? ql1 : ql0) >> (4 * (p >> 1));
  const int v = (lo & 0x0F0F0F0F) | (((qh >> (2 * p)) & 0x03030303) << 4);
  return __vsubss4(v, 0x20202020);
}

// A Q6_K group's term: (d_r * sc) * (d8 * isum).
static __device__ __forceinline__ float q6k_term(float dsc, float d8, int isum) {
  return __fmul_rn(dsc, __fmul_rn(d8, (float)isum));
}

// Sum the W warps' partials in warp order and store the live activation rows. `red` holds
// [W][8 * NT activation rows][16 weight rows] floats; acc[T] is the C fragment of tile T:
// (weight row g, activation row 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
template <int NT>
static __device__ __forceinline__ void store_rows(float acc[NT][4], float *red, float *dst,
                                                  int row0, int tok0, int n, int stride_dst) {
  const int lane = threadIdx.x, w = threadIdx.y, W = blockDim.y;
  const int g = lane >> 2, t = lane & 3;
  constexpr int TOKS = 8 * NT;
#pragma unroll
  for (int T = 0; T < NT; ++T) {
    float *r = red + ((size_t)w * TOKS + 8 * T) * 16;
    r[(2 * t) * 16 + g] = acc[T][0];
    r[(2 * t + 1) * 16 + g] = acc[T][1];
    r[(2 * t) * 16 + g + 8] = acc[T][2];
    r[(2 * t + 1) * 16 + g + 8] = acc[T][3];
  }
  __syncthreads();
  for (int i = w * 32 + lane; i < TOKS * 16; i += W * 32) {
    const int tok = i >> 4, col = i & 15;
    float s = red[i];
    for (int ww = 1; ww < W; ++ww) s = __fadd_rn(s, red[(size_t)ww * TOKS * 16 + i]);
    if (tok0 + tok < n) dst[(size_t)(tok0 + tok) * stride_dst + row0 + col] = s;
  }
}

// A Q8_1 block's (d, sum), or zeros past the live rows.
static __device__ __forceinline__ half2 act_ds(const uint8_t *y, bool live) {
  return live ? *(const half2 *)y : __floats2half2_rn(0.0f, 0.0f);
}

static __device__ __forceinline__ half2 shfl_half2(half2 v, int lane) {
  const unsigned int bits = __shfl_sync(FULL_MASK, *(const unsigned int *)&v, lane);
  return *(const half2 *)&bits;
}

// A Q8_1 block's word i, or zero past the live rows.
static __device__ __forceinline__ int act_word(const uint8_t *y, bool live, int i) {
  return live ? ((const int *)(y + 4))[i] : 0;
}

// Q4_K: a unit is a pair of 32-value sub-blocks (2j, 2j + 1) of a super-block, stored as the low
// and high nibbles of the same 32 bytes. Per sub-block s of weight row r and activation row c:
// term = (d_r * sc_rs) * (d8_cs * isum) - (dmin_r * m_rs) * sum8_cs.
template <int NT>
static __device__ void mmtc_q4_k(const uint8_t *__restrict__ vx, int wrow0,
                                 const uint8_t *__restrict__ vy, float *__restrict__ dst,
                                 int ncols_x, int stride_col_y, int stride_col_dst, int n) {
  extern __shared__ float red[];
  const int lane = threadIdx.x, w = threadIdx.y, W = blockDim.y;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * 16;
  const int tok0 = blockIdx.y * 8 * NT;
  const int nsb = ncols_x / 256;
  const int units = nsb * 4;
  const uint8_t *rows[2] = {vx + (size_t)(row0 - wrow0 + g) * nsb * 144,
                            vx + (size_t)(row0 - wrow0 + g + 8) * nsb * 144};
  float acc[NT][4];
#pragma unroll
  for (int T = 0; T < NT; ++T) acc[T][0] = acc[T][1] = acc[T][2] = acc[T][3] = 0.0f;

  // Units in batches of UNITS: every weight load of a batch is issued before any of its
  // arithmetic (one memory latency a batch, not one a unit); the units still accumulate in order.
  for (int u0 = w; u0 < units; u0 += UNITS * W) {
    int wq[UNITS][2][2], sc[UNITS][2][3];
    half2 dmh[UNITS][2];
    // With one tile, the activations of the batch are loaded with its weights too.
    int bw[UNITS][2][2];
    half2 bds[UNITS][2];
#pragma unroll
    for (int i = 0; i < UNITS; ++i) {
      const int u = u0 + i * W;
      if (u < units) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int *words = (const int *)(rows[r] + (size_t)(u >> 2) * 144);
          dmh[i][r] = *(const half2 *)words;  // dm, scales[12], qs[128]
          sc[i][r][0] = words[1];
          sc[i][r][1] = words[2];
          sc[i][r][2] = words[3];
          wq[i][r][0] = words[4 + 8 * (u & 3) + t];
          wq[i][r][1] = words[4 + 8 * (u & 3) + 4 + t];
        }
        if constexpr (NT == 1) {
          const int tg = tok0 + g;
          const uint8_t *yg = vy + ((size_t)tg * stride_col_y + (u >> 2) * 8 + 2 * (u & 3)) * 36;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            bw[i][h][0] = act_word(yg + 36 * h, tg < n, t);
            bw[i][h][1] = act_word(yg + 36 * h, tg < n, 4 + t);
            bds[i][h] = act_ds(yg + 36 * h, tg < n);
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < UNITS; ++i) {
      const int u = u0 + i * W;
      if (u >= units) break;
      const int sb = u >> 2, j = u & 3;
      // A fragments: rows g and g + 8, values 4t.. and 16 + 4t.. of each sub-block.
      const int a_lo[4] = {wq[i][0][0] & 0x0F0F0F0F, wq[i][1][0] & 0x0F0F0F0F,
                           wq[i][0][1] & 0x0F0F0F0F, wq[i][1][1] & 0x0F0F0F0F};
      const int a_hi[4] = {(wq[i][0][0] >> 4) & 0x0F0F0F0F, (wq[i][1][0] >> 4) & 0x0F0F0F0F,
                           (wq[i][0][1] >> 4) & 0x0F0F0F0F, (wq[i][1][1] >> 4) & 0x0F0F0F0F};
      // Scales and mins of rows g, g + 8 for sub-blocks 2j, 2j + 1 (ggml's get_scale_min_k4).
      float dl[2][2], ml[2][2];  // [row g / g + 8][sub-block]
#pragma unroll
      for (int r = 0; r < 2; ++r) q4k_scale_min_pair(sc[i][r], dmh[i][r], j, dl[r], ml[r]);
      const int kb = sb * 8 + 2 * j;  // the Q8_1 block of sub-block 2j
#pragma unroll
      for (int T = 0; T < NT; ++T) {
        const int tg = tok0 + 8 * T + g;  // this lane's B column; its C columns are 2t, 2t + 1
        const uint8_t *yg = vy + ((size_t)tg * stride_col_y + kb) * 36;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          int b[2];
          half2 dsg;
          if constexpr (NT == 1) {
            b[0] = bw[i][h][0];
            b[1] = bw[i][h][1];
            dsg = bds[i][h];
          } else {
            b[0] = act_word(yg + 36 * h, tg < n, t);
            b[1] = act_word(yg + 36 * h, tg < n, 4 + t);
            dsg = act_ds(yg + 36 * h, tg < n);
          }
          // The exact sum of column g's 32 int8 activations (for the min term, as the dp4a
          // kernel takes it; the block's stored half sum of floats is ~1e-3 off): this lane's 8,
          // then the four lanes of the column.
          int s8 = __dp4a(b[0], 0x01010101, __dp4a(b[1], 0x01010101, 0));
          s8 += __shfl_xor_sync(FULL_MASK, s8, 1);
          s8 += __shfl_xor_sync(FULL_MASK, s8, 2);
          // d and that sum of activation rows 2t and 2t + 1, from the lanes whose B column they are.
          const float d8[2] = {__low2float(shfl_half2(dsg, 8 * t)),
                               __low2float(shfl_half2(dsg, 8 * t + 4))};
          const int sum8[2] = {__shfl_sync(FULL_MASK, s8, 8 * t),
                               __shfl_sync(FULL_MASK, s8, 8 * t + 4)};
          int c[4];
          mma_k32(c, h == 0 ? a_lo : a_hi, b);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = e >> 1;
            const float term = q4k_term(dl[r][h], ml[r][h], d8[e & 1], c[e], sum8[e & 1]);
            acc[T][e] = __fadd_rn(acc[T][e], term);
          }
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
static __device__ void mmtc_q6_k(const uint8_t *__restrict__ vx, int wrow0,
                                 const uint8_t *__restrict__ vy, float *__restrict__ dst,
                                 int ncols_x, int stride_col_y, int stride_col_dst, int n) {
  extern __shared__ float red[];
  const int lane = threadIdx.x, w = threadIdx.y, W = blockDim.y;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * 16;
  const int tok0 = blockIdx.y * 8 * NT;
  const int nsb = ncols_x / 256;
  const int units = nsb * 4;
  const uint8_t *rows[2] = {vx + (size_t)(row0 - wrow0 + g) * nsb * 210,
                            vx + (size_t)(row0 - wrow0 + g + 8) * nsb * 210};
  float acc[NT][4];
#pragma unroll
  for (int T = 0; T < NT; ++T) acc[T][0] = acc[T][1] = acc[T][2] = acc[T][3] = 0.0f;

  for (int u0 = w; u0 < units; u0 += UNITS * W) {
    int ql0[UNITS][2], ql1[UNITS][2], qhw[UNITS][2], scw[UNITS][2][2];
    uint16_t dh[UNITS][2];
    // With one tile, the activations of the batch are loaded with its weights too.
    int bw[UNITS][4];
    half2 bds[UNITS][2];  // (d of part 0, d of part 1), (d of part 2, d of part 3)
#pragma unroll
    for (int i = 0; i < UNITS; ++i) {
      const int u = u0 + i * W;
      if (u < units) {
        const int hh = (u >> 1) & 1, l = u & 1;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint8_t *blk = rows[r] + (size_t)(u >> 2) * 210;
          ql0[i][r] = load_int_a2(blk + 64 * hh + 16 * l + 4 * t);
          ql1[i][r] = load_int_a2(blk + 64 * hh + 32 + 16 * l + 4 * t);
          qhw[i][r] = load_int_a2(blk + 128 + 32 * hh + 16 * l + 4 * t);
          scw[i][r][0] = load_int_a2(blk + 192 + 8 * hh);  // scales 8hh .. 8hh + 7
          scw[i][r][1] = load_int_a2(blk + 196 + 8 * hh);
          dh[i][r] = *(const uint16_t *)(blk + 208);
        }
        if constexpr (NT == 1) {
          const int tg = tok0 + g;
          float d8[4];
#pragma unroll
          for (int p = 0; p < 4; ++p) {
            const int kb = (u >> 2) * 8 + 4 * hh + p;
            const uint8_t *yg = vy + ((size_t)tg * stride_col_y + kb) * 36;
            bw[i][p] = act_word(yg, tg < n, 4 * l + t);
            d8[p] = __low2float(act_ds(yg, tg < n));
          }
          bds[i][0] = __floats2half2_rn(d8[0], d8[1]);
          bds[i][1] = __floats2half2_rn(d8[2], d8[3]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < UNITS; ++i) {
      const int u = u0 + i * W;
      if (u >= units) break;
      const int sb = u >> 2, hh = (u >> 1) & 1, l = u & 1;
      int a[4][2];      // [part][row g / g + 8]
      float dsc[4][2];  // [part][row g / g + 8]
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float d = __half2float(__ushort_as_half(dh[i][r]));
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          a[p][r] = q6k_values(ql0[i][r], ql1[i][r], qhw[i][r], p);
          // scale 8hh + 2p + l: byte 2p + l of the eight loaded
          dsc[p][r] = q6k_scale(scw[i][r], d, 2 * p + l);
        }
      }
#pragma unroll
      for (int T = 0; T < NT; ++T) {
        const int tg = tok0 + 8 * T + g;  // this lane's B column; its C columns are 2t, 2t + 1
        int bp[4];
        half2 dp[2];
        if constexpr (NT == 1) {
#pragma unroll
          for (int p = 0; p < 4; ++p) bp[p] = bw[i][p];
          dp[0] = bds[i][0];
          dp[1] = bds[i][1];
        } else {
          float d8[4];
#pragma unroll
          for (int p = 0; p < 4; ++p) {
            const int kb = sb * 8 + 4 * hh + p;
            const uint8_t *yg = vy + ((size_t)tg * stride_col_y + kb) * 36;
            bp[p] = act_word(yg, tg < n, 4 * l + t);
            d8[p] = __low2float(act_ds(yg, tg < n));
          }
          dp[0] = __floats2half2_rn(d8[0], d8[1]);
          dp[1] = __floats2half2_rn(d8[2], d8[3]);
        }
        // d of activation rows 2t and 2t + 1 for each part, from the lanes whose B column they are.
        const half2 dq[2][2] = {{shfl_half2(dp[0], 8 * t), shfl_half2(dp[1], 8 * t)},
                                {shfl_half2(dp[0], 8 * t + 4), shfl_half2(dp[1], 8 * t + 4)}};
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          const int b = bp[p];
          const float d8[2] = {p & 1 ? __high2float(dq[0][p >> 1]) : __low2float(dq[0][p >> 1]),
                               p & 1 ? __high2float(dq[1][p >> 1]) : __low2float(dq[1][p >> 1])};
          int c[4];
          mma_k16(c, a[p], b);
#pragma unroll
          for (int e = 0; e < 4; ++e)
            acc[T][e] = __fadd_rn(acc[T][e], q6k_term(dsc[p][e >> 1], d8[e & 1], c[e]));
        }
      }
    }
  }
  store_rows<NT>(acc, red, dst, row0, tok0, n, stride_col_dst);
}

// One activation row without tensor cores: the decoding step's product, each weight row computed
// bit for bit as the tile kernels above compute it. One lane stands for a tile kernel's warp:
// lane (w, r) of a block takes weight row r's units w, w + W, ... (W = blockDim.x, the tile
// kernels' warp count for this row length), each unit whole, so no lane waits on another. Its
// integer sums are exact, as the MMA's are; its float terms are the functions above in the same
// order; a row's W partials are summed in split order, as `store_rows` sums its warps. Block
// (W, R): R weight rows, W * R <= 256. The activation row is staged in shared memory first, 48
// bytes a Q8_1 block (the 32 values as two int4, then d and the exact sum of the values), so that
// a lane reads a block in three 16-byte loads.

// Units a lane of the one-row kernels loads before it computes on them (the loads of a batch
// in flight together; the units still accumulate in order): four, which is every unit of a row
// of up to 4096 values (`mmtc_warps`); twelve in the `_long` kernels for longer rows.
#define ROW_UNITS 4
#define ROW_UNITS_LONG 12

// 16 bytes at a 2-byte-aligned address as four words: five aligned loads and funnel shifts
// (Q6_K blocks are 210 bytes, so a block's words sit at either alignment). Reads two bytes
// before the 16 (at 2 mod 4) or four after (at 0 mod 4): the previous block's last bytes or this
// block's next ones for every 16 the callers load (a matrix starts 4-aligned).
static __device__ __forceinline__ void load16_a2(const uint8_t *p, int out[4]) {
  const uintptr_t a = (uintptr_t)p;
  const uint32_t *base = (const uint32_t *)(a & ~(uintptr_t)3);
  const int shift = (int)(a & 2) * 8;
  uint32_t w[5];
#pragma unroll
  for (int k = 0; k < 5; ++k) w[k] = base[k];
#pragma unroll
  for (int k = 0; k < 4; ++k) out[k] = (int)__funnelshift_r(w[k], w[k + 1], shift);
}

// Stage NR activation rows (`nblk` Q8_1 blocks each, `stride` blocks apart from `vy`) in `act`
// (3 int4 a block, row after row); rows from `n` on are staged as zeros.
template <int NR>
static __device__ __forceinline__ void stage_rows(const uint8_t *vy, int nblk, int stride, int n,
                                                  int4 *act) {
  const int tid = threadIdx.x + blockDim.x * threadIdx.y, nthreads = blockDim.x * blockDim.y;
  for (int i = tid; i < NR * nblk; i += nthreads) {
    const int r = i / nblk, b = i - r * nblk;
    const bool live = r < n;
    const uint8_t *y = vy + ((size_t)r * stride + b) * 36;
    int q[8], s8 = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      q[k] = act_word(y, live, k);
      s8 = __dp4a(q[k], 0x01010101, s8);
    }
    act[3 * i] = make_int4(q[0], q[1], q[2], q[3]);
    act[3 * i + 1] = make_int4(q[4], q[5], q[6], q[7]);
    act[3 * i + 2] = make_int4(__float_as_int(__low2float(act_ds(y, live))), s8, 0, 0);
  }
  __syncthreads();
}

// Store lane (w, r)'s partials of NR activation rows; sum each (activation row, weight row)'s W
// partials in split order into dst (activation row c at dst + c * stride_dst), rows below n.
template <int NR>
static __device__ __forceinline__ void store_rows_dp4a(const float (&acc)[NR], float *dst,
                                                       int nrows, int stride_dst, int n) {
  __shared__ float red[NR][256];
  const int W = blockDim.x, R = blockDim.y;
#pragma unroll
  for (int c = 0; c < NR; ++c) red[c][threadIdx.y * W + threadIdx.x] = acc[c];
  __syncthreads();
  const int tid = threadIdx.x + W * threadIdx.y;
  for (int i = tid; i < NR * R; i += W * R) {
    const int c = i / R, r = i - c * R;
    const int row = blockIdx.x * R + r;
    if (c < n && row < nrows) {
      float s = red[c][r * W];
      for (int ww = 1; ww < W; ++ww) s = __fadd_rn(s, red[c][r * W + ww]);
      dst[(size_t)c * stride_dst + row] = s;
    }
  }
}

// The dot product of eight words of values with eight words of activations, exact (two
// chains of four, for the latency).
static __device__ __forceinline__ int dot8(const int v[8], int4 y0, int4 y1) {
  int s = __dp4a(v[0], y0.x, 0), t = __dp4a(v[4], y1.x, 0);
  s = __dp4a(v[1], y0.y, s);
  t = __dp4a(v[5], y1.y, t);
  s = __dp4a(v[2], y0.z, s);
  t = __dp4a(v[6], y1.z, t);
  s = __dp4a(v[3], y0.w, s);
  t = __dp4a(v[7], y1.w, t);
  return s + t;
}

// The activation row as the one-row kernels read it, staged in shared memory by `stage_row`.
// (Read word by word from the Q8_1 blocks in global memory instead, with no staging and no
// barrier, the 1.5B's small products took longer: 4.1 us against 2.9 for q and o, 3.9 against
// 2.5 for k and v.)
struct StagedRow {
  const int4 *act;
  __device__ __forceinline__ int4 q(int kb, int half) const { return act[3 * kb + half]; }
  __device__ __forceinline__ float d(int kb) const { return __int_as_float(act[3 * kb + 2].x); }
  __device__ __forceinline__ int s8(int kb) const { return act[3 * kb + 2].y; }
};

// A batch of U of a Q4_K row's units as one lane loads them: the super-block header (dm, scales[12])
// and the unit's 32 bytes of nibbles.
template <int U>
struct Q4kUnits {
  int4 hdr[U], q[U][2];

  __device__ __forceinline__ void load(const uint8_t *wrow, int u0, int W, int units) {
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int u = u0 + i * W;
      if (u < units) {
        const int4 *blk = (const int4 *)(wrow + (size_t)(u >> 2) * 144);
        hdr[i] = blk[0];
        q[i][0] = blk[1 + 2 * (u & 3)];
        q[i][1] = blk[2 + 2 * (u & 3)];
      }
    }
  }

  // Unit i's (u) two terms (its low and its high nibbles) for each of NR activation rows; the
  // values unpacked once for all the rows.
  template <int NR>
  __device__ __forceinline__ void terms(float (&t)[NR][2], const StagedRow (&act)[NR], int i,
                                        int u) const {
    const int sc[3] = {hdr[i].y, hdr[i].z, hdr[i].w};
    const half2 dmh = *(const half2 *)&hdr[i].x;
    const int words[8] = {q[i][0].x, q[i][0].y, q[i][0].z, q[i][0].w,
                          q[i][1].x, q[i][1].y, q[i][1].z, q[i][1].w};
    float dls[2], mls[2];
    q4k_scale_min_pair(sc, dmh, u & 3, dls, mls);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int v[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = (words[k] >> (4 * h)) & 0x0F0F0F0F;
      const int kb = (u >> 2) * 8 + 2 * (u & 3) + h;
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        const int4 y0 = act[r].q(kb, 0), y1 = act[r].q(kb, 1);
        t[r][h] = q4k_term(dls[h], mls[h], act[r].d(kb), dot8(v, y0, y1), act[r].s8(kb));
      }
    }
  }

  // Add the batch's terms to each of NR activation rows' sums, each row's in the one-row order
  // (so a row's sum is the same whatever NR).
  template <int NR>
  __device__ __forceinline__ void sum(float (&acc)[NR], const StagedRow (&act)[NR], int u0,
                                      int W, int units) const {
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int u = u0 + i * W;
      if (u >= units) break;
      float t[NR][2];
      terms<NR>(t, act, i, u);
#pragma unroll
      for (int r = 0; r < NR; ++r) acc[r] = __fadd_rn(__fadd_rn(acc[r], t[r][0]), t[r][1]);
    }
  }
};

// A batch of U of a Q6_K row's units as one lane loads them: the unit's `ql` words (for the low and
// the high nibbles), `qh` words, its eight scales and d.
template <int U>
struct Q6kUnits {
  int ql0[U][4], ql1[U][4], qh[U][4], scw[U][2];
  uint16_t dh[U];

  __device__ __forceinline__ void load(const uint8_t *wrow, int u0, int W, int units) {
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int u = u0 + i * W;
      if (u < units) {
        const int hh = (u >> 1) & 1, l = u & 1;
        const uint8_t *blk = wrow + (size_t)(u >> 2) * 210;
        load16_a2(blk + 64 * hh + 16 * l, ql0[i]);
        load16_a2(blk + 64 * hh + 32 + 16 * l, ql1[i]);
        load16_a2(blk + 128 + 32 * hh + 16 * l, qh[i]);
        scw[i][0] = load_int_a2(blk + 192 + 8 * hh);  // scales 8hh .. 8hh + 7
        scw[i][1] = load_int_a2(blk + 196 + 8 * hh);
        dh[i] = *(const uint16_t *)(blk + 208);
      }
    }
  }

  // Unit i's (u) four terms (its four parts) for each of NR activation rows.
  template <int NR>
  __device__ __forceinline__ void terms(float (&t)[NR][4], const StagedRow (&act)[NR], int i,
                                        int u) const {
    const int hh = (u >> 1) & 1, l = u & 1;
    const float d = __half2float(__ushort_as_half(dh[i]));
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const int kb = (u >> 2) * 8 + 4 * hh + p;
      const int v[4] = {q6k_values(ql0[i][0], ql1[i][0], qh[i][0], p),
                        q6k_values(ql0[i][1], ql1[i][1], qh[i][1], p),
                        q6k_values(ql0[i][2], ql1[i][2], qh[i][2], p),
                        q6k_values(ql0[i][3], ql1[i][3], qh[i][3], p)};
      const float dsc = q6k_scale(scw[i], d, 2 * p + l);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        const int4 y = act[r].q(kb, l);  // values 16l .. 16l + 15 of the block
        int isum = __dp4a(v[0], y.x, 0);
        isum = __dp4a(v[1], y.y, isum);
        isum = __dp4a(v[2], y.z, isum);
        isum = __dp4a(v[3], y.w, isum);
        t[r][p] = q6k_term(dsc, act[r].d(kb), isum);
      }
    }
  }

  // As Q4kUnits::sum: the batch's terms added to each of NR activation rows' sums.
  template <int NR>
  __device__ __forceinline__ void sum(float (&acc)[NR], const StagedRow (&act)[NR], int u0,
                                      int W, int units) const {
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int u = u0 + i * W;
      if (u >= units) break;
      float t[NR][4];
      terms<NR>(t, act, i, u);
#pragma unroll
      for (int r = 0; r < NR; ++r)
#pragma unroll
        for (int p = 0; p < 4; ++p) acc[r] = __fadd_rn(acc[r], t[r][p]);
    }
  }
};

// Weight row `row` of the stack of vx0, vx1, vx2 (stacked.cuh), rows of `nsb` super-blocks of
// `bytes`; a row past the matrix (`live` false) gives row 0, whose lanes then load nothing.
template <int bytes>
static __device__ __forceinline__ const uint8_t *weight_row(const void *vx0, const void *vx1,
                                                            const void *vx2, int row1, int row2,
                                                            int row, bool live, int nsb) {
  int wrow0;
  const uint8_t *vx = (const uint8_t *)stacked(vx0, vx1, vx2, row1, row2, live ? row : 0, &wrow0);
  return vx + (size_t)(live ? row - wrow0 : 0) * nsb * bytes;
}

// Stage NR activation rows of `ncols_x` values in the block's dynamic shared memory
// (`stage_rows`) and point act[c] at row c.
template <int NR>
static __device__ __forceinline__ void stage_act(const uint8_t *vy, int ncols_x, int stride_col_y,
                                                 int n, StagedRow (&act)[NR]) {
  extern __shared__ int4 staged[];
  const int nblk = ncols_x / 32;
  stage_rows<NR>(vy, nblk, stride_col_y, n, staged);
#pragma unroll
  for (int c = 0; c < NR; ++c) act[c] = StagedRow{staged + 3 * c * nblk};
}

// The product of NR activation rows (at most; `n` live) with `Units` (Q4kUnits / Q6kUnits of U
// units, `bytes` a super-block): the first batch of weights is loaded before the activations
// are staged, so that the two loads overlap; each batch of weights is then loaded once for all
// NR rows, and each row summed exactly as the one-row kernel (NR = 1) sums it.
template <typename Units, int bytes, int U, int NR>
static __device__ __forceinline__ void mmtc_rows(const void *vx0, const void *vx1,
                                                 const void *vx2, int row1, int row2,
                                                 const uint8_t *vy, float *dst, int ncols_x,
                                                 int nrows, int stride_col_y, int stride_col_dst,
                                                 int n) {
  const int w = threadIdx.x, W = blockDim.x;
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const int nsb = ncols_x / 256, units = nsb * 4;
  const bool live = row < nrows;
  const uint8_t *wrow = weight_row<bytes>(vx0, vx1, vx2, row1, row2, row, live, nsb);
  Units batch;
  if (live) batch.load(wrow, w, W, units);
  pdl_enter();  // the first weights were loaded while the previous kernel finished (pdl.cuh)
  StagedRow act[NR];
  stage_act<NR>(vy, ncols_x, stride_col_y, n, act);
  float acc[NR];
#pragma unroll
  for (int c = 0; c < NR; ++c) acc[c] = 0.0f;
  if (live) {
    for (int u0 = w;;) {
      batch.template sum<NR>(acc, act, u0, W, units);
      u0 += U * W;
      if (u0 >= units) break;
      batch.load(wrow, u0, W, units);
    }
  }
  store_rows_dp4a<NR>(acc, dst, nrows, stride_col_dst, n);
}

// Entry points: grid (ceil(rows / R)), block (W, R), dynamic shared memory 48 bytes a Q8_1 block
// of each activation row. dst[c * stride_col_dst + r] = W[r] . y[c] for the n (at most NR)
// activation rows c, W the stack of vx0, vx1, vx2 (stacked.cuh). `_row`: one row (NR = 1).
#define TREESPEC_MMTC_ROWS(tag, Units, bytes, name, units, NR)                                 \
  extern "C" __global__ void __launch_bounds__(256) mmtc_##tag##_##name(                      \
      const void *__restrict__ vx0, const void *__restrict__ vx1,                              \
      const void *__restrict__ vx2, const int row1, const int row2,                            \
      const void *__restrict__ vy, float *__restrict__ dst, const int ncols_x,                 \
      const int nrows, const int stride_col_y, const int stride_col_dst, const int n) {        \
    mmtc_rows<Units<units>, bytes, units, NR>(vx0, vx1, vx2, row1, row2, (const uint8_t *)vy,  \
                                              dst, ncols_x, nrows, stride_col_y,               \
                                              stride_col_dst, n);                              \
  }
#define TREESPEC_MMTC_ROWS_ALL(tag, Units, bytes)                                              \
  TREESPEC_MMTC_ROWS(tag, Units, bytes, row, ROW_UNITS, 1)                                     \
  TREESPEC_MMTC_ROWS(tag, Units, bytes, row_long, ROW_UNITS_LONG, 1)                           \
  TREESPEC_MMTC_ROWS(tag, Units, bytes, rows2, ROW_UNITS, 2)                                   \
  TREESPEC_MMTC_ROWS(tag, Units, bytes, rows2_long, ROW_UNITS_LONG, 2)                         \
  TREESPEC_MMTC_ROWS(tag, Units, bytes, rows4, ROW_UNITS, 4)                                   \
  TREESPEC_MMTC_ROWS(tag, Units, bytes, rows4_long, ROW_UNITS_LONG, 4)

TREESPEC_MMTC_ROWS_ALL(q4_k, Q4kUnits, 144)
TREESPEC_MMTC_ROWS_ALL(q6_k, Q6kUnits, 210)

// ---- The one-row kernel for long rows: a warp a weight row ----
//
// Rows of 4096 values or more have 16 splits (`mmtc_warps`). Lane l of a warp takes units
// l, l + 32, ... of its weight row, so that a warp's loads are 32 neighbouring units (1,152
// bytes of Q4_K) and twice as many lanes work on a row as in `mmtc_<type>_row_long`. Split s's
// units s, s + 16, s + 32, ... are then lane s's and lane s + 16's in turn: lane s adds its own
// unit's terms and then, shuffled down, lane s + 16's, so its sum is the split's in the order of
// every other kernel of this file; the 16 partials are summed in split order by lane 0. Block
// (32, R): R weight rows, the activation row staged in shared memory as for the other one-row
// kernels. A lane loads UW units before it sums them: `_warp4` four (up to 94 registers),
// `_warp2` two (64, so that four blocks fit a multiprocessor).
#define WARP_SPLITS 16

template <typename Units, int T, int bytes, int UW, int NR>
static __device__ __forceinline__ void mmtc_warp(const void *vx0, const void *vx1,
                                                 const void *vx2, int row1, int row2,
                                                 const uint8_t *vy, float *dst, int ncols_x,
                                                 int nrows, int stride_col_y,
                                                 int stride_col_dst, int n) {
  const int lane = threadIdx.x;
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const int nsb = ncols_x / 256, units = nsb * 4;
  const bool live = row < nrows;
  const uint8_t *wrow = weight_row<bytes>(vx0, vx1, vx2, row1, row2, row, live, nsb);
  Units batch;
  if (live) batch.load(wrow, lane, 32, units);
  pdl_enter();  // the first weights were loaded while the previous kernel finished (pdl.cuh)
  StagedRow act[NR];
  stage_act<NR>(vy, ncols_x, stride_col_y, n, act);
  float acc[NR];
#pragma unroll
  for (int c = 0; c < NR; ++c) acc[c] = 0.0f;
  if (live) {  // uniform over the warp, as the loop's bounds are (the shuffles need every lane)
    for (int base = 0;;) {
#pragma unroll
      for (int i = 0; i < UW; ++i) {
        const int u = base + 32 * i + lane;
        float t[NR][T];
        if (u < units) {
          batch.template terms<NR>(t, act, i, u);
        } else {
#pragma unroll
          for (int c = 0; c < NR; ++c)
#pragma unroll
            for (int k = 0; k < T; ++k) t[c][k] = 0.0f;
        }
#pragma unroll
        for (int c = 0; c < NR; ++c) {
          float up[T];
#pragma unroll
          for (int k = 0; k < T; ++k) up[k] = __shfl_down_sync(FULL_MASK, t[c][k], WARP_SPLITS);
          if (lane < WARP_SPLITS && u < units) {
#pragma unroll
            for (int k = 0; k < T; ++k) acc[c] = __fadd_rn(acc[c], t[c][k]);
            if (u + WARP_SPLITS < units) {
#pragma unroll
              for (int k = 0; k < T; ++k) acc[c] = __fadd_rn(acc[c], up[k]);
            }
          }
        }
      }
      base += 32 * UW;
      if (base >= units) break;
      batch.load(wrow, base + lane, 32, units);
    }
  }
#pragma unroll
  for (int c = 0; c < NR; ++c) {
    float s = __shfl_sync(FULL_MASK, acc[c], 0);
#pragma unroll
    for (int w = 1; w < WARP_SPLITS; ++w) s = __fadd_rn(s, __shfl_sync(FULL_MASK, acc[c], w));
    if (lane == 0 && live && c < n) dst[(size_t)c * stride_col_dst + row] = s;
  }
}

// Entry points: grid (ceil(rows / R)), block (32, R), dynamic shared memory 48 bytes a Q8_1
// block of each activation row; arguments as `mmtc_<type>_row`'s. `_warp<UW>`: one activation
// row; `_warp2_rows2`: up to two, each weight batch loaded once for both (a four-row form took
// 4% longer than `_rows4_long` in a 27B-shaped verify pass, so four rows stay there).
#define TREESPEC_MMTC_WARP(tag, Units, T, bytes, name, UW, NR, MIN_BLOCKS)                     \
  extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS) mmtc_##tag##_##name(          \
      const void *__restrict__ vx0, const void *__restrict__ vx1,                              \
      const void *__restrict__ vx2, const int row1, const int row2,                            \
      const void *__restrict__ vy, float *__restrict__ dst, const int ncols_x,                 \
      const int nrows, const int stride_col_y, const int stride_col_dst, const int n) {        \
    mmtc_warp<Units<UW>, T, bytes, UW, NR>(vx0, vx1, vx2, row1, row2, (const uint8_t *)vy,     \
                                           dst, ncols_x, nrows, stride_col_y, stride_col_dst,  \
                                           n);                                                 \
  }

TREESPEC_MMTC_WARP(q4_k, Q4kUnits, 2, 144, warp2, 2, 1, 4)
TREESPEC_MMTC_WARP(q4_k, Q4kUnits, 2, 144, warp4, 4, 1, 2)
TREESPEC_MMTC_WARP(q4_k, Q4kUnits, 2, 144, warp2_rows2, 2, 2, 2)
TREESPEC_MMTC_WARP(q6_k, Q6kUnits, 4, 210, warp2, 2, 1, 4)
TREESPEC_MMTC_WARP(q6_k, Q6kUnits, 4, 210, warp4, 4, 1, 2)
TREESPEC_MMTC_WARP(q6_k, Q6kUnits, 4, 210, warp2_rows2, 2, 2, 2)

// Bytes of a super-block of 256 values.
#define q4_k_bytes 144
#define q6_k_bytes 210

// Entry points: grid (rows / 16, ceil(n / (8 * NT))), block (32, W), dynamic shared memory W *
// NT * 8 * 16 floats. dst[c * stride_col_dst + r] = W[r] . y[c] for the n activation rows c, W
// the stack of vx0, vx1, vx2 (stacked.cuh; every row count a multiple of 16).
#define TREESPEC_MMTC(tag, NT)                                                                 \
  extern "C" __global__ void __launch_bounds__(32 * MAX_WARPS) mmtc_##tag##_t##NT(           \
      const void *__restrict__ vx0, const void *__restrict__ vx1,                              \
      const void *__restrict__ vx2, const int row1, const int row2,                            \
      const void *__restrict__ vy, float *__restrict__ dst, const int ncols_x,                 \
      const int stride_col_y, const int stride_col_dst, const int n) {                         \
    int wrow0;                                                                                 \
    const uint8_t *vx =                                                                        \
        (const uint8_t *)stacked(vx0, vx1, vx2, row1, row2, blockIdx.x * 16, &wrow0);          \
    const size_t row_bytes = (size_t)(ncols_x / 256) * tag##_bytes;                            \
    /* the block's 16 weight rows on their way to L2 before the previous kernel ends (once:  \
       the blocks of later activation tiles read the same rows) */                             \
    if (blockIdx.y == 0) prefetch_l2(vx + (blockIdx.x * 16 - wrow0) * row_bytes, 16 * row_bytes); \
    pdl_enter();                                                                               \
    mmtc_##tag<NT>(vx, wrow0, (const uint8_t *)vy, dst, ncols_x, stride_col_y, stride_col_dst, \
                   n);                                                                         \
  }

TREESPEC_MMTC(q4_k, 1)
TREESPEC_MMTC(q4_k, 2)
TREESPEC_MMTC(q4_k, 4)
TREESPEC_MMTC(q4_k, 8)
TREESPEC_MMTC(q6_k, 1)
TREESPEC_MMTC(q6_k, 2)
TREESPEC_MMTC(q6_k, 4)
TREESPEC_MMTC(q6_k, 8)

// ---- Staged tile kernels: many activation rows ----
//
// The same products, each (activation row, weight row) summed bit for bit as every kernel above
// sums it, laid out for passes of many rows. A block takes 16 * WM weight rows (WM = blockDim.y /
// 2, chosen by the launcher for enough blocks) by 64 activation rows; warp (wm, wn) takes 16
// weight rows by 32 activation rows (four 8-row tiles) over the whole row length. It walks the
// splits w = 0 .. W - 1 of the row (W = `mmtc_warps`, the tile kernels' warp count) one after the
// other, each split's units in order into one partial, and folds the partials in split order:
// exactly the order of `store_rows` above. The activations of a batch of ST_UB units are staged
// in shared memory once for all the block's warps (64 bytes of values and 16 bytes of per-block
// floats a row: 80 bytes, so that the B fragments' reads hit 32 distinct banks), with each Q8_1
// block's d and d * (exact sum of its values) worked out once there. The integer sums come out of
// the MMA started at ST_MAGIC, so that, read as a float, they are 1.5 * 2^23 + isum exactly
// (|isum| < 2^22), and fmaf(d8, that, -1.5 * 2^23 * d8) is d8 * isum rounded once: what
// __fmul_rn(d8, (float)isum) gives, without the int-to-float conversion (a quarter-rate
// instruction) or shuffles.

#define ST_ROWS 64
#define ST_UB 4
#define ST_MAGIC 0x4B400000
#define ST_MAGIC_F 12582912.0f

static __device__ __forceinline__ void mma_k32_from(int c[4], const int a[4], const int b[2],
                                                    int init) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(init));
}

static __device__ __forceinline__ void mma_k16_from(int c[4], const int a[2], const int b,
                                                    int init) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%7,%7,%7,%7};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(b), "r"(init));
}

// d8 * isum rounded once, from the MMA's sum started at ST_MAGIC (`nd8` = -ST_MAGIC_F * d8,
// exact: d8 has the 11 significant bits of a half).
static __device__ __forceinline__ float st_scaled(float d8, float nd8, int c) {
  return __fmaf_rn(d8, __int_as_float(c), nd8);
}

typedef int4 StagedUnits[ST_UB][ST_ROWS][5];

// Stage the activations of units u0 + i * W (i < nu) of rows tok0 .. tok0 + 63 (rows from n on as
// zeros): per unit and row, four 16-byte pieces of values and (for Q4_K) d8 of its two Q8_1 blocks
// and d8 * their exact sums, or (Q6_K) d8 of its four parts' blocks. Every thread of the block
// takes part (the pieces of a block sit in neighbouring lanes for the sum's shuffle).
template <bool Q4K>
static __device__ __forceinline__ void stage_units(StagedUnits &st, const uint8_t *vy, int u0,
                                                   int W, int nu, int tok0, int n, int stride) {
  const int tid = threadIdx.x + 32 * threadIdx.y, nt = 32 * blockDim.y;
  for (int task = tid; task < nu * ST_ROWS * 4; task += nt) {
    const int p = task & 3, r = (task >> 2) & (ST_ROWS - 1), i = task >> 8;
    const int u = u0 + i * W, tok = tok0 + r;
    const bool live = tok < n;
    // Q4_K: pieces 0, 1 are block 2j's values 0-15, 16-31; 2, 3 block 2j + 1's. Q6_K: piece p
    // is part p, values 16l .. 16l + 15 of block 8 sb + 4 hh + p.
    const int kb = Q4K ? (u >> 2) * 8 + 2 * (u & 3) + (p >> 1) : (u >> 2) * 8 + 4 * ((u >> 1) & 1) + p;
    const int off = Q4K ? 16 * (p & 1) : 16 * (u & 1);
    const uint8_t *y = vy + ((size_t)tok * stride + kb) * 36;
    int4 q = make_int4(0, 0, 0, 0);
    if (live) {
      const int *w = (const int *)(y + 4 + off);
      q = make_int4(w[0], w[1], w[2], w[3]);
    }
    st[i][r][p] = q;
    float *meta = (float *)&st[i][r][4];
    const float d8 = __low2float(act_ds(y, live));
    if (Q4K) {
      int s8 = __dp4a(q.x, 0x01010101, __dp4a(q.y, 0x01010101, 0));
      s8 = __dp4a(q.z, 0x01010101, __dp4a(q.w, 0x01010101, s8));
      s8 += __shfl_xor_sync(FULL_MASK, s8, 1);
      if ((p & 1) == 0) {
        meta[p >> 1] = d8;
        meta[2 + (p >> 1)] = __fmul_rn(d8, (float)s8);
      }
    } else {
      meta[p] = d8;
    }
  }
}

template <bool Q4K>
static __device__ void mmtc_staged(const void *__restrict__ vx0, const void *__restrict__ vx1,
                                   const void *__restrict__ vx2, int row1, int row2,
                                   const uint8_t *__restrict__ vy, float *__restrict__ dst,
                                   int ncols_x, int nrows, int stride_col_y, int stride_col_dst,
                                   int n) {
  __shared__ StagedUnits st;
  constexpr int bytes = Q4K ? 144 : 210;
  const int lane = threadIdx.x, WM = blockDim.y / 2, wm = threadIdx.y % WM, wn = threadIdx.y / WM;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = (blockIdx.x * WM + wm) * 16, tok0 = blockIdx.y * ST_ROWS;
  const bool live = row0 < nrows;
  int wrow0;
  const uint8_t *vx = (const uint8_t *)stacked(vx0, vx1, vx2, row1, row2, live ? row0 : 0, &wrow0);
  const int nsb = ncols_x / 256, units = nsb * 4;
  const int W = min(MAX_WARPS, max(1, (units + 3) / 4));  // mmtc_warps
  const uint8_t *rows[2] = {vx + (size_t)((live ? row0 : 0) - wrow0 + g) * nsb * bytes,
                            vx + (size_t)((live ? row0 : 0) - wrow0 + g + 8) * nsb * bytes};
  if (live && blockIdx.y == 0 && t == 0 && g < 8) {
    prefetch_l2_by(rows[0], nsb * bytes, 0, 1);
    prefetch_l2_by(rows[1], nsb * bytes, 0, 1);
  }
  pdl_enter();
  float tot[4][4], acc[4][4];
  for (int w = 0; w < W; ++w) {
#pragma unroll
    for (int T = 0; T < 4; ++T) acc[T][0] = acc[T][1] = acc[T][2] = acc[T][3] = 0.0f;
    for (int u0 = w; u0 < units; u0 += ST_UB * W) {
      const int nu = min(ST_UB, (units - u0 + W - 1) / W);
      // The batch's weights, issued before the staging (Q4_K: header and the unit's two
      // words of each row; Q6_K: its ql, qh words, scales and d).
      int wa[ST_UB][2][4], wb[ST_UB][2][2];
#pragma unroll
      for (int i = 0; i < ST_UB; ++i) {
        const int u = u0 + i * W;
        if (live && i < nu) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const uint8_t *blk = rows[r] + (size_t)(u >> 2) * bytes;
            if (Q4K) {
              const int4 h = *(const int4 *)blk;  // dm, scales[12]
              wa[i][r][0] = h.x;
              wa[i][r][1] = h.y;
              wa[i][r][2] = h.z;
              wa[i][r][3] = h.w;
              wb[i][r][0] = ((const int *)blk)[4 + 8 * (u & 3) + t];
              wb[i][r][1] = ((const int *)blk)[4 + 8 * (u & 3) + 4 + t];
            } else {
              const int hh = (u >> 1) & 1, l = u & 1;
              wa[i][r][0] = load_int_a2(blk + 64 * hh + 16 * l + 4 * t);
              wa[i][r][1] = load_int_a2(blk + 64 * hh + 32 + 16 * l + 4 * t);
              wa[i][r][2] = load_int_a2(blk + 128 + 32 * hh + 16 * l + 4 * t);
              wa[i][r][3] = *(const uint16_t *)(blk + 208);
              wb[i][r][0] = load_int_a2(blk + 192 + 8 * hh);
              wb[i][r][1] = load_int_a2(blk + 196 + 8 * hh);
            }
          }
        }
      }
      __syncthreads();  // every warp is done with the previous batch
      stage_units<Q4K>(st, vy, u0, W, nu, tok0, n, stride_col_y);
      __syncthreads();
      if (!live) continue;
#pragma unroll
      for (int i = 0; i < ST_UB; ++i) {
        if (i >= nu) break;
        const int u = u0 + i * W;
        if (Q4K) {
          const int a_lo[4] = {wb[i][0][0] & 0x0F0F0F0F, wb[i][1][0] & 0x0F0F0F0F,
                               wb[i][0][1] & 0x0F0F0F0F, wb[i][1][1] & 0x0F0F0F0F};
          const int a_hi[4] = {(wb[i][0][0] >> 4) & 0x0F0F0F0F, (wb[i][1][0] >> 4) & 0x0F0F0F0F,
                               (wb[i][0][1] >> 4) & 0x0F0F0F0F, (wb[i][1][1] >> 4) & 0x0F0F0F0F};
          float dl[2][2], ml[2][2];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int sc[3] = {wa[i][r][1], wa[i][r][2], wa[i][r][3]};
            const int dm = wa[i][r][0];
            q4k_scale_min_pair(sc, *(const half2 *)&dm, u & 3, dl[r], ml[r]);
          }
#pragma unroll
          for (int T = 0; T < 4; ++T) {
            const int rb = 32 * wn + 8 * T;
            const int *bq = (const int *)&st[i][rb + g][0];
            const float4 m0 = *(const float4 *)&st[i][rb + 2 * t][4];
            const float4 m1 = *(const float4 *)&st[i][rb + 2 * t + 1][4];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int b[2] = {bq[8 * h + t], bq[8 * h + 4 + t]};
              const float d8[2] = {h ? m0.y : m0.x, h ? m1.y : m1.x};
              const float m8[2] = {h ? m0.w : m0.z, h ? m1.w : m1.z};
              const float nd8[2] = {__fmul_rn(-ST_MAGIC_F, d8[0]), __fmul_rn(-ST_MAGIC_F, d8[1])};
              int c[4];
              mma_k32_from(c, h == 0 ? a_lo : a_hi, b, ST_MAGIC);
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int r = e >> 1, col = e & 1;
                const float v = st_scaled(d8[col], nd8[col], c[e]);
                const float term = __fsub_rn(__fmul_rn(dl[r][h], v), __fmul_rn(ml[r][h], m8[col]));
                acc[T][e] = __fadd_rn(acc[T][e], term);
              }
            }
          }
        } else {
          const int l = u & 1;
          int a[4][2];
          float dsc[4][2];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const float d = __half2float(__ushort_as_half((uint16_t)wa[i][r][3]));
#pragma unroll
            for (int p = 0; p < 4; ++p) {
              a[p][r] = q6k_values(wa[i][r][0], wa[i][r][1], wa[i][r][2], p);
              dsc[p][r] = q6k_scale(wb[i][r], d, 2 * p + l);
            }
          }
#pragma unroll
          for (int T = 0; T < 4; ++T) {
            const int rb = 32 * wn + 8 * T;
            const int *bq = (const int *)&st[i][rb + g][0];
            const float4 m0 = *(const float4 *)&st[i][rb + 2 * t][4];
            const float4 m1 = *(const float4 *)&st[i][rb + 2 * t + 1][4];
            const float d0[4] = {m0.x, m0.y, m0.z, m0.w}, d1[4] = {m1.x, m1.y, m1.z, m1.w};
#pragma unroll
            for (int p = 0; p < 4; ++p) {
              const float d8[2] = {d0[p], d1[p]};
              const float nd8[2] = {__fmul_rn(-ST_MAGIC_F, d8[0]), __fmul_rn(-ST_MAGIC_F, d8[1])};
              int c[4];
              mma_k16_from(c, a[p], bq[4 * p + t], ST_MAGIC);
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const float v = st_scaled(d8[e & 1], nd8[e & 1], c[e]);
                acc[T][e] = __fadd_rn(acc[T][e], __fmul_rn(dsc[p][e >> 1], v));
              }
            }
          }
        }
      }
    }
#pragma unroll
    for (int T = 0; T < 4; ++T)
#pragma unroll
      for (int e = 0; e < 4; ++e) tot[T][e] = w == 0 ? acc[T][e] : __fadd_rn(tot[T][e], acc[T][e]);
  }
  if (!live) return;
#pragma unroll
  for (int T = 0; T < 4; ++T)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int tok = tok0 + 32 * wn + 8 * T + 2 * t + (e & 1);
      if (tok < n) dst[(size_t)tok * stride_col_dst + row0 + g + 8 * (e >> 1)] = tot[T][e];
    }
}

// Entry points: grid (ceil(rows / (16 * WM)), ceil(n / 64)), block (32, 2 * WM) for WM of 1, 2
// or 4 (`launch_mmtc_staged` in src/gpu/products.rs picks it), static shared memory only. As the tile
// kernels: dst[c * stride_col_dst + r] = W[r] . y[c], every row count a multiple of 16.
#define TREESPEC_MMTC_STAGED(tag, q4k)                                                         \
  extern "C" __global__ void __launch_bounds__(256, 2) mmtc_##tag##_staged(                       \
      const void *__restrict__ vx0, const void *__restrict__ vx1,                              \
      const void *__restrict__ vx2, const int row1, const int row2,                            \
      const void *__restrict__ vy, float *__restrict__ dst, const int ncols_x,                 \
      const int nrows, const int stride_col_y, const int stride_col_dst, const int n) {        \
    mmtc_staged<q4k>(vx0, vx1, vx2, row1, row2, (const uint8_t *)vy, dst, ncols_x, nrows,      \
                     stride_col_y, stride_col_dst, n);                                         \
  }

TREESPEC_MMTC_STAGED(q4_k, true)
TREESPEC_MMTC_STAGED(q6_k, false)
