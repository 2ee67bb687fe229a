// The K-quant family's tile kernels (kernels/mmq.cu) timed alone on random Q4_K / Q6_K weights
// and Q8_1 activation rows (one scale a super-block, as the runtime's quantisers write them), for
// the developers: every kernel that can take a pass of n rows, each output compared bit for bit
// with the first kernel's (the contract says they must agree), timed with events over two copies
// of the weights (so a matrix under the L2's size is not read from the cache), median of reps.
//
//   nvcc -arch=sm_90 -O3 -I kernels -o lab benchmarks/gpu/mmq-lab/lab.cu -lcuda
//   ./lab ROWS COLS FMT(q4_k|q6_k) N [N ...]
//
// The split over chunks (grid z) follows src/gpu/mmq.rs (`split_chunks`, `chunk_size`).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <algorithm>
#include <string>
#include <cmath>

#include "../lab.cuh"
#include "mmq.cu"

#include "meta.cuh"
#include "fold.cuh"
#include "pk.cuh"


typedef void (*TileFn)(const void *, const void *, const void *, int, int, const void *, float *,
                       int, int, int, int, int, int, float *, unsigned int *);

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t next_u32() {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}
static uint16_t half_bits(float f) {
  __half h = __float2half(f);
  return *(uint16_t *)&h;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: lab ROWS COLS q4_k|q6_k N [N ...]\n");
    return 2;
  }
  const int rows = atoi(argv[1]), cols = atoi(argv[2]);
  const bool q6 = strcmp(argv[3], "q6_k") == 0;
  const int bytes = q6 ? 210 : 144, nsb = cols / 256;
  const size_t wbytes = (size_t)rows * nsb * bytes;
  // Weights: random bytes, the float fields finite and small.
  std::vector<uint8_t> w(wbytes);
  for (size_t i = 0; i < wbytes; ++i) w[i] = (uint8_t)next_u32();
  for (size_t b = 0; b < (size_t)rows * nsb; ++b) {
    uint8_t *blk = w.data() + b * bytes;
    if (q6) {
      uint16_t d = half_bits(0.001f + 0.002f * (next_u32() % 1000) / 1000.0f);
      memcpy(blk + 208, &d, 2);
    } else {
      uint16_t d = half_bits(0.001f + 0.002f * (next_u32() % 1000) / 1000.0f);
      uint16_t m = half_bits(0.0005f + 0.001f * (next_u32() % 1000) / 1000.0f);
      memcpy(blk, &d, 2);
      memcpy(blk + 2, &m, 2);
    }
  }
  const int max_n = 256;
  const int yq = (cols + 511) / 512 * 16;  // Q8_1 blocks a row (`qblocks`: padded to 512 values)
  std::vector<uint8_t> y((size_t)max_n * yq * 36, 0);
  for (int r = 0; r < max_n; ++r)
    for (int s = 0; s < yq / 8; ++s) {
      uint16_t d = half_bits(0.01f + 0.01f * (next_u32() % 1000) / 1000.0f);
      for (int k = 0; k < 8; ++k) {
        uint8_t *blk = y.data() + ((size_t)r * yq + 8 * s + k) * 36;
        memcpy(blk, &d, 2);
        for (int i = 0; i < 32; ++i) blk[4 + i] = (uint8_t)(next_u32() % 255) - 127 + 256;
      }
    }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint8_t *dw[2];
  for (int c = 0; c < 2; ++c) {
    CK(cudaMalloc(&dw[c], wbytes));
    CK(cudaMemcpy(dw[c], w.data(), wbytes, cudaMemcpyHostToDevice));
  }
  uint8_t *dy;
  CK(cudaMalloc(&dy, y.size()));
  CK(cudaMemcpy(dy, y.data(), y.size(), cudaMemcpyHostToDevice));
  float *dst, *work;
  unsigned int *counters;
  CK(cudaMalloc(&dst, (size_t)max_n * rows * 4));
  CK(cudaMalloc(&work, (size_t)8 * max_n * rows * 4));
  CK(cudaMalloc(&counters, 1 << 20));
  CK(cudaMemset(counters, 0, 1 << 20));
  TileMeta *gmeta;
  CK(cudaMalloc(&gmeta, (size_t)max_n * nsb * sizeof(TileMeta)));
  uint8_t *gpk;  // pk.cuh: the activations' values without block headers
  CK(cudaMalloc(&gpk, (size_t)max_n * nsb * 256));
  const int cs = std::max(1, (nsb + 7) / 8);  // chunk_size
  const int chunks = (nsb + cs - 1) / cs;
  // The family's tile kernels, each with 2, 4 and 8 warps a block (the runtime's choice:
  // src/gpu/mmq/launch_shape.rs `tile_warps`).
  struct K {
    std::string name;
    int nt;
    TileFn f;
    int wmax;  // warps a block along the weight rows, at most
  };
  const TileFn q4[4] = {mmq_q4_k_t1, mmq_q4_k_t2, mmq_q4_k_t4, mmq_q4_k_t8};
  const TileFn q6f[4] = {mmq_q6_k_t1, mmq_q6_k_t2, mmq_q6_k_t4, mmq_q6_k_t8};
  std::vector<K> ks;
  std::vector<int> warps = {2, 4, 8};  // LAB_WARPS="2 4 6 8": others
  if (const char *lw = getenv("LAB_WARPS")) {
    warps.clear();
    for (const char *p = lw; *p;) {
      char *end;
      const long w = strtol(p, &end, 10);
      if (end == p) break;
      if (w >= 1 && w <= 8) warps.push_back((int)w);
      p = end;
    }
  }
  const TileFn q4fold[4] = {labf_q4_k_t1, labf_q4_k_t2, labf_q4_k_t4, labf_q4_k_t8};
  for (int i = 0; i < 4; ++i)
    for (int w : warps) {
      ks.push_back({"t" + std::to_string(1 << i) + "w" + std::to_string(w), 1 << i,
                    q6 ? q6f[i] : q4[i], w});
      // fold.cuh: the Q4_K scales folded into the MMA's A operand.
      if (!q6)
        ks.push_back({"fold t" + std::to_string(1 << i) + "w" + std::to_string(w), 1 << i,
                      q4fold[i], w});
    }
  const int slot = q6 ? 224 : 144;
  const int reps = getenv("LAB_REPS") ? atoi(getenv("LAB_REPS")) : 30;
  const char *only = getenv("LAB_ONLY");  // one kernel by name (for ncu)
  const int nosplit = getenv("LAB_NOSPLIT") ? 1 : 0;
  printf("| %s %d x %d | n | kernel | grid | us | weights TB/s | TOPS | = first |\n", argv[3], rows,
         cols);
  for (int a = 4; a < argc; ++a) {
    const int n = atoi(argv[a]);
    std::vector<float> first;
    for (const K &k : ks) {
      if (only && strcmp(only, k.name.c_str()) != 0) continue;
      if (8 * k.nt > 4 * n && k.nt > 1) continue;  // tiles mostly empty
      const int wm = std::min(k.wmax, std::max(1, rows / 16));
      const int gx = (rows + 16 * wm - 1) / (16 * wm), gy = (n + 8 * k.nt - 1) / (8 * k.nt);
      int z = (gx * gy < 2 * sms && chunks > 1) ? chunks : 1;
      if (nosplit) z = 1;
      const int smem = TILE_STAGES * (8 * k.nt * TILE_RAW + 16 * wm * slot) + 8 * k.nt * 32;
      CK(cudaFuncSetAttribute(k.f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      dim3 grid(gx, gy, z), block(32, wm);
      CK(cudaMemset(dst, 0xFF, (size_t)n * rows * 4));  // poison
      const float us = median_us(3, reps, [&](int r) {
        k.f<<<grid, block, smem>>>(dw[r & 1], dw[r & 1], dw[r & 1], rows, rows, dy, dst, cols,
                                  rows, yq, rows, n, cs, work, counters);
      });
      std::vector<float> out((size_t)n * rows);
      CK(cudaMemcpy(out.data(), dst, out.size() * 4, cudaMemcpyDeviceToHost));
      bool same = true;
      if (first.empty())
        first = out;
      else
        same = memcmp(first.data(), out.data(), out.size() * 4) == 0;
      bool finite = true;
      for (float v : out) finite &= std::isfinite(v);
      printf("| | %d | %s | %dx%dx%d | %.1f | %.2f | %.0f | %s%s |\n", n, k.name.c_str(), gx, gy, z, us,
             wbytes / us / 1e6, 2.0 * rows * cols * n / us / 1e6, same ? "yes" : "NO",
             finite ? "" : " (non-finite)");
    }
    // The variant with the activations' sums made once a launch (meta.cuh), never split:
    // `lab_meta` and the tile timed together.
    typedef void (*MetaFn)(const uint8_t *, const uint8_t *, const TileMeta *, float *, int, int,
                           int, int, int, int);
    const MetaFn mf[4] = {q6 ? labm_q6_k_t4 : labm_q4_k_t4, q6 ? labm_q6_k_t8 : labm_q4_k_t8,
                          labm_q4_k_fold_t4, labm_q4_k_fold_t8};
    for (int v = 0; v < (q6 ? 2 : 4) && !only; ++v) {
      const int nt = v & 1 ? 8 : 4;
      if (8 * nt > 4 * n) continue;
      for (int w : {4, 8}) {
        const int wm = std::min(w, std::max(1, rows / 16));
        const int gx = (rows + 16 * wm - 1) / (16 * wm), gy = (n + 8 * nt - 1) / (8 * nt);
        const int smem = TILE_STAGES * (8 * nt * TILE_RAW + 16 * wm * slot + 8 * nt * 32);
        CK(cudaFuncSetAttribute(mf[v], cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        CK(cudaMemset(dst, 0xFF, (size_t)n * rows * 4));
        const float us = median_us(3, reps, [&](int r) {
          lab_meta<<<(n * nsb + 127) / 128, 128>>>(dy, gmeta, n, nsb, yq);
          mf[v]<<<dim3(gx, gy), dim3(32, wm), smem>>>(dw[r & 1], dy, gmeta, dst, cols, rows, yq,
                                                     rows, n, cs);
        });
        std::vector<float> out((size_t)n * rows);
        CK(cudaMemcpy(out.data(), dst, out.size() * 4, cudaMemcpyDeviceToHost));
        const bool same = !first.empty() && memcmp(first.data(), out.data(), out.size() * 4) == 0;
        printf("| | %d | meta%s t%dw%d | %dx%dx1 | %.1f | %.2f | %.0f | %s |\n", n,
               v >= 2 ? " fold" : "", nt, wm, gx, gy,
               us, wbytes / us / 1e6, 2.0 * rows * cols * n / us / 1e6, same ? "yes" : "NO");
      }
    }
    // pk.cuh: the activations packed once a launch (`lab_pack` timed with the tile), B
    // fragments by ldmatrix, one barrier a super-block; Q4_K also with the folded scales.
    const PkFn pf[6] = {labp_q4_k_t4, labp_q4_k_t8, labp_q4_k_fold_t4, labp_q4_k_fold_t8,
                        labp_q6_k_t4, labp_q6_k_t8};
    for (int v = q6 ? 4 : 0; v < (q6 ? 6 : 4) && !only; ++v) {
      const int nt = v & 1 ? 8 : 4;
      if (8 * nt > 4 * n) continue;
      for (int w : {4, 8}) {
        const int wm = std::min(w, std::max(1, rows / 16));
        const int gx = (rows + 16 * wm - 1) / (16 * wm), gy = (n + 8 * nt - 1) / (8 * nt);
        const int smem = TILE_STAGES * (8 * nt * PK_ROW + 16 * wm * slot + 8 * nt * 32);
        CK(cudaFuncSetAttribute(pf[v], cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        CK(cudaMemset(dst, 0xFF, (size_t)n * rows * 4));
        const float us = median_us(3, reps, [&](int r) {
          lab_pack<<<(n * nsb + 127) / 128, 128>>>(dy, gpk, gmeta, n, nsb, yq);
          pf[v]<<<dim3(gx, gy), dim3(32, wm), smem>>>(dw[r & 1], gpk, gmeta, dst, cols, rows,
                                                     rows, n, cs);
        });
        std::vector<float> out((size_t)n * rows);
        CK(cudaMemcpy(out.data(), dst, out.size() * 4, cudaMemcpyDeviceToHost));
        const bool same = !first.empty() && memcmp(first.data(), out.data(), out.size() * 4) == 0;
        printf("| | %d | pk%s t%dw%d | %dx%dx1 | %.1f | %.2f | %.0f | %s |\n", n,
               v == 2 || v == 3 ? " fold" : "", nt, wm, gx, gy, us, wbytes / us / 1e6,
               2.0 * rows * cols * n / us / 1e6, same ? "yes" : "NO");
      }
    }
  }
  return 0;
}
