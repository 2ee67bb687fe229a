// Grouped-query attention of a block of new rows over the KV cache, each row over its own list of
// visible keys, batch-invariant by construction: a row's output depends only on its query and on
// the keys and values it sees, in the order it sees them, never on how many other rows the pass
// holds or where its keys sit in the cache. So a draft tree's node, verified among 64 others with
// its ancestors scattered through the block, gets bit for bit the output it would get as the single
// row of a plain decoding step with those ancestors laid out in a line: greedy `tree` and `linear`
// emit exactly the `ar` tokens (issue 10), and one launch pair replaces the ~6 launches of the
// matmul / scale / mask / softmax / matmul / transpose chain (issue 11).
//
// Visibility, per row i of `keys` ([n, width] u32): keys[i][0] = lead, keys[i][1] = extra count,
// keys[i][2..]: extra cache rows, ascending. The row sees cache rows 0..lead, then the extras: the
// key of rank r is r for r < lead, else extra[r - lead]. Every reduction is indexed by rank:
//
// - attention_chunk_f32: one block per (chunk of CHUNK ranks, query head, row). Scores are dot
//   products of hd terms, each key's split over four threads (quarters in dimension order, added
//   in a fixed order);
//   softmax numerators use the chunk's own maximum; the chunk's sum and its value-weighted sums
//   run in rank order per thread, then a fixed tree. Writes (max, sum, acc[hd]) per chunk.
// - attention_combine_f32: one block per (query head, row); rescales the chunks to the common
//   maximum and sums them in chunk order.
//
// Chunks cut ranks at fixed multiples of CHUNK, so the same visible keys give the same chunks in a
// one-row pass and in a 1024-row pass. CPU reference: `gpu::attention::reference`
// (src/gpu/attention.rs); `treespec selftest --device cuda` compares them and checks invariance.

#include <cuda_fp16.h>

#include "pdl.cuh"

#define ATT_THREADS 512
#define ATT_CHUNK 128  // ATT_THREADS / ATT_SPLIT: one key per group of ATT_SPLIT threads
#define ATT_SPLIT 4    // threads sharing a key's dot product
#define ATT_HD_MAX 256

__device__ __forceinline__ float warp_max_f(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, o, 32));
  return x;
}

__device__ __forceinline__ float warp_sum_f(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffff, x, o, 32);
  return x;
}

__device__ __forceinline__ unsigned int key_of(const unsigned int *__restrict__ row, int r) {
  const unsigned int lead = row[0];
  return (unsigned int)r < lead ? (unsigned int)r : row[2 + (r - lead)];
}

// Maximum (is_max) or sum over the ATT_THREADS threads of a block in a fixed order: a warp
// butterfly, then the warps in order; every thread gets the result. `red` holds ATT_THREADS / 32
// + 1 floats.
__device__ __forceinline__ float block_reduce(float v, float *red, bool is_max) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffff, v, o, 32);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = red[0];
    for (int w = 1; w < ATT_THREADS / 32; ++w) t = is_max ? fmaxf(t, red[w]) : t + red[w];
    red[ATT_THREADS / 32] = t;
  }
  __syncthreads();
  const float t = red[ATT_THREADS / 32];
  __syncthreads();
  return t;
}

