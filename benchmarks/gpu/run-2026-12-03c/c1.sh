#!/usr/bin/env bash
# Session 19, call 2 (after next.sh and 33 staging calls with run-2026-12-03b/stage.sh): the real
# default pair, every mode that uses the 0.5B drafter or the MTP head, with attention chunks of 128
# for every row (TREESPEC_ATT_CHUNK=128) and by each row's count of keys (auto), interleaved by set
# order: 128, auto, auto, 128. 20 prompts of each bundled set, 128 tokens, greedy.
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
B=$S/treespec
[ -f $S/t.gguf ] || cat $(ls $S/p/t.* | sort -V) > $S/t.gguf
[ -f $S/d.gguf ] || cat $(ls $S/p/d.* | sort -V) > $S/d.gguf
sha256sum $S/t.gguf $S/d.gguf | cut -c1-16
cp heads/*.gguf $S/ 2>/dev/null
H=$S/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf
cd /root
for run in c128 auto auto2 c128b; do
  case $run in c128*) C=128;; *) C=auto;; esac
  TREESPEC_ATT_CHUNK=$C timeout 200 $B bench --device cuda --target $S/t.gguf --drafter $S/d.gguf --head $H --limit ${LIMIT:-20} \
    --max-tokens 128 --modes ${MODES:-ar,linear:4,linear,tree,mtp:3} > $OUT/bench-$run.log 2>&1
  echo "== $run rc=$? at ${SECONDS}s"
  sed -n '/^settings:/,$p' $OUT/bench-$run.log | grep -v "^$" | grep -v "^settings"
done
