#!/usr/bin/env bash
# Session 16, call 8: the final commit (call 7's build with the product launches' arguments set
# in one function): selftest with the step on the synthetic 1.5B, v(n), exactness of every mode.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
timeout 150 $B selftest --device cuda -m $T > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; tail -1 $OUT/selftest.txt
timeout 60 $B bench --device cuda --costs --target $T --drafter $D --cost-rows 1,16,64,256 > $OUT/costs.md 2>&1
echo "== costs rc=$?"; grep "verify\|decode step (1" $OUT/costs.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
timeout 90 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 48 \
  --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth.log 2>&1
echo "bench rc=$?"; tail -1 $OUT/bench-synth.log