// Partials layout: [n, nh, chunks, hd + 2] with (max, sum, acc[0..hd]).
extern "C" __global__ void attention_chunk_f32(
    const float *__restrict__ q,            // [nh, n, hd]
    const float *__restrict__ k,            // [nkv, *, hd], kv-head stride kv_stride
    const float *__restrict__ v,            // same layout as k
    const unsigned int *__restrict__ keys,  // [n, width]
    float *__restrict__ part,               // [n, nh, chunks, hd + 2]
    int n, int nh, int nkv, int hd, long long kv_stride, int width, int chunks, float scale,
    int first) {
  const int chunk = blockIdx.x + first;  // chunks below `first`: attention_shared_mma's
  const int h = blockIdx.y;
  const int i = blockIdx.z;
  const int tid = threadIdx.x;

  __shared__ __align__(16) float qs[ATT_HD_MAX];
  __shared__ unsigned int kidx[ATT_CHUNK];
  __shared__ float p[ATT_CHUNK];
  __shared__ float red[ATT_THREADS / 32 + 1];
  __shared__ float accs[ATT_THREADS];

  pdl_enter();
  const unsigned int *row = keys + (size_t)i * width;
  const int count = (int)(row[0] + row[1]);
  const int start = chunk * ATT_CHUNK;
  float *out = part + (((size_t)i * nh + h) * chunks + chunk) * (hd + 2);
  if (start >= count) {
    return;  // the combine kernel reads only this row's chunks that hold keys
  }
  const int len = min(ATT_CHUNK, count - start);
  const int kvh = h / (nh / nkv);
  const float *kh = k + (size_t)kvh * kv_stride;
  const float *vh = v + (size_t)kvh * kv_stride;

  for (int d = tid; d < hd; d += ATT_THREADS) qs[d] = q[((size_t)h * n + i) * hd + d];
  for (int r = tid; r < len; r += ATT_THREADS) kidx[r] = key_of(row, start + r);
  __syncthreads();

  // Scores: the ATT_SPLIT threads 4r..4r+3 take rank r, each a quarter of the dimensions in
  // order (float4 loads), then the quarters are added in a fixed order ((0+1)+(2+3), by
  // shuffles inside the warp).
  {
    const int r = tid / ATT_SPLIT, part = tid % ATT_SPLIT;
    const int quarter = hd / ATT_SPLIT;  // a multiple of 8: hd is a multiple of 32
    float s = 0.f;
    if (r < len) {
      const float4 *kr =
          reinterpret_cast<const float4 *>(kh + (size_t)kidx[r] * hd + part * quarter);
      const float4 *qr = reinterpret_cast<const float4 *>(qs + part * quarter);
#pragma unroll 8
      for (int e = 0; e < quarter / 4; ++e) {
        const float4 a = qr[e];
        const float4 b = kr[e];
        s = fmaf(a.x, b.x, s);
        s = fmaf(a.y, b.y, s);
        s = fmaf(a.z, b.z, s);
        s = fmaf(a.w, b.w, s);
      }
    }
    s += __shfl_xor_sync(0xffffffff, s, 1, 32);
    s += __shfl_xor_sync(0xffffffff, s, 2, 32);
    if (r < len && part == 0) p[r] = s * scale;
  }
  __syncthreads();

  // Chunk maximum (order-free), then numerators and their sum (rank order per thread, then a
  // fixed order: warp butterflies, the warps in order).
  float m = -INFINITY;
  for (int r = tid; r < len; r += ATT_THREADS) m = fmaxf(m, p[r]);
  m = block_reduce(m, red, true);
  float sum = 0.f;
  for (int r = tid; r < len; r += ATT_THREADS) {
    const float e = expf(p[r] - m);
    p[r] = e;
    sum += e;
  }
  sum = block_reduce(sum, red, false);

  // Value-weighted sums: thread (class c, dim d), c = tid / td, over ranks c, c + classes, ...
  const int td = hd < ATT_THREADS ? hd : ATT_THREADS;
  const int classes = ATT_THREADS / td;
  const int c = tid / td;
  for (int d = tid % td; d < hd; d += td) {
    float acc = 0.f;
#pragma unroll 8
    for (int r = c; r < len; r += classes) acc = fmaf(p[r], vh[(size_t)kidx[r] * hd + d], acc);
    accs[c * hd + d] = acc;
  }
  __syncthreads();
  if (tid == 0) {
    out[0] = m;
    out[1] = sum;
  }
  for (int d = tid; d < hd; d += ATT_THREADS) {
    float acc = 0.f;
    for (int cc = 0; cc < classes; ++cc) acc += accs[cc * hd + d];
    out[2 + d] = acc;
  }
}

extern "C" __global__ void attention_combine_f32(
    const float *__restrict__ part,         // [n, nh, chunks, hd + 2]
    const unsigned int *__restrict__ keys,  // [n, width]
    float *__restrict__ out,                // [n, nh * hd]
    int n, int nh, int hd, int width, int chunks,
    void *__restrict__ q8, int qblocks) {     // optional: out also as Q8_1 rows of qblocks
  pdl_enter();
  const int h = blockIdx.x;
  const int i = blockIdx.y;
  const unsigned int *row = keys + (size_t)i * width;
  const int count = (int)(row[0] + row[1]);
  const int used = (count + ATT_CHUNK - 1) / ATT_CHUNK;
  const float *pr = part + ((size_t)i * nh + h) * chunks * (hd + 2);
  float m = -INFINITY;
  for (int c = 0; c < used; ++c) m = fmaxf(m, pr[(size_t)c * (hd + 2)]);
  float l = 0.f;
  for (int c = 0; c < used; ++c) {
    const float *pc = pr + (size_t)c * (hd + 2);
    l += pc[1] * expf(pc[0] - m);
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.f;
    for (int c = 0; c < used; ++c) {
      const float *pc = pr + (size_t)c * (hd + 2);
      acc += pc[2 + d] * expf(pc[0] - m);
    }
    const float o = count > 0 ? acc / l : 0.f;
    out[(size_t)i * nh * hd + (size_t)h * hd + d] = o;
    if (q8 != nullptr) {
      // hd is a multiple of 32 and the block has hd threads: each warp quantises its 32 values
      // into one block, as the stand-alone quantiser of mmvq.cu does.
      const float amax = warp_max_f(fabsf(o));
      const float s = warp_sum_f(o);
      const float dq = amax / 127.0f;
      const int b = (h * hd + d) / 32;
      unsigned char *blk = (unsigned char *)q8 + ((size_t)i * qblocks + b) * 36;
      blk[4 + (d & 31)] = (unsigned char)(signed char)(amax == 0.0f ? 0 : (int)roundf(o / dq));
      if ((d & 31) == 0) {
        const __half2 ds = __halves2half2(__float2half(dq), __float2half(s));
        *reinterpret_cast<__half2 *>(blk) = ds;
      }
    }
  }
}

