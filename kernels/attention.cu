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
// - attention_chunk_f32: one block per (chunk of the row's ranks, K/V head, row), a warp per
//   (query head of the K/V head's group, span of the chunk's ranks). Scores are dot products in
//   dimension order, a lane per key; softmax numerators use the chunk's own maximum; a span's sum
//   runs in rank order per lane, then a warp butterfly; each value-weighted sum in rank order on
//   one lane; the spans' sums added in span order. Writes (max, sum, acc[hd]) per chunk.
// - attention_combine_f32: one block per (query head, row); rescales the chunks to the common
//   maximum and sums them in chunk order.
//
// Chunks cut ranks at fixed multiples of 32, 64 or 128, the size a function of the row's own
// count of keys (att_chunk_ranks), so the same visible keys give the same chunks in a one-row pass
// and in a 1024-row pass. CPU reference: `gpu::attention::reference` (src/gpu/attention.rs);
// `treespec selftest --device cuda` compares them and checks invariance.

#include <cuda_fp16.h>

#include "pdl.cuh"

#define ATT_CHUNK 128     // ranks a chunk at most (src/gpu/attention.rs: CHUNK)
#define ATT_FEW_CHUNKS 16  // src/gpu/attention.rs: FEW_CHUNKS
#define ATT_HD_MAX 256
#define ATT_APART_HD 64   // heads up to this size stage keys and values at once (attention.rs)
#define ATT_WHOLE_HD 128  // heads up to this size stage a whole chunk at a time, bigger ones half

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

// Ranks a chunk holds for a row that sees `count` keys: `fixed` where it is set (not 0), else the
// fewest of 32 and 64 that cut the row into at most ATT_FEW_CHUNKS chunks, else ATT_CHUNK
// (src/gpu/attention.rs: ranks_for, which says why).
__device__ __forceinline__ int att_chunk_ranks(int fixed, int count) {
  if (fixed > 0) return fixed;
  return count <= ATT_FEW_CHUNKS * 32 ? 32 : count <= ATT_FEW_CHUNKS * 64 ? 64 : ATT_CHUNK;
}

__device__ __forceinline__ unsigned int key_of(const unsigned int *__restrict__ row, int r) {
  const unsigned int lead = row[0];
  return (unsigned int)r < lead ? (unsigned int)r : row[2 + (r - lead)];
}

// 16 bytes from global to shared memory without passing through registers (before sm_80:
// through them); zeros where !copy (no bytes are read).
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool copy) {
#if __CUDA_ARCH__ >= 800
  const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
               "r"(copy ? 16 : 0));
#else
  *reinterpret_cast<float4 *>(dst) =
      copy ? *reinterpret_cast<const float4 *>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
#endif
}

// Wait for this thread's cp_async16 copies (then a barrier makes every thread's visible).
__device__ __forceinline__ void cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;");
#endif
}

// Copy the rows kidx[0 .. len) of a [*, hd] f32 table (`src`) to `dst`, rows hd + 4 floats apart,
// by the block's nt threads (this one tid), all in flight at once.
__device__ __forceinline__ void stage_f32_rows(float *dst, const float *__restrict__ src,
                                               const unsigned int *kidx, int len, int hd,
                                               int tid, int nt) {
  const int v4 = hd / 4;
  for (int e = tid; e < len * v4; e += nt) {
    const int r = e / v4, c = e - r * v4;
    cp_async16(dst + r * (hd + 4) + 4 * c, src + (size_t)kidx[r] * hd + 4 * c, true);
  }
}

