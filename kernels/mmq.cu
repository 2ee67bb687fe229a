// Quantised products of GGUF K-quant weights (Q4_K, Q6_K) with Q8_1 activation rows, one family
// for every row count: one-row kernels on dp4a for the decoding step (`mmq_<fmt>_warp`, a warp a
// weight row; `mmq_<fmt>_row`, up to four rows: `_rows2`, `_rows4`) and tile kernels on int8 tensor cores for passes of 2 to any number of
// rows (`mmq_<fmt>_t<NT>`, 8 * NT activation rows a block). Every kernel computes each output
// bit for bit as every other does (batch invariance by construction), because they all follow one
// summation contract:
//
//   1. The activations are quantised with one scale per super-block of 256 values: the eight
//      Q8_1 blocks of a super-block share `d` (the quantisers of kernels/rows.cu and
//      kernels/attention.cu write them so for these products; `act_group` in src/gpu/mmq.rs).
//   2. A super-block's dot product is integers only: Q4_K `isum = sum_j sc_j * (q . a)_j` and
//      `msum = sum_j m_j * (sum a)_j` over its eight 32-value sub-blocks (6-bit scales and mins),
//      Q6_K `isum = sum_g sc_g * ((q - 32) . a)_g` over its sixteen 16-value groups (int8 scales).
//      Integer sums are exact in any order, so a dp4a lane and an MMA tile get the same numbers.
//   3. One float term a super-block (`q4k_term`, `q6k_term`): its half-precision scales times
//      the activations' (exact in f32), times the integer sums, each operation rounded as written.
//   4. The terms of a row are summed in one order: the super-blocks cut into chunks of `cs`
//      consecutive ones (`cs` from src/gpu/mmq.rs, a function of the row length alone), each
//      chunk's terms added in order from +0, then the chunks' sums added in order from +0.
//
// So the float work is one term per 256 values (the tensor-core tile sums integers only), a
// kernel may split a row over chunks (the tile kernels do, over blocks, where a pass has too few
// tiles to fill the GPU: each chunk's sum goes to a workspace and the tile's last block adds them
// in order), and the one-row step and a verify pass agree bit for bit. src/gpu/mmq.rs holds the
// contract's CPU reference, bit for bit the same, and `treespec selftest` checks every kernel
// against it and every row of every launch against its one-row launch.
//
// Layouts (ggml): block_q8_1 {half d, half sum; int8 qs[32]} (36 bytes; the sum is not read:
// each sub-block's exact integer sum is taken from its values), block_q4_K {half d, half dmin;
// u8 scales[12]; u8 qs[128]} (144 bytes), block_q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16];
// half d} (210 bytes, so 2-byte aligned). Activation rows are 16-byte aligned (`qblocks` pads
// them to 512 values), so a super-block's eight Q8_1 blocks are 288 contiguous, aligned bytes.
#include <cuda_fp16.h>
#include <stdint.h>

#include "cp_async.cuh"
#include "pdl.cuh"
#include "stacked.cuh"

#define FULL_MASK 0xffffffffu

// ---- The contract's float rules (src/gpu/mmq.rs `q4k_term`, `q6k_term`, `Fold`) ----

// Q4_K: da * (d * isum) - (da * dmin) * msum, with da * d and da * dmin exact (halves).
static __device__ __forceinline__ float q4k_term(float da, half2 dm, int isum, int msum) {
  const float2 f = __half22float2(dm);
  const float dd = __fmul_rn(da, f.x), dmin = __fmul_rn(da, f.y);
  return __fsub_rn(__fmul_rn(dd, __int2float_rn(isum)), __fmul_rn(dmin, __int2float_rn(msum)));
}

// Q6_K: (da * d) * isum.
static __device__ __forceinline__ float q6k_term(float da, float d, int isum) {
  return __fmul_rn(__fmul_rn(da, d), __int2float_rn(isum));
}

// The sums of rule 4 for one output: `part` the current chunk's, `total` the finished chunks'.
struct Fold {
  float part, total;
  __device__ __forceinline__ void start() { part = total = 0.0f; }
  __device__ __forceinline__ void add(float t) { part = __fadd_rn(part, t); }
  __device__ __forceinline__ void end_chunk() {
    total = __fadd_rn(total, part);
    part = 0.0f;
  }
};

// ---- Weight decoding shared by the kernels ----

// A 32-bit word at a 2-byte-aligned address (Q6_K blocks are 210 bytes).
static __device__ __forceinline__ int load_int_a2(const uint8_t *p) {
  const uint16_t *p16 = (const uint16_t *)p;
  return (int)((uint32_t)p16[0] | ((uint32_t)p16[1] << 16));
}

// The eight 6-bit scales (sc) and mins (mn) of a Q4_K super-block, four bytes a word (ggml's
// get_scale_min_k4 for all j at once): sc[0] sub-blocks 0-3, sc[1] 4-7; the same for mn.
static __device__ __forceinline__ void q4k_scales(int s0, int s1, int s2, int sc[2], int mn[2]) {
  const uint32_t a = s0, b = s1, c = s2;
  sc[0] = a & 0x3F3F3F3F;
  sc[1] = (c & 0x0F0F0F0F) | ((a >> 2) & 0x30303030);
  mn[0] = b & 0x3F3F3F3F;
  mn[1] = ((c >> 4) & 0x0F0F0F0F) | ((b >> 2) & 0x30303030);
}

// The two halves a word holds.
static __device__ __forceinline__ half2 as_half2(int v) {
  return __halves2half2(__ushort_as_half((unsigned short)(v & 0xFFFF)),
                        __ushort_as_half((unsigned short)((unsigned)v >> 16)));
}

