#!/usr/bin/env bash
# Session 18, call 2: the shipped MTP head as the only drafter: its chain (mtp, linear
# verification) at k = 2, 3, 4 against trees over the head at depth 4 on the exact path, then the
# same trees with --wide-verify (cuBLAS verify passes, not bit-exact): tree at its best budget
# against the chain at its best k (issue 13, "with the MTP head").
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
B=$S/treespec
H=$S/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf
cd /root
timeout 300 $B bench --device cuda --target $S/t.gguf --drafter $H --limit ${LIMIT:-20} --max-tokens 128 \
  --modes ${MODES:-ar,mtp:2,mtp:3,mtp:4,tree:8x4@0,tree:16x4w4@0,tree:32x4w4@0} --json $OUT/bench-b.json > $OUT/bench-b.log 2>&1
echo "bench b rc=$?"
sed -n '/^settings:/,$p' $OUT/bench-b.log | grep -v "^$"
timeout 260 $B bench --device cuda --wide-verify --target $S/t.gguf --drafter $H --limit ${LIMIT:-20} --max-tokens 128 \
  --modes ${MODES_W:-ar,mtp:3,tree:16x4w4@0,tree:32x4w4@0,tree:64x4w8@0} --json $OUT/bench-c.json > $OUT/bench-c.log 2>&1
echo "bench c rc=$?"
sed -n '/^settings:/,$p' $OUT/bench-c.log | grep -v "^$"
gzip -f $OUT/bench-b.json $OUT/bench-c.json
