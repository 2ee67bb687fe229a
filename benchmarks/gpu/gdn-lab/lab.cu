// The Gated DeltaNet recurrence (kernels/gdn.cu `gdn_tree` at each width, then `gdn_norm` where
// the width is not the whole head) timed alone on random inputs shaped as Qwen3.6-27B's layers
// (16 key heads, 48 value heads, 128 x 128), for blocks of tree rows, for the developers: each
// compared bit for bit with `ref_recur` (the recurrence before it: every row walks its whole
// path, one block a row), timed with events (median of reps). Trees: `binary` (parent
// (i - 1) / 2, as `bench --costs`), `star` (every row a root), `chain`, `random` (each row's
// parent drawn from the rows before it, or none).
//
//   nvcc -arch=sm_90 -O3 -I kernels -o /tmp/gdnlab benchmarks/gpu/gdn-lab/lab.cu
//   /tmp/gdnlab N [binary|star|chain|random]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#include "../lab.cuh"
#include "gdn.cu"

// The runtime's recurrence before `gdn_tree` (session 27), the lab's reference: one block a
// (value head, row), each walking its row's whole path from the committed state.
//
// The rows a `ref_recur` block walks, root first: a chain's n rows in order (`target` set to -1),
// or the path from the block's root to `target` into path[0 .. len) (path[n] = len). Returns len.
__device__ __forceinline__ int ref_path(const unsigned *__restrict__ parents, int *path, int chain,
                                       int n, int &target) {
  if (chain) {
    target = -1;
    return n;
  }
  if (threadIdx.x == 0) {
    int depth = 0;
    for (int r = target; r >= 0; r = parents[r] == GDN_ROOT ? -1 : (int)parents[r]) depth++;
    int at = depth;
    for (int r = target; r >= 0; r = parents[r] == GDN_ROOT ? -1 : (int)parents[r]) path[--at] = r;
    path[n] = depth;
  }
  __syncthreads();
  return path[n];
}

// Grid (v_heads, rows or 1 for a chain), block GDN_PARTS * dv rounded up to a warp (dv <= GDN_MAX_DV),
// dynamic shared memory 4 * (rows + 1) bytes (a row's path). u:
// [n, C] from gdn_conv; a, b: [n, hv] gate projections; z: [n, hv * dv] (with `out`); s0:
// [hv, dk, dv] committed; out: [n, hv * dv] gated outputs or null; s_out: [hv, dk, dv] or null.
// `first`: the row of the launch's first block (per-row grids).
__global__ void __launch_bounds__(GDN_PARTS * GDN_MAX_DV)
    ref_recur(const float *__restrict__ u, const float *__restrict__ a, const float *__restrict__ b,
              const float *__restrict__ z, const float *__restrict__ a_neg,
              const float *__restrict__ dt_bias, const float *__restrict__ norm_w,
              const float *s0, const unsigned *__restrict__ parents, float *__restrict__ out,
              float *s_out, int chain, int n, int first, int state_row, int k_heads, int v_heads,
              int k_dim, int v_dim, int v_tiled, float eps, int ab_stride, int z_stride) {
  extern __shared__ int path[];
  __shared__ float qk[2 * GDN_MAX_DK];
  __shared__ float red[32];
  pdl_enter();
  const int h = blockIdx.x;
  const int d = threadIdx.x / GDN_PARTS, part = threadIdx.x % GDN_PARTS;
  const int base = part * GDN_CHUNK;
  const bool col = d < v_dim;
  const int hk = v_tiled ? h % k_heads : h / (v_heads / k_heads);
  const int C = 2 * k_heads * k_dim + v_heads * v_dim;
  const size_t head = (size_t)h * k_dim * v_dim;
  float s[GDN_CHUNK];
  gdn_load_part(s, s0 + head, base, d, col, k_dim, v_dim);
  int target = first + blockIdx.y;
  const int len = ref_path(parents, path, chain, n, target);
  for (int step = 0; step < len; step++) {
    const int row = chain ? step : path[step];
    const float *ur = u + (size_t)row * C;
    __syncthreads();
    for (int i = threadIdx.x; i < k_dim; i += blockDim.x) {
      qk[i] = ur[(size_t)hk * k_dim + i];
      qk[GDN_MAX_DK + i] = ur[(size_t)(k_heads + hk) * k_dim + i];
    }
    __syncthreads();
    float beta, decay;
    gdn_gates(b[(size_t)row * ab_stride + h], a[(size_t)row * ab_stride + h], a_neg[h], dt_bias[h],
              beta, decay);
    const float v = col ? ur[(size_t)2 * k_heads * k_dim + (size_t)h * v_dim + d] : 0.f;
    float o = gdn_update(s, qk, qk + GDN_MAX_DK, v, decay, beta, base, k_dim);
    if (!col) o = 0.f;
    if (row == state_row && s_out != nullptr && col)
      gdn_store_part(s, s_out + head, base, d, k_dim, v_dim);
    if (out != nullptr && (chain || row == target))
      gdn_norm_out(o, red, out, z, norm_w, row, h, d, part, col, v_heads, v_dim, eps, z_stride);
  }
}