// Byte k (0..3) of a word, unsigned.
static __device__ __forceinline__ int ubyte(int w, int k) { return (w >> (8 * k)) & 0xFF; }

// Byte k of a word, signed.
static __device__ __forceinline__ int sbyte(int w, int k) { return (int)(int8_t)(w >> (8 * k)); }

// Q6_K: four values (bytes of one word) from a `ql` word (nibble `hi`) and a `qh` word (2 bits
// at `shift`), minus 32.
static __device__ __forceinline__ int q6k_vals(int ql, int qh, int hi, int shift) {
  const int v = ((ql >> (4 * hi)) & 0x0F0F0F0F) | (((qh >> shift) & 0x03030303) << 4);
  return __vsubss4(v, 0x20202020);
}

// ---- A few activation rows: dp4a ----
//
// A warp takes a weight row at a time; lane L its 64-value units L, L + 32, ... (a Q4_K unit is
// sub-blocks 2jj and 2jj + 1, a Q6_K unit four 16-value groups; four a super-block). A pass is
// the warp's 32 consecutive units of a row (eight super-blocks): the four lanes of a super-block
// add their integer sums (shuffles: exact), its first lane makes the term, and every lane folds
// the pass's terms in super-block order (rule 4). The activation rows are staged in shared memory
// first: 48 bytes a Q8_1 block (its 32 values as two int4, then d and the exact sum of the
// values).

#define ROW_WARPS 4
#define ROW_BATCH 4  // units a lane loads before it computes on them

// Stage NR activation rows (`nblk` Q8_1 blocks each, `stride` blocks apart) as 3 int4 a block.
template <int NR>
static __device__ __forceinline__ void stage_rows(const uint8_t *vy, int nblk, int stride, int n,
                                                  int4 *act) {
  const int tid = threadIdx.x + blockDim.x * threadIdx.y, nthreads = blockDim.x * blockDim.y;
  for (int i = tid; i < NR * nblk; i += nthreads) {
    const int r = i / nblk, b = i - r * nblk;
    int q[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s8 = 0;
    float d = 0.0f;
    if (r < n) {
      const uint8_t *y = vy + ((size_t)r * stride + b) * 36;
      const int *w = (const int *)(y + 4);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        q[k] = w[k];
        s8 = __dp4a(q[k], 0x01010101, s8);
      }
      d = __low2float(*(const half2 *)y);
    }
    act[3 * i] = make_int4(q[0], q[1], q[2], q[3]);
    act[3 * i + 1] = make_int4(q[4], q[5], q[6], q[7]);
    act[3 * i + 2] = make_int4(__float_as_int(d), s8, 0, 0);
  }
  __syncthreads();
}

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

// 16 bytes at a 2-byte-aligned address as four words (five aligned loads and funnel shifts; reads
// up to two bytes before or four after the 16, inside the row's block for every caller).
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

// One lane's unit of a Q4_K row: the super-block's header and the unit's 32 bytes of nibbles.
struct Q4kUnit {
  int4 hdr, q0, q1;
  __device__ __forceinline__ void load(const uint8_t *row, int u) {
    const int4 *blk = (const int4 *)(row + (size_t)(u >> 2) * 144);
    hdr = blk[0];
    q0 = blk[1 + 2 * (u & 3)];
    q1 = blk[2 + 2 * (u & 3)];
  }
  // The unit's integer sums with staged activation row `act` (3 int4 a Q8_1 block).
  __device__ __forceinline__ void sums(const int4 *act, int u, int &isum, int &msum) const {
    int sc[2], mn[2];
    q4k_scales(hdr.y, hdr.z, hdr.w, sc, mn);
    const int jj = u & 3;
    // Sub-blocks 2 jj and 2 jj + 1: bytes 2 (jj & 1) and 2 (jj & 1) + 1 of word jj >> 1.
    const int scw = jj < 2 ? sc[0] : sc[1], mnw = jj < 2 ? mn[0] : mn[1];
    const int words[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    isum = 0;
    msum = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int v[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = (words[k] >> (4 * h)) & 0x0F0F0F0F;
      const int kb = (u >> 2) * 8 + 2 * jj + h, byte = 2 * (jj & 1) + h;
      const int c = dot8(v, act[3 * kb], act[3 * kb + 1]);
      isum += ((scw >> (8 * byte)) & 0xFF) * c;
      msum += ((mnw >> (8 * byte)) & 0xFF) * act[3 * kb + 2].y;
    }
  }
  __device__ __forceinline__ float term(float da, int isum, int msum) const {
    return q4k_term(da, as_half2(hdr.x), isum, msum);
  }
};

// One lane's unit of a Q6_K row (values 128 hh + 32 p + 16 l + 0..15 for p = 0..3: groups
// 8 hh + 2 p + l): its `ql` and `qh` words, eight scales and d.
struct Q6kUnit {
  int ql0[4], ql1[4], qh[4], scw[2];
  uint16_t dh;
  __device__ __forceinline__ void load(const uint8_t *row, int u) {
    const int hh = (u >> 1) & 1, l = u & 1;
    const uint8_t *blk = row + (size_t)(u >> 2) * 210;
    load16_a2(blk + 64 * hh + 16 * l, ql0);
    load16_a2(blk + 64 * hh + 32 + 16 * l, ql1);
    load16_a2(blk + 128 + 32 * hh + 16 * l, qh);
    scw[0] = load_int_a2(blk + 192 + 8 * hh);  // scales 8 hh .. 8 hh + 7
    scw[1] = load_int_a2(blk + 196 + 8 * hh);
    dh = *(const uint16_t *)(blk + 208);
  }
  __device__ __forceinline__ void sums(const int4 *act, int u, int &isum, int &msum) const {
    const int hh = (u >> 1) & 1, l = u & 1;
    isum = 0;
    msum = 0;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const int kb = (u >> 2) * 8 + 4 * hh + p;
      const int4 y = act[3 * kb + l];  // values 16 l .. 16 l + 15 of the block
      int c = __dp4a(q6k_vals(p & 1 ? ql1[0] : ql0[0], qh[0], p >> 1, 2 * p), y.x, 0);
      c = __dp4a(q6k_vals(p & 1 ? ql1[1] : ql0[1], qh[1], p >> 1, 2 * p), y.y, c);
      c = __dp4a(q6k_vals(p & 1 ? ql1[2] : ql0[2], qh[2], p >> 1, 2 * p), y.z, c);
      c = __dp4a(q6k_vals(p & 1 ? ql1[3] : ql0[3], qh[3], p >> 1, 2 * p), y.w, c);
      // Scale 8 hh + 2 p + l: byte 2 p + l of the eight loaded (word p >> 1).
      isum += sbyte(scw[p >> 1], 2 * (p & 1) + l) * c;
    }
  }
  __device__ __forceinline__ float term(float da, int isum, int) const {
    return q6k_term(da, __half2float(__ushort_as_half(dh)), isum);
  }
};