// Partials layout: [n, nh, chunks, hd + 2] with (max, sum, acc[hd]).
//
// One block per (chunk of csz ranks, K/V head, row), of 32 x G x S threads: warp (w, s) takes
// query head kvh * G + w of the K/V head's group of G, and the s-th span of max(32, csz / S) of
// the chunk's ranks (S = 1, 2 or 4, fixed by the heads' shape alone: src/gpu/attention.rs,
// `split`; more warps for the few blocks of a one-row step, the same sums at every row count;
// spans past the chunk's end are empty and add zeros). Shared memory is laid out for chunks of
// ATT_CHUNK. The chunk's keys and values are staged in shared memory once for the block by
// cp.async, every copy in flight at once (rows hd + 4 floats apart: the lanes' float4 reads of
// their own keys hit distinct banks): for heads of up to ATT_APART_HD both at once in buffers of
// their own; for bigger heads the values take the keys' place once the scores are done, their
// first copies flying while the softmax is worked out, and heads past ATT_WHOLE_HD stage at most
// half of ATT_CHUNK at a time (so that a block fits the 99 KiB of shared memory of sm_86-sm_120
// GPUs). Every way gives the same sums.
// Per (row, head, chunk), never depending on the other rows of the pass or of the block:
// - scores: in span s, lane l takes ranks s * span + l + 32 j, each a dot product in
//   dimension order (one fmaf chain), times the scale;
// - the chunk's maximum (order-free) by warp butterflies and over the spans; numerators
//   expf(s - max), each lane's summed in rank order, then a warp butterfly (every lane ends with
//   the same sum: each level adds the same two values, in either order), the spans' sums added
//   in span order;
// - value-weighted sums: lane l takes dimensions l, l + 32, ..., over the span's ranks in order,
//   the spans' sums added in span order.
extern "C" __global__ void __launch_bounds__(1024) attention_chunk_f32(
    const float *__restrict__ q,            // [nh, n, hd]
    const float *__restrict__ k,            // [nkv, *, hd], kv-head stride kv_stride
    const float *__restrict__ v,            // same layout as k
    const unsigned int *__restrict__ keys,  // [n, width]
    float *__restrict__ part,               // [n, nh, chunks, hd + 2]
    int n, int nh, int nkv, int hd, long long kv_stride, int width, int chunks,
    int fixed,  // ranks a chunk for every row; 0: by each row's count (att_chunk_ranks)
    float scale) {
  extern __shared__ __align__(16) float att_sm[];
  const int chunk = blockIdx.x, kvh = blockIdx.y, i = blockIdx.z;
  const int lane = threadIdx.x, w = threadIdx.y, G = blockDim.y;
  const int sp = threadIdx.z, S = blockDim.z;
  const int h = kvh * G + w;
  const int tid = lane + 32 * (w + G * sp), nt = 32 * G * S;
  const int ks = hd + 4;
  const bool apart = hd <= ATT_APART_HD;
  const int sr_max = hd > ATT_WHOLE_HD ? ATT_CHUNK / 2 : ATT_CHUNK;  // rows a stage buffer holds
  float *kv = att_sm;                                                // [sr_max][hd + 4]: keys
  float *vs = apart ? kv + sr_max * ks : kv;                         // values
  float *qs = vs + sr_max * ks;                                      // [G][hd]
  float *ps = qs + G * hd;                                    // [G][ATT_CHUNK]
  unsigned int *kidx = (unsigned int *)(ps + G * ATT_CHUNK);  // [ATT_CHUNK]
  float *red = (float *)(kidx + ATT_CHUNK);                   // [S][G]: the spans' maxima, sums
  float *accs = red + S * G;                                  // [S - 1][G][hd]: spans 1.. sums

  pdl_enter();
  const unsigned int *row = keys + (size_t)i * width;
  const int count = (int)(row[0] + row[1]);
  const int csz = att_chunk_ranks(fixed, count);
  const int start = chunk * csz;
  if (start >= count) {
    return;  // the combine kernel reads only this row's chunks that hold keys
  }
  const int len = min(csz, count - start);
  const int span = max(32, csz / S);  // ranks a warp takes: 128, 64 or 32
  const int sr = min(csz, sr_max);    // rows a stage holds
  const float *kh = k + (size_t)kvh * kv_stride;
  const float *vh = v + (size_t)kvh * kv_stride;

  if (sp == 0)
    for (int d = lane; d < hd; d += 32) qs[w * hd + d] = q[((size_t)h * n + i) * hd + d];
  for (int r = tid; r < len; r += nt) kidx[r] = key_of(row, start + r);
  __syncthreads();
  if (apart) {  // sr is the whole chunk: keys and values at once
    stage_f32_rows(kv, kh, kidx, len, hd, tid, nt);
    stage_f32_rows(vs, vh, kidx, len, hd, tid, nt);
    cp_async_wait_all();
    __syncthreads();
  }

  // s[j]: the score of rank first + lane + 32 j of the chunk (j < span / 32).
  const int first = sp * span, last = min(len, first + span);
  float s[ATT_CHUNK / 32];
#pragma unroll
  for (int j = 0; j < ATT_CHUNK / 32; ++j) s[j] = -INFINITY;
  const float4 *qr = reinterpret_cast<const float4 *>(qs + w * hd);
  for (int base = 0; base < len; base += sr) {
    const int end = min(last, base + sr);
    if (!apart) {
      if (base > 0) __syncthreads();  // every warp is done with the previous stage's keys
      stage_f32_rows(kv, kh, kidx + base, min(len, base + sr) - base, hd, tid, nt);
      cp_async_wait_all();
      __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < ATT_CHUNK / 32; ++j) {
      const int r = first + lane + 32 * j;
      if (32 * j < span && r >= base && r < end) {
        const float4 *kr = reinterpret_cast<const float4 *>(kv + (r - base) * ks);
        float acc = 0.f;
#pragma unroll 8
        for (int e = 0; e < hd / 4; ++e) {
          const float4 a = qr[e];
          const float4 b = kr[e];
          acc = fmaf(a.x, b.x, acc);
          acc = fmaf(a.y, b.y, acc);
          acc = fmaf(a.z, b.z, acc);
          acc = fmaf(a.w, b.w, acc);
        }
        s[j] = acc * scale;
      }
    }
  }
  if (!apart) {
    __syncthreads();  // every warp is done with the keys: the first values take their place
    stage_f32_rows(vs, vh, kidx, min(len, sr), hd, tid, nt);
  }

  float m = s[0];
#pragma unroll
  for (int j = 1; j < ATT_CHUNK / 32; ++j) m = fmaxf(m, s[j]);
  m = warp_max_f(m);
  if (S > 1) {  // the chunk's maximum over the spans
    if (lane == 0) red[sp * G + w] = m;
    __syncthreads();
    m = red[w];
    for (int t = 1; t < S; ++t) m = fmaxf(m, red[t * G + w]);
    __syncthreads();  // every warp has read the maxima: red takes the sums
  }
  float *pw = ps + w * ATT_CHUNK;
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < ATT_CHUNK / 32; ++j) {
    const int r = first + lane + 32 * j;
    if (32 * j < span && r < last) {
      const float e = expf(s[j] - m);
      pw[r] = e;
      sum += e;
    }
  }
  sum = warp_sum_f(sum);
  if (S > 1 && lane == 0) red[sp * G + w] = sum;
  __syncwarp();  // the warp's numerators

  const int nd = hd / 32;
  float acc[ATT_HD_MAX / 32];
