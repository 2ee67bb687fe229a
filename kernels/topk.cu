// Per-row top-k with the log-normaliser, on the device: for each row of a [rows, cols] f32
// logits matrix, the k largest entries (largest first, ties to the lower index) as token ids and
// log-probabilities `logit - logsumexp(row)`, and the row's logsumexp. Only rows * (k + 1)
// numbers cross to the host instead of rows * cols.
//
// CPU reference: `crate::tree::top_k_log_probs` (src/tree/builder.rs); the test
// `tests/gpu_kernels.rs` compares the two. The log-normaliser is summed in f64 (per thread, then
// a fixed tree over the block), so it agrees with the reference's f64 row-order sum to f32
// rounding.
//
// One block of TOPK_THREADS threads per row. Each thread keeps its own sorted top-k of the
// elements it strides over (k <= TOPK_MAX, in registers); the block then takes the k winners in
// k rounds of a block-wide maximum over the threads' current heads.

#define TOPK_THREADS 256
#define TOPK_MAX 16

struct Cand {
  float v;
  int i;
};

// a before b: larger value, then lower index. NaN never wins (treated as -inf by the caller).
__device__ __forceinline__ bool better(float av, int ai, float bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

// The best (value, index) of the `threads` entries in shared memory moves to entry 0 by a fixed
// tree (threads a power of two; called by every thread after the entries are written).
__device__ __forceinline__ void tree_best(float *v, int *idx, int tid, int threads) {
  for (int w = threads / 2; w > 0; w >>= 1) {
    if (tid < w && better(v[tid + w], idx[tid + w], v[tid], idx[tid])) {
      v[tid] = v[tid + w];
      idx[tid] = idx[tid + w];
    }
    __syncthreads();
  }
}

extern "C" __global__ void row_top_k_f32(const float *__restrict__ logits, int cols, int k,
                                         int *__restrict__ out_ids,
                                         float *__restrict__ out_logprobs,
                                         float *__restrict__ out_lse) {
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  const float *x = logits + (size_t)row * cols;

  float lv[TOPK_MAX];
  int li[TOPK_MAX];
#pragma unroll
  for (int s = 0; s < TOPK_MAX; ++s) {
    lv[s] = -INFINITY;
    li[s] = 0x7fffffff;
  }
  float m = -INFINITY;
  for (int j = tid; j < cols; j += TOPK_THREADS) {
    float v = x[j];
    if (v != v) v = -INFINITY;
    m = fmaxf(m, v);
    // Each thread keeps its best TOPK_MAX whatever k is, so that the list is only ever indexed
    // by compile-time constants and stays in registers.
    if (better(v, j, lv[TOPK_MAX - 1], li[TOPK_MAX - 1])) {
      float cv = v;
      int ci = j;
#pragma unroll
      for (int s = 0; s < TOPK_MAX; ++s) {
        if (better(cv, ci, lv[s], li[s])) {
          float tv = lv[s];
          int ti = li[s];
          lv[s] = cv;
          li[s] = ci;
          cv = tv;
          ci = ti;
        }
      }
    }
  }

  __shared__ float s_f[TOPK_THREADS];
  __shared__ double s_d[TOPK_THREADS];
  __shared__ int s_i[TOPK_THREADS];

  // The row's maximum.
  s_f[tid] = m;
  __syncthreads();
  for (int w = TOPK_THREADS / 2; w > 0; w >>= 1) {
    if (tid < w) s_f[tid] = fmaxf(s_f[tid], s_f[tid + w]);
    __syncthreads();
  }
  const float mx = s_f[0];
  __syncthreads();

  // sum(exp(x - max)) in f64.
  double acc = 0.0;
  if (mx > -INFINITY) {
    for (int j = tid; j < cols; j += TOPK_THREADS) {
      float v = x[j];
      if (v == v) acc += exp((double)v - (double)mx);
    }
  }
  s_d[tid] = acc;
  __syncthreads();
  for (int w = TOPK_THREADS / 2; w > 0; w >>= 1) {
    if (tid < w) s_d[tid] += s_d[tid + w];
    __syncthreads();
  }
  const float lse = (float)((double)mx + log(s_d[0]));
  if (tid == 0) out_lse[row] = lse;
  __syncthreads();

  // k rounds: the best head among the threads wins and leaves its thread's list.
  int head = 0;
  for (int r = 0; r < k; ++r) {
    float hv = -INFINITY;
    int hi = 0x7fffffff;
#pragma unroll
    for (int s = 0; s < TOPK_MAX; ++s) {
      if (s == head) {
        hv = lv[s];
        hi = li[s];
      }
    }
    s_f[tid] = hv;
    s_i[tid] = hi;
    __syncthreads();
    tree_best(s_f, s_i, tid, TOPK_THREADS);
    const int win = s_i[0];
    const float winv = s_f[0];
    if (tid == 0) {
      out_ids[row * k + r] = win;
      out_logprobs[row * k + r] = winv - lse;
    }
    if (hi == win && head < k) head += 1;
    __syncthreads();
  }
}

// Per-row argmax (ties to the lower index, NaN never wins): one block of ARGMAX_THREADS per row,
// each thread scanning its strided elements in order, then a shared-memory tree. For greedy
// decoding of a 152k-entry row, in place of candle's argmax (a single warp per row).
#define ARGMAX_THREADS 1024

extern "C" __global__ void row_argmax_f32(const float *__restrict__ logits, int cols,
                                          unsigned int *__restrict__ out) {
  __shared__ float sv[ARGMAX_THREADS];
  __shared__ int si[ARGMAX_THREADS];
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  const float *x = logits + (size_t)row * cols;
  float bv = -INFINITY;
  int bi = cols;  // past the end: loses to any real entry
  for (int i = tid; i < cols; i += ARGMAX_THREADS) {
    const float v = x[i];
    if (v > bv || (bi == cols && v == v)) {
      bv = v;
      bi = i;
    }
  }
  sv[tid] = bv;
  si[tid] = bi;
  __syncthreads();
  tree_best(sv, si, tid, ARGMAX_THREADS);
  if (tid == 0) out[row] = si[0] < cols ? (unsigned int)si[0] : 0u;
}
