// The Gated DeltaNet recurrence kernels (kernels/gdn.cu) timed alone on random inputs shaped as
// Qwen3.6-27B's layers (16 key heads, 48 value heads, 128 x 128), for blocks of tree rows, for the
// developers: every kernel's outputs compared bit for bit with gdn_recur's, timed with events
// (median of reps). Lab variants (same per-row arithmetic, so the same bits): several target rows
// a block (`rowsR`, 64 registers where gdn_recur takes 108), and column slices of a head a block
// with the gated norm in a second kernel (`colsC + norm`). Trees: `binary` (parent (i - 1) / 2, as `bench --costs`), `star` (every row
// a root: one row a block), `chain` (walked as a tree: row i's path is i + 1 rows).
//
//   nvcc -arch=sm_90 -O3 -I kernels -o /tmp/gdnlab benchmarks/gpu/gdn-lab/lab.cu
//   /tmp/gdnlab N [binary|star|chain]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#include "../lab.cuh"
#include "gdn.cu"

// Lab variant: `gdn_recur` with R consecutive target rows a block (grid (v_heads, ceil(n / R))),
// each walked from the committed state as gdn_recur walks it (the state re-read, from L1 after
// the first), so the same arithmetic and bits; the parents copied once a block.
template <int R>
__global__ void __launch_bounds__(GDN_PARTS * GDN_MAX_DV)
    lab_recur_rows(const float *__restrict__ u, const float *__restrict__ a,
                   const float *__restrict__ b, const float *__restrict__ z,
                   const float *__restrict__ a_neg, const float *__restrict__ dt_bias,
                   const float *__restrict__ norm_w, const float *s0,
                   const unsigned *__restrict__ parents, float *__restrict__ out, float *s_out,
                   int chain, int n, int first, int state_row, int k_heads, int v_heads, int k_dim,
                   int v_dim, int v_tiled, float eps, int ab_stride, int z_stride) {
  extern __shared__ int lab_path[];
  int *path = lab_path;
  __shared__ float qk[2 * GDN_MAX_DK];
  __shared__ float red[32];
  const int h = blockIdx.x;
  const int d = threadIdx.x / GDN_PARTS, part = threadIdx.x % GDN_PARTS;
  const int base = part * GDN_CHUNK;
  const bool col = d < v_dim;
  const int hk = v_tiled ? h % k_heads : h / (v_heads / k_heads);
  const int C = 2 * k_heads * k_dim + v_heads * v_dim;
  const size_t head = (size_t)h * k_dim * v_dim;
  for (int k = 0; k < R; ++k) {
    int target = first + blockIdx.y * R + k;
    if (target >= n) break;
    float s[GDN_CHUNK];
    gdn_load_part(s, s0 + head, base, d, col, k_dim, v_dim);
    __syncthreads();  // the last target's path and norm are done with
    const int len = gdn_walk(parents, path, chain, n, target);
    for (int step = 0; step < len; step++) {
      const int row = path[step];
      const float *ur = u + (size_t)row * C;
      __syncthreads();
      for (int i = threadIdx.x; i < k_dim; i += blockDim.x) {
        qk[i] = ur[(size_t)hk * k_dim + i];
        qk[GDN_MAX_DK + i] = ur[(size_t)(k_heads + hk) * k_dim + i];
      }
      __syncthreads();
      float beta, decay;
      gdn_gates(b[(size_t)row * ab_stride + h], a[(size_t)row * ab_stride + h], a_neg[h],
                dt_bias[h], beta, decay);
      const float v = col ? ur[(size_t)2 * k_heads * k_dim + (size_t)h * v_dim + d] : 0.f;
      float o = gdn_update(s, qk, qk + GDN_MAX_DK, v, decay, beta, base, k_dim);
      if (!col) o = 0.f;
      if (row == target)
        gdn_norm_out(o, red, out, z, norm_w, row, h, d, part, col, v_heads, v_dim, eps, z_stride);
    }
  }
}

// Lab variant: the recurrence of COLS value columns a block (grid (v_heads, n, v_dim / COLS),
// GDN_PARTS * COLS threads: more, smaller blocks a multiprocessor), its raw outputs to `raw`
// [n, hv * dv]; then `lab_norm` (grid (v_heads, n), the recurrence's block shape) applies
// gdn_norm_out to them with the same lanes, so the same sums in the same order: the same bits.
template <int COLS>
__global__ void __launch_bounds__(GDN_PARTS * COLS)
    lab_recur_cols(const float *__restrict__ u, const float *__restrict__ a,
                   const float *__restrict__ b, const float *__restrict__ a_neg,
                   const float *__restrict__ dt_bias, const float *s0,
                   const unsigned *__restrict__ parents, float *__restrict__ raw, int n,
                   int k_heads, int v_heads, int k_dim, int v_dim, int v_tiled, int ab_stride) {
  extern __shared__ int lab_path2[];
  int *path = lab_path2;
  __shared__ float qk[2 * GDN_MAX_DK];
  const int h = blockIdx.x;
  const int d = blockIdx.z * COLS + threadIdx.x / GDN_PARTS, part = threadIdx.x % GDN_PARTS;
  const int base = part * GDN_CHUNK;
  const bool col = d < v_dim;
  const int hk = v_tiled ? h % k_heads : h / (v_heads / k_heads);
  const int C = 2 * k_heads * k_dim + v_heads * v_dim;
  const size_t head = (size_t)h * k_dim * v_dim;
  float s[GDN_CHUNK];
  gdn_load_part(s, s0 + head, base, d, col, k_dim, v_dim);
  int target = blockIdx.y;
  const int len = gdn_walk(parents, path, 0, n, target);
  float o = 0.f;
  for (int step = 0; step < len; step++) {
    const int row = path[step];
    const float *ur = u + (size_t)row * C;
    __syncthreads();
    for (int i = threadIdx.x; i < k_dim; i += blockDim.x) {
      qk[i] = ur[(size_t)hk * k_dim + i];
      qk[GDN_MAX_DK + i] = ur[(size_t)(k_heads + hk) * k_dim + i];
    }
    __syncthreads();
    float beta, decay;
    gdn_gates(b[(size_t)row * ab_stride + h], a[(size_t)row * ab_stride + h], a_neg[h],
              dt_bias[h], beta, decay);
    const float v = col ? ur[(size_t)2 * k_heads * k_dim + (size_t)h * v_dim + d] : 0.f;
    o = gdn_update(s, qk, qk + GDN_MAX_DK, v, decay, beta, base, k_dim);
  }
  if (col && part == 0) raw[(size_t)target * v_heads * v_dim + (size_t)h * v_dim + d] = o;
}