#pragma unroll
  for (int j = 0; j < ATT_HD_MAX / 32; ++j) acc[j] = 0.f;
  for (int base = 0; base < len; base += sr) {
    const int end = min(last, base + sr);
    if (!apart) {
      if (base > 0) {
        __syncthreads();  // every warp is done with the previous stage's values
        stage_f32_rows(vs, vh, kidx + base, min(len, base + sr) - base, hd, tid, nt);
      }
      cp_async_wait_all();
      __syncthreads();
    }
#pragma unroll 4
    for (int r = max(base, first); r < end; ++r) {
      const float p = pw[r];
      const float *vr = vs + (r - base) * ks + lane;
#pragma unroll
      for (int j = 0; j < ATT_HD_MAX / 32; ++j)
        if (j < nd) acc[j] = fmaf(p, vr[32 * j], acc[j]);
    }
  }
  if (S > 1) {  // spans 1.. hand their sums to span 0, which adds them in span order
    if (sp > 0) {
      float *a = accs + ((sp - 1) * G + w) * hd + lane;
#pragma unroll
      for (int j = 0; j < ATT_HD_MAX / 32; ++j)
        if (j < nd) a[32 * j] = acc[j];
    }
    __syncthreads();
    if (sp > 0) return;
    for (int t = 1; t < S; ++t) {
      sum += red[t * G + w];
      const float *a = accs + ((t - 1) * G + w) * hd + lane;
#pragma unroll
      for (int j = 0; j < ATT_HD_MAX / 32; ++j)
        if (j < nd) acc[j] += a[32 * j];
    }
  }
  float *out = part + (((size_t)i * nh + h) * chunks + chunk) * (hd + 2);
  if (lane == 0) {
    out[0] = m;
    out[1] = sum;
  }
#pragma unroll
  for (int j = 0; j < ATT_HD_MAX / 32; ++j)
    if (j < nd) out[2 + lane + 32 * j] = acc[j];
}

