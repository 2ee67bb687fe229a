#!/usr/bin/env bash
# Session 13, call 2: wide passes now captured as CUDA graphs up to 64 rows; v(n) at the default
# crossover (32 rows) on the 1.5B and 8B shapes; stage the binary and the head for later calls.
S=/root/stage; mkdir -p $S/p
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
cp .stage/n/*.sh $S/
B=$S/treespec
cp heads/*.gguf $S/
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
D=$S/synth-qwen2.5-0.5b.gguf
ROWS=1,2,4,8,16,24,32,48,64,96,128,256,512,1024
for m in qwen2.5-1.5b qwen3-8b; do
  timeout 150 $B bench --device cuda --costs --target $S/synth-$m.gguf --drafter $D \
    --cost-rows $ROWS --json $OUT/costs-$m-graphs.json > $OUT/costs-$m-graphs.md 2>&1
  echo "== $m default (graphs)"; grep -v "^$" $OUT/costs-$m-graphs.md | head -1; grep "verify\|decode step (1" $OUT/costs-$m-graphs.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
done
