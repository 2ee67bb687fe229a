#!/usr/bin/env bash
# Session 15, call 1: session 14's changes not yet run on a GPU (the calibration with f16 rows,
# store_kv) and this session's wide-pass changes (residual added by the GEMM, gate/up as f16, no
# Q8_1 rows where cuBLAS reads f16 ones) checked: selftest with the step on the synthetic 1.5B;
# v(n) before (treespec-a: HEAD of session 14 + the DFlash costs) and after, in one run; the
# crossover calibrated; exactness on the synthetic pair.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
gunzip -c .stage/bin/treespec-a.gz > $S/treespec-a && chmod +x $S/treespec-a
B=$S/treespec; A=$S/treespec-a
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
timeout 150 $B selftest --device cuda -m $T > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; tail -1 $OUT/selftest.txt; grep "wide\|compaction" $OUT/selftest.txt | grep -o "largest error.*\|max error.*\|top token.*"
ROWS=1,16,32,64,128,256,512,1024
for run in a b a2 b2; do
  case $run in a*) X=$A;; *) X=$B;; esac
  timeout 60 $X bench --device cuda --wide-verify --costs --target $T --drafter $D --cost-rows $ROWS > $OUT/costs-$run.md 2>&1
  echo "== $run rc=$?"; grep "verify\|decode step (1" $OUT/costs-$run.md | awk -F'|' '{print $3, $5}' | tr '\n' ';'; echo
done
timeout 60 $B bench --device cuda --costs --target $T --drafter $D --cost-rows 1,16,32,64,256 > $OUT/costs-q.md 2>&1
echo "== quantised rc=$?"; grep "verify\|decode step (1" $OUT/costs-q.md | awk -F'|' '{print $3, $5}' | tr '\n' ';'; echo
timeout 60 $B bench --device cuda --costs --calibrate --target $T --drafter $D > $OUT/calibrate.md 2>&1; echo "calibrate rc=$?"; tail -9 $OUT/calibrate.md; cat $S/cache/wide-crossover.json | tr -d ' \n' | cut -c1-300; echo
timeout 60 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 48 \
  --modes ar,linear,tree,tree:32x8 > $OUT/bench-synth.log 2>&1
echo "bench rc=$?"; tail -1 $OUT/bench-synth.log