// Grid: (nh / heads a block, n); block hd * (heads a block) threads, one a value of a head's
// output: where `q8` is set with `group` 256 (the products of kernels/mmq.cu: a super-block's
// eight Q8_1 blocks share d), 256 / hd heads a block (nh * hd a multiple of 256), so that a
// super-block's values are one block's; else one head a block.
extern "C" __global__ void attention_combine_f32(
    const float *__restrict__ part,         // [n, nh, chunks, hd + 2]
    const unsigned int *__restrict__ keys,  // [n, width]
    float *__restrict__ out,                // [n, nh * hd]; null: only the rows below
    int n, int nh, int hd, int width, int chunks,
    int fixed,  // as attention_chunk_f32's; the wide kernel's: ATT_CHUNK
    void *__restrict__ q8, int qblocks,  // optional: out also as Q8_1 rows of qblocks
    int all,    // 1: every chunk holds a partial (attention_wide_mma's, by cache row; empty
                // ones add nothing); 0: the row's first ceil(count / csz), by rank
    __half *__restrict__ f16,  // optional: out also as f16 rows (a wide pass's next product)
    int group,                 // values of q8 that share d: 32 or 256
    const float *__restrict__ gate,  // optional: out *= sigmoid(gate[i * gate_stride + h * 2hd + d])
    int gate_stride) {
  __shared__ float amax_warps[ATT_HD_MAX / 32];
  pdl_enter();
  const int h = blockIdx.x * (blockDim.x / hd) + threadIdx.x / hd;
  const int d = threadIdx.x % hd;
  const int i = blockIdx.y;
  const unsigned int *row = keys + (size_t)i * width;
  const int count = (int)(row[0] + row[1]);
  const int csz = att_chunk_ranks(fixed, count);
  const int used = all ? chunks : (count + csz - 1) / csz;
  const float *pr = part + ((size_t)i * nh + h) * chunks * (hd + 2);
  // The loops unrolled so that several chunks' loads are in flight (the sums keep chunk order).
  float m = -INFINITY;
#pragma unroll 8
  for (int c = 0; c < used; ++c) m = fmaxf(m, pr[(size_t)c * (hd + 2)]);
  float l = 0.f;
#pragma unroll 8
  for (int c = 0; c < used; ++c) {
    const float *pc = pr + (size_t)c * (hd + 2);
    if (all && pc[1] == 0.f) continue;  // an empty chunk of a wide pass (never one by rank)
    l += pc[1] * expf(pc[0] - m);
  }
  float acc = 0.f;
#pragma unroll 8
  for (int c = 0; c < used; ++c) {
    const float *pc = pr + (size_t)c * (hd + 2);
    if (all && pc[1] == 0.f) continue;
    acc += pc[2 + d] * expf(pc[0] - m);
  }
  float o = count > 0 ? acc / l : 0.f;
  if (gate != nullptr) {
    // Qwen3.5's gated attention: the head's output gate (after its query in the projection).
    const float g = gate[(size_t)i * gate_stride + (size_t)h * 2 * hd + d];
    o = o * (1.f / (1.f + expf(-g)));
  }
  if (out != nullptr) out[(size_t)i * nh * hd + (size_t)h * hd + d] = o;
  if (f16 != nullptr) f16[(size_t)i * nh * hd + (size_t)h * hd + d] = __float2half_rn(o);
  if (q8 == nullptr) return;
  // hd is a multiple of 32: each warp's 32 values are one Q8_1 block, as the stand-alone
  // quantiser of mmvq.cu makes it; with group 256 the block's (a super-block's) largest sets d.
  float amax = warp_max_f(fabsf(o));
  if (group == 256) {
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) amax_warps[warp] = amax;
    __syncthreads();
    for (int k = 0; k < (int)(blockDim.x >> 5); ++k) amax = fmaxf(amax, amax_warps[k]);
  }
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

