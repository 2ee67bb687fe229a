// The Gated DeltaNet layer of Qwen3.5 / 3.6 hybrids on the GPU: its causal convolution and its
// delta-rule recurrence, for a block of rows each continuing its parent row (a chain, a draft
// tree) or the committed state, no row's state stored in device memory. CPU reference:
// `GatedDeltaNet::step` in src/model/gated_delta.rs; `treespec selftest --device cuda` and the
// Qwen3.5 tests on the GPU compare the two (src/gpu/gdn.rs).
//
// The kernels, all reading the block's parents (`parents[i]`, 0xffffffff for a row that follows
// the committed rows) or a walk of them:
//
// - `gdn_conv`, a block a (row, head or span of values): the width-K depthwise convolution over the row's path (its
//   ancestors in the block, then the committed window), SiLU, then L2 norms of each key head's q
//   and k (q also scaled by 1/sqrt(dk)).
// - `gdn_tree{8,16,32,128}`, a block a (value head, span of that many value columns): four lanes
//   a value column hold that column of the [dk, dv] state in registers, start from the committed
//   state and update it once a row of the block, depth first (src/gpu/gdn_walk.rs: a row after
//   its parent continues the state held, another restores its parent's from shared memory),
//   writing each row's output; `gdn_norm` then applies the gated RMSNorm to a row's outputs
//   (the whole-head width does it in the same kernel). The state after `state_row` is written
//   to `s_out` (the new committed state). A row's arithmetic is the same whichever launch walks
//   it, so a tree node, the same row in a chain and a one-row step agree bit for bit.
// - `gdn_window`: the convolution window after `row` (its last K-1 inputs along its path).
//
// The decoder step (src/gpu/step/) runs a layer's rows with `gdn_conv` over its projection rows
// (`c_stride` apart, stashing what a later commit replays: the inputs, the convolution's outputs
// and the gates) and `gdn_tree`, and folds a kept path of the previous block into the committed
// state of every layer at the start of the next pass with `gdn_commit`, in place, from the stash:
// the same per-row arithmetic (`gdn_gates`, `gdn_update`), so the committed state is bit for bit
// what one-row steps reach.

#include "cp_async.cuh"
#include "pdl.cuh"

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

// Channels a block of `gdn_conv` takes (one a thread): a q or k head's k_dim (<= GDN_MAX_DK), or
// this many of the values.
#define GDN_CONV_THREADS 128

