#!/usr/bin/env bash
# Call 2 (carry [".stage/bin/treespec.xz", ".stage/tok"]): call 1's selftests stopped at a
# `gdn_tree` launch whose static and dynamic shared memory passed the 48 KiB a launch gets
# unasked (fixed: every tree kernel opts in to 64 KiB dynamic, and 16 columns a block is the
# default, the lab's fastest everywhere). The lab again (a row's q and k now padded in shared
# memory: the four lane parts' reads were four-way bank conflicts); the selftest with the K-quant
# family on the 0.8B hybrid; every mode = `ar` on the 27B shape and its passes' costs; then, as
# time allows, the 8B shape's selftest, the 27B pass by stage, Nsight Compute on gdn_tree16.
source benchmarks/gpu/lib.sh
export PATH=/usr/local/cuda-13.0/bin:$PATH
stage_synth q08
P08=$!
stage_synth q27
P27=$!
nvcc -arch=sm_90 -O3 -I kernels -o /tmp/gdnlab benchmarks/gpu/gdn-lab/lab.cu 2>&1 | head -5
for t in "64 binary" "64 random" "64 chain" "8 chain" "1 star"; do
  LAB_REPS=10 /tmp/gdnlab $t | tee -a $OUT/gdnlab.md
done
wait $P08
TREESPEC_MMQ=1 timeout 100 $B selftest --device cuda -m $S/q08.gguf > $OUT/selftest-q08-mmq1.txt 2>&1
echo "selftest q08 rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest-q08-mmq1.txt | cut -c1-120)"
grep -i "error\|differ\|gated" $OUT/selftest-q08-mmq1.txt | cut -c1-160 | head -4
wait $P27
echo "== 27B at ${SECONDS}s"
timeout 60 $B bench --device cuda --target $S/q27.gguf --drafter $S/q08.gguf --modes ar,linear,tree:16x4,mtp --limit 1 --max-tokens 24 --require-identical > $OUT/identical27.md 2>&1
echo "identical rc=$? at ${SECONDS}s"; grep -i "every mode\|differ\|error" $OUT/identical27.md | head -3
TREESPEC_MMQ=1 timeout 60 $B bench --device cuda --costs --target $S/q27.gguf --drafter $S/q08.gguf --cost-rows 1,8,64 > $OUT/costs27.md 2>&1
grep "verify pass\|decode step" $OUT/costs27.md | cut -c1-110
echo "== more at ${SECONDS}s"
TREESPEC_MMQ=1 TREESPEC_PROFILE=1 TREESPEC_CUDA_GRAPHS=0 timeout 50 $B bench --device cuda --costs --target $S/q27.gguf --drafter $S/q08.gguf --cost-rows 1,64 > /dev/null 2> $OUT/profile27.txt
grep "rows: gdn\|rows: total" $OUT/profile27.txt | cut -c1-100
S2=(--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --print-details all)
LAB_REPS=1 timeout 60 ncu --clock-control none "${S2[@]}" -k regex:gdn_tree16 -c 1 /tmp/gdnlab 64 chain > $OUT/ncu-tree16.txt 2>&1
echo "ncu rc=$?"; grep -i "duration\|Achieved Occ\|Warp Cycles Per Issued\|Issued Ipc\|No Eligible\|Stall" $OUT/ncu-tree16.txt | head -20
