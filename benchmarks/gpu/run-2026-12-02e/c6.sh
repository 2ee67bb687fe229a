#!/usr/bin/env bash
# Session 14, call 6: the wide kernel's masks without a search below the lead; SwiGLU with four
# Q8_1 blocks a warp. Selftest; v(n) with --wide-verify on the 1.5B (after 256 and 4096 tokens)
# and the Qwen3-8B shape (after 256); ncu sections of one wide-attention launch; exactness.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
$B selftest --device cuda -m $T > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; tail -1 $OUT/selftest.txt; grep -c . $OUT/selftest.txt
ROWS=1,2,4,8,16,32,64,128,256,512,1024
for m in qwen2.5-1.5b qwen3-8b; do for p in 256 4096; do
  [ $m = qwen3-8b ] && [ $p = 4096 ] && continue
  for f in "" --wide-verify; do
    timeout 150 $B bench --device cuda $f --costs --context 8192 --cost-prefix $p --target $S/synth-$m.gguf \
      --drafter $D --cost-rows $ROWS > $OUT/costs-$m-p$p$f.md 2>&1
    echo "== $m prefix $p $f"; grep "verify\|decode step (1" $OUT/costs-$m-p$p$f.md | awk -F'|' '{print $3, $5}' | tr '\n' ';'; echo
  done
done; done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for c in "1024 256" "256 4096"; do set -- $c
  TREESPEC_PROFILE_ROWS=$1 timeout 150 $NCU --profile-from-start off --clock-control none -k regex:attention_wide \
    --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    $B bench --device cuda --wide-verify --costs --context 8192 --cost-prefix $2 --target $T --drafter $D --cost-rows $1 > $OUT/ncu-sec-$1-$2.txt 2>&1
  echo "== ncu sections $1 rows prefix $2"; grep -E "Duration|Throughput|Achieved Occupancy|Theoretical Occupancy|Registers|Block Limit|Stall|Warp Cycles|Grid Size|Waves" $OUT/ncu-sec-$1-$2.txt | head -30
done
timeout 200 $B bench --device cuda --target $T --drafter $D --limit 3 --max-tokens 64 \
  --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth.log 2>&1
tail -1 $OUT/bench-synth.log
