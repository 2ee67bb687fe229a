// The fused pieces of treespec's GPU decoder step (src/gpu/step/): every kernel here works row
// by row with a fixed summation order, so a row's result never depends on how many rows the
// launch holds (batch invariance: a verify pass gives each row exactly a one-row step's values).
// Row counts, positions, cache slots and token ids are read from device memory, so a captured CUDA
// graph replays the same launches for every step.
//
// Activations for the quantised products are written straight in llama.cpp's Q8_1 layout (blocks
// of 32: half scale d = amax / 127, half sum, 32 int8), with the formula of the stand-alone
// quantiser in mmvq.cu, rows padded with zero blocks to `qblocks` (MATRIX_ROW_PADDING). A
// quantiser's `group` is the values that share d: 32 (each block its own, llama.cpp's Q8_1, for
// the dp4a products) or 256 (the eight blocks of a super-block share the largest one's d: the
// products of kernels/mmq.cu, whose contract needs it; src/gpu/mmq.rs `ACT_GROUP`).
//
// - norm_q8: x += delta (optional), then RMSNorm(x) * w quantised to Q8_1, into the row's slot.
// - qkv_rope: bias, per-head RMSNorm (Qwen3), RoPE from the row's position; queries to [nh, n, hd],
//   keys and values into the KV cache at the row's slot.
// - silu_mul_q8: silu(gate) * up quantised to Q8_1.
// - gather_rows: rows of a dense f32 table by token id.
// - norm2_q8: an MTP head's final norm then hidden-state norm of one row, quantised.
// - quant_rows: f32 rows to Q8_1 (and f16).
// - next_token: the token a greedy chain step took, written where the next step reads its id.
// CPU references: src/gpu/step/ (`reference`), checked by `treespec selftest --device cuda`.

#include <cuda_fp16.h>
#include <stdint.h>

#include "pdl.cuh"

#define QK8_1 32
#define STEP_THREADS 256

struct block_q8_1_t {
  half2 ds;
  int8_t qs[QK8_1];
};

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) x += __shfl_xor_sync(0xffffffff, x, m, 32);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, m, 32));
  return x;
}

// One warp quantises the 32 values its lanes hold into one Q8_1 block.
__device__ __forceinline__ void warp_quantize(float xi, block_q8_1_t *b, int lane) {
  const float amax = warp_max(fabsf(xi));
  const float sum = warp_sum(xi);
  const float d = amax / 127.0f;
  const int8_t q = (amax == 0.0f) ? 0 : (int8_t)roundf(xi / d);
  b->qs[lane] = q;
  if (lane == 0) {
    b->ds = make_half2(__float2half(d), __float2half(sum));
  }
}

// One warp quantises 256 values (v[k]: value 32 k + lane) into the eight Q8_1 blocks at b, with
// one d for all eight (`group` 256) or one a block (32: eight times warp_quantize).
__device__ __forceinline__ void warp_quantize8(const float v[8], block_q8_1_t *b, int lane,
                                               int group) {
  if (group != 256) {
#pragma unroll
    for (int k = 0; k < 8; ++k) warp_quantize(v[k], b + k, lane);
    return;
  }
  float m = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(v[k]));
  const float amax = warp_max(m);
  const float d = amax / 127.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float sum = warp_sum(v[k]);
    b[k].qs[lane] = (amax == 0.0f) ? 0 : (int8_t)roundf(v[k] / d);
    if (lane == 0) b[k].ds = make_half2(__float2half(d), __float2half(sum));
  }
}

