// Per-row top-k with the log-normaliser, on the device: for each row of a [rows, cols] f32
// logits matrix, the k largest entries (largest first, ties to the lower index) as token ids and
// log-probabilities `logit - logsumexp(row)`, and the row's logsumexp. Only rows * (2k + 1)
// words cross to the host instead of rows * cols numbers.
//
// CPU reference: `crate::tree::top_k_log_probs` (src/tree/builder.rs); `treespec selftest
// --device cuda` compares the two (src/gpu/topk.rs). The log-normaliser is summed in f64 (per
// thread, a fixed tree over each slice's block, then the slices in order, each rescaled to the
// row's maximum), so it agrees with the reference's f64 row-order sum to f32 rounding.
//
// Two launches. `row_top_k_part_f32`, grid (rows, TOPK_SPLIT): each block takes one slice of a
// row; each thread keeps its own sorted top-k of the elements it strides over (k <= TOPK_MAX, in
// registers); the block then takes its k winners in k rounds of a block-wide maximum over the
// threads' current heads, and writes them with the slice's maximum and its sum of exp(x - max)
// (f64). `row_top_k_merge_f32`, one block per row: the log-normaliser from the slices' sums and
// the row's k winners among the slices' candidates (a row spread over TOPK_SPLIT SMs instead of
// one: the f64 exponentials dominate).
//
// Output, per row, packed as 32-bit words: k token ids, k log-probabilities (f32 bits), the
// logsumexp (f32 bits); one copy to the host.

#define TOPK_THREADS 256
#define TOPK_MAX 16
#define TOPK_SPLIT 16

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

// The maximum of one value per thread over `threads` threads (a power of two), by a fixed tree in
// shared memory `s` (threads entries); every thread gets it.
__device__ __forceinline__ float tree_max(float v, float *s, int tid, int threads) {
  s[tid] = v;
  __syncthreads();
  for (int w = threads / 2; w > 0; w >>= 1) {
    if (tid < w) s[tid] = fmaxf(s[tid], s[tid + w]);
    __syncthreads();
  }
  const float r = s[0];
  __syncthreads();
  return r;
}

// The f64 sum of one value per thread, as tree_max.
__device__ __forceinline__ double tree_sum(double v, double *s, int tid, int threads) {
  s[tid] = v;
  __syncthreads();
  for (int w = threads / 2; w > 0; w >>= 1) {
    if (tid < w) s[tid] += s[tid + w];
    __syncthreads();
  }
  const double r = s[0];
  __syncthreads();
  return r;
}