// Wide passes (src/gpu/wide.rs: from TREESPEC_WIDE_ROWS rows, where batch invariance is given up
// for speed): the whole pass on tensor cores, one block of WM_WARPS warps per (16 * WM_WARPS
// (row, query head) pairs of one K/V head, chunk of 128 cache rows). Chunks here are cut by
// cache row, not by rank: chunk c holds cache rows 128c..128c + 127, and each row's visibility of
// them (rows below its lead, and its extras: a draft tree's ancestors, a prompt's causal block)
// is a 128-bit mask built in shared memory from the key table, so one launch takes the committed
// prefix, which every row sees whole, and the tree block under its ancestor masks alike. Keys and
// values come from the cache's f16 shadow (written beside the f32 cache by qkv_rope), the chunk's
// two halves of 64 rows copied to shared memory by cp.async, both in flight at once, once per
// block; halves no row of the block sees are not read, blocks whose rows see none of the chunk
// write empty partials. Each warp takes 16 pairs (pair m: row m / group, head m % group of the K/V head's
// group); scores and value sums by `mma.sync` m16n8k16 (f16 in, f32 sums), the values' fragments
// by `ldmatrix.trans`, the softmax online across the halves, masked scores at -inf. Queries are
// scaled before their rounding to f16. Writes partials (max, sum, acc[hd]) per (row, head,
// chunk) as attention_chunk_f32 does, an empty one as (-inf, 0, 0...), merged by
// attention_combine_f32 over every chunk (`all`). CPU reference: `gpu::attention::reference`,
// through `attention_wide` (selftest).

#define WM_KEYS 64
#define WM_PAD 8
#define WM_WORDS (ATT_CHUNK / 32)
#define WM_SPAN_MAX 4  // chunks a block may take in turn (gpu::attention::wide_span)

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

// Two 8x8 f16 matrices from shared memory, transposed: lanes 0-7 address matrix 0's rows, 8-15
// matrix 1's; lane l gets (row 2(l % 4), 2(l % 4) + 1; column l / 4) of each.
__device__ __forceinline__ void ldsm_x2_trans(unsigned int &r0, unsigned int &r1, const void *p) {
#if __CUDA_ARCH__ >= 800
  const unsigned int a = (unsigned int)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
               : "=r"(r0), "=r"(r1)
               : "r"(a));
#endif
}

template <int HD, int WARPS>
__device__ __forceinline__ void attention_wide_mma(
    const float *__restrict__ q, const __half *__restrict__ k, const __half *__restrict__ v,
    const unsigned int *__restrict__ keys, float *__restrict__ part, int n, int nh, int nkv,
    long long kv_stride, int width, int chunks, int span, int slots, float scale) {
#if __CUDA_ARCH__ >= 800  // f16 mma.sync m16n8k16; the host loads this kernel only on sm_80 on
  constexpr int PAIRS = 16 * WARPS;
  // Two stages of WM_KEYS keys and values, [2 * WM_KEYS][HD + WM_PAD] each: wide_smem_bytes().
  extern __shared__ __align__(16) unsigned char wm_smem[];
  typedef __half Row[HD + WM_PAD];
  Row *ks = reinterpret_cast<Row *>(wm_smem);
  Row *vs = ks + 2 * WM_KEYS;
  // Per row of the block (at most PAIRS rows), its mask of the span's cache rows; `any`: the
  // rows some row of the block sees.
  __shared__ unsigned int mask[PAIRS][WM_SPAN_MAX * WM_WORDS];
  __shared__ unsigned int any[WM_SPAN_MAX * WM_WORDS];
  pdl_enter();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int group = nh / nkv, pairs = n * group;
  const int kvh = blockIdx.y, slot = blockIdx.z;
  const int first = slot * span, count = min(span, chunks - first);  // chunks of the span
  const int base = first * ATT_CHUNK, words = count * WM_WORDS;
  const int p0 = blockIdx.x * PAIRS, m0 = p0 + warp * 16;
  const int i0 = p0 / group;
  const int rows = (min(p0 + PAIRS, pairs) - 1) / group + 1 - i0;
  const __half *kh = k + (size_t)kvh * kv_stride;
  const __half *vh = v + (size_t)kvh * kv_stride;

  // Each row's mask of the span: cache rows below its lead, then its extras (ascending) that
  // fall in the span, found by bisection (none to find where the span lies below the lead).
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const unsigned int *row = keys + (size_t)(i0 + r) * width;
    const int lead = (int)row[0], cnt = (int)row[1];
    for (int x = 0; x < words; ++x) {
      const int nb = min(max(lead - (base + 32 * x), 0), 32);
      mask[r][x] = nb == 32 ? 0xffffffffu : ((1u << nb) - 1u);
    }
    if (cnt == 0 || base + count * ATT_CHUNK <= lead) continue;
    int lo = 0, hi = cnt;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if ((int)row[2 + mid] < base) lo = mid + 1; else hi = mid;
    }
    for (int e = lo; e < cnt; ++e) {
      const int p = (int)row[2 + e] - base;
      if (p >= count * ATT_CHUNK) break;
      mask[r][p >> 5] |= 1u << (p & 31);
    }
  }
  __syncthreads();
  for (int x = threadIdx.x; x < words; x += blockDim.x) {
    unsigned int a = 0;
    for (int r = 0; r < rows; ++r) a |= mask[r][x];
    any[x] = a;
  }
  __syncthreads();

  // The span's halves of WM_KEYS rows, in a two-stage pipeline: half h goes to stage h % 2 by
  // cp.async (one commit group a half, empty for a half no row sees); rows no row of the block
  // sees are zero-filled, not read (they may lie past what the cache holds).
  const int halves = count * (ATT_CHUNK / WM_KEYS);
  auto issue = [&](int hh) {
    if ((any[2 * hh] | any[2 * hh + 1]) != 0) {
      const int stage = (hh & 1) * WM_KEYS;
      for (int idx = threadIdx.x; idx < WM_KEYS * HD / 8; idx += 32 * WARPS) {
        const int key = idx / (HD / 8), d = (idx % (HD / 8)) * 8;
        const int kk = hh * WM_KEYS + key;
        const bool seen = (any[kk >> 5] >> (kk & 31)) & 1u;
        const size_t at = seen ? (size_t)(base + kk) * HD + d : 0;
        cp_async16(&ks[stage + key][d], kh + at, seen);
        cp_async16(&vs[stage + key][d], vh + at, seen);
      }
    }
    asm volatile("cp.async.commit_group;");
  };
  bool block_sees = false;
  for (int x = 0; x < words; ++x) block_sees |= any[x] != 0;
  if (block_sees) {
    issue(0);
    if (halves > 1) issue(1);
  }

  // This thread's two rows (g, g + 8 of the warp's 16 pairs), their queries (when the block
  // sees any key) and whether they see any key of the span.
  int il[2];
  bool sees[2];
  unsigned int qa[HD / 16][4];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int m = m0 + g + 8 * r;
    const bool live = m < pairs;
    const int i = live ? m / group : i0, h = kvh * group + (live ? m % group : 0);
    il[r] = live ? i - i0 : -1;
    sees[r] = false;
    if (live)
      for (int x = 0; x < words; ++x) sees[r] |= mask[il[r]][x] != 0;
    const float *qr = q + ((size_t)h * n + i) * HD;
