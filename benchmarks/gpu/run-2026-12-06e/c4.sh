#!/usr/bin/env bash
# Not run in session 27: after c3.sh, the K-quant tile lab again (H100 or H200): the family's
# tiles at 4, 6 and 8 warps a block (6: 1.29 waves of the 8B gate+up's 64-row grid instead of
# 1.45) and the variant whose activation sums are made once a launch (meta.cuh, one barrier a
# super-block), 16-256 rows on the 8B's and 27B's largest shapes.
export PATH=/usr/local/cuda-13.0/bin:$PATH
nvcc -arch=sm_90 -O3 -I kernels -o /tmp/lab benchmarks/gpu/mmq-lab/lab.cu -lcuda 2>&1 | head -5
for shape in "24576 4096 q4_k" "4096 12288 q6_k" "34816 5120 q4_k" "5120 17408 q6_k"; do
  LAB_WARPS="4 6 8" timeout 100 /tmp/lab $shape 16 32 64 128 256 >> $OUT/lab.md 2>&1
done
grep -c "NO" $OUT/lab.md; awk -F'|' '$3+0==64' $OUT/lab.md | grep "t4w\|t8w\|meta" | cut -c1-80
