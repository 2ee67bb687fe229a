#!/usr/bin/env bash
# Session 15, call 2: the paper's setting piece by piece: a Qwen3-8B-shaped target with a DFlash
# drafter shaped like z-lab's (bench --costs with a DFlash drafter), both verify paths; the new
# build's wide pass of 256 and 1,024 rows under ncu.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
[ -x $S/treespec ] || (gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec)
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
[ -d $S/dflash-8b ] || (time $B synth --shape qwen3-8b --dflash --out $S/dflash-8b) 2>&1 | tail -4
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf; T8=$S/synth-qwen3-8b.gguf
ROWS=2,16,32,64,128,256,512,1024
for f in --wide-verify ""; do
  timeout 150 $B bench --device cuda $f --costs --target $T8 --drafter $S/dflash-8b --cost-rows $ROWS > $OUT/dflash8b$f.md 2>&1
  echo "== 8B + DFlash $f rc=$?"; head -1 $OUT/dflash8b$f.md | cut -c1-400; grep "decode step\|DFlash\|round" $OUT/dflash8b$f.md | awk -F'|' '{print $2, $4, $5}'
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for r in 256 1024; do
  TREESPEC_PROFILE_ROWS=$r timeout 100 $NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --log-file $OUT/ncu-w$r.csv \
    $B bench --device cuda --wide-verify --costs --target $T --drafter $D --cost-rows $r > /dev/null 2>&1
  echo "== ncu $r rows rc=$?"; python3 benchmarks/gpu/run-2026-12-02e/ncusum.py $OUT/ncu-w$r.csv > $OUT/ncu-w$r.txt 2>&1; head -16 $OUT/ncu-w$r.txt
done
