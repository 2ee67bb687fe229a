#!/usr/bin/env bash
# Session 14, call 8 (final build): selftest with the step on the synthetic 1.5B (wide pass,
# compaction); the crossover calibrated and recorded (bench --costs --calibrate), then read back at
# load; v(n) both ways in one run; exactness on the synthetic pair.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
timeout 60 $B selftest --device cuda -m $T > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; tail -1 $OUT/selftest.txt; grep "wide\|compaction" $OUT/selftest.txt | grep -o "max error.*\|top token.*"
timeout 40 $B bench --device cuda --costs --calibrate --target $T --drafter $D > $OUT/calibrate.md 2>&1; echo "calibrate rc=$?"; cat $OUT/calibrate.md; cat $S/cache/wide-crossover.json | head -3
ROWS=1,16,32,64,256,1024
for f in "" --wide-verify; do
  timeout 45 $B bench --device cuda $f --costs --target $T --drafter $D --cost-rows $ROWS > $OUT/costs$f.md 2>&1
  echo "== $f"; head -1 $OUT/costs$f.md | grep -o "cuBLAS.*copies)"; grep "verify\|decode step (1" $OUT/costs$f.md | awk -F'|' '{print $3, $5}' | tr '\n' ';'; echo
done
timeout 60 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 48 \
  --modes ar,linear,tree,tree:32x8 > $OUT/bench-synth.log 2>&1
tail -1 $OUT/bench-synth.log