#pragma unroll
    for (int s = 0; s < HD / 16; ++s) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int d = 16 * s + 8 * c + 2 * t;
        const float2 x =
            live && block_sees ? *reinterpret_cast<const float2 *>(qr + d) : make_float2(0.f, 0.f);
        qa[s][r + 2 * c] = pack_half2(x.x * scale, x.y * scale);
      }
    }
  }
  float o[HD / 8][4];
#pragma unroll
  for (int j = 0; j < HD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.f, 0.f};

  for (int hh = 0; block_sees && hh < halves; ++hh) {
    // Half hh's copies landed (half hh + 1's may still be on their way).
    if (hh + 1 < halves) {
      asm volatile("cp.async.wait_group 1;");
    } else {
      asm volatile("cp.async.wait_group 0;");
    }
    __syncthreads();
    if ((any[2 * hh] | any[2 * hh + 1]) != 0) {  // block-uniform
      const Row *kb = ks + (hh & 1) * WM_KEYS;
      const Row *vb = vs + (hh & 1) * WM_KEYS;
      unsigned int mrow[2][2];  // this half's 64 bits of each of the thread's rows
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mrow[r][0] = il[r] >= 0 ? mask[il[r]][2 * hh] : 0u;
        mrow[r][1] = il[r] >= 0 ? mask[il[r]][2 * hh + 1] : 0u;
      }
      // Scores of the 64 keys: tile j holds keys 8j..8j + 7.
      float c[WM_KEYS / 8][4];
#pragma unroll
      for (int j = 0; j < WM_KEYS / 8; ++j) {
        c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f;
#pragma unroll
        for (int s = 0; s < HD / 16; ++s) {
          const unsigned int b0 =
              *reinterpret_cast<const unsigned int *>(&kb[8 * j + g][16 * s + 2 * t]);
          const unsigned int b1 =
              *reinterpret_cast<const unsigned int *>(&kb[8 * j + g][16 * s + 8 + 2 * t]);
          mma_f16(c[j], qa[s], b0, b1);
        }
      }
      // Masks, then the online softmax: r = 0 is row g (c[.][0..1]), r = 1 row g + 8.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int j = 0; j < WM_KEYS / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int kk = 8 * j + 2 * t + e;
            if (!((mrow[r][kk >> 5] >> (kk & 31)) & 1u)) c[j][2 * r + e] = -INFINITY;
          }
        }
        float ml = -INFINITY;
