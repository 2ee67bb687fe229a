#!/usr/bin/env bash
# Not run in session 27 (its device time ran out): the next session's first call (carry
# [".stage/bin/treespec.xz", ".stage/tok"], about 4 minutes).
# Call 2's selftest stopped at a tile launch whose dynamic and static shared memory together
# passed 48 KiB without the opt-in (fixed since): the selftests again with the K-quant family
# (TREESPEC_MMQ=1) on the 0.8B hybrid and the 8B shape; the Gated DeltaNet recurrence alone
# (benchmarks/gpu/gdn-lab: gdn_recur as the runtime has it, 108 registers, against lab variants
# of 64 registers and of several target rows a block) and under Nsight Compute; the 27B's 64-row
# pass by stage (call 2: the recurrence 0.561 ms a layer, 46% of the pass).
source benchmarks/gpu/lib.sh
stage_synth q08 q8b q27
wait
for m in q08 q8b; do
  TREESPEC_MMQ=1 timeout 150 $B selftest --device cuda -m $S/$m.gguf > $OUT/selftest-$m-mmq1.txt 2>&1
  echo "selftest $m rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest-$m-mmq1.txt | cut -c1-120)"
  grep -i "row pass\|error\|differ" $OUT/selftest-$m-mmq1.txt | cut -c1-160 | head -4
done
grep -i "product q" $OUT/selftest-q08-mmq1.txt | cut -c1-200 | head -8
echo "== gdn lab at ${SECONDS}s"
export PATH=/usr/local/cuda-13.0/bin:$PATH
nvcc -arch=sm_90 -O3 -I kernels -o /tmp/gdnlab benchmarks/gpu/gdn-lab/lab.cu 2>&1 | head -5
for t in "64 binary" "64 star" "64 chain" "1 star"; do /tmp/gdnlab $t | tee -a $OUT/gdnlab.md; done
S2=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section SourceCounters --print-details all)
LAB_ONLY=gdn_recur LAB_REPS=1 timeout 120 ncu --clock-control none "${S2[@]}" -k regex:gdn_recur -c 1 /tmp/gdnlab 64 binary > $OUT/ncu-gdn.txt 2>&1
echo "ncu rc=$?"; grep -i "duration\|Registers Per\|Achieved Occ\|Warp Cycles Per Issued\|No Eligible\|stall_\|Stall" $OUT/ncu-gdn.txt | head -30
TREESPEC_MMQ=1 TREESPEC_PROFILE=1 TREESPEC_CUDA_GRAPHS=0 timeout 60 $B bench --device cuda --costs --target $S/q27.gguf --drafter $S/q08.gguf --cost-rows 1,64 > /dev/null 2> $OUT/profile27.txt
grep "64 rows: gdn" $OUT/profile27.txt | cut -c1-100