// A super-block's term from its four lanes (lanes 4k .. 4k + 3, unit u = 4 sb + lane % 4 each):
// each lane's integer sums with staged activation row `act`, added over the four by two shuffles
// (exact), then the float term (rule 3), the same on each of the four lanes; 0 where `live` is
// false (every lane must call this: the shuffles need the whole warp).
template <typename Unit>
static __device__ __forceinline__ float group_term(const Unit &unit, const int4 *act, int u,
                                                   bool live) {
  int isum = 0, msum = 0;
  if (live) unit.sums(act, u, isum, msum);
  isum += __shfl_xor_sync(FULL_MASK, isum, 1);
  isum += __shfl_xor_sync(FULL_MASK, isum, 2);
  msum += __shfl_xor_sync(FULL_MASK, msum, 1);
  msum += __shfl_xor_sync(FULL_MASK, msum, 2);
  return live ? unit.term(__int_as_float(act[3 * 8 * (u >> 2) + 2].x), isum, msum) : 0.0f;
}

// The product of NR (at most; `n` live) activation rows with the rows of a stack of weights
// (`Unit`: Q4kUnit or Q6kUnit, `bytes` a super-block). Block (32, ROW_WARPS); warp w of block b
// takes weight rows b * ROW_WARPS + w, + gridDim.x * ROW_WARPS, ...
template <typename Unit, int bytes, int NR>
static __device__ __forceinline__ void mmq_rows(const void *vx0, const void *vx1, const void *vx2,
                                                int row1, int row2, const uint8_t *vy, float *dst,
                                                int ncols, int nrows, int stride_y, int stride_dst,
                                                int n, int cs) {
  extern __shared__ int4 staged[];
  const int lane = threadIdx.x;
  const int nsb = ncols / 256, units = nsb * 4;
  const int nblk = ncols / 32;
  int first = blockIdx.x * ROW_WARPS + threadIdx.y;
  // The first batch of the first row loaded before the wait and the staging (pdl.cuh).
  Unit batch[ROW_BATCH];
  const uint8_t *wrow = nullptr;
  auto row_at = [&](int row) {
    int wrow0;
    const uint8_t *vx = (const uint8_t *)stacked(vx0, vx1, vx2, row1, row2, row, &wrow0);
    return vx + (size_t)(row - wrow0) * nsb * bytes;
  };
  auto load_batch = [&](int u0) {
#pragma unroll
    for (int i = 0; i < ROW_BATCH; ++i) {
      const int u = u0 + 32 * i;
      if (u < units) batch[i].load(wrow, u);
    }
  };
  if (first < nrows) {
    wrow = row_at(first);
    load_batch(lane);
  }
  pdl_enter();
  stage_rows<NR>(vy, nblk, stride_y, n, staged);
  for (int row = first; row < nrows; row += gridDim.x * ROW_WARPS) {
    if (row != first) {
      wrow = row_at(row);
      load_batch(lane);
    }
    Fold fold[NR];
#pragma unroll
    for (int c = 0; c < NR; ++c) fold[c].start();
    int s_next = 0, in_chunk = 0;  // the next super-block to fold; its chunk's folded so far
    for (int u0 = lane;;) {
#pragma unroll
      for (int i = 0; i < ROW_BATCH; ++i) {
        const int u = u0 + 32 * i;
        // A pass of 32 units (8 super-blocks): each lane's sums, the super-block's four lanes
        // added, the terms folded in super-block order by every lane.
        if (u - lane >= units) break;
        float t[NR];
#pragma unroll
        for (int c = 0; c < NR; ++c) t[c] = group_term(batch[i], staged + 3 * c * nblk, u, u < units);
        const int pass_sbs = min(8, nsb - s_next);
        for (int k = 0; k < pass_sbs; ++k, ++s_next) {
#pragma unroll
          for (int c = 0; c < NR; ++c) fold[c].add(__shfl_sync(FULL_MASK, t[c], 4 * k));
          if (++in_chunk == cs || s_next + 1 == nsb) {
            in_chunk = 0;
#pragma unroll
            for (int c = 0; c < NR; ++c) fold[c].end_chunk();
          }
        }
      }
      u0 += 32 * ROW_BATCH;
      if (u0 - lane >= units) break;
      load_batch(u0);
    }
    if (lane < NR && lane < n) {
      float v = fold[0].total;
#pragma unroll
      for (int c = 1; c < NR; ++c)
        if (lane == c) v = fold[c].total;
      dst[(size_t)lane * stride_dst + row] = v;
    }
  }
}

