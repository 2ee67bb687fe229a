# The new head (Q4_K, as it would ship): its chain checked; ar, linear, tree (0.5B drafter), mtp
# (head beside it) and auto in one bench; auto without the head; the head's trees.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage; B=$S/treespec; T=$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
D=$S/qwen2.5-coder-0.5b-instruct-awq.gguf; H=${H:-$S/h2/head-q4k.gguf}
ls -la $H $D
$B selftest --device cuda -m $T --head $H > $OUT/selftest.txt 2>&1; echo "selftest rc $?"; tail -1 $OUT/selftest.txt | cut -c1-300
grep -i "mtp" $OUT/selftest.txt | cut -c1-300 | head -4
L=${LIMIT:-8}
$B bench --device cuda --target $T --drafter $D --head $H --limit $L --max-tokens 128 \
  --modes ar,linear,tree,mtp:3@0,mtp:3,auto --json $OUT/all-modes.json > $OUT/all-modes.log 2>&1 || tail -20 $OUT/all-modes.log
sed -n '/^settings:/,$p' $OUT/all-modes.log | grep -v "^| ---\|^$" | cut -c1-175
$B bench --device cuda --target $T --drafter $D --head none --limit $L --max-tokens 128 \
  --modes ar,auto > $OUT/auto-no-head.log 2>&1 || tail -20 $OUT/auto-no-head.log
sed -n '/^settings:/,$p' $OUT/auto-no-head.log | grep -v "^| ---\|^$" | cut -c1-175
rm -f /tmp/hq4.*; split -b 15M -d -a 2 $H /tmp/hq4.; cp /tmp/hq4.* $OUT/; sha256sum $H; ls -la $OUT
