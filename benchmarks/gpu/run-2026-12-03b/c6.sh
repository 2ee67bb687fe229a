#!/usr/bin/env bash
# Session 18, call 6: chunks of 32 ranks against 128 after 4,096 tokens of context (128 chunks a
# row where there were 32: does the combine's longer walk eat the gain?), interleaved.
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
B=$S/treespec; T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
for run in c128 c32 c128b c32b; do
  c=${run#c}; c=${c%b}
  TREESPEC_ATT_CHUNK=$c timeout 40 $B bench --device cuda --costs --context 8192 --cost-prefix 4096 --target $T --drafter $D --cost-rows 1,16,64,256 > $OUT/costs-p4096-$run.md 2>&1
  echo "== $run rc=$? at ${SECONDS}s"; grep "verify\|decode step (1\|drafter decode" $OUT/costs-p4096-$run.md | awk -F'|' '{print $3, $4}' | tr '\n' ';'; echo
done