// Quantise one row of h values, value i = value(i) (zero from h on), into its qblocks Q8_1
// blocks at q8 + q8_at (a super-block a warp for `group` 256, a block a warp for 32, the block's
// warps taking them in turn); with f16 set, each value also as a half at f16[f16_at + i] (q8 may
// then be null).
template <typename Value>
__device__ __forceinline__ void quantize_row(const Value &value, block_q8_1_t *q8, size_t q8_at,
                                             __half *f16, size_t f16_at, int h, int qblocks,
                                             int group) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (group == 256) {
    // A super-block a warp (qblocks is then a multiple of 8).
    for (int sb = warp; sb < qblocks / 8; sb += warps) {
      float v[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int i = sb * 256 + k * QK8_1 + lane;
        v[k] = i < h ? value(i) : 0.f;
        if (f16 != nullptr && i < h) f16[f16_at + i] = __float2half_rn(v[k]);
      }
      if (q8 != nullptr) warp_quantize8(v, q8 + q8_at + 8 * sb, lane, group);
    }
    return;
  }
  for (int b = warp; b < qblocks; b += warps) {
    const int i = b * QK8_1 + lane;
    const float v = i < h ? value(i) : 0.f;
    if (q8 != nullptr) warp_quantize(v, q8 + q8_at + b, lane);
    if (f16 != nullptr && i < h) f16[f16_at + i] = __float2half_rn(v);
  }
}

// Sum over a block of STEP_THREADS threads in a fixed order (warp butterflies, then the warps in
// order by thread 0); every thread gets the total.
__device__ __forceinline__ float block_sum(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) t += scratch[w];
    scratch[32] = t;
  }
  __syncthreads();
  const float t = scratch[32];
  __syncthreads();
  return t;
}

// Grid: n rows; block up to 1024 threads. Row r: x[r] += delta[r] (when delta is set, written back),
// then q8[slot] = Q8_1(x[r] / rms(x[r]) * w) with slot = slots ? slots[r] : r (negative: skip):
// `qblocks` blocks at q8 + slot * stride (stride > qblocks: one part of a wider row, an MTP head's
// concatenated input). With `f16` set (a wide pass's layers: src/gpu/wide.rs), the normed row also
// as h halves at f16 + slot * h, the input of the cuBLAS product, which then needs no conversion;
// then q8 may be null (the product reads only the halves).
extern "C" __global__ void norm_q8(float *__restrict__ x, const float *__restrict__ delta,
                                   const float *__restrict__ w, const int *__restrict__ slots,
                                   block_q8_1_t *__restrict__ q8, int h, int qblocks, int stride,
                                   float eps, __half *__restrict__ f16, int group) {
  __shared__ float scratch[33];
  pdl_enter();
  const int r = blockIdx.x;
  float *xr = x + (size_t)r * h;
  float ss = 0.f;
  for (int i = threadIdx.x; i < h; i += blockDim.x) {
    float v = xr[i];
    if (delta != nullptr) {
      v += delta[(size_t)r * h + i];
      xr[i] = v;
    }
    ss = fmaf(v, v, ss);
  }
  const float total = block_sum(ss, scratch);
  const int slot = slots != nullptr ? slots[r] : r;
  if (slot < 0) return;
  const float inv = rsqrtf(total / (float)h + eps);
  quantize_row([&](int i) { return xr[i] * inv * w[i]; }, q8, (size_t)slot * stride, f16,
               (size_t)slot * h, h, qblocks, group);
}

// A K or V pair (a, b) at elements i0, i1 of the cache row at `at`, and in its f16 shadow if any.
__device__ __forceinline__ void store_kv(float *__restrict__ cache, __half *__restrict__ shadow,
                                         size_t at, int i0, int i1, float a, float b) {
  cache[at + i0] = a;
  cache[at + i1] = b;
  if (shadow != nullptr) {
    shadow[at + i0] = __float2half_rn(a);
    shadow[at + i1] = __float2half_rn(b);
  }
}

