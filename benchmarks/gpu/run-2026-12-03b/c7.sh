#!/usr/bin/env bash
# Session 18, call 7: where chunks of 32, 64 and 128 ranks cross: steps and passes after 1,024 and
# 2,048 tokens of context, and 64 after 4,096.
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
B=$S/treespec; T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
for p in 1024 2048 4096; do for c in 128 64 32; do
  [ $p = 4096 ] && [ $c != 64 ] && continue
  TREESPEC_ATT_CHUNK=$c timeout 30 $B bench --device cuda --costs --context 8192 --cost-prefix $p --target $T --drafter $D --cost-rows 1,16,64 > $OUT/costs-p$p-c$c.md 2>&1
  echo "== p$p c$c rc=$? at ${SECONDS}s"; grep "verify\|decode step (1\|drafter decode" $OUT/costs-p$p-c$c.md | awk -F'|' '{print $3, $4}' | tr '\n' ';'; echo
done; done