// Entry points: grid (blocks), block (32, ROW_WARPS), dynamic shared memory 48 bytes a Q8_1
// block of each activation row. dst[c * stride_dst + r] = W[r] . y[c] for the n (at most NR)
// activation rows c, W the stack of vx0, vx1, vx2 (stacked.cuh); `cs` the contract's chunk size.
#define TREESPEC_MMQ_ROWS(tag, Unit, bytes, name, NR)                                          \
  extern "C" __global__ void __launch_bounds__(32 * ROW_WARPS) mmq_##tag##_##name(             \
      const void *__restrict__ vx0, const void *__restrict__ vx1,                              \
      const void *__restrict__ vx2, const int row1, const int row2,                            \
      const void *__restrict__ vy, float *__restrict__ dst, const int ncols, const int nrows,  \
      const int stride_y, const int stride_dst, const int n, const int cs) {                   \
    mmq_rows<Unit, bytes, NR>(vx0, vx1, vx2, row1, row2, (const uint8_t *)vy, dst, ncols,      \
                              nrows, stride_y, stride_dst, n, cs);                             \
  }

TREESPEC_MMQ_ROWS(q4_k, Q4kUnit, 144, row, 1)
TREESPEC_MMQ_ROWS(q4_k, Q4kUnit, 144, rows2, 2)
TREESPEC_MMQ_ROWS(q4_k, Q4kUnit, 144, rows4, 4)
TREESPEC_MMQ_ROWS(q6_k, Q6kUnit, 210, row, 1)
TREESPEC_MMQ_ROWS(q6_k, Q6kUnit, 210, rows2, 2)
TREESPEC_MMQ_ROWS(q6_k, Q6kUnit, 210, rows4, 4)

// ---- One activation row, a warp a weight row ----
//
// The same terms as `mmq_rows`, a warp a weight row and no loop over rows: a block is WARP_ROWS
// weight rows, and a lane holds UW super-blocks' units in flight, so that the kernel stays within
// 64 registers (UW = 2) and four blocks fit a multiprocessor (the tensor-core family's `_warp2`
// taught this: BENCHMARKS.md section 39). The activation row is staged as for `mmq_rows`. Two
// layouts of a row's units over the lanes:
//
// - by chunk (`mmq_<fmt>_warp`, `_warp4`): lane group k (lanes 4k .. 4k + 3) takes chunk k of
//   the row (rule 4: at most eight chunks of `cs` super-blocks), a lane a quarter (unit) of each
//   of the chunk's super-blocks in turn; the group's four integer sums are added by two shuffles
//   (exact), each of its lanes makes the same term and adds it to the chunk's sum in super-block
//   order, and the chunks' sums are added in chunk order (lane 0 stores). No lane folds another
//   group's terms, but a load touches eight pieces of the row `cs` super-blocks apart.
// - contiguous (`mmq_<fmt>_warpc`): lane l takes units l, l + 32, ... as `mmq_rows` does (a load
//   is 32 neighbouring units), and every lane folds each pass's eight terms in order.

#define WARP_ROWS 8  // src/gpu/mmq/launch_shape.rs `WARP_ROWS`

template <typename Unit, int bytes, int UW>
static __device__ __forceinline__ void mmq_warp(const void *vx0, const void *vx1, const void *vx2,
                                                int row1, int row2, const uint8_t *vy, float *dst,
                                                int ncols, int nrows, int stride_y, int n,
                                                int cs) {
  extern __shared__ int4 staged[];
  const int lane = threadIdx.x, q = lane & 3;
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const bool live = row < nrows;
  const int nsb = ncols / 256, nblk = ncols / 32;
  // This group's chunk: super-blocks [sb0, sb_end), empty for groups past the row's chunks.
  const int sb0 = (lane >> 2) * cs, sb_end = min(nsb, sb0 + cs);
  const uint8_t *wrow = nullptr;
  Unit batch[UW];
  auto load = [&](int i0) {
#pragma unroll
    for (int i = 0; i < UW; ++i) {
      const int sb = sb0 + i0 + i;
      if (sb < sb_end) batch[i].load(wrow, 4 * sb + q);
    }
  };
  if (live) {
    int w0;
    const uint8_t *vx = (const uint8_t *)stacked(vx0, vx1, vx2, row1, row2, row, &w0);
    wrow = vx + (size_t)(row - w0) * nsb * bytes;
    load(0);
  }
  pdl_enter();  // the first weights were loaded while the previous kernel finished (pdl.cuh)
  stage_rows<1>(vy, nblk, stride_y, n, staged);
  if (!live) return;  // uniform over the warp, after the block's barrier
  Fold fold;
  fold.start();
  for (int i0 = 0; i0 < cs; i0 += UW) {
    if (i0 > 0) load(i0);
#pragma unroll
    for (int i = 0; i < UW; ++i) {
      if (i0 + i >= cs) break;  // uniform: the shuffles need every lane
      const int sb = sb0 + i0 + i;
      const bool in = sb < sb_end;
      const float t = group_term(batch[i], staged, 4 * sb + q, in);
      if (in) fold.add(t);
    }
  }
  // The chunks' sums in chunk order (every lane runs the shuffles; lane 0 stores).
  const int chunks = (nsb + cs - 1) / cs;
  const float mine = fold.part;  // this lane's group's chunk sum
  for (int c = 0; c < chunks; ++c) {
    fold.part = __shfl_sync(FULL_MASK, mine, 4 * c);
    fold.end_chunk();
  }
  if (lane == 0) dst[row] = fold.total;
}

