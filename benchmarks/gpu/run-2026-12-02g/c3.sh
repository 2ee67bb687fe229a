#!/usr/bin/env bash
# Session 16, call 3: the staged tensor-core kernel (mmtc_<tag>_staged) checked and timed:
# selftest (every kernel against its CPU reference, staged rows bit for bit the one-row
# kernel's); bench --products (the runtime's kernel beside the other); the exact path's v(n)
# with the staged kernel from 17 rows against without it (TREESPEC_MMTC_STAGED=100000),
# interleaved; exactness of every mode on the synthetic pair.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
timeout 120 $B selftest --device cuda > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; grep -i "tensor-core product\|fail\|differs\|error:" $OUT/selftest.txt | head -12
timeout 120 $B bench --device cuda --products --target $T > $OUT/products.md 2>&1; echo "products rc=$?"; grep "q4_k\|q6_k" $OUT/products.md | awk -F'|' '$4+0>=16' | cut -d'|' -f2,4,7,8
ROWS=1,16,32,64,128,256
for run in old new old2 new2; do
  case $run in old*) X=100000;; *) X=17;; esac
  TREESPEC_MMTC_STAGED=$X timeout 60 $B bench --device cuda --costs --target $T --drafter $D --cost-rows $ROWS > $OUT/costs-$run.md 2>&1
  echo "== $run rc=$?"; grep "verify\|decode step (1" $OUT/costs-$run.md | awk -F'|' '{print $3, $5}' | tr '\n' ';'; echo
done
timeout 90 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 48 \
  --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth.log 2>&1
echo "bench rc=$?"; tail -8 $OUT/bench-synth.log
