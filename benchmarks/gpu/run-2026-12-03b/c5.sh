#!/usr/bin/env bash
# Session 18, call 5: chunks of 32 or 64 ranks for the batch-invariant attention
# (TREESPEC_ATT_CHUNK; 128 before): more blocks for a one-row step's few hundred keys. Selftest
# (every kernel against its reference, tree rows bit for bit one-row passes) at each size; v(n) and
# the drafter's step on the synthetic 1.5B / 0.5B at 128, 64, 32 interleaved; exactness of every
# mode on the synthetic pair at 32 and 64; the 8B shape if time is left.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1 &
done; wait
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf; T8=$S/synth-qwen3-8b.gguf
echo "synth done at ${SECONDS}s"
for c in 128 64 32; do
  TREESPEC_ATT_CHUNK=$c timeout 40 $B selftest --device cuda > $OUT/selftest-c$c.txt 2>&1; echo "selftest c$c rc=$? at ${SECONDS}s"; grep -i "attention" $OUT/selftest-c$c.txt | head -3; tail -1 $OUT/selftest-c$c.txt
done
ROWS=1,4,16,64,256
for run in c128 c64 c32 c128b c64b c32b; do
  c=${run#c}; c=${c%b}
  TREESPEC_ATT_CHUNK=$c timeout 40 $B bench --device cuda --costs --target $T --drafter $D --cost-rows $ROWS > $OUT/costs-$run.md 2>&1
  echo "== $run rc=$? at ${SECONDS}s"; grep "verify\|decode step (1" $OUT/costs-$run.md | awk -F'|' '{print $3, $4}' | tr '\n' ';'; echo
done
for c in 64 32; do
  TREESPEC_ATT_CHUNK=$c timeout 40 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 40 \
    --modes ar,linear,tree,tree:32x8 > $OUT/bench-synth-c$c.log 2>&1
  echo "bench c$c rc=$? at ${SECONDS}s"; tail -1 $OUT/bench-synth-c$c.log
done
[ $SECONDS -lt 200 ] || exit 0
$B synth --shape qwen3-8b --out $T8 > /dev/null 2>&1
for c in 128 32; do
  [ $SECONDS -lt 280 ] || exit 0
  TREESPEC_ATT_CHUNK=$c timeout 40 $B bench --device cuda --costs --target $T8 --drafter $D --cost-rows 1,64,256 > $OUT/costs8b-c$c.md 2>&1
  echo "== 8B c$c rc=$? at ${SECONDS}s"; grep "verify\|decode step (1" $OUT/costs8b-c$c.md | awk -F'|' '{print $3, $4}' | tr '\n' ';'; echo
done
