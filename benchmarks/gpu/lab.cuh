// What the kernel labs under benchmarks/gpu/ share: a checked CUDA call, and the median time of
// a launch over repetitions (device events; the first `warm` not counted).
#pragma once
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#define CK(x)                                                                           \
  do {                                                                                  \
    cudaError_t e = (x);                                                                \
    if (e != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

// Median microseconds of `launch(r)` (r the repetition, 0-based) over `reps` repetitions after
// `warm` more, each timed alone and checked for launch errors.
template <typename Launch>
static float median_us(int warm, int reps, Launch launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int r = 0; r < warm + reps; ++r) {
    CK(cudaEventRecord(e0));
    launch(r);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= warm) t.push_back(ms * 1000.f);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
