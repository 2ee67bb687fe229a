#!/usr/bin/env bash
# Session 27, call 1: session 26's c4 (the staged Gated DeltaNet recurrence checked and timed),
# then the K-quant tile kernels alone (benchmarks/gpu/mmq-lab) at every tile size for 8-256 rows
# on the 8B's and 27B's largest shapes, and Nsight Compute on the 64-row gate+up tile.
bash benchmarks/gpu/run-2026-12-06d/c4.sh
echo "== lab at ${SECONDS}s"
export PATH=/usr/local/cuda-13.0/bin:$PATH
nvcc -arch=sm_90 -O3 -I kernels -o /tmp/lab benchmarks/gpu/mmq-lab/lab.cu -lcuda 2>&1 | grep -v "^$" | head -5
for shape in "24576 4096 q4_k" "4096 4096 q4_k" "4096 12288 q6_k" "34816 5120 q4_k" "5120 17408 q6_k"; do
  /tmp/lab $shape 8 16 32 64 128 256 2>&1 | tee -a $OUT/lab.md | grep -v "| t1 \|| t2 " 
done
echo "== ncu at ${SECONDS}s"
S=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section SourceCounters)
LAB_ONLY=t8 LAB_REPS=1 timeout 120 ncu --clock-control none "${S[@]}" -k regex:mmq_q4_k_t8 -c 1 /tmp/lab 24576 4096 q4_k 64 > $OUT/ncu-t8-64.txt 2>&1
echo "ncu rc=$?"
LAB_ONLY=v2t8s3w4 LAB_REPS=1 timeout 120 ncu --clock-control none "${S[@]}" -k regex:lab2_q4_k_t8_s3_w4 -c 1 /tmp/lab 24576 4096 q4_k 64 > $OUT/ncu-v2-64.txt 2>&1; for f in $OUT/ncu-*.txt; do echo "-- $f"; grep -i "duration\|Registers Per\|Achieved Occupancy\|Theoretical Occ\|Stall\|Issue Slots Busy\|Bank Conf\|Warp Cycles Per Issued\|No Eligible\|Memory Throughput\|Compute (SM)" $f | head -24; done
