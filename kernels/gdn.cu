// The Gated DeltaNet layer of Qwen3.5 / 3.6 hybrids on the GPU: its causal convolution and its
// delta-rule recurrence, for a block of rows each continuing its parent row (a chain, a draft
// tree) or the committed state, without storing any row's state. CPU reference:
// `GatedDeltaNet::step` in src/model/gated_delta.rs; `treespec selftest --device cuda` and the
// Qwen3.5 tests on the GPU compare the two (src/gpu/gdn.rs).
//
// Three kernels, all reading the block's parents (`parents[i]`, 0xffffffff for a row that follows
// the committed rows):
//
// - `gdn_conv`, one block a row: the width-K depthwise convolution over the row's path (its
//   ancestors in the block, then the committed window), SiLU, then L2 norms of each key head's q
//   and k (q also scaled by 1/sqrt(dk)).
// - `gdn_recur`, one block a (value head, row) or, for a chain, a value head walking every row:
//   four lanes a value column hold that column of the [dk, dv] state in registers, start from
//   the committed state and apply the update of each row on the path from the block's root to
//   its row, then the row's output and the gated RMSNorm. The state after `state_row` is written
//   to `s_out` (the new committed state). A row's arithmetic is the same whichever launch walks
//   it, so a tree node, the same row in a chain and a one-row step agree bit for bit.
// - `gdn_window`: the convolution window after `row` (its last K-1 inputs along its path).

#define GDN_MAX_DK 128
#define GDN_MAX_TAPS 8
#define GDN_MAX_DV 128
#define GDN_ROOT 0xffffffffu

// Where the input `d` rows back from `row` comes from (d >= 0; 0 is the row itself): a row of
// the block (>= 0), or slot `-(1 + s)` of the committed window (oldest first, K-1 slots).
__device__ __forceinline__ int gdn_source(const unsigned *parents, int row, int d, int taps) {
  int node = row;
  for (int s = 0; s < d; s++) {
    unsigned p = parents[node];
    if (p == GDN_ROOT) {
      // d - s - 1 more steps back from the newest window slot (taps - 2).
      return -(1 + (taps - 2 - (d - s - 1)));
    }
    node = (int)p;
  }
  return node;
}

