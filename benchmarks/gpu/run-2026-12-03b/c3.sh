#!/usr/bin/env bash
# Session 18, call 3: where the 0.5B drafter's step lost 7% in session 16 (0.88 -> 0.94 ms): the
# session-15 build (69c6cbc, treespec-15) against this one, the drafter step's wall time
# interleaved (bench --costs) and every kernel of 64 eager drafter steps under ncu, both builds.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
for b in treespec treespec-15; do gunzip -c .stage/bin/$b.gz > $S/$b && chmod +x $S/$b; done
B=$S/treespec; A=$S/treespec-15
T=$S/t.gguf; D=$S/d.gguf
if [ ! -f $T ] || [ ! -f $D ]; then
  T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
  [ -f $T ] || $B synth --shape qwen2.5-1.5b --out $T > /dev/null 2>&1
  [ -f $D ] || $B synth --shape qwen2.5-0.5b --out $D > /dev/null 2>&1
fi
echo "target $T drafter $D"
for run in a b a2 b2; do
  case $run in a*) X=$A;; *) X=$B;; esac
  timeout 60 $X bench --device cuda --costs --target $T --drafter $D --cost-rows 1,4 > $OUT/costs-$run.md 2>&1
  echo "== $run rc=$?"; grep "verify\|decode step\|drafter" $OUT/costs-$run.md | awk -F'|' '{print $2, $3, $4}' | tr '\n' ';'; echo
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for run in a b; do
  case $run in a*) X=$A;; *) X=$B;; esac
  TREESPEC_CUDA_GRAPHS=0 timeout 150 $NCU --clock-control none --metrics gpu__time_duration.sum --csv --log-file $S/ncu-$run.csv \
    $X generate --device cuda -m $D -p "Write a Python function that checks whether a number is prime." --max-tokens 64 > /dev/null 2>&1
  echo "== ncu $run rc=$?"; python3 benchmarks/gpu/kernel-times.py $S/ncu-$run.csv 64 > $OUT/ncu-$run.txt 2>&1; head -25 $OUT/ncu-$run.txt
done