#pragma unroll
        for (int j = 0; j < WM_KEYS / 8; ++j) ml = fmaxf(ml, fmaxf(c[j][2 * r], c[j][2 * r + 1]));
        ml = fmaxf(ml, __shfl_xor_sync(0xffffffff, ml, 1));
        ml = fmaxf(ml, __shfl_xor_sync(0xffffffff, ml, 2));
        const float mnew = fmaxf(mx[r], ml);
        // A row that has seen no key yet keeps zeros: exp(-inf - 0) = 0, never inf - inf.
        const float msafe = mnew == -INFINITY ? 0.f : mnew;
        const float alpha = expf(mx[r] - msafe);
        mx[r] = mnew;
#pragma unroll
        for (int j = 0; j < HD / 8; ++j) {
          o[j][2 * r] *= alpha;
          o[j][2 * r + 1] *= alpha;
        }
        float ls = 0.f;
#pragma unroll
        for (int j = 0; j < WM_KEYS / 8; ++j) {
          c[j][2 * r] = expf(c[j][2 * r] - msafe);
          c[j][2 * r + 1] = expf(c[j][2 * r + 1] - msafe);
          ls += c[j][2 * r] + c[j][2 * r + 1];
        }
        ls += __shfl_xor_sync(0xffffffff, ls, 1);
        ls += __shfl_xor_sync(0xffffffff, ls, 2);
        sum[r] = sum[r] * alpha + ls;
      }
      // Value sums: the probabilities as A fragments (keys 16s..16s + 15), values as B,
      // fetched transposed from their rows (lane l addresses key 16s + l % 16).
#pragma unroll
      for (int s = 0; s < WM_KEYS / 16; ++s) {
        const unsigned int pa[4] = {pack_half2(c[2 * s][0], c[2 * s][1]),
                                    pack_half2(c[2 * s][2], c[2 * s][3]),
                                    pack_half2(c[2 * s + 1][0], c[2 * s + 1][1]),
                                    pack_half2(c[2 * s + 1][2], c[2 * s + 1][3])};
#pragma unroll
        for (int j = 0; j < HD / 8; ++j) {
          unsigned int b0, b1;
          ldsm_x2_trans(b0, b1, &vb[16 * s + (lane & 15)][8 * j]);
          mma_f16(o[j], pa, b0, b1);
        }
      }
    }
    __syncthreads();  // every warp is done with stage hh % 2 before half hh + 2 refills it
    if (hh + 2 < halves) issue(hh + 2);
  }
  // The partials; a row that sees no key of the span writes only (-inf, 0), which the combine
  // skips.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int m = m0 + g + 8 * r;
    if (m >= pairs) continue;
    const int i = m / group, h = kvh * group + m % group;
    float *out = part + (((size_t)i * nh + h) * slots + slot) * (HD + 2);
    if (t == 0) {
      out[0] = mx[r];
      out[1] = sum[r];
    }
    if (!sees[r]) continue;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
      *reinterpret_cast<float2 *>(&out[2 + 8 * j + 2 * t]) = make_float2(o[j][2 * r], o[j][2 * r + 1]);
  }
#endif
}

#define WIDE_MMA(HD, WARPS)                                                                     \
  extern "C" __global__ void __launch_bounds__(32 * WARPS) attention_wide_mma_##HD##_##WARPS(   \
      const float *__restrict__ q, const __half *__restrict__ k, const __half *__restrict__ v,   \
      const unsigned int *__restrict__ keys, float *__restrict__ part, int n, int nh, int nkv,  \
      long long kv_stride, int width, int chunks, int span, int slots, float scale) {           \
    attention_wide_mma<HD, WARPS>(q, k, v, keys, part, n, nh, nkv, kv_stride, width, chunks,    \
                                  span, slots, scale);                                          \
  }
WIDE_MMA(64, 4)
WIDE_MMA(128, 4)
