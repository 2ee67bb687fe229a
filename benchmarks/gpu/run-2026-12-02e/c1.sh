#!/usr/bin/env bash
# Session 14, call 1: selftest of the last session's unrun mends; where a wide verify pass's time
# goes, kernel by kernel (ncu, one pass inside a profiler range: TREESPEC_PROFILE_ROWS).
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
$B selftest --device cuda > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; tail -1 $OUT/selftest.txt
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
prof() { # name rows extra-args...
  local name=$1 rows=$2; shift 2
  TREESPEC_PROFILE_ROWS=$rows timeout 150 $NCU --profile-from-start off --clock-control none \
    --metrics gpu__time_duration.sum --csv --log-file $OUT/ncu-$name.csv \
    $B bench --device cuda --costs --target $T --drafter $D --cost-rows $rows "$@" > $OUT/costs-$name.md 2>&1
  echo "== $name rc=$?"; grep "verify" $OUT/costs-$name.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
  python3 .stage/n/ncusum.py $OUT/ncu-$name.csv | tee $OUT/sum-$name.txt
}
prof q1 1
prof w64 64 --wide-verify
prof w256 256 --wide-verify
prof w256p4k 256 --wide-verify --context 8192 --cost-prefix 4096