// Grid: (n rows, nh + 2 * nkv heads); block hd / 2 threads (one rotation pair each).
// proj[r] = [q heads | k heads | v heads] (row stride `stride`); bias, q_norm, k_norm optional.
// With `q_gated` (Qwen3.5) each query head is followed by its output gate (the attention's
// combine reads it); RoPE turns the first `rot` dimensions of a head (half-split pairs), all of
// them where rot = hd (interleaved pairs then too). cos/sin: [positions, rot / 2].
// k16 / v16 (optional): the cache's f16 shadow (same layout), which wide passes' attention reads.
extern "C" __global__ void qkv_rope(const float *__restrict__ proj, int stride,
                                    const float *__restrict__ bias,
                                    const float *__restrict__ q_norm,
                                    const float *__restrict__ k_norm,
                                    const float *__restrict__ cos_t,
                                    const float *__restrict__ sin_t,
                                    const unsigned int *__restrict__ pos,
                                    const unsigned int *__restrict__ slots,
                                    float *__restrict__ q_out, float *__restrict__ k_cache,
                                    float *__restrict__ v_cache, long long kv_stride, int n,
                                    int nh, int nkv, int hd, float eps, int interleaved,
                                    __half *__restrict__ k16, __half *__restrict__ v16,
                                    int q_gated, int rot) {
  __shared__ float scratch[33];
  __shared__ float turn[256];
  pdl_enter();
  const int r = blockIdx.x;
  const int head = blockIdx.y;
  const int half_hd = hd / 2;
  const int t = threadIdx.x;
  // q, k and v heads sit back to back; a gated query head is followed by its gate (2 hd).
  const int qw = q_gated ? 2 * hd : hd;
  const int col = head < nh ? head * qw : nh * qw + (head - nh) * hd;
  const float *src = proj + (size_t)r * stride + col;
  const int i0 = interleaved ? 2 * t : t;
  const int i1 = interleaved ? 2 * t + 1 : t + half_hd;
  float a = src[i0], b = src[i1];
  if (bias != nullptr) {
    a += bias[col + i0];
    b += bias[col + i1];
  }
  const bool is_q = head < nh;
  const bool is_k = !is_q && head < nh + nkv;
  const unsigned int slot = slots[r];
  if (!is_q && !is_k) {
    const int g = head - nh - nkv;
    store_kv(v_cache, v16, (size_t)g * kv_stride + (size_t)slot * hd, i0, i1, a, b);
    return;
  }
  const float *norm = is_q ? q_norm : k_norm;
  if (norm != nullptr) {
    const float total = block_sum(a * a + b * b, scratch);
    const float inv = rsqrtf(total / (float)hd + eps);
    a = a * inv * norm[i0];
    b = b * inv * norm[i1];
  }
  const unsigned int p = pos[r];
  float ra, rb;
  if (rot == hd) {
    const float c = cos_t[(size_t)p * half_hd + t];
    const float s = sin_t[(size_t)p * half_hd + t];
    ra = a * c - b * s;
    rb = a * s + b * c;
  } else {
    // Partial RoPE (half-split pairs j, j + rot / 2 of the first rot dimensions; the rest as
    // they are): the pairs are other threads' values, so through shared memory.
    turn[i0] = a;
    turn[i1] = b;
    __syncthreads();
    const int hr = rot / 2;
    float v[2] = {a, b};
    const int e[2] = {i0, i1};
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (e[k] < rot) {
        const int j = e[k] < hr ? e[k] : e[k] - hr;
        const float c = cos_t[(size_t)p * hr + j];
        const float s = sin_t[(size_t)p * hr + j];
        v[k] = e[k] < hr ? turn[j] * c - turn[j + hr] * s : turn[j] * s + turn[j + hr] * c;
      }
    }
    ra = v[0];
    rb = v[1];
  }
  if (is_q) {
    float *dst = q_out + ((size_t)head * n + r) * hd;
    dst[i0] = ra;
    dst[i1] = rb;
  } else {
    const int g = head - nh;
    store_kv(k_cache, k16, (size_t)g * kv_stride + (size_t)slot * hd, i0, i1, ra, rb);
  }
}