// The walk of src/gpu/gdn_walk.rs `schedule` (the runtime's rule; ported here for the lab):
// depth first, a node's largest subtree last, a slot held by a node of several children until
// its last child restores it. Returns sched (n + 1 entries) and the slots it uses.
static std::vector<unsigned> walk(const std::vector<unsigned> &par, int &slots) {
  const int n = (int)par.size();
  std::vector<std::vector<int>> kids(n + 1);
  std::vector<int> size(n + 1, 1);
  for (int i = 0; i < n; ++i) kids[par[i] == GDN_ROOT ? n : par[i]].push_back(i);
  for (int i = n - 1; i >= 0; --i) size[par[i] == GDN_ROOT ? n : par[i]] += size[i];
  auto order = [&](int v) {
    std::vector<int> c = kids[v];
    if (c.size() >= 2) {
      int hi = 0;
      for (int j = 1; j < (int)c.size(); ++j)
        if (size[c[j]] >= size[c[hi]]) hi = j;
      const int heavy = c[hi];
      c.erase(c.begin() + hi);
      c.push_back(heavy);
    }
    return c;
  };
  int live = 0;
  slots = 0;
  std::vector<unsigned> out;
  struct E { int v; unsigned restore; bool free; };
  std::vector<E> stack;
  auto push = [&](const std::vector<int> &c, unsigned save) {
    for (int j = (int)c.size() - 1; j >= 0; --j)
      stack.push_back({c[j], j == 0 ? 0u : save, j > 0 && j == (int)c.size() - 1});
  };
  std::vector<int> rk = order(n);
  unsigned rs = 0;
  if (rk.size() >= 2) rs = ++live;
  slots = std::max(slots, live);
  out.push_back(rs);
  push(rk, rs);
  while (!stack.empty()) {
    E e = stack.back();
    stack.pop_back();
    if (e.free) --live;
    std::vector<int> c = order(e.v);
    unsigned save = 0;
    if (c.size() >= 2) save = ++live;
    slots = std::max(slots, live);
    out.push_back((unsigned)e.v | e.restore << 16 | save << 24);
    push(c, save);
  }
  return out;
}

// Lab variant: gdn_tree16 with the update's bound checks compiled out (every key entry live, as
// dk = 128 on the 27B): the same arithmetic, fewer instructions a row.
__global__ void __launch_bounds__(GDN_PARTS * 16)
    lab_tree16_full(const float *__restrict__ u, const float *__restrict__ a,
                    const float *__restrict__ b, const float *__restrict__ z,
                    const float *__restrict__ a_neg, const float *__restrict__ dt_bias,
                    const float *__restrict__ norm_w, const float *s0,
                    const unsigned *__restrict__ sched, float *out, float *s_out, int n,
                    int slots, int state_row, int k_heads, int v_heads, int k_dim, int v_dim,
                    int v_tiled, float eps, int ab_stride, int z_stride) {
  gdn_tree_run<16, true>(u, a, b, z, a_neg, dt_bias, norm_w, s0, sched, out, s_out, n, slots,
                         state_row, k_heads, v_heads, k_dim, v_dim, v_tiled, eps, ab_stride,
                         z_stride);
}

typedef void (*TreeFn)(const float *, const float *, const float *, const float *, const float *,
                       const float *, const float *, const float *, const unsigned *, float *,
                       float *, int, int, int, int, int, int, int, int, float, int, int);

static uint64_t rng = 88172645463325252ull;
static float uni() {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) - 0.5f;
}