// Wide passes (src/gpu/wide.rs: from TREESPEC_WIDE_ROWS rows, where batch invariance is given up
// for speed): the chunks of ranks that every row of the pass sees whole (ranks below the smallest
// `lead`: the committed prefix of a tree, the cached context of a prompt's block), for all rows and
// the query heads of a K/V head at once on tensor cores, so that a chunk's keys and values are read
// once per 64 (row, head) pairs instead of once per row and head. One block of four warps per
// (64 pairs, K/V head, chunk); each warp takes 16 pairs (pair m: row m / group, head m % group of
// the K/V head's group), the chunk's 128 keys in two halves of 64 staged in shared memory as f16
// (values transposed), scores and value sums by `mma.sync` m16n8k16 (f16 in, f32 sums), the softmax
// online across the halves. Writes the same partials (max, sum, acc[hd]) as attention_chunk_f32,
// so attention_combine_f32 merges both kernels' chunks. Queries are scaled before their rounding
// to f16. CPU reference: `gpu::attention::reference`, through `attention_wide` (selftest).

#define SH_KEYS 64
#define SH_PAD 8

__device__ __forceinline__ unsigned int pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const unsigned int *>(&h);
}

__device__ __forceinline__ void mma_f16(float c[4], const unsigned int a[4], unsigned int b0,
                                        unsigned int b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <int HD>
__device__ __forceinline__ void attention_shared_mma(const float *__restrict__ q,
                                                     const float *__restrict__ k,
                                                     const float *__restrict__ v,
                                                     float *__restrict__ part, int n, int nh,
                                                     int nkv, long long kv_stride, int chunks,
                                                     float scale) {
#if __CUDA_ARCH__ >= 800  // f16 mma.sync m16n8k16; the host loads this kernel only on sm_80 on
  __shared__ __align__(16) __half ks[SH_KEYS][HD + SH_PAD];
  __shared__ __align__(16) __half vt[HD][SH_KEYS + SH_PAD];
  pdl_enter();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int group = nh / nkv, pairs = n * group;
  const int kvh = blockIdx.y, chunk = blockIdx.z;
  const int m0 = blockIdx.x * 64 + warp * 16;
  const float *kh = k + (size_t)kvh * kv_stride;
  const float *vh = v + (size_t)kvh * kv_stride;

  // The warp's queries as A fragments: qa[s] covers dimensions 16s..16s + 15.
  unsigned int qa[HD / 16][4];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int m = m0 + g + 8 * r;
    const bool live = m < pairs;
    const int i = live ? m / group : 0, h = kvh * group + (live ? m % group : 0);
    const float *qr = q + ((size_t)h * n + i) * HD;
#pragma unroll
    for (int s = 0; s < HD / 16; ++s) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int d = 16 * s + 8 * c + 2 * t;
        const float2 x = live ? *reinterpret_cast<const float2 *>(qr + d) : make_float2(0.f, 0.f);
        qa[s][r + 2 * c] = pack_half2(x.x * scale, x.y * scale);
      }
    }
  }
  float o[HD / 8][4];