// Grid: (n rows, ceil(qblocks / (8 * SILU_BLOCKS))); block STEP_THREADS (8 warps, SILU_BLOCKS
// Q8_1 blocks each, their loads issued together: a super-block, quantised as `group` says).
// gu[r] = [gate (ffn) | up (ffn)] with row stride `stride`. With `f16` set, the row also as ffn
// halves at f16 + r * ffn (as norm_q8), and q8 may be null. With `gu16` set (a wide pass, whose
// gate/up product wrote halves), gate and up are read from it instead of gu, same layout in halves.
#define SILU_BLOCKS 8
extern "C" __global__ void silu_mul_q8(const float *__restrict__ gu, int stride, int ffn,
                                       block_q8_1_t *__restrict__ q8, int qblocks,
                                       __half *__restrict__ f16,
                                       const __half *__restrict__ gu16, int group) {
  pdl_enter();
  const int r = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int b0 = (blockIdx.y * (blockDim.x >> 5) + warp) * SILU_BLOCKS;
  float g[SILU_BLOCKS], u[SILU_BLOCKS];
#pragma unroll
  for (int k = 0; k < SILU_BLOCKS; ++k) {
    const int i = (b0 + k) * QK8_1 + lane;
    const bool in = b0 + k < qblocks && i < ffn;
    const size_t at = (size_t)r * stride + i;
    if (gu16 != nullptr) {
      g[k] = in ? __half2float(gu16[at]) : 0.f;
      u[k] = in ? __half2float(gu16[at + ffn]) : 0.f;
    } else {
      g[k] = in ? gu[at] : 0.f;
      u[k] = in ? gu[at + ffn] : 0.f;
    }
  }
  // qblocks is a multiple of 16: a warp's blocks are all in the row or all past it.
  if (b0 >= qblocks) return;
  float v[SILU_BLOCKS];
#pragma unroll
  for (int k = 0; k < SILU_BLOCKS; ++k) {
    const int i = (b0 + k) * QK8_1 + lane;
    v[k] = 0.f;
    if (i < ffn) {
      v[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
      if (f16 != nullptr) f16[(size_t)r * ffn + i] = __float2half_rn(v[k]);
    }
  }
  if (q8 != nullptr) warp_quantize8(v, q8 + (size_t)r * qblocks + b0, lane, group);
}

// Grid: (n rows, ceil(h / STEP_THREADS)); x[r] = table[ids[r]].
extern "C" __global__ void gather_rows(const float *__restrict__ table,
                                       const unsigned int *__restrict__ ids,
                                       float *__restrict__ x, int h) {
  pdl_enter();
  const int r = blockIdx.x;
  const int i = blockIdx.y * blockDim.x + threadIdx.x;
  if (i < h) x[(size_t)r * h + i] = table[(size_t)ids[r] * h + i];
}

// An MTP head's chain step, fed its own last output (src/gpu/step/cuda/head_chain.rs). Grid: 1 row; block
// up to 1024 threads. o = RMSNorm(x) * w1 (the head's final norm: the output a chain feeds back),
// then q8 = Q8_1(RMSNorm(o) * w2) (the head's hidden-state norm): both norms of the row in one
// launch, o recomputed from x rather than stored. `qblocks` blocks are written (zero past h).
extern "C" __global__ void norm2_q8(const float *__restrict__ x, const float *__restrict__ w1,
                                    const float *__restrict__ w2, block_q8_1_t *__restrict__ q8,
                                    int h, int qblocks, float eps, int group) {
  __shared__ float scratch[33];
  pdl_enter();
  float ss = 0.f;
  for (int i = threadIdx.x; i < h; i += blockDim.x) ss = fmaf(x[i], x[i], ss);
  const float inv1 = rsqrtf(block_sum(ss, scratch) / (float)h + eps);
  float ss2 = 0.f;
  for (int i = threadIdx.x; i < h; i += blockDim.x) {
    const float o = x[i] * inv1 * w1[i];
    ss2 = fmaf(o, o, ss2);
  }
  const float inv2 = rsqrtf(block_sum(ss2, scratch) / (float)h + eps);
  quantize_row([&](int i) { return x[i] * inv1 * w1[i] * inv2 * w2[i]; }, q8, 0, nullptr, 0, h,
               qblocks, group);
}

// One thread: the token a greedy chain step took (the first id of its top-k words, an index into
// `vocab` when the head drafts among a reduced vocabulary) written where the next step's
// embedding lookup reads its id.
extern "C" __global__ void next_token(const unsigned int *__restrict__ top,
                                      const unsigned int *__restrict__ vocab,
                                      unsigned int *__restrict__ ids) {
  pdl_enter();
  if (threadIdx.x == 0) {
    const unsigned int i = top[0];
    ids[0] = vocab != nullptr ? vocab[i] : i;
  }
}

// Grid: (n rows, ceil(units / 8)), block STEP_THREADS: a warp a unit, a Q8_1 block (`group`
// 32) or a super-block of eight (256; qblocks then a multiple of 8). Row r of x (`width` values,
// rows `stride` apart) as Q8_1: `qblocks` blocks at q8 + r * qblocks, and with `f16` set as
// width halves at f16 + r * width (q8 may then be null): the input of a product after a kernel
// that writes f32 rows (a Gated DeltaNet's output).
extern "C" __global__ void quant_rows(const float *__restrict__ x, int stride, int width,
                                      block_q8_1_t *__restrict__ q8, int qblocks,
                                      __half *__restrict__ f16, int group) {
  pdl_enter();
  const int r = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int unit = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const float *xr = x + (size_t)r * stride;
  if (group == 256) {
    const int sb = unit;
    if (sb >= qblocks / 8) return;
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int i = sb * 256 + k * QK8_1 + lane;
      v[k] = i < width ? xr[i] : 0.f;
      if (f16 != nullptr && i < width) f16[(size_t)r * width + i] = __float2half_rn(v[k]);
    }
    if (q8 != nullptr) warp_quantize8(v, q8 + (size_t)r * qblocks + 8 * sb, lane, group);
    return;
  }
  const int b = unit;
  if (b >= qblocks) return;
  const int i = b * QK8_1 + lane;
  const float v = i < width ? xr[i] : 0.f;
  if (q8 != nullptr) warp_quantize(v, q8 + (size_t)r * qblocks + b, lane);
  if (f16 != nullptr && i < width) f16[(size_t)r * width + i] = __float2half_rn(v);
}