// part_v/part_i: [rows, TOPK_SPLIT, k]; part_max: [rows, TOPK_SPLIT]; part_sum (f64) likewise.
extern "C" __global__ void row_top_k_part_f32(const float *__restrict__ logits, int cols, int k,
                                              float *__restrict__ part_v,
                                              int *__restrict__ part_i,
                                              float *__restrict__ part_max,
                                              double *__restrict__ part_sum) {
  const int row = blockIdx.x;
  const int b = blockIdx.y;
  const int tid = threadIdx.x;
  const float *x = logits + (size_t)row * cols;
  const int span = (cols + TOPK_SPLIT - 1) / TOPK_SPLIT;
  const int lo = b * span;
  const int hi = min(cols, lo + span);

  float lv[TOPK_MAX];
  int li[TOPK_MAX];
#pragma unroll
  for (int s = 0; s < TOPK_MAX; ++s) {
    lv[s] = -INFINITY;
    li[s] = 0x7fffffff;
  }
  float m = -INFINITY;
  for (int j = lo + tid; j < hi; j += TOPK_THREADS) {
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

  // The slice's maximum, then sum(exp(x - slice max)) in f64.
  const float mx = tree_max(m, s_f, tid, TOPK_THREADS);
  double acc = 0.0;
  if (mx > -INFINITY) {
    for (int j = lo + tid; j < hi; j += TOPK_THREADS) {
      float v = x[j];
      if (v == v) acc += exp((double)v - (double)mx);
    }
  }
  const double sum = tree_sum(acc, s_d, tid, TOPK_THREADS);
  const size_t slot = (size_t)row * TOPK_SPLIT + b;
  if (tid == 0) {
    part_max[slot] = mx;
    part_sum[slot] = sum;
  }

  // k rounds: the best head among the threads wins and leaves its thread's list.
  int head = 0;
  for (int r = 0; r < k; ++r) {
    float hv = -INFINITY;
    int hi_idx = 0x7fffffff;
#pragma unroll
    for (int s = 0; s < TOPK_MAX; ++s) {
      if (s == head) {
        hv = lv[s];
        hi_idx = li[s];
      }
    }
    s_f[tid] = hv;
    s_i[tid] = hi_idx;
    __syncthreads();
    tree_best(s_f, s_i, tid, TOPK_THREADS);
    const int win = s_i[0];
    const float winv = s_f[0];
    if (tid == 0) {
      part_v[slot * k + r] = winv;
      part_i[slot * k + r] = win;
    }
    if (hi_idx == win && head < k) head += 1;
    __syncthreads();
  }
}

// One block of TOPK_MERGE_THREADS (>= TOPK_SPLIT * TOPK_MAX) per row; out: [rows, 2k + 1] words.
#define TOPK_MERGE_THREADS 256

extern "C" __global__ void row_top_k_merge_f32(const float *__restrict__ part_v,
                                               const int *__restrict__ part_i,
                                               const float *__restrict__ part_max,
                                               const double *__restrict__ part_sum, int k,
                                               unsigned int *__restrict__ out) {
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  __shared__ float s_f[TOPK_MERGE_THREADS];
  __shared__ int s_i[TOPK_MERGE_THREADS];
  __shared__ float s_lse;
  const size_t base = (size_t)row * TOPK_SPLIT;
  if (tid == 0) {
    float mx = -INFINITY;
    for (int b = 0; b < TOPK_SPLIT; ++b) mx = fmaxf(mx, part_max[base + b]);
    double sum = 0.0;
    if (mx > -INFINITY) {
      for (int b = 0; b < TOPK_SPLIT; ++b) {
        const float bm = part_max[base + b];
        if (bm > -INFINITY) sum += part_sum[base + b] * exp((double)bm - (double)mx);
      }
    }
    s_lse = (float)((double)mx + log(sum));
  }
  const int total = TOPK_SPLIT * k;
  float v = -INFINITY;
  int id = 0x7fffffff;
  if (tid < total) {
    v = part_v[base * k + tid];
    id = part_i[base * k + tid];
  }
  __syncthreads();
  const float lse = s_lse;
  unsigned int *o = out + (size_t)row * (2 * k + 1);
  for (int r = 0; r < k; ++r) {
    s_f[tid] = v;
    s_i[tid] = id;
    __syncthreads();
    tree_best(s_f, s_i, tid, TOPK_MERGE_THREADS);
    const int win = s_i[0];
    const float winv = s_f[0];
    if (tid == 0) {
      o[r] = (unsigned int)win;
      o[k + r] = __float_as_uint(winv - lse);
    }
    if (id == win) {
      v = -INFINITY;
      id = 0x7fffffff;
    }
    __syncthreads();
  }
  if (tid == 0) o[2 * k] = __float_as_uint(lse);
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

// Per-row top-k for k above TOPK_MAX (a DDTree's K = B per depth, up to the whole row): one block
// of SELECT_THREADS per row finds the k-th largest value by a radix select on order-preserving
// keys (three passes of 11, 11 and 10 bits, histograms in shared memory), then writes the k
// winners in index order (those above the threshold, then the lowest-index ones equal to it):
// out[row] = k ids, k values (f32 bits), the logsumexp (f32 bits, summed in f64 as above). The
// host sorts each row's k winners (larger value, then lower index) and subtracts the logsumexp
// (src/gpu/topk.rs), which is the order and arithmetic of the CPU reference.
#define SELECT_THREADS 1024
#define SELECT_BINS 2048

__device__ __forceinline__ unsigned int order_key(float v) {
  if (v != v) v = -INFINITY;  // NaN ranks with -inf
  const unsigned int u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum of one int per thread over the block, in thread order; every thread gets
// its offset and the total (scratch: SELECT_THREADS / 32 + 1 ints).
__device__ __forceinline__ int block_exclusive_scan(int v, int *scratch, int *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffff, x, o, 32);
    if (lane >= o) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int w = 0; w < SELECT_THREADS / 32; ++w) {
      const int t = scratch[w];
      scratch[w] = run;
      run += t;
    }
    scratch[SELECT_THREADS / 32] = run;
  }
  __syncthreads();
  const int off = scratch[warp] + x - v;
  *total = scratch[SELECT_THREADS / 32];
  __syncthreads();
  return off;
}

