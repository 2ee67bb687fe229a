#!/usr/bin/env bash
# Session 13, call 1: selftest (wide products included), synthetic models, v(n) with and
# without the cuBLAS wide products on the 1.5B and Qwen3-8B shapes, attention at a 4096 prefix.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
cp heads/*.gguf $S/ 2>/dev/null; ls heads
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
( time $B selftest --device cuda ) > $OUT/selftest.txt 2>&1; tail -5 $OUT/selftest.txt
grep -i "wide" $OUT/selftest.txt
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
ls -la $S
D=$S/synth-qwen2.5-0.5b.gguf
ROWS=1,2,4,8,16,32,48,64,96,128,192,256,512,1024
for m in qwen2.5-1.5b qwen3-8b; do
  for w in 0 2; do
    TREESPEC_WIDE_ROWS=$w timeout 150 $B bench --device cuda --costs --target $S/synth-$m.gguf --drafter $D \
      --cost-rows $ROWS --json $OUT/costs-$m-w$w.json > $OUT/costs-$m-w$w.md 2>&1
    echo "== $m wide=$w"; grep -v "^$" $OUT/costs-$m-w$w.md | head -3; grep "verify\|decode step (1" $OUT/costs-$m-w$w.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
  done
done
for w in 0 2; do
  TREESPEC_WIDE_ROWS=$w timeout 120 $B bench --device cuda --costs --context 8192 --cost-prefix 4096 \
    --target $S/synth-qwen2.5-1.5b.gguf --drafter $D --cost-rows 1,64,256,1024 > $OUT/costs-p4096-w$w.md 2>&1
  echo "== prefix 4096 wide=$w"; grep "verify\|decode step (1" $OUT/costs-p4096-w$w.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
done
