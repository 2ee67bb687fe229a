#!/usr/bin/env bash
# Session 15, call 4: the DFlash drafter's LM head through the target's f16 copy (one cuBLAS GEMM
# instead of candle's Q6_K kernel four rows at a time): the 8B setting's round again, both verify
# paths, one drafter pass under ncu; selftest with the step; exactness on the synthetic pair.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
[ -d $S/dflash-8b ] || $B synth --shape qwen3-8b --dflash --out $S/dflash-8b > /dev/null 2>&1
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf; T8=$S/synth-qwen3-8b.gguf
ROWS=2,16,32,64,128,256,512,1024
for f in --wide-verify ""; do
  timeout 120 $B bench --device cuda $f --costs --target $T8 --drafter $S/dflash-8b --cost-rows $ROWS > $OUT/dflash8b$f.md 2>&1
  echo "== 8B + DFlash $f rc=$?"; grep "DFlash\|round" $OUT/dflash8b$f.md | awk -F'|' '{print $2, $4, $5}'
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
TREESPEC_PROFILE_DRAFT=1 timeout 100 $NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --log-file $S/ncu-draft.csv \
  $B bench --device cuda --costs --target $T8 --drafter $S/dflash-8b --cost-rows 2 > /dev/null 2>&1
echo "== ncu draft rc=$?"; python3 benchmarks/gpu/run-2026-12-02e/ncusum.py $S/ncu-draft.csv > $OUT/ncu-draft.txt 2>&1; head -12 $OUT/ncu-draft.txt
timeout 150 $B selftest --device cuda -m $T > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; tail -1 $OUT/selftest.txt; grep "wide\|compaction" $OUT/selftest.txt | grep -o "largest error.*\|max error.*\|top token.*"
timeout 60 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 48 \
  --modes ar,linear,tree,tree:32x8 > $OUT/bench-synth.log 2>&1
echo "bench rc=$?"; tail -1 $OUT/bench-synth.log