#pragma unroll
  for (int j = 0; j < HD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.f, 0.f};

  for (int hh = 0; hh < ATT_CHUNK / SH_KEYS; ++hh) {
    const int base = chunk * ATT_CHUNK + hh * SH_KEYS;
    __syncthreads();  // the previous half's readers are done
    for (int idx = threadIdx.x; idx < SH_KEYS * HD / 4; idx += blockDim.x) {
      const int key = idx / (HD / 4), d = (idx % (HD / 4)) * 4;
      const float4 x = *reinterpret_cast<const float4 *>(kh + (size_t)(base + key) * HD + d);
      const float4 y = *reinterpret_cast<const float4 *>(vh + (size_t)(base + key) * HD + d);
      *reinterpret_cast<unsigned int *>(&ks[key][d]) = pack_half2(x.x, x.y);
      *reinterpret_cast<unsigned int *>(&ks[key][d + 2]) = pack_half2(x.z, x.w);
      vt[d][key] = __float2half_rn(y.x);
      vt[d + 1][key] = __float2half_rn(y.y);
      vt[d + 2][key] = __float2half_rn(y.z);
      vt[d + 3][key] = __float2half_rn(y.w);
    }
    __syncthreads();
    // Scores of the 64 keys: tile j holds keys 8j..8j + 7.
    float c[SH_KEYS / 8][4];
#pragma unroll
    for (int j = 0; j < SH_KEYS / 8; ++j) {
      c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f;
#pragma unroll
      for (int s = 0; s < HD / 16; ++s) {
        const unsigned int b0 = *reinterpret_cast<const unsigned int *>(&ks[8 * j + g][16 * s + 2 * t]);
        const unsigned int b1 =
            *reinterpret_cast<const unsigned int *>(&ks[8 * j + g][16 * s + 8 + 2 * t]);
        mma_f16(c[j], qa[s], b0, b1);
      }
    }
    // Online softmax: r = 0 is row g (c[.][0..1]), r = 1 row g + 8 (c[.][2..3]).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float ml = -INFINITY;
#pragma unroll
      for (int j = 0; j < SH_KEYS / 8; ++j) ml = fmaxf(ml, fmaxf(c[j][2 * r], c[j][2 * r + 1]));
      ml = fmaxf(ml, __shfl_xor_sync(0xffffffff, ml, 1));
      ml = fmaxf(ml, __shfl_xor_sync(0xffffffff, ml, 2));
      const float mnew = fmaxf(mx[r], ml);
      const float alpha = expf(mx[r] - mnew);
      mx[r] = mnew;
#pragma unroll
      for (int j = 0; j < HD / 8; ++j) {
        o[j][2 * r] *= alpha;
        o[j][2 * r + 1] *= alpha;
      }
      float ls = 0.f;
#pragma unroll
      for (int j = 0; j < SH_KEYS / 8; ++j) {
        c[j][2 * r] = expf(c[j][2 * r] - mnew);
        c[j][2 * r + 1] = expf(c[j][2 * r + 1] - mnew);
        ls += c[j][2 * r] + c[j][2 * r + 1];
      }
      ls += __shfl_xor_sync(0xffffffff, ls, 1);
      ls += __shfl_xor_sync(0xffffffff, ls, 2);
      sum[r] = sum[r] * alpha + ls;
    }
    // Value sums: the probabilities as A fragments (keys 16s..16s + 15), values as B.
#pragma unroll
    for (int s = 0; s < SH_KEYS / 16; ++s) {
      const unsigned int pa[4] = {
          pack_half2(c[2 * s][0], c[2 * s][1]), pack_half2(c[2 * s][2], c[2 * s][3]),
          pack_half2(c[2 * s + 1][0], c[2 * s + 1][1]), pack_half2(c[2 * s + 1][2], c[2 * s + 1][3])};
#pragma unroll
      for (int j = 0; j < HD / 8; ++j) {
        const unsigned int b0 = *reinterpret_cast<const unsigned int *>(&vt[8 * j + g][16 * s + 2 * t]);
        const unsigned int b1 =
            *reinterpret_cast<const unsigned int *>(&vt[8 * j + g][16 * s + 8 + 2 * t]);
        mma_f16(o[j], pa, b0, b1);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int m = m0 + g + 8 * r;
    if (m >= pairs) continue;
    const int i = m / group, h = kvh * group + m % group;
    float *out = part + (((size_t)i * nh + h) * chunks + chunk) * (HD + 2);
    if (t == 0) {
      out[0] = mx[r];
      out[1] = sum[r];
    }
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      out[2 + 8 * j + 2 * t] = o[j][2 * r];
      out[2 + 8 * j + 2 * t + 1] = o[j][2 * r + 1];
    }
  }
#endif
}

#define SHARED_MMA(HD)                                                                          \
  extern "C" __global__ void __launch_bounds__(128) attention_shared_mma_##HD(                  \
      const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,     \
      float *__restrict__ part, int n, int nh, int nkv, long long kv_stride, int chunks,         \
      float scale) {                                                                            \
    attention_shared_mma<HD>(q, k, v, part, n, nh, nkv, kv_stride, chunks, scale);             \
  }
SHARED_MMA(64)
SHARED_MMA(128)