// Grid (rows, 2 * k_heads + ceil(v_heads * v_dim / GDN_CONV_THREADS)), block GDN_CONV_THREADS: a
// block a (row, q or k head | span of value channels), so that a one-row step spreads over the
// GPU. c: convolution inputs, rows `c_stride` apart (C channels each); window: [K-1, C]; w: [C, K]
// taps, oldest input first; u: [n, C] out. Where `stash` is set (the decoder step), the row's
// inputs go to stash [n, C] and its `ab` values (2 * v_heads from c + C + ab_at: the step's b and
// a projections) to ab_stash [n, 2 * v_heads].
extern "C" __global__ void __launch_bounds__(GDN_CONV_THREADS)
    gdn_conv(const float *__restrict__ c, int c_stride, const float *__restrict__ window,
             const float *__restrict__ w, const unsigned *__restrict__ parents,
             float *__restrict__ u, int C, int taps, int k_heads, int k_dim,
             float *__restrict__ stash, float *__restrict__ ab_stash, int ab_at, int v_heads) {
  __shared__ int src[GDN_MAX_TAPS];
  __shared__ float red[GDN_CONV_THREADS / 32];
  pdl_enter();
  const int row = blockIdx.x, seg = blockIdx.y;
  const int qk = 2 * k_heads;
  const int ch = seg < qk ? seg * k_dim + (int)threadIdx.x
                          : qk * k_dim + (seg - qk) * GDN_CONV_THREADS + (int)threadIdx.x;
  const bool in = seg < qk ? (int)threadIdx.x < k_dim : ch < C;
  if (stash != nullptr && seg == 0) {
    for (int i = threadIdx.x; i < 2 * v_heads; i += blockDim.x)
      ab_stash[(size_t)row * 2 * v_heads + i] = c[(size_t)row * c_stride + C + ab_at + i];
  }
  if (threadIdx.x < taps) {
    src[threadIdx.x] = gdn_source(parents, row, taps - 1 - threadIdx.x, taps);
  }
  __syncthreads();
  float y = 0.f;
  if (in) {
    const float now = c[(size_t)row * c_stride + ch];
    if (stash != nullptr) stash[(size_t)row * C + ch] = now;
    const float *wc = w + (size_t)ch * taps;
    float acc = 0.f;
    for (int j = 0; j < taps - 1; j++) {
      int s = src[j];
      float x = s >= 0 ? c[(size_t)s * c_stride + ch] : window[(size_t)(-s - 1) * C + ch];
      acc = __fadd_rn(acc, __fmul_rn(wc[j], x));
    }
    acc = __fadd_rn(acc, __fmul_rn(wc[taps - 1], now));
    y = acc / (1.f + expf(-acc));
  }
  if (seg < qk) {
    // The head's L2 norm: each warp's squares by a fixed tree, then the warps' sums in order.
    float ss = __fmul_rn(y, y);
    for (int o = 16; o > 0; o >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = ss;
    __syncthreads();
    float total = 0.f;
    for (int k = 0; k < GDN_CONV_THREADS / 32; k++) total = __fadd_rn(total, red[k]);
    float inv = 1.f / sqrtf(total + 1e-6f);
    if (seg < k_heads) inv = __fmul_rn(inv, 1.f / sqrtf((float)k_dim));
    y = __fmul_rn(y, inv);
  }
  if (in) u[(size_t)row * C + ch] = y;
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

// A row's q and k in shared memory as the lanes read them: part p's GDN_CHUNK entries at
// p * GDN_QK_PART floats, 4 floats of padding apart, so that the four parts' reads of one entry
// fall in four banks (unpadded, parts 128 bytes apart shared a bank: four-way conflicts on every
// read of the update). q at 0, k at GDN_QK_K; a lane passes `gdn_update` q and k offset by
// part * 4, which its entries' indices base + j then land on.
#define GDN_QK_PART (GDN_CHUNK + 4)
#define GDN_QK_K (GDN_PARTS * GDN_QK_PART)
#define GDN_QK_ROW (2 * GDN_QK_K)
__device__ __forceinline__ int gdn_qk_at(int e) { return e + e / GDN_CHUNK * 4; }

// A lane's part of value column d (entries base + j below dk) of a head's state `st` [dk, dv]
// into s, zeros where `live` is not set; and back.
__device__ __forceinline__ void gdn_load_part(float (&s)[GDN_CHUNK], const float *st, int base,
                                              int d, bool live, int k_dim, int v_dim) {
#pragma unroll
  for (int j = 0; j < GDN_CHUNK; j++)
    s[j] = (live && base + j < k_dim) ? st[(size_t)(base + j) * v_dim + d] : 0.f;
}

__device__ __forceinline__ void gdn_store_part(const float (&s)[GDN_CHUNK], float *st, int base,
                                               int d, int k_dim, int v_dim) {
#pragma unroll
  for (int j = 0; j < GDN_CHUNK; j++)
    if (base + j < k_dim) st[(size_t)(base + j) * v_dim + d] = s[j];
}

// One row's update of a lane's part of a state column (its entries `base + j`, those below dk;
// FULL: every entry, dk being GDN_MAX_DK) and the row's output for the column.
template <bool FULL = false>
__device__ __forceinline__ float gdn_update(float (&s)[GDN_CHUNK], const float *q, const float *k,
                                            float v, float decay, float beta, int base, int k_dim) {
  float kv = 0.f;
#pragma unroll
  for (int j = 0; j < GDN_CHUNK; j++) {
    if (FULL || base + j < k_dim) {
      s[j] = __fmul_rn(s[j], decay);
      kv = __fadd_rn(kv, __fmul_rn(s[j], k[base + j]));
    }
  }
  const float delta = __fmul_rn(__fsub_rn(v, gdn_group_sum(kv)), beta);
  float o = 0.f;
#pragma unroll
  for (int j = 0; j < GDN_CHUNK; j++) {
    if (FULL || base + j < k_dim) {
      s[j] = __fadd_rn(s[j], __fmul_rn(k[base + j], delta));
      o = __fadd_rn(o, __fmul_rn(s[j], q[base + j]));
    }
  }
  return gdn_group_sum(o);
}

// A row's gates for value head h: beta = sigmoid(b), decay = exp(-exp(A_log) softplus(a + dt)).
__device__ __forceinline__ void gdn_gates(float bv, float av, float a_neg, float dt, float &beta,
                                          float &decay) {
  beta = 1.f / (1.f + expf(-bv));
  const float x = __fadd_rn(av, dt);
  const float softplus = x > 20.f ? x : log1pf(expf(x));
  decay = expf(__fmul_rn(a_neg, softplus));
}

// The gated RMSNorm of one row's outputs (one lane a value column, `o` the same on every part of
// the column's lane group) into out: warps' sums in a fixed tree, then in warp order.
__device__ __forceinline__ void gdn_norm_out(float o, float *red, float *__restrict__ out,
                                             const float *__restrict__ z,
                                             const float *__restrict__ norm_w, int row, int h,
                                             int d, int part, bool col, int v_heads, int v_dim,
                                             float eps, int z_stride) {
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
    const float zv = z[(size_t)row * z_stride + (size_t)h * v_dim + d];
    const float silu = zv / (1.f + expf(-zv));
    out[at] = __fmul_rn(__fmul_rn(__fmul_rn(o, inv), norm_w[d]), silu);
  }
}

// `gdn_tree`: a block's rows in one depth-first walk of their tree. A block holds COLS value
// columns of one head (grid (v_heads, ceil(dv / COLS)), GDN_PARTS * COLS threads) and updates
// their state once a row, in the order of a schedule the host makes (src/gpu/gdn_walk.rs): a
// row either continues the state its lanes hold (the row before it was its parent) or first
// restores its parent's state from a slot in shared memory, where a node with several children
// saved it. Each lane saves and restores only its own part, so slots need no barrier. sched[0]:
// the slot the committed state is saved in before the walk, plus one (0: none); sched[1 + t],
// the walk's t-th row: bits 0-15 the row, 16-23 the slot restored before its update plus one,
// 24-31 the slot saved after it plus one. A null `sched` walks rows 0 .. n in order (a chain).
// A row's arithmetic is gdn_gates and gdn_update whatever the walk, so the same bits.
#define GDN_TREE_WIN 8
#define GDN_OP_ROW(op) ((int)((op)&0xffffu))
#define GDN_OP_RESTORE(op) ((int)(((op) >> 16) & 0xffu))
#define GDN_OP_SAVE(op) ((int)((op) >> 24))

// Dynamic shared memory: `slots` saved states ([slot][GDN_CHUNK][lane], so that a warp's lanes
// touch neighbouring words), then the schedule's n + 1 entries where `sched` is set (src/gpu/
// gdn_walk.rs `shared_bytes`). u: [n, C]; a, b: gate projections (rows `ab_stride` apart); s0:
// [hv, dk, dv] committed; out: [n, hv * dv], the raw outputs (`gdn_norm` gates and norms them
// in place) or, where `z` is set (a block holds the whole head: gridDim.y 1), the gated
// outputs; s_out: the state after `state_row`, or null.
template <int COLS, bool FULL = false>
__device__ __forceinline__ void gdn_tree_run(
    const float *__restrict__ u, const float *__restrict__ a, const float *__restrict__ b,
    const float *__restrict__ z, const float *__restrict__ a_neg,
    const float *__restrict__ dt_bias, const float *__restrict__ norm_w, const float *s0,
    const unsigned *__restrict__ sched, float *out, float *s_out, int n, int slots, int state_row,
    int k_heads, int v_heads, int k_dim, int v_dim, int v_tiled, float eps, int ab_stride,
    int z_stride) {
  extern __shared__ float slot_mem[];
  __shared__ float qk[2][GDN_TREE_WIN][GDN_QK_ROW];
  __shared__ float vs[2][GDN_TREE_WIN][COLS];
  __shared__ float ab[2][GDN_TREE_WIN][2];  // b, a
  __shared__ float gate[GDN_TREE_WIN][2];   // beta, decay
  __shared__ float red[32];
  unsigned *ops = (unsigned *)(slot_mem + (size_t)slots * GDN_CHUNK * blockDim.x);
  pdl_enter();
  const int h = blockIdx.x;
  const int dl = threadIdx.x / GDN_PARTS, part = threadIdx.x % GDN_PARTS;
  const int d = blockIdx.y * COLS + dl;
  const int base = part * GDN_CHUNK;
  const bool col = dl < COLS && d < v_dim;
  const int hk = v_tiled ? h % k_heads : h / (v_heads / k_heads);
  const int C = 2 * k_heads * k_dim + v_heads * v_dim;
  const size_t head = (size_t)h * k_dim * v_dim;
  if (sched != nullptr) {
    for (int i = threadIdx.x; i <= n; i += blockDim.x) ops[i] = sched[i];
    __syncthreads();
  }
  // Entry j of this lane's part in slot k; the walk's t-th row.
  auto slot = [&](int k, int j) -> float & {
    return slot_mem[(size_t)(k * GDN_CHUNK + j) * blockDim.x + threadIdx.x];
  };
  auto row_at = [&](int t) { return sched != nullptr ? GDN_OP_ROW(ops[1 + t]) : t; };
  float s[GDN_CHUNK];
  gdn_load_part(s, s0 + head, base, d, col, k_dim, v_dim);
  // Save the state held into slot `k` plus one (0: none).
  auto save_to = [&](int k) {
    if (k) {
#pragma unroll
      for (int j = 0; j < GDN_CHUNK; j++) slot(k - 1, j) = s[j];
    }
  };
  save_to(sched != nullptr ? (int)ops[0] : 0);
  // Copy the inputs of the walk's rows t0 .. t0 + GDN_TREE_WIN into buffer bf.
  auto stage = [&](int bf, int t0) {
    const int m = min(GDN_TREE_WIN, n - t0);
    for (int r = 0; r < m; r++) {
      const float *ur = u + (size_t)row_at(t0 + r) * C;
      for (int e = threadIdx.x; e < k_dim; e += blockDim.x) {
        cp_async4(&qk[bf][r][gdn_qk_at(e)], ur + (size_t)hk * k_dim + e);
        cp_async4(&qk[bf][r][GDN_QK_K + gdn_qk_at(e)], ur + (size_t)(k_heads + hk) * k_dim + e);
      }
    }
    for (int i = threadIdx.x; i < m * COLS; i += blockDim.x) {
      const int r = i / COLS, c = i % COLS;
      const int row = row_at(t0 + r);
      const int dd = blockIdx.y * COLS + c;
      if (dd < v_dim)
        cp_async4(&vs[bf][r][c], u + (size_t)row * C + (size_t)2 * k_heads * k_dim +
                                     (size_t)h * v_dim + dd);
    }
    for (int i = threadIdx.x; i < 2 * m; i += blockDim.x) {
      const int r = i / 2;
      const int row = row_at(t0 + r);
      cp_async4(&ab[bf][r][i % 2], (i % 2 ? a : b) + (size_t)row * ab_stride + h);
    }
    cp_async_commit();
  };
  stage(0, 0);
  for (int t0 = 0, w = 0; t0 < n; t0 += GDN_TREE_WIN, w++) {
    const int bf = w & 1, m = min(GDN_TREE_WIN, n - t0);
    if (t0 + GDN_TREE_WIN < n) {
      stage(bf ^ 1, t0 + GDN_TREE_WIN);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if ((int)threadIdx.x < m)
      gdn_gates(ab[bf][threadIdx.x][0], ab[bf][threadIdx.x][1], a_neg[h], dt_bias[h],
                gate[threadIdx.x][0], gate[threadIdx.x][1]);
    __syncthreads();
    for (int r = 0; r < m; r++) {
      const unsigned op = sched != nullptr ? ops[1 + t0 + r] : 0u;  // a chain: no slot
      const int row = row_at(t0 + r), restore = GDN_OP_RESTORE(op);
      if (restore) {
#pragma unroll
        for (int j = 0; j < GDN_CHUNK; j++) s[j] = slot(restore - 1, j);
      }
      const float v = col ? vs[bf][r][dl] : 0.f;
      const float *q = qk[bf][r] + part * 4;
      const float o =
          gdn_update<FULL>(s, q, q + GDN_QK_K, v, gate[r][1], gate[r][0], base, k_dim);
      save_to(GDN_OP_SAVE(op));
      if (row == state_row && s_out != nullptr && col)
        gdn_store_part(s, s_out + head, base, d, k_dim, v_dim);
      if (out != nullptr && col && part == 0)
        out[(size_t)row * v_heads * v_dim + (size_t)h * v_dim + d] = o;
    }
    __syncthreads();  // buffer bf and the gates are free again
  }
  if (z != nullptr && out != nullptr) {
    // The whole head is this block's: gate and norm each row's outputs in place (a row's
    // outputs were written by their part-0 lanes before the barrier above).
    for (int row = 0; row < n; row++) {
      const size_t at = (size_t)row * v_heads * v_dim + (size_t)h * v_dim + d;
      const float o = col && part == 0 ? out[at] : 0.f;
      gdn_norm_out(o, red, out, z, norm_w, row, h, d, part, col, v_heads, v_dim, eps, z_stride);
    }
  }
}

// gdn_tree{COLS} for any key width, gdn_tree{COLS}_full for key heads of GDN_MAX_DK (the
// update's bound checks compiled out: the same arithmetic, fewer instructions a row).
#define GDN_TREE(COLS, NAME, FULL)                                                             \
  extern "C" __global__ void __launch_bounds__(GDN_PARTS * COLS) NAME(                         \
      const float *__restrict__ u, const float *__restrict__ a, const float *__restrict__ b,   \
      const float *__restrict__ z, const float *__restrict__ a_neg,                           \
      const float *__restrict__ dt_bias, const float *__restrict__ norm_w, const float *s0,   \
      const unsigned *__restrict__ sched, float *out, float *s_out, int n, int slots,         \
      int state_row, int k_heads, int v_heads, int k_dim, int v_dim, int v_tiled, float eps,  \
      int ab_stride, int z_stride) {                                                          \
    gdn_tree_run<COLS, FULL>(u, a, b, z, a_neg, dt_bias, norm_w, s0, sched, out, s_out, n,    \
                             slots, state_row, k_heads, v_heads, k_dim, v_dim, v_tiled, eps,  \
                             ab_stride, z_stride);                                            \
  }
GDN_TREE(8, gdn_tree8, false)
GDN_TREE(16, gdn_tree16, false)
GDN_TREE(32, gdn_tree32, false)
GDN_TREE(128, gdn_tree128, false)
GDN_TREE(8, gdn_tree8_full, true)
GDN_TREE(16, gdn_tree16_full, true)
GDN_TREE(32, gdn_tree32_full, true)
GDN_TREE(128, gdn_tree128_full, true)

// Grid (n, v_heads), block GDN_PARTS * dv rounded up to a warp: `gdn_tree`'s raw outputs `out`
// [n, hv * dv] gated and normed in place (gdn_norm_out, as the whole-head width does it).
extern "C" __global__ void __launch_bounds__(GDN_PARTS * GDN_MAX_DV)
    gdn_norm(float *out, const float *__restrict__ z, const float *__restrict__ norm_w,
             int v_heads, int v_dim, float eps, int z_stride) {
  __shared__ float red[32];
  pdl_enter();
  const int row = blockIdx.x, h = blockIdx.y;  // rows on x: a chain may pass 65535 rows
  const int d = threadIdx.x / GDN_PARTS, part = threadIdx.x % GDN_PARTS;
  const bool col = d < v_dim;
  const size_t at = (size_t)row * v_heads * v_dim + (size_t)h * v_dim + d;
  const float o = col && part == 0 ? out[at] : 0.f;
  gdn_norm_out(o, red, out, z, norm_w, row, h, d, part, col, v_heads, v_dim, eps, z_stride);
}

// Grid (ceil(C / 256)), block 256: the window after `row` (its K-1 newest inputs along its path,
// oldest first) into `w_out` [K-1, C]; c's rows `c_stride` apart. `w_out` may be `window`: slot
// j is written from slot j + 1 or later (or from c), after those reads of this thread's channel.
extern "C" __global__ void gdn_window(const float *__restrict__ c, int c_stride, const float *window,
                                      const unsigned *__restrict__ parents, float *w_out, int row,
                                      int C, int taps) {
  pdl_enter();
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= C) return;
  for (int j = 0; j < taps - 1; j++) {
    int s = gdn_source(parents, row, taps - 2 - j, taps);
    w_out[(size_t)j * C + ch] =
        s >= 0 ? c[(size_t)s * c_stride + ch] : window[(size_t)(-s - 1) * C + ch];
  }
}

// One Gated DeltaNet layer of the decoder step as `gdn_commit` reads it (device addresses): its
// committed state [hv, dk, dv] and window [K-1, C], written in place; the stash of the last block
// (inputs [*, C], convolution outputs [*, C], gates [*, 2 hv]: b then a); -exp(A_log), dt bias.
struct GdnLayer {
  float *s;
  float *window;
  const float *c;
  const float *u;
  const float *ab;
  const float *a_neg;
  const float *dt_bias;
};

// Grid (v_heads + ceil(C / blockDim), layers), block GDN_PARTS * dv rounded up to a warp. Folds the
// path commit[2 .. 2 + commit[0]) (rows of the last block's stash, root first) into every layer's
// committed state, from zero where commit[1] is set: blocks below v_heads the recurrence of value
// head blockIdx.x (as gdn_tree walks it), the others the window's channels. Nothing to do: len 0
// and no zeroing.
extern "C" __global__ void __launch_bounds__(GDN_PARTS * GDN_MAX_DV)
    gdn_commit(const GdnLayer *__restrict__ layers, const unsigned *__restrict__ commit, int C,
               int taps, int k_heads, int v_heads, int k_dim, int v_dim, int v_tiled) {
  __shared__ float qk[GDN_QK_ROW];
  pdl_enter();
  const int len = (int)commit[0];
  const bool zero = commit[1] != 0u;
  if (len == 0 && !zero) return;
  const unsigned *path = commit + 2;
  const GdnLayer L = layers[blockIdx.y];
  if ((int)blockIdx.x >= v_heads) {
    const int ch = (blockIdx.x - v_heads) * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    // The window after the path: entries len .. len + K - 2 of [old window | path inputs].
    for (int j = 0; j < taps - 1; j++) {
      const int src = j + len;
      float x;
      if (src < taps - 1) {
        x = zero ? 0.f : L.window[(size_t)src * C + ch];
      } else {
        x = L.c[(size_t)path[src - (taps - 1)] * C + ch];
      }
      L.window[(size_t)j * C + ch] = x;
    }
    return;
  }
  const int h = blockIdx.x;
  const int d = threadIdx.x / GDN_PARTS, part = threadIdx.x % GDN_PARTS;
  const int base = part * GDN_CHUNK;
  const bool col = d < v_dim;
  const int hk = v_tiled ? h % k_heads : h / (v_heads / k_heads);
  const size_t head = (size_t)h * k_dim * v_dim;
  float s[GDN_CHUNK];
  gdn_load_part(s, L.s + head, base, d, !zero && col, k_dim, v_dim);
  for (int step = 0; step < len; step++) {
    const int row = (int)path[step];
    const float *ur = L.u + (size_t)row * C;
    __syncthreads();
    for (int i = threadIdx.x; i < k_dim; i += blockDim.x) {
      qk[gdn_qk_at(i)] = ur[(size_t)hk * k_dim + i];
      qk[GDN_QK_K + gdn_qk_at(i)] = ur[(size_t)(k_heads + hk) * k_dim + i];
    }
    __syncthreads();
    float beta, decay;
    const float *ab = L.ab + (size_t)row * 2 * v_heads;
    gdn_gates(ab[h], ab[v_heads + h], L.a_neg[h], L.dt_bias[h], beta, decay);
    const float v = col ? ur[(size_t)2 * k_heads * k_dim + (size_t)h * v_dim + d] : 0.f;
    gdn_update(s, qk + part * 4, qk + GDN_QK_K + part * 4, v, decay, beta, base, k_dim);
  }
  if (col) gdn_store_part(s, L.s + head, base, d, k_dim, v_dim);
}
