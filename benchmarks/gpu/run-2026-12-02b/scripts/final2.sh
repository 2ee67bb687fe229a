# The new head: kernels and the head's chain checked; ar, linear and tree (0.5B drafter) and mtp
# (the head beside it) in one bench; the head's trees as the only drafter; mtp without the
# catch-up in the chain's launch.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage; B=$S/treespec; T=$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
D=$S/qwen2.5-coder-0.5b-instruct-awq.gguf; H=$S/head/head.gguf
[ -f .stage/bin/treespec.gz ] && gunzip -c .stage/bin/treespec.gz > $S/treespec.new && chmod +x $S/treespec.new && mv $S/treespec.new $B
$B selftest --device cuda -m $T --head $H > $OUT/selftest.txt 2>&1; tail -2 $OUT/selftest.txt | cut -c1-300
grep -i "mtp\|differ\|error\|tensor-core product" $OUT/selftest.txt | cut -c1-300 | head -12
L=${LIMIT:-8}
$B bench --device cuda --target $T --drafter $D --head $H --limit $L --max-tokens 128 \
  --modes ar,linear,tree,mtp:3@0,mtp:3 > $OUT/all-modes.log 2>&1 || tail -20 $OUT/all-modes.log
sed -n '/^settings:/,$p' $OUT/all-modes.log | grep -v "^| ---\|^$" | cut -c1-175
$B bench --device cuda --target $T --drafter $H --limit $L --max-tokens 128 \
  --modes ar,mtp:4@0,tree:8x4@0,tree:8x4w2@0 > $OUT/head-trees.log 2>&1 || tail -20 $OUT/head-trees.log
sed -n '/^settings:/,$p' $OUT/head-trees.log | grep -v "^| ---\|^$" | cut -c1-175
TREESPEC_MTP_CATCH_UP=0 $B bench --device cuda --target $T --drafter $H --limit $L --max-tokens 128 \
  --modes ar,mtp:3@0 > $OUT/no-catch-up.log 2>&1 || tail -20 $OUT/no-catch-up.log
sed -n '/^settings:/,$p' $OUT/no-catch-up.log | grep -v "^| ---\|^$" | cut -c1-175