static float *upload(const std::vector<float> &v) {
  float *d;
  CK(cudaMalloc(&d, v.size() * 4));
  CK(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  return d;
}

int main(int argc, char **argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 64;
  const char *shape = argc > 2 ? argv[2] : "binary";
  const int kh = 16, hv = 48, dk = 128, dv = 128;
  const int C = 2 * kh * dk + hv * dv, ab = 2 * hv, zs = hv * dv;
  std::vector<float> u((size_t)n * C), a((size_t)n * ab), b((size_t)n * ab), z((size_t)n * zs);
  std::vector<float> an(hv), dt(hv), nw(dv), s0((size_t)hv * dk * dv);
  for (auto &x : u) x = uni() * 0.2f;
  for (auto &x : a) x = uni() * 4.f;
  for (auto &x : b) x = uni() * 4.f;
  for (auto &x : z) x = uni() * 2.f;
  for (auto &x : an) x = -0.5f - (uni() + 0.5f);
  for (auto &x : dt) x = uni();
  for (auto &x : nw) x = 1.f + uni() * 0.1f;
  for (auto &x : s0) x = uni() * 0.1f;
  std::vector<unsigned> par(n);
  for (int i = 0; i < n; ++i) {
    if (!strcmp(shape, "star")) par[i] = GDN_ROOT;
    else if (!strcmp(shape, "chain")) par[i] = i == 0 ? GDN_ROOT : i - 1;
    else if (!strcmp(shape, "random")) par[i] = (unsigned)((uni() + 0.5f) * (i + 1)) - 1u;
    else par[i] = i == 0 ? GDN_ROOT : (i - 1) / 2;
  }
  float *du = upload(u), *da = upload(a), *db = upload(b), *dz = upload(z), *dan = upload(an),
        *ddt = upload(dt), *dnw = upload(nw), *ds0 = upload(s0), *out;
  unsigned *dp;
  CK(cudaMalloc(&dp, n * 4));
  CK(cudaMemcpy(dp, par.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&out, (size_t)n * zs * 4));
  const int reps = getenv("LAB_REPS") ? atoi(getenv("LAB_REPS")) : 20;
  // The reference first: every other kernel's outputs are compared with its bits.
  std::vector<float> first;
  {
    const int threads = (GDN_PARTS * dv + 31) / 32 * 32;
    CK(cudaMemset(out, 0xFF, (size_t)n * zs * 4));
    const float us = median_us(2, reps, [&](int) {
      ref_recur<<<dim3(hv, n), threads, 4 * (n + 1)>>>(du, da + hv, db, dz, dan, ddt, dnw, ds0,
                                                       dp, out, nullptr, 0, n, 0, -1, kh, hv, dk,
                                                       dv, 0, 1e-6f, ab, zs);
    });
    first.resize((size_t)n * zs);
    CK(cudaMemcpy(first.data(), out, first.size() * 4, cudaMemcpyDeviceToHost));
    printf("| %s %d | ref_recur (whole paths) | %.1f us | |\n", shape, n, us);
  }
  // The depth-first walk (gdn_tree, the runtime's candidate): COLS columns a block, then
  // gdn_norm; the whole head a block with the norm in the kernel (128).
  {
    int slots = 0;
    std::vector<unsigned> sc = walk(par, slots);
    unsigned *dsc;
    CK(cudaMalloc(&dsc, sc.size() * 4));
    CK(cudaMemcpy(dsc, sc.data(), sc.size() * 4, cudaMemcpyHostToDevice));
    struct KT { const char *name; TreeFn f; int cols; };
    const KT ts[] = {{"tree8 + norm", gdn_tree8, 8}, {"tree16 + norm", gdn_tree16, 16},
                     {"tree32 + norm", gdn_tree32, 32}, {"tree128 fused", gdn_tree128, 128},
                     {"tree16 full + norm", lab_tree16_full, 16}};
    for (const KT &k : ts) {
      const int threads = GDN_PARTS * k.cols;
      const int smem = slots * GDN_CHUNK * threads * 4 + 4 * (n + 1);
      if (smem > 227 * 1024) {
        printf("| %s %d | %s (%d slots) | %d KiB of shared memory: not run | |\n", shape, n,
               k.name, slots, smem / 1024);
        continue;
      }
      CK(cudaFuncSetAttribute(k.f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      CK(cudaMemset(out, 0xFF, (size_t)n * zs * 4));
      const bool fused = k.cols >= dv;
      const float us = median_us(2, reps, [&](int) {
        k.f<<<dim3(hv, (dv + k.cols - 1) / k.cols), threads, smem>>>(
            du, da + hv, db, fused ? dz : nullptr, dan, ddt, dnw, ds0, dsc, out, nullptr, n,
            slots, -1, kh, hv, dk, dv, 0, 1e-6f, ab, zs);
        if (!fused) gdn_norm<<<dim3(n, hv), GDN_PARTS * dv>>>(out, dz, dnw, hv, dv, 1e-6f, zs);
      });
      std::vector<float> o((size_t)n * zs);
      CK(cudaMemcpy(o.data(), out, o.size() * 4, cudaMemcpyDeviceToHost));
      const bool same = !first.empty() && memcmp(first.data(), o.data(), o.size() * 4) == 0;
      printf("| %s %d | %s (%d slots) | %.1f us | = ref_recur: %s |\n", shape, n, k.name, slots,
             us, same ? "yes" : "NO");
    }
  }
  return 0;
}
