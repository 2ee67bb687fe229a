#!/usr/bin/env bash
# Session 15, call 3: the radix-select top-K (K > 16) against its CPU reference (selftest) and in
# a DDTree round; the DFlash drafter's matrices in bf16; one DFlash pass under ncu; the attention
# combine's loads in one round trip (treespec) against three (treespec-a), interleaved.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
gunzip -c .stage/bin/treespec-a.gz > $S/treespec-a && chmod +x $S/treespec-a
B=$S/treespec; A=$S/treespec-a
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
[ -d $S/dflash-8b ] || $B synth --shape qwen3-8b --dflash --out $S/dflash-8b > /dev/null 2>&1
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf; T8=$S/synth-qwen3-8b.gguf
timeout 100 $B selftest --device cuda > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; tail -1 $OUT/selftest.txt; grep "top-k" $OUT/selftest.txt | tail -5
for run in a b a2 b2; do
  case $run in a*) X=$A;; *) X=$B;; esac
  for p in 256 4096; do
    timeout 60 $X bench --device cuda --wide-verify --costs --target $T --drafter $D --context 8192 --cost-prefix $p --cost-rows 64,256,1024 > $OUT/costs-$run-p$p.md 2>&1
    echo "== $run prefix $p rc=$?"; grep "verify\|decode step (1" $OUT/costs-$run-p$p.md | awk -F'|' '{print $3, $5}' | tr '\n' ';'; echo
  done
done
ROWS=2,16,32,64,128,256,512,1024
for f in --wide-verify ""; do
  timeout 150 $B bench --device cuda $f --costs --target $T8 --drafter $S/dflash-8b --cost-rows $ROWS > $OUT/dflash8b$f.md 2>&1
  echo "== 8B + DFlash $f rc=$?"; grep "decode step\|DFlash\|top-K\|round" $OUT/dflash8b$f.md | awk -F'|' '{print $2, $4, $5}'
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
TREESPEC_PROFILE_DRAFT=1 timeout 120 $NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --log-file $OUT/ncu-draft.csv \
  $B bench --device cuda --costs --target $T8 --drafter $S/dflash-8b --cost-rows 2 > /dev/null 2>&1
echo "== ncu draft rc=$?"; python3 benchmarks/gpu/run-2026-12-02e/ncusum.py $OUT/ncu-draft.csv > $OUT/ncu-draft.txt 2>&1; head -26 $OUT/ncu-draft.txt