template <typename Unit, int bytes, int UW>
static __device__ __forceinline__ void mmq_warpc(const void *vx0, const void *vx1,
                                                 const void *vx2, int row1, int row2,
                                                 const uint8_t *vy, float *dst, int ncols,
                                                 int nrows, int stride_y, int n, int cs) {
  extern __shared__ int4 staged[];
  const int lane = threadIdx.x;
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const bool live = row < nrows;
  const int nsb = ncols / 256, units = 4 * nsb, nblk = ncols / 32;
  const uint8_t *wrow = nullptr;
  Unit batch[UW];
  auto load = [&](int base) {
#pragma unroll
    for (int i = 0; i < UW; ++i) {
      const int u = base + 32 * i + lane;
      if (u < units) batch[i].load(wrow, u);
    }
  };
  if (live) {
    int w0;
    const uint8_t *vx = (const uint8_t *)stacked(vx0, vx1, vx2, row1, row2, row, &w0);
    wrow = vx + (size_t)(row - w0) * nsb * bytes;
    load(0);
  }
  pdl_enter();
  stage_rows<1>(vy, nblk, stride_y, n, staged);
  if (!live) return;
  Fold fold;
  fold.start();
  int s_next = 0, in_chunk = 0;  // the next super-block to fold; its chunk's folded so far
  for (int base = 0;;) {
#pragma unroll
    for (int i = 0; i < UW; ++i) {
      const int u = base + 32 * i + lane;
      if (base + 32 * i >= units) break;  // uniform
      const float t = group_term(batch[i], staged, u, u < units);
      const int pass_sbs = min(8, nsb - s_next);
      for (int k = 0; k < pass_sbs; ++k, ++s_next) {
        fold.add(__shfl_sync(FULL_MASK, t, 4 * k));
        if (++in_chunk == cs || s_next + 1 == nsb) {
          in_chunk = 0;
          fold.end_chunk();
        }
      }
    }
    base += 32 * UW;
    if (base >= units) break;
    load(base);
  }
  if (lane == 0) dst[row] = fold.total;
}

// Entry points: grid ceil(rows / WARP_ROWS), block (32, WARP_ROWS), dynamic shared memory 48
// bytes a Q8_1 block of the activation row; arguments as `mmq_<fmt>_row`'s (n = 1, stride_dst
// unused).
#define TREESPEC_MMQ_WARP(tag, Unit, bytes, name, body, UW, MIN_BLOCKS)                          \
  extern "C" __global__ void __launch_bounds__(32 * WARP_ROWS, MIN_BLOCKS) mmq_##tag##_##name(    \
      const void *__restrict__ vx0, const void *__restrict__ vx1,                              \
      const void *__restrict__ vx2, const int row1, const int row2,                            \
      const void *__restrict__ vy, float *__restrict__ dst, const int ncols, const int nrows,  \
      const int stride_y, const int, const int n, const int cs) {                              \
    body<Unit, bytes, UW>(vx0, vx1, vx2, row1, row2, (const uint8_t *)vy, dst, ncols, nrows,   \
                          stride_y, n, cs);                                                    \
  }

TREESPEC_MMQ_WARP(q4_k, Q4kUnit, 144, warp, mmq_warp, 2, 4)
TREESPEC_MMQ_WARP(q4_k, Q4kUnit, 144, warp4, mmq_warp, 4, 2)
TREESPEC_MMQ_WARP(q4_k, Q4kUnit, 144, warpc, mmq_warpc, 2, 4)
TREESPEC_MMQ_WARP(q6_k, Q6kUnit, 210, warp, mmq_warp, 2, 4)
TREESPEC_MMQ_WARP(q6_k, Q6kUnit, 210, warp4, mmq_warp, 4, 2)
TREESPEC_MMQ_WARP(q6_k, Q6kUnit, 210, warpc, mmq_warpc, 2, 4)

// ---- Many activation rows: int8 tensor cores ----
//
// Block (32, WM): warp wm takes weight rows 16 wm .. 16 wm + 15 of the block's 16 WM (WM up to
// 8), by the block's 8 NT activation rows (NT tiles of 8). Each super-block's weights (the
// block's rows) and activations (8 NT rows x 288 bytes) are copied to shared memory by cp.async,
// TILE_STAGES - 1 super-blocks ahead of the one summed (TILE_STAGES buffers, so a buffer is
// refilled right after the barrier that ends its last use: two barriers a super-block), and each
// activation row's sub-block sums (exact) and d are worked out there once for the block's warps.
// A warp reads its weights from shared memory in MMA fragment order. Per super-block and 16 x 8
// tile (`tile_super`): eight m16n8k32 MMAs for Q4_K's sub-blocks, sixteen m16n8k16 for Q6_K's
// groups, each scaled by its integer scale into `isum`; Q4_K's min term `msum` by two m16n8k16
// MMAs of the eight mins with the low and the high bytes of the eight sub-block sums. Then the
// term and the fold (rule 4). (BENCHMARKS.md section 41: weights through shared memory, eight
// warps a block and one MMA a sub-block made the 64-row pass of the 8B shape's gate+up 1.4x
// faster than weights loaded by each warp into registers.)
//
// Grid (ceil(rows / (16 WM)), ceil(n / (8 NT)), Z): with Z = 1 a block sums every chunk of the row
// in order; with Z = chunks (a pass whose tiles alone would not fill the GPU) block z sums chunk
// z, writes it to `work` ([Z][n][rows] floats), and the tile's last block to finish (a counter a
// tile, reset by it for the next launch) adds the Z chunk sums in order.

#define TILE_RAW 304  // bytes a staged activation row takes (288 and 16 of padding: no bank conflicts)
#define TILE_STAGES 3  // super-blocks of weights and activations in shared memory at once

static __device__ __forceinline__ void mma_k16(int c[4], const int a[2], const int b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%7,%7,%7,%7};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(b), "r"(0));
}

