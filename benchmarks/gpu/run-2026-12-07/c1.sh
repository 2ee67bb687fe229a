#!/usr/bin/env bash
# Session 28's first call (carry [".stage/bin/treespec.xz", ".stage/tok"]; the binary has
# `gdn_tree`): the Gated DeltaNet lab, `gdn_tree` (every row of a block once, depth first, saved
# states in shared memory) against `gdn_recur` (every row walks its whole path: 108 registers,
# one block a multiprocessor), bit for bit and timed on the 27B's layer shape; the selftests with
# the K-quant family (session 27's c3: its tiles were never selftested end to end); every mode
# = `ar` on the 27B shape and its passes' costs; then session 27's c4 (the tile lab).
source benchmarks/gpu/lib.sh
export PATH=/usr/local/cuda-13.0/bin:$PATH
nvcc -arch=sm_90 -O3 -I kernels -o /tmp/gdnlab benchmarks/gpu/gdn-lab/lab.cu 2>&1 | head -5
for t in "64 binary" "64 random" "64 star" "64 chain" "16 binary" "8 chain" "1 star"; do
  /tmp/gdnlab $t | tee -a $OUT/gdnlab.md
done
echo "== synth at ${SECONDS}s"
stage_synth q08 q8b q27
wait
for m in q08 q8b; do
  TREESPEC_MMQ=1 timeout 150 $B selftest --device cuda -m $S/$m.gguf > $OUT/selftest-$m-mmq1.txt 2>&1
  echo "selftest $m rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest-$m-mmq1.txt | cut -c1-120)"
  grep -i "row pass\|error\|differ\|gated" $OUT/selftest-$m-mmq1.txt | cut -c1-160 | head -4
done
echo "== 27B at ${SECONDS}s"
timeout 90 $B bench --device cuda --target $S/q27.gguf --drafter $S/q08.gguf --modes ar,linear,tree:16x4,mtp --limit 1 --max-tokens 24 --require-identical > $OUT/identical27.md 2>&1
echo "identical rc=$?"; grep "|" $OUT/identical27.md | head -8
TREESPEC_MMQ=1 timeout 100 $B bench --device cuda --costs --target $S/q27.gguf --drafter $S/q08.gguf --cost-rows 1,4,8,16,64 > $OUT/costs27.md 2>&1
grep "|" $OUT/costs27.md | head -12
TREESPEC_MMQ=1 TREESPEC_PROFILE=1 TREESPEC_CUDA_GRAPHS=0 timeout 60 $B bench --device cuda --costs --target $S/q27.gguf --drafter $S/q08.gguf --cost-rows 1,64 > /dev/null 2> $OUT/profile27.txt
grep "rows: gdn" $OUT/profile27.txt | cut -c1-100
echo "== c4 at ${SECONDS}s"
bash benchmarks/gpu/run-2026-12-06e/c4.sh
