#!/usr/bin/env bash
# Session 15, call 5 (final build, after a read of the change): f16 rows read per product group;
# the top-K kernels' reductions as shared helpers; launch bounds on the radix select. selftest with
# the step; exactness on the synthetic pair with the crossover at its new default (16); the 1.5B's
# v(n) and the 8B setting's round once more.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
[ -d $S/dflash-8b ] || $B synth --shape qwen3-8b --dflash --out $S/dflash-8b > /dev/null 2>&1
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf; T8=$S/synth-qwen3-8b.gguf
timeout 150 $B selftest --device cuda -m $T > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; tail -1 $OUT/selftest.txt; grep "wide\|compaction" $OUT/selftest.txt | grep -o "largest error.*\|max error.*\|top token.*"
timeout 60 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 48 \
  --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth.log 2>&1
echo "bench rc=$?"; tail -1 $OUT/bench-synth.log
timeout 60 $B bench --device cuda --wide-verify --costs --target $T --drafter $D --cost-rows 1,16,32,64,128,256,512,1024 > $OUT/costs.md 2>&1
echo "== 1.5B rc=$?"; grep "verify\|decode step (1" $OUT/costs.md | awk -F'|' '{print $3, $5}' | tr '\n' ';'; echo
timeout 120 $B bench --device cuda --wide-verify --costs --target $T8 --drafter $S/dflash-8b --cost-rows 16,32,64,128,256,512,1024 > $OUT/dflash8b.md 2>&1
echo "== 8B + DFlash rc=$?"; grep "DFlash\|round" $OUT/dflash8b.md | awk -F'|' '{print $2, $4, $5}'