__global__ void __launch_bounds__(GDN_PARTS * GDN_MAX_DV)
    lab_norm(const float *__restrict__ raw, const float *__restrict__ z,
             const float *__restrict__ norm_w, float *__restrict__ out, int v_heads, int v_dim,
             float eps, int z_stride) {
  __shared__ float red[32];
  const int h = blockIdx.x, row = blockIdx.y;
  const int d = threadIdx.x / GDN_PARTS, part = threadIdx.x % GDN_PARTS;
  const bool col = d < v_dim;
  const float o = col ? raw[(size_t)row * v_heads * v_dim + (size_t)h * v_dim + d] : 0.f;
  gdn_norm_out(o, red, out, z, norm_w, row, h, d, part, col, v_heads, v_dim, eps, z_stride);
}


typedef void (*RecurFn)(const float *, const float *, const float *, const float *,
                        const float *, const float *, const float *, const float *,
                        const unsigned *, float *, float *, int, int, int, int, int, int, int,
                        int, int, float, int, int);

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
    else par[i] = i == 0 ? GDN_ROOT : (i - 1) / 2;
  }
  float *du = upload(u), *da = upload(a), *db = upload(b), *dz = upload(z), *dan = upload(an),
        *ddt = upload(dt), *dnw = upload(nw), *ds0 = upload(s0), *out;
  unsigned *dp;
  CK(cudaMalloc(&dp, n * 4));
  CK(cudaMemcpy(dp, par.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&out, (size_t)n * zs * 4));
  struct KR {
    const char *name;
    RecurFn f;
    int rows;  // target rows a block
  };
  const KR ks[] = {{"gdn_recur", gdn_recur, 1},
                   {"gdn_recur_staged", gdn_recur_staged, 1},
                   {"rows1", lab_recur_rows<1>, 1},
                   {"rows2", lab_recur_rows<2>, 2},
                   {"rows4", lab_recur_rows<4>, 4},
                   {"rows8", lab_recur_rows<8>, 8}};
  const char *only = getenv("LAB_ONLY");
  const int reps = getenv("LAB_REPS") ? atoi(getenv("LAB_REPS")) : 20;
  std::vector<float> first;
  for (const KR &k : ks) {
    if (only && strcmp(only, k.name)) continue;
    const int threads = (GDN_PARTS * dv + 31) / 32 * 32;
    const int smem = 4 * (n + 1);
    CK(cudaMemset(out, 0xFF, (size_t)n * zs * 4));
    const float us = median_us(2, reps, [&](int) {
      k.f<<<dim3(hv, (n + k.rows - 1) / k.rows), threads, smem>>>(
          du, da + hv, db, dz, dan, ddt, dnw, ds0, dp, out, nullptr, 0, n, 0, -1, kh, hv, dk, dv,
          0, 1e-6f, ab, zs);
    });
    std::vector<float> o((size_t)n * zs);
    CK(cudaMemcpy(o.data(), out, o.size() * 4, cudaMemcpyDeviceToHost));
    bool same = true;
    if (first.empty())
      first = o;
    else
      same = memcmp(first.data(), o.data(), o.size() * 4) == 0;
    printf("| %s %d | %s | %.1f us | = gdn_recur: %s |\n", shape, n, k.name, us,
           same ? "yes" : "NO");
  }
  // The column-slice variants: recurrence then norm, timed together.
  float *raw;
  CK(cudaMalloc(&raw, (size_t)n * zs * 4));
  for (int cols : {32, 64}) {
    CK(cudaMemset(out, 0xFF, (size_t)n * zs * 4));
    const float us = median_us(2, reps, [&](int) {
      if (cols == 32)
        lab_recur_cols<32><<<dim3(hv, n, dv / 32), GDN_PARTS * 32, 4 * (n + 1)>>>(
            du, da + hv, db, dan, ddt, ds0, dp, raw, n, kh, hv, dk, dv, 0, ab);
      else
        lab_recur_cols<64><<<dim3(hv, n, dv / 64), GDN_PARTS * 64, 4 * (n + 1)>>>(
            du, da + hv, db, dan, ddt, ds0, dp, raw, n, kh, hv, dk, dv, 0, ab);
      lab_norm<<<dim3(hv, n), GDN_PARTS * dv>>>(raw, dz, dnw, out, hv, dv, 1e-6f, zs);
    });
    std::vector<float> o((size_t)n * zs);
    CK(cudaMemcpy(o.data(), out, o.size() * 4, cudaMemcpyDeviceToHost));
    const bool same = !first.empty() && memcmp(first.data(), o.data(), o.size() * 4) == 0;
    printf("| %s %d | cols%d + norm | %.1f us | = gdn_recur: %s |\n", shape, n, cols, us,
           same ? "yes" : "NO");
  }
  return 0;
}