// The mins (u8) times the low bytes (u8) or the high bytes (s8) of the sub-block sums.
static __device__ __forceinline__ void mma_k16_uu(int c[4], const int a[2], const int b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%7,%7,%7,%7};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(b), "r"(0));
}

static __device__ __forceinline__ void mma_k16_us(int c[4], const int a[2], const int b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%7,%7,%7,%7};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(b), "r"(0));
}

// Per staged activation row: d, then the low and the high bytes of its eight sub-block sums
// (sub-blocks 0-3 and 4-7 a word each).
struct TileMeta {
  float d;
  int lo[2], hi[2];
  int pad[3];
};

// Copy super-block s's activations of rows tok0 .. tok0 + rows - 1 (rows from n on: zeros) into
// `raw` (rows x TILE_RAW bytes), 18 copies of 16 bytes a row, by all the block's threads.
static __device__ __forceinline__ void tile_copy(uint8_t *raw, const uint8_t *vy, int s, int tok0,
                                                 int rows, int n, int stride_y) {
  const int tid = threadIdx.x + 32 * threadIdx.y, nt = 32 * blockDim.y;
  for (int i = tid; i < rows * 18; i += nt) {
    const int r = i / 18, k = i - r * 18;
    uint8_t *to = raw + r * TILE_RAW + 16 * k;
    if (tok0 + r < n) {
      cp_async16(to, vy + ((size_t)(tok0 + r) * stride_y + 8 * s) * 36 + 16 * k);
    } else {
      *(int4 *)to = make_int4(0, 0, 0, 0);
    }
  }
}

// Each staged row's d and sub-block sums (exact) into `meta`.
static __device__ __forceinline__ void tile_meta(const uint8_t *raw, TileMeta *meta, int rows) {
  const int tid = threadIdx.x + 32 * threadIdx.y, nt = 32 * blockDim.y;
  for (int i = tid; i < rows * 8; i += nt) {
    const int r = i >> 3, j = i & 7;
    const int *w = (const int *)(raw + r * TILE_RAW + 36 * j);
    int s = 0;
#pragma unroll
    for (int k = 1; k < 9; ++k) s = __dp4a(w[k], 0x01010101, s);
    uint8_t *m = (uint8_t *)&meta[r];
    m[4 + j] = (uint8_t)(s & 0xFF);    // lo[j / 4], byte j % 4
    m[12 + j] = (uint8_t)(s >> 8);     // hi (signed)
    if (j == 0) meta[r].d = __low2float(*(const half2 *)w);
  }
}

// A warp's Q4_K weights for one super-block: rows g and g + 8 of its 16, in fragment order.
struct Q4kFrag {
  // Shared-memory bytes a weight row's super-block takes (`stage`), and where in them it starts.
  static constexpr int SLOT = 144;
  static __device__ __forceinline__ int offset(const uint8_t *) { return 0; }
  // Piece k (of SLOT / 16) of the copy of [src, src + 144) (16-byte aligned) to `slot`.
  static __device__ __forceinline__ void stage(uint8_t *slot, const uint8_t *src, const uint8_t *,
                                               int k) {
    cp_async16(slot + 16 * k, src + 16 * k);
  }
  int qs[2][4][2];  // [row g / g + 8][pair jj][word t / 4 + t of the pair's 32 bytes]
  int hdr[2][4];    // dm, scales[12]
  __device__ __forceinline__ void load(const uint8_t *const rows[2], int t) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int *blk = (const int *)rows[r];
      const int4 h = *(const int4 *)blk;
      hdr[r][0] = h.x;
      hdr[r][1] = h.y;
      hdr[r][2] = h.z;
      hdr[r][3] = h.w;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        qs[r][jj][0] = blk[4 + 8 * jj + t];
        qs[r][jj][1] = blk[4 + 8 * jj + 4 + t];
      }
    }
  }
};

struct Q6kFrag {
  // A 210-byte block starts 2-byte aligned: the 16-byte aligned window around it (224 bytes) is
  // copied, and read from the block's offset in it.
  static constexpr int SLOT = 224;
  static __device__ __forceinline__ int offset(const uint8_t *src) {
    return (int)((uintptr_t)src & 15);
  }
  // Piece k (of SLOT / 16) of the copy of the window of [src, src + 210) to `slot`; `end`: the
  // end of the matrix, past which a piece must not read (there, two bytes at a time up to `end`).
  static __device__ __forceinline__ void stage(uint8_t *slot, const uint8_t *src,
                                               const uint8_t *end, int k) {
    const uint8_t *src0 = src - offset(src), *from = src0 + 16 * k;
    if (from + 16 <= end) {
      cp_async16(slot + 16 * k, from);
    } else {
      for (const uint8_t *p = from < src ? src : from; p < end && p < from + 16; p += 2)
        *(uint16_t *)(slot + (p - src0)) = *(const uint16_t *)p;
    }
  }
  int ql[2][2][2][2];  // [row][half n][l half][p & 1]
  int qh[2][2][2];     // [row][half n][l half]
  int scw[2][4];       // the 16 scales
  float d[2];
  __device__ __forceinline__ void load(const uint8_t *const rows[2], int t) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t *blk = rows[r];
#pragma unroll
      for (int hn = 0; hn < 2; ++hn)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          ql[r][hn][hf][0] = load_int_a2(blk + 64 * hn + 16 * hf + 4 * t);
          ql[r][hn][hf][1] = load_int_a2(blk + 64 * hn + 32 + 16 * hf + 4 * t);
          qh[r][hn][hf] = load_int_a2(blk + 128 + 32 * hn + 16 * hf + 4 * t);
        }
#pragma unroll
      for (int k = 0; k < 4; ++k) scw[r][k] = load_int_a2(blk + 192 + 4 * k);
      d[r] = __half2float(__ushort_as_half(*(const uint16_t *)(blk + 208)));
    }
  }
};

