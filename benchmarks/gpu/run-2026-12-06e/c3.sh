#!/usr/bin/env bash
# Session 27, call 3: call 2's selftest stopped at a tile launch whose dynamic and static shared
# memory together passed 48 KiB without the opt-in (fixed); the selftests again with the K-quant
# family (TREESPEC_MMQ=1) on the 0.8B hybrid and the 8B shape; the Gated DeltaNet recurrence
# alone (benchmarks/gpu/gdn-lab) and under Nsight Compute.
source benchmarks/gpu/lib.sh
[ -f $S/q08.gguf ] || $B synth --shape qwen3.5-0.8b --tokenizer-from $S/tok.gguf --out $S/q08.gguf > /dev/null 2>&1 &
[ -f $S/q8b.gguf ] || $B synth --shape qwen3-8b --tokenizer-from $S/tok.gguf --out $S/q8b.gguf > /dev/null 2>&1 &
wait
for m in q08 q8b; do for v in 1; do
  TREESPEC_MMQ=$v timeout 150 $B selftest --device cuda -m $S/$m.gguf > $OUT/selftest-$m-mmq$v.txt 2>&1
  echo "selftest $m mmq=$v rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest-$m-mmq$v.txt | cut -c1-120)"
  grep -i "row pass\|error\|differ" $OUT/selftest-$m-mmq$v.txt | cut -c1-160 | head -4
done; done
grep -i "product q" $OUT/selftest-q08-mmq1.txt | cut -c1-200 | head -8
echo "== gdn lab at ${SECONDS}s"
export PATH=/usr/local/cuda-13.0/bin:$PATH
nvcc -arch=sm_90 -O3 -I kernels -o /tmp/gdnlab benchmarks/gpu/gdn-lab/lab.cu 2>&1 | head -5
for t in "64 binary" "64 star" "64 chain" "1 star"; do /tmp/gdnlab $t | tee -a $OUT/gdnlab.md; done
S2=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section SourceCounters --print-details all)
LAB_ONLY=gdn_recur LAB_REPS=1 timeout 120 ncu --clock-control none "${S2[@]}" -k regex:gdn_recur -c 1 /tmp/gdnlab 64 binary > $OUT/ncu-gdn.txt 2>&1
echo "ncu rc=$?"; grep -i "duration\|Registers Per\|Achieved Occ\|Warp Cycles Per Issued\|No Eligible\|stall_\|Stall" $OUT/ncu-gdn.txt | head -30
