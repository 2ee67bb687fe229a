// Programmatic dependent launch (PDL, sm_90 and later): a kernel launched with the
// programmatic-stream-serialization attribute (src/gpu/launch.rs) may start while the kernel
// before it on its stream is still running. Each kernel of the decoder step launched so
//   1. may read, before `pdl_wait`, only what no kernel of the step writes (its weights: the
//      tensor-core tile kernels prefetch their block's weight rows to L2 there, the one-row
//      kernel loads its first weights into registers, so that the memory latency of the first
//      loads overlaps the previous kernel's tail), and writes nothing before it;
//   2. calls `pdl_wait` in every block, which returns once the previous grid has completed and
//      its memory is visible (so, by induction, every earlier grid of the stream has too);
//   3. then calls `pdl_trigger`, which lets the next kernel launch (its blocks start, prefetch
//      and wait): at most two grids of a stream are in flight.
// Built for an architecture before sm_90 both are no-ops, and src/gpu/launch.rs launches without
// the attribute (plain stream order). Launched without it, `pdl_wait` returns at once, but it
// is not free: a kernel of thousands of tiny blocks (the dp4a products of kernels/mmvq.cu, one
// weight row a block) ran 17% slower with it, so those kernels (`_x1`, `_x4`, `_w`) have no
// wait and are never launched with the attribute; the one-row-a-warp kernel's `_wp` (eight rows
// a block) and `_x1r8` have one.
#pragma once
#include <stdint.h>

static __device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Wait for the previous kernel, then let the next one launch.
static __device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_trigger();
}

// Ask for `bytes` bytes at `p` (read-only data: weights) to be brought into L2, one 128-byte
// line a thread at a time, by `nthreads` threads of which this is `tid`.
static __device__ __forceinline__ void prefetch_l2_by(const void *p, size_t bytes, int tid,
                                                      int nthreads) {
  const char *c = (const char *)p;
  for (size_t off = (size_t)tid * 128; off < bytes; off += (size_t)nthreads * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + off));
}

// The same by all the block's threads.
static __device__ __forceinline__ void prefetch_l2(const void *p, size_t bytes) {
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  prefetch_l2_by(p, bytes, tid, blockDim.x * blockDim.y * blockDim.z);
}
