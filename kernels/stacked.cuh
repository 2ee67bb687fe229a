// Stacked products: one launch of a product kernel over up to three weight matrices that share
// their input, format and row length, their output rows back to back (kernels/mmvq.cu,
// kernels/mmtc.cu). A single matrix is a stack with row1 = row2 = its row count.
#pragma once

// The weight matrix a launch's row `row` belongs to, when one launch takes up to three
// matrices of the same format and row length stacked (q, k and v; gate and up): rows 0 .. row1
// are vx0's, row1 .. row2 vx1's, row2 .. vx2's; *row0 is where that matrix's rows start.
static __device__ __forceinline__ const void *stacked(const void *vx0, const void *vx1,
                                                      const void *vx2, int row1, int row2,
                                                      int row, int *row0) {
  if (row >= row2) {
    *row0 = row2;
    return vx2;
  }
  if (row >= row1) {
    *row0 = row1;
    return vx1;
  }
  *row0 = 0;
  return vx0;
}
