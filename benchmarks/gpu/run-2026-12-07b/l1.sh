#!/usr/bin/env bash
# Session 30, lab call (no carry needed): the K-quant tile kernels alone (`mmq-lab`) with this
# session's variants (`fold.cuh`: Q4_K scales folded into the MMA's A operand; `pk.cuh`:
# activations packed once a launch, B fragments by ldmatrix, one barrier a super-block), every
# output against the family's kernel bit for bit; then Nsight Compute (full set, SASS-level stall
# samples) on the family's `t4w8` and the folded one at 64 rows of the 8B gate+up.
nvidia-smi --query-gpu=name --format=csv,noheader
nvcc -arch=sm_90 -O3 -lineinfo -I kernels -o /tmp/lab benchmarks/gpu/mmq-lab/lab.cu -lcuda || exit 1
echo "built at ${SECONDS}s"
LAB_WARPS="4 8" /tmp/lab 24576 4096 q4_k 32 64 128 256 > $OUT/lab-8b-gateup.md 2>&1
LAB_WARPS="4 8" /tmp/lab 34816 5120 q4_k 64 256 > $OUT/lab-27b-gateup.md 2>&1
LAB_WARPS="4 8" /tmp/lab 4096 12288 q6_k 64 256 > $OUT/lab-8b-down.md 2>&1
LAB_WARPS="4 8" /tmp/lab 5120 17408 q6_k 64 > $OUT/lab-27b-down.md 2>&1
echo "lab at ${SECONDS}s"
for f in $OUT/lab-*.md; do echo "== $f"; grep -v "| t1\|| t2\|fold t1\|fold t2" $f | awk -F'|' '$3 ~ /64|256/ {print $3 $4 $6 $9}'; done
for k in "t4w8:mmq_q4_k_t4:family" "fold t4w8:labf_q4_k_t4:fold"; do
  IFS=: read name kern tag <<< "$k"
  LAB_ONLY="$name" LAB_WARPS=8 LAB_REPS=1 timeout 150 ncu --set full --import-source yes --clock-control none \
    -k regex:$kern -c 1 -o /tmp/p-$tag /tmp/lab 24576 4096 q4_k 64 > /tmp/ncu-$tag.log 2>&1
  echo "ncu $tag rc=$? at ${SECONDS}s"; tail -2 /tmp/ncu-$tag.log
  ncu -i /tmp/p-$tag.ncu-rep --page details > $OUT/ncu-$tag.txt 2>&1
  ncu -i /tmp/p-$tag.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > $OUT/ncu-$tag-sass.csv.gz
  grep -i "duration\|registers per\|achieved occupancy\|issued ipc\|no eligible\|warp cycles per issued" $OUT/ncu-$tag.txt | head -8
done
