#!/usr/bin/env bash
# Session 16, call 1: where the exact (batch-invariant) verify pass spends its time at many rows:
# v(n) on the quantised kernels, and ncu sums of one pass of 1, 64 and 256 rows (synthetic 1.5B
# after 256 tokens).
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
[ -x $S/treespec ] || (gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec)
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
timeout 90 $B bench --device cuda --costs --target $T --drafter $D --cost-rows 1,8,16,32,64,128,256 > $OUT/costs-q.md 2>&1
echo "== quantised rc=$?"; grep "verify\|decode step (1" $OUT/costs-q.md | awk -F'|' '{print $3, $5}' | tr '\n' ';'; echo
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for r in 1 64 256; do
  TREESPEC_PROFILE_ROWS=$r timeout 150 $NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --log-file $S/ncu-q$r.csv \
    $B bench --device cuda --costs --target $T --drafter $D --cost-rows $r > /dev/null 2>&1
  echo "== ncu $r rows rc=$?"; python3 benchmarks/gpu/run-2026-12-02e/ncusum.py $S/ncu-q$r.csv > $OUT/ncu-q$r.txt 2>&1; head -14 $OUT/ncu-q$r.txt
done
