#!/usr/bin/env bash
# Session 16, call 5: c4.sh again after the attention kernel stages keys, then values, by cp.async
# (a block per chunk, K/V head and row; a warp per query head; one copy for the group) and the
# staged product kernel (from 33 rows where it fills the GPU): selftest (kernels, then the whole step on the
# synthetic 1.5B against the CPU and its batch invariance); v(n) of HEAD (treespec-a) and this
# build interleaved, quantised path; exactness of every mode on the synthetic pair; ncu sums of
# a 1-row and a 256-row pass.
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
timeout 150 $B selftest --device cuda -m $T > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; grep -i "attention \[\|fail\|differs\|error\|step\|top token" $OUT/selftest.txt | head -14; tail -2 $OUT/selftest.txt
ROWS=1,16,32,64,128,256
for run in a b a2 b2; do
  case $run in a*) X=$A;; *) X=$B;; esac
  timeout 60 $X bench --device cuda --costs --target $T --drafter $D --cost-rows $ROWS > $OUT/costs-$run.md 2>&1
  echo "== $run rc=$?"; grep "verify\|decode step (1" $OUT/costs-$run.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
done
timeout 90 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 48 \
  --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth.log 2>&1
echo "bench rc=$?"; tail -3 $OUT/bench-synth.log
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for r in 1 256; do
  TREESPEC_PROFILE_ROWS=$r timeout 100 $NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --log-file $S/ncu-n$r.csv \
    $B bench --device cuda --costs --target $T --drafter $D --cost-rows $r > /dev/null 2>&1
  echo "== ncu $r rows rc=$?"; python3 benchmarks/gpu/run-2026-12-02e/ncusum.py $S/ncu-n$r.csv > $OUT/ncu-n$r.txt 2>&1; head -12 $OUT/ncu-n$r.txt
done
