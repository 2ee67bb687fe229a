// The Gated DeltaNet recurrence kernels (kernels/gdn.cu) timed alone on random inputs shaped as
// Qwen3.6-27B's layers (16 key heads, 48 value heads, 128 x 128), for blocks of tree rows, for the
// developers: every kernel's outputs compared bit for bit with gdn_recur's, timed with events
// (median of reps). Trees: `binary` (parent (i - 1) / 2, as `bench --costs`), `star` (every row
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

#include "gdn.cu"

#define CK(x)                                                                           \
  do {                                                                                  \
    cudaError_t e = (x);                                                                \
    if (e != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

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
  struct K {
    const char *name;
    RecurFn f;
  };
  const K ks[] = {{"gdn_recur", gdn_recur}, {"gdn_recur_staged", gdn_recur_staged}};
  const char *only = getenv("LAB_ONLY");
  const int reps = getenv("LAB_REPS") ? atoi(getenv("LAB_REPS")) : 20;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> first;
  for (const K &k : ks) {
    if (only && strcmp(only, k.name)) continue;
    const int threads = (GDN_PARTS * dv + 31) / 32 * 32;
    const int smem = 4 * (2 * n + 1);
    std::vector<float> t;
    for (int r = 0; r < reps + 2; ++r) {
      CK(cudaMemset(out, 0xFF, (size_t)n * zs * 4));
      CK(cudaEventRecord(e0));
      k.f<<<dim3(hv, n), threads, smem>>>(du, da + hv, db, dz, dan, ddt, dnw, ds0, dp, out, nullptr,
                                          0, n, 0, -1, kh, hv, dk, dv, 0, 1e-6f, ab, zs);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 2) t.push_back(ms * 1000.f);
    }
    std::sort(t.begin(), t.end());
    std::vector<float> o((size_t)n * zs);
    CK(cudaMemcpy(o.data(), out, o.size() * 4, cudaMemcpyDeviceToHost));
    bool same = true;
    if (first.empty())
      first = o;
    else
      same = memcmp(first.data(), o.data(), o.size() * 4) == 0;
    printf("| %s %d | %s | %.1f us | = gdn_recur: %s |\n", shape, n, k.name, t[t.size() / 2],
           same ? "yes" : "NO");
  }
  return 0;
}