// Grid (rows), block 256. c: [n, C] convolution inputs; window: [K-1, C]; w: [C, K] taps, oldest
// input first; u: [n, C] out.
extern "C" __global__ void gdn_conv(const float *__restrict__ c, const float *__restrict__ window,
                                    const float *__restrict__ w, const unsigned *__restrict__ parents,
                                    float *__restrict__ u, int C, int taps, int k_heads, int k_dim) {
  __shared__ int src[GDN_MAX_TAPS];
  const int row = blockIdx.x;
  if (threadIdx.x < taps) {
    src[threadIdx.x] = gdn_source(parents, row, taps - 1 - threadIdx.x, taps);
  }
  __syncthreads();
  float *out = u + (size_t)row * C;
  for (int ch = threadIdx.x; ch < C; ch += blockDim.x) {
    const float *wc = w + (size_t)ch * taps;
    float acc = 0.f;
    for (int j = 0; j < taps - 1; j++) {
      int s = src[j];
      float x = s >= 0 ? c[(size_t)s * C + ch] : window[(size_t)(-s - 1) * C + ch];
      acc = __fadd_rn(acc, __fmul_rn(wc[j], x));
    }
    acc = __fadd_rn(acc, __fmul_rn(wc[taps - 1], c[(size_t)row * C + ch]));
    out[ch] = acc / (1.f + expf(-acc));
  }
  __syncthreads();
  // L2 norms: a warp a segment of k_dim values (q heads, then k heads).
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const float scale = 1.f / sqrtf((float)k_dim);
  for (int seg = warp; seg < 2 * k_heads; seg += warps) {
    float *x = out + (size_t)seg * k_dim;
    float ss = 0.f;
    for (int i = lane; i < k_dim; i += 32) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
    for (int o = 16; o > 0; o >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
    float inv = 1.f / sqrtf(ss + 1e-6f);
    if (seg < k_heads) inv = __fmul_rn(inv, scale);
    for (int i = lane; i < k_dim; i += 32) x[i] = __fmul_rn(x[i], inv);
  }
}

// A value column's state is held by GDN_PARTS neighbouring lanes, GDN_CHUNK of its dk entries
// each (part p: entries p * GDN_CHUNK + j), in registers; the dot products over dk are the parts'
// sums added by a fixed shuffle tree, so every lane of the group has the same total.
#define GDN_PARTS 4
#define GDN_CHUNK (GDN_MAX_DK / GDN_PARTS)

__device__ __forceinline__ float gdn_group_sum(float x) {
#pragma unroll
  for (int o = 1; o < GDN_PARTS; o <<= 1) x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// One row's update of a lane's part of a state column (its entries `base + j`, those below dk)
// and the row's output for the column.
__device__ __forceinline__ float gdn_update(float (&s)[GDN_CHUNK], const float *q, const float *k,
                                            float v, float decay, float beta, int base, int k_dim) {
  float kv = 0.f;
#pragma unroll
  for (int j = 0; j < GDN_CHUNK; j++) {
    if (base + j < k_dim) {
      s[j] = __fmul_rn(s[j], decay);
      kv = __fadd_rn(kv, __fmul_rn(s[j], k[base + j]));
    }
  }
  const float delta = __fmul_rn(__fsub_rn(v, gdn_group_sum(kv)), beta);
  float o = 0.f;
#pragma unroll
  for (int j = 0; j < GDN_CHUNK; j++) {
    if (base + j < k_dim) {
      s[j] = __fadd_rn(s[j], __fmul_rn(k[base + j], delta));
      o = __fadd_rn(o, __fmul_rn(s[j], q[base + j]));
    }
  }
  return gdn_group_sum(o);
}

// Grid (v_heads, rows or 1 for a chain), block GDN_PARTS * dv rounded up to a warp (dv <= GDN_MAX_DV),
// dynamic shared memory 4 * (rows + 1) bytes (a row's path). u: [n, C] from gdn_conv; a, b:
// [n, hv] gate projections; z: [n, hv * dv] (with `out`); s0: [hv, dk, dv] committed; out:
// [n, hv * dv] gated outputs or null; s_out: [hv, dk, dv] or null. `first`: the row of the
// launch's first block (per-row grids).
extern "C" __global__ void __launch_bounds__(GDN_PARTS * GDN_MAX_DV)
    gdn_recur(const float *__restrict__ u, const float *__restrict__ a, const float *__restrict__ b,
              const float *__restrict__ z, const float *__restrict__ a_neg,
              const float *__restrict__ dt_bias, const float *__restrict__ norm_w,
              const float *__restrict__ s0, const unsigned *__restrict__ parents,
              float *__restrict__ out, float *__restrict__ s_out, int chain, int n, int first,
              int state_row, int k_heads, int v_heads, int k_dim, int v_dim, int v_tiled,
              float eps) {
  extern __shared__ int path[];
  __shared__ float qk[2 * GDN_MAX_DK];
  __shared__ float red[32];
  const int h = blockIdx.x;
  const int d = threadIdx.x / GDN_PARTS, part = threadIdx.x % GDN_PARTS;
  const int base = part * GDN_CHUNK;
  const bool col = d < v_dim;
  const int hk = v_tiled ? h % k_heads : h / (v_heads / k_heads);
  const int C = 2 * k_heads * k_dim + v_heads * v_dim;
  const size_t head = (size_t)h * k_dim * v_dim;
  float s[GDN_CHUNK];
#pragma unroll
  for (int j = 0; j < GDN_CHUNK; j++)
    s[j] = (col && base + j < k_dim) ? s0[head + (size_t)(base + j) * v_dim + d] : 0.f;
  // The rows this block walks, root first.
  int len;
  int target = first + blockIdx.y;
  if (chain) {
    len = n;
    target = -1;
  } else {
    if (threadIdx.x == 0) {
      int depth = 0;
      for (int r = target; r >= 0; r = parents[r] == GDN_ROOT ? -1 : (int)parents[r]) depth++;
      int at = depth;
      for (int r = target; r >= 0; r = parents[r] == GDN_ROOT ? -1 : (int)parents[r]) path[--at] = r;
      path[n] = depth;
    }
    __syncthreads();
    len = path[n];
  }
  for (int step = 0; step < len; step++) {
    const int row = chain ? step : path[step];
    const float *ur = u + (size_t)row * C;
    __syncthreads();
    for (int i = threadIdx.x; i < k_dim; i += blockDim.x) {
      qk[i] = ur[(size_t)hk * k_dim + i];
      qk[GDN_MAX_DK + i] = ur[(size_t)(k_heads + hk) * k_dim + i];
    }
    __syncthreads();
    const float bv = b[(size_t)row * v_heads + h];
    const float beta = 1.f / (1.f + expf(-bv));
    const float x = __fadd_rn(a[(size_t)row * v_heads + h], dt_bias[h]);
    const float softplus = x > 20.f ? x : log1pf(expf(x));
    const float decay = expf(__fmul_rn(a_neg[h], softplus));
    const float v = col ? ur[(size_t)2 * k_heads * k_dim + (size_t)h * v_dim + d] : 0.f;
    float o = gdn_update(s, qk, qk + GDN_MAX_DK, v, decay, beta, base, k_dim);
    if (!col) o = 0.f;
    if (row == state_row && s_out != nullptr && col) {
#pragma unroll
      for (int j = 0; j < GDN_CHUNK; j++)
        if (base + j < k_dim) s_out[head + (size_t)(base + j) * v_dim + d] = s[j];
    }
    if (out != nullptr && (chain || row == target)) {
      // The gated RMSNorm over the head's dv outputs (one lane a column): warps' sums in a
      // fixed tree, then in warp order.
      float sq = part == 0 ? __fmul_rn(o, o) : 0.f;
      for (int off = 16; off > 0; off >>= 1) sq = __fadd_rn(sq, __shfl_xor_sync(0xffffffffu, sq, off));
      if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sq;
      __syncthreads();
      float ms = 0.f;
      for (int w = 0; w < (int)(blockDim.x + 31) / 32; w++) ms = __fadd_rn(ms, red[w]);
      __syncthreads();
      ms = __fdiv_rn(ms, (float)v_dim);
      const float inv = 1.f / sqrtf(__fadd_rn(ms, eps));
      if (col && part == 0) {
        const size_t at = (size_t)row * v_heads * v_dim + (size_t)h * v_dim + d;
        const float zv = z[at];
        const float silu = zv / (1.f + expf(-zv));
        out[at] = __fmul_rn(__fmul_rn(__fmul_rn(o, inv), norm_w[d]), silu);
      }
    }
  }
}

// Grid (ceil(C / 256)), block 256: the window after `row` (its K-1 newest inputs along its path,
// oldest first) into `w_out` [K-1, C].
extern "C" __global__ void gdn_window(const float *__restrict__ c, const float *__restrict__ window,
                                      const unsigned *__restrict__ parents, float *__restrict__ w_out,
                                      int row, int C, int taps) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= C) return;
  for (int j = 0; j < taps - 1; j++) {
    int s = gdn_source(parents, row, taps - 2 - j, taps);
    w_out[(size_t)j * C + ch] = s >= 0 ? c[(size_t)s * C + ch] : window[(size_t)(-s - 1) * C + ch];
  }
}