// c += a . b (m16n8k32, s8).
static __device__ __forceinline__ void mma_k32_acc(int c[4], const int a[4], const int b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A staged row's B fragment word for sub-block j: values 4t .. 4t + 3 (k = 0) or 16 + 4t ..
// (k = 1) of it.
static __device__ __forceinline__ int b_word(const uint8_t *raw, int col, int j, int t, int k) {
  return ((const int *)(raw + col * TILE_RAW + 36 * j + 4))[4 * k + t];
}

// The terms of super-block s for the warp's 16 weight rows and the NT tiles of 8 activation rows,
// added to `f` (C fragment order: (row g, col 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)).
//
// Q4_K: an MMA a sub-block and tile on the 4-bit values, its integer result times the row's 6-bit
// scale into `isum` (rows g and g + 8 have their own scales: c[0..1] and c[2..3]).
template <int NT>
static __device__ __forceinline__ void tile_super(const Q4kFrag &a, const uint8_t *raw,
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
  // msum: A = the mins (k 0-3: lanes t = 0, k 4-7: t = 1, zeros beyond), B = the sums' bytes.
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

// Q6_K: sixteen 16-value groups with int8 scales: an MMA a group and tile, scaled into `isum`.
template <int NT>
static __device__ __forceinline__ void tile_super(const Q6kFrag &a, const uint8_t *raw,
                                                  const TileMeta *meta, Fold (&f)[NT][4]) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  int isum[NT][4];
#pragma unroll
  for (int T = 0; T < NT; ++T)
#pragma unroll
    for (int e = 0; e < 4; ++e) isum[T][e] = 0;
  // Sub-block j = 4 hn + p (values 128 hn + 32 p ..), its halves hf: groups 2 j + hf, scale
  // 8 hn + 2 p + hf.
#pragma unroll
  for (int hn = 0; hn < 2; ++hn) {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int A[2] = {q6k_vals(a.ql[0][hn][hf][p & 1], a.qh[0][hn][hf], p >> 1, 2 * p),
                          q6k_vals(a.ql[1][hn][hf][p & 1], a.qh[1][hn][hf], p >> 1, 2 * p)};
        const int gi = 8 * hn + 2 * p + hf;
        const int s0 = sbyte(a.scw[0][gi >> 2], gi & 3), s1 = sbyte(a.scw[1][gi >> 2], gi & 3);
#pragma unroll
        for (int T = 0; T < NT; ++T) {
          int c[4];
          mma_k16(c, A, b_word(raw, 8 * T + g, 4 * hn + p, t, hf));
          isum[T][0] += s0 * c[0];
          isum[T][1] += s0 * c[1];
          isum[T][2] += s1 * c[2];
          isum[T][3] += s1 * c[3];
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

template <int NT, typename Frag, int bytes>
static __device__ __forceinline__ void mmq_tile(const void *vx0, const void *vx1, const void *vx2,
                                                int row1, int row2, const uint8_t *vy, float *dst,
                                                int ncols, int nrows, int stride_y,
                                                int stride_dst, int n, int cs, float *work,
                                                unsigned int *counters) {
  constexpr int ROWS = 8 * NT;
  extern __shared__ __align__(16) uint8_t smem[];
  // The block's weight rows (up to 16 * 8): where each starts, where its matrix ends.
  __shared__ const uint8_t *wrow[128], *wend[128];
  __shared__ unsigned int last;
  const int lane = threadIdx.x, wm = threadIdx.y, g = lane >> 2, t = lane & 3;
  const int WM = blockDim.y, tid = lane + 32 * wm, nthreads = 32 * WM;
  const int brow0 = blockIdx.x * 16 * WM, row0 = brow0 + 16 * wm, tok0 = blockIdx.y * ROWS;
  const int brows = min(16 * WM, nrows - brow0);
  const bool live = row0 < nrows;
  const int nsb = ncols / 256;
  const int Z = gridDim.z, z = blockIdx.z;
  const int s_begin = Z == 1 ? 0 : z * cs, s_end = Z == 1 ? nsb : min(nsb, (z + 1) * cs);
  // Buffers by address (a runtime index into an array would put it on the stack): stage k holds
  // the activations, then the weights, of super-block s_begin + k (mod TILE_STAGES).
  const int stage_bytes = ROWS * TILE_RAW + 16 * WM * Frag::SLOT;
  auto raw = [&](int s) { return smem + ((s - s_begin) % TILE_STAGES) * stage_bytes; };
  auto wsm = [&](int s) { return raw(s) + ROWS * TILE_RAW; };
  TileMeta *meta = (TileMeta *)(smem + TILE_STAGES * stage_bytes);
  for (int r = tid; r < brows; r += nthreads) {
    int m0;
    const uint8_t *m = (const uint8_t *)stacked(vx0, vx1, vx2, row1, row2, brow0 + r, &m0);
    const int m1 = brow0 + r >= row2 ? nrows : brow0 + r >= row1 ? row2 : row1;
    wrow[r] = m + (size_t)(brow0 + r - m0) * nsb * bytes;
    wend[r] = m + (size_t)(m1 - m0) * nsb * bytes;
  }
  __syncthreads();
  // Super-block s's weights (every thread a share of the rows' copies); nothing past s_end.
  auto copy_w = [&](int s) {
    if (s >= s_end) return;
    uint8_t *w = wsm(s);
    constexpr int PER = Frag::SLOT / 16;
    for (int i = tid; i < brows * PER; i += nthreads) {
      const int r = i / PER, k = i - r * PER;
      Frag::stage(w + r * Frag::SLOT, wrow[r] + (size_t)s * bytes, wend[r], k);
    }
  };
  auto copy_a = [&](int s) {
    if (s < s_end) tile_copy(raw(s), vy, s, tok0, ROWS, n, stride_y);
    cp_async_commit();
  };
  // The weights do not depend on the launch before (PDL); the activations do.
#pragma unroll
  for (int k = 0; k < TILE_STAGES - 1; ++k) copy_w(s_begin + k);
  pdl_enter();
#pragma unroll
  for (int k = 0; k < TILE_STAGES - 1; ++k) copy_a(s_begin + k);
  Fold fold[NT][4];
#pragma unroll
  for (int T = 0; T < NT; ++T)
#pragma unroll
    for (int e = 0; e < 4; ++e) fold[T][e].start();
  int in_chunk = 0;  // super-blocks of the current chunk summed (Z = 1)
  for (int s = s_begin; s < s_end; ++s) {
    cp_async_wait<TILE_STAGES - 2>();  // super-block s's copies are done ...
    __syncthreads();                    // ... for every thread, and every warp is done with s - 1
    copy_w(s + TILE_STAGES - 1);        // into s - 1's buffers
    copy_a(s + TILE_STAGES - 1);
    tile_meta(raw(s), meta, ROWS);
    __syncthreads();
    if (live) {
      const uint8_t *w = wsm(s) + (16 * wm + g) * Frag::SLOT;
      const uint8_t *rows[2] = {w + Frag::offset(wrow[16 * wm + g] + (size_t)s * bytes),
                                w + 8 * Frag::SLOT +
                                    Frag::offset(wrow[16 * wm + g + 8] + (size_t)s * bytes)};
      Frag cur;
      cur.load(rows, t);
      tile_super<NT>(cur, raw(s), meta, fold);
    }
    if (Z == 1 && (++in_chunk == cs || s + 1 == nsb)) {
      in_chunk = 0;
#pragma unroll
      for (int T = 0; T < NT; ++T)
#pragma unroll
        for (int e = 0; e < 4; ++e) fold[T][e].end_chunk();
    }
  }
  // Outputs: (weight row row0 + g (+ 8), activation row tok0 + 8 T + 2 t (+ 1)).
  if (Z == 1) {
    if (!live) return;
#pragma unroll
    for (int T = 0; T < NT; ++T)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = tok0 + 8 * T + 2 * t + (e & 1);
        if (tok < n) dst[(size_t)tok * stride_dst + row0 + g + 8 * (e >> 1)] = fold[T][e].total;
      }
    return;
  }
  // Split over chunks: this block's chunk sum to the workspace, then the tile's last block adds
  // the Z sums in chunk order.
  if (live) {
#pragma unroll
    for (int T = 0; T < NT; ++T)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = tok0 + 8 * T + 2 * t + (e & 1);
        if (tok < n)
          work[((size_t)z * n + tok) * nrows + row0 + g + 8 * (e >> 1)] = fold[T][e].part;
      }
  }
  __threadfence();
  __syncthreads();
  const unsigned int tile = blockIdx.y * gridDim.x + blockIdx.x;
  if (lane == 0 && wm == 0) last = atomicAdd(&counters[tile], 1u);
  __syncthreads();
  if (last != (unsigned int)Z - 1) return;
  __threadfence();
  if (lane == 0 && wm == 0) counters[tile] = 0;
  if (!live) return;
#pragma unroll
  for (int T = 0; T < NT; ++T)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int tok = tok0 + 8 * T + 2 * t + (e & 1);
      const int col = row0 + g + 8 * (e >> 1);
      if (tok >= n) continue;
      float total = 0.0f;
      for (int zz = 0; zz < Z; ++zz)
        total = __fadd_rn(total, __ldcg(&work[((size_t)zz * n + tok) * nrows + col]));
      dst[(size_t)tok * stride_dst + col] = total;
    }
}

// Entry points: grid (ceil(rows / (16 WM)), ceil(n / (8 NT)), Z), block (32, WM) (WM <= 8), dynamic
// shared memory `tile_shared` bytes (src/gpu/mmq.rs: TILE_STAGES stages and the sums).
// dst[c * stride_dst + r] = W[r] . y[c]; every
// row count of the stack a multiple of 16.
#define TREESPEC_MMQ_TILE(tag, Frag, bytes, NT)                                                        \
  extern "C" __global__ void __launch_bounds__(256) mmq_##tag##_t##NT(                         \
      const void *__restrict__ vx0, const void *__restrict__ vx1,                              \
      const void *__restrict__ vx2, const int row1, const int row2,                            \
      const void *__restrict__ vy, float *__restrict__ dst, const int ncols, const int nrows,  \
      const int stride_y, const int stride_dst, const int n, const int cs,                     \
      float *__restrict__ work, unsigned int *__restrict__ counters) {                         \
    mmq_tile<NT, Frag, bytes>(vx0, vx1, vx2, row1, row2, (const uint8_t *)vy, dst, ncols, nrows,       \
                      stride_y, stride_dst, n, cs, work, counters);                            \
  }

TREESPEC_MMQ_TILE(q4_k, Q4kFrag, 144, 1)
TREESPEC_MMQ_TILE(q4_k, Q4kFrag, 144, 2)
TREESPEC_MMQ_TILE(q4_k, Q4kFrag, 144, 4)
TREESPEC_MMQ_TILE(q4_k, Q4kFrag, 144, 8)
TREESPEC_MMQ_TILE(q6_k, Q6kFrag, 210, 1)
TREESPEC_MMQ_TILE(q6_k, Q6kFrag, 210, 2)
TREESPEC_MMQ_TILE(q6_k, Q6kFrag, 210, 4)
TREESPEC_MMQ_TILE(q6_k, Q6kFrag, 210, 8)
