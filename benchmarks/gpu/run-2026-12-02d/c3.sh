#!/usr/bin/env bash
# Session 13, call 3: assemble the real pair; one bench run of ar / linear / mtp / trees over the
# drafter and over the MTP head, wide passes on (default, from 32 rows).
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
B=$S/treespec
cd $S/p && ls | head -40 | tr '\n' ' '; echo
[ -f $S/t.gguf ] || cat $S/p/t.* > $S/t.gguf
rm -f $S/d.gguf; cat $S/p/d.* > $S/d.gguf
sha256sum $S/t.gguf $S/d.gguf | cut -c1-16
H=$S/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf
cd /root
L=${LIMIT:-4}
timeout 280 $B bench --device cuda --target $S/t.gguf --drafter $S/d.gguf --head $H --limit $L --max-tokens 128 \
  --modes ${MODES_A:-ar,linear,mtp:3,tree,tree:32x8,tree:64x8} --json $OUT/bench-a.json > $OUT/bench-a.log 2>&1
sed -n '/^settings:/,$p' $OUT/bench-a.log | head -40
timeout 280 $B bench --device cuda --target $S/t.gguf --drafter $H --limit $L --max-tokens 128 \
  --modes ${MODES_B:-ar,mtp:4,tree:8x4,tree:32x4w4,tree:64x4w8,tree:128x6w8} --json $OUT/bench-b.json > $OUT/bench-b.log 2>&1
sed -n '/^settings:/,$p' $OUT/bench-b.log | head -40
