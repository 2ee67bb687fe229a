#!/usr/bin/env bash
# Session 18, call 1 after staging: the real default pair joined and checked; the kernels'
# selftest; then one run of every mode on the real target with the 0.5B drafter (linear at three
# gammas, tree at three budgets) and the shipped MTP head (mtp k=3), 20 prompts of each bundled
# set, 128 tokens, greedy: tree at its best budget against linear at its best gamma (issue 13).
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
B=$S/treespec
[ -f $S/t.gguf ] || cat $S/p/t.* > $S/t.gguf
[ -f $S/d.gguf ] || cat $S/p/d.* > $S/d.gguf
sha256sum $S/t.gguf $S/d.gguf | cut -c1-16
cp heads/*.gguf $S/ 2>/dev/null
H=$S/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf
timeout 60 $B selftest --device cuda > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; grep "kernels:" $OUT/selftest.txt; tail -1 $OUT/selftest.txt
cd /root
timeout 540 $B bench --device cuda --target $S/t.gguf --drafter $S/d.gguf --head $H --limit ${LIMIT:-20} --max-tokens 128 \
  --modes ${MODES:-ar,linear:4,linear,linear:10,tree,tree:16x8,tree:32x8,mtp:3} --json $OUT/bench-a.json > $OUT/bench-a.log 2>&1
echo "bench rc=$?"
sed -n '/^settings:/,$p' $OUT/bench-a.log | grep -v "^$"
gzip -f $OUT/bench-a.json
