#!/usr/bin/env bash
# Session 18, call 4: call 3's ncu ran past its limit (a whole generate, kernel by kernel). Instead,
# the 0.5B drafter loaded as the target, its 1-row pass inside a profiler range
# (TREESPEC_PROFILE_ROWS=1), the session-15 build against this one: the kernels of one drafter-shaped
# step. The pass's wall time both builds, interleaved.
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
B=$S/treespec; A=$S/treespec-15
D=$S/d.gguf; [ -f $D ] || D=$S/synth-qwen2.5-0.5b.gguf
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for run in a b; do
  case $run in a*) X=$A;; *) X=$B;; esac
  timeout 40 $X bench --device cuda --costs --target $D --drafter $D --cost-rows 1,4 > $OUT/costs-d-$run.md 2>&1
  echo "== $run rc=$?"; grep "verify\|decode step\|drafter decode" $OUT/costs-d-$run.md | awk -F'|' '{print $2, $3, $4}' | tr '\n' ';'; echo
  TREESPEC_PROFILE_ROWS=1 timeout 80 $NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --log-file $S/ncu-d-$run.csv \
    $X bench --device cuda --costs --target $D --drafter $D --cost-rows 1 > /dev/null 2>&1
  echo "== ncu $run rc=$?"; python3 benchmarks/gpu/kernel-times.py $S/ncu-d-$run.csv > $OUT/ncu-d-$run.txt 2>&1; head -16 $OUT/ncu-d-$run.txt
done
