// Wide passes through cuBLAS (src/gpu/wide.rs: a prompt's passes of 32+ rows; verify passes too
// with --wide-verify): the quantised products' Q8_1 activation rows turned into f16 rows, which a
// half-precision GEMM multiplies with an f16 copy of the weights (dequantised once at load).
//
// - q8_1_to_f16: n rows of `qb` Q8_1 blocks (`stride` blocks apart) to n rows of 32 * qb halves:
//   value i of block b is d_b * q_i, rounded to the nearest half (the value the quantised kernels
//   multiply, to f16's 11 bits).
// CPU reference: the selftest in src/gpu/wide.rs (the product of the dequantised weights and
// activations in f64).
#include <cuda_fp16.h>
#include <stdint.h>

extern "C" __global__ void q8_1_to_f16(const uint8_t *__restrict__ q8, int qb, int stride,
                                       half *__restrict__ out, int n) {
  const int row = blockIdx.x;
  const int i = blockIdx.y * blockDim.x + threadIdx.x;  // value within the row
  if (row >= n || i >= qb * 32) return;
  const uint8_t *blk = q8 + ((size_t)row * stride + (i >> 5)) * 36;
  const float d = __half2float(*(const half *)blk);
  const int8_t q = (int8_t)blk[4 + (i & 31)];
  out[(size_t)row * qb * 32 + i] = __float2half_rn(d * (float)q);
}
