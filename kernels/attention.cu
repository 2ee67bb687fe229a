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
    int n, int nh, int nkv, int hd, long long kv_stride, int width, int chunks, float scale) {
  const int chunk = blockIdx.x;
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