// K/V compaction after a tree's accepted path, every layer in one launch (src/gpu/step/,
// `keep`). Grid: (layers, 2 (K, V), kv heads); block hd threads. caches: per layer the f32 K and V
// caches and their f16 shadows (null where there are none), [layers][4] addresses. rows: `count`
// offsets from `base`, ascending: row base + rows[i] moves to base + i. Each thread moves its own
// column of every row in ascending order, so a row is read before any later move overwrites it
// (rows[i] >= i, and later moves write only past i) and no two threads touch one element.
extern "C" __global__ void kv_keep(const unsigned long long *__restrict__ caches,
                                   const unsigned int *__restrict__ rows, int count, int base,
                                   long long kv_stride, int hd) {
  pdl_enter();
  const int layer = blockIdx.x, which = blockIdx.y, g = blockIdx.z, d = threadIdx.x;
  if (d >= hd) return;
  const size_t head = (size_t)g * kv_stride;
  float *f = reinterpret_cast<float *>(caches[layer * 4 + which]) + head;
  __half *h = reinterpret_cast<__half *>(caches[layer * 4 + 2 + which]);
  if (h != nullptr) h += head;
  for (int i = 0; i < count; ++i) {
    const size_t src = (size_t)(base + (int)rows[i]) * hd + d, dst = (size_t)(base + i) * hd + d;
    if (src == dst) continue;
    f[dst] = f[src];
    if (h != nullptr) h[dst] = h[src];
  }
}