extern "C" __global__ void __launch_bounds__(SELECT_THREADS) row_select_f32(const float *__restrict__ logits, int cols, int k,
                                          unsigned int *__restrict__ out) {
  __shared__ unsigned int hist[SELECT_BINS];
  __shared__ float s_f[SELECT_THREADS];
  __shared__ double s_d[SELECT_THREADS];
  __shared__ int scan[SELECT_THREADS / 32 + 1];
  __shared__ unsigned int s_bin;
  __shared__ int s_want;
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  const float *x = logits + (size_t)row * cols;

  // The logsumexp: the row's maximum, then sum(exp(x - max)) in f64, both by fixed trees.
  float m = -INFINITY;
  for (int j = tid; j < cols; j += SELECT_THREADS) {
    const float v = x[j];
    if (v == v) m = fmaxf(m, v);
  }
  const float mx = tree_max(m, s_f, tid, SELECT_THREADS);
  double acc = 0.0;
  if (mx > -INFINITY) {
    for (int j = tid; j < cols; j += SELECT_THREADS) {
      const float v = x[j];
      if (v == v) acc += exp((double)v - (double)mx);
    }
  }
  const float lse = (float)((double)mx + log(tree_sum(acc, s_d, tid, SELECT_THREADS)));

  // Radix select: the k-th largest key, digit by digit from the top.
  unsigned int prefix = 0, pmask = 0;
  int want = k;  // rank (from 1) of the k-th largest among the keys matching prefix
  const int shifts[3] = {21, 10, 0};
  const int widths[3] = {11, 11, 10};
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = shifts[pass];
    const unsigned int bins = 1u << widths[pass];
    for (unsigned int b = tid; b < bins; b += SELECT_THREADS) hist[b] = 0;
    __syncthreads();
    for (int j = tid; j < cols; j += SELECT_THREADS) {
      const unsigned int key = order_key(x[j]);
      if ((key & pmask) == prefix) atomicAdd(&hist[(key >> shift) & (bins - 1)], 1u);
    }
    __syncthreads();
    // Warp 0 finds the bin holding the want-th largest: each lane sums its run of bins from
    // the top, a suffix scan over the lanes, then the lane holding the boundary walks its run.
    if (tid < 32) {
      const unsigned int per = bins / 32;
      const unsigned int hi = bins - (unsigned int)tid * per;  // lane 0: the top run
      unsigned int sum = 0;
      for (unsigned int b = hi - per; b < hi; ++b) sum += hist[b];
      unsigned int incl = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const unsigned int y = __shfl_up_sync(0xffffffff, incl, o, 32);
        if (tid >= o) incl += y;
      }
      const unsigned int before = incl - sum;  // keys in the runs above this lane's
      if (before < (unsigned int)want && (unsigned int)want <= incl) {
        unsigned int run = before;
        for (unsigned int b = hi; b-- > hi - per;) {
          if (run + hist[b] >= (unsigned int)want) {
            s_bin = b;
            s_want = want - (int)run;
            break;
          }
          run += hist[b];
        }
      }
    }
    __syncthreads();
    prefix |= s_bin << shift;
    pmask |= (bins - 1) << shift;
    want = s_want;
    __syncthreads();
  }
  const unsigned int thr = prefix;
  const int take_eq = want;  // keys equal to the threshold to take, lowest index first

  // The winners in index order: each thread a contiguous segment of the row.
  const int seg = (cols + SELECT_THREADS - 1) / SELECT_THREADS;
  const int lo = min(cols, tid * seg), hi = min(cols, lo + seg);
  int gt = 0, eq = 0;
  for (int j = lo; j < hi; ++j) {
    const unsigned int key = order_key(x[j]);
    gt += key > thr;
    eq += key == thr;
  }
  int gt_total, eq_total;
  int gt_at = block_exclusive_scan(gt, scan, &gt_total);
  int eq_at = block_exclusive_scan(eq, scan, &eq_total);
  unsigned int *o = out + (size_t)row * (2 * k + 1);
  for (int j = lo; j < hi; ++j) {
    const float v = x[j];
    const unsigned int key = order_key(v);
    int slot = -1;
    if (key > thr) {
      slot = gt_at++;
    } else if (key == thr) {
      if (eq_at < take_eq) slot = gt_total + eq_at;
      ++eq_at;
    }
    if (slot >= 0) {
      o[slot] = (unsigned int)j;
      o[k + slot] = __float_as_uint(v == v ? v : -INFINITY);
    }
  }
  if (tid == 0) o[2 * k] = __float_as_uint(lse);
}
