#!/usr/bin/env bash
# Written in session 18 for the next session's first call (no device time was left to start it):
# chunks by each row's count of keys (TREESPEC_ATT_CHUNK=auto: 32 ranks up to 512 keys, 64 up to
# 1,024, else 128) against 128 for every row (the default): selftest (four ways; trees across
# 512 and 1,024 keys bit for bit one-row passes), v(n) and the drafter's step after 256, 1,024 and
# 4,096 tokens, interleaved; exactness of every mode on the synthetic pair by count. If all pass
# and the steps are as in section 33, make by count the default (CHUNK_DEFAULT in
# src/gpu/attention.rs).
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1 &
done; wait
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf; T8=$S/synth-qwen3-8b.gguf
timeout 30 $B selftest --device cuda > $OUT/selftest.txt 2>&1; echo "selftest rc=$? at ${SECONDS}s"; grep -i "attention \[" $OUT/selftest.txt; tail -1 $OUT/selftest.txt
for p in 256 1024 4096; do for run in auto c128 auto2; do
  case $run in c128) C=;; *) C=auto;; esac
  TREESPEC_ATT_CHUNK=$C timeout 20 $B bench --device cuda --costs --context 8192 --cost-prefix $p --target $T --drafter $D --cost-rows 1,16,64 > $OUT/costs-p$p-$run.md 2>&1
  echo "== p$p $run rc=$? at ${SECONDS}s"; grep "verify\|decode step (1\|drafter decode" $OUT/costs-p$p-$run.md | awk -F'|' '{print $3, $4}' | tr '\n' ';'; echo
done; done
TREESPEC_ATT_CHUNK=auto timeout 30 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 40 --modes ar,linear,tree,tree:32x8 > $OUT/bench-synth.log 2>&1
echo "bench rc=$? at ${SECONDS}s"; tail -1 $OUT/bench-synth.log
